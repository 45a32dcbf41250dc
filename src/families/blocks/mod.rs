//! The building blocks every family's decoder layer is made of.
//!
//! - [`norm`]: RMS norm (and the residual add with it) through the fused kernels.
//! - [`rope`]: rotary embeddings by `rope_scaling` kind.
//! - [`attention`]: the attention kinds ([`attention::Attention`]): grouped-query attention
//!   with optional q/k/v bias and per-head q/k norms; dense causal and paged.
//! - [`router`]: the routers ([`router::Router`]) that pick each token's experts.
//! - [`ffn`]: the feed-forward kinds ([`ffn::Ffn`]): a dense SwiGLU MLP, or routed SwiGLU
//!   experts with an optional (gated) shared expert.

pub mod attention;
pub mod ffn;
pub mod norm;
pub mod rope;
pub mod router;
