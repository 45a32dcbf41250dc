//! DeepSeek-V2 / V3 building blocks on `Ascend` (the emulated NPU) against independent
//! references: YaRN frequencies and factors as transformers 4.57.1 computes them, the rotary
//! embedding in closed form, multi-head latent attention's dense path against a plain host
//! implementation of transformers' formulas and its absorbed paged decode (the MLA mode of
//! `fused::decode_attention`) against the dense path, the three routers on hand-made scores,
//! DeepSeek's config errors, its config.json as transformers 5.x writes it and its
//! multi-token-prediction layer. The fixture checkpoints
//! against transformers' logits and greedy tokens are in `tests/families.rs`, with the other
//! families.

mod common;

use std::path::{Path, PathBuf};

use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::{DType, IndexingUpdateOp, Int, Tensor, TensorData};
use burn_ascend::fused::{self, DecodeAttentionOptions, DecodePath};
use burn_ascend_llm::engine::step::StepModel;
use burn_ascend_llm::families::blocks::deepseek_router::{
    DeepseekRouter, RouterConfig, TopkMethod,
};
use burn_ascend_llm::families::blocks::mla::{Mla, MlaConfig};
use burn_ascend_llm::families::blocks::quant::Projection;
use burn_ascend_llm::families::blocks::yarn::{Rotary, Yarn};
use burn_ascend_llm::families::{self, spec_of};
use burn_ascend_llm::hf;
use burn_ascend_suite::host_values::host_values;
use common::*;

type B = Ascend;

fn floats<const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().to_vec().unwrap()
}

fn ints<const D: usize>(t: Tensor<B, D, Int>) -> Vec<i64> {
    t.into_data().convert::<i64>().to_vec().unwrap()
}

fn tensor<const D: usize>(values: Vec<f32>, shape: [usize; D]) -> Tensor<B, D> {
    Tensor::from_data(TensorData::new(values, shape), &device())
}

fn assert_near(what: &str, got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (*g as f64 - w).abs() <= tol * w.abs().max(1.0),
            "{what}: element {i} is {g}, the reference gives {w}\n got  {got:?}\n want {want:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// YaRN and the rotary embedding
// ---------------------------------------------------------------------------------------------

fn yarn(factor: f64, original: f64) -> Yarn {
    Yarn {
        factor,
        original_max_position_embeddings: original,
        beta_fast: 32.0,
        beta_slow: 1.0,
        mscale: None,
        mscale_all_dim: None,
        attention_factor: None,
        truncate: true,
    }
}

/// Frequencies, cos/sin factors and DeepSeek-V3's softmax scale against the values
/// transformers 4.57.1 gives for the same `rope_scaling` (`ROPE_INIT_FUNCTIONS["yarn"]` and
/// `DeepseekV3Attention.scaling`, qk_rope_head_dim 16, rope_theta 10000, qk_head_dim 24).
#[test]
fn yarn_frequencies_and_factors_match_transformers() {
    let base_scale = 24f64.powf(-0.5);
    let cases = [
        (
            // DeepSeek-V2's published form: mscale = mscale_all_dim.
            Yarn {
                mscale: Some(0.707),
                mscale_all_dim: Some(0.707),
                ..yarn(40.0, 4096.0)
            },
            [
                1.0,
                3.162277639e-01,
                1.000000015e-01,
                2.391472459e-02,
                5.124999676e-03,
                8.498621755e-04,
                2.499999937e-05,
                7.905694474e-06,
            ],
            1.0,
            0.3244810821936116,
        ),
        (
            // mscale without mscale_all_dim: the factor is inferred from `factor` alone.
            Yarn {
                mscale: Some(1.0),
                ..yarn(8.0, 64.0)
            },
            [
                1.0,
                2.239946574e-01,
                4.166666418e-02,
                3.952847328e-03,
                1.249999972e-03,
                3.952847328e-04,
                1.250000059e-04,
                3.952847328e-05,
            ],
            1.2079441541679836,
            base_scale,
        ),
        (
            Yarn {
                beta_fast: 8.0,
                beta_slow: 2.0,
                mscale: Some(1.0),
                mscale_all_dim: Some(0.5),
                truncate: false,
                ..yarn(4.0, 256.0)
            },
            [
                1.0,
                3.162277639e-01,
                6.349658966e-02,
                7.905694656e-03,
                2.499999944e-03,
                7.905694656e-04,
                2.500000119e-04,
                7.905694656e-05,
            ],
            1.0648216253695715,
            0.23340248099017752,
        ),
    ];
    for (i, (y, inv_freq, factor, scale)) in cases.into_iter().enumerate() {
        let rotary = Rotary::yarn(16, 10_000.0, &y, false);
        let want: Vec<f64> = inv_freq.to_vec();
        assert_near(
            &format!("case {i}: inv_freq"),
            &rotary.inv_freq,
            &want,
            1e-6,
        );
        assert!(
            (rotary.attention_factor as f64 - factor).abs() < 1e-6,
            "case {i}: attention factor {} against {factor}",
            rotary.attention_factor
        );
        let got = base_scale * y.softmax_scale_multiplier();
        assert!(
            (got - scale).abs() < 1e-12,
            "case {i}: softmax scale {got} against {scale}"
        );
    }
    let plain = Rotary::default_rope(16, 10_000.0, true);
    let want = [
        1.0,
        3.162277639e-01,
        1.000000015e-01,
        3.162277862e-02,
        9.999999776e-03,
        3.162277862e-03,
        1.000000047e-03,
        3.162277862e-04,
    ];
    assert_near("default inv_freq", &plain.inv_freq, &want, 1e-6);
    assert_eq!(plain.attention_factor, 1.0);
}

/// The rotation of `x [S, H, D]` in closed form (f64): the pairs `(j, j + D/2)`, or with
/// `interleaved` the pairs `(2j, 2j + 1)` written out as halves (evens then odds, as
/// DeepSeek-V3's interleaved rope leaves them), each turned by `p * inv_freq[j]` and scaled.
fn rotate(x: &[f32], positions: &[f32], heads: usize, rotary: &Rotary) -> Vec<f64> {
    let d = rotary.dim();
    let half = d / 2;
    let af = rotary.attention_factor as f64;
    let mut out = vec![0.0; x.len()];
    for (s, &p) in positions.iter().enumerate() {
        for h in 0..heads {
            let row = (s * heads + h) * d;
            for j in 0..half {
                let angle = p as f64 * rotary.inv_freq[j] as f64;
                let (a, b) = if rotary.interleaved {
                    (x[row + 2 * j], x[row + 2 * j + 1])
                } else {
                    (x[row + j], x[row + half + j])
                };
                let (a, b) = (a as f64, b as f64);
                out[row + j] = af * (a * angle.cos() - b * angle.sin());
                out[row + half + j] = af * (b * angle.cos() + a * angle.sin());
            }
        }
    }
    out
}

#[test]
fn rotary_turns_each_pair_by_its_angle() {
    let positions: Vec<f32> = vec![0.0, 1.0, 5.0, 17.0, 300.0];
    let (s, heads, d) = (positions.len(), 3, 16);
    let y = Yarn {
        mscale: Some(1.0),
        ..yarn(8.0, 64.0)
    };
    for rotary in [
        Rotary::yarn(d, 10_000.0, &y, true),
        Rotary::yarn(d, 10_000.0, &y, false),
        Rotary::default_rope(d, 500.0, true),
    ] {
        let x = host_values(vec![1, s, heads, d], 7);
        let host: Vec<f32> = x.to_vec().unwrap();
        let got = rotary.apply(
            Tensor::<B, 4>::from_data(x, &device()),
            tensor(positions.clone(), [s]),
        );
        assert_eq!(got.dims(), [1, s, heads, d]);
        let want = rotate(&host, &positions, heads, &rotary);
        assert_near(
            &format!("rope (interleaved {})", rotary.interleaved),
            &floats(got),
            &want,
            1e-5,
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Multi-head latent attention
// ---------------------------------------------------------------------------------------------

fn mla_config(q_lora_rank: Option<usize>, interleaved: bool, attention_bias: bool) -> MlaConfig {
    let (nope, rope) = (16, 8);
    let y = Yarn {
        mscale: Some(0.707),
        mscale_all_dim: Some(1.0),
        ..yarn(4.0, 16.0)
    };
    MlaConfig {
        hidden: 64,
        heads: 4,
        q_lora_rank,
        kv_lora_rank: 32,
        qk_nope_head_dim: nope,
        qk_rope_head_dim: rope,
        v_head_dim: 12,
        attention_bias,
        latent_norm_eps: 1e-6,
        sm_scale: ((nope + rope) as f64).powf(-0.5) * y.softmax_scale_multiplier(),
        rotary: Rotary::yarn(rope, 10_000.0, &y, interleaved),
    }
}

/// Replaces every float parameter with seeded host values of a dtype: matrices small (so the
/// scores stay moderate), vectors (norm scales and biases) around 1.
struct Seeded(u64, DType);

impl ModuleMapper<B> for Seeded {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        self.0 += 1;
        let seed = self.0;
        param.map(|t| {
            let shape = t.dims().to_vec();
            let scale = if D == 1 { 0.05 } else { 0.06 };
            let values = host_values(shape, seed);
            let offset = if D == 1 { 1.0 } else { 0.0 };
            (Tensor::<B, D>::from_data(values, &t.device()) * scale + offset).cast(self.1)
        })
    }
}

fn seeded_mla(cfg: MlaConfig, seed: u64) -> Mla<B> {
    seeded_mla_in(cfg, seed, DType::F32)
}

fn seeded_mla_in(cfg: MlaConfig, seed: u64, dtype: DType) -> Mla<B> {
    Mla::<B>::new(cfg, &device()).map(&mut Seeded(seed, dtype))
}

/// A matrix in Burn's `[in, out]` layout, on the host.
struct Matrix {
    rows: usize,
    cols: usize,
    w: Vec<f64>,
}

impl Matrix {
    fn of(t: Tensor<B, 2>) -> Self {
        let [rows, cols] = t.dims();
        let w = floats(t).into_iter().map(f64::from).collect();
        Self { rows, cols, w }
    }

    /// `x @ W (+ bias)`.
    fn apply(&self, x: &[f64], bias: Option<&[f64]>) -> Vec<f64> {
        assert_eq!(x.len(), self.rows);
        (0..self.cols)
            .map(|o| {
                let dot: f64 = (0..self.rows)
                    .map(|i| x[i] * self.w[i * self.cols + o])
                    .sum();
                dot + bias.map_or(0.0, |b| b[o])
            })
            .collect()
    }
}

fn float(p: &Projection<B>) -> &burn::nn::Linear<B> {
    p.float().expect("a float projection")
}

fn host_linear(l: &burn::nn::Linear<B>) -> (Matrix, Option<Vec<f64>>) {
    let bias = l
        .bias
        .as_ref()
        .map(|b| floats(b.val()).into_iter().map(f64::from).collect());
    (Matrix::of(l.weight.val()), bias)
}

fn host_rms_norm(x: &[f64], gamma: &[f64], eps: f64) -> Vec<f64> {
    let mean = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let r = 1.0 / (mean + eps).sqrt();
    x.iter().zip(gamma).map(|(v, g)| v * r * g).collect()
}

/// transformers' rotary embedding of one head's `[D]` at position `p`: DeepSeek-V2's complex
/// form (adjacent pairs times `e^{i p f}`, written back interleaved) or `rotate_half`.
fn host_rope(x: &[f64], p: f64, rotary: &Rotary) -> Vec<f64> {
    let half = x.len() / 2;
    let af = rotary.attention_factor as f64;
    let mut out = vec![0.0; x.len()];
    for j in 0..half {
        let angle = p * rotary.inv_freq[j] as f64;
        let (c, s) = (af * angle.cos(), af * angle.sin());
        if rotary.interleaved {
            let (re, im) = (x[2 * j], x[2 * j + 1]);
            out[2 * j] = re * c - im * s;
            out[2 * j + 1] = re * s + im * c;
        } else {
            out[j] = x[j] * c - x[j + half] * s;
            out[j + half] = x[j + half] * c + x[j] * s;
        }
    }
    out
}

/// transformers' DeepSeek attention of one sequence `x [S, hidden]` (positions 0..S), written
/// out per head and position with the layer's weights read back to the host.
fn host_mla(mla: &Mla<B>, x: &[f64]) -> Vec<f64> {
    let c = &mla.cfg;
    let (hidden, heads) = (c.hidden, c.heads);
    let (nope, rope, vd, r) = (
        c.qk_nope_head_dim,
        c.qk_rope_head_dim,
        c.v_head_dim,
        c.kv_lora_rank,
    );
    let qk = nope + rope;
    let s = x.len() / hidden;
    let vec1 = |p: &Param<Tensor<B, 1>>| -> Vec<f64> {
        floats(p.val()).into_iter().map(f64::from).collect()
    };
    let (kva, kva_b) = host_linear(float(&mla.kv_a_proj_with_mqa));
    let kv_norm = vec1(&mla.kv_a_layernorm.weight);
    let (kvb, _) = host_linear(&mla.kv_b_proj);
    let (o, o_b) = host_linear(float(&mla.o_proj));
    let query = |row: &[f64]| -> Vec<f64> {
        match (&mla.q_proj, &mla.q_lora) {
            (Some(q), _) => host_linear(float(q)).0.apply(row, None),
            (None, Some(lora)) => {
                let (a, a_b) = host_linear(float(&lora.q_a_proj));
                let normed = host_rms_norm(
                    &a.apply(row, a_b.as_deref()),
                    &vec1(&lora.q_a_layernorm.weight),
                    c.latent_norm_eps,
                );
                host_linear(float(&lora.q_b_proj)).0.apply(&normed, None)
            }
            (None, None) => unreachable!(),
        }
    };
    // Per position: each head's full query and key [qk] and value [vd].
    let mut qs = Vec::new();
    let mut ks = Vec::new();
    let mut vs = Vec::new();
    for t in 0..s {
        let row = &x[t * hidden..(t + 1) * hidden];
        let q = query(row);
        let compressed = kva.apply(row, kva_b.as_deref());
        let latent = host_rms_norm(&compressed[..r], &kv_norm, c.latent_norm_eps);
        let k_pe = host_rope(&compressed[r..], t as f64, &c.rotary);
        let kv = kvb.apply(&latent, None);
        let (mut qh, mut kh, mut vh) = (Vec::new(), Vec::new(), Vec::new());
        for h in 0..heads {
            let head_q = &q[h * qk..(h + 1) * qk];
            let mut full_q = head_q[..nope].to_vec();
            full_q.extend(host_rope(&head_q[nope..], t as f64, &c.rotary));
            let head_kv = &kv[h * (nope + vd)..(h + 1) * (nope + vd)];
            let mut full_k = head_kv[..nope].to_vec();
            full_k.extend(&k_pe);
            qh.push(full_q);
            kh.push(full_k);
            vh.push(head_kv[nope..].to_vec());
        }
        qs.push(qh);
        ks.push(kh);
        vs.push(vh);
    }
    let mut out = Vec::new();
    for (t, q) in qs.iter().enumerate() {
        let mut attended = Vec::new();
        for (h, q) in q.iter().enumerate() {
            let scores: Vec<f64> = ks[..=t]
                .iter()
                .map(|k| q.iter().zip(&k[h]).map(|(a, b)| a * b).sum::<f64>() * c.sm_scale)
                .collect();
            let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = scores.iter().map(|v| (v - max).exp()).collect();
            let sum: f64 = e.iter().sum();
            attended.extend((0..vd).map(|j| {
                e.iter()
                    .zip(&vs[..=t])
                    .map(|(p, v)| p / sum * v[h][j])
                    .sum::<f64>()
            }));
        }
        out.extend(o.apply(&attended, o_b.as_deref()));
    }
    out
}

fn sequence(s: usize, hidden: usize, seed: u64) -> Tensor<B, 2> {
    Tensor::<B, 2>::from_data(host_values(vec![s, hidden], seed), &device()) * 0.25
}

fn positions(range: std::ops::Range<usize>) -> Tensor<B, 1> {
    let v: Vec<f32> = range.map(|p| p as f32).collect();
    let n = v.len();
    tensor(v, [n])
}

fn mla_cases() -> Vec<MlaConfig> {
    vec![
        mla_config(None, true, false),
        mla_config(Some(24), false, true),
        mla_config(Some(24), true, false),
    ]
}

#[test]
fn mla_dense_matches_transformers_formulas() {
    let s = 7;
    for (i, cfg) in mla_cases().into_iter().enumerate() {
        let hidden = cfg.hidden;
        let mla = seeded_mla(cfg, 100 * i as u64);
        let x = sequence(s, hidden, 11 + i as u64);
        let host: Vec<f64> = floats(x.clone()).into_iter().map(f64::from).collect();
        let got = mla.dense(x.reshape([1, s, hidden]), positions(0..s));
        assert_eq!(got.dims(), [1, s, hidden]);
        let want = host_mla(&mla, &host);
        assert_near(&format!("case {i}: dense MLA"), &floats(got), &want, 1e-4);
    }
}

/// The absorbed decode of `x [S, hidden]` over a cache of one latent row per token, in
/// `chunks` of consecutive tokens (a prefill chunk, then single decoded tokens), each token
/// attending to its positions' slots (scattered over the cache) through
/// `fused::decode_attention` with no value cache.
fn paged_decode(
    mla: &Mla<B>,
    x: Tensor<B, 2>,
    chunks: &[usize],
    path: Option<DecodePath>,
) -> Tensor<B, 2> {
    let device = device();
    let slots = 61;
    // Position p lives at slot (7p + 3) mod 61: never in order, never shared.
    let slot = |p: usize| ((7 * p + 3) % slots) as i64;
    let mut cache = Tensor::<B, 3>::zeros([slots, 1, mla.cfg.cache_dim()], (&device, x.dtype()));
    let (mut start, mut outs) = (0, Vec::new());
    for &len in chunks {
        let (mut indptr, mut indices, mut splits) = (vec![0i64], Vec::new(), Vec::new());
        for p in start..start + len {
            indices.extend((0..=p).map(slot));
            indptr.push(indices.len() as i64);
            splits.push((p as i64 + 1).min(3));
        }
        let int = |v: Vec<i64>| {
            let n = v.len();
            Tensor::<B, 1, Int>::from_data(TensorData::new(v, [n]), &device).cast(DType::I32)
        };
        let new_slots = int((start..start + len).map(slot).collect());
        let (indptr, indices, splits) = (int(indptr), int(indices), int(splits));
        let chunk = x.clone().narrow(0, start, len);
        let rotary = mla
            .cfg
            .rotary
            .rows(positions(start..start + len), chunk.dtype());
        let out = mla.decode(chunk, &rotary, |q, rows, sm_scale, value_dim| {
            let rows = Tensor::cat(rows, 2);
            assert_eq!(rows.dims(), [len, 1, mla.cfg.cache_dim()]);
            cache = cache.clone().scatter_nd(
                new_slots.reshape([len, 1]),
                rows,
                IndexingUpdateOp::Assign,
            );
            fused::decode_attention(
                q,
                cache.clone(),
                None,
                indptr,
                indices,
                splits,
                DecodeAttentionOptions {
                    max_kv_splits: 3,
                    sm_scale,
                    logit_cap: None,
                    value_dim,
                    path,
                },
            )
            .0
        });
        outs.push(out);
        start += len;
    }
    Tensor::cat(outs, 0)
}

#[test]
fn mla_absorbed_paged_decode_matches_dense() {
    let s = 9;
    for (i, cfg) in mla_cases().into_iter().enumerate() {
        let hidden = cfg.hidden;
        let mla = seeded_mla(cfg, 200 + 100 * i as u64);
        let x = sequence(s, hidden, 21 + i as u64);
        let dense = mla.dense(x.clone().reshape([1, s, hidden]), positions(0..s));
        let want: Vec<f64> = floats(dense).into_iter().map(f64::from).collect();
        let got = paged_decode(&mla, x, &[5, 1, 1, 2], None);
        assert_eq!(got.dims(), [s, hidden]);
        assert_near(
            &format!("case {i}: absorbed decode"),
            &floats(got),
            &want,
            1e-4,
        );
    }
}

/// In f16 and bf16 the absorbed decode, on the vector path and on the cube path (which takes
/// MLA's one key head for all query heads), stays within the dtype's rounding of the f32 layer.
#[test]
fn mla_absorbed_decode_in_half_precision_on_both_paths() {
    let s = 9;
    let cfg = mla_config(Some(24), true, false);
    let hidden = cfg.hidden;
    let x = sequence(s, hidden, 5);
    let exact = seeded_mla(cfg.clone(), 900);
    let dense = exact.dense(x.clone().reshape([1, s, hidden]), positions(0..s));
    let want: Vec<f64> = floats(dense).into_iter().map(f64::from).collect();
    for (dtype, tol) in [(DType::F16, 1e-2), (DType::BF16, 5e-2)] {
        let mla = seeded_mla_in(cfg.clone(), 900, dtype);
        for path in [DecodePath::Vector, DecodePath::Cube] {
            let got = paged_decode(&mla, x.clone().cast(dtype), &[5, 1, 1, 2], Some(path));
            assert_eq!(got.dtype(), dtype);
            assert_near(&format!("{dtype:?} {path:?}"), &floats(got), &want, tol);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Routers
// ---------------------------------------------------------------------------------------------

fn router(
    experts: usize,
    top_k: usize,
    method: TopkMethod,
    factor: f64,
    norm: bool,
) -> RouterConfig {
    let cfg = RouterConfig {
        experts,
        top_k,
        method,
        routed_scaling_factor: factor,
        norm_topk_prob: norm,
    };
    cfg.validate().expect("a valid router");
    cfg
}

/// `choose` on the logits of hand-made scores `[T, E]` (whose softmax rows sum to 1): the
/// experts and weights of each token, the same on `Ascend` (the fused operator or kernel) and
/// on burn-flex (the composed default), and the scores given back.
fn choose(cfg: &RouterConfig, scores: Vec<f32>, bias: Option<Vec<f32>>) -> (Vec<i64>, Vec<f32>) {
    fn on<D: burn_ascend::FusedOps>(
        cfg: &RouterConfig,
        logits: &[f32],
        bias: &Option<Vec<f32>>,
        device: &D::Device,
    ) -> (Vec<i64>, Vec<f32>, Vec<f32>) {
        let e = cfg.experts;
        let t = logits.len() / e;
        let logits = Tensor::<D, 2>::from_data(TensorData::new(logits.to_vec(), [t, e]), device);
        let bias = bias
            .as_ref()
            .map(|b| Tensor::<D, 1>::from_data(TensorData::new(b.clone(), [e]), device));
        let (probs, ids, weights) = cfg.choose(logits, bias, DType::F32);
        assert_eq!(ids.dims(), [t, cfg.top_k]);
        let ints = ids.into_data().convert::<i64>().to_vec().unwrap();
        let f = |t: Tensor<D, 2>| t.into_data().convert::<f32>().to_vec().unwrap();
        (ints, f(weights), f(probs))
    }
    let sigmoid = matches!(cfg.method, TopkMethod::NoauxTc { .. });
    let logits: Vec<f32> = scores
        .iter()
        .map(|&p| match sigmoid {
            true => (p / (1.0 - p)).ln(),
            false => p.ln(),
        })
        .collect();
    let (ids, weights, probs) = on::<B>(cfg, &logits, &bias, &device());
    let composed = on::<Flex>(cfg, &logits, &bias, &Default::default());
    assert_eq!(ids, composed.0, "the fused choice equals the composed one");
    let wide = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
    assert_near("composed weights", &weights, &wide(&composed.1), 1e-6);
    assert_near("scores", &probs, &wide(&scores), 1e-6);
    (ids, weights)
}

#[test]
fn greedy_takes_the_top_scores_times_the_factor() {
    // transformers 4.57.1's DeepSeek-V2 router never renormalises (norm_topk_prob is ignored).
    let cfg = router(4, 2, TopkMethod::Greedy, 2.0, true);
    let (ids, w) = choose(&cfg, vec![0.1, 0.4, 0.2, 0.3, 0.7, 0.1, 0.05, 0.15], None);
    assert_eq!(ids, [1, 3, 0, 3]);
    assert_near("greedy weights", &w, &[0.8, 0.6, 1.4, 0.3], 1e-6);
}

#[test]
fn group_limited_greedy_keeps_the_groups_with_the_best_expert() {
    let method = TopkMethod::GroupLimitedGreedy {
        n_group: 4,
        topk_group: 2,
    };
    let cfg = router(8, 3, method, 1.5, false);
    // Groups (0,1) (2,3) (4,5) (6,7) score 0.30, 0.20, 0.25, 0.10: groups 0 and 2 compete, so
    // expert 0 (0.05) is chosen third before expert 2 (0.20), which greedy would take.
    let row = vec![0.05, 0.30, 0.20, 0.02, 0.25, 0.01, 0.10, 0.07];
    // Second token: group 1 (best 0.19) is kept before group 3 (0.18 + 0.18): a group scores
    // its best expert, not its sum; greedy would take expert 6 or 7 third.
    let second = vec![0.01, 0.02, 0.19, 0.01, 0.395, 0.015, 0.18, 0.18];
    let (ids, w) = choose(&cfg, [row, second].concat(), None);
    assert_eq!(ids, [1, 4, 0, 4, 2, 5]);
    assert_near(
        "group-limited weights",
        &w,
        &[0.45, 0.375, 0.075, 0.5925, 0.285, 0.0225],
        1e-6,
    );
}

#[test]
fn noaux_tc_chooses_with_the_bias_and_weighs_without_it() {
    let method = TopkMethod::NoauxTc {
        n_group: 4,
        topk_group: 2,
    };
    let scores = vec![0.9, 0.12, 0.6, 0.55, 0.5, 0.5, 0.22, 0.3];
    let bias = vec![-0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.4, 0.4];
    // Biased: 0.4 0.12 | 0.6 0.55 | 0.5 0.5 | 0.62 0.7. Group scores (sum of the top two):
    // 0.52, 1.15, 1.0, 1.32: groups 3 and 1 compete; experts 7 (0.7) and 6 (0.62) win, though
    // expert 0 has the best unbiased score. Their weights are the unbiased 0.3 and 0.22.
    for (norm, want) in [
        (true, [0.3 / 0.52 * 2.5, 0.22 / 0.52 * 2.5]),
        (false, [0.3 * 2.5, 0.22 * 2.5]),
    ] {
        let cfg = router(8, 2, method, 2.5, norm);
        let (ids, w) = choose(&cfg, scores.clone(), Some(bias.clone()));
        assert_eq!(ids, [7, 6], "norm_topk_prob {norm}");
        assert_near(&format!("noaux_tc weights (norm {norm})"), &w, &want, 1e-6);
    }
    // Without the bias: groups 0 (1.02) and 1 (1.15); experts 0 and 2.
    let cfg = router(8, 2, method, 1.0, true);
    let (ids, w) = choose(&cfg, scores, None);
    assert_eq!(ids, [0, 2]);
    assert_near("noaux_tc unbiased", &w, &[0.6, 0.4], 1e-6);
}

/// The whole router: gate logits from `x`, sigmoid scores, the choice, and the routing layout
/// the MoE kernels take (rows in expert order, rows per expert).
#[test]
fn deepseek_router_routes_rows_in_expert_order() {
    let e = 4;
    let method = TopkMethod::NoauxTc {
        n_group: 2,
        topk_group: 1,
    };
    let cfg = router(e, 2, method, 1.0, false);
    let mut gate = DeepseekRouter::<B>::new(cfg, e, &device());
    // An identity gate: the logits are x itself.
    let identity: Vec<f32> = (0..e * e)
        .map(|i| (i % (e + 1) == 0) as u8 as f32)
        .collect();
    gate.weight = Param::from_tensor(tensor(identity, [e, e]));
    gate.e_score_correction_bias = Some(Param::from_tensor(tensor(vec![0.0, 0.0, 0.5, 0.0], [e])));
    let sigmoid_inverse = |p: f64| (p / (1.0 - p)).ln() as f32;
    let scores = [
        [0.8, 0.7, 0.2, 0.1],
        [0.3, 0.2, 0.6, 0.4],
        [0.6, 0.1, 0.5, 0.2],
    ];
    let x: Vec<f32> = scores
        .iter()
        .flatten()
        .map(|&p| sigmoid_inverse(p))
        .collect();
    let routing = gate.route(tensor(x, [3, e]));
    // Token 0: groups (0,1) 1.5 and (2,3) 0.8 (biased 0.7, 0.1): experts 0, 1. Token 1: group
    // (2,3) 1.1+0.4 against 0.5: experts 2, 3. Token 2: group (2,3) 1.0+0.2 against 0.7:
    // experts 2 (biased 1.0), 3.
    assert_eq!(ints(routing.ids.clone()), [0, 1, 2, 3, 2, 3]);
    assert_near(
        "weights",
        &floats(routing.weights.clone()),
        &[0.8, 0.7, 0.6, 0.4, 0.5, 0.2],
        1e-5,
    );
    assert_eq!(ints(routing.group_sizes()), [1, 1, 2, 2]);
    // Rows (token, choice) flattened, stably sorted by expert.
    assert_eq!(ints(routing.order()), [0, 1, 2, 4, 3, 5]);
    let probs: Vec<f64> = scores.iter().flatten().copied().collect();
    assert_near("scores", &floats(routing.probs.get()), &probs, 1e-5);
}

// ---------------------------------------------------------------------------------------------
// The DeepSeek-V2 / V3 fixture checkpoints
// ---------------------------------------------------------------------------------------------

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hf")
        .join(name)
}

/// A DeepSeek-V3 checkpoint with a multi-token-prediction layer (`model.layers.N.*` past
/// `num_hidden_layers`, as the published V3 has) loads without it, with the same logits; in a
/// DeepSeek-V2 checkpoint the same tensor is an error naming it.
#[test]
fn deepseek_v3_multi_token_prediction_layer_is_skipped() {
    let device = device();
    let tokens =
        || Tensor::<B, 2, Int>::from_data(TensorData::new(vec![0i64, 5, 9, 2], [1, 4]), &device);
    for (name, loads) in [("deepseek_v3", true), ("deepseek_v2", false)] {
        let loaded =
            families::load::<B>(fixture(name), DType::F32, &device).expect("the fixture loads");
        let mut tensors = loaded.model.tensors();
        let extra = "model.layers.2.eh_proj.weight";
        tensors.push((extra.into(), host_values(vec![64, 128], 3)));
        let out = tempfile::tempdir().unwrap();
        hf::save(
            out.path(),
            loaded.checkpoint.config(),
            tensors,
            Some(&loaded.checkpoint),
            None,
        )
        .expect("the checkpoint saves");
        match families::load::<B>(out.path(), DType::F32, &device) {
            Ok(again) => {
                assert!(loads, "{name}: {extra} should be refused");
                let (a, b) = (
                    floats(loaded.model.forward_logits(tokens())),
                    floats(again.model.forward_logits(tokens())),
                );
                assert_eq!(a, b, "{name}: the same logits without the MTP layer");
            }
            Err(e) => {
                assert!(!loads, "{name}: {e}");
                assert!(
                    e.to_string().contains(extra),
                    "{name}: the error {e} names {extra}"
                );
            }
        }
    }
}

fn json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// One prompt of a fixture's reference.json: token ids and prefill logits `[S][V]`.
#[derive(serde::Deserialize)]
struct Prompt {
    ids: Vec<i64>,
    logits: Vec<Vec<f64>>,
}

#[derive(serde::Deserialize)]
struct Reference {
    prompts: Vec<Prompt>,
}

/// The fixtures' checkpoints under the config.json transformers 5.24.0 writes for them
/// (`config.v5.json`: `rope_parameters` holding rope_theta and YaRN instead of `rope_theta` and
/// `rope_scaling`, V3's `num_nextn_predict_layers: 1` with no tensors for that layer) give the
/// fixtures' reference logits (transformers 5.24.0 computes these for V2 and within 2e-6 of
/// them for V3), and saving keeps that config.
#[test]
fn transformers_5_configs_load_like_the_4_x_ones() {
    let device = device();
    for name in ["deepseek_v2", "deepseek_v3"] {
        let v5 = json(&fixture(name).join("config.v5.json"));
        assert!(v5.get("rope_theta").is_none() && v5["rope_parameters"]["rope_type"] == "yarn");
        let dir = tempfile::tempdir().unwrap();
        for entry in std::fs::read_dir(fixture(name)).unwrap() {
            let path = entry.unwrap().path();
            std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
        }
        std::fs::copy(
            fixture(name).join("config.v5.json"),
            dir.path().join("config.json"),
        )
        .unwrap();
        let loaded = families::load::<B>(dir.path(), DType::F32, &device)
            .unwrap_or_else(|e| panic!("{name} with its 5.x config: {e}"));
        if name == "deepseek_v3" {
            // The MTP layer the config announces has no tensors.
            assert_eq!(v5["num_nextn_predict_layers"], 1);
            assert!(!loaded
                .checkpoint
                .names()
                .any(|n| n.starts_with("model.layers.2.")));
        }
        let reference: Reference =
            serde_json::from_value(json(&fixture(name).join("reference.json"))).unwrap();
        for (i, prompt) in reference.prompts.into_iter().enumerate() {
            let s = prompt.ids.len();
            let tokens =
                Tensor::<B, 2, Int>::from_data(TensorData::new(prompt.ids, [1, s]), &device);
            let got = floats(loaded.model.forward_logits(tokens));
            let want: Vec<f64> = prompt.logits.into_iter().flatten().collect();
            assert_near(&format!("{name} prompt {i}"), &got, &want, 1e-4);
        }
        let out = tempfile::tempdir().unwrap();
        families::save(&loaded.model, out.path(), &loaded.checkpoint, None).unwrap();
        assert_eq!(
            json(&out.path().join("config.json")),
            v5,
            "{name}: the saved config.json is the 5.x one"
        );
    }
}

fn config_error(name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> String {
    let text = std::fs::read_to_string(fixture(name).join("config.json")).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(&text).unwrap();
    edit(&mut config);
    spec_of(&config)
        .expect_err("an unsupported config")
        .to_string()
}

#[test]
fn deepseek_configs_with_unsupported_options_fail_by_name() {
    type Edit = Box<dyn FnOnce(&mut serde_json::Value)>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "deepseek_v2",
            Box::new(|c| c["topk_method"] = "noaux_tc".into()),
            "option topk_method is not supported: \"noaux_tc\"",
        ),
        (
            "deepseek_v3",
            Box::new(|c| c["topk_method"] = "greedy".into()),
            "option topk_method is not supported: \"greedy\"",
        ),
        (
            "deepseek_v2",
            Box::new(|c| c["scoring_func"] = "sigmoid".into()),
            "option scoring_func is not supported: \"sigmoid\"",
        ),
        (
            "deepseek_v3",
            Box::new(|c| c["rope_scaling"]["rope_type"] = "dynamic".into()),
            "option rope_scaling is not supported: \"dynamic\"",
        ),
        (
            "deepseek_v3",
            Box::new(|c| c["moe_layer_freq"] = 2.into()),
            "option moe_layer_freq is not supported",
        ),
        (
            "deepseek_v3",
            // transformers 5.x's layout.
            Box::new(|c| {
                let fields = c.as_object_mut().unwrap();
                fields.remove("rope_theta");
                fields.remove("rope_scaling");
                fields.insert(
                    "rope_parameters".into(),
                    serde_json::json!({"rope_type": "linear", "factor": 4.0, "rope_theta": 1e4}),
                );
            }),
            "option rope_parameters is not supported: \"linear\"",
        ),
        (
            "deepseek_v2",
            Box::new(|c| c["mlp_bias"] = true.into()),
            "option mlp_bias is not supported",
        ),
        (
            "deepseek_v2",
            Box::new(|c| c["num_key_value_heads"] = 2.into()),
            "option num_key_value_heads is not supported",
        ),
        (
            "deepseek_v3",
            Box::new(|c| c["n_group"] = 3.into()),
            "n_group 3 must divide n_routed_experts 8",
        ),
        (
            "deepseek_v2",
            Box::new(|c| c["hidden_act"] = "gelu".into()),
            "option hidden_act is not supported",
        ),
    ];
    for (name, edit, message) in cases {
        let error = config_error(name, edit);
        assert!(
            error.starts_with(name) && error.contains(message),
            "{name}: the error {error:?} should say {message:?}"
        );
    }
}
