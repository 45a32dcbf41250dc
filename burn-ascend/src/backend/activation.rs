//! `ActivationOps` for [`Ascend`]: Burn's defaults, composed from the tensor ops.

use super::*;

impl ActivationOps<Ascend> for Ascend {}
