//! burn-ascend-kernels: the custom fused operations of burn-ascend, written in Ascend C.
//!
//! This crate will hold the Ascend C kernel sources (MoE gather/scatter, token rearrangement,
//! paged KV slot allocation, split-KV paged decode attention, layer norm, vector add), their
//! tiling as pure Rust functions, the host emulation of the Ascend C API they use, and their
//! launchers. It knows nothing of Burn; `burn-ascend` exposes the operations to Burn models.
//! The contracts are in the project's fused-ops specification.
