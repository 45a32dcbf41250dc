//! burn-ascend-b22: the Burn 0.22 adapter of burn-ascend.
//!
//! Burn 0.22's backend traits (`burn-backend` 0.22) at the primitive level on the
//! Burn-independent core (`burn-ascend-core`), as the backend type [`Ascend`], with Burn's IR
//! interface (`burn_ir::BackendIr`) so that `burn-ascend-server` can serve it to Burn 0.22
//! programs through Burn's remote backend. The Burn 0.21 adapter is the `burn-ascend` crate;
//! both are thin layers of one-line calls into the core.
//!
//! Like the 0.21 adapter, this crate has its own tensor and device types
//! ([`AscendTensor`], [`AscendDevice`]), `repr(transparent)` / variant-for-variant mirrors of
//! the core's: Rust's orphan rule forbids implementing Burn's traits on the core's types here.
#![warn(missing_docs)]

#[cfg(feature = "emulator")]
pub use burn_ascend_core::emulator;
pub use burn_ascend_core::{acl, ops, runtime};

mod backend;
pub mod error;
pub mod fused;

pub use backend::{
    fusion, reset_device, Ascend, AscendDevice, AscendGraph, AscendHandle, AscendQTensor,
    AscendTensor,
};
pub use error::{try_run, AscendError};
