//! `IntTensorOps` for [`Ascend`]: one line per method onto the op-mapping layer.

use super::*;

impl IntTensorOps<Ascend> for Ascend {
    // The methods both adapters share (burn-ascend-core's adapter_methods); below, this
    // Burn version's own.
    burn_ascend_core::adapter_int_ops!();

    fn int_scatter(
        dim: usize,
        tensor: IntTensor<Ascend>,
        indices: IntTensor<Ascend>,
        value: IntTensor<Ascend>,
        update: IndexingUpdateOp,
    ) -> IntTensor<Ascend> {
        run(
            "int_scatter",
            update::scatter_update(dim, &tensor, &indices, &value, nd_update(update)),
        )
    }

    fn int_select_assign(
        tensor: IntTensor<Ascend>,
        dim: usize,
        indices: IntTensor<Ascend>,
        value: IntTensor<Ascend>,
        update: IndexingUpdateOp,
    ) -> IntTensor<Ascend> {
        run(
            "int_select_assign",
            update::select_update(&tensor, dim, &indices, &value, nd_update(update)),
        )
    }
}

/// The dtype of the indices an int op returns: the input's, as Burn 0.22's IR declares them
/// (a remote client holds the declared dtype; a different one breaks its next op).
fn index_dtype(tensor: &IntTensor<Ascend>) -> DataType {
    tensor.dtype()
}
