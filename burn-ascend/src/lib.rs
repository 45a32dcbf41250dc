//! burn-ascend: a [Burn](https://burn.dev) backend for Huawei Ascend NPUs.
//!
//! Layers, bottom up: the seam ([`acl`], the `ascend-acl` crate: AscendCL and aclnn through a
//! table of C functions loaded at run time), then the Burn-independent core (the
//! `burn-ascend-core` crate: the device runtime ([`runtime`]) and the op mapping ([`ops`])), and
//! this crate's Burn 0.21 layer ([`backend`]: [`Ascend`], the fused ops, `Fusion<Ascend>`).
//! With the default `emulator` feature, [`emulator`] (the `ascend-emulator` crate) fills the
//! same table in-process, so [`AscendDevice::Emulated`] runs everything without an NPU.
#![warn(missing_docs)]

#[cfg(feature = "emulator")]
pub use burn_ascend_core::emulator;
pub use burn_ascend_core::{acl, ops, runtime};

pub mod backend;
pub mod error;

pub use backend::collective::{self, CollectiveOps};
pub use backend::fused::{self, FusedOps};
pub use backend::graph;
pub use backend::{reset_device, Ascend, AscendDevice, AscendQTensor, AscendTensor};
pub use error::{try_run, AscendError};
pub use runtime::MemoryStats;
