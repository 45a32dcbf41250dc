//! Code shared by burn-ascend's examples, tests and benchmarks: the MoE decoder model of the
//! `moe_decoder` example, its serving scheduler and training loop, the Atlas A2 device-time
//! model and the roofline of a decode step.

#![warn(missing_docs)]

pub mod a2;
pub mod families;
pub mod hf;
pub mod http;
pub mod moe;
pub mod roofline;
