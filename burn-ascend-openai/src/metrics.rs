//! The server's Prometheus metrics, named as vLLM names them so that its dashboards and alerts work
//! unchanged, rendered in Prometheus' text exposition format (0.0.4) as vLLM's Python client does.
//!
//! | metric | type | what |
//! | --- | --- | --- |
//! | `vllm:num_requests_running` | gauge | requests in the engine's running batch |
//! | `vllm:num_requests_waiting` | gauge | requests admitted but waiting for a slot |
//! | `vllm:gpu_cache_usage_perc` | gauge | fraction (0..=1) of the **NPU**'s KV-cache pages in use (vLLM's name, kept for its dashboards) |
//! | `vllm:num_preemptions_total` | counter | requests preempted (their pages freed, recomputed later) |
//! | `vllm:prompt_tokens_total` | counter | prompt tokens of finished requests |
//! | `vllm:generation_tokens_total` | counter | generated tokens of finished requests |
//! | `vllm:request_success_total` | counter | finished requests, by `finished_reason` (`stop`, `length`; `abort`: cancelled, its client gone; `error`: failed, as vLLM counts a request-level error) |
//! | `burn_ascend:requests_admitted_total` | counter | requests the engine admitted (not refused): once none runs or waits, the sum of `vllm:request_success_total` (this server's own; vLLM has none) |
//! | `vllm:time_to_first_token_seconds` | histogram | arrival to first token (vLLM's buckets) |
//! | `vllm:time_per_output_token_seconds` | histogram | interval between successive tokens of a request (vLLM's buckets) |
//!
//! Every series carries the `model_name` label. The engine thread writes (the `on_*` methods), the
//! HTTP side reads ([`Metrics::render`]); one mutex keeps each rendering a consistent snapshot
//! (a histogram's buckets, sum and count agree).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// vLLM's buckets of `vllm:time_to_first_token_seconds`.
pub const TTFT_BUCKETS: [f64; 22] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];

/// vLLM's buckets of `vllm:time_per_output_token_seconds`.
pub const TPOT_BUCKETS: [f64; 19] = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];

/// Why a request finished, as vLLM's `finished_reason` label spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FinishReason {
    /// An end-of-sequence token or a stop string/token.
    Stop,
    /// `max_tokens` or the model's context length.
    Length,
    /// Cancelled: its client went away.
    Abort,
    /// Failed: its step failed (a device fault, a panic), or the engine could no longer serve.
    Error,
}

impl FinishReason {
    /// All reasons: each has a series from the start, at 0, as in vLLM.
    pub const ALL: [FinishReason; 4] = [Self::Stop, Self::Length, Self::Abort, Self::Error];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
            Self::Abort => "abort",
            Self::Error => "error",
        }
    }
}

#[derive(Debug, Clone)]
struct Histogram {
    bounds: &'static [f64],
    /// Observations per bucket (not cumulative); the last one is `+Inf`'s.
    counts: Vec<u64>,
    sum: f64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
        }
    }

    fn observe(&mut self, secs: f64) {
        // Prometheus buckets are upper-inclusive (le).
        let i = self.bounds.partition_point(|&b| b < secs);
        self.counts[i] += 1;
        self.sum += secs;
    }
}

#[derive(Debug, Clone)]
struct State {
    running: u64,
    waiting: u64,
    cache_usage: f64,
    preemptions: u64,
    admitted: u64,
    prompt_tokens: u64,
    generation_tokens: u64,
    success: BTreeMap<FinishReason, u64>,
    ttft: Histogram,
    tpot: Histogram,
}

/// The server's metrics registry; share it as `Arc<Metrics>` between the engine and HTTP threads.
#[derive(Debug)]
pub struct Metrics {
    model_name: String,
    state: Mutex<State>,
}

impl Metrics {
    /// An empty registry whose series are labelled `model_name` (the served model's name, as in
    /// `/v1/models`).
    pub fn new(model_name: impl Into<String>) -> Self {
        Self {
            model_name: model_name.into(),
            state: Mutex::new(State {
                running: 0,
                waiting: 0,
                cache_usage: 0.0,
                preemptions: 0,
                admitted: 0,
                prompt_tokens: 0,
                generation_tokens: 0,
                success: FinishReason::ALL.iter().map(|&r| (r, 0)).collect(),
                ttft: Histogram::new(&TTFT_BUCKETS),
                tpot: Histogram::new(&TPOT_BUCKETS),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every update leaves the state whole, so a panic elsewhere while holding the lock cannot
        // have left it half-written: keep serving metrics.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// After each engine step: requests running and waiting, and the fraction (0..=1) of the
    /// NPU's KV-cache pages in use.
    pub fn on_step(&self, running: usize, waiting: usize, cache_usage: f64) {
        let mut s = self.state();
        s.running = running as u64;
        s.waiting = waiting as u64;
        s.cache_usage = cache_usage;
    }

    /// A request's first token, `elapsed` after it arrived.
    pub fn on_first_token(&self, elapsed: Duration) {
        self.state().ttft.observe(elapsed.as_secs_f64());
    }

    /// A request's next token (after its first), `elapsed` after its previous one.
    pub fn on_token(&self, elapsed: Duration) {
        self.state().tpot.observe(elapsed.as_secs_f64());
    }

    /// The engine admitted a request (it will finish with [`Metrics::on_finish`]).
    pub fn on_admitted(&self) {
        self.state().admitted += 1;
    }

    /// A request finished, as its client was told (aborted ones included).
    pub fn on_finish(&self, reason: FinishReason) {
        *self.state().success.entry(reason).or_insert(0) += 1;
    }

    /// A request left the engine, having had `prompt_tokens` and generated `generated` tokens
    /// (all were computed, those after a stop string and an abort too).
    pub fn on_tokens(&self, prompt_tokens: usize, generated: usize) {
        let mut s = self.state();
        s.prompt_tokens += prompt_tokens as u64;
        s.generation_tokens += generated as u64;
    }

    /// `n` requests were preempted in a step.
    pub fn on_preemptions(&self, n: usize) {
        self.state().preemptions += n as u64;
    }

    /// The metrics in Prometheus' text exposition format (content type
    /// [`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        let s = self.state().clone();
        let model = format!("model_name=\"{}\"", escape_label(&self.model_name));
        let mut out = String::new();
        let mut scalar = |name: &str, kind: &str, help: &str, value: f64| {
            header(&mut out, name, kind, help);
            writeln!(out, "{name}{{{model}}} {}", number(value)).expect("String writes");
        };
        scalar(
            "vllm:num_requests_running",
            "gauge",
            "Number of requests in model execution batches.",
            s.running as f64,
        );
        scalar(
            "vllm:num_requests_waiting",
            "gauge",
            "Number of requests waiting to be processed.",
            s.waiting as f64,
        );
        scalar(
            "vllm:gpu_cache_usage_perc",
            "gauge",
            "NPU KV-cache usage. 1 means 100 percent usage.",
            s.cache_usage,
        );
        scalar(
            "vllm:num_preemptions_total",
            "counter",
            "Cumulative number of preemption from the engine.",
            s.preemptions as f64,
        );
        scalar(
            "vllm:prompt_tokens_total",
            "counter",
            "Number of prefill tokens processed.",
            s.prompt_tokens as f64,
        );
        scalar(
            "vllm:generation_tokens_total",
            "counter",
            "Number of generation tokens processed.",
            s.generation_tokens as f64,
        );
        scalar(
            "burn_ascend:requests_admitted_total",
            "counter",
            "Requests the engine admitted; once none runs or waits, the sum of vllm:request_success_total.",
            s.admitted as f64,
        );
        let name = "vllm:request_success_total";
        header(
            &mut out,
            name,
            "counter",
            "Count of successfully processed requests.",
        );
        for (reason, n) in &s.success {
            writeln!(
                out,
                "{name}{{{model},finished_reason=\"{}\"}} {}",
                reason.as_str(),
                number(*n as f64)
            )
            .expect("String writes");
        }
        histogram(
            &mut out,
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            &model,
            &s.ttft,
        );
        histogram(
            &mut out,
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            &model,
            &s.tpot,
        );
        out
    }
}

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    writeln!(out, "# HELP {name} {help}").expect("String writes");
    writeln!(out, "# TYPE {name} {kind}").expect("String writes");
}

fn histogram(out: &mut String, name: &str, help: &str, model: &str, h: &Histogram) {
    header(out, name, "histogram", help);
    let mut cumulative = 0;
    let bounds = h.bounds.iter().map(|&b| number(b)).chain(["+Inf".into()]);
    for (le, n) in bounds.zip(&h.counts) {
        cumulative += n;
        writeln!(
            out,
            "{name}_bucket{{{model},le=\"{le}\"}} {}",
            number(cumulative as f64)
        )
        .expect("String writes");
    }
    writeln!(out, "{name}_count{{{model}}} {}", number(cumulative as f64)).expect("String writes");
    writeln!(out, "{name}_sum{{{model}}} {}", number(h.sum)).expect("String writes");
}

/// A sample value or bucket bound as Python's client prints it (`1.0`, `0.001`, `+Inf`).
fn number(v: f64) -> String {
    if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v:?}")
    }
}

/// A label value escaped as the exposition format requires.
fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
