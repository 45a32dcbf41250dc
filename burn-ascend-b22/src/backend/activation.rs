//! `ActivationOps` for [`Ascend`]: one line per method onto the op-mapping layer.

use super::*;

impl ActivationOps<Ascend> for Ascend {
    // Every method is the same in both adapters (burn-ascend-core's adapter_methods).
    burn_ascend_core::adapter_activation_ops!();
}
