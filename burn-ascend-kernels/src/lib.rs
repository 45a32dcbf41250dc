//! burn-ascend-kernels: the custom fused operations of burn-ascend, written in Ascend C.
//!
//! - `kernels/*.cpp`: the Ascend C sources, one kernel per file, written against the real
//!   Ascend C API. With CANN they are built by CANN's toolchain; otherwise by the host C++
//!   compiler against the emulation in `emulation/` (see `build.rs`).
//! - [`tiling`]: how each kernel splits its work over the vector cores and the unified buffer,
//!   as pure functions of the shapes and the device's properties.
//! - [`program`]: the programs of the interpreted element-wise kernel (`elementwise_program`):
//!   instructions over f32 tile registers, register allocation, operand layout, encoding.
//! - [`launch`]: safe launchers over the `aclrtlaunch_<kernel>` entry points, which queue a
//!   kernel on a stream like any other device work.
//! - [`emulation`] (emulated builds): the bridge from the emulated kernels to the emulated
//!   device's memory and streams, which the emulated runtime registers, and the per-launch
//!   counters (global-memory bytes, data copies, per-core balance).
//!
//! This crate knows nothing of Burn; `burn-ascend` exposes the operations to Burn models.
#![warn(missing_docs)]

pub mod emulation;
pub mod launch;
pub mod program;
pub mod tiling;

/// Whether the kernels were built for the emulated device (no CANN at build time) rather than
/// for real NPUs.
pub const EMULATED: bool = cfg!(ascendc_emulated);
