//! Rotary position embedding as the DeepSeek checkpoints use it in transformers 4.57.1: the
//! default frequencies or YaRN's blend of interpolated and extrapolated ones, YaRN's factor on
//! cos and sin, DeepSeek's softmax-scale multiplier, and the interleaved pair layout.
//!
//! The frequencies are computed on the host from the config (no tensor data), in f32 and in
//! the order `modeling_rope_utils._compute_yarn_parameters` computes them, so the angles match
//! transformers' to the bit where the f32 operations do.

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor};
use burn_ascend::FusedOps;

use super::rope::RotaryRows;
use crate::moe::model::rotate;

/// A `rope_scaling` of type `yarn` (the keys transformers 4.57.1 reads).
#[derive(Debug, Clone, PartialEq)]
pub struct Yarn {
    /// `factor`: the context extension.
    pub factor: f64,
    /// `original_max_position_embeddings`, else the config's `max_position_embeddings`.
    pub original_max_position_embeddings: f64,
    /// `beta_fast` (32 when absent or 0).
    pub beta_fast: f64,
    /// `beta_slow` (1 when absent or 0).
    pub beta_slow: f64,
    /// `mscale`, if given (0 counts as absent, as transformers' truth test does).
    pub mscale: Option<f64>,
    /// `mscale_all_dim`, if given (0 counts as absent).
    pub mscale_all_dim: Option<f64>,
    /// `attention_factor`, if given: the factor on cos and sin, instead of the one inferred.
    pub attention_factor: Option<f64>,
    /// `truncate` (default true): the correction range is rounded out to whole dims.
    pub truncate: bool,
}

/// YaRN's magnitude correction `0.1 * mscale * ln(scale) + 1` (1 when `scale <= 1`).
pub fn yarn_get_mscale(scale: f64, mscale: f64) -> f64 {
    if scale <= 1.0 {
        1.0
    } else {
        0.1 * mscale * scale.ln() + 1.0
    }
}

impl Yarn {
    /// The factor on cos and sin: `attention_factor`, else `mscale(factor, mscale) /
    /// mscale(factor, mscale_all_dim)` when both are given, else `mscale(factor, 1)`.
    pub fn attention_factor(&self) -> f64 {
        match (self.attention_factor, self.mscale, self.mscale_all_dim) {
            (Some(f), _, _) => f,
            (None, Some(m), Some(all)) => {
                yarn_get_mscale(self.factor, m) / yarn_get_mscale(self.factor, all)
            }
            _ => yarn_get_mscale(self.factor, 1.0),
        }
    }

    /// DeepSeek's multiplier of the softmax scale: `mscale(factor, mscale_all_dim)^2` when
    /// `mscale_all_dim` is given, else 1 (transformers 4.57.1's DeepSeek-V2 leaves it out, 5.x's
    /// and DeepSeek's own code have it).
    pub fn softmax_scale_multiplier(&self) -> f64 {
        self.mscale_all_dim.map_or(1.0, |all| {
            let m = yarn_get_mscale(self.factor, all);
            m * m
        })
    }
}

/// The rotary embedding of one attention layer.
#[derive(Debug, Clone, PartialEq)]
pub struct Rotary {
    /// `[D / 2]` inverse frequencies (f32, as transformers keeps them).
    pub inv_freq: Vec<f32>,
    /// The factor on cos and sin.
    pub attention_factor: f32,
    /// The rotated pairs are adjacent dims `(2i, 2i + 1)` (DeepSeek-V3's `rope_interleave`,
    /// DeepSeek-V2's complex form) rather than `(i, i + D/2)`.
    pub interleaved: bool,
}

/// `base ** (2i / dim)` for `i < dim / 2`, in f32 as `torch.arange(0, dim, 2).float() / dim`
/// and the f32 power give it.
fn pos_freqs(dim: usize, base: f64) -> impl Iterator<Item = f32> {
    (0..dim / 2).map(move |i| (base as f32).powf((2 * i) as f32 / dim as f32))
}

impl Rotary {
    /// Plain rotary frequencies `1 / base^(2i / dim)`.
    pub fn default_rope(dim: usize, base: f64, interleaved: bool) -> Self {
        Self {
            inv_freq: pos_freqs(dim, base).map(|p| 1.0 / p).collect(),
            attention_factor: 1.0,
            interleaved,
        }
    }

    /// YaRN: interpolated frequencies (`/ factor`) for the dims that turn fewer than
    /// `beta_slow` times over the original context, extrapolated ones for those turning more
    /// than `beta_fast` times, a linear ramp between.
    pub fn yarn(dim: usize, base: f64, yarn: &Yarn, interleaved: bool) -> Self {
        let correction_dim = |rotations: f64| {
            dim as f64
                * (yarn.original_max_position_embeddings / (rotations * 2.0 * std::f64::consts::PI))
                    .ln()
                / (2.0 * base.ln())
        };
        let (mut low, mut high) = (
            correction_dim(yarn.beta_fast),
            correction_dim(yarn.beta_slow),
        );
        if yarn.truncate {
            (low, high) = (low.floor(), high.ceil());
        }
        let (low, mut high) = (low.max(0.0), high.min(dim as f64 - 1.0));
        if low == high {
            // transformers' guard against a zero-width ramp.
            high += 0.001;
        }
        let factor = yarn.factor as f32;
        let inv_freq = pos_freqs(dim, base)
            .enumerate()
            .map(|(i, p)| {
                let ramp = ((i as f32 - low as f32) / (high - low) as f32).clamp(0.0, 1.0);
                let extrapolation = 1.0 - ramp;
                (1.0 / (factor * p)) * (1.0 - extrapolation) + (1.0 / p) * extrapolation
            })
            .collect();
        Self {
            inv_freq,
            attention_factor: yarn.attention_factor() as f32,
            interleaved,
        }
    }

    /// The rotated dims.
    pub fn dim(&self) -> usize {
        2 * self.inv_freq.len()
    }

    /// The cos/sin rows of the tokens at `positions [T]` (f32) in `dtype`, the attention factor
    /// applied: what [`Rotary::turn`] takes, built once per step.
    pub fn rows<B: Backend>(&self, positions: Tensor<B, 1>, dtype: DType) -> RotaryRows<B> {
        RotaryRows::new(positions, &self.inv_freq, self.attention_factor, dtype)
    }

    /// `q [T, Nq, D]` and `k [T, Nk, D]` turned by the rows `rows` of their tokens, in one
    /// [`FusedOps::rotary_embedding`]. Interleaved pairs are turned in place (GPT-J), where
    /// [`Rotary::apply`] first gathers them into halves: the two give each q and k the same
    /// permutation of the same values, so every `q . k` agrees; a cache holds one or the
    /// other, never both.
    pub fn turn<B: FusedOps>(
        &self,
        q: Tensor<B, 3>,
        k: Tensor<B, 3>,
        rows: &RotaryRows<B>,
    ) -> (Tensor<B, 3>, Tensor<B, 3>) {
        let (cos_sin, index) = (rows.cos_sin.clone(), rows.rows.clone());
        burn_ascend::fused::rotary_embedding(q, k, cos_sin, index, self.interleaved)
    }

    /// Rotates `x [.., S, heads, D]` at `positions [S]` (f32).
    ///
    /// Angles, cos and sin are computed in f32 whatever x's dtype (see
    /// `crate::moe::model::rope`), scaled by the attention factor, then cast to x's dtype.
    /// With `interleaved`, x's pairs `(2i, 2i + 1)` are first gathered into halves (evens, then
    /// odds), as DeepSeek-V3's `apply_rotary_pos_emb_interleave` does, and the result stays in
    /// that order. DeepSeek-V2's complex form gives the same values back interleaved; queries
    /// and keys are both permuted alike, so every `q . k` is the same.
    pub fn apply<B: Backend, const D: usize>(
        &self,
        x: Tensor<B, D>,
        positions: Tensor<B, 1>,
    ) -> Tensor<B, D> {
        let dims = x.dims();
        let d = dims[D - 1];
        let x = if self.interleaved {
            let rows = x.shape().num_elements() / d;
            x.reshape([rows, d / 2, 2]).swap_dims(1, 2).reshape(dims)
        } else {
            x
        };
        rotate(x, positions, &self.inv_freq, self.attention_factor)
    }
}
