//! Quantized decode (issue 24): a decode step at batch 1, 8 and 32 of (a) the example's model
//! served by `moe::serve::Server` and (b) one DeepSeek-V2-Lite MoE layer at its published
//! shapes, each in bf16 float, W8A16 and W8A8 (`MoeDecoder::quantize`, `Decoder::quantize`), in
//! one run: the step's modelled Atlas A2 time (`a2::ModelledClock`), the HBM bytes it moves
//! (`work_counters`), their ratios to the float step, and the bytes of the weights.

mod common;
#[path = "common/real_layer.rs"]
mod real_layer;

use std::time::Instant;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::{DType, Int, Tensor};
use burn_ascend::emulator::{work_counters, WorkCounters};
use burn_ascend::Ascend;
use burn_ascend_llm::engine::serve::Server;
use burn_ascend_llm::engine::step::PagedAttention;
use burn_ascend_llm::families::blocks::norm::RmsNorm;
use burn_ascend_llm::families::blocks::quant::Quantize;
use burn_ascend_llm::families::Decoder;
use burn_ascend_llm::moe::config::MoeConfig;
use burn_ascend_llm::moe::model::MoeDecoder;
use burn_ascend_perf::a2::{self, ModelledClock};
use common::example::{SteadyBatch, PROMPT, SERVE};
use common::{mean, publish, record, Table};
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};
use real_layer::{
    device, families_layer, step_inputs, sync, StepState, B, BATCHES, BF16, CONTEXT, EPS,
    MAX_KV_SPLITS, MODELS,
};

/// Tokens each request generates: short enough that a batch of 32 fits the cache
/// (3 pages each), so no request is preempted while criterion times the loop.
const NEW: usize = 40;
/// Decode steps run before the measured one (executor caches, allocator); each mode's server
/// starts from the same requests, so the measured step is at the same positions in every mode.
const WARM_STEPS: usize = 2;

/// The float baseline and the two quantized forms.
const MODES: [Option<Quantize>; 3] = [None, Some(Quantize::W8A16), Some(Quantize::W8A8)];

fn mode_name(mode: Option<Quantize>) -> String {
    mode.map_or("bf16".into(), |m| m.to_string())
}

/// What one decode step put on the device.
#[derive(Debug, Clone, Copy, Default)]
struct Step {
    /// Modelled A2 seconds (`ModelledClock`).
    modelled: f64,
    /// Of which the feed-forward block (router, experts, shared experts); the real-size layer
    /// only.
    ffn: Option<f64>,
    /// Routed experts that got rows (the real-size layer only).
    experts: Option<usize>,
    work: WorkCounters,
    /// Emulated wall seconds of this step (this machine, not NPU speed).
    wall: f64,
}

impl Step {
    /// HBM bytes: the aclnn operators' modelled bytes and the kernels' measured ones.
    fn bytes(&self) -> u64 {
        self.work.bytes()
    }

    /// The modelled time with the launch latency of every aclnn operator added, as a real NPU
    /// pays it (the clock charges it to Ascend C kernels only).
    fn with_aclnn_latency(&self) -> f64 {
        self.modelled + self.work.aclnn_launches as f64 * a2::LAUNCH_LATENCY_S
    }

    /// The aclnn matmul-class operators' cube cycles spread perfectly over the cube cores: a
    /// lower bound of their compute time, which the clock leaves out.
    fn cube_secs(&self) -> f64 {
        self.work.aclnn_cube_cycles as f64 / a2::cube_cores() as f64 / a2::clock_hz()
    }
}

/// Bytes of a module's parameters, and of those its forward does not read: the f32 scales of a
/// quantized layer that keeps its scales in the operator's type too (`operator_scale(s)`,
/// visited after the f32 ones).
#[derive(Default)]
struct WeightBytes {
    path: Vec<String>,
    held: u64,
    unread: u64,
    /// The f32 scales last visited.
    last_scales: u64,
}

impl<BK: burn::tensor::backend::Backend> ModuleVisitor<BK> for WeightBytes {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<BK, D>>) {
        let t = param.val();
        let bytes = (t.shape().num_elements() * t.dtype().size()) as u64;
        self.held += bytes;
        let named = |n: &[&str]| self.path.iter().any(|p| n.contains(&p.as_str()));
        if named(&["operator_scale", "operator_scales"]) {
            self.unread += self.last_scales;
        } else if named(&["scale", "scales"]) {
            self.last_scales = bytes;
        }
    }

    fn visit_int<const D: usize>(&mut self, param: &Param<Tensor<BK, D, Int>>) {
        let t = param.val();
        self.held += (t.shape().num_elements() * t.dtype().size()) as u64;
    }
}

/// (bytes the forward reads, bytes held) of a module's weights.
fn weight_bytes<BK: burn::tensor::backend::Backend, M: Module<BK>>(module: &M) -> (u64, u64) {
    let mut v = WeightBytes::default();
    module.visit(&mut v);
    (v.held - v.unread, v.held)
}

/// Casts a module's float parameters.
struct ToDtype(DType);

impl<BK: burn::tensor::backend::Backend> ModuleMapper<BK> for ToDtype {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<BK, D>>) -> Param<Tensor<BK, D>> {
        let (id, tensor, mapper) = param.consume();
        Param::from_mapped_value(id, tensor.cast(self.0), mapper)
    }
}

/// The example's next decode step at a steady batch.
fn decode_step(decode: &mut SteadyBatch<Ascend>) -> Step {
    let s = decode.step();
    Step {
        modelled: s.modelled,
        ffn: None,
        experts: None,
        work: s.work,
        wall: s.wall,
    }
}

/// One configuration's measured step and weights.
struct Measured {
    mode: Option<Quantize>,
    batch: usize,
    step: Step,
    /// (bytes the forward reads, bytes held).
    weights: (u64, u64),
}

fn example(c: &mut Criterion, cfg: &MoeConfig) -> Vec<Measured> {
    let float = MoeDecoder::<Ascend>::new(cfg, &device())
        .expect("a valid config")
        .map(&mut ToDtype(BF16));
    let mut found = Vec::new();
    let mut g = c.benchmark_group("quantized/example");
    g.sampling_mode(SamplingMode::Flat);
    for batch in BATCHES {
        for mode in MODES {
            let model = match mode {
                None => float.clone(),
                Some(m) => float.clone().quantize(m).expect("one NPU"),
            };
            let weights = weight_bytes(&model);
            let server = Server::new(model, SERVE, &device()).expect("valid settings");
            let mut decode = SteadyBatch::new(server, batch, cfg.vocab, NEW);
            for _ in 0..WARM_STEPS {
                decode_step(&mut decode);
            }
            found.push(Measured {
                mode,
                batch,
                step: decode_step(&mut decode),
                weights,
            });
            let key = format!("example/{}/{batch}", mode_name(mode));
            g.bench_function(format!("{}/batch_{batch}", mode_name(mode)), |b| {
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    for _ in 0..iters {
                        decode_step(&mut decode);
                    }
                    let took = start.elapsed();
                    record(&key, took, iters);
                    took
                })
            });
        }
    }
    g.finish();
    found
}

/// One decode step of the families' layer as `Decoder::step` runs a layer, clocked, the
/// feed-forward block lapped apart: (modelled step, modelled feed-forward block, experts that
/// got rows).
fn layer_step(
    layer: &Decoder<B>,
    norms: &(RmsNorm<B>, RmsNorm<B>),
    st: &StepState,
    clock: &mut ModelledClock,
) -> (f64, f64, usize) {
    let layer = &layer.layers[0];
    let batch = st.x.dims()[0];
    let inputs = step_inputs(st, batch);
    let mut caches = vec![st.cache.clone()];
    let mut paged = PagedAttention::new(&mut caches, st.slots.clone(), &inputs, MAX_KV_SPLITS);
    let x = st.x.clone();
    let h = norms.0.forward(x.clone());
    let a = layer
        .attention
        .paged(h, st.positions.clone(), 0, &mut paged);
    let (h, residual) = norms.1.add_forward(x, a);
    sync();
    let attention = clock.lap();
    let (y, stats) = layer.ffn.forward(h);
    sync();
    let ffn = clock.lap();
    let out = residual + y;
    sync();
    let add = clock.lap();
    assert_eq!(out.dims(), [batch, layer_hidden(st)]);
    let counts = stats
        .expect("a MoE layer")
        .counts()
        .into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .expect("counts");
    let experts = counts.iter().filter(|&&n| n > 0.0).count();
    (attention + ffn + add, ffn, experts)
}

fn layer_hidden(st: &StepState) -> usize {
    st.x.dims()[1]
}

/// The real-size layer in each mode at each batch, one step each after a warm-up step; the
/// layers share the router and the step's inputs, so they route alike where their attention
/// outputs agree. Its emulated wall time is that of the measured step (a few seconds each on
/// this machine: criterion's ten samples would take minutes per configuration).
fn real_size() -> Vec<Measured> {
    let m = &MODELS[0];
    let float = families_layer(m);
    let layers: Vec<(Option<Quantize>, Decoder<B>)> = MODES
        .into_iter()
        .map(|mode| {
            let layer = match mode {
                None => float.clone(),
                Some(q) => float.clone().quantize(q),
            };
            (mode, layer)
        })
        .collect();
    let norm = || {
        RmsNorm::new(
            Param::from_tensor(Tensor::ones([m.shape.hidden], (&device(), BF16))),
            EPS,
        )
    };
    let norms = (norm(), norm());
    let mut found = Vec::new();
    for batch in BATCHES {
        let st = StepState::new(&m.shape, batch);
        for (mode, layer) in &layers {
            let mut clock = ModelledClock::start();
            layer_step(layer, &norms, &st, &mut clock);
            let before = work_counters();
            clock.lap();
            let start = Instant::now();
            let (modelled, ffn, experts) = layer_step(layer, &norms, &st, &mut clock);
            let wall = start.elapsed().as_secs_f64();
            let work = work_counters().since(&before);
            found.push(Measured {
                mode: *mode,
                batch,
                step: Step {
                    modelled,
                    ffn: Some(ffn),
                    experts: Some(experts),
                    work,
                    wall,
                },
                weights: weight_bytes(&layer.layers[0]),
            });
        }
    }
    found
}

fn us(secs: f64) -> String {
    format!("{:.1}", secs * 1e6)
}

fn mb(bytes: u64) -> String {
    format!("{:.2}", bytes as f64 / 1e6)
}

/// The table of one model's steps, each against the float step at its batch.
fn table(title: &str, found: &[Measured], wall: impl Fn(&Measured) -> Option<f64>) -> Table {
    let mut t = Table::new(
        title,
        &[
            "batch",
            "weights",
            "experts touched",
            "modelled step (µs)",
            "float / this",
            "of which feed-forward (µs)",
            "with 3 µs per aclnn launch (µs)",
            "float / this, with launches",
            "HBM bytes (MB)",
            "this / float bytes",
            "aclnn cube, spread (µs)",
            "launches aclnn + kernels",
            "weights read (MB)",
            "weights held (MB)",
            "emulated wall (ms)",
        ],
    );
    for f in found {
        let float = found
            .iter()
            .find(|g| g.batch == f.batch && g.mode.is_none())
            .expect("the float step of each batch");
        let (s, fl) = (&f.step, &float.step);
        t.row(vec![
            f.batch.to_string(),
            mode_name(f.mode),
            s.experts.map_or("-".into(), |n| n.to_string()),
            us(s.modelled),
            format!("{:.2}x", fl.modelled / s.modelled),
            s.ffn.map_or("-".into(), us),
            us(s.with_aclnn_latency()),
            format!("{:.2}x", fl.with_aclnn_latency() / s.with_aclnn_latency()),
            mb(s.bytes()),
            format!("{:.2}x", s.bytes() as f64 / fl.bytes() as f64),
            us(s.cube_secs()),
            format!("{} + {}", s.work.aclnn_launches, s.work.kernel_launches),
            mb(f.weights.0),
            mb(f.weights.1),
            wall(f).map_or("-".into(), |w| format!("{:.1}", w * 1e3)),
        ]);
    }
    t
}

fn quantized(c: &mut Criterion) {
    let cfg = MoeConfig::new();
    let mut example = example(c, &cfg);
    example.sort_by_key(|f| f.batch);
    let mut layer = real_size();
    layer.sort_by_key(|f| f.batch);
    let name = MODELS[0].name;
    let tables = [
        table(
            &format!(
                "The example's model (MoeConfig defaults, bf16), a decode step of the server at \
                 {PROMPT} + {WARM_STEPS} tokens per request"
            ),
            &example,
            |f| mean(&format!("example/{}/{}", mode_name(f.mode), f.batch)),
        ),
        table(
            &format!(
                "One {name} MoE layer (bf16), a decode step over {CONTEXT} cached tokens per \
                 request"
            ),
            &layer,
            |f| Some(f.step.wall),
        ),
    ];
    publish(
        "quantized",
        &tables,
        &[
            &format!(
                "The example's model: hidden {}, {} layers, {} experts of {} top-{}, vocab {}, \
                 built fresh and cast to bf16 (the int8 operators take F16/BF16 activations), \
                 then `MoeDecoder::quantize`; served by `moe::serve::Server` with the example's \
                 cache, {PROMPT}-token prompts, the measured step decode step {} of every \
                 request (each mode's server from the same requests). The step is the \
                 server's: embedding, {} layers, head and sampling.",
                cfg.hidden,
                cfg.layers,
                cfg.experts,
                cfg.expert_hidden,
                cfg.top_k,
                cfg.vocab,
                WARM_STEPS + 1,
                cfg.layers
            ),
            "The real-size layer: the families' DeepSeek-V2-Lite layer of `real_sizes` (random \
             bf16 weights, std 0.02, through the loader), `Decoder::quantize` (q_proj, \
             kv_a_proj, o_proj, shared and routed experts int8 per output channel; kv_b_proj, \
             norms and router float); the step as `real_sizes` runs it block by block, the \
             feed-forward block (router, routed and shared experts) lapped apart. The three \
             layers share the float router and the step's inputs; experts touched: routed \
             experts that got rows (quantized attention can move a token's choice). Emulated \
             wall: the measured step alone (the example's: criterion's mean).",
            "Modelled step: `a2::ModelledClock` (each Ascend C kernel by the roofline of its \
             counters plus 3 µs of launch latency; each aclnn operator at its tensor \
             arguments' bytes over 1.6 TB/s, int8 weights at one byte, a grouped matmul's \
             weights and scales only for the experts that got rows). HBM bytes: the same bytes \
             (`work_counters`). The clock has no compute term for aclnn operators: the aclnn \
             cube column is their cube cycles (int8 at the 16x32x16 fractal, half at 16x16x16, \
             whole fractals) spread evenly over the cube cores, a lower bound of the time it \
             would add where it exceeds an operator's bytes.",
            "Weights read: parameter bytes (numel x dtype size) the forward reads: a \
             quantized layer's int8 weights and its scales in the operator's type, without the \
             f32 scales it also keeps (for saving); held: all of its parameters.",
        ],
    );
}

criterion_group! {
    name = benches;
    config = common::criterion();
    targets = quantized
}
criterion_main!(benches);
