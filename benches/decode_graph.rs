//! The example model's decode step eager against replayed from its captured ACL graph
//! (`Server::enable_captured_decode`), at batch 1, 8 and 32, in one run: host time per step
//! (criterion), submissions to the device stream and device work per step, decode tokens/s on
//! the emulated NPU, and the modelled Atlas A2 step time.

mod common;

use std::time::Duration;

use burn_ascend::{Ascend, AscendDevice};
use burn_ascend_llm::engine::decode_graph::DECODE_BUCKETS;
use burn_ascend_llm::engine::serve::Server;
use burn_ascend_llm::moe::config::MoeConfig;
use burn_ascend_llm::moe::model::MoeDecoder;
use common::example::{model, weights, SteadyBatch, PROMPT, SERVE};
use common::{mean, publish, ratio, record, us, Table};
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};

const BATCHES: [usize; 3] = [1, 8, 32];

/// What one decode step cost.
#[derive(Debug, Clone, Copy, Default)]
struct Step {
    /// Host seconds to queue the step (`StepReport::issue_secs`).
    host: f64,
    /// Wall seconds of the whole step (queue, run, sample).
    wall: f64,
    /// Submissions to the device stream (each op, kernel, copy; a replay is one).
    submissions: u64,
    /// aclnn operators and Ascend C kernels the device ran.
    device_ops: u64,
    /// Modelled Atlas A2 device seconds of the step's work.
    modelled: f64,
    tokens: usize,
}

/// The next step in which every request of the batch decodes one token.
fn decode_step(decode: &mut SteadyBatch<Ascend>) -> Step {
    let s = decode.step();
    Step {
        host: s.report.issue_secs,
        wall: s.report.secs,
        submissions: s.work.submissions,
        device_ops: s.work.aclnn_launches + s.work.kernel_launches,
        modelled: s.modelled,
        tokens: s.report.sampled.len(),
    }
}

fn server(
    cfg: &MoeConfig,
    weights: &[u8],
    device: &AscendDevice,
    captured: bool,
) -> Server<Ascend, MoeDecoder<Ascend>> {
    let model = model(cfg, weights, device);
    let mut server = Server::new(model, SERVE, device).expect("valid settings");
    if captured {
        server
            .enable_captured_decode(&DECODE_BUCKETS)
            .expect("the emulated NPU captures");
        assert_eq!(server.captured_buckets(), DECODE_BUCKETS);
    }
    server
}

/// Median of `f` over `steps`: robust to the host thread being descheduled on a shared machine.
fn median(steps: &[Step], f: impl Fn(&Step) -> f64) -> Option<f64> {
    let mut v: Vec<f64> = steps.iter().map(f).collect();
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| v[v.len() / 2])
}

/// Mean of `f` over `steps`.
fn avg(steps: &[Step], f: impl Fn(&Step) -> f64) -> Option<f64> {
    (!steps.is_empty()).then(|| steps.iter().map(f).sum::<f64>() / steps.len() as f64)
}

fn decode_graph(c: &mut Criterion) {
    let cfg = MoeConfig::new();
    let weights = weights(&cfg);
    let device = AscendDevice::Emulated(0);
    let modes = [("eager", false), ("replay", true)];
    // Every measured step of each (mode, batch), criterion's warm-up included.
    let mut steps: Vec<Vec<Vec<Step>>> = vec![vec![Vec::new(); BATCHES.len()]; modes.len()];
    let mut g = c.benchmark_group("decode_graph");
    g.sampling_mode(SamplingMode::Flat);
    for (b, batch) in BATCHES.into_iter().enumerate() {
        for (m, (mode, captured)) in modes.into_iter().enumerate() {
            let server = server(&cfg, &weights, &device, captured);
            let mut decode = SteadyBatch::new(server, batch, cfg.vocab, SERVE.max_seq - PROMPT);
            decode_step(&mut decode);
            let key = format!("{mode}/{batch}");
            let all = &mut steps[m][b];
            g.bench_function(format!("{mode}/batch_{batch}"), |bench| {
                bench.iter_custom(|iters| {
                    let host: f64 = (0..iters)
                        .map(|_| {
                            let s = decode_step(&mut decode);
                            all.push(s);
                            s.host
                        })
                        .sum();
                    let took = Duration::from_secs_f64(host);
                    record(&key, took, iters);
                    took
                })
            });
        }
    }
    g.finish();

    let mut host = Table::new(
        "Host time and submissions per decode step, eager against replay",
        &[
            "batch",
            "eager host (µs)",
            "replay host (µs)",
            "replay / eager host",
            "replay / eager host (medians)",
            "eager submissions",
            "replay submissions",
            "device ops, eager / replay",
        ],
    );
    let mut speed = Table::new(
        "Decode tokens/s on the emulated NPU and modelled Atlas A2 step time",
        &[
            "batch",
            "eager (tok/s)",
            "replay (tok/s)",
            "replay / eager tok/s",
            "A2 device model, eager / replay (µs)",
            "A2 step eager (µs)",
            "A2 step replay (µs)",
            "eager / replay A2 step",
        ],
    );
    for (b, batch) in BATCHES.into_iter().enumerate() {
        let (e, r) = (&steps[0][b], &steps[1][b]);
        let (he, hr) = (
            mean(&format!("eager/{batch}")),
            mean(&format!("replay/{batch}")),
        );
        let count = |s: &[Step], f: fn(&Step) -> u64| {
            avg(s, |x| f(x) as f64).map_or("-".into(), |v| format!("{v:.1}"))
        };
        let (de, dr) = (count(e, |s| s.device_ops), count(r, |s| s.device_ops));
        host.row(vec![
            batch.to_string(),
            us(he),
            us(hr),
            ratio(hr, he),
            ratio(median(r, |x| x.host), median(e, |x| x.host)),
            count(e, |s| s.submissions),
            count(r, |s| s.submissions),
            format!("{de} / {dr}"),
        ]);
        let tps = |s: &[Step]| {
            let wall: f64 = s.iter().map(|x| x.wall).sum();
            (wall > 0.0).then(|| s.iter().map(|x| x.tokens).sum::<usize>() as f64 / wall)
        };
        // The host's time to queue the step (as measured here, on the emulated runtime) plus
        // the modelled device time: no overlap assumed, so neither side is flattered.
        let a2 = |s: &[Step]| avg(s, |x| x.host + x.modelled);
        let (ae, ar) = (a2(e), a2(r));
        let show = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
        let device = |s: &[Step]| us(avg(s, |x| x.modelled));
        speed.row(vec![
            batch.to_string(),
            show(tps(e)),
            show(tps(r)),
            ratio(tps(r), tps(e)),
            format!("{} / {}", device(e), device(r)),
            us(ae),
            us(ar),
            ratio(ae, ar),
        ]);
    }
    publish(
        "decode_graph",
        &[host, speed],
        &[
            &format!(
                "Model: MoeConfig defaults (hidden {}, {} layers, {} experts top-{}, vocab {}), \
                 the example's cache; every request decodes greedily, a finished one is replaced \
                 (its prefill steps are not measured). Replay: buckets {DECODE_BUCKETS:?}, each \
                 batch padded to the next.",
                cfg.hidden, cfg.layers, cfg.experts, cfg.top_k, cfg.vocab
            ),
            "Host time: criterion's mean of `StepReport::issue_secs`, the host's time to queue \
             the step (build the inputs, upload them, then issue every op, or write the packed \
             input buffer and replay). The goal: replay at most 5% of eager (0.05x). The \
             medians' ratio is over every measured step: on a shared machine a descheduled \
             host thread adds milliseconds to a few replayed steps, which moves the means.",
            "Submissions: work the host queued on the device stream per step (each op, kernel, \
             copy; one replay counts one), sampling included; device ops: aclnn operators and \
             Ascend C kernels the device ran (a replay runs the captured ones, padding rows \
             included, plus the two in-place copies per layer that keep the KV cache at its \
             captured address).",
            "Tokens/s: the steps' wall time, sampling (a read of the logits) included, on the \
             emulated NPU, which computes on the host's two cores: a code-path comparison, not \
             NPU speed.",
            "A2 model: per step, the host time above plus the modelled device time \
             (`a2::ModelledClock`: kernels by their measured traffic, aclnn operators by their \
             modelled bytes, at peak HBM bandwidth; launch latency not modelled). A model, not \
             a measurement.",
        ],
    );
}

criterion_group! {
    name = benches;
    config = common::criterion();
    targets = decode_graph
}
criterion_main!(benches);
