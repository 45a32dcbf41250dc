//! burn-ascend: a [Burn](https://burn.dev) backend for Huawei Ascend NPUs.
#![warn(missing_docs)]

pub mod acl;
pub mod backend;
pub mod ops;
pub mod runtime;

pub use backend::fused::{self, FusedOps};
pub use backend::{Ascend, AscendQTensor};
pub use ops::AscendTensor;
pub use runtime::{AscendDevice, MemoryStats};
