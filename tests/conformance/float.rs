//! `FloatTensorOps`: one table entry per method, reached through the public tensor API, on
//! every float dtype. `float_random` is in `random.rs`; `float_powi` (float base, int
//! exponent) is only reached through `int_powi`'s default, in `int.rs`.

use burn::tensor::ops::{GridSampleOptions, GridSamplePaddingMode, InterpolateMode};
use burn::tensor::{s, Bool, Float, IndexingUpdateOp, Shape, Tensor, TensorData};

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
    unary float_from_into_data(Float, FLOATS, Role::Lhs) |x| x;
    custom float_zeros_ones_full(FLOATS) |c| {
        let options = (&c.device, c.dtype);
        (
            Tensor::<B, 2>::zeros([2, 3], options),
            Tensor::<B, 2>::ones([2, 3], options),
            Tensor::<B, 2>::full([2, 3], -1.75, options),
        )
    };
    custom float_empty(FLOATS) |c| {
        let empty = Tensor::<B, 3>::empty(SHAPE, (&c.device, c.dtype));
        assert_eq!((empty.dims(), empty.dtype()), (SHAPE, c.dtype), "float_empty");
        empty.slice_assign(s![.., .., ..], c.input::<Float>(SHAPE, Role::Lhs, 0))
    };
    custom float_device_to_device(FLOATS) |c| {
        let moved = c.input::<Float>(SHAPE, Role::Lhs, 0).to_device(&c.other_device);
        assert_eq!(moved.device(), c.other_device, "float_to_device");
        (moved * 2.0).to_device(&c.device)
    };
    unary float_into_int(Float, FLOATS, Role::Halves) |x| x.int();
    unary float_cast(Float, FLOATS, Role::Lhs) |x| FLOATS.map(|to| x.clone().cast(to)).to_vec();
    unary float_repeat_dim(Float, FLOATS, Role::Lhs) |x| {
        (x.clone().repeat_dim(0, 2), x.repeat_dim(2, 3))
    };
    unary float_detach_require_grad(Float, FLOATS, Role::Lhs) |x| {
        let marked = x.set_require_grad(true);
        let flag = TensorData::from([marked.is_require_grad()]);
        let device = marked.device();
        (marked.detach(), Tensor::<B, 1, Bool>::from_data(flag, &device))
    };

    // Arithmetic.
    binary float_add(Float, FLOATS, [Role::Lhs, Role::Rhs]) |a, b| a + b;
    binary float_sub(Float, FLOATS, [Role::Lhs, Role::Rhs]) |a, b| a - b;
    binary float_mul(Float, FLOATS, [Role::Lhs, Role::Rhs]) |a, b| a * b;
    binary float_div(Float, FLOATS, [Role::Lhs, Role::Rhs]) |a, b| a / b;
    /// Python-style: the result has the sign of the divisor.
    binary float_remainder(Float, FLOATS, [Role::Lhs, Role::Rhs]) |a, b| a.remainder(b);
    binary float_powf(Float, FLOATS, [Role::Positive, Role::Unit], Tolerance::LOOSE) |a, b| {
        a.powf(b)
    };
    binary float_atan2(Float, FLOATS, [Role::Lhs, Role::Rhs], Tolerance::LOOSE) |a, b| a.atan2(b);
    unary float_add_scalar(Float, FLOATS, Role::Lhs) |x| x + 1.5;
    unary float_sub_scalar(Float, FLOATS, Role::Lhs) |x| x - 0.25;
    unary float_mul_scalar(Float, FLOATS, Role::Lhs) |x| x * -2.5;
    unary float_div_scalar(Float, FLOATS, Role::Lhs) |x| (x.clone() / 4.0, x / -0.5);
    unary float_remainder_scalar(Float, FLOATS, Role::Lhs) |x| {
        (x.clone().remainder_scalar(1.5), x.remainder_scalar(-2.5))
    };
    unary float_clamp_min(Float, FLOATS, Role::Lhs) |x| x.clamp_min(-1.0);
    unary float_clamp_max(Float, FLOATS, Role::Lhs) |x| x.clamp_max(0.5);
    unary float_clamp(Float, FLOATS, Role::Lhs) |x| x.clamp(-2.0, 2.5);
    unary float_neg(Float, FLOATS, Role::Lhs) |x| -x;
    unary float_recip(Float, FLOATS, Role::Rhs) |x| x.recip();
    /// Exponents 0, 1, 2, -1 and -2 take the shortcuts of the default `float_powi_scalar`.
    unary float_powi_scalar(Float, FLOATS, Role::Rhs) |x| {
        [0, 1, 2, -1, -2].map(|e| x.clone().powi_scalar(e)).to_vec()
    };
    unary float_powi_scalar_impl(Float, FLOATS, Role::Lhs, Tolerance::LOOSE) |x| {
        (x.clone().powi_scalar(3), x.powi_scalar(-3))
    };
    /// Integer-valued exponents go to `float_powi_scalar`.
    unary float_powf_scalar(Float, FLOATS, Role::Lhs, Tolerance::LOOSE) |x| {
        (x.clone().powf_scalar(2.0), x.powf_scalar(3.0))
    };
    unary float_powf_scalar_impl(Float, FLOATS, Role::Positive, Tolerance::LOOSE) |x| {
        (x.clone().powf_scalar(0.5), x.powf_scalar(-1.25))
    };
    custom float_matmul(FLOATS) |c| {
        let a = c.input::<Float>(SHAPE, Role::Small, 0);
        let b = c.dense::<Float, 3>([1, 4, 5], Role::Small, 7);
        let empty = c.dense::<Float, 3>([2, 3, 0], Role::Small, 0)
            .matmul(c.dense::<Float, 3>([2, 0, 5], Role::Small, 0));
        (a.clone().matmul(b), a.clone().swap_dims(1, 2).matmul(a), empty)
    };
    custom float_cross(FLOATS) |c| {
        let a = c.input::<Float>(SHAPE, Role::Lhs, 0);
        let b = c.dense::<Float, 3>(SHAPE, Role::Rhs, 5);
        let last = c.dense::<Float, 3>([2, 4, 3], Role::Rhs, 9);
        (a.clone().cross(b, 1), a.swap_dims(1, 2).cross(last, 2))
    };

    // Views and copies.
    unary float_transpose(Float, FLOATS, Role::Lhs) |x| x.transpose();
    unary float_swap_dims(Float, FLOATS, Role::Lhs) |x| x.swap_dims(0, 2);
    unary float_permute(Float, FLOATS, Role::Lhs) |x| x.permute([2, 0, 1]);
    unary float_flip(Float, FLOATS, Role::Lhs) |x| (x.clone().flip([1]), x.flip([0, 1, 2]));
    /// Not empty: Burn's reshape reads a 0 in the target shape as "keep this dim".
    nonempty float_reshape(Float, FLOATS, Role::Lhs) |x| {
        let [a, b, d] = x.dims();
        x.reshape([b, a * d])
    };
    /// A `Shape`, not an array: in an array Burn rejects a 0 in the target shape.
    unary float_expand(Float, FLOATS, Role::Lhs) |x| {
        let [a, b, d] = x.dims();
        (
            x.clone().narrow(0, 0, 1).expand::<3, _>(Shape::new([3, b, d])),
            x.expand::<4, _>(Shape::new([2, a, b, d])),
        )
    };
    unary float_slice(Float, FLOATS, Role::Lhs) |x| {
        (x.clone().slice(s![.., 0..;2, 1..]), x.slice(s![..;-1, .., ..;-2]))
    };
    custom float_slice_assign(FLOATS) |c| {
        let x = c.input::<Float>(SHAPE, Role::Lhs, 0);
        let v = c.dense::<Float, 3>([2, 2, 2], Role::Rhs, 3);
        (
            x.clone().slice_assign(s![.., 1.., 0..;2], v.clone()),
            x.slice_assign(s![..;-1, 0..2, 2..], v),
        )
    };
    custom float_cat(FLOATS) |c| {
        let a = c.input::<Float>(SHAPE, Role::Lhs, 0);
        let b = c.dense::<Float, 3>([2, 3, 1], Role::Rhs, 1);
        let none = c.dense::<Float, 3>([2, 3, 0], Role::Rhs, 1);
        (
            Tensor::cat(vec![a.clone(), b, a.clone()], 2),
            Tensor::cat(vec![a.clone(), a.clone()], 0),
            Tensor::cat(vec![none, a], 2),
        )
    };
    custom float_unfold(FLOATS) |c| {
        let x = c.input::<Float>(SHAPE, Role::Lhs, 0);
        (x.clone().unfold::<4, _>(2, 2, 1), x.unfold::<4, _>(1, 2, 2))
    };

    // Indexing.
    custom float_gather(FLOATS) |c| {
        let x = c.input::<Float>(SHAPE, Role::Lhs, 0);
        (x.clone().gather(1, c.indices([2, 5, 4], 3, 0)), x.gather(2, c.indices([2, 3, 2], 4, 1)))
    };
    /// Repeated indices accumulate.
    custom float_scatter_add(FLOATS) |c| {
        let x = c.input::<Float>(SHAPE, Role::Lhs, 0);
        let values = c.dense::<Float, 3>([2, 2, 4], Role::Rhs, 3);
        x.scatter(1, c.indices([2, 2, 4], 3, 0), values, IndexingUpdateOp::Add)
    };
    custom float_scatter_nd(FLOATS) |c| {
        let x = c.input::<Float>(SHAPE, Role::Lhs, 0);
        let points = c.index_list(&[0, 1, 1, 2, 0, 0], [3, 2]);
        let values = c.dense::<Float, 2>([3, 4], Role::Rhs, 2);
        let rows = c.index_list(&[1], [1, 1]);
        let row_values = c.dense::<Float, 3>([1, 3, 4], Role::Rhs, 4);
        let mut out: Vec<_> = UPDATES
            .map(|op| x.clone().scatter_nd(points.clone(), values.clone(), op))
            .to_vec();
        out.push(x.scatter_nd(rows, row_values, IndexingUpdateOp::Assign));
        out
    };
    custom float_gather_nd(FLOATS) |c| {
        let x = c.input::<Float>(SHAPE, Role::Lhs, 0);
        let points: Tensor<B, 2> = x.clone().gather_nd(c.index_list(&[0, 1, 1, 2, 0, 0], [3, 2]));
        let rows: Tensor<B, 4> = x.gather_nd(c.index_list(&[1, 0, 1, 1], [2, 2, 1]));
        (points, rows)
    };
    custom float_select(FLOATS) |c| {
        let x = c.input::<Float>(SHAPE, Role::Lhs, 0);
        (x.clone().select(1, c.indices([5], 3, 0)), x.select(2, c.index_list(&[3, 0, 3], [3])))
    };
    /// Repeated indices accumulate.
    custom float_select_add(FLOATS) |c| {
        let x = c.input::<Float>(SHAPE, Role::Lhs, 0);
        let values = c.dense::<Float, 3>([2, 4, 4], Role::Rhs, 3);
        x.select_assign(1, c.index_list(&[2, 0, 2, 1], [4]), values, IndexingUpdateOp::Add)
    };
    custom float_mask_where(FLOATS) |c| {
        let x = c.input::<Float>(SHAPE, Role::Lhs, 0);
        let y = c.dense::<Float, 3>(SHAPE, Role::Rhs, 3);
        let strided_mask = c.input_of::<Bool>(BOOL, SHAPE, Role::Lhs, 2);
        (x.clone().mask_where(c.mask(SHAPE, 1), y.clone()), y.mask_where(strided_mask, x))
    };
    custom float_mask_fill(FLOATS) |c| {
        let x = c.input::<Float>(SHAPE, Role::Lhs, 0);
        let strided_mask = c.input_of::<Bool>(BOOL, SHAPE, Role::Lhs, 2);
        (x.clone().mask_fill(c.mask(SHAPE, 1), -2.5), x.mask_fill(strided_mask, 3.0))
    };

    // Comparisons (the operands share values, so equality happens).
    binary float_equal(Float, FLOATS, [Role::Ties, Role::Ties]) |a, b| a.equal(b);
    binary float_not_equal(Float, FLOATS, [Role::Ties, Role::Ties]) |a, b| a.not_equal(b);
    binary float_greater(Float, FLOATS, [Role::Ties, Role::Ties]) |a, b| a.greater(b);
    binary float_greater_equal(Float, FLOATS, [Role::Ties, Role::Ties]) |a, b| a.greater_equal(b);
    binary float_lower(Float, FLOATS, [Role::Ties, Role::Ties]) |a, b| a.lower(b);
    binary float_lower_equal(Float, FLOATS, [Role::Ties, Role::Ties]) |a, b| a.lower_equal(b);
    unary float_equal_elem(Float, FLOATS, Role::Ties) |x| x.equal_elem(1.0);
    unary float_not_equal_elem(Float, FLOATS, Role::Ties) |x| x.not_equal_elem(1.0);
    unary float_greater_elem(Float, FLOATS, Role::Ties) |x| x.greater_elem(0.0);
    unary float_greater_equal_elem(Float, FLOATS, Role::Ties) |x| x.greater_equal_elem(0.0);
    unary float_lower_elem(Float, FLOATS, Role::Ties) |x| x.lower_elem(1.0);
    unary float_lower_equal_elem(Float, FLOATS, Role::Ties) |x| x.lower_equal_elem(1.0);
    unary float_is_nan(Float, FLOATS, Role::Special) |x| x.is_nan();
    unary float_is_inf(Float, FLOATS, Role::Special) |x| x.is_inf();

    // Reductions.
    unary float_sum(Float, FLOATS, Role::Lhs) |x| x.sum();
    unary float_sum_dim(Float, FLOATS, Role::Lhs) |x| {
        (x.clone().sum_dim(0), x.clone().sum_dim(1), x.sum_dim(2))
    };
    /// Negative factors: the default exp(sum(log x)) would give NaN.
    unary float_prod(Float, FLOATS, Role::Signs) |x| x.prod();
    unary float_prod_dim(Float, FLOATS, Role::Signs) |x| (x.clone().prod_dim(1), x.prod_dim(2));
    unary float_mean(Float, FLOATS, Role::Lhs) |x| x.mean();
    /// Not along the empty dim of the empty layout: the mean of nothing panics in the reference.
    unary float_mean_dim(Float, FLOATS, Role::Lhs) |x| (x.clone().mean_dim(0), x.mean_dim(2));
    unary float_cumsum(Float, FLOATS, Role::Lhs) |x| (x.clone().cumsum(1), x.cumsum(2));
    unary float_cumprod(Float, FLOATS, Role::Signs) |x| (x.clone().cumprod(1), x.cumprod(2));
    unary float_cummin(Float, FLOATS, Role::Lhs) |x| (x.clone().cummin(1), x.cummin(2));
    unary float_cummax(Float, FLOATS, Role::Lhs) |x| (x.clone().cummax(1), x.cummax(2));
    /// Ties: the first index wins.
    nonempty float_argmax(Float, FLOATS, Role::Ties) |x| {
        (x.clone().argmax(0), x.clone().argmax(1), x.argmax(2))
    };
    /// Ties: the first index wins.
    nonempty float_argmin(Float, FLOATS, Role::Ties) |x| {
        (x.clone().argmin(0), x.clone().argmin(1), x.argmin(2))
    };
    nonempty float_max(Float, FLOATS, Role::Lhs) |x| x.max();
    nonempty float_max_dim(Float, FLOATS, Role::Lhs) |x| (x.clone().max_dim(1), x.max_dim(2));
    nonempty float_max_dim_with_indices(Float, FLOATS, Role::Ties) |x| {
        (x.clone().max_dim_with_indices(1), x.max_dim_with_indices(2))
    };
    nonempty float_min(Float, FLOATS, Role::Lhs) |x| x.min();
    nonempty float_min_dim(Float, FLOATS, Role::Lhs) |x| (x.clone().min_dim(1), x.min_dim(2));
    nonempty float_min_dim_with_indices(Float, FLOATS, Role::Ties) |x| {
        (x.clone().min_dim_with_indices(1), x.min_dim_with_indices(2))
    };
    nonempty float_max_abs(Float, FLOATS, Role::Lhs) |x| x.max_abs();
    nonempty float_max_abs_dim(Float, FLOATS, Role::Lhs) |x| {
        (x.clone().max_abs_dim(1), x.max_abs_dim(2))
    };
    unary float_any(Float, FLOATS, Role::Ties) |x| (x.clone().any(), x.zeros_like().any());
    unary float_any_dim(Float, FLOATS, Role::Ties) |x| {
        if is_reference::<B>() && x.shape().num_elements() == 0 {
            (any_dim_by_count(x.clone(), 1), any_dim_by_count(x, 2))
        } else {
            (x.clone().any_dim(1), x.any_dim(2))
        }
    };
    unary float_all(Float, FLOATS, Role::Ties) |x| (x.clone().all(), x.ones_like().all());
    unary float_all_dim(Float, FLOATS, Role::Ties) |x| {
        if is_reference::<B>() && x.shape().num_elements() == 0 {
            (all_dim_by_count(x.clone(), 1), all_dim_by_count(x, 2))
        } else {
            (x.clone().all_dim(1), x.all_dim(2))
        }
    };

    // Sorting: values may tie; indices are compared only where values are distinct (Burn's
    // sort is unstable), except argtopk whose contract orders ties by lowest index.
    unary float_sort(Float, FLOATS, Role::Ties) |x| {
        (x.clone().sort(2), x.clone().sort_descending(1), x.sort(0))
    };
    unary float_sort_with_indices(Float, FLOATS, Role::Distinct) |x| {
        (x.clone().sort_with_indices(2), x.sort_descending_with_indices(0))
    };
    unary float_argsort(Float, FLOATS, Role::Distinct) |x| {
        (x.clone().argsort(2), x.argsort_descending(0))
    };
    custom float_topk(FLOATS) |c| {
        let x = c.input::<Float>(SHAPE, Role::Ties, 0);
        (x.clone().topk(2, 2), x.topk(1, 1))
    };
    /// burn-flex leaves argtopk unimplemented: the reference is a stable argsort.
    custom float_argtopk(FLOATS) |c| {
        let x = c.input::<Float>(SHAPE, Role::Ties, 0);
        if c.is_reference() {
            (stable_argtopk(x.clone(), 2, 2), stable_argtopk(x, 1, 2))
        } else {
            (x.clone().argtopk(2, 2), x.argtopk(2, 1))
        }
    };

    // Element-wise math.
    unary float_exp(Float, FLOATS, Role::Lhs, Tolerance::LOOSE) |x| x.exp();
    unary float_log(Float, FLOATS, Role::Positive, Tolerance::LOOSE) |x| x.log();
    unary float_log1p(Float, FLOATS, Role::Positive, Tolerance::LOOSE) |x| x.log1p();
    unary float_sqrt(Float, FLOATS, Role::Positive, Tolerance::LOOSE) |x| x.sqrt();
    unary float_abs(Float, FLOATS, Role::Lhs) |x| x.abs();
    unary float_cos(Float, FLOATS, Role::Lhs, Tolerance::LOOSE) |x| x.cos();
    unary float_sin(Float, FLOATS, Role::Lhs, Tolerance::LOOSE) |x| x.sin();
    unary float_tan(Float, FLOATS, Role::Lhs, Tolerance::LOOSE) |x| x.tan();
    unary float_cosh(Float, FLOATS, Role::Lhs, Tolerance::LOOSE) |x| x.cosh();
    unary float_sinh(Float, FLOATS, Role::Lhs, Tolerance::LOOSE) |x| x.sinh();
    unary float_tanh(Float, FLOATS, Role::Lhs, Tolerance::F32_IN_F64) |x| x.tanh();
    unary float_acos(Float, FLOATS, Role::Unit, Tolerance::LOOSE) |x| x.acos();
    unary float_acosh(Float, FLOATS, Role::AboveOne, Tolerance::LOOSE) |x| x.acosh();
    unary float_asin(Float, FLOATS, Role::Unit, Tolerance::LOOSE) |x| x.asin();
    unary float_asinh(Float, FLOATS, Role::Lhs, Tolerance::LOOSE) |x| x.asinh();
    unary float_atan(Float, FLOATS, Role::Lhs, Tolerance::LOOSE) |x| x.atan();
    unary float_atanh(Float, FLOATS, Role::Unit, Tolerance::LOOSE) |x| x.atanh();
    unary float_erf(Float, FLOATS, Role::Lhs, Tolerance::LOOSE) |x| x.erf();
    /// Halves round to even.
    unary float_round(Float, FLOATS, Role::Halves) |x| x.round();
    unary float_floor(Float, FLOATS, Role::Halves) |x| x.floor();
    unary float_ceil(Float, FLOATS, Role::Halves) |x| x.ceil();
    unary float_trunc(Float, FLOATS, Role::Halves) |x| x.trunc();
    unary float_sign(Float, FLOATS, Role::Lhs) |x| x.sign();

    custom float_grid_sample_2d(FLOATS, Tolerance::LOOSE) |c| {
        let x = c.input::<Float>(SHAPE, Role::Lhs, 0).unsqueeze::<4>();
        let grid = c.dense::<Float, 4>([1, 2, 3, 2], Role::Unit, 0) * 1.25;
        let nearest = GridSampleOptions::new(InterpolateMode::Nearest)
            .with_padding_mode(GridSamplePaddingMode::Border);
        let reflect = GridSampleOptions::new(InterpolateMode::Bilinear)
            .with_padding_mode(GridSamplePaddingMode::Reflection)
            .with_align_corners(true);
        (
            x.clone().grid_sample_2d(grid.clone(), GridSampleOptions::default()),
            x.clone().grid_sample_2d(grid.clone(), nearest),
            x.grid_sample_2d(grid, reflect),
        )
    };
}
