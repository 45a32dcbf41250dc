//! Shared by the benches: criterion settings, wall-time capture (so ratios are taken against a
//! reference measured in the same run), the markdown table writer and the Atlas A2 model.
#![allow(dead_code)]

#[path = "../../tests/common/host_values.rs"]
pub mod host_values;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use burn_ascend::emulator::kernel_runner::LaunchStats;
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

/// The Atlas A2 (910B, 48-AIV parts) figures of `/work/shared/ascend/hardware-atlas-a2.md`
/// that the device-time model uses. A model, not a measurement: the sources mark the
/// bandwidth and vector-rate figures UNCERTAIN.
pub mod a2 {
    use super::LaunchStats;
    use burn_ascend_kernels::tiling::DeviceProps;

    /// The figures the tiling's per-shape choices use too.
    const A2: DeviceProps = DeviceProps::ATLAS_A2;
    /// HBM bandwidth per die, bytes/s: the low end of the documents' 1.6-1.8 TB/s estimate.
    pub const HBM_BYTES_PER_S: f64 = A2.hbm_bytes_per_s as f64;
    /// Vector cores (AIV) of a 910B1/B2 die.
    pub const VECTOR_CORES: u32 = A2.vector_cores;
    /// The AI Core clock, Hz.
    pub const CLOCK_HZ: f64 = A2.clock_hz as f64;
    /// One AIV's GM rate: the platform ini's `ddr_rate = 32` bytes/cycle at 1.8 GHz.
    pub const CORE_BYTES_PER_S: f64 = (A2.core_gm_bytes_per_cycle * A2.clock_hz) as f64;
    /// Vector repeats (256 bytes each) one AIV issues per cycle: the docs' "256 B per cycle".
    /// UNCERTAIN: a Huawei example's timing implies about two; one is the stricter choice.
    pub const VECTOR_REPEATS_PER_CYCLE: f64 = 1.0;
    /// Fixed cost of one kernel launch, seconds. ASSUMED: the fact sheets give no figure.
    pub const LAUNCH_LATENCY_S: f64 = 3e-6;
    /// Scalar cycles charged per value a device-side check tests: a compare and a branch.
    /// ASSUMED (no scalar timing in the fact sheets); used only for an upper bound.
    pub const SCALAR_CYCLES_PER_CHECK: f64 = 2.0;

    /// Which term of the roofline bounds a launch.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum Bound {
        /// All bytes at peak HBM bandwidth.
        #[default]
        Hbm,
        /// The busiest core's bytes at one core's GM rate.
        CoreGm,
        /// The busiest core's vector repeats.
        Vector,
    }

    impl Bound {
        pub fn name(self) -> &'static str {
            match self {
                Bound::Hbm => "HBM bandwidth",
                Bound::CoreGm => "one core's GM rate",
                Bound::Vector => "vector unit",
            }
        }
    }

    /// The modelled device time of one launch, its terms and its bandwidth limit.
    #[derive(Debug, Clone, Copy, Default)]
    pub struct Model {
        /// Seconds: the largest term plus the launch latency.
        pub modelled: f64,
        /// Seconds: the largest term (the roofline, without latency).
        pub roofline: f64,
        /// Seconds: all bytes at peak HBM bandwidth (also the HBM term).
        pub limit: f64,
        /// Seconds: the busiest core's bytes at its own GM rate.
        pub core_gm: f64,
        /// Seconds: the busiest core's vector repeats at one per cycle.
        pub vector: f64,
        /// The largest term.
        pub bound: Bound,
    }

    /// The busiest core's share of a per-block counter: blocks are dealt to the cores
    /// round-robin (blocks beyond the core count run in waves on the same cores).
    fn busiest(per_block: &[u64]) -> u64 {
        let mut per_core = vec![0u64; VECTOR_CORES as usize];
        for (i, b) in per_block.iter().enumerate() {
            per_core[i % VECTOR_CORES as usize] += b;
        }
        per_core.into_iter().max().unwrap_or(0)
    }

    /// Models one launch from its emulation counters: max(bytes / HBM bandwidth, busiest core's
    /// bytes / core GM rate, busiest core's vector cycles) + launch latency. The cube unit has no
    /// term: the Ascend C emulation has no cube API, so no kernel issues cube work.
    pub fn model(s: &LaunchStats) -> Model {
        let total = (s.gm_bytes_read + s.gm_bytes_written) as f64;
        let limit = total / HBM_BYTES_PER_S;
        let core_gm = busiest(&s.per_block_gm_bytes) as f64 / CORE_BYTES_PER_S;
        let vector =
            busiest(&s.per_block_vector_repeats) as f64 / VECTOR_REPEATS_PER_CYCLE / CLOCK_HZ;
        let (roofline, bound) = [
            (limit, Bound::Hbm),
            (core_gm, Bound::CoreGm),
            (vector, Bound::Vector),
        ]
        .into_iter()
        .fold((0.0, Bound::Hbm), |a, b| if b.0 > a.0 { b } else { a });
        Model {
            modelled: roofline + LAUNCH_LATENCY_S,
            roofline,
            limit,
            core_gm,
            vector,
            bound,
        }
    }

    /// Per-core balance: busiest block's bytes over the mean block's (1.00 is perfect).
    pub fn balance(s: &LaunchStats) -> f64 {
        let b = &s.per_block_gm_bytes;
        let max = b.iter().copied().max().unwrap_or(0) as f64;
        let mean = b.iter().sum::<u64>() as f64 / b.len().max(1) as f64;
        if mean > 0.0 {
            max / mean
        } else {
            1.0
        }
    }
}
