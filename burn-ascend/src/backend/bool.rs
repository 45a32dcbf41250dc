//! `BoolTensorOps` for [`Ascend`]: one line per method onto the op-mapping layer.

use super::*;

impl BoolTensorOps<Ascend> for Ascend {
    fn bool_empty(shape: Shape, device: &Device<Ascend>, dtype: BoolDType) -> BoolTensor<Ascend> {
        run(
            "bool_empty",
            AscendTensor::empty(&context(device), shape.to_vec(), bool_type(dtype)),
        )
    }

    fn bool_zeros(shape: Shape, device: &Device<Ascend>, dtype: BoolDType) -> BoolTensor<Ascend> {
        run(
            "bool_zeros",
            creation::zeros(&context(device), shape.to_vec(), bool_type(dtype)),
        )
    }

    fn bool_ones(shape: Shape, device: &Device<Ascend>, dtype: BoolDType) -> BoolTensor<Ascend> {
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

    fn bool_into_float(tensor: BoolTensor<Ascend>, out_dtype: FloatDType) -> FloatTensor<Ascend> {
        run(
            "bool_into_float",
            copy::cast(&tensor, float_type(out_dtype)),
        )
    }

    fn bool_device(tensor: &BoolTensor<Ascend>) -> Device<Ascend> {
        tensor.ctx().device()
    }

    fn bool_to_device(tensor: BoolTensor<Ascend>, device: &Device<Ascend>) -> BoolTensor<Ascend> {
        run("bool_to_device", copy::to_device(&tensor, device))
    }

    fn bool_reshape(tensor: BoolTensor<Ascend>, shape: Shape) -> BoolTensor<Ascend> {
        run("bool_reshape", copy::reshape(&tensor, shape.to_vec()))
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
        _tensor: BoolTensor<Ascend>,
        _mask: BoolTensor<Ascend>,
        _value: BoolTensor<Ascend>,
    ) -> BoolTensor<Ascend> {
        unsupported("bool_mask_where")
    }

    fn bool_mask_fill(
        _tensor: BoolTensor<Ascend>,
        _mask: BoolTensor<Ascend>,
        _value: Scalar,
    ) -> BoolTensor<Ascend> {
        unsupported("bool_mask_fill")
    }

    fn bool_gather(
        _dim: usize,
        _tensor: BoolTensor<Ascend>,
        _indices: IntTensor<Ascend>,
    ) -> BoolTensor<Ascend> {
        unsupported("bool_gather")
    }

    fn bool_scatter_or(
        _dim: usize,
        _tensor: BoolTensor<Ascend>,
        _indices: IntTensor<Ascend>,
        _value: BoolTensor<Ascend>,
    ) -> BoolTensor<Ascend> {
        unsupported("bool_scatter_or")
    }

    fn bool_select(
        _tensor: BoolTensor<Ascend>,
        _dim: usize,
        _indices: IntTensor<Ascend>,
    ) -> BoolTensor<Ascend> {
        unsupported("bool_select")
    }

    fn bool_select_or(
        _tensor: BoolTensor<Ascend>,
        _dim: usize,
        _indices: IntTensor<Ascend>,
        _value: BoolTensor<Ascend>,
    ) -> BoolTensor<Ascend> {
        unsupported("bool_select_or")
    }

    fn bool_cat(tensors: Vec<BoolTensor<Ascend>>, dim: usize) -> BoolTensor<Ascend> {
        run("bool_cat", copy::cat(&tensors, dim))
    }

    fn bool_equal(_lhs: BoolTensor<Ascend>, _rhs: BoolTensor<Ascend>) -> BoolTensor<Ascend> {
        unsupported("bool_equal")
    }

    fn bool_equal_elem(_lhs: BoolTensor<Ascend>, _rhs: Scalar) -> BoolTensor<Ascend> {
        unsupported("bool_equal_elem")
    }

    fn bool_not(_tensor: BoolTensor<Ascend>) -> BoolTensor<Ascend> {
        unsupported("bool_not")
    }

    fn bool_and(_lhs: BoolTensor<Ascend>, _rhs: BoolTensor<Ascend>) -> BoolTensor<Ascend> {
        unsupported("bool_and")
    }

    fn bool_or(_lhs: BoolTensor<Ascend>, _rhs: BoolTensor<Ascend>) -> BoolTensor<Ascend> {
        unsupported("bool_or")
    }

    fn bool_swap_dims(tensor: BoolTensor<Ascend>, dim1: usize, dim2: usize) -> BoolTensor<Ascend> {
        let layout = tensor.layout().swap_dims(dim1, dim2);
        tensor.with_layout(layout)
    }

    fn bool_permute(tensor: BoolTensor<Ascend>, axes: &[usize]) -> BoolTensor<Ascend> {
        let layout = tensor.layout().permute(axes);
        tensor.with_layout(layout)
    }

    fn bool_flip(tensor: BoolTensor<Ascend>, axes: &[usize]) -> BoolTensor<Ascend> {
        run("bool_flip", copy::flip(&tensor, axes))
    }

    async fn bool_argwhere(_tensor: BoolTensor<Ascend>, _out_dtype: IntDType) -> IntTensor<Ascend> {
        unsupported("bool_argwhere")
    }

    fn bool_expand(tensor: BoolTensor<Ascend>, shape: Shape) -> BoolTensor<Ascend> {
        expand(tensor, shape)
    }

    fn bool_unfold(
        _tensor: BoolTensor<Ascend>,
        _dim: usize,
        _size: usize,
        _step: usize,
    ) -> BoolTensor<Ascend> {
        unsupported("bool_unfold")
    }
}
