//! The MoE server under load: a seeded trace of requests (Poisson arrivals, mixed prompt and
//! output lengths) served by `moe::serve::Server` on the emulated NPU with the KV cache at 50%
//! and at 150% of the trace's demand: completed requests, preemptions, output tokens/s, and the
//! p50/p99 time per output token in emulated wall time and in modelled Atlas A2 time.

mod common;

use std::time::Instant;

use burn_ascend::{Ascend, AscendDevice};
use burn_ascend_llm::engine::serve::{ServeConfig, Server};
use burn_ascend_llm::engine::workload::{
    demand_pages, human_time, poisson_trace, Percentiles, ServingReport, TraceConfig,
};
use burn_ascend_llm::moe::config::MoeConfig;
use burn_ascend_perf::a2::ModelledClock;
use common::example::{model, weights};
use common::{mean, publish, record, Table};
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};

/// Cache sizes, in percent of the trace's demand.
const CACHES: [usize; 2] = [50, 150];
const PAGE_SIZE: usize = 4;
const STEP_TOKENS: usize = 64;

fn trace_config(vocab: usize) -> TraceConfig {
    TraceConfig {
        requests: 16,
        rate: 4.0,
        prompt: 4..=32,
        output: 4..=16,
        vocab,
        seed: 42,
    }
}

fn serving(c: &mut Criterion) {
    let cfg = MoeConfig::new();
    let device = AscendDevice::Emulated(0);
    let model = model::<Ascend>(&cfg, &weights(&cfg), &device);
    let trace = poisson_trace(&trace_config(cfg.vocab));
    let demand = demand_pages(&trace, PAGE_SIZE);
    let mut g = c.benchmark_group("serving");
    g.sampling_mode(SamplingMode::Flat);
    let mut runs: Vec<(usize, ServeConfig, ServingReport)> = Vec::new();
    for percent in CACHES {
        let serve = ServeConfig {
            pages: demand * percent / 100,
            page_size: PAGE_SIZE,
            max_seq: cfg.max_seq,
            max_kv_splits: 4,
            step_tokens: STEP_TOKENS,
            max_waiting: 1024,
            record_logits: false,
        };
        let mut server = Server::new(model.clone(), serve, &device).expect("valid settings");
        // One run on the modelled clock gives the figures (the schedule is the same each run).
        let mut clock = ModelledClock::start();
        let report = server.serve(&trace, || Some(clock.lap()));
        assert_eq!(report.completed, trace.len(), "{report}");
        let key = format!("cache_{percent}");
        g.bench_function(&key, |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    server.serve(&trace, || None);
                }
                let took = start.elapsed();
                record(&key, took, iters);
                took
            })
        });
        runs.push((percent, serve, report));
    }
    g.finish();

    let mut table = Table::new(
        "Serving a Poisson trace, example model, emulated NPU",
        &[
            "cache (% of demand)",
            "pages",
            "completed",
            "preemptions",
            "steps",
            "output tokens/s",
            "vs 150%",
            "TPOT p50 / p99, wall",
            "TPOT p50 / p99, modelled A2",
        ],
    );
    let tokens_per_s = |percent: usize, report: &ServingReport| {
        mean(&format!("cache_{percent}")).map(|s| report.output_tokens as f64 / s)
    };
    let reference = runs
        .iter()
        .find(|(p, ..)| *p == 150)
        .and_then(|(p, _, r)| tokens_per_s(*p, r));
    let show = |p: Option<Percentiles>| {
        p.map_or("-".into(), |p| {
            format!("{} / {}", human_time(p.p50), human_time(p.p99))
        })
    };
    for (percent, serve, report) in &runs {
        let tps = tokens_per_s(*percent, report);
        table.row(vec![
            format!("{percent}%"),
            serve.pages.to_string(),
            format!("{} / {}", report.completed, trace.len()),
            report.preemptions.to_string(),
            report.steps.to_string(),
            tps.map_or("-".into(), |t| format!("{t:.1}")),
            common::ratio(tps, reference),
            show(report.tpot_wall),
            show(report.tpot_modelled),
        ]);
    }
    let t = trace_config(cfg.vocab);
    publish(
        "serving",
        &[table],
        &[
            &format!(
                "Trace: {} greedy requests, Poisson arrivals at {} per server step (seed {}), \
                 prompts of {}..={} tokens and {}..={} new tokens drawn uniformly; demand = the \
                 pages of {PAGE_SIZE} slots every request holds at its longest, summed: {demand}. \
                 Steps of at most {STEP_TOKENS} tokens (decodes and prefill chunks).",
                t.requests,
                t.rate,
                t.seed,
                t.prompt.start(),
                t.prompt.end(),
                t.output.start(),
                t.output.end()
            ),
            &format!(
                "Model: MoeConfig defaults (hidden {}, {} layers, {} experts top-{}); fresh \
                 weights, so the continuations are noise: the figures are about scheduling.",
                cfg.hidden, cfg.layers, cfg.experts, cfg.top_k
            ),
            "Output tokens/s: the trace's output tokens over criterion's mean wall time of a \
             whole trace; 'vs 150%' is the ratio to the 150% cache in the same run.",
            "TPOT (time per output token): per request, (time of its last token - time of its \
             first) / (tokens - 1), then the median and 99th percentile over the requests; wall \
             time on this machine, and on the modelled clock (each step advances it by the \
             modelled Atlas A2 time of its launches: `a2::ModelledClock`). Both from one more \
             run of the trace (the schedule and counts are the same in every run).",
        ],
    );
}

criterion_group! {
    name = benches;
    config = common::criterion();
    targets = serving
}
criterion_main!(benches);
