//! `IntTensorOps` for [`Ascend`]: one line per method onto the op-mapping layer.

use super::*;

impl IntTensorOps<Ascend> for Ascend {
    // The methods both adapters share (burn-ascend-core's adapter_methods); below, this
    // Burn version's own.
    burn_ascend_core::adapter_int_ops!();

    fn int_device(tensor: &IntTensor<Ascend>) -> Device<Ascend> {
        tensor.ctx().device().into()
    }

    fn int_scatter_add(
        dim: usize,
        tensor: IntTensor<Ascend>,
        indices: IntTensor<Ascend>,
        value: IntTensor<Ascend>,
    ) -> IntTensor<Ascend> {
        run(
            "int_scatter_add",
            index::scatter(dim, &tensor, &indices, &value, ScatterReduce::Add),
        )
    }

    fn int_select_add(
        tensor: IntTensor<Ascend>,
        dim: usize,
        indices: IntTensor<Ascend>,
        value: IntTensor<Ascend>,
    ) -> IntTensor<Ascend> {
        run(
            "int_select_add",
            index::select_add(&tensor, dim, &indices, &value),
        )
    }
}

/// The dtype of the indices an int op returns: I64 whatever the input, as burn-flex 0.21 (the
/// conformance reference) gives them.
fn index_dtype(_tensor: &IntTensor<Ascend>) -> DataType {
    DataType::I64
}
