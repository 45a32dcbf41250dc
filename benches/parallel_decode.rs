//! A decode step of published MoE checkpoints split across 1, 2, 4 and 8 emulated NPUs
//! (`families::parallel`: attention by heads, experts by ranges, vocabulary by rows), at batch
//! 1, 8, 32 and 64: the step's modelled Atlas A2 time (`a2::ModelledClock` over every NPU's
//! launches, shared evenly among the NPUs) plus its collectives at HCCS rates, scaled from the
//! few layers run to the whole model, as tokens/s per NPU beside vllm-ascend's published figure
//! for Qwen3-30B-A3B W8A8. The modelling assumptions are listed with the table.
//!
//! The checkpoints are those `real_checkpoint` writes: the published config.json and real layer
//! shapes, random bf16 weights, a few layers.

mod common;

use std::sync::Arc;
use std::time::Instant;

use burn::tensor::backend::Backend;
use burn::tensor::DType;
use burn_ascend::emulator::hccl::{hccl_counters, HcclCounters, Kind};
use burn_ascend::emulator::ENV_DEVICES;
use burn_ascend::runtime::DeviceContext;
use burn_ascend::{Ascend, AscendDevice};
use burn_ascend_llm::engine::scheduler::RequestId;
use burn_ascend_llm::engine::serve::{Request, ServeConfig, Server};
use burn_ascend_llm::engine::step::StepModel;
use burn_ascend_llm::families::blocks::quant::Quantize;
use burn_ascend_llm::families::parallel::{self, Placement};
use burn_ascend_llm::families::{self, LoadOptions, ToServe};
use burn_ascend_llm::hf::Checkpoint;
use burn_ascend_perf::a2::{self, ModelledClock};
use burn_ascend_suite::real_checkpoint::{self, Published};
use common::{mean, publish, record, Table};
use criterion::{criterion_group, criterion_main, Criterion};

const NPUS: [usize; 4] = [1, 2, 4, 8];
const BATCHES: [usize; 4] = [1, 8, 32, 64];
/// Prompt tokens per request: decode reads this much context (short: the emulator prefills
/// 105 requests at real shapes for each split, on the host's cores).
const PROMPT: usize = 4;
/// One collective round's latency on HCCS. ASSUMED: the fact sheets give none
/// (`../shared/ascend/hccl-abi.md` states only the API); a few microseconds per round is the
/// order vendors quote for small messages between NPUs of one server.
const ROUND_LATENCY_S: f64 = 5e-6;
/// vllm-ascend's published Qwen3-30B-A3B W8A8 decode throughput: 812 output tokens/s on one
/// A3 die at batch 45, TP1 (issue 34 quotes it).
const VLLM_ASCEND_TOK_S: f64 = 812.0;

/// A case: a published shape, how many of its layers the checkpoint has, how it is served.
struct Case {
    model: Published,
    layers: usize,
    /// Layers of the whole published model.
    full_layers: usize,
    quantize: Option<Quantize>,
}

impl Case {
    fn name(&self) -> String {
        match self.quantize {
            Some(q) => format!("{} {q}", self.model.name()),
            None => format!("{} bf16", self.model.name()),
        }
    }
}

const CASES: [Case; 2] = [
    Case {
        model: Published::Qwen3_30bA3b,
        layers: 1,
        full_layers: 48,
        quantize: Some(Quantize::W8A8),
    },
    // DeepSeek-V2-Lite's first layer is dense, the others MoE: two layers hold one of each,
    // and the whole model is scaled as if all its layers were their mean.
    Case {
        model: Published::DeepseekV2Lite,
        layers: 2,
        full_layers: 27,
        quantize: None,
    },
];

/// One decode step's modelled figures.
struct Step {
    /// Seconds of device work, all NPUs' launches together.
    device_s: f64,
    /// The collectives of the step.
    comm: HcclCounters,
}

/// Modelled seconds of some collectives on HCCS: each round's busiest link at the assumed link
/// bandwidth plus the assumed round latency.
fn hccs_s(c: &HcclCounters, kinds: &[Kind]) -> f64 {
    kinds
        .iter()
        .map(|&k| {
            let t = c.of(k).traffic;
            t.critical_bytes as f64 / a2::HCCS_LINK_BYTES_PER_S + t.rounds as f64 * ROUND_LATENCY_S
        })
        .sum()
}

/// Room for the largest batch: each request's prompt and tokens in two pages.
fn serve_config() -> ServeConfig {
    let batch = BATCHES[BATCHES.len() - 1];
    ServeConfig {
        pages: batch * 2,
        page_size: 16,
        max_seq: 2 * 16,
        max_kv_splits: 2,
        step_tokens: 256,
        max_waiting: batch,
        record_logits: false,
    }
}

fn sync(devices: &[AscendDevice]) {
    for d in devices {
        Ascend::sync(d).expect("the NPU runs the step");
    }
}

/// Decode steps of `server` at each batch: `batch` requests prefilled, then one step of them
/// all decoding measured; the requests cancelled after.
fn steps<M: StepModel<Ascend>>(
    server: &mut Server<Ascend, M>,
    devices: &[AscendDevice],
    vocab: usize,
) -> Vec<Step> {
    BATCHES
        .iter()
        .map(|&batch| {
            let ids: Vec<RequestId> = (0..batch)
                .map(|r| {
                    let prompt = (0..PROMPT).map(|i| ((r * 31 + i * 7) % vocab) as u32);
                    server
                        .submit(Request::greedy(prompt.collect(), 16))
                        .expect("the request is taken")
                })
                .collect();
            // Prefill (in chunks of step_tokens) until a step decodes every request.
            let mut guard = 0;
            loop {
                sync(devices);
                let mut clock = ModelledClock::start();
                let before = hccl_counters();
                let report = server.step();
                sync(devices);
                let device_s = clock.lap();
                assert!(report.finished.is_empty(), "no request ends early");
                if report.decode_only && report.sampled.len() == batch {
                    for id in ids {
                        server.cancel(id);
                    }
                    return Step {
                        device_s,
                        comm: hccl_counters().since(&before),
                    };
                }
                guard += 1;
                assert!(guard < 64, "the batch reaches decode");
            }
        })
        .collect()
}

/// The case loaded on `npus` NPUs and its decode steps; the wall time of one decode step at
/// batch 1 recorded under `key`.
fn measure(case: &Case, checkpoint: &Arc<Checkpoint>, npus: usize, key: &str) -> Vec<Step> {
    let devices: Vec<AscendDevice> = (0..npus).map(AscendDevice::Emulated).collect();
    let options = LoadOptions {
        dtype: Some(DType::BF16),
        quantize: case.quantize,
    };
    let vocab = checkpoint.config()["vocab_size"].as_u64().unwrap() as usize;
    let start = Instant::now();
    let steps = if npus == 1 {
        let ToServe { model, reload, .. } =
            families::load_to_serve::<Ascend>(checkpoint.clone(), options, &devices[0])
                .expect("the checkpoint loads");
        let mut server = Server::with_reload(model, serve_config(), &devices[0], reload).unwrap();
        steps(&mut server, &devices, vocab)
    } else {
        let placement = Placement::local(&devices);
        let ToServe { model, reload, .. } =
            parallel::load_parallel_to_serve::<Ascend>(checkpoint.clone(), options, &placement)
                .expect("the checkpoint loads split");
        let mut server = Server::with_reload(model, serve_config(), &devices[0], reload).unwrap();
        steps(&mut server, &devices, vocab)
    };
    record(key, start.elapsed(), 1);
    // The model and its cache are gone: their blocks go back to the emulated NPUs (whose
    // memory is this host's), or eight NPUs' worth of cached blocks would fill the host.
    for d in &devices {
        DeviceContext::get(&(*d).into())
            .and_then(|ctx| ctx.release_cache())
            .expect("the NPU's cache is released");
    }
    steps
}

fn bench(c: &mut Criterion) {
    let mut tables = Vec::new();
    let mut group = c.benchmark_group("parallel_decode");
    group.sample_size(10);
    for case in &CASES {
        let dir = tempfile::tempdir().expect("a temporary directory");
        real_checkpoint::write(case.model, case.layers, dir.path(), 2 << 30, 1)
            .expect("the checkpoint is written");
        let checkpoint = Arc::new(Checkpoint::open(dir.path()).unwrap());
        let config = checkpoint.config().clone();
        let (vocab, hidden) = (
            config["vocab_size"].as_u64().unwrap() as f64,
            config["hidden_size"].as_u64().unwrap() as f64,
        );
        let mut table = Table::new(
            &format!(
                "{}: a decode step of all {} layers, modelled from {} on N NPUs",
                case.name(),
                case.full_layers,
                match case.layers {
                    1 => "one layer".to_string(),
                    n => format!("{n} layers"),
                }
            ),
            &[
                "NPUs",
                "batch",
                "device µs / layer / NPU",
                "collectives µs / layer",
                "step ms",
                "tok/s",
                "tok/s per NPU",
                "per NPU x 1 NPU",
                "per NPU x vllm-ascend",
            ],
        );
        let mut one_npu: Vec<f64> = Vec::new();
        for npus in NPUS {
            let key = format!("{} on {npus} NPUs: load and decode", case.name());
            // Criterion times the whole measurement once per sample; one sample is enough to
            // have the modelled figures, which do not vary.
            let mut figures = None;
            group.sample_size(10).bench_function(&key, |b| {
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    for _ in 0..iters {
                        if figures.is_none() {
                            figures = Some(measure(case, &checkpoint, npus, &key));
                        }
                    }
                    start.elapsed()
                })
            });
            let Some(steps) = figures else { continue };
            eprintln!("{key}: measured");
            let n = npus as f64;
            // The LM head (vocab rows split over the NPUs) read once a step, at HBM rate:
            // the part of the step that does not scale with the layers.
            let head_s = vocab * hidden * 2.0 / n / a2::HBM_BYTES_PER_S;
            for (i, (batch, step)) in BATCHES.iter().zip(&steps).enumerate() {
                let per_layer = ((step.device_s / n - head_s) / case.layers as f64).max(0.0);
                let layer_comm =
                    hccs_s(&step.comm, &[Kind::AllReduce, Kind::AlltoAllV]) / case.layers as f64;
                let logits_comm = hccs_s(&step.comm, &[Kind::AllGather]);
                let full =
                    case.full_layers as f64 * (per_layer + layer_comm) + head_s + logits_comm;
                let tok_s = *batch as f64 / full;
                let per_npu = tok_s / n;
                if npus == 1 {
                    one_npu.push(per_npu);
                }
                eprintln!(
                    "{}: {npus} NPUs, batch {batch}: {:.1} µs/layer/NPU, {:.1} µs collectives, \
                     {per_npu:.0} tok/s per NPU",
                    case.name(),
                    per_layer * 1e6,
                    layer_comm * 1e6
                );
                table.row(vec![
                    npus.to_string(),
                    batch.to_string(),
                    format!("{:.1}", per_layer * 1e6),
                    format!("{:.1}", layer_comm * 1e6),
                    format!("{:.2}", full * 1e3),
                    format!("{tok_s:.0}"),
                    format!("{per_npu:.0}"),
                    one_npu
                        .get(i)
                        .map_or("-".into(), |one| format!("{:.2}", per_npu / one)),
                    format!("{:.2}", per_npu / VLLM_ASCEND_TOK_S),
                ]);
            }
        }
        tables.push(table);
    }
    group.finish();
    let walls: Vec<String> = CASES
        .iter()
        .flat_map(|case| {
            NPUS.iter().filter_map(move |npus| {
                let key = format!("{} on {npus} NPUs: load and decode", case.name());
                mean(&key).map(|s| format!("{key}: {s:.1} s of host time"))
            })
        })
        .collect();
    let mut notes = vec![
        "device time: every NPU's launches of the step by the A2 model (Ascend C kernels from \
         their counters, aclnn operators at their bytes over HBM bandwidth, each launch's \
         latency included), divided evenly among the NPUs (ASSUMED balanced: the heads and the \
         vocabulary split evenly, the experts by ranges whose load follows the routing)"
            .to_string(),
        format!(
            "collectives: each round's busiest link at {:.0} GB/s (a2::HCCS_LINK_BYTES_PER_S, \
             ASSUMED) plus {:.0} µs a round (ASSUMED); all-reduce and all-to-all per layer, the \
             logits' all-gather once a step",
            a2::HCCS_LINK_BYTES_PER_S / 1e9,
            ROUND_LATENCY_S * 1e6
        ),
        "whole model: the layers run times the published layer count, plus the LM head once \
         (its rows per NPU at HBM rate); prompts of 4 tokens (decode attention over a short \
         context: its cache reads are left out)"
            .to_string(),
        format!(
            "vllm-ascend: {VLLM_ASCEND_TOK_S} output tok/s for Qwen3-30B-A3B W8A8 on one A3 die \
             at batch 45, TP1 (an A3 die, not an A2 NPU; measured, not modelled: host overheads \
             included)"
        ),
    ];
    notes.extend(walls);
    let notes: Vec<&str> = notes.iter().map(String::as_str).collect();
    publish("parallel_decode", &tables, &notes);
}

fn configured() -> Criterion {
    // The emulated machine's size is read when it starts: eight NPUs unless told otherwise.
    if std::env::var_os(ENV_DEVICES).is_none() {
        std::env::set_var(ENV_DEVICES, NPUS[NPUS.len() - 1].to_string());
    }
    common::criterion()
}

criterion_group! {
    name = benches;
    config = configured();
    targets = bench
}
criterion_main!(benches);
