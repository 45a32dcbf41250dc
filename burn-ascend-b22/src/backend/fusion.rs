//! `Ascend` as a `burn-fusion` 0.22 backend, so that `Fusion<Ascend>` (and
//! `Autodiff<Fusion<Ascend>>`) records the op stream lazily and runs it on the device, and so
//! that `burn-ascend-server` can serve `Fusion<Ascend>` (burn-fusion's `BackendIr for
//! Fusion<B>`).
//!
//! The fusers, the optimizations and `FusionBackend for Ascend` are burn-ascend-core's
//! `ascend_fusion!`, the same source the Burn 0.21 adapter expands (see
//! `burn_ascend_core::fusion`): runs of element-wise ops as one `elementwise_program` launch,
//! layer norm, linear and (log-)softmax as Burn composes them as one `layer_norm` launch, one
//! aclnnAddmm and one aclnnSoftmax / aclnnLogSoftmax. Fusion holds our tensors in the handle
//! Burn's IR interpreter holds them in ([`AscendHandle`], `ir.rs`).

use super::AscendHandle;

burn_ascend_core::ascend_fusion!(AscendHandle);
