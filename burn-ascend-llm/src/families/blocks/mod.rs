//! The building blocks every family's decoder layer is made of.
//!
//! - [`norm`]: RMS norm (and the residual add with it) through the fused kernels.
//! - [`rope`]: rotary embeddings by `rope_scaling` kind.
//! - [`yarn`]: DeepSeek's rotary embedding: YaRN scaling, interleaved pairs.
//! - [`attention`]: the attention kinds ([`attention::Attention`]): grouped-query attention
//!   with optional q/k/v bias and per-head q/k norms, or multi-head latent attention
//!   ([`mla`]); dense causal and paged.
//! - [`router`]: the routers ([`router::Router`]) that pick each token's experts
//!   ([`deepseek_router`]: DeepSeek's greedy, group-limited and `noaux_tc` ones).
//! - [`quant`]: the int8 form of the dense projections ([`quant::Projection`]).
//! - [`ffn`]: the feed-forward kinds ([`ffn::Ffn`]): a dense SwiGLU MLP, or routed SwiGLU
//!   experts with an optional (gated) shared expert.

pub mod attention;
pub mod deepseek_router;
pub mod ffn;
pub mod mla;
pub mod norm;
pub mod quant;
pub mod rope;
pub mod router;
pub mod yarn;
