//! The built-in decoder-only mixture-of-experts transformer, written against [`FusedOps`], so it
//! runs on any Burn backend (the composed defaults) and on `Ascend` with the fused Ascend C
//! kernels; and the training of it and of the Hugging Face families.
//!
//! - [`config`]: sizes, with validation.
//! - [`model`]: embedding, pre-norm blocks with grouped-query attention (rotary positions) and a
//!   MoE feed-forward (router, top-k, gather, grouped SwiGLU experts, scatter), final norm, head;
//!   its [`StepModel`](crate::engine::step::StepModel) implementation.
//! - [`train`]: next-token training with the auxiliary load-balancing loss (of this decoder
//!   and of the Hugging Face families, [`crate::families`]).
//! - [`corpus`]: the small text the example trains on.
//! - [`data_parallel`]: training on several NPUs, one replica each, gradients all-reduced.
//! - [`expert_parallel`]: serving with each layer's experts split across NPUs (all-to-all).
//! - [`parallel`]: the hook through which a MoE layer runs across NPUs.
//!
//! [`FusedOps`]: burn_ascend::FusedOps

pub mod config;
pub mod corpus;
pub mod data_parallel;
pub mod expert_parallel;
pub mod model;
pub mod parallel;
pub mod train;
