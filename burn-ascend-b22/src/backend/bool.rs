//! `BoolTensorOps` for [`Ascend`]: one line per method onto the op-mapping layer.

use super::*;

impl BoolTensorOps<Ascend> for Ascend {
    // The methods both adapters share (burn-ascend-core's adapter_methods); below, this
    // Burn version's own.
    burn_ascend_core::adapter_bool_ops!();
}
