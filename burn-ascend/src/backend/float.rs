//! `FloatTensorOps` for [`Ascend`]: one line per method onto the op-mapping layer.

use super::*;

impl FloatTensorOps<Ascend> for Ascend {
    // The methods both adapters share (burn-ascend-core's adapter_methods); below, this
    // Burn version's own.
    burn_ascend_core::adapter_float_ops!();

    fn float_device(tensor: &FloatTensor<Ascend>) -> Device<Ascend> {
        tensor.ctx().device().into()
    }

    fn float_matmul(lhs: FloatTensor<Ascend>, rhs: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        if let Some(y) = super::qtensor_ops::lazy_weight_matmul(&lhs, &rhs, None) {
            return run("float_matmul", y);
        }
        run("float_matmul", matmul::matmul(&lhs, &rhs))
    }

    fn float_scatter_add(
        dim: usize,
        tensor: FloatTensor<Ascend>,
        indices: IntTensor<Ascend>,
        value: FloatTensor<Ascend>,
    ) -> FloatTensor<Ascend> {
        run(
            "float_scatter_add",
            index::scatter(dim, &tensor, &indices, &value, ScatterReduce::Add),
        )
    }

    fn float_select_add(
        tensor: FloatTensor<Ascend>,
        dim: usize,
        indices: IntTensor<Ascend>,
        value: FloatTensor<Ascend>,
    ) -> FloatTensor<Ascend> {
        run(
            "float_select_add",
            index::select_add(&tensor, dim, &indices, &value),
        )
    }
}
