//! The serving engine: continuous batching over a paged KV cache, for any model that implements
//! the one step interface ([`step::StepModel`]). It names no model: the built-in decoder
//! ([`crate::moe`]) and every Hugging Face family ([`crate::families`]) plug in through
//! [`step::StepModel`].
//!
//! - [`cache`]: the paged KV cache and its page pool (slots allocated by `alloc_extend`).
//! - [`scheduler`]: which requests run, how many tokens each computes in a step (chunked
//!   prefill beside decode), admission and preemption.
//! - [`step`]: the one interface between the engine and a model.
//! - [`serve`]: the server: request checks, the step (prefill chunks through their block tables
//!   by `extend_attention`, decoded tokens through `decode_attention`, over the paged cache),
//!   recovery from device failures, and the dense reference.
//! - [`sampler`]: each step's tokens chosen on the device (greedy or seeded draws with
//!   temperature, top-k and top-p); only the ids come back.
//! - [`decode_graph`]: the decode step captured as ACL graphs, one per batch-size bucket.
//! - [`memory`]: what the cache and a step take of the device's memory, and the cache sized
//!   from it.
//! - [`workload`]: seeded Poisson traces of requests and the serving figures.

pub mod cache;
pub mod decode_graph;
pub mod memory;
pub mod sampler;
pub mod scheduler;
pub mod serve;
pub mod step;
pub mod workload;
