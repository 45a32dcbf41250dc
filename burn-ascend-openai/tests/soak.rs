//! The soak: many clients at once send the server on the emulated NPU thousands of requests
//! (completions and chats, streamed and not, greedy and seeded sampling, with and without stop
//! strings), some leave part way (a stream dropped after a few chunks, a whole response
//! abandoned, a body cut off), some are invalid, the waiting queue overflows, and the device
//! faults (or a step panics) at random steps. The decode steps replay captured graphs, as the
//! program serves.
//!
//! At the end: every valid request either completed with the text of the same request served
//! alone (before the soak, nothing else running) or got a clear error (a 500 naming the
//! failure, a 429 for the full queue); every invalid one its 4xx; none hung and none lost its
//! connection without a status. The page pool and the device's memory in use are back where
//! they were, and the counters of `/metrics` add up: requests admitted = stopped + at length +
//! cancelled + failed, tokens generated = first tokens + later tokens.
//!
//! `SOAK_REQUESTS` (default 2000, the CI run) sets how many requests, `SOAK_CLIENTS` (default 16)
//! how many clients, `SOAK_SEED` the seed of the choices; the long run is
//! `SOAK_REQUESTS=50000 SOAK_CLIENTS=32 cargo test -p burn-ascend-openai --test soak -- --nocapture`.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use burn_ascend::Ascend;
use burn_ascend_llm::engine::decode_graph::DECODE_BUCKETS;
use burn_ascend_llm::engine::serve::{ServeConfig, Server};
use burn_ascend_openai::engine::Injected;
use burn_ascend_openai::metrics::Metrics;
use burn_ascend_openai::{App, Engine, Limits};
use common::*;
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

/// SplitMix64: the soak's choices, reproducible from `SOAK_SEED`.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |v| v.parse().expect(name))
}

/// 48 pages of 4 slots for requests of up to 30 positions, 6 waiting at most: with 16 clients
/// the queue overflows, requests preempt each other, and decode steps replay every bucket.
fn soak_config() -> ServeConfig {
    ServeConfig {
        pages: 48,
        max_waiting: 6,
        ..config()
    }
}

fn soak_limits() -> Limits {
    Limits {
        max_body_bytes: 16 << 10,
        ..Limits::new(soak_config().max_seq)
    }
}

/// The app serving the fixture with captured decode, as the program serves.
fn soak_app() -> Arc<App> {
    let cfg = soak_config();
    let (engine, _) = Engine::spawn(
        move || {
            let mut server = Server::new(load(), cfg, &device()).map_err(|e| e.to_string())?;
            server.enable_captured_decode(&DECODE_BUCKETS)?;
            Ok(server)
        },
        Arc::new(Metrics::new(MODEL)),
    )
    .expect("the engine starts");
    App::with_limits(engine, spec(chatml(), None), soak_limits())
}

/// The valid requests: (endpoint, body). Each is served alone first, for its reference text.
fn valid_requests() -> Vec<(&'static str, Value)> {
    let prompts = ["The sea", "She counted the boats", "In the evenings the"];
    let mut out = Vec::new();
    for (i, prompt) in prompts.iter().enumerate() {
        for (j, max_tokens) in [6, 14].into_iter().enumerate() {
            let mut body = json!({"model": MODEL, "max_tokens": max_tokens, "temperature": 0});
            if (i + j) % 2 == 1 {
                // Seeded sampling: the same draws whatever the batch.
                body["temperature"] = json!(0.8);
                body["top_p"] = json!(0.9);
                body["seed"] = json!(7 + i);
            }
            if j == 1 && i != 1 {
                body["stop"] = json!(["."]);
            }
            let mut completion = body.clone();
            completion["prompt"] = json!(prompt);
            out.push(("/v1/completions", completion));
            let mut chat = body;
            chat["messages"] = json!([{"role": "user", "content": prompt}]);
            if let Some(m) = chat.as_object_mut().unwrap().remove("max_tokens") {
                chat["max_completion_tokens"] = m;
            }
            out.push(("/v1/chat/completions", chat));
        }
    }
    out
}

/// Invalid requests: (endpoint, body, status, the field named, if one).
fn invalid_requests() -> Vec<(&'static str, Vec<u8>, u16, Option<&'static str>)> {
    let body = |v: Value| serde_json::to_vec(&v).unwrap();
    let long: Vec<u32> = (10..80).collect();
    vec![
        (
            "/v1/completions",
            body(json!({"model": MODEL, "prompt": "x", "temperature": 5})),
            400,
            Some("temperature"),
        ),
        (
            "/v1/completions",
            body(json!({"model": MODEL, "prompt": "x", "top_p": 0})),
            400,
            Some("top_p"),
        ),
        (
            "/v1/completions",
            body(json!({"model": "another", "prompt": "x"})),
            404,
            Some("model"),
        ),
        (
            "/v1/completions",
            b"{\"model\": \"qwen3_moe\", \"prompt\": ".to_vec(),
            400,
            None,
        ),
        (
            "/v1/completions",
            body(json!({"model": MODEL, "prompt": "x", "max_tokens": 0})),
            400,
            Some("max_tokens"),
        ),
        (
            "/v1/completions",
            body(json!({"model": MODEL, "prompt": long})),
            400,
            Some("prompt"),
        ),
        (
            "/v1/chat/completions",
            body(json!({"model": MODEL, "messages": []})),
            400,
            Some("messages"),
        ),
        (
            "/v1/completions",
            body(json!({"model": MODEL, "prompt": "x".repeat(20 << 10)})),
            413,
            None,
        ),
        (
            "/v1/completions",
            body(json!({"model": MODEL, "prompt": "x", "n": 0})),
            400,
            Some("n"),
        ),
    ]
}

/// What the client saw of a valid request.
#[derive(Debug)]
enum Seen {
    /// Its text and finish reason, and its usage's prompt tokens.
    Completed(String, String, u64),
    /// A status and an error object (a whole response), or an error event (a stream: 200).
    Failed(u16, Value),
}

/// A response read whole (or its stream to `[DONE]`), or why it was not a response: the
/// connection failed without a status, or it broke the protocol.
async fn read(response: reqwest::Response, chat: bool) -> Result<Seen, String> {
    let status = response.status().as_u16();
    let stream = response
        .headers()
        .get("content-type")
        .is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream"));
    if !stream {
        let body: Value = response
            .json()
            .await
            .map_err(|e| format!("status {status}, a body that is not JSON: {e}"))?;
        if status != 200 {
            return Ok(Seen::Failed(status, body["error"].clone()));
        }
        let choice = &body["choices"][0];
        let text = if chat {
            &choice["message"]["content"]
        } else {
            &choice["text"]
        };
        return Ok(Seen::Completed(
            text.as_str().ok_or(format!("no text in {body}"))?.into(),
            choice["finish_reason"].as_str().unwrap_or("").into(),
            body["usage"]["prompt_tokens"].as_u64().unwrap_or(0),
        ));
    }
    let mut body = String::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| format!("the stream broke after {body:?}: {e}"))?;
        body.push_str(&String::from_utf8_lossy(&chunk));
    }
    if !body.ends_with("data: [DONE]\n\n") {
        return Err(format!("a stream not ended by [DONE]: {body:?}"));
    }
    let events: Vec<Value> = body
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).map_err(|e| format!("{d}: {e}")))
        .collect::<Result<_, _>>()?;
    if let Some(error) = events.iter().find_map(|e| e.get("error")) {
        return Ok(Seen::Failed(200, error.clone()));
    }
    let mut text = String::new();
    let mut finish = String::new();
    for event in &events {
        let choice = &event["choices"][0];
        let piece = if chat {
            &choice["delta"]["content"]
        } else {
            &choice["text"]
        };
        text.push_str(piece.as_str().unwrap_or(""));
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = f.into();
        }
    }
    Ok(Seen::Completed(text, finish, 0))
}

/// What one request did, as the soak counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    /// Its text is the reference's, and its finish reason (`stop`: true, `length`: false).
    Completed { stop: bool },
    /// A 500 (or a stream's error event) naming the injected failure.
    Failed,
    /// 429: the waiting queue was full.
    Refused,
    /// The invalid request's 4xx, naming its field.
    Invalid,
    /// Its client left before the end (its request may or may not have been admitted).
    Left,
}

/// The soak's tally: outcomes, prompt tokens of completed requests, and what went wrong.
#[derive(Default)]
struct Tally {
    outcomes: BTreeMap<Outcome, usize>,
    prompt_tokens: u64,
    wrong: Vec<String>,
}

struct Soak {
    server: Serving,
    client: reqwest::Client,
    valid: Vec<(&'static str, Value)>,
    /// Each valid request's text and finish reason served alone.
    reference: Vec<(String, String)>,
    invalid: Vec<(&'static str, Vec<u8>, u16, Option<&'static str>)>,
    tally: Mutex<Tally>,
}

impl Soak {
    fn record(&self, outcome: Outcome) {
        *self
            .tally
            .lock()
            .unwrap()
            .outcomes
            .entry(outcome)
            .or_default() += 1;
    }

    fn wrong(&self, what: String) {
        self.tally.lock().unwrap().wrong.push(what);
    }

    fn post(&self, path: &str, body: Vec<u8>) -> reqwest::RequestBuilder {
        self.client
            .post(format!("{}{path}", self.server.base))
            .header("content-type", "application/json")
            .body(body)
    }

    /// Request `i` of the soak, its kind chosen by `rng`.
    async fn request(&self, i: usize, rng: &mut Rng) {
        let roll = rng.below(100);
        if roll < 12 {
            return self.invalid(rng.below(self.invalid.len())).await;
        }
        if roll < 15 {
            return self.cut_body().await;
        }
        let which = rng.below(self.valid.len());
        let (path, mut body) = self.valid[which].clone();
        let stream = rng.below(2) == 0;
        body["stream"] = json!(stream);
        let chat = path.contains("chat");
        let send = self.post(path, serde_json::to_vec(&body).unwrap()).send();
        // A quarter of the clients leave part way: a stream after a few chunks, a whole
        // response after a few milliseconds.
        let leave = rng.below(4) == 0;
        if leave && stream {
            let chunks = rng.below(4);
            if let Ok(Ok(response)) = tokio::time::timeout(Duration::from_secs(120), send).await {
                let mut events = response.bytes_stream();
                for _ in 0..chunks {
                    if events.next().await.is_none() {
                        break;
                    }
                }
            }
            return self.record(Outcome::Left);
        }
        let whole = async { read(send.await.map_err(|e| e.to_string())?, chat).await };
        let wait = match leave {
            true => Duration::from_millis(rng.below(300) as u64),
            false => Duration::from_secs(120),
        };
        let seen = match tokio::time::timeout(wait, whole).await {
            Err(_) if leave => return self.record(Outcome::Left),
            Err(_) => return self.wrong(format!("request {i} ({body}): no answer in 120 s")),
            Ok(Err(e)) => return self.wrong(format!("request {i} ({body}): {e}")),
            // Those whose client would have left later ended first: counted as they ended.
            Ok(Ok(seen)) => seen,
        };
        match seen {
            Seen::Completed(text, finish, prompt) => {
                let (want, want_finish) = &self.reference[which];
                if (&text, &finish) != (want, want_finish) {
                    return self.wrong(format!(
                        "request {i} ({body}): {text:?} ({finish}), alone {want:?} \
                         ({want_finish})"
                    ));
                }
                self.tally.lock().unwrap().prompt_tokens += prompt;
                self.record(Outcome::Completed {
                    stop: finish == "stop",
                });
            }
            Seen::Failed(429, e) if e["code"] == "rate_limit_exceeded" => {
                self.record(Outcome::Refused);
                // As a client honouring Retry-After would, only sooner.
                tokio::time::sleep(Duration::from_millis(20 + rng.below(200) as u64)).await;
            }
            Seen::Failed(status @ (200 | 500), e)
                if e["type"] == "server_error"
                    && (status == 500 || e["code"] == 500)
                    && e["message"].as_str().is_some_and(|m| {
                        m.contains("the device failed") || m.contains("the request's step failed")
                    }) =>
            {
                self.record(Outcome::Failed)
            }
            Seen::Failed(status, e) => {
                self.wrong(format!("request {i} ({body}): status {status}, {e}"))
            }
        }
    }

    async fn invalid(&self, k: usize) {
        let (path, body, status, param) = self.invalid[k].clone();
        let response = match self.post(path, body).send().await {
            Ok(r) => r,
            Err(e) => return self.wrong(format!("invalid request {k}: {e}")),
        };
        let got = response.status().as_u16();
        let e: Value = match response.json::<Value>().await {
            Ok(body) => body["error"].clone(),
            Err(e) => return self.wrong(format!("invalid request {k}: {got}, not JSON: {e}")),
        };
        let named = param.is_none_or(|p| e["param"] == p);
        if got == status && named && e["message"].as_str().is_some_and(|m| !m.is_empty()) {
            self.record(Outcome::Invalid);
        } else {
            self.wrong(format!("invalid request {k}: {got}, {e}"));
        }
    }

    /// A client that sends half a body and closes its connection: nothing to answer.
    async fn cut_body(&self) {
        if let Ok(mut socket) = tokio::net::TcpStream::connect(&self.server.address).await {
            let head = format!(
                "POST /v1/completions HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
                 Content-Length: 200\r\n\r\n{{\"model\": \"{MODEL}\", \"prompt\": \"The",
                self.server.address
            );
            let _ = socket.write_all(head.as_bytes()).await;
        }
        self.record(Outcome::Left);
    }
}

async fn metrics(client: &reqwest::Client, base: &str) -> String {
    let response = client.get(format!("{base}/metrics")).send().await.unwrap();
    response.text().await.unwrap()
}

/// `/metrics` as series (name with labels) -> value.
fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            (series.to_string(), value.parse().unwrap())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thousands_of_requests_faults_and_departures_lose_nothing_and_leak_nothing() {
    if skipped_on_npu("thousands_of_requests_faults_and_departures_lose_nothing_and_leak_nothing") {
        return;
    }
    let requests = env("SOAK_REQUESTS", 2000) as usize;
    let clients = env("SOAK_CLIENTS", 16) as usize;
    let seed = env("SOAK_SEED", 35);
    // The engine's panics (injected, or a faulted device's) reach the clients as 500s, which
    // the soak checks: they are not printed.
    let print = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |panic| {
        if std::thread::current().name() != Some("engine") {
            print(panic);
        }
    }));
    let start = Instant::now();
    let server = Serving::start(soak_app()).await;
    let valid = valid_requests();
    let client = reqwest::Client::new();
    // Each valid request alone, nothing else running: the text the soak must give.
    let mut reference = Vec::new();
    for (path, body) in &valid {
        let response = client
            .post(format!("{}{path}", server.base))
            .json(body)
            .send()
            .await
            .unwrap();
        match read(response, path.contains("chat")).await.unwrap() {
            Seen::Completed(text, finish, _) => reference.push((text, finish)),
            failed => panic!("{body} alone: {failed:?}"),
        }
    }
    let engine = server.app.engine().clone();
    let pages = engine.config().pages;
    let device = device();
    let idle = wait_idle(&server.app, pages).await;
    let baseline = Ascend::memory_stats(&device).bytes_in_use;
    eprintln!(
        "soak: {} references in {:.1} s; {idle:?}; {baseline} bytes in use on the device",
        valid.len(),
        start.elapsed().as_secs_f64()
    );

    let before = parse_metrics(&metrics(&client, &server.base).await);
    let soak = Arc::new(Soak {
        server,
        client,
        valid,
        reference,
        invalid: invalid_requests(),
        tally: Mutex::default(),
    });
    let next = Arc::new(AtomicUsize::new(0));
    let storm = Instant::now();
    let workers: Vec<_> = (0..clients)
        .map(|c| {
            let (soak, next) = (soak.clone(), next.clone());
            tokio::spawn(async move {
                let mut rng = Rng(seed ^ (c as u64).wrapping_mul(0x2545_f491_4f6c_dd1d));
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= requests {
                        break;
                    }
                    soak.request(i, &mut rng).await;
                }
            })
        })
        .collect();
    // Faults at random steps while the clients run (a device fault, or a step's panic), one
    // every 50 to 200 steps.
    let faults = {
        let (engine, next) = (engine.clone(), next.clone());
        tokio::spawn(async move {
            let mut rng = Rng(seed.wrapping_mul(31));
            let mut injected = 0;
            let mut at = engine.stats().steps + 50 + rng.below(150);
            while next.load(Ordering::SeqCst) < requests {
                if engine.stats().steps >= at {
                    engine.inject(if rng.below(4) == 0 {
                        Injected::StepPanic
                    } else {
                        Injected::DeviceFault
                    });
                    injected += 1;
                    at = engine.stats().steps + 50 + rng.below(150);
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            injected
        })
    };
    for worker in workers {
        worker.await.unwrap();
    }
    let injected = faults.await.unwrap();
    let storm_secs = storm.elapsed().as_secs_f64();

    let idle = wait_idle(&soak.server.app, pages).await;
    let in_use = Ascend::memory_stats(&device).bytes_in_use;
    let metrics = metrics(&soak.client, &soak.server.base).await;
    let health = soak
        .client
        .get(format!("{}/health", soak.server.base))
        .send()
        .await
        .unwrap()
        .status();
    let tally = std::mem::take(&mut *soak.tally.lock().unwrap());
    let m = parse_metrics(&metrics);
    // Gauges as they are, counters since the soak began (the references are not its own).
    let get = |name: &str, labels: &str| -> f64 {
        let series = format!("{name}{{model_name=\"{MODEL}\"{labels}}}");
        let now = *m.get(&series).unwrap_or_else(|| panic!("no {series}"));
        match name.ends_with("_total") || name.ends_with("_count") {
            true => now - before[&series],
            false => now,
        }
    };
    let reason = |r: &str| {
        get(
            "vllm:request_success_total",
            &format!(",finished_reason=\"{r}\""),
        )
    };
    let (stop, length, abort, error) = (
        reason("stop"),
        reason("length"),
        reason("abort"),
        reason("error"),
    );
    let admitted = get("burn_ascend:requests_admitted_total", "");
    let count = |o: Outcome| tally.outcomes.get(&o).copied().unwrap_or(0) as f64;
    let (stopped, at_length, failed, left) = (
        count(Outcome::Completed { stop: true }),
        count(Outcome::Completed { stop: false }),
        count(Outcome::Failed),
        count(Outcome::Left),
    );
    let completed = stopped + at_length;
    eprintln!(
        "soak: {requests} requests from {clients} clients in {storm_secs:.1} s (seed {seed}): \
         {:?}; {injected} faults injected; {} preemptions; admitted {admitted}: stop {stop}, \
         length {length}, abort {abort}, error {error}; {} steps; {in_use} bytes in use \
         (baseline {baseline}); {idle:?}",
        tally.outcomes,
        get("vllm:num_preemptions_total", ""),
        engine.stats().steps,
    );

    // Every request answered as it should be.
    assert!(
        tally.wrong.is_empty(),
        "{} of {requests} requests went wrong:\n{}",
        tally.wrong.len(),
        tally.wrong.join("\n")
    );
    let total: usize = tally.outcomes.values().sum();
    assert_eq!(total, requests);
    assert!(
        stopped > 0.0 && at_length > 0.0 && failed > 0.0,
        "{:?}",
        tally.outcomes
    );
    assert!(injected > 0);
    assert_eq!(health, 200, "the server recovered from every fault");
    assert_eq!(engine.failure(), None);
    // Nothing leaked: no request in flight, every page free, the device's memory in use as
    // before (weights, cache, captured graphs).
    assert_eq!(soak.server.app.in_flight(), 0);
    assert_eq!(in_use, baseline, "bytes in use on the device");
    // The counters add up. Every admitted request ended once, in one way.
    assert_eq!(get("vllm:num_requests_running", ""), 0.0);
    assert_eq!(get("vllm:num_requests_waiting", ""), 0.0);
    assert_eq!(get("vllm:gpu_cache_usage_perc", ""), 0.0);
    assert_eq!(admitted, stop + length + abort + error, "{metrics}");
    // Each as its client was told; the requests whose clients left are the rest (their
    // client may have left after the end, or before the request was admitted).
    let within = |metric: f64, told: f64| metric >= told && metric <= told + left;
    assert!(within(stop, stopped), "stop {stop}, {stopped} told");
    assert!(
        within(length, at_length),
        "length {length}, {at_length} told"
    );
    assert!(within(error, failed), "error {error}, {failed} told");
    assert!(abort <= left);
    assert!(within(admitted, completed + failed));
    // Each generated token was a request's first or a later one.
    assert_eq!(
        get("vllm:generation_tokens_total", ""),
        get("vllm:time_to_first_token_seconds_count", "")
            + get("vllm:time_per_output_token_seconds_count", "")
    );
    assert!(get("vllm:prompt_tokens_total", "") >= tally.prompt_tokens as f64);
    // The template for the long run's line in the README.
    eprintln!(
        "soak result: {requests} requests, {clients} clients, {injected} faults: {} completed \
         as served alone, {} failed with the fault's 500, {} refused (429), {} invalid (4xx), \
         {} left; 0 lost, 0 wrong; pages and device memory back to baseline; admitted \
         {admitted} = {stop} stop + {length} length + {abort} abort + {error} error; {:.0} s",
        completed,
        failed,
        count(Outcome::Refused),
        count(Outcome::Invalid),
        left,
        storm_secs
    );
}

/// Waits until no request is in flight and the engine holds none and every page is free; its
/// stats then.
async fn wait_idle(app: &Arc<App>, pages: usize) -> burn_ascend_openai::engine::StatsSnapshot {
    let start = Instant::now();
    loop {
        let s = app.engine().stats();
        if app.in_flight() == 0 && s.running == 0 && s.waiting == 0 && s.free_pages == pages {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "not idle after 120 s: {s:?}, {} in flight",
            app.in_flight()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
