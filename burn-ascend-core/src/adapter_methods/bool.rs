//! The shared part of Burn's `BoolTensorOps`.

/// The `BoolTensorOps` methods whose text is the same for Burn 0.21 and 0.22, for each adapter's
/// `impl BoolTensorOps<Ascend> for Ascend` (the methods that differ stand beside the invocation).
#[macro_export]
macro_rules! adapter_bool_ops {
    () => {
        fn bool_empty(
            shape: Shape,
            device: &Device<Ascend>,
            dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            run(
                "bool_empty",
                CoreTensor::empty(&context(device), shape.to_vec(), bool_type(dtype)),
            )
        }

        fn bool_zeros(
            shape: Shape,
            device: &Device<Ascend>,
            dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            run(
                "bool_zeros",
                creation::zeros(&context(device), shape.to_vec(), bool_type(dtype)),
            )
        }

        fn bool_ones(
            shape: Shape,
            device: &Device<Ascend>,
            dtype: BoolDType,
        ) -> BoolTensor<Ascend> {
            run(
                "bool_ones",
                creation::ones(&context(device), shape.to_vec(), bool_type(dtype)),
            )
        }

        async fn bool_into_data(tensor: BoolTensor<Ascend>) -> Result<TensorData, ExecutionError> {
            into_data(tensor)
        }

        fn bool_from_data(data: TensorData, device: &Device<Ascend>) -> BoolTensor<Ascend> {
            from_data(data, device, Kind::Bool)
        }

        fn bool_into_int(tensor: BoolTensor<Ascend>, out_dtype: IntDType) -> IntTensor<Ascend> {
            run("bool_into_int", copy::cast(&tensor, int_type(out_dtype)))
        }

        fn bool_into_float(
            tensor: BoolTensor<Ascend>,
            out_dtype: FloatDType,
        ) -> FloatTensor<Ascend> {
            run(
                "bool_into_float",
                copy::cast(&tensor, float_type(out_dtype)),
            )
        }

        fn bool_to_device(
            tensor: BoolTensor<Ascend>,
            device: &Device<Ascend>,
        ) -> BoolTensor<Ascend> {
            run("bool_to_device", copy::to_device(&tensor, &device.into()))
        }

        fn bool_reshape(tensor: BoolTensor<Ascend>, shape: Shape) -> BoolTensor<Ascend> {
            run("bool_reshape", copy::reshape_view(&tensor, shape.to_vec()))
        }

        fn bool_slice(tensor: BoolTensor<Ascend>, slices: &[Slice]) -> BoolTensor<Ascend> {
            run(
                "bool_slice",
                copy::slice(&tensor, &dim_slices(tensor.shape(), slices)),
            )
        }

        fn bool_slice_assign(
            tensor: BoolTensor<Ascend>,
            slices: &[Slice],
            value: BoolTensor<Ascend>,
        ) -> BoolTensor<Ascend> {
            run(
                "bool_slice_assign",
                copy::slice_assign(&tensor, &dim_slices(tensor.shape(), slices), &value),
            )
        }

        fn bool_mask_where(
            tensor: BoolTensor<Ascend>,
            mask: BoolTensor<Ascend>,
            value: BoolTensor<Ascend>,
        ) -> BoolTensor<Ascend> {
            run("bool_mask_where", compare::select(&mask, &value, &tensor))
        }

        fn bool_mask_fill(
            tensor: BoolTensor<Ascend>,
            mask: BoolTensor<Ascend>,
            value: Scalar,
        ) -> BoolTensor<Ascend> {
            let v = host_scalar(value, tensor.dtype());
            run("bool_mask_fill", compare::mask_fill(&tensor, &mask, v))
        }

        fn bool_gather(
            dim: usize,
            tensor: BoolTensor<Ascend>,
            indices: IntTensor<Ascend>,
        ) -> BoolTensor<Ascend> {
            run("bool_gather", index::gather(dim, &tensor, &indices))
        }

        fn bool_scatter_or(
            dim: usize,
            tensor: BoolTensor<Ascend>,
            indices: IntTensor<Ascend>,
            value: BoolTensor<Ascend>,
        ) -> BoolTensor<Ascend> {
            run(
                "bool_scatter_or",
                update::scatter_or(dim, &tensor, &indices, &value),
            )
        }

        fn bool_select(
            tensor: BoolTensor<Ascend>,
            dim: usize,
            indices: IntTensor<Ascend>,
        ) -> BoolTensor<Ascend> {
            run("bool_select", index::select_index(&tensor, dim, &indices))
        }

        fn bool_select_or(
            tensor: BoolTensor<Ascend>,
            dim: usize,
            indices: IntTensor<Ascend>,
            value: BoolTensor<Ascend>,
        ) -> BoolTensor<Ascend> {
            run(
                "bool_select_or",
                update::select_or(&tensor, dim, &indices, &value),
            )
        }

        fn bool_repeat_dim(
            tensor: BoolTensor<Ascend>,
            dim: usize,
            times: usize,
        ) -> BoolTensor<Ascend> {
            run("bool_repeat_dim", index::repeat_dim(&tensor, dim, times))
        }

        fn bool_cat(tensors: Vec<BoolTensor<Ascend>>, dim: usize) -> BoolTensor<Ascend> {
            run("bool_cat", copy::cat(cores(&tensors), dim))
        }

        fn bool_equal(lhs: BoolTensor<Ascend>, rhs: BoolTensor<Ascend>) -> BoolTensor<Ascend> {
            run("bool_equal", compare::compare(Compare::Eq, &lhs, &rhs))
        }

        fn bool_equal_elem(lhs: BoolTensor<Ascend>, rhs: Scalar) -> BoolTensor<Ascend> {
            run(
                "bool_equal_elem",
                compare::compare_scalar(Compare::Eq, &lhs, host_scalar(rhs, DataType::Bool)),
            )
        }

        fn bool_not(tensor: BoolTensor<Ascend>) -> BoolTensor<Ascend> {
            run("bool_not", compare::logical_not(&tensor))
        }

        fn bool_and(lhs: BoolTensor<Ascend>, rhs: BoolTensor<Ascend>) -> BoolTensor<Ascend> {
            run("bool_and", compare::logical(Logical::And, &lhs, &rhs))
        }

        fn bool_or(lhs: BoolTensor<Ascend>, rhs: BoolTensor<Ascend>) -> BoolTensor<Ascend> {
            run("bool_or", compare::logical(Logical::Or, &lhs, &rhs))
        }

        fn bool_xor(lhs: BoolTensor<Ascend>, rhs: BoolTensor<Ascend>) -> BoolTensor<Ascend> {
            run("bool_xor", compare::logical(Logical::Xor, &lhs, &rhs))
        }

        fn bool_swap_dims(
            tensor: BoolTensor<Ascend>,
            dim1: usize,
            dim2: usize,
        ) -> BoolTensor<Ascend> {
            let layout = tensor.layout().swap_dims(dim1, dim2);
            tensor.with_layout(layout).into()
        }

        fn bool_permute(tensor: BoolTensor<Ascend>, axes: &[usize]) -> BoolTensor<Ascend> {
            let layout = tensor.layout().permute(axes);
            tensor.with_layout(layout).into()
        }

        fn bool_flip(tensor: BoolTensor<Ascend>, axes: &[usize]) -> BoolTensor<Ascend> {
            run("bool_flip", copy::flip(&tensor, axes))
        }

        fn bool_any(tensor: BoolTensor<Ascend>) -> BoolTensor<Ascend> {
            run("bool_any", reduce::reduce(Reduce::Any, &tensor, None))
        }

        fn bool_any_dim(tensor: BoolTensor<Ascend>, dim: usize) -> BoolTensor<Ascend> {
            run(
                "bool_any_dim",
                reduce::reduce(Reduce::Any, &tensor, Some(dim)),
            )
        }

        fn bool_all(tensor: BoolTensor<Ascend>) -> BoolTensor<Ascend> {
            run("bool_all", reduce::reduce(Reduce::All, &tensor, None))
        }

        fn bool_all_dim(tensor: BoolTensor<Ascend>, dim: usize) -> BoolTensor<Ascend> {
            run(
                "bool_all_dim",
                reduce::reduce(Reduce::All, &tensor, Some(dim)),
            )
        }

        async fn bool_argwhere(
            tensor: BoolTensor<Ascend>,
            out_dtype: IntDType,
        ) -> IntTensor<Ascend> {
            let found = run("bool_argwhere", index::argwhere(&tensor));
            run("bool_argwhere", copy::cast(&found, int_type(out_dtype)))
        }

        fn bool_expand(tensor: BoolTensor<Ascend>, shape: Shape) -> BoolTensor<Ascend> {
            expand(tensor, shape)
        }

        fn bool_unfold(
            tensor: BoolTensor<Ascend>,
            dim: usize,
            size: usize,
            step: usize,
        ) -> BoolTensor<Ascend> {
            run("bool_unfold", index::unfold(&tensor, dim, size, step))
        }
    };
}
