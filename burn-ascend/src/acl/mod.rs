//! The seam: everything the backend knows of AscendCL and aclnn.
//!
//! One table of C functions ([`table::AclApi`]), filled either from CANN's libraries
//! ([`loader`]) or from the in-process emulated runtime ([`emulated`]); checked calls and safe
//! owners of the C objects ([`handles`]); the two-phase operator call (`aclnn!`) and its cached
//! form (`aclnn_cached!`, with the descriptor and executor caches in [`cache`]). Nothing here
//! knows of Burn.

pub mod cache;
pub mod dtype;
pub mod emulated;
pub mod error;
mod functions;
pub mod handles;
pub mod loader;
pub mod shape;
pub mod table;
pub mod types;

pub use dtype::DataType;
pub use error::{AclError, AclResult};
pub use table::AclApi;
