//! Helpers shared by burn-ascend's examples, tests and benchmarks (the root package holds only
//! those). The libraries they exercise are the workspace's crates: `burn-ascend` (the backend),
//! `burn-ascend-llm` (models and the serving engine), `burn-ascend-openai` (the HTTP server),
//! `burn-ascend-perf` (the device-time model).

#![warn(missing_docs)]

pub mod host_values;
pub mod real_checkpoint;
