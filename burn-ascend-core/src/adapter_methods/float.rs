//! The shared part of Burn's `FloatTensorOps`.

/// The `FloatTensorOps` methods whose text is the same for Burn 0.21 and 0.22, for each adapter's
/// `impl FloatTensorOps<Ascend> for Ascend` (the methods that differ stand beside the invocation).
#[macro_export]
macro_rules! adapter_float_ops {
    () => {
        fn float_from_data(data: TensorData, device: &Device<Ascend>) -> FloatTensor<Ascend> {
            from_data(data, device, Kind::Float)
        }

        fn float_random(
            shape: Shape,
            distribution: Distribution,
            device: &Device<Ascend>,
            dtype: FloatDType,
        ) -> FloatTensor<Ascend> {
            random(shape, distribution, device, float_type(dtype))
        }

        fn float_zeros(
            shape: Shape,
            device: &Device<Ascend>,
            dtype: FloatDType,
        ) -> FloatTensor<Ascend> {
            run(
                "float_zeros",
                creation::zeros(&context(device), shape.to_vec(), float_type(dtype)),
            )
        }

        fn float_ones(shape: Shape, device: &Device<Ascend>, dtype: FloatDType) -> FloatTensor<Ascend> {
            run(
                "float_ones",
                creation::ones(&context(device), shape.to_vec(), float_type(dtype)),
            )
        }

        fn float_full(
            shape: Shape,
            fill_value: Scalar,
            device: &Device<Ascend>,
            dtype: FloatDType,
        ) -> FloatTensor<Ascend> {
            let dtype = float_type(dtype);
            run(
                "float_full",
                creation::full(
                    &context(device),
                    shape.to_vec(),
                    dtype,
                    host_scalar(fill_value, dtype),
                ),
            )
        }

        async fn float_into_data(tensor: FloatTensor<Ascend>) -> Result<TensorData, ExecutionError> {
            into_data(tensor)
        }

        fn float_to_device(
            tensor: FloatTensor<Ascend>,
            device: &Device<Ascend>,
        ) -> FloatTensor<Ascend> {
            run("float_to_device", copy::to_device(&tensor, &device.into()))
        }

        fn float_into_int(tensor: FloatTensor<Ascend>, out_dtype: IntDType) -> IntTensor<Ascend> {
            run("float_into_int", copy::cast(&tensor, int_type(out_dtype)))
        }

        fn float_empty(
            shape: Shape,
            device: &Device<Ascend>,
            dtype: FloatDType,
        ) -> FloatTensor<Ascend> {
            run(
                "float_empty",
                CoreTensor::empty(&context(device), shape.to_vec(), float_type(dtype)),
            )
        }

        fn float_repeat_dim(
            tensor: FloatTensor<Ascend>,
            dim: usize,
            times: usize,
        ) -> FloatTensor<Ascend> {
            run("float_repeat_dim", index::repeat_dim(&tensor, dim, times))
        }

        fn float_add(lhs: FloatTensor<Ascend>, rhs: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            binary(BinaryOp::Add, lhs, rhs)
        }

        fn float_add_scalar(lhs: FloatTensor<Ascend>, rhs: Scalar) -> FloatTensor<Ascend> {
            binary_scalar(BinaryOp::Add, lhs, rhs)
        }

        fn float_clamp_min(tensor: FloatTensor<Ascend>, min: Scalar) -> FloatTensor<Ascend> {
            let min = host_scalar(min, tensor.dtype());
            run("float_clamp_min", math::clamp(&tensor, Some(min), None))
        }

        fn float_clamp_max(tensor: FloatTensor<Ascend>, max: Scalar) -> FloatTensor<Ascend> {
            let max = host_scalar(max, tensor.dtype());
            run("float_clamp_max", math::clamp(&tensor, None, Some(max)))
        }

        fn float_clamp(tensor: FloatTensor<Ascend>, min: Scalar, max: Scalar) -> FloatTensor<Ascend> {
            let (min, max) = (
                host_scalar(min, tensor.dtype()),
                host_scalar(max, tensor.dtype()),
            );
            run("float_clamp", math::clamp(&tensor, Some(min), Some(max)))
        }

        fn float_sub(lhs: FloatTensor<Ascend>, rhs: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            binary(BinaryOp::Sub, lhs, rhs)
        }

        fn float_sub_scalar(lhs: FloatTensor<Ascend>, rhs: Scalar) -> FloatTensor<Ascend> {
            binary_scalar(BinaryOp::Sub, lhs, rhs)
        }

        fn float_mul(lhs: FloatTensor<Ascend>, rhs: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            binary(BinaryOp::Mul, lhs, rhs)
        }

        fn float_mul_scalar(lhs: FloatTensor<Ascend>, rhs: Scalar) -> FloatTensor<Ascend> {
            binary_scalar(BinaryOp::Mul, lhs, rhs)
        }

        fn float_div(lhs: FloatTensor<Ascend>, rhs: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            binary(BinaryOp::Div, lhs, rhs)
        }

        fn float_div_scalar(lhs: FloatTensor<Ascend>, rhs: Scalar) -> FloatTensor<Ascend> {
            binary_scalar(BinaryOp::Div, lhs, rhs)
        }

        fn float_remainder(lhs: FloatTensor<Ascend>, rhs: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_remainder", math::remainder(&lhs, &rhs))
        }

        fn float_remainder_scalar(lhs: FloatTensor<Ascend>, rhs: Scalar) -> FloatTensor<Ascend> {
            let s = host_scalar(rhs, lhs.dtype());
            run("float_remainder_scalar", math::remainder_scalar(&lhs, s))
        }

        fn float_cross(
            lhs: FloatTensor<Ascend>,
            rhs: FloatTensor<Ascend>,
            dim: usize,
        ) -> FloatTensor<Ascend> {
            run("float_cross", math::cross(&lhs, &rhs, dim))
        }

        fn float_neg(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_neg", math::unary(Unary::Neg, &tensor))
        }

        fn float_recip(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_recip", math::unary(Unary::Recip, &tensor))
        }

        fn float_swap_dims(
            tensor: FloatTensor<Ascend>,
            dim1: usize,
            dim2: usize,
        ) -> FloatTensor<Ascend> {
            let layout = tensor.layout().swap_dims(dim1, dim2);
            tensor.with_layout(layout).into()
        }

        fn float_permute(tensor: FloatTensor<Ascend>, axes: &[usize]) -> FloatTensor<Ascend> {
            let layout = tensor.layout().permute(axes);
            tensor.with_layout(layout).into()
        }

        fn float_flip(tensor: FloatTensor<Ascend>, axes: &[usize]) -> FloatTensor<Ascend> {
            run("float_flip", copy::flip(&tensor, axes))
        }

        fn float_reshape(tensor: FloatTensor<Ascend>, shape: Shape) -> FloatTensor<Ascend> {
            run("float_reshape", copy::reshape_view(&tensor, shape.to_vec()))
        }

        fn float_gather(
            dim: usize,
            tensor: FloatTensor<Ascend>,
            indices: IntTensor<Ascend>,
        ) -> FloatTensor<Ascend> {
            run("float_gather", index::gather(dim, &tensor, &indices))
        }

        fn float_scatter_nd(
            data: FloatTensor<Ascend>,
            indices: IntTensor<Ascend>,
            values: FloatTensor<Ascend>,
            reduction: IndexingUpdateOp,
        ) -> FloatTensor<Ascend> {
            run(
                "float_scatter_nd",
                index::scatter_nd(&data, &indices, &values, nd_update(reduction)),
            )
        }

        fn float_gather_nd(
            data: FloatTensor<Ascend>,
            indices: IntTensor<Ascend>,
        ) -> FloatTensor<Ascend> {
            run("float_gather_nd", index::gather_nd(&data, &indices))
        }

        fn float_select(
            tensor: FloatTensor<Ascend>,
            dim: usize,
            indices: IntTensor<Ascend>,
        ) -> FloatTensor<Ascend> {
            run("float_select", index::select_index(&tensor, dim, &indices))
        }

        fn float_slice(tensor: FloatTensor<Ascend>, slices: &[Slice]) -> FloatTensor<Ascend> {
            run(
                "float_slice",
                copy::slice(&tensor, &dim_slices(tensor.shape(), slices)),
            )
        }

        fn float_slice_assign(
            tensor: FloatTensor<Ascend>,
            slices: &[Slice],
            value: FloatTensor<Ascend>,
        ) -> FloatTensor<Ascend> {
            run(
                "float_slice_assign",
                copy::slice_assign(&tensor, &dim_slices(tensor.shape(), slices), &value),
            )
        }

        fn float_mask_where(
            tensor: FloatTensor<Ascend>,
            mask: BoolTensor<Ascend>,
            value: FloatTensor<Ascend>,
        ) -> FloatTensor<Ascend> {
            run("float_mask_where", compare::select(&mask, &value, &tensor))
        }

        fn float_mask_fill(
            tensor: FloatTensor<Ascend>,
            mask: BoolTensor<Ascend>,
            value: Scalar,
        ) -> FloatTensor<Ascend> {
            let v = host_scalar(value, tensor.dtype());
            run("float_mask_fill", compare::mask_fill(&tensor, &mask, v))
        }

        fn float_equal(
            lhs: FloatTensor<Ascend>,
            rhs: FloatTensor<Ascend>,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            bool_out(
                out_dtype,
                "float_equal",
                compare::compare(Compare::Eq, &lhs, &rhs),
            )
        }

        fn float_not_equal(
            lhs: FloatTensor<Ascend>,
            rhs: FloatTensor<Ascend>,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            bool_out(
                out_dtype,
                "float_not_equal",
                compare::compare(Compare::Ne, &lhs, &rhs),
            )
        }

        fn float_equal_elem(
            lhs: FloatTensor<Ascend>,
            rhs: Scalar,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            let s = host_scalar(rhs, lhs.dtype());
            bool_out(
                out_dtype,
                "float_equal_elem",
                compare::compare_scalar(Compare::Eq, &lhs, s),
            )
        }

        fn float_not_equal_elem(
            lhs: FloatTensor<Ascend>,
            rhs: Scalar,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            let s = host_scalar(rhs, lhs.dtype());
            bool_out(
                out_dtype,
                "float_not_equal_elem",
                compare::compare_scalar(Compare::Ne, &lhs, s),
            )
        }

        fn float_greater(
            lhs: FloatTensor<Ascend>,
            rhs: FloatTensor<Ascend>,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            bool_out(
                out_dtype,
                "float_greater",
                compare::compare(Compare::Gt, &lhs, &rhs),
            )
        }

        fn float_greater_elem(
            lhs: FloatTensor<Ascend>,
            rhs: Scalar,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            let s = host_scalar(rhs, lhs.dtype());
            bool_out(
                out_dtype,
                "float_greater_elem",
                compare::compare_scalar(Compare::Gt, &lhs, s),
            )
        }

        fn float_greater_equal(
            lhs: FloatTensor<Ascend>,
            rhs: FloatTensor<Ascend>,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            bool_out(
                out_dtype,
                "float_greater_equal",
                compare::compare(Compare::Ge, &lhs, &rhs),
            )
        }

        fn float_greater_equal_elem(
            lhs: FloatTensor<Ascend>,
            rhs: Scalar,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            let s = host_scalar(rhs, lhs.dtype());
            bool_out(
                out_dtype,
                "float_greater_equal_elem",
                compare::compare_scalar(Compare::Ge, &lhs, s),
            )
        }

        fn float_lower(
            lhs: FloatTensor<Ascend>,
            rhs: FloatTensor<Ascend>,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            bool_out(
                out_dtype,
                "float_lower",
                compare::compare(Compare::Lt, &lhs, &rhs),
            )
        }

        fn float_lower_elem(
            lhs: FloatTensor<Ascend>,
            rhs: Scalar,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            let s = host_scalar(rhs, lhs.dtype());
            bool_out(
                out_dtype,
                "float_lower_elem",
                compare::compare_scalar(Compare::Lt, &lhs, s),
            )
        }

        fn float_lower_equal(
            lhs: FloatTensor<Ascend>,
            rhs: FloatTensor<Ascend>,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            bool_out(
                out_dtype,
                "float_lower_equal",
                compare::compare(Compare::Le, &lhs, &rhs),
            )
        }

        fn float_lower_equal_elem(
            lhs: FloatTensor<Ascend>,
            rhs: Scalar,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            let s = host_scalar(rhs, lhs.dtype());
            bool_out(
                out_dtype,
                "float_lower_equal_elem",
                compare::compare_scalar(Compare::Le, &lhs, s),
            )
        }

        fn float_sum(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_sum", reduce::reduce(Reduce::Sum, &tensor, None))
        }

        fn float_sum_dim(tensor: FloatTensor<Ascend>, dim: usize) -> FloatTensor<Ascend> {
            run(
                "float_sum_dim",
                reduce::reduce(Reduce::Sum, &tensor, Some(dim)),
            )
        }

        fn float_prod(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_prod", reduce::reduce(Reduce::Prod, &tensor, None))
        }

        fn float_prod_dim(tensor: FloatTensor<Ascend>, dim: usize) -> FloatTensor<Ascend> {
            run(
                "float_prod_dim",
                reduce::reduce(Reduce::Prod, &tensor, Some(dim)),
            )
        }

        fn float_mean(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_mean", reduce::reduce(Reduce::Mean, &tensor, None))
        }

        fn float_mean_dim(tensor: FloatTensor<Ascend>, dim: usize) -> FloatTensor<Ascend> {
            run(
                "float_mean_dim",
                reduce::reduce(Reduce::Mean, &tensor, Some(dim)),
            )
        }

        fn float_cumsum(tensor: FloatTensor<Ascend>, dim: usize) -> FloatTensor<Ascend> {
            run("float_cumsum", reduce::scan(Scan::Sum, &tensor, dim))
        }

        fn float_cumprod(tensor: FloatTensor<Ascend>, dim: usize) -> FloatTensor<Ascend> {
            run("float_cumprod", reduce::scan(Scan::Prod, &tensor, dim))
        }

        fn float_cummin(tensor: FloatTensor<Ascend>, dim: usize) -> FloatTensor<Ascend> {
            run("float_cummin", reduce::scan(Scan::Min, &tensor, dim))
        }

        fn float_cummax(tensor: FloatTensor<Ascend>, dim: usize) -> FloatTensor<Ascend> {
            run("float_cummax", reduce::scan(Scan::Max, &tensor, dim))
        }

        fn float_cast(tensor: FloatTensor<Ascend>, dtype: FloatDType) -> FloatTensor<Ascend> {
            run("float_cast", copy::cast(&tensor, float_type(dtype)))
        }

        fn float_exp(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_exp", math::unary(Unary::Exp, &tensor))
        }

        fn float_log(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_log", math::unary(Unary::Log, &tensor))
        }

        fn float_log1p(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_log1p", math::unary(Unary::Log1p, &tensor))
        }

        fn float_powf(lhs: FloatTensor<Ascend>, rhs: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_powf", math::pow(&lhs, &rhs))
        }

        fn float_powf_scalar_impl(tensor: FloatTensor<Ascend>, value: Scalar) -> FloatTensor<Ascend> {
            let s = host_scalar(value, tensor.dtype());
            run("float_powf_scalar", math::pow_scalar(&tensor, s))
        }

        fn float_sqrt(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_sqrt", math::unary(Unary::Sqrt, &tensor))
        }

        fn float_abs(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_abs", math::unary(Unary::Abs, &tensor))
        }

        fn float_cos(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_cos", math::unary(Unary::Cos, &tensor))
        }

        fn float_sin(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_sin", math::unary(Unary::Sin, &tensor))
        }

        fn float_tan(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_tan", math::unary(Unary::Tan, &tensor))
        }

        fn float_cosh(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_cosh", math::unary(Unary::Cosh, &tensor))
        }

        fn float_sinh(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_sinh", math::unary(Unary::Sinh, &tensor))
        }

        fn float_tanh(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_tanh", math::unary(Unary::Tanh, &tensor))
        }

        fn float_acos(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_acos", math::unary(Unary::Acos, &tensor))
        }

        fn float_acosh(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_acosh", math::unary(Unary::Acosh, &tensor))
        }

        fn float_asin(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_asin", math::unary(Unary::Asin, &tensor))
        }

        fn float_asinh(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_asinh", math::unary(Unary::Asinh, &tensor))
        }

        fn float_atan(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_atan", math::unary(Unary::Atan, &tensor))
        }

        fn float_atanh(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_atanh", math::unary(Unary::Atanh, &tensor))
        }

        fn float_atan2(lhs: FloatTensor<Ascend>, rhs: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_atan2", math::atan2(&lhs, &rhs))
        }

        fn float_round(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_round", math::unary(Unary::Round, &tensor))
        }

        fn float_floor(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_floor", math::unary(Unary::Floor, &tensor))
        }

        fn float_ceil(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_ceil", math::unary(Unary::Ceil, &tensor))
        }

        fn float_trunc(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_trunc", math::unary(Unary::Trunc, &tensor))
        }

        fn float_erf(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_erf", math::unary(Unary::Erf, &tensor))
        }

        fn float_cat(tensors: Vec<FloatTensor<Ascend>>, dim: usize) -> FloatTensor<Ascend> {
            run("float_cat", copy::cat(cores(&tensors), dim))
        }

        fn float_argmax(
            tensor: FloatTensor<Ascend>,
            dim: usize,
            out_dtype: IntDType,
        ) -> IntTensor<Ascend> {
            run(
                "float_argmax",
                reduce::arg(&tensor, dim, true, int_type(out_dtype)),
            )
        }

        fn float_argtopk(
            tensor: FloatTensor<Ascend>,
            dim: usize,
            k: usize,
            out_dtype: IntDType,
        ) -> IntTensor<Ascend> {
            indices(
                "float_argtopk",
                sort::topk(&tensor, dim, k),
                int_type(out_dtype),
            )
        }

        fn float_topk(tensor: FloatTensor<Ascend>, dim: usize, k: usize) -> FloatTensor<Ascend> {
            run("float_topk", sort::topk(&tensor, dim, k)).0
        }

        fn float_argmin(
            tensor: FloatTensor<Ascend>,
            dim: usize,
            out_dtype: IntDType,
        ) -> IntTensor<Ascend> {
            run(
                "float_argmin",
                reduce::arg(&tensor, dim, false, int_type(out_dtype)),
            )
        }

        fn float_max(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_max", reduce::reduce(Reduce::Max, &tensor, None))
        }

        fn float_max_dim(tensor: FloatTensor<Ascend>, dim: usize) -> FloatTensor<Ascend> {
            run(
                "float_max_dim",
                reduce::reduce(Reduce::Max, &tensor, Some(dim)),
            )
        }

        fn float_min(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_min", reduce::reduce(Reduce::Min, &tensor, None))
        }

        fn float_min_dim(tensor: FloatTensor<Ascend>, dim: usize) -> FloatTensor<Ascend> {
            run(
                "float_min_dim",
                reduce::reduce(Reduce::Min, &tensor, Some(dim)),
            )
        }

        fn float_any(tensor: FloatTensor<Ascend>, out_dtype: BoolDType) -> BoolTensor<Ascend> {
            bool_out(
                out_dtype,
                "float_any",
                reduce::reduce(Reduce::Any, &tensor, None),
            )
        }

        fn float_any_dim(
            tensor: FloatTensor<Ascend>,
            dim: usize,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            bool_out(
                out_dtype,
                "float_any_dim",
                reduce::reduce(Reduce::Any, &tensor, Some(dim)),
            )
        }

        fn float_all(tensor: FloatTensor<Ascend>, out_dtype: BoolDType) -> BoolTensor<Ascend> {
            bool_out(
                out_dtype,
                "float_all",
                reduce::reduce(Reduce::All, &tensor, None),
            )
        }

        fn float_all_dim(
            tensor: FloatTensor<Ascend>,
            dim: usize,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            bool_out(
                out_dtype,
                "float_all_dim",
                reduce::reduce(Reduce::All, &tensor, Some(dim)),
            )
        }

        fn float_sign(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("float_sign", math::unary(Unary::Sign, &tensor))
        }

        fn float_expand(tensor: FloatTensor<Ascend>, shape: Shape) -> FloatTensor<Ascend> {
            expand(tensor, shape)
        }

        fn float_sort(
            tensor: FloatTensor<Ascend>,
            dim: usize,
            descending: bool,
        ) -> FloatTensor<Ascend> {
            run("float_sort", sort::sort(&tensor, dim, descending)).0
        }

        fn float_sort_with_indices(
            tensor: FloatTensor<Ascend>,
            dim: usize,
            descending: bool,
            indices_dtype: IntDType,
        ) -> (FloatTensor<Ascend>, IntTensor<Ascend>) {
            let (values, order) = run(
                "float_sort_with_indices",
                sort::sort(&tensor, dim, descending),
            );
            (
                values,
                run(
                    "float_sort_with_indices",
                    copy::cast(&order, int_type(indices_dtype)),
                ),
            )
        }

        fn float_argsort(
            tensor: FloatTensor<Ascend>,
            dim: usize,
            descending: bool,
            out_dtype: IntDType,
        ) -> IntTensor<Ascend> {
            indices(
                "float_argsort",
                sort::sort(&tensor, dim, descending),
                int_type(out_dtype),
            )
        }

        fn float_grid_sample_2d(
            tensor: FloatTensor<Ascend>,
            grid: FloatTensor<Ascend>,
            options: GridSampleOptions,
        ) -> FloatTensor<Ascend> {
            use $crate::ops::grid_sample::{grid_sample_2d, Padding, Sampling};
            let sampling = match options.mode {
                InterpolateMode::Nearest => Sampling::Nearest,
                InterpolateMode::Bilinear => Sampling::Bilinear,
                InterpolateMode::Bicubic => Sampling::Bicubic,
                other => raise(AscendError::invalid("grid_sample_2d", format!("no {other:?} interpolation (aclnnGridSampler2D offers nearest, bilinear and bicubic)"))),
            };
            let padding = match options.padding_mode {
                GridSamplePaddingMode::Zeros => Padding::Zeros,
                GridSamplePaddingMode::Border => Padding::Border,
                GridSamplePaddingMode::Reflection => Padding::Reflection,
            };
            run(
                "float_grid_sample_2d",
                grid_sample_2d(&tensor, &grid, sampling, padding, options.align_corners),
            )
        }

        fn float_unfold(
            tensor: FloatTensor<Ascend>,
            dim: usize,
            size: usize,
            step: usize,
        ) -> FloatTensor<Ascend> {
            run("float_unfold", index::unfold(&tensor, dim, size, step))
        }

        fn float_is_nan(tensor: FloatTensor<Ascend>, out_dtype: BoolDType) -> BoolTensor<Ascend> {
            bool_out(
                out_dtype,
                "float_is_nan",
                compare::compare(Compare::IsNan, &tensor, &tensor),
            )
        }
    };
}
