//! `FloatTensorOps` for [`Ascend`]: one line per method onto the op-mapping layer.

use super::*;

impl FloatTensorOps<Ascend> for Ascend {
    // The methods both adapters share (burn-ascend-core's adapter_methods); below, this
    // Burn version's own.
    burn_ascend_core::adapter_float_ops!();

    fn float_matmul(lhs: FloatTensor<Ascend>, rhs: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
        run("float_matmul", matmul::matmul(&lhs, &rhs))
    }

    fn float_scatter(
        dim: usize,
        tensor: FloatTensor<Ascend>,
        indices: IntTensor<Ascend>,
        value: FloatTensor<Ascend>,
        update: IndexingUpdateOp,
    ) -> FloatTensor<Ascend> {
        run(
            "float_scatter",
            update::scatter_update(dim, &tensor, &indices, &value, nd_update(update)),
        )
    }

    fn float_select_assign(
        tensor: FloatTensor<Ascend>,
        dim: usize,
        indices: IntTensor<Ascend>,
        value: FloatTensor<Ascend>,
        update: IndexingUpdateOp,
    ) -> FloatTensor<Ascend> {
        run(
            "float_select_assign",
            update::select_update(&tensor, dim, &indices, &value, nd_update(update)),
        )
    }

    /// One sort, its first `k` values and indices as views (Burn's default sorts, then selects
    /// both with an uploaded range).
    fn float_topk_with_indices(
        tensor: FloatTensor<Ascend>,
        dim: usize,
        k: usize,
        out_dtype: IntDType,
    ) -> (FloatTensor<Ascend>, IntTensor<Ascend>) {
        let (values, order) = run("float_topk_with_indices", sort::topk(&tensor, dim, k));
        let order = run(
            "float_topk_with_indices",
            copy::cast(&order, int_type(out_dtype)),
        );
        (values, order)
    }
}
