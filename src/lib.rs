//! Code shared by burn-ascend's examples, tests and benchmarks: the MoE decoder model of the
//! `moe_decoder` example, its paged-cache serving loop and its training loop.

#![warn(missing_docs)]

pub mod moe;
