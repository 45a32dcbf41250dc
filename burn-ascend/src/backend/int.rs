//! `IntTensorOps` for [`Ascend`]: one line per method onto the op-mapping layer.

use super::*;

impl IntTensorOps<Ascend> for Ascend {
    fn int_empty(shape: Shape, device: &Device<Ascend>, dtype: IntDType) -> IntTensor<Ascend> {
        run(
            "int_empty",
            AscendTensor::empty(&context(device), shape.to_vec(), int_type(dtype)),
        )
    }

    async fn int_into_data(tensor: IntTensor<Ascend>) -> Result<TensorData, ExecutionError> {
        into_data(tensor)
    }

    fn int_from_data(data: TensorData, device: &Device<Ascend>) -> IntTensor<Ascend> {
        from_data(data, device, Kind::Int)
    }

    fn int_device(tensor: &IntTensor<Ascend>) -> Device<Ascend> {
        tensor.ctx().device()
    }

    fn int_to_device(tensor: IntTensor<Ascend>, device: &Device<Ascend>) -> IntTensor<Ascend> {
        run("int_to_device", copy::to_device(&tensor, device))
    }

    fn int_reshape(tensor: IntTensor<Ascend>, shape: Shape) -> IntTensor<Ascend> {
        run("int_reshape", copy::reshape(&tensor, shape.to_vec()))
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
        _tensor: IntTensor<Ascend>,
        _mask: BoolTensor<Ascend>,
        _value: IntTensor<Ascend>,
    ) -> IntTensor<Ascend> {
        unsupported("int_mask_where")
    }

    fn int_mask_fill(
        _tensor: IntTensor<Ascend>,
        _mask: BoolTensor<Ascend>,
        _value: Scalar,
    ) -> IntTensor<Ascend> {
        unsupported("int_mask_fill")
    }

    fn int_gather(
        _dim: usize,
        _tensor: IntTensor<Ascend>,
        _indices: IntTensor<Ascend>,
    ) -> IntTensor<Ascend> {
        unsupported("int_gather")
    }

    fn int_scatter_add(
        _dim: usize,
        _tensor: IntTensor<Ascend>,
        _indices: IntTensor<Ascend>,
        _value: IntTensor<Ascend>,
    ) -> IntTensor<Ascend> {
        unsupported("int_scatter_add")
    }

    fn int_select(
        _tensor: IntTensor<Ascend>,
        _dim: usize,
        _indices: IntTensor<Ascend>,
    ) -> IntTensor<Ascend> {
        unsupported("int_select")
    }

    fn int_select_add(
        _tensor: IntTensor<Ascend>,
        _dim: usize,
        _indices: IntTensor<Ascend>,
        _value: IntTensor<Ascend>,
    ) -> IntTensor<Ascend> {
        unsupported("int_select_add")
    }

    fn int_cat(tensors: Vec<IntTensor<Ascend>>, dim: usize) -> IntTensor<Ascend> {
        run("int_cat", copy::cat(&tensors, dim))
    }

    fn int_equal(
        _lhs: IntTensor<Ascend>,
        _rhs: IntTensor<Ascend>,
        _out_dtype: BoolDType,
    ) -> BoolTensor<Ascend> {
        unsupported("int_equal")
    }

    fn int_equal_elem(
        _lhs: IntTensor<Ascend>,
        _rhs: Scalar,
        _out_dtype: BoolDType,
    ) -> BoolTensor<Ascend> {
        unsupported("int_equal_elem")
    }

    fn int_greater(
        _lhs: IntTensor<Ascend>,
        _rhs: IntTensor<Ascend>,
        _out_dtype: BoolDType,
    ) -> BoolTensor<Ascend> {
        unsupported("int_greater")
    }

    fn int_greater_elem(
        _lhs: IntTensor<Ascend>,
        _rhs: Scalar,
        _out_dtype: BoolDType,
    ) -> BoolTensor<Ascend> {
        unsupported("int_greater_elem")
    }

    fn int_greater_equal(
        _lhs: IntTensor<Ascend>,
        _rhs: IntTensor<Ascend>,
        _out_dtype: BoolDType,
    ) -> BoolTensor<Ascend> {
        unsupported("int_greater_equal")
    }

    fn int_greater_equal_elem(
        _lhs: IntTensor<Ascend>,
        _rhs: Scalar,
        _out_dtype: BoolDType,
    ) -> BoolTensor<Ascend> {
        unsupported("int_greater_equal_elem")
    }

    fn int_lower(
        _lhs: IntTensor<Ascend>,
        _rhs: IntTensor<Ascend>,
        _out_dtype: BoolDType,
    ) -> BoolTensor<Ascend> {
        unsupported("int_lower")
    }

    fn int_lower_elem(
        _lhs: IntTensor<Ascend>,
        _rhs: Scalar,
        _out_dtype: BoolDType,
    ) -> BoolTensor<Ascend> {
        unsupported("int_lower_elem")
    }

    fn int_lower_equal(
        _lhs: IntTensor<Ascend>,
        _rhs: IntTensor<Ascend>,
        _out_dtype: BoolDType,
    ) -> BoolTensor<Ascend> {
        unsupported("int_lower_equal")
    }

    fn int_lower_equal_elem(
        _lhs: IntTensor<Ascend>,
        _rhs: Scalar,
        _out_dtype: BoolDType,
    ) -> BoolTensor<Ascend> {
        unsupported("int_lower_equal_elem")
    }

    fn int_add(lhs: IntTensor<Ascend>, rhs: IntTensor<Ascend>) -> IntTensor<Ascend> {
        binary(BinaryOp::Add, lhs, rhs)
    }

    fn int_add_scalar(lhs: IntTensor<Ascend>, rhs: Scalar) -> IntTensor<Ascend> {
        binary_scalar(BinaryOp::Add, lhs, rhs)
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

    fn int_remainder(_lhs: IntTensor<Ascend>, _rhs: IntTensor<Ascend>) -> IntTensor<Ascend> {
        unsupported("int_remainder")
    }

    fn int_remainder_scalar(_lhs: IntTensor<Ascend>, _rhs: Scalar) -> IntTensor<Ascend> {
        unsupported("int_remainder_scalar")
    }

    fn int_matmul(lhs: IntTensor<Ascend>, rhs: IntTensor<Ascend>) -> IntTensor<Ascend> {
        run("int_matmul", matmul::matmul(&lhs, &rhs))
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

    fn int_sum(_tensor: IntTensor<Ascend>) -> IntTensor<Ascend> {
        unsupported("int_sum")
    }

    fn int_sum_dim(_tensor: IntTensor<Ascend>, _dim: usize) -> IntTensor<Ascend> {
        unsupported("int_sum_dim")
    }

    fn int_prod(_tensor: IntTensor<Ascend>) -> IntTensor<Ascend> {
        unsupported("int_prod")
    }

    fn int_prod_dim(_tensor: IntTensor<Ascend>, _dim: usize) -> IntTensor<Ascend> {
        unsupported("int_prod_dim")
    }

    fn int_mean_dim(_tensor: IntTensor<Ascend>, _dim: usize) -> IntTensor<Ascend> {
        unsupported("int_mean_dim")
    }

    fn int_cumsum(_tensor: IntTensor<Ascend>, _dim: usize) -> IntTensor<Ascend> {
        unsupported("int_cumsum")
    }

    fn int_cumprod(_tensor: IntTensor<Ascend>, _dim: usize) -> IntTensor<Ascend> {
        unsupported("int_cumprod")
    }

    fn int_cummin(_tensor: IntTensor<Ascend>, _dim: usize) -> IntTensor<Ascend> {
        unsupported("int_cummin")
    }

    fn int_cummax(_tensor: IntTensor<Ascend>, _dim: usize) -> IntTensor<Ascend> {
        unsupported("int_cummax")
    }

    fn int_argmax(_tensor: IntTensor<Ascend>, _dim: usize) -> IntTensor<Ascend> {
        unsupported("int_argmax")
    }

    fn int_argtopk(_tensor: IntTensor<Ascend>, _dim: usize, _k: usize) -> IntTensor<Ascend> {
        unsupported("int_argtopk")
    }

    fn int_argmin(_tensor: IntTensor<Ascend>, _dim: usize) -> IntTensor<Ascend> {
        unsupported("int_argmin")
    }

    fn int_abs(_tensor: IntTensor<Ascend>) -> IntTensor<Ascend> {
        unsupported("int_abs")
    }

    fn int_swap_dims(tensor: IntTensor<Ascend>, dim1: usize, dim2: usize) -> IntTensor<Ascend> {
        let layout = tensor.layout().swap_dims(dim1, dim2);
        tensor.with_layout(layout)
    }

    fn int_permute(tensor: IntTensor<Ascend>, axes: &[usize]) -> IntTensor<Ascend> {
        let layout = tensor.layout().permute(axes);
        tensor.with_layout(layout)
    }

    fn int_flip(tensor: IntTensor<Ascend>, axes: &[usize]) -> IntTensor<Ascend> {
        run("int_flip", copy::flip(&tensor, axes))
    }

    fn int_random(
        _shape: Shape,
        _distribution: Distribution,
        _device: &Device<Ascend>,
        _dtype: IntDType,
    ) -> IntTensor<Ascend> {
        unsupported("int_random")
    }

    fn int_expand(tensor: IntTensor<Ascend>, shape: Shape) -> IntTensor<Ascend> {
        expand(tensor, shape)
    }

    fn int_sort(_tensor: IntTensor<Ascend>, _dim: usize, _descending: bool) -> IntTensor<Ascend> {
        unsupported("int_sort")
    }

    fn int_sort_with_indices(
        _tensor: IntTensor<Ascend>,
        _dim: usize,
        _descending: bool,
    ) -> (IntTensor<Ascend>, IntTensor<Ascend>) {
        unsupported("int_sort_with_indices")
    }

    fn int_argsort(
        _tensor: IntTensor<Ascend>,
        _dim: usize,
        _descending: bool,
    ) -> IntTensor<Ascend> {
        unsupported("int_argsort")
    }

    fn bitwise_and(_lhs: IntTensor<Ascend>, _rhs: IntTensor<Ascend>) -> IntTensor<Ascend> {
        unsupported("bitwise_and")
    }

    fn bitwise_and_scalar(_lhs: IntTensor<Ascend>, _rhs: Scalar) -> IntTensor<Ascend> {
        unsupported("bitwise_and_scalar")
    }

    fn bitwise_or(_lhs: IntTensor<Ascend>, _rhs: IntTensor<Ascend>) -> IntTensor<Ascend> {
        unsupported("bitwise_or")
    }

    fn bitwise_or_scalar(_lhs: IntTensor<Ascend>, _rhs: Scalar) -> IntTensor<Ascend> {
        unsupported("bitwise_or_scalar")
    }

    fn bitwise_xor(_lhs: IntTensor<Ascend>, _rhs: IntTensor<Ascend>) -> IntTensor<Ascend> {
        unsupported("bitwise_xor")
    }

    fn bitwise_xor_scalar(_lhs: IntTensor<Ascend>, _rhs: Scalar) -> IntTensor<Ascend> {
        unsupported("bitwise_xor_scalar")
    }

    fn bitwise_not(_tensor: IntTensor<Ascend>) -> IntTensor<Ascend> {
        unsupported("bitwise_not")
    }

    fn bitwise_left_shift(_lhs: IntTensor<Ascend>, _rhs: IntTensor<Ascend>) -> IntTensor<Ascend> {
        unsupported("bitwise_left_shift")
    }

    fn bitwise_left_shift_scalar(_lhs: IntTensor<Ascend>, _rhs: Scalar) -> IntTensor<Ascend> {
        unsupported("bitwise_left_shift_scalar")
    }

    fn bitwise_right_shift(_lhs: IntTensor<Ascend>, _rhs: IntTensor<Ascend>) -> IntTensor<Ascend> {
        unsupported("bitwise_right_shift")
    }

    fn bitwise_right_shift_scalar(_lhs: IntTensor<Ascend>, _rhs: Scalar) -> IntTensor<Ascend> {
        unsupported("bitwise_right_shift_scalar")
    }

    fn int_cast(tensor: IntTensor<Ascend>, dtype: IntDType) -> IntTensor<Ascend> {
        run("int_cast", copy::cast(&tensor, int_type(dtype)))
    }

    fn int_unfold(
        _tensor: IntTensor<Ascend>,
        _dim: usize,
        _size: usize,
        _step: usize,
    ) -> IntTensor<Ascend> {
        unsupported("int_unfold")
    }
}
