//! Rotary position embeddings, by the kind config.json's `rope_scaling` names.

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

/// How an attention block turns its queries and keys by position.
#[derive(Debug, Clone, PartialEq)]
pub enum Rope {
    /// The original rotary embedding (`rope_scaling` null): frequencies `theta^(-2i/d)`, the
    /// halves of each head rotated (transformers' `rotate_half`).
    Default {
        /// `rope_theta`.
        theta: f64,
    },
}

impl Rope {
    /// `x [.., S, heads, D]` turned by the angles of `positions [S]` (f32).
    pub fn apply<B: Backend, const D: usize>(
        &self,
        x: Tensor<B, D>,
        positions: Tensor<B, 1>,
    ) -> Tensor<B, D> {
        match self {
            Rope::Default { theta } => crate::moe::model::rope(x, positions, *theta),
        }
    }

    /// The factor of the attention's softmax scale `head_dim^-0.5` the scaling asks for.
    pub fn attention_factor(&self) -> f64 {
        match self {
            Rope::Default { .. } => 1.0,
        }
    }
}
