//! Tensors larger than one allocator size class (above 1 MiB: a [300, 1024] f32 tensor is
//! 1.2 MB) through a few representative ops, in every view.

use burn::tensor::{DType, Float, Int, Tensor};

use crate::common::*;
use crate::ops;

const LARGE: [usize; 3] = [1, 300, 1024];

ops! {
    custom large_float_add([DType::F32]) |c| {
        let a = c.input::<Float>(LARGE, Role::Lhs, 0);
        let b = c.dense::<Float, 3>(LARGE, Role::Rhs, 1);
        let row = c.dense::<Float, 3>([1, 1, 1024], Role::Rhs, 2);
        (a.clone() + b, a + row)
    };
    custom large_float_sum_dim([DType::F32]) |c| {
        let x = c.input::<Float>(LARGE, Role::Lhs, 0);
        (x.clone().sum_dim(1), x.sum_dim(2))
    };
    custom large_float_matmul([DType::F32]) |c| {
        let a = c.input::<Float>(LARGE, Role::Small, 0);
        a.matmul(c.dense::<Float, 3>([1, 1024, 16], Role::Small, 3))
    };
    custom large_float_cat([DType::F32]) |c| {
        let a = c.input::<Float>(LARGE, Role::Lhs, 0);
        let b = c.dense::<Float, 3>(LARGE, Role::Rhs, 1);
        (Tensor::cat(vec![a.clone(), b.clone()], 1), Tensor::cat(vec![b, a], 2))
    };
    custom large_float_gather([DType::F32]) |c| {
        let x = c.input::<Float>(LARGE, Role::Lhs, 0);
        x.gather(2, c.indices(LARGE, 1024, 5))
    };
    custom large_int_add_cat([DType::I32, DType::I64]) |c| {
        let a = c.input::<Int>(LARGE, Role::Lhs, 0);
        let b = c.dense::<Int, 3>(LARGE, Role::Rhs, 1);
        (a.clone() + b.clone(), Tensor::cat(vec![a, b], 1))
    };
}
