//! The example model's decode step (`moe::serve::Server`, paged KV cache) at batch 1, 8 and 32:
//! tokens/s on the emulated NPU with the fused ops beside the same weights on burn-flex (the
//! composed defaults), in one run; then the Ascend allocator in the steady state of the loop.

mod common;

use std::time::Duration;

use burn_ascend::{Ascend, AscendDevice, FusedOps};
use burn_ascend_llm::engine::serve::{Request, Server};
use burn_ascend_llm::moe::config::MoeConfig;
use burn_ascend_llm::moe::model::MoeDecoder;
use burn_flex::Flex;
use common::example::{model, prompt, weights, PROMPT, SERVE};
use common::{mean, publish, ratio, record, Table};
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};

const BATCHES: [usize; 3] = [1, 8, 32];
/// Tokens generated per request in each timed call.
const NEW: usize = 8;

fn server<B: FusedOps>(
    cfg: &MoeConfig,
    weights: &[u8],
    device: &B::Device,
) -> Server<B, MoeDecoder<B>> {
    Server::new(model(cfg, weights, device), SERVE, device).expect("valid settings")
}

fn requests(batch: usize, vocab: usize, new: usize) -> Vec<Request> {
    (0..batch)
        .map(|b| Request::greedy(prompt(b, vocab), new))
        .collect()
}

/// Seconds and tokens of the decode steps of one `generate` call (steps with a prefill chunk
/// excluded), from the server's own count.
fn decode<B: FusedOps>(s: &mut Server<B, MoeDecoder<B>>, requests: &[Request]) -> (f64, usize) {
    let out = s.generate(requests);
    assert_eq!(out.completed, requests.len(), "a request failed");
    (out.decode_secs, out.decode_tokens)
}

fn bench_backend<B: FusedOps>(
    c: &mut Criterion,
    label: &str,
    server: &mut Server<B, MoeDecoder<B>>,
    vocab: usize,
) -> Vec<usize> {
    let mut g = c.benchmark_group(format!("moe_decode/{label}"));
    g.sampling_mode(SamplingMode::Flat);
    let mut tokens = Vec::new();
    for batch in BATCHES {
        let requests = requests(batch, vocab, NEW);
        let key = format!("{label}/{batch}");
        // Every call runs the same schedule: its decode tokens are counted once.
        tokens.push(decode(server, &requests).1);
        g.bench_function(format!("batch_{batch}"), |b| {
            b.iter_custom(|iters| {
                let secs: f64 = (0..iters).map(|_| decode(server, &requests).0).sum();
                let took = Duration::from_secs_f64(secs);
                record(&key, took, iters);
                took
            })
        });
    }
    g.finish();
    tokens
}

fn mib(bytes: usize) -> String {
    format!("{:.2}", bytes as f64 / (1 << 20) as f64)
}

fn moe_decode(c: &mut Criterion) {
    let cfg = MoeConfig::new();
    let bytes = weights(&cfg);
    let device = AscendDevice::Emulated(0);
    let mut ascend = server::<Ascend>(&cfg, &bytes, &device);
    let mut flex = server::<Flex>(&cfg, &bytes, &Default::default());
    let ascend_tokens = bench_backend(c, "ascend", &mut ascend, cfg.vocab);
    let flex_tokens = bench_backend(c, "flex", &mut flex, cfg.vocab);

    let mut speed = Table::new(
        "Decode tokens/s, example model (decode steps of `Server::generate`, greedy)",
        &[
            "batch",
            "Ascend emulated (tok/s)",
            "burn-flex (tok/s)",
            "Ascend / flex",
        ],
    );
    for (i, batch) in BATCHES.into_iter().enumerate() {
        let tps = |label: &str, tokens: &[usize]| {
            mean(&format!("{label}/{batch}")).map(|s| tokens[i] as f64 / s)
        };
        let (a, f) = (tps("ascend", &ascend_tokens), tps("flex", &flex_tokens));
        let show = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
        speed.row(vec![batch.to_string(), show(a), show(f), ratio(a, f)]);
    }

    // Steady state: after a warm-up call of the longer run, the difference between a long and
    // a short run is decode steps only (same prompts, so the same prefill).
    let mut alloc = Table::new(
        "Ascend allocator in the steady state of the decode loop",
        &[
            "batch",
            "device allocations per decode step",
            "allocations in a warm generate call",
            "in use (MiB)",
            "reserved (MiB)",
            "peak in use (MiB)",
        ],
    );
    let (short, long) = (4usize, 12usize);
    for batch in BATCHES {
        let allocations = |ascend: &mut Server<Ascend, MoeDecoder<Ascend>>, new| {
            let before = Ascend::memory_stats(&device).device_allocations;
            decode(ascend, &requests(batch, cfg.vocab, new));
            Ascend::memory_stats(&device).device_allocations - before
        };
        // Warm-up runs of both lengths: their schedules differ in the last steps' shapes.
        allocations(&mut ascend, long);
        allocations(&mut ascend, short);
        let a_short = allocations(&mut ascend, short);
        let a_long = allocations(&mut ascend, long);
        let per_step = (a_long as f64 - a_short as f64) / (long - short) as f64;
        let s = Ascend::memory_stats(&device);
        alloc.row(vec![
            batch.to_string(),
            format!("{per_step:.2}"),
            a_long.to_string(),
            mib(s.bytes_in_use),
            mib(s.bytes_reserved),
            mib(s.peak_bytes_in_use),
        ]);
    }
    publish(
        "moe_decode",
        &[speed, alloc],
        &[
            &format!(
                "Model: MoeConfig defaults (hidden {}, {} layers, {} experts top-{}, vocab {}); \
                 prompts of {PROMPT} tokens, {NEW} new tokens per request per timed call; the \
                 same weights on both backends (recorded once, loaded into each).",
                cfg.hidden, cfg.layers, cfg.experts, cfg.top_k, cfg.vocab
            ),
            "Tokens/s counts only the steps where every request decoded one token (no prefill \
             chunk), as `ServingReport::decode_tokens_per_second` does; criterion's mean over \
             its calls in this run.",
            "Ascend runs on the emulated NPU (kernels and aclnn operators computed on the host), \
             so the ratio compares code paths on this machine, not NPU speed.",
            "Allocations per step: (allocations of a 12-token run - those of a 4-token run) / 8, \
             both after a warm-up run of each; the target is 0. Bytes are the allocator's after the run \
             (in use includes weights and the paged KV cache).",
        ],
    );
}

criterion_group! {
    name = benches;
    config = common::criterion();
    targets = moe_decode
}
criterion_main!(benches);
