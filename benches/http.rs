//! The OpenAI-compatible server's cost: one seeded Poisson trace served (a) in process by
//! `moe::serve::Server::serve` and (b) through HTTP by the server (`burn_ascend_openai`) on
//! 127.0.0.1, one streaming reqwest client per request sent at the trace's arrival times scaled to
//! wall time (the in-process run's time per step). The same model, weights, settings and greedy
//! requests: output tokens/s, p50/p99 time to first token and time per output token, and the
//! HTTP overhead per output token relative to the in-process time per output token.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use burn_ascend::{Ascend, AscendDevice};
use burn_ascend_llm::engine::serve::{ServeConfig, Server};
use burn_ascend_llm::engine::workload::{
    demand_pages, human_time, percentiles, poisson_trace, Arrival, Percentiles, ServingReport,
    TraceConfig,
};
use burn_ascend_llm::moe::config::MoeConfig;
use burn_ascend_openai::metrics::Metrics;
use burn_ascend_openai::{serve, App, Engine, ModelSpec, Tokenizer};
use common::example::{model, weights};
use common::{mean, publish, record, Table};
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};
use futures_util::StreamExt;
use serde_json::{json, Value};

const PAGE_SIZE: usize = 16;
const STEP_TOKENS: usize = 64;
const NAME: &str = "moe-decoder";

fn trace_config(vocab: usize) -> TraceConfig {
    TraceConfig {
        requests: 24,
        rate: 1.0,
        prompt: 8..=32,
        output: 16..=48,
        vocab,
        seed: 25,
    }
}

/// What the clients saw of one pass of the trace through HTTP.
struct HttpRun {
    /// Per request: its text and completion tokens.
    answers: Vec<(String, usize)>,
    ttft: Option<Percentiles>,
    tpot: Option<Percentiles>,
}

impl HttpRun {
    fn output_tokens(&self) -> usize {
        self.answers.iter().map(|(_, n)| n).sum()
    }
}

/// One request, streamed: its text, completion tokens, and the times (from `start`) it was
/// sent and its first and last text arrived.
async fn stream_one(
    client: reqwest::Client,
    url: String,
    arrival: Arrival,
    at: Duration,
    start: Instant,
) -> (String, usize, f64, Option<(f64, f64)>) {
    tokio::time::sleep_until((start + at).into()).await;
    let sent = start.elapsed().as_secs_f64();
    let body = json!({
        "model": NAME,
        "prompt": arrival.request.prompt,
        "max_tokens": arrival.request.new_tokens,
        "temperature": 0,
        "stream": true,
        "stream_options": { "include_usage": true },
    });
    let response = client.post(url).json(&body).send().await.expect("sent");
    assert_eq!(response.status(), 200, "the status of a completion");
    let mut events = response.bytes_stream();
    let (mut buffer, mut text, mut tokens) = (Vec::new(), String::new(), 0);
    let mut times: Option<(f64, f64)> = None;
    while let Some(bytes) = events.next().await {
        buffer.extend_from_slice(&bytes.expect("a chunk"));
        while let Some(end) = buffer.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = buffer.drain(..end + 2).collect();
            let data = std::str::from_utf8(&event).expect("UTF-8 events");
            let data = data.trim().strip_prefix("data: ").expect("a data event");
            if data == "[DONE]" {
                continue;
            }
            let chunk: Value = serde_json::from_str(data).expect("a JSON chunk");
            assert!(chunk.get("error").is_none(), "{chunk}");
            if let Some(n) = chunk["usage"]["completion_tokens"].as_u64() {
                tokens = n as usize;
            }
            if let Some(t) = chunk["choices"][0]["text"]
                .as_str()
                .filter(|t| !t.is_empty())
            {
                let now = start.elapsed().as_secs_f64();
                times = Some(times.map_or((now, now), |(first, _)| (first, now)));
                text.push_str(t);
            }
        }
    }
    (text, tokens, sent, times)
}

/// The trace through HTTP: arrival step `s` is sent at `(s - first step) * step_secs`.
async fn run_http(
    client: &reqwest::Client,
    base: &str,
    trace: &[Arrival],
    step_secs: f64,
) -> HttpRun {
    let first = trace.first().map_or(0, |a| a.step);
    let start = Instant::now();
    let tasks: Vec<_> = trace
        .iter()
        .map(|a| {
            let at = Duration::from_secs_f64((a.step - first) as f64 * step_secs);
            tokio::spawn(stream_one(
                client.clone(),
                format!("{base}/v1/completions"),
                a.clone(),
                at,
                start,
            ))
        })
        .collect();
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.expect("a client task"));
    }
    let ttft = results
        .iter()
        .filter_map(|(_, _, sent, times)| times.map(|(first, _)| first - sent))
        .collect();
    let tpot = results
        .iter()
        .filter(|(_, tokens, ..)| *tokens > 1)
        .filter_map(|(_, tokens, _, times)| {
            times.map(|(first, last)| (last - first) / (*tokens - 1) as f64)
        })
        .collect();
    HttpRun {
        answers: results.into_iter().map(|(t, n, ..)| (t, n)).collect(),
        ttft: percentiles(ttft),
        tpot: percentiles(tpot),
    }
}

fn http(c: &mut Criterion) {
    let cfg = MoeConfig::new();
    let device = AscendDevice::Emulated(0);
    let weights = weights(&cfg);
    let trace = poisson_trace(&trace_config(cfg.vocab));
    let demand = demand_pages(&trace, PAGE_SIZE);
    // Room for the whole trace at once: no preemption, the same schedule in both.
    let serve_cfg = ServeConfig {
        pages: demand,
        page_size: PAGE_SIZE,
        max_seq: cfg.max_seq,
        max_kv_splits: 4,
        step_tokens: STEP_TOKENS,
        max_waiting: 1024,
        record_logits: false,
    };
    let mut server = Server::new(model::<Ascend>(&cfg, &weights, &device), serve_cfg, &device)
        .expect("settings");
    let in_process: ServingReport = server.serve(&trace, || None);
    assert_eq!(in_process.completed, trace.len(), "{in_process}");
    let step_secs = in_process.wall_secs / in_process.steps as f64;

    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let model_cfg = cfg.clone();
    let (engine, _) = Engine::spawn(
        move || {
            Server::new(
                model::<Ascend>(&model_cfg, &weights, &device),
                serve_cfg,
                &device,
            )
            .map_err(|e| e.to_string())
        },
        Arc::new(Metrics::new(NAME)),
    )
    .expect("the engine starts");
    let spec = ModelSpec {
        name: NAME.into(),
        tokenizer: Tokenizer::Bytes,
        chat: None,
        sampling: Default::default(),
        reasoning: None,
    };
    let app = App::new(engine, spec);
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("a port");
    let base = format!("http://{}", listener.local_addr().expect("an address"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = runtime.spawn(serve(
        listener,
        app,
        async move {
            let _ = stopped.await;
        },
        Duration::from_secs(10),
    ));
    let client = reqwest::Client::new();
    let through_http = runtime.block_on(run_http(&client, &base, &trace, step_secs));
    // The same greedy tokens: the same text, the same counts.
    let same = trace
        .iter()
        .zip(&in_process.results)
        .zip(&through_http.answers)
        .filter(|((_, r), (text, n))| {
            let tokens = &r.as_ref().expect("completed").tokens;
            *n == tokens.len() && *text == Tokenizer::Bytes.decode(tokens)
        })
        .count();

    let mut g = c.benchmark_group("http");
    g.sampling_mode(SamplingMode::Flat).sample_size(10);
    g.bench_function("in_process", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                server.serve(&trace, || None);
            }
            let took = start.elapsed();
            record("in_process", took, iters);
            took
        })
    });
    g.bench_function("http", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                runtime.block_on(run_http(&client, &base, &trace, step_secs));
            }
            let took = start.elapsed();
            record("http", took, iters);
            took
        })
    });
    g.finish();
    let _ = stop.send(());
    let served = runtime
        .block_on(served)
        .expect("the server task")
        .expect("served");
    assert_eq!((served.unfinished, served.failure), (0, None));

    let tokens = in_process.output_tokens;
    assert_eq!(through_http.output_tokens(), tokens);
    let (inproc_secs, http_secs) = (mean("in_process"), mean("http"));
    let show = |p: Option<Percentiles>| {
        p.map_or("-".into(), |p| {
            format!("{} / {}", human_time(p.p50), human_time(p.p99))
        })
    };
    let per_s = |s: Option<f64>| s.map_or("-".into(), |s| format!("{:.1}", tokens as f64 / s));
    let overhead = match (inproc_secs, http_secs) {
        (Some(i), Some(h)) => format!("{:+.1} %", (h - i) / i * 100.0),
        _ => "-".into(),
    };
    let mut table = Table::new(
        "A Poisson trace in process and through HTTP, example model, emulated NPU",
        &[
            "served",
            "output tokens",
            "time per trace",
            "output tokens/s",
            "TTFT p50 / p99",
            "TPOT p50 / p99",
            "HTTP overhead per output token",
        ],
    );
    table.row(vec![
        "in process (`Server::serve`)".into(),
        tokens.to_string(),
        inproc_secs.map_or("-".into(), human_time),
        per_s(inproc_secs),
        show(in_process.ttft_wall),
        show(in_process.tpot_wall),
        "-".into(),
    ]);
    table.row(vec![
        "HTTP (streaming clients, 127.0.0.1)".into(),
        through_http.output_tokens().to_string(),
        http_secs.map_or("-".into(), human_time),
        per_s(http_secs),
        show(through_http.ttft),
        show(through_http.tpot),
        overhead,
    ]);
    let t = trace_config(cfg.vocab);
    publish(
        "http",
        &[table],
        &[
            &format!(
                "Trace: {} greedy requests, Poisson arrivals at {} per server step (seed {}), \
                 prompts of {}..={} tokens, {}..={} new tokens; {} steps in process ({} per \
                 step), the HTTP clients sent each request at its arrival step times that. The \
                 cache holds the whole trace ({demand} pages of {PAGE_SIZE}): no preemption. \
                 Same text and token count through HTTP as in process: {same} of {} requests.",
                t.requests,
                t.rate,
                t.seed,
                t.prompt.start(),
                t.prompt.end(),
                t.output.start(),
                t.output.end(),
                in_process.steps,
                human_time(step_secs),
                trace.len()
            ),
            "Model: MoeConfig defaults, fresh weights (the same in both), bytes as tokens. \
             HTTP: `POST /v1/completions` with token-id prompts, `temperature` 0, `stream` with \
             the usage chunk; reqwest, one task per request.",
            "Time per trace: criterion's mean wall time of the whole trace; output tokens/s = \
             output tokens / that. HTTP overhead per output token: (HTTP time - in-process \
             time) / output tokens, relative to the in-process time per output token.",
            "TTFT: in process, from the submission to the end of the step that sampled the \
             first token; through HTTP, from sending the request to the first chunk with text \
             (text ending in an incomplete UTF-8 character is held back, so noise bytes can \
             delay it by a step). TPOT: per request, (last - first token or text) / (tokens - \
             1); median and 99th percentile over the requests, from one pass each.",
        ],
    );
}

criterion_group! {
    name = benches;
    config = common::criterion();
    targets = http
}
criterion_main!(benches);
