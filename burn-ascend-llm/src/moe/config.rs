//! The model's sizes.

use burn::config::Config;

/// Sizes of the MoE decoder (defaults: a small model that trains in minutes on the emulated
/// NPU).
#[derive(Config, Debug, PartialEq)]
pub struct MoeConfig {
    /// Vocabulary (bytes).
    #[config(default = 256)]
    pub vocab: usize,
    /// Hidden size.
    #[config(default = 256)]
    pub hidden: usize,
    /// Transformer blocks.
    #[config(default = 4)]
    pub layers: usize,
    /// Query heads.
    #[config(default = 8)]
    pub q_heads: usize,
    /// Key/value heads (grouped-query attention).
    #[config(default = 2)]
    pub kv_heads: usize,
    /// Experts per MoE layer.
    #[config(default = 8)]
    pub experts: usize,
    /// Experts each token is routed to.
    #[config(default = 2)]
    pub top_k: usize,
    /// Hidden size of each expert's SwiGLU MLP.
    #[config(default = 512)]
    pub expert_hidden: usize,
    /// Longest sequence (prompt and generation) a request may reach.
    #[config(default = 512)]
    pub max_seq: usize,
    /// Rotary embedding base.
    #[config(default = 10000.0)]
    pub rope_theta: f64,
    /// Layer-norm epsilon.
    #[config(default = 1e-5)]
    pub eps: f64,
    /// Weight of the load-balancing loss.
    #[config(default = 0.01)]
    pub aux_loss: f64,
}

/// A configuration that cannot build a model.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid MoE configuration: {0}")]
pub struct ConfigError(pub String);

impl MoeConfig {
    /// Dimension of each attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden / self.q_heads.max(1)
    }

    /// Checks that the sizes fit together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |m: String| Err(ConfigError(m));
        if self.q_heads == 0 || self.kv_heads == 0 || self.hidden == 0 {
            return fail("hidden, q_heads and kv_heads must be positive".into());
        }
        if !self.hidden.is_multiple_of(self.q_heads) {
            return fail(format!(
                "hidden {} is not a multiple of q_heads {}",
                self.hidden, self.q_heads
            ));
        }
        if !self.q_heads.is_multiple_of(self.kv_heads) {
            return fail(format!(
                "q_heads {} is not a multiple of kv_heads {}",
                self.q_heads, self.kv_heads
            ));
        }
        if !self.head_dim().is_multiple_of(2) {
            return fail(format!(
                "the head dim {} must be even for rotary embeddings",
                self.head_dim()
            ));
        }
        if self.top_k == 0 || self.top_k > self.experts {
            return fail(format!(
                "top_k {} must be in 1..={} (the experts)",
                self.top_k, self.experts
            ));
        }
        if self.vocab == 0 || self.layers == 0 || self.expert_hidden == 0 || self.max_seq == 0 {
            return fail("vocab, layers, expert_hidden and max_seq must be positive".into());
        }
        Ok(())
    }
}
