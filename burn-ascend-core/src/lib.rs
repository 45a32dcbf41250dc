//! burn-ascend-core: what burn-ascend's Burn adapters share, with no dependency on Burn.
//!
//! Layers, bottom up: the seam ([`acl`], the `ascend-acl` crate: AscendCL and aclnn through a
//! table of C functions loaded at run time), the device runtime ([`runtime`]: devices, streams,
//! caching allocators, page-locked staging, ACL graphs, HCCL communicators) and the op mapping
//! ([`ops`]: tensor operations and the fused ops on [`AscendTensor`] views as aclnn calls and
//! Ascend C kernel launches). Element types are [`acl::DataType`], shapes are `usize` slices.
//! The Burn adapters (`burn-ascend` for Burn 0.21, `burn-ascend-b22` for Burn 0.22) implement
//! Burn's traits on top of this; [`adapter_methods`] states once the op methods they share.
//! With the default `emulator` feature, [`emulator`] (the `ascend-emulator` crate) fills the
//! same table in-process, so [`AscendDevice::Emulated`] runs everything without an NPU.
#![warn(missing_docs)]

pub use ascend_acl as acl;
#[cfg(feature = "emulator")]
pub use ascend_emulator as emulator;

pub mod adapter_methods;
pub mod error;
pub mod fusion;
pub mod ops;
pub mod runtime;

pub use error::AscendError;
pub use ops::AscendTensor;
pub use runtime::{reset_device, AscendDevice, MemoryStats};
