//! The shared part of Burn's `IntTensorOps`.

/// The `IntTensorOps` methods whose text is the same for Burn 0.21 and 0.22, for each adapter's
/// `impl IntTensorOps<Ascend> for Ascend` (the methods that differ stand beside the invocation).
/// The adapter's `index_dtype(&tensor)` gives the dtype of the indices an int op returns
/// (argmax/argmin/argtopk/argsort/sort_with_indices), which differs between the Burn versions.
#[macro_export]
macro_rules! adapter_int_ops {
    () => {
        fn int_empty(shape: Shape, device: &Device<Ascend>, dtype: IntDType) -> IntTensor<Ascend> {
            run(
                "int_empty",
                CoreTensor::empty(&context(device), shape.to_vec(), int_type(dtype)),
            )
        }

        async fn int_into_data(tensor: IntTensor<Ascend>) -> Result<TensorData, ExecutionError> {
            into_data(tensor)
        }

        fn int_from_data(data: TensorData, device: &Device<Ascend>) -> IntTensor<Ascend> {
            from_data(data, device, Kind::Int)
        }

        fn int_to_device(tensor: IntTensor<Ascend>, device: &Device<Ascend>) -> IntTensor<Ascend> {
            run("int_to_device", copy::to_device(&tensor, &device.into()))
        }

        fn int_reshape(tensor: IntTensor<Ascend>, shape: Shape) -> IntTensor<Ascend> {
            run("int_reshape", copy::reshape_view(&tensor, shape.to_vec()))
        }

        fn int_slice(tensor: IntTensor<Ascend>, slices: &[Slice]) -> IntTensor<Ascend> {
            run(
                "int_slice",
                copy::slice(&tensor, &dim_slices(tensor.shape(), slices)),
            )
        }

        fn int_slice_assign(
            tensor: IntTensor<Ascend>,
            slices: &[Slice],
            value: IntTensor<Ascend>,
        ) -> IntTensor<Ascend> {
            run(
                "int_slice_assign",
                copy::slice_assign(&tensor, &dim_slices(tensor.shape(), slices), &value),
            )
        }

        fn int_into_float(tensor: IntTensor<Ascend>, out_dtype: FloatDType) -> FloatTensor<Ascend> {
            run("int_into_float", copy::cast(&tensor, float_type(out_dtype)))
        }

        fn int_mask_where(
            tensor: IntTensor<Ascend>,
            mask: BoolTensor<Ascend>,
            value: IntTensor<Ascend>,
        ) -> IntTensor<Ascend> {
            run("int_mask_where", compare::select(&mask, &value, &tensor))
        }

        fn int_mask_fill(
            tensor: IntTensor<Ascend>,
            mask: BoolTensor<Ascend>,
            value: Scalar,
        ) -> IntTensor<Ascend> {
            let v = host_scalar(value, tensor.dtype());
            run("int_mask_fill", compare::mask_fill(&tensor, &mask, v))
        }

        fn int_gather(
            dim: usize,
            tensor: IntTensor<Ascend>,
            indices: IntTensor<Ascend>,
        ) -> IntTensor<Ascend> {
            run("int_gather", index::gather(dim, &tensor, &indices))
        }

        fn int_scatter_nd(
            data: IntTensor<Ascend>,
            indices: IntTensor<Ascend>,
            values: IntTensor<Ascend>,
            reduction: IndexingUpdateOp,
        ) -> IntTensor<Ascend> {
            run(
                "int_scatter_nd",
                index::scatter_nd(&data, &indices, &values, nd_update(reduction)),
            )
        }

        fn int_gather_nd(data: IntTensor<Ascend>, indices: IntTensor<Ascend>) -> IntTensor<Ascend> {
            run("int_gather_nd", index::gather_nd(&data, &indices))
        }

        fn int_select(
            tensor: IntTensor<Ascend>,
            dim: usize,
            indices: IntTensor<Ascend>,
        ) -> IntTensor<Ascend> {
            run("int_select", index::select_index(&tensor, dim, &indices))
        }

        fn int_repeat_dim(
            tensor: IntTensor<Ascend>,
            dim: usize,
            times: usize,
        ) -> IntTensor<Ascend> {
            run("int_repeat_dim", index::repeat_dim(&tensor, dim, times))
        }

        fn int_cat(tensors: Vec<IntTensor<Ascend>>, dim: usize) -> IntTensor<Ascend> {
            run("int_cat", copy::cat(cores(&tensors), dim))
        }

        fn int_equal(
            lhs: IntTensor<Ascend>,
            rhs: IntTensor<Ascend>,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            bool_out(
                out_dtype,
                "int_equal",
                compare::compare(Compare::Eq, &lhs, &rhs),
            )
        }

        fn int_not_equal(
            lhs: IntTensor<Ascend>,
            rhs: IntTensor<Ascend>,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            bool_out(
                out_dtype,
                "int_not_equal",
                compare::compare(Compare::Ne, &lhs, &rhs),
            )
        }

        fn int_equal_elem(
            lhs: IntTensor<Ascend>,
            rhs: Scalar,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            let s = host_scalar(rhs, lhs.dtype());
            bool_out(
                out_dtype,
                "int_equal_elem",
                compare::compare_scalar(Compare::Eq, &lhs, s),
            )
        }

        fn int_not_equal_elem(
            lhs: IntTensor<Ascend>,
            rhs: Scalar,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            let s = host_scalar(rhs, lhs.dtype());
            bool_out(
                out_dtype,
                "int_not_equal_elem",
                compare::compare_scalar(Compare::Ne, &lhs, s),
            )
        }

        fn int_greater(
            lhs: IntTensor<Ascend>,
            rhs: IntTensor<Ascend>,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            bool_out(
                out_dtype,
                "int_greater",
                compare::compare(Compare::Gt, &lhs, &rhs),
            )
        }

        fn int_greater_elem(
            lhs: IntTensor<Ascend>,
            rhs: Scalar,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            let s = host_scalar(rhs, lhs.dtype());
            bool_out(
                out_dtype,
                "int_greater_elem",
                compare::compare_scalar(Compare::Gt, &lhs, s),
            )
        }

        fn int_greater_equal(
            lhs: IntTensor<Ascend>,
            rhs: IntTensor<Ascend>,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            bool_out(
                out_dtype,
                "int_greater_equal",
                compare::compare(Compare::Ge, &lhs, &rhs),
            )
        }

        fn int_greater_equal_elem(
            lhs: IntTensor<Ascend>,
            rhs: Scalar,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            let s = host_scalar(rhs, lhs.dtype());
            bool_out(
                out_dtype,
                "int_greater_equal_elem",
                compare::compare_scalar(Compare::Ge, &lhs, s),
            )
        }

        fn int_lower(
            lhs: IntTensor<Ascend>,
            rhs: IntTensor<Ascend>,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            bool_out(
                out_dtype,
                "int_lower",
                compare::compare(Compare::Lt, &lhs, &rhs),
            )
        }

        fn int_lower_elem(
            lhs: IntTensor<Ascend>,
            rhs: Scalar,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            let s = host_scalar(rhs, lhs.dtype());
            bool_out(
                out_dtype,
                "int_lower_elem",
                compare::compare_scalar(Compare::Lt, &lhs, s),
            )
        }

        fn int_lower_equal(
            lhs: IntTensor<Ascend>,
            rhs: IntTensor<Ascend>,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            bool_out(
                out_dtype,
                "int_lower_equal",
                compare::compare(Compare::Le, &lhs, &rhs),
            )
        }

        fn int_lower_equal_elem(
            lhs: IntTensor<Ascend>,
            rhs: Scalar,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            let s = host_scalar(rhs, lhs.dtype());
            bool_out(
                out_dtype,
                "int_lower_equal_elem",
                compare::compare_scalar(Compare::Le, &lhs, s),
            )
        }

        fn int_add(lhs: IntTensor<Ascend>, rhs: IntTensor<Ascend>) -> IntTensor<Ascend> {
            binary(BinaryOp::Add, lhs, rhs)
        }

        fn int_add_scalar(lhs: IntTensor<Ascend>, rhs: Scalar) -> IntTensor<Ascend> {
            binary_scalar(BinaryOp::Add, lhs, rhs)
        }

        fn int_powi(lhs: IntTensor<Ascend>, rhs: IntTensor<Ascend>) -> IntTensor<Ascend> {
            run("int_powi", math::pow(&lhs, &rhs))
        }

        fn int_powi_scalar_impl(lhs: IntTensor<Ascend>, rhs: Scalar) -> IntTensor<Ascend> {
            let s = host_scalar(rhs, lhs.dtype());
            run("int_powi_scalar", math::pow_scalar(&lhs, s))
        }

        fn int_clamp_min(tensor: IntTensor<Ascend>, min: Scalar) -> IntTensor<Ascend> {
            let min = host_scalar(min, tensor.dtype());
            run("int_clamp_min", math::clamp(&tensor, Some(min), None))
        }

        fn int_clamp_max(tensor: IntTensor<Ascend>, max: Scalar) -> IntTensor<Ascend> {
            let max = host_scalar(max, tensor.dtype());
            run("int_clamp_max", math::clamp(&tensor, None, Some(max)))
        }

        fn int_clamp(tensor: IntTensor<Ascend>, min: Scalar, max: Scalar) -> IntTensor<Ascend> {
            let (min, max) = (
                host_scalar(min, tensor.dtype()),
                host_scalar(max, tensor.dtype()),
            );
            run("int_clamp", math::clamp(&tensor, Some(min), Some(max)))
        }

        fn int_sub(lhs: IntTensor<Ascend>, rhs: IntTensor<Ascend>) -> IntTensor<Ascend> {
            binary(BinaryOp::Sub, lhs, rhs)
        }

        fn int_sub_scalar(lhs: IntTensor<Ascend>, rhs: Scalar) -> IntTensor<Ascend> {
            binary_scalar(BinaryOp::Sub, lhs, rhs)
        }

        fn int_mul(lhs: IntTensor<Ascend>, rhs: IntTensor<Ascend>) -> IntTensor<Ascend> {
            binary(BinaryOp::Mul, lhs, rhs)
        }

        fn int_mul_scalar(lhs: IntTensor<Ascend>, rhs: Scalar) -> IntTensor<Ascend> {
            binary_scalar(BinaryOp::Mul, lhs, rhs)
        }

        fn int_div(lhs: IntTensor<Ascend>, rhs: IntTensor<Ascend>) -> IntTensor<Ascend> {
            binary(BinaryOp::Div, lhs, rhs)
        }

        fn int_div_scalar(lhs: IntTensor<Ascend>, rhs: Scalar) -> IntTensor<Ascend> {
            binary_scalar(BinaryOp::Div, lhs, rhs)
        }

        fn int_remainder(lhs: IntTensor<Ascend>, rhs: IntTensor<Ascend>) -> IntTensor<Ascend> {
            run("int_remainder", math::remainder(&lhs, &rhs))
        }

        fn int_remainder_scalar(lhs: IntTensor<Ascend>, rhs: Scalar) -> IntTensor<Ascend> {
            let s = host_scalar(rhs, lhs.dtype());
            run("int_remainder_scalar", math::remainder_scalar(&lhs, s))
        }

        fn int_matmul(lhs: IntTensor<Ascend>, rhs: IntTensor<Ascend>) -> IntTensor<Ascend> {
            run("int_matmul", matmul::matmul(&lhs, &rhs))
        }

        fn int_neg(tensor: IntTensor<Ascend>) -> IntTensor<Ascend> {
            run("int_neg", math::unary(Unary::Neg, &tensor))
        }

        fn int_zeros(shape: Shape, device: &Device<Ascend>, dtype: IntDType) -> IntTensor<Ascend> {
            run(
                "int_zeros",
                creation::zeros(&context(device), shape.to_vec(), int_type(dtype)),
            )
        }

        fn int_ones(shape: Shape, device: &Device<Ascend>, dtype: IntDType) -> IntTensor<Ascend> {
            run(
                "int_ones",
                creation::ones(&context(device), shape.to_vec(), int_type(dtype)),
            )
        }

        fn int_full(
            shape: Shape,
            fill_value: Scalar,
            device: &Device<Ascend>,
            dtype: IntDType,
        ) -> IntTensor<Ascend> {
            let dtype = int_type(dtype);
            run(
                "int_full",
                creation::full(
                    &context(device),
                    shape.to_vec(),
                    dtype,
                    host_scalar(fill_value, dtype),
                ),
            )
        }

        fn int_sum(tensor: IntTensor<Ascend>) -> IntTensor<Ascend> {
            run("int_sum", reduce::reduce(Reduce::Sum, &tensor, None))
        }

        fn int_sum_dim(tensor: IntTensor<Ascend>, dim: usize) -> IntTensor<Ascend> {
            run(
                "int_sum_dim",
                reduce::reduce(Reduce::Sum, &tensor, Some(dim)),
            )
        }

        fn int_prod(tensor: IntTensor<Ascend>) -> IntTensor<Ascend> {
            run("int_prod", reduce::reduce(Reduce::Prod, &tensor, None))
        }

        fn int_prod_dim(tensor: IntTensor<Ascend>, dim: usize) -> IntTensor<Ascend> {
            run(
                "int_prod_dim",
                reduce::reduce(Reduce::Prod, &tensor, Some(dim)),
            )
        }

        fn int_mean_dim(tensor: IntTensor<Ascend>, dim: usize) -> IntTensor<Ascend> {
            run(
                "int_mean_dim",
                reduce::reduce(Reduce::Mean, &tensor, Some(dim)),
            )
        }

        fn int_cumsum(tensor: IntTensor<Ascend>, dim: usize) -> IntTensor<Ascend> {
            run("int_cumsum", reduce::scan(Scan::Sum, &tensor, dim))
        }

        fn int_cumprod(tensor: IntTensor<Ascend>, dim: usize) -> IntTensor<Ascend> {
            run("int_cumprod", reduce::scan(Scan::Prod, &tensor, dim))
        }

        fn int_cummin(tensor: IntTensor<Ascend>, dim: usize) -> IntTensor<Ascend> {
            run("int_cummin", reduce::scan(Scan::Min, &tensor, dim))
        }

        fn int_cummax(tensor: IntTensor<Ascend>, dim: usize) -> IntTensor<Ascend> {
            run("int_cummax", reduce::scan(Scan::Max, &tensor, dim))
        }

        fn int_argmax(tensor: IntTensor<Ascend>, dim: usize) -> IntTensor<Ascend> {
            run(
                "int_argmax",
                reduce::arg(&tensor, dim, true, index_dtype(&tensor)),
            )
        }

        fn int_argtopk(tensor: IntTensor<Ascend>, dim: usize, k: usize) -> IntTensor<Ascend> {
            indices(
                "int_argtopk",
                sort::topk(&tensor, dim, k),
                index_dtype(&tensor),
            )
        }

        fn int_topk(tensor: IntTensor<Ascend>, dim: usize, k: usize) -> IntTensor<Ascend> {
            run("int_topk", sort::topk(&tensor, dim, k)).0
        }

        fn int_argmin(tensor: IntTensor<Ascend>, dim: usize) -> IntTensor<Ascend> {
            run(
                "int_argmin",
                reduce::arg(&tensor, dim, false, index_dtype(&tensor)),
            )
        }

        fn int_max(tensor: IntTensor<Ascend>) -> IntTensor<Ascend> {
            run("int_max", reduce::reduce(Reduce::Max, &tensor, None))
        }

        fn int_max_dim(tensor: IntTensor<Ascend>, dim: usize) -> IntTensor<Ascend> {
            run(
                "int_max_dim",
                reduce::reduce(Reduce::Max, &tensor, Some(dim)),
            )
        }

        fn int_min(tensor: IntTensor<Ascend>) -> IntTensor<Ascend> {
            run("int_min", reduce::reduce(Reduce::Min, &tensor, None))
        }

        fn int_min_dim(tensor: IntTensor<Ascend>, dim: usize) -> IntTensor<Ascend> {
            run(
                "int_min_dim",
                reduce::reduce(Reduce::Min, &tensor, Some(dim)),
            )
        }

        fn int_abs(tensor: IntTensor<Ascend>) -> IntTensor<Ascend> {
            run("int_abs", math::unary(Unary::Abs, &tensor))
        }

        fn int_swap_dims(tensor: IntTensor<Ascend>, dim1: usize, dim2: usize) -> IntTensor<Ascend> {
            let layout = tensor.layout().swap_dims(dim1, dim2);
            tensor.with_layout(layout).into()
        }

        fn int_permute(tensor: IntTensor<Ascend>, axes: &[usize]) -> IntTensor<Ascend> {
            let layout = tensor.layout().permute(axes);
            tensor.with_layout(layout).into()
        }

        fn int_flip(tensor: IntTensor<Ascend>, axes: &[usize]) -> IntTensor<Ascend> {
            run("int_flip", copy::flip(&tensor, axes))
        }

        fn int_random(
            shape: Shape,
            distribution: Distribution,
            device: &Device<Ascend>,
            dtype: IntDType,
        ) -> IntTensor<Ascend> {
            random(shape, distribution, device, int_type(dtype))
        }

        fn int_any(tensor: IntTensor<Ascend>, out_dtype: BoolDType) -> BoolTensor<Ascend> {
            bool_out(
                out_dtype,
                "int_any",
                reduce::reduce(Reduce::Any, &tensor, None),
            )
        }

        fn int_any_dim(
            tensor: IntTensor<Ascend>,
            dim: usize,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            bool_out(
                out_dtype,
                "int_any_dim",
                reduce::reduce(Reduce::Any, &tensor, Some(dim)),
            )
        }

        fn int_all(tensor: IntTensor<Ascend>, out_dtype: BoolDType) -> BoolTensor<Ascend> {
            bool_out(
                out_dtype,
                "int_all",
                reduce::reduce(Reduce::All, &tensor, None),
            )
        }

        fn int_all_dim(
            tensor: IntTensor<Ascend>,
            dim: usize,
            out_dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            bool_out(
                out_dtype,
                "int_all_dim",
                reduce::reduce(Reduce::All, &tensor, Some(dim)),
            )
        }

        fn int_sign(tensor: IntTensor<Ascend>) -> IntTensor<Ascend> {
            run("int_sign", math::unary(Unary::Sign, &tensor))
        }

        fn int_expand(tensor: IntTensor<Ascend>, shape: Shape) -> IntTensor<Ascend> {
            expand(tensor, shape)
        }

        fn int_sort(tensor: IntTensor<Ascend>, dim: usize, descending: bool) -> IntTensor<Ascend> {
            run("int_sort", sort::sort(&tensor, dim, descending)).0
        }

        fn int_sort_with_indices(
            tensor: IntTensor<Ascend>,
            dim: usize,
            descending: bool,
        ) -> (IntTensor<Ascend>, IntTensor<Ascend>) {
            const OP: &str = "int_sort_with_indices";
            let (values, order) = run(OP, sort::sort(&tensor, dim, descending));
            (values, run(OP, copy::cast(&order, index_dtype(&tensor))))
        }

        fn int_argsort(
            tensor: IntTensor<Ascend>,
            dim: usize,
            descending: bool,
        ) -> IntTensor<Ascend> {
            indices(
                "int_argsort",
                sort::sort(&tensor, dim, descending),
                index_dtype(&tensor),
            )
        }

        fn bitwise_and(lhs: IntTensor<Ascend>, rhs: IntTensor<Ascend>) -> IntTensor<Ascend> {
            run("bitwise_and", compare::bitwise(Logical::And, &lhs, &rhs))
        }

        fn bitwise_and_scalar(lhs: IntTensor<Ascend>, rhs: Scalar) -> IntTensor<Ascend> {
            let s = host_scalar(rhs, lhs.dtype());
            run(
                "bitwise_and_scalar",
                compare::bitwise_scalar(Logical::And, &lhs, s),
            )
        }

        fn bitwise_or(lhs: IntTensor<Ascend>, rhs: IntTensor<Ascend>) -> IntTensor<Ascend> {
            run("bitwise_or", compare::bitwise(Logical::Or, &lhs, &rhs))
        }

        fn bitwise_or_scalar(lhs: IntTensor<Ascend>, rhs: Scalar) -> IntTensor<Ascend> {
            let s = host_scalar(rhs, lhs.dtype());
            run(
                "bitwise_or_scalar",
                compare::bitwise_scalar(Logical::Or, &lhs, s),
            )
        }

        fn bitwise_xor(lhs: IntTensor<Ascend>, rhs: IntTensor<Ascend>) -> IntTensor<Ascend> {
            run("bitwise_xor", compare::bitwise(Logical::Xor, &lhs, &rhs))
        }

        fn bitwise_xor_scalar(lhs: IntTensor<Ascend>, rhs: Scalar) -> IntTensor<Ascend> {
            let s = host_scalar(rhs, lhs.dtype());
            run(
                "bitwise_xor_scalar",
                compare::bitwise_scalar(Logical::Xor, &lhs, s),
            )
        }

        fn bitwise_not(tensor: IntTensor<Ascend>) -> IntTensor<Ascend> {
            run("bitwise_not", math::unary(Unary::BitwiseNot, &tensor))
        }

        fn bitwise_left_shift(lhs: IntTensor<Ascend>, rhs: IntTensor<Ascend>) -> IntTensor<Ascend> {
            run("bitwise_left_shift", compare::shift_left(&lhs, &rhs))
        }

        fn bitwise_left_shift_scalar(lhs: IntTensor<Ascend>, rhs: Scalar) -> IntTensor<Ascend> {
            let s = scalar_tensor("bitwise_left_shift_scalar", &lhs, rhs);
            run("bitwise_left_shift_scalar", compare::shift_left(&lhs, &s))
        }

        fn bitwise_right_shift(
            lhs: IntTensor<Ascend>,
            rhs: IntTensor<Ascend>,
        ) -> IntTensor<Ascend> {
            run("bitwise_right_shift", compare::shift_right(&lhs, &rhs))
        }

        fn bitwise_right_shift_scalar(lhs: IntTensor<Ascend>, rhs: Scalar) -> IntTensor<Ascend> {
            let s = scalar_tensor("bitwise_right_shift_scalar", &lhs, rhs);
            run("bitwise_right_shift_scalar", compare::shift_right(&lhs, &s))
        }

        fn int_cast(tensor: IntTensor<Ascend>, dtype: IntDType) -> IntTensor<Ascend> {
            run("int_cast", copy::cast(&tensor, int_type(dtype)))
        }

        fn int_unfold(
            tensor: IntTensor<Ascend>,
            dim: usize,
            size: usize,
            step: usize,
        ) -> IntTensor<Ascend> {
            run("int_unfold", index::unfold(&tensor, dim, size, step))
        }
    };
}
