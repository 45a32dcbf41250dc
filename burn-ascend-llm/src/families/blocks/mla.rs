//! Multi-head latent attention (DeepSeek-V2 / V3), as transformers 4.57.1 computes it.
//!
//! Queries come from `q_proj`, or from the low-rank `q_a_proj -> q_a_layernorm -> q_b_proj`.
//! `kv_a_proj_with_mqa` gives each token a latent `[kv_lora_rank]` and one rotary key
//! `k_pe [qk_rope_head_dim]` shared by every head; `kv_a_layernorm` normalises the latent and
//! `kv_b_proj` expands it into each head's `k_nope [qk_nope_head_dim]` and value
//! `[v_head_dim]`. A head's score is `q_nope . k_nope + q_pe . k_pe`.
//!
//! Two ways to compute it, equal up to rounding:
//! - [`Mla::dense`]: the per-head keys and values of every position, causal attention over
//!   whole sequences (training, prefill reference);
//! - [`Mla::decode`]: the absorbed form the paged cache serves. A token's cache row is its
//!   normalised latent followed by its roped `k_pe` (one key head of `kv_lora_rank +
//!   qk_rope_head_dim` dims); each head's query is `q_nope @ W_UK_h` (in latent space) followed
//!   by its roped `q_pe`, so attention runs with one key head and the values are the rows'
//!   first `kv_lora_rank` dims (the MLA mode of `fused::decode_attention`); its output goes
//!   through `W_UV_h`, then `o_proj`. `W_UK` and `W_UV` are views of `kv_b_proj`'s weight on
//!   the device.

use burn::module::{Module, Param};
use burn::nn::{Linear, LinearConfig};
use burn::tensor::backend::Backend;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::Tensor;
use burn_ascend::FusedOps;

use super::attention::CacheRows;
use super::norm::RmsNorm;
use super::quant::{Projection, Quantize};
use super::rope::RotaryRows;
use super::yarn::Rotary;
use crate::engine::step::PagedAttention;
use crate::families::parallel::Part;
use crate::families::weights::{Cut, Expected, Sink, Source};
use crate::families::LoadError;

/// The sizes and constants of an MLA layer.
#[derive(Debug, Clone, PartialEq)]
pub struct MlaConfig {
    /// Model width.
    pub hidden: usize,
    /// Attention heads.
    pub heads: usize,
    /// Rank of the low-rank query projection, or `None` for a plain `q_proj`.
    pub q_lora_rank: Option<usize>,
    /// Rank of the key/value latent: the values' dim in the cache.
    pub kv_lora_rank: usize,
    /// Dims of each head's key and query without rotary embedding.
    pub qk_nope_head_dim: usize,
    /// Dims of the rotary part of keys and queries.
    pub qk_rope_head_dim: usize,
    /// Dims of each head's value.
    pub v_head_dim: usize,
    /// `q_a_proj`, `kv_a_proj_with_mqa` and `o_proj` have biases.
    pub attention_bias: bool,
    /// Epsilon of `q_a_layernorm` and `kv_a_layernorm` (transformers builds them with its
    /// default 1e-6, not the config's `rms_norm_eps`).
    pub latent_norm_eps: f64,
    /// The softmax scale of the scores.
    pub sm_scale: f64,
    /// The rotary embedding of `q_pe` and `k_pe`.
    pub rotary: Rotary,
}

impl MlaConfig {
    /// Dims of a head's query (and dense key).
    pub fn qk_head_dim(&self) -> usize {
        self.qk_nope_head_dim + self.qk_rope_head_dim
    }

    /// Dims of a token's cache row: the latent, then the rotary key.
    pub fn cache_dim(&self) -> usize {
        self.kv_lora_rank + self.qk_rope_head_dim
    }

    /// The layer's tensors under `layer` (`model.layers.N`), as transformers names them.
    pub fn expected(&self, layer: &str, out: &mut Expected) {
        let p = |n: &str| format!("{layer}.self_attn.{n}");
        let (h, bias) = (self.hidden, self.attention_bias);
        let q_out = self.heads * self.qk_head_dim();
        match self.q_lora_rank {
            None => out.linear(&p("q_proj"), h, q_out, false),
            Some(rank) => {
                out.linear(&p("q_a_proj"), h, rank, bias);
                out.tensor(p("q_a_layernorm.weight"), vec![rank]);
                out.linear(&p("q_b_proj"), rank, q_out, false);
            }
        }
        out.linear(&p("kv_a_proj_with_mqa"), h, self.cache_dim(), bias);
        out.tensor(p("kv_a_layernorm.weight"), vec![self.kv_lora_rank]);
        let kv_out = self.heads * (self.qk_nope_head_dim + self.v_head_dim);
        out.float_linear(&p("kv_b_proj"), self.kv_lora_rank, kv_out, false);
        out.linear(&p("o_proj"), self.heads * self.v_head_dim, h, bias);
    }

    /// Loads the layer under `layer`: the heads `part` holds (the latent projections and
    /// norms, which every head reads, whole; see [`crate::families::parallel`]).
    pub fn load<B: FusedOps>(
        &self,
        layer: &str,
        src: &Source<B>,
        part: Part,
    ) -> Result<Mla<B>, LoadError> {
        let p = |n: &str| format!("{layer}.self_attn.{n}");
        let bias = self.attention_bias;
        let norm = |n: &str| -> Result<RmsNorm<B>, LoadError> {
            Ok(RmsNorm::new(src.tensor(&p(n))?, self.latent_norm_eps))
        };
        let heads = part.share(self.heads);
        // Each head's block of `per_head` output features.
        let by_heads = |per_head: usize| Cut::Out {
            range: heads.start * per_head..heads.end * per_head,
            width: heads.len() * per_head,
        };
        let q_out = by_heads(self.qk_head_dim());
        let (q_proj, q_lora) = match self.q_lora_rank {
            None => (Some(src.projection_part(&p("q_proj"), false, q_out)?), None),
            Some(_) => (
                None,
                Some(QLora {
                    q_a_proj: src.projection(&p("q_a_proj"), bias)?,
                    q_a_layernorm: norm("q_a_layernorm.weight")?,
                    q_b_proj: src.projection_part(&p("q_b_proj"), false, q_out)?,
                }),
            ),
        };
        let values = heads.start * self.v_head_dim..heads.end * self.v_head_dim;
        let kv_b = by_heads(self.qk_nope_head_dim + self.v_head_dim);
        Ok(Mla {
            q_proj,
            q_lora,
            kv_a_proj_with_mqa: src.projection(&p("kv_a_proj_with_mqa"), bias)?,
            kv_a_layernorm: norm("kv_a_layernorm.weight")?,
            kv_b_proj: src.linear_part(&p("kv_b_proj"), false, kv_b)?,
            o_proj: src.projection_part(
                &p("o_proj"),
                bias,
                Cut::In {
                    range: values,
                    first: part.is_first(),
                },
            )?,
            cfg: MlaConfig {
                heads: heads.len(),
                ..self.clone()
            },
        })
    }
}

/// The low-rank query projection: `q_a_proj -> q_a_layernorm -> q_b_proj`.
#[derive(Module, Debug)]
pub struct QLora<B: Backend> {
    /// `[hidden, q_lora_rank]`
    pub q_a_proj: Projection<B>,
    /// `[q_lora_rank]`
    pub q_a_layernorm: RmsNorm<B>,
    /// `[q_lora_rank, heads * qk_head_dim]`
    pub q_b_proj: Projection<B>,
}

/// A multi-head latent attention layer (weights in Burn's `[in, out]` layout).
#[derive(Module, Debug)]
pub struct Mla<B: Backend> {
    /// `[hidden, heads * qk_head_dim]` when `q_lora_rank` is `None`.
    pub q_proj: Option<Projection<B>>,
    /// The low-rank query projection when `q_lora_rank` is set.
    pub q_lora: Option<QLora<B>>,
    /// `[hidden, kv_lora_rank + qk_rope_head_dim]`
    pub kv_a_proj_with_mqa: Projection<B>,
    /// `[kv_lora_rank]`
    pub kv_a_layernorm: RmsNorm<B>,
    /// `[kv_lora_rank, heads * (qk_nope_head_dim + v_head_dim)]`; stays float when the layer
    /// is quantized: decode uses its weight as the absorbed `W_UK`/`W_UV` matrices.
    pub kv_b_proj: Linear<B>,
    /// `[heads * v_head_dim, hidden]`
    pub o_proj: Projection<B>,
    /// Sizes and constants.
    #[module(skip)]
    pub cfg: MlaConfig,
}

impl<B: FusedOps> Mla<B> {
    /// A layer with Burn's default initialisation (norms at unit scale).
    pub fn new(cfg: MlaConfig, device: &B::Device) -> Self {
        let linear = |i, o, bias| LinearConfig::new(i, o).with_bias(bias).init(device);
        let norm = |n| {
            RmsNorm::new(
                Param::from_tensor(Tensor::ones([n], device)),
                cfg.latent_norm_eps,
            )
        };
        let (h, heads, bias) = (cfg.hidden, cfg.heads, cfg.attention_bias);
        let q_out = heads * cfg.qk_head_dim();
        let (q_proj, q_lora) = match cfg.q_lora_rank {
            None => (Some(linear(h, q_out, false).into()), None),
            Some(rank) => (
                None,
                Some(QLora {
                    q_a_proj: linear(h, rank, bias).into(),
                    q_a_layernorm: norm(rank),
                    q_b_proj: linear(rank, q_out, false).into(),
                }),
            ),
        };
        Self {
            q_proj,
            q_lora,
            kv_a_proj_with_mqa: linear(h, cfg.cache_dim(), bias).into(),
            kv_a_layernorm: norm(cfg.kv_lora_rank),
            kv_b_proj: linear(
                cfg.kv_lora_rank,
                heads * (cfg.qk_nope_head_dim + cfg.v_head_dim),
                false,
            ),
            o_proj: linear(heads * cfg.v_head_dim, h, bias).into(),
            cfg,
        }
    }

    /// The queries of `x [B, S, hidden]` at `positions [S]`: `q_nope [B, S, heads, nope]` and
    /// the roped `q_pe [B, S, heads, rope]`.
    pub fn queries(
        &self,
        x: Tensor<B, 3>,
        positions: Tensor<B, 1>,
    ) -> (Tensor<B, 4>, Tensor<B, 4>) {
        let (q_nope, q_pe) = self.project_queries(x);
        (q_nope, self.cfg.rotary.apply(q_pe, positions))
    }

    /// `q_nope [B, S, heads, nope]` and `q_pe [B, S, heads, rope]` of `x [B, S, hidden]`, before
    /// the rotary embedding.
    fn project_queries(&self, x: Tensor<B, 3>) -> (Tensor<B, 4>, Tensor<B, 4>) {
        let [b, s, _] = x.dims();
        let c = &self.cfg;
        let q = match (&self.q_proj, &self.q_lora) {
            (Some(q_proj), _) => q_proj.forward(x),
            (None, Some(lora)) => lora
                .q_b_proj
                .forward(lora.q_a_layernorm.forward(lora.q_a_proj.forward(x))),
            (None, None) => unreachable!("an MLA layer has q_proj or q_a_proj"),
        }
        .reshape([b, s, c.heads, c.qk_head_dim()]);
        let q_nope = q.clone().narrow(3, 0, c.qk_nope_head_dim);
        let q_pe = q.narrow(3, c.qk_nope_head_dim, c.qk_rope_head_dim);
        (q_nope, q_pe)
    }

    /// The cache rows of `x [B, S, hidden]` at `positions [S]`: the normalised latent
    /// `[B, S, kv_lora_rank]` and the roped shared key `k_pe [B, S, 1, rope]`.
    pub fn latent(&self, x: Tensor<B, 3>, positions: Tensor<B, 1>) -> (Tensor<B, 3>, Tensor<B, 4>) {
        let (latent, k_pe) = self.project_latent(x);
        (latent, self.cfg.rotary.apply(k_pe, positions))
    }

    /// The normalised latent `[B, S, kv_lora_rank]` and the shared key `k_pe [B, S, 1, rope]`
    /// of `x [B, S, hidden]`, before the rotary embedding.
    fn project_latent(&self, x: Tensor<B, 3>) -> (Tensor<B, 3>, Tensor<B, 4>) {
        let [b, s, _] = x.dims();
        let c = &self.cfg;
        let compressed = self.kv_a_proj_with_mqa.forward(x);
        let latent = compressed.clone().narrow(2, 0, c.kv_lora_rank);
        let k_pe = compressed
            .narrow(2, c.kv_lora_rank, c.qk_rope_head_dim)
            .reshape([b, s, 1, c.qk_rope_head_dim]);
        (self.kv_a_layernorm.forward(latent), k_pe)
    }

    /// Causal attention over whole sequences `x [B, S, hidden]` at `positions [S]`, through
    /// `o_proj`: `[B, S, hidden]`.
    pub fn dense(&self, x: Tensor<B, 3>, positions: Tensor<B, 1>) -> Tensor<B, 3> {
        let [b, s, _] = x.dims();
        let c = &self.cfg;
        let (heads, nope, rope, vd) = (
            c.heads,
            c.qk_nope_head_dim,
            c.qk_rope_head_dim,
            c.v_head_dim,
        );
        let (q_nope, q_pe) = self.queries(x.clone(), positions.clone());
        let (latent, k_pe) = self.latent(x, positions);
        let kv = self
            .kv_b_proj
            .forward(latent)
            .reshape([b, s, heads, nope + vd]);
        let k_nope = kv.clone().narrow(3, 0, nope);
        let v = kv.narrow(3, nope, vd);
        let q = Tensor::cat(vec![q_nope, q_pe], 3);
        let k = Tensor::cat(vec![k_nope, k_pe.expand([b, s, heads, rope])], 3);
        let out = attention(
            q.swap_dims(1, 2),
            k.swap_dims(1, 2),
            v.swap_dims(1, 2),
            None,
            None,
            AttentionModuleOptions {
                scale: Some(c.sm_scale),
                softcap: None,
                is_causal: true,
            },
        );
        self.o_proj
            .forward(out.swap_dims(1, 2).reshape([b, s, heads * vd]))
    }

    /// The absorbed projections, views of `kv_b_proj`'s weight on the device: `W_UK [heads,
    /// nope, kv_lora_rank]` (a head's `q_nope` into latent space) and `W_UV [heads,
    /// kv_lora_rank, v_head_dim]` (a head's attended latent into its value space).
    pub fn absorbed(&self) -> (Tensor<B, 3>, Tensor<B, 3>) {
        let c = &self.cfg;
        let (r, heads, nope, vd) = (c.kv_lora_rank, c.heads, c.qk_nope_head_dim, c.v_head_dim);
        let w = self.kv_b_proj.weight.val().reshape([r, heads, nope + vd]);
        let w_uk = w.clone().narrow(2, 0, nope).permute([1, 2, 0]);
        let w_uv = w.narrow(2, nope, vd).swap_dims(0, 1);
        (w_uk, w_uv)
    }

    /// One serving step of `x [T, hidden]` in the absorbed form, its tokens' rotary rows
    /// `rotary` ([`Rotary::rows`](super::yarn::Rotary::rows) of their positions; q and k turned
    /// by [`Rotary::turn`](super::yarn::Rotary::turn) in one launch).
    ///
    /// `attend(q [T, heads, D], rows, sm_scale, value_dim)` (D = [`MlaConfig::cache_dim`]) gets
    /// each token's cache row as two pieces side by side, the latent `[T, 1, kv_lora_rank]` and
    /// the turned rotary key `[T, 1, qk_rope_head_dim]` (a cache write places them without
    /// joining them first); it must cache the step's rows and attend each query to its token's
    /// cached rows, taking the first `value_dim` dims of a row as its value: `[T, heads,
    /// value_dim]` (the engine's `PagedAttention::attend` with no value rows). Returns
    /// `[T, hidden]`.
    pub fn decode(
        &self,
        x: Tensor<B, 2>,
        rotary: &RotaryRows<B>,
        attend: impl FnOnce(Tensor<B, 3>, Vec<Tensor<B, 3>>, f32, usize) -> Tensor<B, 3>,
    ) -> Tensor<B, 2> {
        let [t, hidden] = x.dims();
        let c = &self.cfg;
        let (heads, r, vd, rope) = (c.heads, c.kv_lora_rank, c.v_head_dim, c.qk_rope_head_dim);
        let x = x.reshape([1, t, hidden]);
        let (q_nope, q_pe) = self.project_queries(x.clone());
        let (latent, k_pe) = self.project_latent(x);
        let (q_pe, k_pe) = c.rotary.turn(
            q_pe.reshape([t, heads, rope]),
            k_pe.reshape([t, 1, rope]),
            rotary,
        );
        let (w_uk, w_uv) = self.absorbed();
        let q_latent = q_nope
            .reshape([t, heads, c.qk_nope_head_dim])
            .swap_dims(0, 1)
            .matmul(w_uk)
            .swap_dims(0, 1);
        let q = Tensor::cat(vec![q_latent, q_pe], 2);
        let rows = vec![latent.reshape([t, 1, r]), k_pe];
        let attended = attend(q, rows, c.sm_scale as f32, r);
        let values = attended.swap_dims(0, 1).matmul(w_uv).swap_dims(0, 1);
        self.o_proj.forward(values.reshape([t, heads * vd]))
    }
    /// The layer with its query, latent and output projections quantized (`kv_b_proj` stays
    /// float: see the field).
    pub fn quantize(self, mode: Quantize) -> Self {
        Self {
            q_proj: self.q_proj.map(|q| q.quantize(mode)),
            q_lora: self.q_lora.map(|l| QLora {
                q_a_proj: l.q_a_proj.quantize(mode),
                q_a_layernorm: l.q_a_layernorm,
                q_b_proj: l.q_b_proj.quantize(mode),
            }),
            kv_a_proj_with_mqa: self.kv_a_proj_with_mqa.quantize(mode),
            o_proj: self.o_proj.quantize(mode),
            ..self
        }
    }

    /// The rows it caches per token: one key head of [`MlaConfig::cache_dim`] dims whose first
    /// `kv_lora_rank` are the values.
    pub fn cache_rows(&self) -> CacheRows {
        CacheRows {
            query_heads: self.cfg.heads,
            kv_heads: 1,
            key_dim: self.cfg.cache_dim(),
            value_dim: None,
        }
    }

    /// [`Mla::decode`] of the step's tokens `x [T, hidden]` at `positions [T]` through the
    /// paged cache of `layer`.
    pub fn paged(
        &self,
        x: Tensor<B, 2>,
        positions: Tensor<B, 1>,
        layer: usize,
        cache: &mut PagedAttention<'_, B>,
    ) -> Tensor<B, 2> {
        // The step's rotary rows, built by its first layer and shared by the rest.
        let (rotary, dtype) = (self.cfg.rotary.clone(), x.dtype());
        let rows = cache.shared((rotary.clone(), dtype), || rotary.rows(positions, dtype));
        self.decode(x, &rows, |q, rows, sm_scale, value_dim| {
            cache.attend(layer, q, rows, None, sm_scale, value_dim)
        })
    }

    /// Writes the layer's tensors under `layer`, as transformers names them.
    pub fn save(&self, layer: &str, out: &mut Sink) {
        let p = |n: &str| format!("{layer}.self_attn.{n}");
        if let Some(q) = &self.q_proj {
            q.save(&p("q_proj"), out);
        }
        if let Some(lora) = &self.q_lora {
            lora.q_a_proj.save(&p("q_a_proj"), out);
            out.tensor(p("q_a_layernorm.weight"), &lora.q_a_layernorm.weight);
            lora.q_b_proj.save(&p("q_b_proj"), out);
        }
        self.kv_a_proj_with_mqa.save(&p("kv_a_proj_with_mqa"), out);
        out.tensor(p("kv_a_layernorm.weight"), &self.kv_a_layernorm.weight);
        out.linear(&p("kv_b_proj"), &self.kv_b_proj);
        self.o_proj.save(&p("o_proj"), out);
    }
}
