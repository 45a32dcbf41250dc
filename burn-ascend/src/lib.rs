//! burn-ascend: a [Burn](https://burn.dev) backend for Huawei Ascend NPUs.
//!
//! Layers, bottom up: the seam ([`acl`], the `ascend-acl` crate: AscendCL and aclnn through a
//! table of C functions loaded at run time), the device runtime ([`runtime`]), the op mapping
//! ([`ops`]) and the Burn layer ([`backend`]: [`Ascend`], the fused ops, `Fusion<Ascend>`).
//! With the default `emulator` feature, [`emulator`] (the `ascend-emulator` crate) fills the
//! same table in-process, so [`AscendDevice::Emulated`] runs everything without an NPU.
#![warn(missing_docs)]

pub use ascend_acl as acl;
#[cfg(feature = "emulator")]
pub use ascend_emulator as emulator;

pub mod backend;
pub mod error;
pub mod ops;
pub mod runtime;

pub use backend::collective::{self, CollectiveOps};
pub use backend::fused::{self, FusedOps};
pub use backend::graph;
pub use backend::{Ascend, AscendQTensor};
pub use error::{try_run, AscendError};
pub use ops::AscendTensor;
pub use runtime::{reset_device, AscendDevice, MemoryStats};
