//! Shared by the benches: criterion settings, wall-time capture (so ratios are taken against a
//! reference measured in the same run) and the markdown table writer. The Atlas A2 device-time
//! model is `burn_ascend_perf::a2` (the example prints modelled times too).
#![allow(dead_code)]

pub mod example;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{Bencher, Criterion};

/// Short runs: the whole set must finish in a few minutes on a shared 2-core machine.
pub fn criterion() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .without_plots()
        .configure_from_args()
}

/// Total time and iterations per benchmark id, as criterion ran them.
static TIMES: Mutex<Option<HashMap<String, (Duration, u64)>>> = Mutex::new(None);

/// Times `iters` calls of `f`, then `sync` (the device queue drained), and records the time
/// under `key`: criterion prints its statistics, the tables read the mean back via [`mean`].
pub fn timed(b: &mut Bencher, key: &str, mut f: impl FnMut(), sync: impl Fn()) {
    b.iter_custom(|iters| {
        let start = Instant::now();
        for _ in 0..iters {
            f();
        }
        sync();
        let took = start.elapsed();
        record(key, took, iters);
        took
    });
}

/// Adds `iters` calls taking `took` in all to `key` (for benches timing with `iter_custom`).
pub fn record(key: &str, took: Duration, iters: u64) {
    let mut times = TIMES.lock().unwrap();
    let e = times
        .get_or_insert_with(HashMap::new)
        .entry(key.to_string())
        .or_default();
    e.0 += took;
    e.1 += iters;
}

/// Mean seconds per call recorded under `key` in this run (None if criterion's filter skipped it).
pub fn mean(key: &str) -> Option<f64> {
    let times = TIMES.lock().unwrap();
    let (d, n) = times.as_ref()?.get(key)?;
    (*n > 0).then(|| d.as_secs_f64() / *n as f64)
}

/// A results table, printed to stdout and written as markdown.
pub struct Table {
    title: String,
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(title: &str, headers: &[&str]) -> Self {
        Self {
            title: title.to_string(),
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn markdown(&self) -> String {
        let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        let mut s = format!("### {}\n\n", self.title);
        s += &line(&self.headers);
        s += &line(&vec!["---".to_string(); self.headers.len()]);
        for r in &self.rows {
            s += &line(r);
        }
        s
    }
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"))
}

/// Prints the tables and notes, stores them as `target/bench-summary/<bench>.md` and rebuilds
/// `target/bench-summary.md` from every bench's latest section.
pub fn publish(bench: &str, tables: &[Table], notes: &[&str]) {
    let mut section = format!("## {bench}\n\n");
    for t in tables.iter().filter(|t| !t.is_empty()) {
        section += &t.markdown();
        section += "\n";
    }
    for n in notes {
        section += &format!("- {n}\n");
    }
    println!("\n{section}");
    let target = target_dir();
    let dir = target.join("bench-summary");
    let written = std::fs::create_dir_all(&dir)
        .and_then(|_| std::fs::write(dir.join(format!("{bench}.md")), &section))
        .and_then(|_| {
            let mut parts: Vec<PathBuf> = std::fs::read_dir(&dir)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "md"))
                .collect();
            parts.sort();
            let mut all = String::from(
                "# burn-ascend benchmark summary\n\nLatest run of each bench (`cargo bench`); \
                 see benches/README.md for what each figure means.\n\n",
            );
            for p in parts {
                all += &std::fs::read_to_string(p)?;
                all += "\n";
            }
            std::fs::write(target.join("bench-summary.md"), all)
        });
    match written {
        Ok(()) => println!("summary: {}", target.join("bench-summary.md").display()),
        Err(e) => eprintln!("could not write the summary under {}: {e}", dir.display()),
    }
}

/// Microseconds, or a dash when the bench was filtered out.
pub fn us(secs: Option<f64>) -> String {
    secs.map_or("-".into(), |s| format!("{:.1}", s * 1e6))
}

/// `a / b`, or a dash.
pub fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "-".into(),
    }
}
