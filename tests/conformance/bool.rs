//! `BoolTensorOps`: one table entry per method, reached through the public tensor API, on the
//! native bool dtype.

use burn::tensor::{s, Bool, IndexingUpdateOp, Tensor};

use crate::common::*;
use crate::ops;

ops! {
    // Creation, transfers and conversions.
    unary bool_from_into_data(Bool, BOOLS, Role::Lhs) |x| x;
    custom bool_zeros_ones(BOOLS) |c| {
        let options = (&c.device, c.dtype);
        (Tensor::<B, 2, Bool>::zeros([2, 3], options), Tensor::<B, 2, Bool>::ones([2, 3], options))
    };
    custom bool_empty(BOOLS) |c| {
        let empty = Tensor::<B, 3, Bool>::empty(SHAPE, (&c.device, c.dtype));
        assert_eq!((empty.dims(), empty.dtype()), (SHAPE, c.dtype), "bool_empty");
        empty.slice_assign(s![.., .., ..], c.input::<Bool>(SHAPE, Role::Lhs, 0))
    };
    custom bool_device_to_device(BOOLS) |c| {
        let moved = c.input::<Bool>(SHAPE, Role::Lhs, 0).to_device(&c.other_device);
        assert_eq!(moved.device(), c.other_device, "bool_to_device");
        moved.bool_not().to_device(&c.device)
    };
    unary bool_into_int(Bool, BOOLS, Role::Lhs) |x| x.int();
    unary bool_into_float(Bool, BOOLS, Role::Lhs) |x| x.float();
    unary bool_repeat_dim(Bool, BOOLS, Role::Lhs) |x| {
        (x.clone().repeat_dim(0, 2), x.repeat_dim(2, 3))
    };

    // Logic.
    unary bool_not(Bool, BOOLS, Role::Lhs) |x| x.bool_not();
    binary bool_and(Bool, BOOLS, [Role::Lhs, Role::Lhs]) |a, b| a.bool_and(b);
    binary bool_or(Bool, BOOLS, [Role::Lhs, Role::Lhs]) |a, b| a.bool_or(b);
    binary bool_xor(Bool, BOOLS, [Role::Lhs, Role::Lhs]) |a, b| a.bool_xor(b);
    binary bool_equal(Bool, BOOLS, [Role::Lhs, Role::Lhs]) |a, b| a.equal(b);
    binary bool_not_equal(Bool, BOOLS, [Role::Lhs, Role::Lhs]) |a, b| a.not_equal(b);
    unary bool_equal_elem(Bool, BOOLS, Role::Lhs) |x| {
        (x.clone().equal_elem(true), x.equal_elem(false))
    };
    unary bool_not_equal_elem(Bool, BOOLS, Role::Lhs) |x| {
        (x.clone().not_equal_elem(true), x.not_equal_elem(false))
    };
    unary bool_any(Bool, BOOLS, Role::Lhs) |x| {
        (x.clone().any(), x.clone().bool_and(x.bool_not()).any())
    };
    unary bool_any_dim(Bool, BOOLS, Role::Lhs) |x| {
        if is_reference::<B>() && x.shape().num_elements() == 0 {
            (any_dim_by_count(x.clone(), 1), any_dim_by_count(x, 2))
        } else {
            (x.clone().any_dim(1), x.any_dim(2))
        }
    };
    unary bool_all(Bool, BOOLS, Role::Lhs) |x| {
        (x.clone().all(), x.clone().bool_or(x.bool_not()).all())
    };
    unary bool_all_dim(Bool, BOOLS, Role::Lhs) |x| {
        if is_reference::<B>() && x.shape().num_elements() == 0 {
            (all_dim_by_count(x.clone(), 1), all_dim_by_count(x, 2))
        } else {
            (x.clone().all_dim(1), x.all_dim(2))
        }
    };
    /// Data-dependent output shapes: the coordinates of the true values, in row-major order.
    unary bool_argwhere(Bool, BOOLS, Role::Lhs) |x| (x.clone().argwhere(), x.nonzero());

    // Views and copies.
    unary bool_transpose(Bool, BOOLS, Role::Lhs) |x| x.transpose();
    unary bool_swap_dims(Bool, BOOLS, Role::Lhs) |x| x.swap_dims(0, 2);
    unary bool_permute(Bool, BOOLS, Role::Lhs) |x| x.permute([2, 0, 1]);
    unary bool_flip(Bool, BOOLS, Role::Lhs) |x| (x.clone().flip([1]), x.flip([0, 1, 2]));
    /// Not empty: Burn's reshape reads a 0 in the target shape as "keep this dim".
    nonempty bool_reshape(Bool, BOOLS, Role::Lhs) |x| {
        let [a, b, d] = x.dims();
        x.reshape([b, a * d])
    };
    /// A `Shape`, not an array: in an array Burn rejects a 0 in the target shape.
    unary bool_expand(Bool, BOOLS, Role::Lhs) |x| {
        let [a, b, d] = x.dims();
        (
            x.clone().narrow(0, 0, 1).expand::<3, _>(burn::tensor::Shape::new([3, b, d])),
            x.expand::<4, _>(burn::tensor::Shape::new([2, a, b, d])),
        )
    };
    unary bool_slice(Bool, BOOLS, Role::Lhs) |x| {
        (x.clone().slice(s![.., 0..;2, 1..]), x.slice(s![..;-1, .., ..;-2]))
    };
    custom bool_slice_assign(BOOLS) |c| {
        let x = c.input::<Bool>(SHAPE, Role::Lhs, 0);
        let v = c.mask([2, 2, 2], 3);
        (
            x.clone().slice_assign(s![.., 1.., 0..;2], v.clone()),
            x.slice_assign(s![..;-1, 0..2, 2..], v),
        )
    };
    custom bool_cat(BOOLS) |c| {
        let a = c.input::<Bool>(SHAPE, Role::Lhs, 0);
        let b = c.mask([2, 3, 1], 1);
        let none = c.mask([2, 3, 0], 1);
        (
            Tensor::cat(vec![a.clone(), b, a.clone()], 2),
            Tensor::cat(vec![a.clone(), a.clone()], 0),
            Tensor::cat(vec![none, a], 2),
        )
    };
    custom bool_unfold(BOOLS) |c| {
        let x = c.input::<Bool>(SHAPE, Role::Lhs, 0);
        (x.clone().unfold::<4, _>(2, 2, 1), x.unfold::<4, _>(1, 2, 2))
    };

    // Indexing.
    /// burn-flex's bool gather returns a U8 tensor: its reference gathers the ints.
    custom bool_gather(BOOLS) |c| {
        let x = c.input::<Bool>(SHAPE, Role::Lhs, 0);
        let (rows, columns) = (c.indices([2, 5, 4], 3, 0), c.indices([2, 3, 2], 4, 1));
        if c.is_reference() {
            let x = x.int();
            (x.clone().gather(1, rows).bool(), x.gather(2, columns).bool())
        } else {
            (x.clone().gather(1, rows), x.gather(2, columns))
        }
    };
    /// Scatter with `Add` is a logical or; repeated indices accumulate.
    custom bool_scatter_or(BOOLS) |c| {
        let x = c.input::<Bool>(SHAPE, Role::Lhs, 0);
        x.scatter(1, c.indices([2, 2, 4], 3, 0), c.mask([2, 2, 4], 3), IndexingUpdateOp::Add)
    };
    /// burn-flex's bool select returns a U8 tensor: its reference selects the ints.
    custom bool_select(BOOLS) |c| {
        let x = c.input::<Bool>(SHAPE, Role::Lhs, 0);
        let (rows, columns) = (c.indices([5], 3, 0), c.index_list(&[3, 0, 3], [3]));
        if c.is_reference() {
            let x = x.int();
            (x.clone().select(1, rows).bool(), x.select(2, columns).bool())
        } else {
            (x.clone().select(1, rows), x.select(2, columns))
        }
    };
    /// Select-assign with `Add` is a logical or; repeated indices accumulate. burn-flex's
    /// returns a U8 tensor: its reference adds the ints.
    custom bool_select_or(BOOLS) |c| {
        let x = c.input::<Bool>(SHAPE, Role::Lhs, 0);
        let values = c.mask([2, 4, 4], 3);
        let indices = c.index_list(&[2, 0, 2, 1], [4]);
        if c.is_reference() {
            let sums = x.int().select_assign(1, indices, values.int(), IndexingUpdateOp::Add);
            sums.bool()
        } else {
            x.select_assign(1, indices, values, IndexingUpdateOp::Add)
        }
    };
    custom bool_mask_where(BOOLS) |c| {
        let x = c.input::<Bool>(SHAPE, Role::Lhs, 0);
        let y = c.mask(SHAPE, 3);
        let strided_mask = c.input::<Bool>(SHAPE, Role::Lhs, 2);
        (x.clone().mask_where(c.mask(SHAPE, 1), y.clone()), y.mask_where(strided_mask, x))
    };
    custom bool_mask_fill(BOOLS) |c| {
        let x = c.input::<Bool>(SHAPE, Role::Lhs, 0);
        let strided_mask = c.input::<Bool>(SHAPE, Role::Lhs, 2);
        (x.clone().mask_fill(c.mask(SHAPE, 1), true), x.mask_fill(strided_mask, false))
    };
}
