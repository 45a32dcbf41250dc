//! A decoder-only mixture-of-experts transformer written against [`FusedOps`], so it runs on any
//! Burn backend (the composed defaults) and on `Ascend` with the fused Ascend C kernels.
//!
//! - [`config`]: sizes, with validation.
//! - [`model`]: embedding, pre-norm blocks with grouped-query attention (rotary positions) and a
//!   MoE feed-forward (router, top-k, gather, grouped SwiGLU experts, scatter), final norm, head.
//! - [`cache`]: the paged KV cache and its page pool (slots allocated by `alloc_extend`).
//! - [`scheduler`]: which requests run, how many tokens each computes in a step (chunked
//!   prefill beside decode), admission and preemption.
//! - [`step`]: the one interface between the engine and a model ([`step::StepModel`]).
//! - [`serve`]: the server: request checks, the step (prefill chunks through their block tables
//!   by `extend_attention`, decoded tokens through `decode_attention`, over the paged cache),
//!   sampling, recovery from device failures, and the dense reference.
//! - [`workload`]: seeded Poisson traces of requests and the serving figures.
//! - [`train`]: next-token training with the auxiliary load-balancing loss (of this decoder
//!   and of the Hugging Face families, [`crate::families`]).
//! - [`corpus`]: the small text the example trains on.
//! - [`data_parallel`]: training on several NPUs, one replica each, gradients all-reduced.
//! - [`expert_parallel`]: serving with each layer's experts split across NPUs (all-to-all).
//! - [`parallel`]: the hook through which a MoE layer runs across NPUs.
//!
//! [`FusedOps`]: burn_ascend::FusedOps

pub mod cache;
pub mod config;
pub mod corpus;
pub mod data_parallel;
pub mod decode_graph;
pub mod expert_parallel;
pub mod model;
pub mod parallel;
pub mod scheduler;
pub mod serve;
pub mod step;
pub mod train;
pub mod workload;
