//! One MoE decoder layer at the shapes of published checkpoints (DeepSeek-V2-Lite with MLA,
//! Qwen1.5-MoE-A2.7B with a gated shared expert), random bf16 weights and a bf16 cache, on the
//! emulated NPU: a decode step at batch 1, 8 and 32, each op's modelled Atlas A2 time
//! (`a2::ModelledClock`) and the step's total against its roofline (`roofline::LayerShape`).

mod common;
#[path = "common/real_layer.rs"]
mod real_layer;

use std::time::{Duration, Instant};

use burn::module::Param;
use burn::tensor::activation::{sigmoid, silu, softmax};
use burn::tensor::{DType, Distribution, Int, Tensor};
use burn_ascend::emulator::kernel_runner::launch_log;
use burn_ascend::emulator::work_counters;
use burn_ascend::fused::{self, DecodeAttentionOptions};
// The engine's cache write on `Ascend` (`moe::step::PagedAttention`): the rows, in place.
use burn_ascend::graph::{write_cache, CacheWrite};
use burn_ascend_llm::engine::serve::StepInputs;
use burn_ascend_llm::engine::step::PagedAttention;
use burn_ascend_llm::families::blocks::norm::RmsNorm;
use burn_ascend_llm::families::Decoder;
use burn_ascend_llm::moe::model::rope;
use burn_ascend_perf::a2::{self, ModelledClock};
use burn_ascend_perf::roofline::{Attention, LayerShape};
use common::{mean, publish, record, Table};
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};
use real_layer::{
    device, families_layer, step_inputs, sync, Model, StepState, B, BATCHES, BF16, CONTEXT, EPS,
    INIT_STD, MAX_KV_SPLITS, MODELS,
};

fn weight<const D: usize>(shape: [usize; D]) -> Tensor<B, D> {
    Tensor::random(
        shape,
        Distribution::Normal(0.0, INIT_STD),
        (&device(), BF16),
    )
}

fn ones(n: usize) -> Tensor<B, 1> {
    Tensor::ones([n], (&device(), BF16))
}

/// Attention weights as the decode step uses them.
enum AttentionWeights {
    Gqa {
        q: Tensor<B, 2>,
        k: Tensor<B, 2>,
        v: Tensor<B, 2>,
        /// q, k and v biases.
        bias: Option<[Tensor<B, 1>; 3]>,
        o: Tensor<B, 2>,
    },
    /// `kv_b_proj` split per head for the absorbed decode: `w_uk [heads, nope, kv_lora]` takes
    /// the query's no-rope part into the latent space, `w_uv [heads, kv_lora, v]` the attended
    /// latent to each head's value.
    Mla {
        q: Tensor<B, 2>,
        kv_a: Tensor<B, 2>,
        kv_norm: Tensor<B, 1>,
        w_uk: Tensor<B, 3>,
        w_uv: Tensor<B, 3>,
        o: Tensor<B, 2>,
    },
}

/// One layer's weights, `[in, out]` (experts `[E, in, out]`).
struct Weights {
    attn_norm: Tensor<B, 1>,
    ffn_norm: Tensor<B, 1>,
    attention: AttentionWeights,
    router: Tensor<B, 2>,
    gate: Tensor<B, 3>,
    up: Tensor<B, 3>,
    down: Tensor<B, 3>,
    shared_gate_proj: Tensor<B, 2>,
    shared_up: Tensor<B, 2>,
    shared_down: Tensor<B, 2>,
    shared_expert_gate: Option<Tensor<B, 2>>,
}

impl Weights {
    fn random(s: &LayerShape) -> Self {
        let (h, e, f, fs) = (
            s.hidden,
            s.experts,
            s.moe_intermediate,
            s.shared_intermediate,
        );
        let attention = match s.attention {
            Attention::Gqa {
                q_heads,
                kv_heads,
                head_dim,
                qkv_bias,
            } => AttentionWeights::Gqa {
                q: weight([h, q_heads * head_dim]),
                k: weight([h, kv_heads * head_dim]),
                v: weight([h, kv_heads * head_dim]),
                bias: qkv_bias.then(|| {
                    [
                        weight([q_heads * head_dim]),
                        weight([kv_heads * head_dim]),
                        weight([kv_heads * head_dim]),
                    ]
                }),
                o: weight([q_heads * head_dim, h]),
            },
            Attention::Mla {
                heads,
                q_lora_rank,
                kv_lora_rank,
                qk_nope_head_dim,
                qk_rope_head_dim,
                v_head_dim,
            } => {
                assert!(q_lora_rank.is_none(), "the bench's MLA has a full q_proj");
                AttentionWeights::Mla {
                    q: weight([h, heads * (qk_nope_head_dim + qk_rope_head_dim)]),
                    kv_a: weight([h, kv_lora_rank + qk_rope_head_dim]),
                    kv_norm: ones(kv_lora_rank),
                    w_uk: weight([heads, qk_nope_head_dim, kv_lora_rank]),
                    w_uv: weight([heads, kv_lora_rank, v_head_dim]),
                    o: weight([heads * v_head_dim, h]),
                }
            }
        };
        Self {
            attn_norm: ones(h),
            ffn_norm: ones(h),
            attention,
            router: weight([h, e]),
            gate: weight([e, h, f]),
            up: weight([e, h, f]),
            down: weight([e, f, h]),
            shared_gate_proj: weight([h, fs]),
            shared_up: weight([h, fs]),
            shared_down: weight([fs, h]),
            shared_expert_gate: s.shared_gate.then(|| weight([h, 1])),
        }
    }
}
/// The modelled A2 time of each op of a step, by name, when on: every op is followed by a
/// synchronisation and a lap of the clock.
struct Probe {
    on: Option<(ModelledClock, Vec<OpTime>)>,
}

/// One op's modelled time and launches.
struct OpTime {
    name: &'static str,
    secs: f64,
    aclnn: u64,
    kernels: u64,
    /// Global-memory bytes the op's Ascend C kernels moved.
    kernel_bytes: u64,
    /// What bounds the op's longest kernel launch in the model.
    kernel_bound: Option<a2::Bound>,
}

impl Probe {
    fn off() -> Self {
        Self { on: None }
    }

    fn on() -> Self {
        sync();
        Self {
            on: Some((ModelledClock::start(), Vec::new())),
        }
    }

    fn op<T>(&mut self, name: &'static str, f: impl FnOnce() -> T) -> T {
        let Some((clock, ops)) = &mut self.on else {
            return f();
        };
        sync();
        let before = work_counters();
        clock.lap();
        let out = f();
        sync();
        let launches = launch_log();
        let kernel_bound = launches
            .iter()
            .map(a2::model)
            .max_by(|a, b| a.modelled.total_cmp(&b.modelled))
            .map(|m| m.bound);
        let secs = clock.lap();
        let w = work_counters().since(&before);
        ops.push(OpTime {
            name,
            secs,
            aclnn: w.aclnn_launches,
            kernels: w.kernel_launches,
            kernel_bytes: w.kernel_bytes,
            kernel_bound,
        });
        out
    }

    fn ops(self) -> Vec<OpTime> {
        self.on.map(|(_, ops)| ops).unwrap_or_default()
    }
}

fn linear(x: Tensor<B, 2>, w: &Tensor<B, 2>, bias: Option<&Tensor<B, 1>>) -> Tensor<B, 2> {
    let y = x.matmul(w.clone());
    match bias {
        Some(b) => y + b.clone().unsqueeze_dim(0),
        None => y,
    }
}

/// The attention sub-layer of a decode step: `h [T, H]` (normalised) to the output
/// projection's result `[T, H]`, the step's token written to the cache.
fn attention(
    p: &mut Probe,
    m: &Model,
    w: &AttentionWeights,
    st: &StepState,
    h: Tensor<B, 2>,
) -> Tensor<B, 2> {
    let [t, _] = h.dims();
    let pos = st.positions.clone();
    let theta = m.rope_theta;
    let options = |sm_scale: f32, value_dim| DecodeAttentionOptions {
        max_kv_splits: MAX_KV_SPLITS,
        sm_scale,
        logit_cap: None,
        value_dim,
        path: None,
    };
    match (w, m.shape.attention) {
        (
            AttentionWeights::Gqa { q, k, v, bias, o },
            Attention::Gqa {
                q_heads,
                kv_heads,
                head_dim: d,
                ..
            },
        ) => {
            let b = |i: usize| bias.as_ref().map(|b| &b[i]);
            let q = p.op("q_proj", || linear(h.clone(), q, b(0)));
            let k = p.op("k_proj", || linear(h.clone(), k, b(1)));
            let v = p.op("v_proj", || linear(h, v, b(2)));
            let (q, k) = p.op("rope", || {
                (
                    rope(q.reshape([1, t, q_heads, d]), pos.clone(), theta),
                    rope(k.reshape([1, t, kv_heads, d]), pos, theta),
                )
            });
            p.op("cache write", || {
                let values = st.cache.values.as_ref().expect("a GQA cache has values");
                let (k, v) = ([k.reshape([t, kv_heads, d])], [v.reshape([t, kv_heads, d])]);
                write_cache(
                    &st.slots,
                    &[
                        CacheWrite {
                            cache: &st.cache.keys,
                            rows: &k,
                        },
                        CacheWrite {
                            cache: values,
                            rows: &v,
                        },
                    ],
                );
            });
            let out = p.op("decode_attention", || {
                fused::decode_attention(
                    q.reshape([t, q_heads, d]),
                    st.cache.keys.clone(),
                    st.cache.values.clone(),
                    st.kv_indptr.clone(),
                    st.kv_indices.clone(),
                    st.kv_splits.clone(),
                    options((d as f32).powf(-0.5), d),
                )
                .0
            });
            p.op("o_proj", || linear(out.reshape([t, q_heads * d]), o, None))
        }
        (
            AttentionWeights::Mla {
                q,
                kv_a,
                kv_norm,
                w_uk,
                w_uv,
                o,
            },
            Attention::Mla {
                heads,
                kv_lora_rank: lora,
                qk_nope_head_dim: nope,
                qk_rope_head_dim: rd,
                v_head_dim,
                ..
            },
        ) => {
            let q = p.op("q_proj", || {
                linear(h.clone(), q, None).reshape([t, heads, nope + rd])
            });
            let kv = p.op("kv_a_proj_with_mqa", || linear(h, kv_a, None));
            let latent = p.op("kv_a_layernorm", || {
                fused::rms_norm(kv.clone().narrow(1, 0, lora), kv_norm.clone(), EPS).0
            });
            let (q_pe, k_pe) = p.op("rope", || {
                (
                    rope(
                        q.clone().narrow(2, nope, rd).reshape([1, t, heads, rd]),
                        pos.clone(),
                        theta,
                    ),
                    rope(kv.narrow(1, lora, rd).reshape([1, t, 1, rd]), pos, theta),
                )
            });
            p.op("cache write", || {
                let rows = [latent.reshape([t, 1, lora]), k_pe.reshape([t, 1, rd])];
                write_cache(
                    &st.slots,
                    &[CacheWrite {
                        cache: &st.cache.keys,
                        rows: &rows,
                    }],
                );
            });
            // The query's no-rope part in the latent space, beside its rope part.
            let q = p.op("q absorb (kv_b_proj W_UK)", || {
                let q_nope = q.narrow(2, 0, nope).swap_dims(0, 1);
                let q_latent = q_nope.matmul(w_uk.clone()).swap_dims(0, 1);
                Tensor::cat(vec![q_latent, q_pe.reshape([t, heads, rd])], 2)
            });
            // Scores over the latent and the rope key (the DeepSeek softmax scale), values over
            // the latent.
            let scale = ((nope + rd) as f32).powf(-0.5);
            let out = p.op("decode_attention", || {
                fused::decode_attention(
                    q,
                    st.cache.keys.clone(),
                    None,
                    st.kv_indptr.clone(),
                    st.kv_indices.clone(),
                    st.kv_splits.clone(),
                    options(scale, lora),
                )
                .0
            });
            let out = p.op("v absorb (kv_b_proj W_UV)", || {
                out.swap_dims(0, 1)
                    .matmul(w_uv.clone())
                    .swap_dims(0, 1)
                    .reshape([t, heads * v_head_dim])
            });
            p.op("o_proj", || linear(out, o, None))
        }
        _ => unreachable!("the weights are built from the shape"),
    }
}

/// Softmax routing: each token's top-k experts; returns the (token, choice) weights `[T*k]`,
/// their expert-major order `[T*k]` and the rows per expert `[E]` (as `moe::model` routes).
fn route(
    logits: Tensor<B, 2>,
    top_k: usize,
    norm_topk_prob: bool,
) -> (Tensor<B, 1>, Tensor<B, 1, Int>, Tensor<B, 1, Int>) {
    let [t, e] = logits.dims();
    let probs = softmax(logits.cast(DType::F32), 1);
    let (top, ids) = probs.topk_with_indices(top_k, 1);
    let weights = if norm_topk_prob {
        top.clone() / top.sum_dim(1)
    } else {
        top
    };
    let ids = ids.reshape([t * top_k]);
    let order = ids.clone().argsort(0).cast(DType::I32);
    let experts = Tensor::<B, 1, Int>::arange(0..e as i64, &ids.device());
    let group_sizes = ids
        .reshape([t * top_k, 1])
        .equal(experts.reshape([1, e]))
        .float()
        .sum_dim(0)
        .reshape([e])
        .int()
        .cast(DType::I32);
    (weights.reshape([t * top_k]).cast(BF16), order, group_sizes)
}

/// One decode step of the layer; returns its output `[T, H]` and the rows routed to each
/// expert.
fn step(
    p: &mut Probe,
    m: &Model,
    w: &Weights,
    st: &StepState,
) -> (Tensor<B, 2>, Tensor<B, 1, Int>) {
    let k = m.shape.top_k;
    let x = st.x.clone();
    let h = p.op("input_layernorm", || {
        fused::rms_norm(x.clone(), w.attn_norm.clone(), EPS).0
    });
    let a = attention(p, m, &w.attention, st, h);
    let (h, _, residual) = p.op("post_attention add_rms_norm", || {
        fused::add_rms_norm(x, a, w.ffn_norm.clone(), EPS)
    });
    let logits = p.op("router (gate)", || linear(h.clone(), &w.router, None));
    let (weights, order, sizes) = p.op("routing (softmax, top-k, sort, counts)", || {
        route(logits, k, m.norm_topk_prob)
    });
    let rows = p.op("moe_gather", || {
        fused::moe_gather(h.clone(), order.clone(), k)
    });
    let g = p.op("experts gate_proj (grouped_matmul)", || {
        fused::grouped_matmul(rows.clone(), w.gate.clone(), sizes.clone())
    });
    let u = p.op("experts up_proj (grouped_matmul)", || {
        fused::grouped_matmul(rows, w.up.clone(), sizes.clone())
    });
    let act = p.op("experts silu(gate) * up", || silu(g) * u);
    let y = p.op("experts down_proj (grouped_matmul)", || {
        fused::grouped_matmul(act, w.down.clone(), sizes.clone())
    });
    let routed = p.op("moe_scatter", || {
        fused::moe_scatter(y, order, Some(weights), k)
    });
    let sg = p.op("shared gate_proj", || {
        linear(h.clone(), &w.shared_gate_proj, None)
    });
    let su = p.op("shared up_proj", || linear(h.clone(), &w.shared_up, None));
    let sa = p.op("shared silu(gate) * up", || silu(sg) * su);
    let mut shared = p.op("shared down_proj", || linear(sa, &w.shared_down, None));
    if let Some(gate) = &w.shared_expert_gate {
        shared = p.op("shared_expert_gate (sigmoid)", || {
            sigmoid(linear(h, gate, None)) * shared
        });
    }
    let out = p.op("residual adds", || residual + routed + shared);
    (out, sizes)
}

/// One decode step of the families' layer, block by block, as `Decoder::step` runs a layer;
/// returns its feed-forward output (which the next norm adds to the residual stream) and the
/// (token, choice) pairs per expert.
fn families_step(
    p: &mut Probe,
    layer: &Decoder<B>,
    norms: &(RmsNorm<B>, RmsNorm<B>),
    st: &StepState,
    inputs: &StepInputs<B>,
) -> (Tensor<B, 2>, Tensor<B, 1, Int>) {
    let layer = &layer.layers[0];
    // The layer before's residual add runs fused with this input norm, as the decoder runs it
    // (the step's input stands for both the residual stream and the last feed-forward output).
    let (h, x) = p.op("input add_rms_norm (the residual add before)", || {
        norms.0.add_forward(st.x.clone(), st.x.clone())
    });
    let mut caches = vec![st.cache.clone()];
    let mut paged = PagedAttention::new(&mut caches, st.slots.clone(), inputs, MAX_KV_SPLITS);
    let a = p.op("attention block (paged)", || {
        layer
            .attention
            .paged(h, st.positions.clone(), 0, &mut paged)
    });
    // The residual stream after attention: the next layer's input norm adds `y` to it.
    let (h, _residual) = p.op("post_attention add_rms_norm", || norms.1.add_forward(x, a));
    let (y, stats) = p.op("feed-forward block (router, experts, shared)", || {
        layer.ffn.forward(h)
    });
    (y, stats.expect("a MoE layer").counts())
}

/// What one probed step found.
struct Probed {
    experts_touched: usize,
    ops: Vec<OpTime>,
}

/// What the probed steps of a model at a batch found: the families' layer block by block and
/// the bench's op sequence op by op.
struct Measured {
    batch: usize,
    blocks: Probed,
    ops: Probed,
}

fn measure(c: &mut Criterion, m: &Model) -> Vec<Measured> {
    let weights = Weights::random(&m.shape);
    let layer = families_layer(m);
    let norm = || RmsNorm::new(Param::from_tensor(ones(m.shape.hidden)), EPS);
    let norms = (norm(), norm());
    let mut g = c.benchmark_group(format!("real_sizes/{}", m.name));
    g.sampling_mode(SamplingMode::Flat);
    let mut found = Vec::new();
    for batch in BATCHES {
        let st = StepState::new(&m.shape, batch);
        let inputs = step_inputs(&st, batch);
        // A warm-up step each (executor caches, allocator), then the probed ones.
        step(&mut Probe::off(), m, &weights, &st);
        families_step(&mut Probe::off(), &layer, &norms, &st, &inputs);
        let mut probe = Probe::on();
        let (out, sizes) = step(&mut probe, m, &weights, &st);
        let ops = probe.ops();
        let mut probe = Probe::on();
        let (block_out, counts) = families_step(&mut probe, &layer, &norms, &st, &inputs);
        let blocks = probe.ops();
        for out in [out, block_out] {
            assert_eq!(out.dims(), [batch, m.shape.hidden]);
            assert_eq!(out.dtype(), BF16);
        }
        let sizes = sizes.into_data().to_vec::<i32>().expect("group sizes");
        let counts = counts
            .into_data()
            .convert::<f32>()
            .to_vec::<f32>()
            .expect("counts");
        for routed in [sizes.iter().sum::<i32>() as f32, counts.iter().sum()] {
            assert_eq!(routed as usize, batch * m.shape.top_k);
        }
        found.push(Measured {
            batch,
            blocks: Probed {
                experts_touched: counts.iter().filter(|&&n| n > 0.0).count(),
                ops: blocks,
            },
            ops: Probed {
                experts_touched: sizes.iter().filter(|&&n| n > 0).count(),
                ops,
            },
        });
        let key = format!("{}/{batch}", m.name);
        g.bench_function(format!("batch_{batch}"), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    families_step(&mut Probe::off(), &layer, &norms, &st, &inputs);
                }
                sync();
                let took: Duration = start.elapsed();
                record(&key, took, iters);
                took
            })
        });
    }
    g.finish();
    found
}

fn us(secs: f64) -> String {
    format!("{:.1}", secs * 1e6)
}

/// Per-op rows: each op's modelled time at each batch.
fn per_op(title: &str, found: &[Measured], probed: impl Fn(&Measured) -> &Probed) -> Table {
    let mut t = Table::new(
        title,
        &[
            "op",
            "batch 1",
            "batch 8",
            "batch 32",
            "launches (aclnn + kernels)",
            "kernels at batch 32: GM MB, bound",
        ],
    );
    for (i, op) in probed(&found[0]).ops.iter().enumerate() {
        let mut row = vec![op.name.to_string()];
        row.extend(BATCHES.iter().map(|&b| {
            found
                .iter()
                .find(|f| f.batch == b)
                .map_or("-".into(), |f| us(probed(f).ops[i].secs))
        }));
        row.push(format!("{} + {}", op.aclnn, op.kernels));
        let last = found.last().map(|f| &probed(f).ops[i]);
        row.push(match last.and_then(|o| o.kernel_bound.map(|b| (o, b))) {
            Some((o, bound)) => format!("{:.2}, {}", o.kernel_bytes as f64 / 1e6, bound.name()),
            None => "-".into(),
        });
        t.row(row);
    }
    t
}

fn real_sizes(c: &mut Criterion) {
    let (hbm, cube) = (a2::HBM_BYTES_PER_S, a2::cube_flops_per_s());
    let mut steps = Table::new(
        &format!(
            "Decode step of one layer, modelled A2 time against the roofline ({CONTEXT} cached \
             tokens per request, bf16)"
        ),
        &[
            "model",
            "batch",
            "path",
            "experts touched",
            "modelled step (µs)",
            "roofline (µs): bytes / FLOPs",
            "modelled / roofline",
            "aclnn launches (ratio with 3 µs each)",
            "top 3 (µs)",
        ],
    );
    let mut tables = Vec::new();
    for m in &MODELS {
        let found = measure(c, m);
        tables.push(per_op(
            &format!(
                "{}: the families' layer, modelled A2 time per block (µs)",
                m.name
            ),
            &found,
            |f| &f.blocks,
        ));
        tables.push(per_op(
            &format!("{}: the same step op by op, modelled A2 time (µs)", m.name),
            &found,
            |f| &f.ops,
        ));
        for f in &found {
            for (path, p) in [("families blocks", &f.blocks), ("op by op", &f.ops)] {
                let cost = m.shape.decode_step(f.batch, CONTEXT + 1, p.experts_touched);
                let total: f64 = p.ops.iter().map(|o| o.secs).sum();
                let roofline = cost.roofline_secs(hbm, cube);
                let aclnn: u64 = p.ops.iter().map(|o| o.aclnn).sum();
                let mut top: Vec<&OpTime> = p.ops.iter().collect();
                top.sort_by(|a, b| b.secs.total_cmp(&a.secs));
                let top = top
                    .iter()
                    .take(3)
                    .map(|o| format!("{} {}", o.name, us(o.secs)))
                    .collect::<Vec<_>>()
                    .join("; ");
                steps.row(vec![
                    m.name.into(),
                    f.batch.to_string(),
                    path.into(),
                    format!("{} of {}", p.experts_touched, m.shape.experts),
                    us(total),
                    format!(
                        "{} ({} / {})",
                        us(roofline),
                        us(cost.memory_secs(hbm)),
                        us(cost.compute_secs(cube))
                    ),
                    format!("{:.2}x", total / roofline),
                    format!(
                        "{aclnn} ({:.2}x)",
                        (total + aclnn as f64 * a2::LAUNCH_LATENCY_S) / roofline
                    ),
                    top,
                ]);
            }
        }
    }
    let mut wall = Table::new(
        "Emulated wall time of the families' layer step (ms, this machine: not NPU speed)",
        &["model", "batch 1", "batch 8", "batch 32"],
    );
    for m in &MODELS {
        let mut row = vec![m.name.to_string()];
        row.extend(BATCHES.iter().map(|b| {
            mean(&format!("{}/{b}", m.name)).map_or("-".into(), |s| format!("{:.0}", s * 1e3))
        }));
        wall.row(row);
    }
    tables.push(wall);
    tables.insert(0, steps);
    publish(
        "real_sizes",
        &tables,
        &[
            &format!(
                "One decoder layer with random bf16 weights (std {INIT_STD}, norms 1) and a bf16 \
                 cache of {CONTEXT} tokens per request (each step attends over {} keys, split \
                 as the example's server splits them, at most {MAX_KV_SPLITS} ways), on the \
                 emulated NPU, two ways: the families' layer (`families::Decoder` from the \
                 checkpoint's config.json with one MoE layer, its weights drawn through the \
                 loader; the attention through `moe::step::PagedAttention` as the server runs \
                 it), timed block by block; and the bench's own sequence of the same ops, timed \
                 op by op to say where the time goes. DeepSeek-V2-Lite decodes MLA absorbed \
                 (q_nope through kv_b_proj's W_UK into the 512-dim latent, decode_attention over \
                 the 576-dim latent + rope rows, W_UV back per head); both route by softmax \
                 top-k without renormalisation through `moe_gather`, three grouped matmuls and \
                 `moe_scatter`. The two draw different weights, so their routers may touch \
                 different experts; each is held against its own roofline.",
                CONTEXT + 1
            ),
            "Modelled step: the sum of its laps' modelled A2 times (`a2::ModelledClock`, a lap \
             per block or op after a warm-up step): each Ascend C kernel launch by the roofline \
             of its counters plus 3 µs of launch latency, each aclnn operator at its tensor \
             arguments' bytes over 1.6 TB/s (a grouped matmul's weights only for the experts \
             that got rows), without latency or compute. The launches column adds 3 µs per \
             aclnn launch too, as a real NPU would pay them.",
            "Roofline: max(bytes / 1.6 TB/s, matmul FLOPs / bf16 cube peak of 353.9 TFLOPS) for \
             the weights the step touches (attention, norms, router, shared experts and the \
             distinct routed experts its tokens chose, counted from the router's output) plus \
             the cache rows attended over (`roofline::LayerShape::decode_step`). Goal: \
             modelled / roofline within 1.3x.",
        ],
    );
}

criterion_group! {
    name = benches;
    config = common::criterion();
    targets = real_sizes
}
criterion_main!(benches);
