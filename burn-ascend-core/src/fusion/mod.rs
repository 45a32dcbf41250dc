//! `Fusion<Ascend>`'s fusers and optimizations, one source for both Burn adapters.
//!
//! burn-fusion's interfaces (`FusionBackend`, `OperationFuser`, `Optimization`) and the op
//! stream they see (`burn_ir::OperationIr`) are Burn types, of a different crate version in each
//! adapter (burn-fusion/burn-ir 0.21 and 0.22.1) but with the same text for everything the
//! fusers use. So the Burn-facing part is one macro, [`ascend_fusion!`](crate::ascend_fusion),
//! expanded in each adapter's scope, where its `burn_ir`, `burn_fusion` and `burn_backend` paths
//! resolve to that adapter's Burn. What does not name Burn is plain code here: the lowering
//! target (the interpreted kernel's [`program`]), the instruction sequences for functions the
//! vector unit lacks ([`emit`]), and the kernel launches (`ops::fused::run_program`,
//! `ops::fused::layer_norm`). This crate itself depends on no Burn crate: a macro's body is
//! tokens until an adapter expands it.
//!
//! Four fusers: runs of element-wise ops become one launch of the interpreted
//! `elementwise_program` kernel (`lower`, `elementwise`); layer norm as Burn composes it becomes
//! one launch of the `layer_norm` kernel; linear as Burn composes it (matmul, then bias) becomes
//! one aclnnAddmm; softmax and log-softmax as Burn composes them become one aclnnSoftmax /
//! aclnnLogSoftmax. Every other recorded op runs through the adapter's `Ascend` implementation.

pub mod emit;

/// The interpreted kernel's program, the lowering target of fused element-wise runs.
pub mod program {
    pub use burn_ascend_kernels::program::{Cmp, ElemType, Op, Program, Rounding, Value};
}

mod elementwise;
mod layer_norm;
mod linear;
mod lower;
mod pattern;
mod runtime;
mod softmax;
