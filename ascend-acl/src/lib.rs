//! ascend-acl: Rust bindings to AscendCL and aclnn, CANN's runtime and operator library, loaded
//! at run time. This crate is the one seam between burn-ascend and the device.
//!
//! - [`functions`](acl_function_list): the one declarative list of every C function used, with
//!   its C signature; the table and the emulator's symbol map are generated from it.
//! - [`table::AclApi`]: typed function pointers filled from a [`table::SymbolSource`]: CANN's
//!   shared libraries ([`loader::CannLibraries`]) or any in-process implementation (the
//!   `ascend-emulator` crate's emulated Atlas A2 runtime).
//! - [`handles`]: checked calls and safe owners of the C objects (descriptors, scalars,
//!   arrays), and the two-phase operator call (`aclnn!`); [`cache`]: the per-thread descriptor
//!   and executor caches behind `aclnn_cached!`.
//! - [`hccl`]: HCCL, the collective communication library, in a table of its own (loaded only
//!   when a communicator is built).
//! - [`release`]: CANN releases and the oldest one that declares each function.
//! - [`types`], [`dtype`], [`shape`]: C types, enum values and status codes, the one dtype table,
//!   strided-view arithmetic.
//!
//! Nothing here knows of Burn; the crate can serve as CANN bindings on its own.
#![warn(missing_docs)]

pub mod cache;
pub mod dtype;
pub mod error;
mod functions;
pub mod handles;
pub mod hccl;
pub mod loader;
pub mod release;
pub mod shape;
pub mod table;
pub mod types;
pub mod view_dims;

pub use dtype::DataType;
pub use error::{AclError, AclResult};
pub use table::AclApi;
