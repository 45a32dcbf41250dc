//! The server's metrics render in Prometheus' text exposition format with vLLM's names, and their
//! values follow what the engine reported.
//!
//! The reference is a small parser of the exposition format (0.0.4) written here from its
//! specification: every line a `# HELP`, a `# TYPE` or a sample of a declared family, names and
//! label names from the allowed alphabets, label values properly escaped, values floats.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use burn_ascend_openai::metrics::{
    FinishReason, Metrics, CONTENT_TYPE, TPOT_BUCKETS, TTFT_BUCKETS,
};

type Labels = BTreeMap<String, String>;

/// The samples of a rendering, keyed by name and labels, and each family's type.
#[derive(Debug, Default)]
struct Exposition {
    types: BTreeMap<String, String>,
    samples: BTreeMap<(String, Labels), f64>,
}

impl Exposition {
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let labels: Labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        *self
            .samples
            .get(&(name.to_string(), labels.clone()))
            .unwrap_or_else(|| panic!("no sample {name}{labels:?}"))
    }
}

fn is_name(s: &str, colons: bool) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || (colons && c == ':'))
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || (colons && c == ':'))
}

fn parse_value(s: &str) -> f64 {
    match s {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        _ => s.parse().unwrap_or_else(|_| panic!("bad value {s:?}")),
    }
}

/// `{a="x",b="y"}` at the start of `s`: the labels and the rest of the line.
fn parse_labels(s: &str) -> (Labels, &str) {
    let mut labels = Labels::new();
    let mut rest = s.strip_prefix('{').unwrap();
    loop {
        if let Some(r) = rest.strip_prefix('}') {
            return (labels, r);
        }
        let eq = rest.find('=').expect("label without =");
        let name = &rest[..eq];
        assert!(is_name(name, false), "bad label name {name:?}");
        let mut chars = rest[eq + 1..]
            .strip_prefix('"')
            .expect("unquoted label")
            .chars();
        let mut value = String::new();
        loop {
            match chars.next().expect("unterminated label value") {
                '"' => break,
                '\\' => match chars.next().expect("dangling escape") {
                    '\\' => value.push('\\'),
                    '"' => value.push('"'),
                    'n' => value.push('\n'),
                    c => panic!("bad escape \\{c}"),
                },
                '\n' => panic!("raw newline in a label value"),
                c => value.push(c),
            }
        }
        assert!(
            labels.insert(name.to_string(), value).is_none(),
            "repeated label {name}"
        );
        rest = chars.as_str();
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
}

fn parse(text: &str) -> Exposition {
    assert!(text.ends_with('\n'), "the exposition ends with a newline");
    let mut exp = Exposition::default();
    let mut helped = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, _help) = rest.split_once(' ').expect("HELP without text");
            assert!(is_name(name, true), "bad name {name:?}");
            assert!(
                helped.insert(name.to_string(), ()).is_none(),
                "second HELP for {name}"
            );
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE without type");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "bad type {kind}"
            );
            assert!(
                !exp.samples
                    .keys()
                    .any(|(n, _)| family(n, &exp.types) == Some(name)),
                "TYPE of {name} after its samples"
            );
            assert!(exp
                .types
                .insert(name.to_string(), kind.to_string())
                .is_none());
        } else {
            assert!(
                !line.starts_with('#') && !line.is_empty(),
                "stray line {line:?}"
            );
            let split = line.find(['{', ' ']).expect("sample without value");
            let name = &line[..split];
            assert!(is_name(name, true), "bad metric name {name:?}");
            let (labels, rest) = if line[split..].starts_with('{') {
                parse_labels(&line[split..])
            } else {
                (Labels::new(), &line[split..])
            };
            let value = parse_value(rest.strip_prefix(' ').expect("no space before the value"));
            let fam = family(name, &exp.types).unwrap_or_else(|| panic!("{name} has no TYPE"));
            if exp.types[fam] == "histogram" && name.ends_with("_bucket") {
                assert!(labels.contains_key("le"), "bucket without le: {line}");
            }
            assert!(
                exp.samples
                    .insert((name.to_string(), labels), value)
                    .is_none(),
                "repeated series: {line}"
            );
        }
    }
    exp
}

/// The declared family a sample name belongs to (a histogram's `_bucket`/`_sum`/`_count`).
fn family<'a>(name: &'a str, types: &'a BTreeMap<String, String>) -> Option<&'a str> {
    if types.contains_key(name) {
        return types.get_key_value(name).map(|(k, _)| k.as_str());
    }
    ["_bucket", "_sum", "_count"].iter().find_map(|suffix| {
        let base = name.strip_suffix(suffix)?;
        (types.get(base)? == "histogram").then_some(base)
    })
}

/// A histogram's cumulative bucket counts in bound order, its count and its sum.
fn histogram(exp: &Exposition, name: &str, model: &str) -> (Vec<(f64, f64)>, f64, f64) {
    let mut buckets: Vec<(f64, f64)> = exp
        .samples
        .iter()
        .filter(|((n, l), _)| n == &format!("{name}_bucket") && l["model_name"] == model)
        .map(|((_, l), v)| (parse_value(&l["le"]), *v))
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let labels = [("model_name", model)];
    (
        buckets,
        exp.get(&format!("{name}_count"), &labels),
        exp.get(&format!("{name}_sum"), &labels),
    )
}

const MODEL: &str = "qwen3-moe";
const COUNTERS: [&str; 4] = [
    "vllm:num_preemptions_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "burn_ascend:requests_admitted_total",
];

#[test]
fn a_fresh_registry_has_every_series_at_zero() {
    assert_eq!(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
    let exp = parse(&Metrics::new(MODEL).render());
    let m = [("model_name", MODEL)];
    for gauge in [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:gpu_cache_usage_perc",
    ] {
        assert_eq!(exp.types[gauge], "gauge");
        assert_eq!(exp.get(gauge, &m), 0.0);
    }
    for counter in COUNTERS.into_iter().chain(["vllm:request_success_total"]) {
        assert_eq!(exp.types[counter], "counter");
    }
    for counter in COUNTERS {
        assert_eq!(exp.get(counter, &m), 0.0);
    }
    for reason in ["stop", "length", "abort", "error"] {
        let labels = [("model_name", MODEL), ("finished_reason", reason)];
        assert_eq!(exp.get("vllm:request_success_total", &labels), 0.0);
    }
    for (name, bounds) in [
        ("vllm:time_to_first_token_seconds", &TTFT_BUCKETS[..]),
        ("vllm:time_per_output_token_seconds", &TPOT_BUCKETS[..]),
    ] {
        assert_eq!(exp.types[name], "histogram");
        let (buckets, count, sum) = histogram(&exp, name, MODEL);
        let les: Vec<f64> = buckets.iter().map(|b| b.0).collect();
        let expected: Vec<f64> = bounds.iter().copied().chain([f64::INFINITY]).collect();
        assert_eq!(les, expected);
        assert!(buckets.iter().all(|b| b.1 == 0.0) && count == 0.0 && sum == 0.0);
    }
}

#[test]
fn values_follow_the_engine_reports() {
    let metrics = Metrics::new(MODEL);
    metrics.on_step(3, 5, 0.25);
    // 0.001 s lands in the le="0.001" bucket: Prometheus bounds are inclusive.
    for ms in [1, 30, 30, 700, 3_000_000] {
        metrics.on_first_token(Duration::from_millis(ms));
    }
    for ms in [20, 20, 20, 120] {
        metrics.on_token(Duration::from_millis(ms));
    }
    for (reason, prompt, generated) in [
        (FinishReason::Stop, 10, 4),
        (FinishReason::Length, 7, 16),
        (FinishReason::Stop, 3, 1),
        (FinishReason::Abort, 2, 0),
        (FinishReason::Error, 5, 3),
    ] {
        metrics.on_finish(reason);
        metrics.on_tokens(prompt, generated);
    }
    for _ in 0..6 {
        metrics.on_admitted();
    }
    metrics.on_preemptions(2);
    metrics.on_preemptions(1);
    let exp = parse(&metrics.render());
    let m = [("model_name", MODEL)];
    assert_eq!(exp.get("vllm:num_requests_running", &m), 3.0);
    assert_eq!(exp.get("vllm:num_requests_waiting", &m), 5.0);
    assert_eq!(exp.get("vllm:gpu_cache_usage_perc", &m), 0.25);
    assert_eq!(exp.get("vllm:num_preemptions_total", &m), 3.0);
    assert_eq!(exp.get("vllm:prompt_tokens_total", &m), 27.0);
    assert_eq!(exp.get("vllm:generation_tokens_total", &m), 24.0);
    // One admitted request still runs.
    assert_eq!(exp.get("burn_ascend:requests_admitted_total", &m), 6.0);
    for (reason, n) in [
        ("stop", 2.0),
        ("length", 1.0),
        ("abort", 1.0),
        ("error", 1.0),
    ] {
        let labels = [("model_name", MODEL), ("finished_reason", reason)];
        assert_eq!(
            exp.get("vllm:request_success_total", &labels),
            n,
            "{reason}"
        );
    }

    // Cumulative counts against the observations counted by hand.
    let (ttft, count, sum) = histogram(&exp, "vllm:time_to_first_token_seconds", MODEL);
    let at = |b: &[(f64, f64)], le: f64| b.iter().find(|x| x.0 == le).unwrap().1;
    assert_eq!(at(&ttft, 0.001), 1.0);
    assert_eq!(at(&ttft, 0.02), 1.0);
    assert_eq!(at(&ttft, 0.04), 3.0);
    assert_eq!(at(&ttft, 0.75), 4.0);
    assert_eq!(at(&ttft, 2560.0), 4.0);
    assert_eq!(at(&ttft, f64::INFINITY), 5.0);
    assert_eq!(count, 5.0);
    assert!((sum - 3000.761).abs() < 1e-9, "{sum}");
    let (tpot, count, sum) = histogram(&exp, "vllm:time_per_output_token_seconds", MODEL);
    assert_eq!(at(&tpot, 0.01), 0.0);
    assert_eq!(at(&tpot, 0.025), 3.0);
    assert_eq!(at(&tpot, 0.1), 3.0);
    assert_eq!(at(&tpot, 0.15), 4.0);
    assert_eq!((count, at(&tpot, f64::INFINITY)), (4.0, 4.0));
    assert!((sum - 0.18).abs() < 1e-12, "{sum}");

    // Gauges are the last report, not a sum.
    metrics.on_step(0, 1, 0.0);
    let exp = parse(&metrics.render());
    assert_eq!(exp.get("vllm:num_requests_running", &m), 0.0);
    assert_eq!(exp.get("vllm:num_requests_waiting", &m), 1.0);
}

/// Every counter, bucket, count and sum of `after` is at least its value in `before`, and every
/// histogram's buckets are cumulative with `+Inf` equal to its count.
fn check_monotone_and_cumulative(before: &Exposition, after: &Exposition) {
    for ((name, labels), v) in &after.samples {
        let fam = family(name, &after.types).unwrap();
        if after.types[fam] != "gauge" {
            let old = before
                .samples
                .get(&(name.clone(), labels.clone()))
                .copied()
                .unwrap_or(0.0);
            assert!(*v >= old, "{name}{labels:?} went from {old} to {v}");
        }
    }
    for name in [
        "vllm:time_to_first_token_seconds",
        "vllm:time_per_output_token_seconds",
    ] {
        let (buckets, count, _) = histogram(after, name, MODEL);
        assert!(
            buckets.windows(2).all(|w| w[0].1 <= w[1].1),
            "{name} not cumulative"
        );
        assert_eq!(
            buckets.last().unwrap().1,
            count,
            "{name}: +Inf bucket != count"
        );
    }
}

#[test]
fn counters_are_monotone_and_histograms_cumulative_under_concurrent_reads() {
    let metrics = Arc::new(Metrics::new(MODEL));
    const STEPS: u64 = 2000;
    let writer = {
        let metrics = Arc::clone(&metrics);
        std::thread::spawn(move || {
            // A fixed pseudo-random sequence (an LCG): durations over the whole bucket range.
            let mut x: u64 = 12345;
            let mut next = || {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                x >> 33
            };
            for i in 0..STEPS {
                metrics.on_step((i % 7) as usize, (i % 3) as usize, (i % 11) as f64 / 10.0);
                metrics.on_first_token(Duration::from_micros(next() % 5_000_000));
                metrics.on_token(Duration::from_micros(next() % 200_000));
                metrics.on_finish(FinishReason::ALL[(i % 4) as usize]);
                metrics.on_tokens(5, 2);
                metrics.on_preemptions((i % 2) as usize);
            }
        })
    };
    let mut before = parse(&metrics.render());
    while !writer.is_finished() {
        let after = parse(&metrics.render());
        check_monotone_and_cumulative(&before, &after);
        before = after;
    }
    writer.join().unwrap();
    let last = parse(&metrics.render());
    check_monotone_and_cumulative(&before, &last);
    let m = [("model_name", MODEL)];
    assert_eq!(last.get("vllm:prompt_tokens_total", &m), (5 * STEPS) as f64);
    assert_eq!(
        last.get("vllm:generation_tokens_total", &m),
        (2 * STEPS) as f64
    );
    assert_eq!(
        last.get("vllm:num_preemptions_total", &m),
        (STEPS / 2) as f64
    );
    assert_eq!(
        last.get("vllm:time_to_first_token_seconds_count", &m),
        STEPS as f64
    );
    let finished: f64 = ["stop", "length", "abort", "error"]
        .iter()
        .map(|r| {
            last.get(
                "vllm:request_success_total",
                &[("model_name", MODEL), ("finished_reason", r)],
            )
        })
        .sum();
    assert_eq!(finished, STEPS as f64);
}

#[test]
fn model_names_are_escaped() {
    let name = "my \"model\"\\v2\nnext";
    let exp = parse(&Metrics::new(name).render());
    assert_eq!(
        exp.get("vllm:num_requests_running", &[("model_name", name)]),
        0.0
    );
}
