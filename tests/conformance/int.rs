//! `IntTensorOps`: one table entry per method, reached through the public tensor API, on
//! every int dtype. `int_random` is in `random.rs`. Sums, products and bitwise results that
//! leave a narrow dtype wrap, as in the reference.

use burn::tensor::backend::Backend;
use burn::tensor::{s, Bool, DType, ElementConversion, IndexingUpdateOp, Int, Tensor};

use crate::common::*;
use crate::ops;

const UPDATES: [IndexingUpdateOp; 5] = [
    IndexingUpdateOp::Assign,
    IndexingUpdateOp::Add,
    IndexingUpdateOp::Mul,
    IndexingUpdateOp::Min,
    IndexingUpdateOp::Max,
];

ops! {
    // Creation, transfers and conversions.
    unary int_from_into_data(Int, INTS, Role::Lhs) |x| x;
    custom int_zeros_ones_full(INTS) |c| {
        let options = (&c.device, c.dtype);
        (
            Tensor::<B, 2, Int>::zeros([2, 3], options),
            Tensor::<B, 2, Int>::ones([2, 3], options),
            Tensor::<B, 2, Int>::full([2, 3], 7, options),
        )
    };
    custom int_empty(INTS) |c| {
        let empty = Tensor::<B, 3, Int>::empty(SHAPE, (&c.device, c.dtype));
        assert_eq!((empty.dims(), empty.dtype()), (SHAPE, c.dtype), "int_empty");
        empty.slice_assign(s![.., .., ..], c.input::<Int>(SHAPE, Role::Lhs, 0))
    };
    custom int_device_to_device(INTS) |c| {
        let moved = c.input::<Int>(SHAPE, Role::Lhs, 0).to_device(&c.other_device);
        assert_eq!(moved.device(), c.other_device, "int_to_device");
        (moved * 2).to_device(&c.device)
    };
    unary int_into_float(Int, INTS, Role::Lhs) |x| x.float();
    unary int_cast(Int, INTS, Role::Lhs) |x| INTS.map(|to| x.clone().cast(to)).to_vec();
    unary int_repeat_dim(Int, INTS, Role::Lhs) |x| (x.clone().repeat_dim(0, 2), x.repeat_dim(2, 3));
    custom int_arange(INTS) |c| {
        let options = (&c.device, c.dtype);
        (
            Tensor::<B, 1, Int>::arange(2..9, options),
            Tensor::<B, 1, Int>::arange_step(1..12, 3, options),
        )
    };

    // Arithmetic.
    binary int_add(Int, INTS, [Role::Lhs, Role::Rhs]) |a, b| a + b;
    binary int_sub(Int, INTS, [Role::Lhs, Role::Rhs]) |a, b| a - b;
    binary int_mul(Int, INTS, [Role::Lhs, Role::Rhs]) |a, b| a * b;
    /// Truncates toward zero.
    binary int_div(Int, INTS, [Role::Lhs, Role::Rhs]) |a, b| a / b;
    /// Python-style: the result has the sign of the divisor.
    binary int_remainder(Int, INTS, [Role::Lhs, Role::Rhs]) |a, b| a.remainder(b);
    /// Through the default `int_powi`, this also reaches `float_powi`.
    binary int_powi(Int, INTS, [Role::Small, Role::Shift]) |a, b| a.powi(b);
    unary int_add_scalar(Int, INTS, Role::Lhs) |x| x + 3;
    unary int_sub_scalar(Int, INTS, Role::Lhs) |x| x - 2;
    unary int_mul_scalar(Int, INTS, Role::Lhs) |x| x * 3;
    unary int_div_scalar(Int, INTS, Role::Lhs) |x| (x.clone() / 3, x / 5);
    unary int_remainder_scalar(Int, INTS, Role::Lhs) |x| {
        if x.dtype() == DType::U8 {
            (x.clone().remainder_scalar(3), x.remainder_scalar(5))
        } else {
            (x.clone().remainder_scalar(3), x.remainder_scalar(-4))
        }
    };
    /// Exponents 0, 1 and 2 take the shortcuts of the default `int_powi_scalar`.
    unary int_powi_scalar(Int, INTS, Role::Lhs) |x| {
        [0, 1, 2].map(|e| x.clone().powi_scalar(e)).to_vec()
    };
    unary int_powi_scalar_impl(Int, INTS, Role::Small) |x| x.powi_scalar(3);
    unary int_clamp_min(Int, INTS, Role::Lhs) |x| x.clamp_min(9);
    unary int_clamp_max(Int, INTS, Role::Lhs) |x| x.clamp_max(12);
    unary int_clamp(Int, INTS, Role::Lhs) |x| x.clamp(9, 12);
    unary int_neg(Int, INTS, Role::Lhs) |x| -x;
    unary int_abs(Int, INTS, Role::Lhs) |x| x.abs();
    unary int_sign(Int, INTS, Role::Lhs) |x| x.sign();
    /// burn-flex has no matmul for I16, I8 and U8: the reference is the exact I64 product.
    custom int_matmul(INTS) |c| {
        let a = c.input::<Int>(SHAPE, Role::Small, 0);
        let b = c.dense::<Int, 3>([1, 4, 5], Role::Small, 7);
        let square = a.clone().swap_dims(1, 2);
        if c.is_reference() && matches!(c.dtype, DType::I16 | DType::I8 | DType::U8) {
            let wide = |t: Tensor<B, 3, Int>| t.cast(DType::I64);
            (
                wide(a.clone()).matmul(wide(b)).cast(c.dtype),
                wide(square).matmul(wide(a)).cast(c.dtype),
            )
        } else {
            (a.clone().matmul(b), square.matmul(a))
        }
    };

    // Bitwise ops (two's complement for negative values).
    binary int_bitwise_and(Int, INTS, [Role::Lhs, Role::Rhs]) |a, b| a.bitwise_and(b);
    binary int_bitwise_or(Int, INTS, [Role::Lhs, Role::Rhs]) |a, b| a.bitwise_or(b);
    binary int_bitwise_xor(Int, INTS, [Role::Lhs, Role::Rhs]) |a, b| a.bitwise_xor(b);
    unary int_bitwise_not(Int, INTS, Role::Lhs) |x| x.bitwise_not();
    unary int_bitwise_and_scalar(Int, INTS, Role::Lhs) |x| x.bitwise_and_scalar(6.elem());
    unary int_bitwise_or_scalar(Int, INTS, Role::Lhs) |x| x.bitwise_or_scalar(6.elem());
    unary int_bitwise_xor_scalar(Int, INTS, Role::Lhs) |x| x.bitwise_xor_scalar(6.elem());
    binary int_bitwise_left_shift(Int, INTS, [Role::Lhs, Role::Shift]) |a, b| {
        a.bitwise_left_shift(b)
    };
    /// Arithmetic shift: negative values stay negative.
    binary int_bitwise_right_shift(Int, INTS, [Role::Lhs, Role::Shift]) |a, b| {
        a.bitwise_right_shift(b)
    };
    unary int_bitwise_left_shift_scalar(Int, INTS, Role::Lhs) |x| {
        x.bitwise_left_shift_scalar(2.elem())
    };
    unary int_bitwise_right_shift_scalar(Int, INTS, Role::Lhs) |x| {
        x.bitwise_right_shift_scalar(2.elem())
    };

    // Views and copies.
    unary int_transpose(Int, INTS, Role::Lhs) |x| x.transpose();
    unary int_swap_dims(Int, INTS, Role::Lhs) |x| x.swap_dims(0, 2);
    unary int_permute(Int, INTS, Role::Lhs) |x| x.permute([2, 0, 1]);
    unary int_flip(Int, INTS, Role::Lhs) |x| (x.clone().flip([1]), x.flip([0, 1, 2]));
    /// Not empty: Burn's reshape reads a 0 in the target shape as "keep this dim".
    nonempty int_reshape(Int, INTS, Role::Lhs) |x| {
        let [a, b, d] = x.dims();
        x.reshape([b, a * d])
    };
    /// A `Shape`, not an array: in an array Burn rejects a 0 in the target shape.
    unary int_expand(Int, INTS, Role::Lhs) |x| {
        let [a, b, d] = x.dims();
        (
            x.clone().narrow(0, 0, 1).expand::<3, _>(burn::tensor::Shape::new([3, b, d])),
            x.expand::<4, _>(burn::tensor::Shape::new([2, a, b, d])),
        )
    };
    unary int_slice(Int, INTS, Role::Lhs) |x| {
        (x.clone().slice(s![.., 0..;2, 1..]), x.slice(s![..;-1, .., ..;-2]))
    };
    custom int_slice_assign(INTS) |c| {
        let x = c.input::<Int>(SHAPE, Role::Lhs, 0);
        let v = c.dense::<Int, 3>([2, 2, 2], Role::Rhs, 3);
        (
            x.clone().slice_assign(s![.., 1.., 0..;2], v.clone()),
            x.slice_assign(s![..;-1, 0..2, 2..], v),
        )
    };
    custom int_cat(INTS) |c| {
        let a = c.input::<Int>(SHAPE, Role::Lhs, 0);
        let b = c.dense::<Int, 3>([2, 3, 1], Role::Rhs, 1);
        let none = c.dense::<Int, 3>([2, 3, 0], Role::Rhs, 1);
        (
            Tensor::cat(vec![a.clone(), b, a.clone()], 2),
            Tensor::cat(vec![a.clone(), a.clone()], 0),
            Tensor::cat(vec![none, a], 2),
        )
    };
    custom int_unfold(INTS) |c| {
        let x = c.input::<Int>(SHAPE, Role::Lhs, 0);
        (x.clone().unfold::<4, _>(2, 2, 1), x.unfold::<4, _>(1, 2, 2))
    };

    // Indexing.
    custom int_gather(INTS) |c| {
        let x = c.input::<Int>(SHAPE, Role::Lhs, 0);
        (x.clone().gather(1, c.indices([2, 5, 4], 3, 0)), x.gather(2, c.indices([2, 3, 2], 4, 1)))
    };
    /// Repeated indices accumulate.
    custom int_scatter_add(INTS) |c| {
        let x = c.input::<Int>(SHAPE, Role::Lhs, 0);
        let values = c.dense::<Int, 3>([2, 2, 4], Role::Rhs, 3);
        x.scatter(1, c.indices([2, 2, 4], 3, 0), values, IndexingUpdateOp::Add)
    };
    custom int_scatter_nd(INTS) |c| {
        let x = c.input::<Int>(SHAPE, Role::Lhs, 0);
        let points = c.index_list(&[0, 1, 1, 2, 0, 0], [3, 2]);
        let values = c.dense::<Int, 2>([3, 4], Role::Rhs, 2);
        let rows = c.index_list(&[1], [1, 1]);
        let row_values = c.dense::<Int, 3>([1, 3, 4], Role::Rhs, 4);
        let mut out: Vec<_> = UPDATES
            .map(|op| x.clone().scatter_nd(points.clone(), values.clone(), op))
            .to_vec();
        out.push(x.scatter_nd(rows, row_values, IndexingUpdateOp::Assign));
        out
    };
    custom int_gather_nd(INTS) |c| {
        let x = c.input::<Int>(SHAPE, Role::Lhs, 0);
        let points = c.index_list(&[0, 1, 1, 2, 0, 0], [3, 2]);
        let points: Tensor<B, 2, Int> = x.clone().gather_nd(points);
        let rows: Tensor<B, 4, Int> = x.gather_nd(c.index_list(&[1, 0, 1, 1], [2, 2, 1]));
        (points, rows)
    };
    custom int_select(INTS) |c| {
        let x = c.input::<Int>(SHAPE, Role::Lhs, 0);
        (x.clone().select(1, c.indices([5], 3, 0)), x.select(2, c.index_list(&[3, 0, 3], [3])))
    };
    /// Repeated indices accumulate.
    custom int_select_add(INTS) |c| {
        let x = c.input::<Int>(SHAPE, Role::Lhs, 0);
        let values = c.dense::<Int, 3>([2, 4, 4], Role::Rhs, 3);
        x.select_assign(1, c.index_list(&[2, 0, 2, 1], [4]), values, IndexingUpdateOp::Add)
    };
    custom int_mask_where(INTS) |c| {
        let x = c.input::<Int>(SHAPE, Role::Lhs, 0);
        let y = c.dense::<Int, 3>(SHAPE, Role::Rhs, 3);
        let strided_mask = c.input_of::<Bool>(BOOL, SHAPE, Role::Lhs, 2);
        (x.clone().mask_where(c.mask(SHAPE, 1), y.clone()), y.mask_where(strided_mask, x))
    };
    custom int_mask_fill(INTS) |c| {
        let x = c.input::<Int>(SHAPE, Role::Lhs, 0);
        let strided_mask = c.input_of::<Bool>(BOOL, SHAPE, Role::Lhs, 2);
        (x.clone().mask_fill(c.mask(SHAPE, 1), 5), x.mask_fill(strided_mask, 9))
    };

    // Comparisons (the operands share values, so equality happens).
    binary int_equal(Int, INTS, [Role::Ties, Role::Ties]) |a, b| a.equal(b);
    binary int_not_equal(Int, INTS, [Role::Ties, Role::Ties]) |a, b| a.not_equal(b);
    binary int_greater(Int, INTS, [Role::Ties, Role::Ties]) |a, b| a.greater(b);
    binary int_greater_equal(Int, INTS, [Role::Ties, Role::Ties]) |a, b| a.greater_equal(b);
    binary int_lower(Int, INTS, [Role::Ties, Role::Ties]) |a, b| a.lower(b);
    binary int_lower_equal(Int, INTS, [Role::Ties, Role::Ties]) |a, b| a.lower_equal(b);
    unary int_equal_elem(Int, INTS, Role::Ties) |x| x.equal_elem(1);
    unary int_not_equal_elem(Int, INTS, Role::Ties) |x| x.not_equal_elem(1);
    unary int_greater_elem(Int, INTS, Role::Ties) |x| x.greater_elem(0);
    unary int_greater_equal_elem(Int, INTS, Role::Ties) |x| x.greater_equal_elem(1);
    unary int_lower_elem(Int, INTS, Role::Ties) |x| x.lower_elem(1);
    unary int_lower_equal_elem(Int, INTS, Role::Ties) |x| x.lower_equal_elem(0);

    // Reductions.
    unary int_sum(Int, INTS, Role::Lhs) |x| x.sum();
    unary int_sum_dim(Int, INTS, Role::Lhs) |x| {
        (x.clone().sum_dim(0), x.clone().sum_dim(1), x.sum_dim(2))
    };
    unary int_prod(Int, INTS, Role::Signs) |x| x.prod();
    unary int_prod_dim(Int, INTS, Role::Signs) |x| (x.clone().prod_dim(1), x.prod_dim(2));
    /// The wrapped sum divided by the count, truncated (Burn's default; burn-flex has no U8
    /// mean, so its reference is that composition).
    nonempty int_mean(Int, INTS, Role::Lhs) |x| {
        if is_reference::<B>() && x.dtype() == DType::U8 {
            let n = x.shape().num_elements() as i64;
            x.sum() / n
        } else {
            x.mean()
        }
    };
    /// Truncates. Not along the empty dim of the empty layout (the mean of nothing).
    unary int_mean_dim(Int, INTS, Role::Lhs) |x| (x.clone().mean_dim(0), x.mean_dim(2));
    unary int_cumsum(Int, INTS, Role::Lhs) |x| (x.clone().cumsum(1), x.cumsum(2));
    unary int_cumprod(Int, INTS, Role::Signs) |x| (x.clone().cumprod(1), x.cumprod(2));
    unary int_cummin(Int, INTS, Role::Lhs) |x| (x.clone().cummin(1), x.cummin(2));
    unary int_cummax(Int, INTS, Role::Lhs) |x| (x.clone().cummax(1), x.cummax(2));
    /// Ties: the first index wins.
    nonempty int_argmax(Int, INTS, Role::Ties) |x| {
        let x = u8_as_i16_on_reference(x);
        (x.clone().argmax(0), x.clone().argmax(1), x.argmax(2))
    };
    /// Ties: the first index wins.
    nonempty int_argmin(Int, INTS, Role::Ties) |x| {
        let x = u8_as_i16_on_reference(x);
        (x.clone().argmin(0), x.clone().argmin(1), x.argmin(2))
    };
    nonempty int_max(Int, INTS, Role::Lhs) |x| x.max();
    nonempty int_max_dim(Int, INTS, Role::Lhs) |x| (x.clone().max_dim(1), x.max_dim(2));
    nonempty int_max_dim_with_indices(Int, INTS, Role::Ties) |x| {
        (x.clone().max_dim_with_indices(1), x.max_dim_with_indices(2))
    };
    nonempty int_min(Int, INTS, Role::Lhs) |x| x.min();
    nonempty int_min_dim(Int, INTS, Role::Lhs) |x| (x.clone().min_dim(1), x.min_dim(2));
    nonempty int_min_dim_with_indices(Int, INTS, Role::Ties) |x| {
        (x.clone().min_dim_with_indices(1), x.min_dim_with_indices(2))
    };
    nonempty int_max_abs(Int, INTS, Role::Lhs) |x| x.max_abs();
    nonempty int_max_abs_dim(Int, INTS, Role::Lhs) |x| (x.clone().max_abs_dim(1), x.max_abs_dim(2));
    unary int_any(Int, INTS, Role::Ties) |x| (x.clone().any(), x.zeros_like().any());
    unary int_any_dim(Int, INTS, Role::Ties) |x| {
        if is_reference::<B>() && x.shape().num_elements() == 0 {
            (any_dim_by_count(x.clone(), 1), any_dim_by_count(x, 2))
        } else {
            (x.clone().any_dim(1), x.any_dim(2))
        }
    };
    unary int_all(Int, INTS, Role::Ties) |x| (x.clone().all(), x.ones_like().all());
    unary int_all_dim(Int, INTS, Role::Ties) |x| {
        if is_reference::<B>() && x.shape().num_elements() == 0 {
            (all_dim_by_count(x.clone(), 1), all_dim_by_count(x, 2))
        } else {
            (x.clone().all_dim(1), x.all_dim(2))
        }
    };

    // Sorting: values may tie; indices are compared only where values are distinct (Burn's
    // sort is unstable), except argtopk whose contract orders ties by lowest index.
    unary int_sort(Int, INTS, Role::Ties) |x| {
        (x.clone().sort(2), x.clone().sort_descending(1), x.sort(0))
    };
    unary int_sort_with_indices(Int, INTS, Role::Distinct) |x| {
        (x.clone().sort_with_indices(2), x.sort_descending_with_indices(0))
    };
    unary int_argsort(Int, INTS, Role::Distinct) |x| {
        (x.clone().argsort(2), x.argsort_descending(0))
    };
    custom int_topk(INTS) |c| {
        let x = c.input::<Int>(SHAPE, Role::Ties, 0);
        (x.clone().topk(2, 2), x.topk(1, 1))
    };
    /// burn-flex leaves argtopk unimplemented: the reference is a stable argsort.
    custom int_argtopk(INTS) |c| {
        let x = c.input::<Int>(SHAPE, Role::Ties, 0);
        if c.is_reference() {
            (stable_int_argtopk(x.clone(), 2, 2), stable_int_argtopk(x, 1, 2))
        } else {
            (x.clone().argtopk(2, 2), x.argtopk(2, 1))
        }
    };
}

/// burn-flex has no U8 argmax or argmin: the reference runs them on I16, which holds every U8
/// value.
fn u8_as_i16_on_reference<B: Backend>(x: Tensor<B, 3, Int>) -> Tensor<B, 3, Int> {
    if is_reference::<B>() && x.dtype() == DType::U8 {
        x.cast(DType::I16)
    } else {
        x
    }
}
