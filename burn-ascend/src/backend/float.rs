//! `FloatTensorOps` for [`Ascend`]: one line per method onto the op-mapping layer.

use super::*;

impl FloatTensorOps<Ascend> for Ascend {
    fn float_from_data(data: TensorData, device: &Device<Ascend>) -> FloatTensor<Ascend> {
        from_data(data, device, Kind::Float)
    }

    fn float_random(
        _shape: Shape,
        _distribution: Distribution,
        _device: &Device<Ascend>,
        _dtype: FloatDType,
    ) -> FloatTensor<Ascend> {
        unsupported("float_random")
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

    fn float_device(tensor: &FloatTensor<Ascend>) -> Device<Ascend> {
        tensor.ctx().device()
    }

    fn float_to_device(
        tensor: FloatTensor<Ascend>,
        device: &Device<Ascend>,
    ) -> FloatTensor<Ascend> {
        run("float_to_device", copy::to_device(&tensor, device))
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
            AscendTensor::empty(&context(device), shape.to_vec(), float_type(dtype)),
        )
    }

    fn float_add(lhs: FloatTensor<Ascend>, rhs: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        binary(BinaryOp::Add, lhs, rhs)
    }

    fn float_add_scalar(lhs: FloatTensor<Ascend>, rhs: Scalar) -> FloatTensor<Ascend> {
        binary_scalar(BinaryOp::Add, lhs, rhs)
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

    fn float_remainder(
        _lhs: FloatTensor<Ascend>,
        _rhs: FloatTensor<Ascend>,
    ) -> FloatTensor<Ascend> {
        unsupported("float_remainder")
    }

    fn float_remainder_scalar(_lhs: FloatTensor<Ascend>, _rhs: Scalar) -> FloatTensor<Ascend> {
        unsupported("float_remainder_scalar")
    }

    fn float_matmul(lhs: FloatTensor<Ascend>, rhs: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        run("float_matmul", matmul::matmul(&lhs, &rhs))
    }

    fn float_cross(
        _lhs: FloatTensor<Ascend>,
        _rhs: FloatTensor<Ascend>,
        _dim: usize,
    ) -> FloatTensor<Ascend> {
        unsupported("float_cross")
    }

    fn float_recip(_tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        unsupported("float_recip")
    }

    fn float_swap_dims(
        tensor: FloatTensor<Ascend>,
        dim1: usize,
        dim2: usize,
    ) -> FloatTensor<Ascend> {
        let layout = tensor.layout().swap_dims(dim1, dim2);
        tensor.with_layout(layout)
    }

    fn float_permute(tensor: FloatTensor<Ascend>, axes: &[usize]) -> FloatTensor<Ascend> {
        let layout = tensor.layout().permute(axes);
        tensor.with_layout(layout)
    }

    fn float_flip(tensor: FloatTensor<Ascend>, axes: &[usize]) -> FloatTensor<Ascend> {
        run("float_flip", copy::flip(&tensor, axes))
    }

    fn float_reshape(tensor: FloatTensor<Ascend>, shape: Shape) -> FloatTensor<Ascend> {
        run("float_reshape", copy::reshape(&tensor, shape.to_vec()))
    }

    fn float_gather(
        _dim: usize,
        _tensor: FloatTensor<Ascend>,
        _indices: IntTensor<Ascend>,
    ) -> FloatTensor<Ascend> {
        unsupported("float_gather")
    }

    fn float_scatter_add(
        _dim: usize,
        _tensor: FloatTensor<Ascend>,
        _indices: IntTensor<Ascend>,
        _value: FloatTensor<Ascend>,
    ) -> FloatTensor<Ascend> {
        unsupported("float_scatter_add")
    }

    fn float_select(
        _tensor: FloatTensor<Ascend>,
        _dim: usize,
        _indices: IntTensor<Ascend>,
    ) -> FloatTensor<Ascend> {
        unsupported("float_select")
    }

    fn float_select_add(
        _tensor: FloatTensor<Ascend>,
        _dim: usize,
        _indices: IntTensor<Ascend>,
        _value: FloatTensor<Ascend>,
    ) -> FloatTensor<Ascend> {
        unsupported("float_select_add")
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
        _tensor: FloatTensor<Ascend>,
        _mask: BoolTensor<Ascend>,
        _value: FloatTensor<Ascend>,
    ) -> FloatTensor<Ascend> {
        unsupported("float_mask_where")
    }

    fn float_mask_fill(
        _tensor: FloatTensor<Ascend>,
        _mask: BoolTensor<Ascend>,
        _value: Scalar,
    ) -> FloatTensor<Ascend> {
        unsupported("float_mask_fill")
    }

    fn float_equal(
        _lhs: FloatTensor<Ascend>,
        _rhs: FloatTensor<Ascend>,
        _out_dtype: BoolDType,
    ) -> BoolTensor<Ascend> {
        unsupported("float_equal")
    }

    fn float_equal_elem(
        _lhs: FloatTensor<Ascend>,
        _rhs: Scalar,
        _out_dtype: BoolDType,
    ) -> BoolTensor<Ascend> {
        unsupported("float_equal_elem")
    }

    fn float_greater(
        _lhs: FloatTensor<Ascend>,
        _rhs: FloatTensor<Ascend>,
        _out_dtype: BoolDType,
    ) -> BoolTensor<Ascend> {
        unsupported("float_greater")
    }

    fn float_greater_elem(
        _lhs: FloatTensor<Ascend>,
        _rhs: Scalar,
        _out_dtype: BoolDType,
    ) -> BoolTensor<Ascend> {
        unsupported("float_greater_elem")
    }

    fn float_greater_equal(
        _lhs: FloatTensor<Ascend>,
        _rhs: FloatTensor<Ascend>,
        _out_dtype: BoolDType,
    ) -> BoolTensor<Ascend> {
        unsupported("float_greater_equal")
    }

    fn float_greater_equal_elem(
        _lhs: FloatTensor<Ascend>,
        _rhs: Scalar,
        _out_dtype: BoolDType,
    ) -> BoolTensor<Ascend> {
        unsupported("float_greater_equal_elem")
    }

    fn float_lower(
        _lhs: FloatTensor<Ascend>,
        _rhs: FloatTensor<Ascend>,
        _out_dtype: BoolDType,
    ) -> BoolTensor<Ascend> {
        unsupported("float_lower")
    }

    fn float_lower_elem(
        _lhs: FloatTensor<Ascend>,
        _rhs: Scalar,
        _out_dtype: BoolDType,
    ) -> BoolTensor<Ascend> {
        unsupported("float_lower_elem")
    }

    fn float_lower_equal(
        _lhs: FloatTensor<Ascend>,
        _rhs: FloatTensor<Ascend>,
        _out_dtype: BoolDType,
    ) -> BoolTensor<Ascend> {
        unsupported("float_lower_equal")
    }

    fn float_lower_equal_elem(
        _lhs: FloatTensor<Ascend>,
        _rhs: Scalar,
        _out_dtype: BoolDType,
    ) -> BoolTensor<Ascend> {
        unsupported("float_lower_equal_elem")
    }

    fn float_sum(_tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        unsupported("float_sum")
    }

    fn float_sum_dim(_tensor: FloatTensor<Ascend>, _dim: usize) -> FloatTensor<Ascend> {
        unsupported("float_sum_dim")
    }

    fn float_mean_dim(_tensor: FloatTensor<Ascend>, _dim: usize) -> FloatTensor<Ascend> {
        unsupported("float_mean_dim")
    }

    fn float_cumsum(_tensor: FloatTensor<Ascend>, _dim: usize) -> FloatTensor<Ascend> {
        unsupported("float_cumsum")
    }

    fn float_cumprod(_tensor: FloatTensor<Ascend>, _dim: usize) -> FloatTensor<Ascend> {
        unsupported("float_cumprod")
    }

    fn float_cummin(_tensor: FloatTensor<Ascend>, _dim: usize) -> FloatTensor<Ascend> {
        unsupported("float_cummin")
    }

    fn float_cummax(_tensor: FloatTensor<Ascend>, _dim: usize) -> FloatTensor<Ascend> {
        unsupported("float_cummax")
    }

    fn float_cast(tensor: FloatTensor<Ascend>, dtype: FloatDType) -> FloatTensor<Ascend> {
        run("float_cast", copy::cast(&tensor, float_type(dtype)))
    }

    fn float_exp(_tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        unsupported("float_exp")
    }

    fn float_log(_tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        unsupported("float_log")
    }

    fn float_log1p(_tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        unsupported("float_log1p")
    }

    fn float_powf(_lhs: FloatTensor<Ascend>, _rhs: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        unsupported("float_powf")
    }

    fn float_powf_scalar_impl(_tensor: FloatTensor<Ascend>, _value: Scalar) -> FloatTensor<Ascend> {
        unsupported("float_powf_scalar_impl")
    }

    fn float_sqrt(_tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        unsupported("float_sqrt")
    }

    fn float_abs(_tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        unsupported("float_abs")
    }

    fn float_cos(_tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        unsupported("float_cos")
    }

    fn float_sin(_tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        unsupported("float_sin")
    }

    fn float_tan(_tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        unsupported("float_tan")
    }

    fn float_cosh(_tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        unsupported("float_cosh")
    }

    fn float_sinh(_tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        unsupported("float_sinh")
    }

    fn float_tanh(_tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        unsupported("float_tanh")
    }

    fn float_acos(_tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        unsupported("float_acos")
    }

    fn float_acosh(_tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        unsupported("float_acosh")
    }

    fn float_asin(_tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        unsupported("float_asin")
    }

    fn float_asinh(_tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        unsupported("float_asinh")
    }

    fn float_atan(_tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        unsupported("float_atan")
    }

    fn float_atanh(_tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        unsupported("float_atanh")
    }

    fn float_atan2(_lhs: FloatTensor<Ascend>, _rhs: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        unsupported("float_atan2")
    }

    fn float_round(_tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        unsupported("float_round")
    }

    fn float_floor(_tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        unsupported("float_floor")
    }

    fn float_ceil(_tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        unsupported("float_ceil")
    }

    fn float_trunc(_tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        unsupported("float_trunc")
    }

    fn float_erf(_tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        unsupported("float_erf")
    }

    fn float_cat(tensors: Vec<FloatTensor<Ascend>>, dim: usize) -> FloatTensor<Ascend> {
        run("float_cat", copy::cat(&tensors, dim))
    }

    fn float_argmax(
        _tensor: FloatTensor<Ascend>,
        _dim: usize,
        _out_dtype: IntDType,
    ) -> IntTensor<Ascend> {
        unsupported("float_argmax")
    }

    fn float_argtopk(
        _tensor: FloatTensor<Ascend>,
        _dim: usize,
        _k: usize,
        _out_dtype: IntDType,
    ) -> IntTensor<Ascend> {
        unsupported("float_argtopk")
    }

    fn float_argmin(
        _tensor: FloatTensor<Ascend>,
        _dim: usize,
        _out_dtype: IntDType,
    ) -> IntTensor<Ascend> {
        unsupported("float_argmin")
    }

    fn float_expand(tensor: FloatTensor<Ascend>, shape: Shape) -> FloatTensor<Ascend> {
        expand(tensor, shape)
    }

    fn float_sort(
        _tensor: FloatTensor<Ascend>,
        _dim: usize,
        _descending: bool,
    ) -> FloatTensor<Ascend> {
        unsupported("float_sort")
    }

    fn float_sort_with_indices(
        _tensor: FloatTensor<Ascend>,
        _dim: usize,
        _descending: bool,
        _indices_dtype: IntDType,
    ) -> (FloatTensor<Ascend>, IntTensor<Ascend>) {
        unsupported("float_sort_with_indices")
    }

    fn float_argsort(
        _tensor: FloatTensor<Ascend>,
        _dim: usize,
        _descending: bool,
        _out_dtype: IntDType,
    ) -> IntTensor<Ascend> {
        unsupported("float_argsort")
    }

    fn float_unfold(
        _tensor: FloatTensor<Ascend>,
        _dim: usize,
        _size: usize,
        _step: usize,
    ) -> FloatTensor<Ascend> {
        unsupported("float_unfold")
    }
}
