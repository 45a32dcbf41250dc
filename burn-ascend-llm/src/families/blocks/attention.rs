//! Attention blocks: each projects its layer's input to queries, keys and values, attends
//! causally over the whole sequence (training, the dense reference) or through the paged
//! cache ([`PagedAttention`]), and projects the result back.

use burn::module::Module;
use burn::tensor::activation::softmax;
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Int, Tensor};
use burn_ascend::FusedOps;

use super::mla::{Mla, MlaConfig};
use super::norm::RmsNorm;
use super::quant::{Projection, Projections, Quantize};
use super::rope::{Rope, RotaryRows};
use crate::engine::step::PagedAttention;
use crate::families::parallel::Part;
use crate::families::weights::{Cut, Expected, Sink, Source};
use crate::families::LoadError;

/// Grouped-query attention (config side).
#[derive(Debug, Clone, PartialEq)]
pub struct GqaSpec {
    /// Query heads.
    pub q_heads: usize,
    /// Key/value heads (a divisor of `q_heads`).
    pub kv_heads: usize,
    /// Each head's dim (`head_dim`, or hidden / heads).
    pub head_dim: usize,
    /// Whether q, k and v projections have a bias (Qwen2's `qkv_bias`, Qwen3's
    /// `attention_bias`).
    pub qkv_bias: bool,
    /// Whether the output projection has a bias (Qwen3's `attention_bias`).
    pub o_bias: bool,
    /// Whether each head's q and k go through an RMS norm of `[head_dim]` before rope (Qwen3).
    pub qk_norm: bool,
    /// The q/k norms' epsilon.
    pub eps: f64,
    /// The rotary embedding.
    pub rope: Rope,
}

/// An attention block (config side).
#[derive(Debug, Clone, PartialEq)]
pub enum AttentionSpec {
    /// [`Gqa`].
    Gqa(GqaSpec),
    /// [`Mla`].
    Mla(MlaConfig),
}

/// The rows an attention block keeps per cached token: see
/// [`crate::engine::step::CacheLayout`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheRows {
    /// Query heads.
    pub query_heads: usize,
    /// Key heads.
    pub kv_heads: usize,
    /// Key dim.
    pub key_dim: usize,
    /// Value dim of separate value rows, or none.
    pub value_dim: Option<usize>,
}

impl AttentionSpec {
    /// The block's tensors under `layer` (`model.layers.N`).
    pub fn expected(&self, layer: &str, hidden: usize, out: &mut Expected) {
        match self {
            AttentionSpec::Gqa(s) => {
                let p = |n: &str| format!("{layer}.self_attn.{n}");
                let (q, kv) = (s.q_heads * s.head_dim, s.kv_heads * s.head_dim);
                out.linear(&p("q_proj"), hidden, q, s.qkv_bias);
                out.linear(&p("k_proj"), hidden, kv, s.qkv_bias);
                out.linear(&p("v_proj"), hidden, kv, s.qkv_bias);
                out.linear(&p("o_proj"), q, hidden, s.o_bias);
                if s.qk_norm {
                    out.tensor(p("q_norm.weight"), vec![s.head_dim]);
                    out.tensor(p("k_norm.weight"), vec![s.head_dim]);
                }
            }
            AttentionSpec::Mla(m) => m.expected(layer, out),
        }
    }

    /// Loads the block under `layer`: the heads `part` holds (see
    /// [`crate::families::parallel`]).
    pub fn load<B: FusedOps>(
        &self,
        layer: &str,
        src: &Source<B>,
        part: Part,
    ) -> Result<Attention<B>, LoadError> {
        Ok(match self {
            AttentionSpec::Gqa(s) => {
                let p = |n: &str| format!("{layer}.self_attn.{n}");
                let norm = |n: &str| -> Result<Option<RmsNorm<B>>, LoadError> {
                    Ok(match s.qk_norm {
                        true => Some(RmsNorm::new(src.tensor(&p(n))?, s.eps)),
                        false => None,
                    })
                };
                let d = s.head_dim;
                let (q, kv) = (part.share(s.q_heads), part.kv_heads(s.kv_heads));
                let features = |heads: &std::ops::Range<usize>| heads.start * d..heads.end * d;
                let heads = |heads: &std::ops::Range<usize>| Cut::Out {
                    range: features(heads),
                    width: heads.len() * d,
                };
                let bias = s.qkv_bias;
                Attention::Gqa(Gqa {
                    qkv: Projections::new(vec![
                        src.projection_part(&p("q_proj"), bias, heads(&q))?,
                        src.projection_part(&p("k_proj"), bias, heads(&kv))?,
                        src.projection_part(&p("v_proj"), bias, heads(&kv))?,
                    ]),
                    o: src.projection_part(
                        &p("o_proj"),
                        s.o_bias,
                        Cut::In {
                            range: features(&q),
                            first: part.is_first(),
                        },
                    )?,
                    q_norm: norm("q_norm.weight")?,
                    k_norm: norm("k_norm.weight")?,
                    spec: GqaSpec {
                        q_heads: q.len(),
                        kv_heads: kv.len(),
                        ..s.clone()
                    },
                })
            }
            AttentionSpec::Mla(m) => Attention::Mla(m.load(layer, src, part)?),
        })
    }
}

/// Grouped-query attention with rope, optional q/k/v bias and per-head q/k RMS norms.
#[derive(Module, Debug)]
pub struct Gqa<B: Backend> {
    /// q, k and v, side by side where they join (one matmul).
    qkv: Projections<B>,
    o: Projection<B>,
    q_norm: Option<RmsNorm<B>>,
    k_norm: Option<RmsNorm<B>>,
    #[module(skip)]
    spec: GqaSpec,
}

impl<B: FusedOps> Gqa<B> {
    /// Projects `x [B, S, H]` to rotated queries `[B, S, HQ, D]`, rotated keys and values
    /// `[B, S, HKV, D]` of the tokens whose rotary rows are `rotary`.
    fn project(
        &self,
        x: Tensor<B, 3>,
        rotary: &RotaryRows<B>,
    ) -> (Tensor<B, 4>, Tensor<B, 4>, Tensor<B, 4>) {
        let s = &self.spec;
        let [b, t, _] = x.dims();
        let [q, k, v]: [Tensor<B, 3>; 3] = self
            .qkv
            .forward(x)
            .try_into()
            .unwrap_or_else(|_| unreachable!("q, k and v"));
        let heads = |y: Tensor<B, 3>, n: usize| y.reshape([b, t, n, s.head_dim]);
        let (mut q, mut k) = (heads(q, s.q_heads), heads(k, s.kv_heads));
        let v = heads(v, s.kv_heads);
        if let (Some(qn), Some(kn)) = (&self.q_norm, &self.k_norm) {
            q = qn.forward(q);
            k = kn.forward(k);
        }
        let (q, k) = s.rope.turn(q, k, rotary);
        (q, k, v)
    }

    fn sm_scale(&self) -> f64 {
        (self.spec.head_dim as f64).powf(-0.5) * self.spec.rope.attention_factor()
    }
}

/// A layer's attention block.
// One per layer, never moved in a loop; Burn's Module derive cannot box a variant.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum Attention<B: Backend> {
    /// [`Gqa`].
    Gqa(Gqa<B>),
    /// [`Mla`].
    Mla(Mla<B>),
}

impl<B: FusedOps> Attention<B> {
    /// The block with its projections quantized (see [`Mla::quantize`] for MLA). In W8A8, GQA's
    /// q, k and v, which read the layer's input norm `input_norm`, are smoothed for it.
    pub fn quantize(self, mode: Quantize, input_norm: &RmsNorm<B>) -> Self {
        let gamma = || input_norm.weight.val();
        match self {
            Attention::Gqa(a) => Attention::Gqa(Gqa {
                qkv: a.qkv.quantize_after_norm(mode, gamma()),
                o: a.o.quantize(mode),
                ..a
            }),
            Attention::Mla(a) => Attention::Mla(a.quantize(mode)),
        }
    }

    /// The rows the block caches per token.
    pub fn cache_rows(&self) -> CacheRows {
        match self {
            Attention::Gqa(a) => CacheRows {
                query_heads: a.spec.q_heads,
                kv_heads: a.spec.kv_heads,
                key_dim: a.spec.head_dim,
                value_dim: Some(a.spec.head_dim),
            },
            Attention::Mla(a) => a.cache_rows(),
        }
    }

    /// Causal attention of `x [B, S, H]` (positions `0..S`, f32) over itself: `[B, S, H]`.
    pub fn dense(&self, x: Tensor<B, 3>, positions: Tensor<B, 1>) -> Tensor<B, 3> {
        match self {
            Attention::Gqa(a) => {
                let [b, s, _] = x.dims();
                let rotary = a.spec.rope.rows(positions, a.spec.head_dim, x.dtype());
                let (q, k, v) = a.project(x, &rotary);
                let out = causal_attention(q, k, v, a.sm_scale());
                a.o.forward(out.reshape([b, s, a.spec.q_heads * a.spec.head_dim]))
            }
            Attention::Mla(a) => a.dense(x, positions),
        }
    }

    /// The step's tokens `x [T, H]` at `positions [T]` through the paged cache of `layer`:
    /// `[T, H]`.
    pub fn paged(
        &self,
        x: Tensor<B, 2>,
        positions: Tensor<B, 1>,
        layer: usize,
        cache: &mut PagedAttention<'_, B>,
    ) -> Tensor<B, 2> {
        match self {
            Attention::Gqa(a) => {
                let s = &a.spec;
                let t = x.dims()[0];
                // The step's rotary rows, built by its first layer and shared by the rest.
                let (rope, dim, dtype) = (s.rope.clone(), s.head_dim, x.dtype());
                let rotary = cache.shared((rope.clone(), dim, dtype), || {
                    rope.rows(positions, dim, dtype)
                });
                let (q, k, v) = a.project(x.unsqueeze_dim(0), &rotary);
                let rows = |r: Tensor<B, 4>, n| r.reshape([t, n, s.head_dim]);
                let out = cache.attend(
                    layer,
                    rows(q, s.q_heads),
                    vec![rows(k, s.kv_heads)],
                    Some(rows(v, s.kv_heads)),
                    a.sm_scale() as f32,
                    s.head_dim,
                );
                a.o.forward(out.reshape([t, s.q_heads * s.head_dim]))
            }
            Attention::Mla(a) => a.paged(x, positions, layer, cache),
        }
    }

    /// Writes the block's tensors under `layer`.
    pub fn save(&self, layer: &str, out: &mut Sink) {
        match self {
            Attention::Gqa(a) => {
                let p = |n: &str| format!("{layer}.self_attn.{n}");
                a.qkv.save(&["q_proj", "k_proj", "v_proj"].map(p), out);
                a.o.save(&p("o_proj"), out);
                if let (Some(qn), Some(kn)) = (&a.q_norm, &a.k_norm) {
                    out.tensor(p("q_norm.weight"), &qn.weight);
                    out.tensor(p("k_norm.weight"), &kn.weight);
                }
            }
            Attention::Mla(a) => a.save(layer, out),
        }
    }
}

/// Causal attention of queries `q [B, S, HQ, Dk]` over keys `k [B, S, HKV, Dk]` and values
/// `v [B, S, HKV, Dv]` (each key/value head serving `HQ / HKV` query heads): `[B, S, HQ, Dv]`.
pub fn causal_attention<B: Backend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    scale: f64,
) -> Tensor<B, 4> {
    let [b, s, hq, _] = q.dims();
    let hkv = k.dims()[2];
    let widen = |t: Tensor<B, 4>| {
        let d = t.dims()[3];
        t.swap_dims(1, 2)
            .unsqueeze_dim::<5>(2)
            .expand([b, hkv, hq / hkv, s, d])
            .reshape([b, hq, s, d])
    };
    let (k, v) = (widen(k), widen(v));
    let scores = q.swap_dims(1, 2).matmul(k.swap_dims(2, 3)) * scale;
    let device = scores.device();
    let rows = Tensor::<B, 1, Int>::arange(0..s as i64, &device).reshape([s, 1]);
    let cols = Tensor::<B, 1, Int>::arange(0..s as i64, &device).reshape([1, s]);
    let future: Tensor<B, 2, Bool> = cols.greater(rows);
    let scores = scores.mask_fill(
        future.unsqueeze::<4>().expand([b, hq, s, s]),
        f32::NEG_INFINITY,
    );
    softmax(scores, 3).matmul(v).swap_dims(1, 2)
}
