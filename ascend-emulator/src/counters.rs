//! Work counters of the emulated device: launches and the global-memory bytes they move, for
//! aclnn operators and Ascend C kernels alike, so a benchmark can compare how much work two
//! ways of computing the same thing put on the device.
//!
//! Kernels are measured (the Ascend C emulation counts every byte its copies move). aclnn
//! operators are modelled: each distinct tensor argument is counted once at its view's size,
//! the least any implementation must move (reading every input and writing every output once);
//! a grouped matmul's weights count only for the groups its group list gives rows, when its
//! kernel runs (an expert no token routes to is not read).
//! The model flatters the aclnn side, so savings measured against it are not overstated.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::meta::TensorDesc;

static ACLNN_LAUNCHES: AtomicU64 = AtomicU64::new(0);
static ACLNN_BYTES: AtomicU64 = AtomicU64::new(0);
static SUBMISSIONS: AtomicU64 = AtomicU64::new(0);
static CUBE_CYCLES: AtomicU64 = AtomicU64::new(0);
static UPLOADS: AtomicU64 = AtomicU64::new(0);
static UPLOADED_BYTES: AtomicU64 = AtomicU64::new(0);
static DOWNLOADS: AtomicU64 = AtomicU64::new(0);
static DOWNLOADED_BYTES: AtomicU64 = AtomicU64::new(0);
/// Launches per aclnn operator name, so a test can tell which operator a path ran.
static LAUNCHES_BY_OP: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());

thread_local! {
    /// The distinct tensor views of the operator whose phase one runs on this thread.
    static ARGS: RefCell<Option<Vec<TensorDesc>>> = const { RefCell::new(None) };
}

/// Runs an operator's phase one, returning its result and the bytes its tensor arguments span.
pub(crate) fn capture<T>(build: impl FnOnce() -> T) -> (T, u64) {
    ARGS.with(|a| *a.borrow_mut() = Some(Vec::new()));
    let out = build();
    let args = ARGS.with(|a| a.borrow_mut().take()).unwrap_or_default();
    let bytes = args
        .iter()
        .map(|t| (t.numel() * t.dtype.size()) as u64)
        .sum();
    (out, bytes)
}

/// Notes a tensor argument of the operator being built.
pub(crate) fn note(t: &TensorDesc) {
    ARGS.with(|a| {
        if let Some(args) = a.borrow_mut().as_mut() {
            let same = |u: &TensorDesc| {
                u.addr == t.addr
                    && u.offset == t.offset
                    && u.shape == t.shape
                    && u.strides == t.strides
            };
            if !args.iter().any(same) {
                args.push(t.clone());
            }
        }
    });
}

/// Stops counting the argument `t` of the operator being built.
fn forget(t: &TensorDesc) {
    ARGS.with(|a| {
        if let Some(args) = a.borrow_mut().as_mut() {
            args.retain(|u| {
                !(u.addr == t.addr
                    && u.offset == t.offset
                    && u.shape == t.shape
                    && u.strides == t.strides)
            });
        }
    });
}

/// Counts the argument `whole` of the operator being built as `part` of it: an in-place
/// operator that writes only `part` of a tensor moves only that part.
pub(crate) fn note_part(whole: &TensorDesc, part: &TensorDesc) {
    forget(whole);
    note(part);
}

/// Leaves the argument `t` of the operator being built to its kernel, which counts the part it
/// reads when it runs ([`ran`]): a part that depends on device data (the weights of the
/// experts a grouped matmul's group list routes rows to), unknown at phase one.
pub(crate) fn note_at_run(t: &TensorDesc) {
    forget(t);
}

/// Counts `bytes` of an operator argument left to its kernel by [`note_at_run`], as the kernel
/// runs (in stream order: read the counters after synchronising).
pub(crate) fn ran(bytes: u64) {
    ACLNN_BYTES.fetch_add(bytes, Ordering::Relaxed);
}

/// What the cube unit multiplies: its fractal (one product per cycle per cube core) is
/// 16x16x16 in f16/bf16 and 16x32x16 in int8, twice the MACs; f32 runs at a quarter of the
/// f16 rate (hardware-atlas-a2.md §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CubeOperands {
    Half,
    Int8,
    F32,
}

/// Cube cycles of one `[m, k] @ [k, n]` product on one cube core: each dim padded to the
/// fractal, as the cube takes whole fractals.
pub(crate) fn cube_cycles(m: usize, n: usize, k: usize, operands: CubeOperands) -> u64 {
    let (k_fractal, cycles_per_fractal) = match operands {
        CubeOperands::Half => (16, 1),
        CubeOperands::Int8 => (32, 1),
        CubeOperands::F32 => (16, 4),
    };
    (m.div_ceil(16) * n.div_ceil(16) * k.div_ceil(k_fractal)) as u64 * cycles_per_fractal
}

/// Counts the cube work of a matmul-class operator's kernel as it runs (see
/// [`WorkCounters::aclnn_cube_cycles`]).
pub(crate) fn cube(m: usize, n: usize, k: usize, operands: CubeOperands) {
    CUBE_CYCLES.fetch_add(cube_cycles(m, n, k, operands), Ordering::Relaxed);
}

/// Counts a launched operator `op` that moves `bytes`.
pub(crate) fn launched(op: &'static str, bytes: u64) {
    *LAUNCHES_BY_OP
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(op)
        .or_default() += 1;
    ACLNN_LAUNCHES.fetch_add(1, Ordering::Relaxed);
    ACLNN_BYTES.fetch_add(bytes, Ordering::Relaxed);
}

/// Counts one submission of device work by the host (see [`WorkCounters::submissions`]).
pub(crate) fn submitted() {
    SUBMISSIONS.fetch_add(1, Ordering::Relaxed);
}

/// Counts a host-to-device copy of `bytes` that ran.
pub(crate) fn uploaded(bytes: u64) {
    UPLOADS.fetch_add(1, Ordering::Relaxed);
    UPLOADED_BYTES.fetch_add(bytes, Ordering::Relaxed);
}

/// Host-to-device copies that ran on the emulated devices of this process, and their bytes
/// (synchronous and stream-ordered copies alike, counted when they run).
pub fn host_to_device_copies() -> (u64, u64) {
    (
        UPLOADS.load(Ordering::Relaxed),
        UPLOADED_BYTES.load(Ordering::Relaxed),
    )
}

/// Counts a device-to-host copy of `bytes` that ran.
pub(crate) fn downloaded(bytes: u64) {
    DOWNLOADS.fetch_add(1, Ordering::Relaxed);
    DOWNLOADED_BYTES.fetch_add(bytes, Ordering::Relaxed);
}

/// Device-to-host copies that ran on the emulated devices of this process, and their bytes
/// (synchronous and stream-ordered copies alike, counted when they run): what the host read
/// back.
pub fn device_to_host_copies() -> (u64, u64) {
    (
        DOWNLOADS.load(Ordering::Relaxed),
        DOWNLOADED_BYTES.load(Ordering::Relaxed),
    )
}

/// Launches of the aclnn operator `op` (e.g. `"aclnnFlashAttentionScore"`) queued on the
/// emulated devices of this process, graph replays included.
pub fn aclnn_launches_of(op: &str) -> u64 {
    LAUNCHES_BY_OP
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(op)
        .copied()
        .unwrap_or(0)
}

/// Launches of every aclnn operator queued on the emulated devices of this process so far, by
/// name (graph replays included): what a step's launches are made of, for tests and benches.
pub fn aclnn_launches_by_op() -> Vec<(&'static str, u64)> {
    let by_op = LAUNCHES_BY_OP.lock().unwrap_or_else(|e| e.into_inner());
    by_op.iter().map(|(&op, &n)| (op, n)).collect()
}

/// Work queued on the emulated devices of this process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkCounters {
    /// aclnn operators launched.
    pub aclnn_launches: u64,
    /// Global-memory bytes of those operators (modelled: each tensor argument once).
    pub aclnn_bytes: u64,
    /// Ascend C kernels run.
    pub kernel_launches: u64,
    /// Global-memory bytes those kernels read and wrote (measured).
    pub kernel_bytes: u64,
    /// Submissions of device work by the host: each operator, kernel, asynchronous copy or
    /// memset queued on a stream, and each graph replay (one, however many tasks it holds).
    /// Work recorded by a capture is not submitted.
    pub submissions: u64,
    /// Cube cycles of the matmul-class aclnn operators that ran (modelled: whole fractals at
    /// one product per cycle, summed over all cube cores; divide by the cube cores and the
    /// clock for the time of a perfectly spread launch).
    pub aclnn_cube_cycles: u64,
}

impl WorkCounters {
    /// Launches of both kinds.
    pub fn launches(&self) -> u64 {
        self.aclnn_launches + self.kernel_launches
    }

    /// Global-memory bytes of both kinds.
    pub fn bytes(&self) -> u64 {
        self.aclnn_bytes + self.kernel_bytes
    }

    /// The work done between `earlier` and `self`.
    pub fn since(&self, earlier: &WorkCounters) -> WorkCounters {
        WorkCounters {
            aclnn_launches: self.aclnn_launches - earlier.aclnn_launches,
            aclnn_bytes: self.aclnn_bytes - earlier.aclnn_bytes,
            kernel_launches: self.kernel_launches - earlier.kernel_launches,
            kernel_bytes: self.kernel_bytes - earlier.kernel_bytes,
            submissions: self.submissions - earlier.submissions,
            aclnn_cube_cycles: self.aclnn_cube_cycles - earlier.aclnn_cube_cycles,
        }
    }
}

/// The work queued so far (aclnn operators when launched, kernels once they have run, so
/// synchronise the device first).
pub fn work_counters() -> WorkCounters {
    let k = super::kernel_runner::launch_totals();
    WorkCounters {
        aclnn_launches: ACLNN_LAUNCHES.load(Ordering::Relaxed),
        aclnn_bytes: ACLNN_BYTES.load(Ordering::Relaxed),
        kernel_launches: k.launches,
        kernel_bytes: k.gm_bytes,
        submissions: SUBMISSIONS.load(Ordering::Relaxed),
        aclnn_cube_cycles: CUBE_CYCLES.load(Ordering::Relaxed),
    }
}
