//! Rotary position embeddings, by the kind config.json's `rope_scaling` names.

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Int, Tensor, TensorData};
use burn_ascend::FusedOps;

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

/// The cos/sin rows of a step's tokens for one rotary embedding, what
/// [`FusedOps::rotary_embedding`] takes: `cos_sin [T, D]` in the model's dtype (each token's
/// `D / 2` cosines, then its sines) and `rows [T]` (I64) indexing it.
#[derive(Debug, Clone)]
pub struct RotaryRows<B: Backend> {
    /// `[T, D]`.
    pub cos_sin: Tensor<B, 2>,
    /// `[T]`: the row of each token.
    pub rows: Tensor<B, 1, Int>,
}

impl<B: Backend> RotaryRows<B> {
    /// The rows of the tokens at `positions [T]` (f32) for the frequencies `inv_freq`, cos and
    /// sin times `factor` (YaRN's attention factor; 1 for plain rope), in `dtype`: built once
    /// per step and shared by its layers. The angles, and the factor's product, are computed in
    /// f32 and only cos and sin take the dtype, as in [`crate::moe::model::rotate`] (which says
    /// why).
    pub fn new(positions: Tensor<B, 1>, inv_freq: &[f32], factor: f32, dtype: DType) -> Self {
        let half = inv_freq.len();
        let device = positions.device();
        let inv_freq = TensorData::new(inv_freq.to_vec(), [half]);
        let inv_freq = Tensor::<B, 1>::from_data(inv_freq, (&device, DType::F32));
        let t = positions.dims()[0];
        let angles = positions.cast(DType::F32).reshape([t, 1]) * inv_freq.reshape([1, half]);
        let cos_sin = Tensor::cat(vec![angles.clone().cos(), angles.sin()], 1);
        let cos_sin = match factor {
            1.0 => cos_sin,
            f => cos_sin.mul_scalar(f),
        };
        let rows = Tensor::<B, 1, Int>::arange(0..t as i64, &device).cast(DType::I64);
        RotaryRows {
            cos_sin: cos_sin.cast(dtype),
            rows,
        }
    }
}

impl Rope {
    /// The rows of the tokens at `positions [T]` (f32) for heads of `dim`, in `dtype` (see
    /// [`RotaryRows::new`]).
    pub fn rows<B: Backend>(
        &self,
        positions: Tensor<B, 1>,
        dim: usize,
        dtype: DType,
    ) -> RotaryRows<B> {
        let Rope::Default { theta } = self;
        let inv_freq = crate::moe::model::rope_frequencies(*theta, dim);
        RotaryRows::new(positions, &inv_freq, 1.0, dtype)
    }

    /// `q [B, S, Nq, D]` and `k [B, S, Nk, D]` turned by `rows` (of the S positions): one
    /// [`FusedOps::rotary_embedding`].
    pub fn turn<B: FusedOps>(
        &self,
        q: Tensor<B, 4>,
        k: Tensor<B, 4>,
        rows: &RotaryRows<B>,
    ) -> (Tensor<B, 4>, Tensor<B, 4>) {
        let ([b, s, nq, d], nk) = (q.dims(), k.dims()[2]);
        let index = match b {
            1 => rows.rows.clone(),
            _ => rows
                .rows
                .clone()
                .unsqueeze_dim::<2>(0)
                .expand([b, s])
                .reshape([b * s]),
        };
        let (q, k) = burn_ascend::fused::rotary_embedding(
            q.reshape([b * s, nq, d]),
            k.reshape([b * s, nk, d]),
            rows.cos_sin.clone(),
            index,
            false,
        );
        (q.reshape([b, s, nq, d]), k.reshape([b, s, nk, d]))
    }

    /// The factor of the attention's softmax scale `head_dim^-0.5` the scaling asks for.
    pub fn attention_factor(&self) -> f64 {
        match self {
            Rope::Default { .. } => 1.0,
        }
    }
}
