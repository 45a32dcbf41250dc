//! The host of the emulated Ascend C kernels: how a kernel library built against the Ascend C
//! emulation (`ascendc/`) reaches the emulated device.
//!
//! Such a library (built by `burn-ascend-kernels` with the host C++ compiler) is opened at run
//! time like CANN's kernel library. [`EmulatedKernelLibrary::open`] binds it to this process's
//! emulated machine (`ascendc_emu_bind`, see `ascendc/include/ascendc_emu_abi.h`): its
//! `aclrtlaunch_<kernel>` entry points then queue the kernel's blocks on an emulated stream, and
//! the emulated Ascend C API resolves global memory in emulated HBM, with the same checks as every
//! other device access, and only in the HBM of the NPU the kernel was launched on. Each finished
//! launch leaves its counters in a log.

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::Path;
use std::sync::Mutex;

use ascend_acl::loader::SharedLibrary;
use ascend_acl::table::SymbolSource;
use ascend_acl::types::status::ACL_ERROR_RT_PARAM_INVALID;
use ascend_acl::{AclError, AclResult};

use super::fault::{report, Fault};
use super::machine::machine;

/// The kind of core the blocks of a launch ran on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CoreKind {
    /// Vector cores (AIV): `KERNEL_TYPE_AIV_ONLY` or `MIX_AIV_1_0`, or no kernel type.
    #[default]
    Vector,
    /// Cube cores (AIC): `KERNEL_TYPE_AIC_ONLY`.
    Cube,
}

/// Counters of one kernel launch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaunchStats {
    /// The kernel.
    pub kernel: String,
    /// Blocks launched.
    pub block_dim: u32,
    /// The kind of core the blocks ran on.
    pub cores: CoreKind,
    /// Bytes read from global memory.
    pub gm_bytes_read: u64,
    /// Bytes written to global memory.
    pub gm_bytes_written: u64,
    /// DMA copies between global memory and a core's local memory: DataCopy/DataCopyPad
    /// GM<->UB, DataCopy GM->L1, Fixpipe L0C->GM.
    pub data_copies: u64,
    /// Largest unified-buffer footprint of any block, bytes.
    pub ub_peak_bytes: u64,
    /// Vector instructions issued (each call of a vector API).
    pub vector_instructions: u64,
    /// Vector repeats issued: each instruction's widest operand in 256-byte repeats (at least one).
    pub vector_repeats: u64,
    /// Cube cycles of the Mmad calls at the peak rate (hardware-atlas-a2.md §4.1):
    /// ceil(m/16)·ceil(n/16)·ceil(k/16) per call for half/bf16 inputs, 4 times that for float.
    pub cube_cycles: u64,
    /// Mmad calls.
    pub mmad_calls: u64,
    /// Global-memory bytes moved by each block (the per-core balance).
    pub per_block_gm_bytes: Vec<u64>,
    /// Vector repeats issued by each block.
    pub per_block_vector_repeats: Vec<u64>,
    /// Vector instructions issued by each block.
    pub per_block_vector_instructions: Vec<u64>,
    /// Cube cycles issued by each block.
    pub per_block_cube_cycles: Vec<u64>,
    /// Mmad calls issued by each block.
    pub per_block_mmad_calls: Vec<u64>,
}

/// Totals over every kernel launch completed in this process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaunchTotals {
    /// Launches completed (failed ones included).
    pub launches: u64,
    /// Global-memory bytes read and written.
    pub gm_bytes: u64,
}

static LOG: Mutex<Vec<LaunchStats>> = Mutex::new(Vec::new());
static TOTALS: Mutex<LaunchTotals> = Mutex::new(LaunchTotals {
    launches: 0,
    gm_bytes: 0,
});

/// Totals over every kernel launch completed so far (never reset, unlike the launch log).
pub fn launch_totals() -> LaunchTotals {
    *TOTALS.lock().unwrap()
}

/// The counters of every kernel launch completed so far, oldest first.
pub fn launch_log() -> Vec<LaunchStats> {
    LOG.lock().unwrap().clone()
}

/// Empties the launch log.
pub fn clear_launch_log() {
    LOG.lock().unwrap().clear();
}

/// `AscendcEmuStats` of the C ABI.
#[repr(C)]
#[derive(Default)]
struct EmuStats {
    gm_bytes_read: u64,
    gm_bytes_written: u64,
    data_copies: u64,
    ub_peak_bytes: u64,
    vector_instructions: u64,
    vector_repeats: u64,
    cube_cycles: u64,
    mmad_calls: u64,
    core_kind: u64,
}

/// `ASCENDC_EMU_CORE_CUBE` of the C ABI.
const EMU_CORE_CUBE: u64 = 1;

/// `AscendcEmuBlockStats` of the C ABI.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct EmuBlockStats {
    gm_bytes: u64,
    vector_instructions: u64,
    vector_repeats: u64,
    cube_cycles: u64,
    mmad_calls: u64,
}

type Entry = unsafe extern "C" fn(*mut c_void);

/// `ascendc_emu_run` of the library that queued the launch.
type RunFn = unsafe extern "C" fn(
    gm_ctx: *mut c_void,
    name: *const c_char,
    block_dim: u32,
    entry: Entry,
    args: *mut c_void,
    stats: *mut EmuStats,
    per_block: *mut EmuBlockStats,
    err: *mut c_char,
    err_len: usize,
) -> i32;

/// `AscendcEmuHost` of the C ABI: what the library calls back into.
#[repr(C)]
struct HostTable {
    gm: unsafe extern "C" fn(*mut c_void, u64, u64, *mut c_char, usize) -> *mut c_void,
    launch: unsafe extern "C" fn(
        *mut c_void,
        *const c_char,
        u32,
        Entry,
        *mut c_void,
        Entry,
        RunFn,
    ) -> u32,
}

static HOST: HostTable = HostTable {
    gm: host_gm,
    launch: host_launch,
};

fn write_message(err: *mut c_char, err_len: usize, message: &str) {
    if err.is_null() || err_len == 0 {
        return;
    }
    let n = message.len().min(err_len - 1);
    // SAFETY: `err` has room for `err_len` bytes (the caller's contract).
    unsafe {
        std::ptr::copy_nonoverlapping(message.as_ptr(), err as *mut u8, n);
        *err.add(n) = 0;
    }
}

/// What a launch passes the runner as `ctx`, for `host_gm` on the runner's threads: the device
/// the kernel runs on and, when a graph replay runs it, the tick its launch was recorded at.
struct RunCtx {
    device: i32,
    recorded_at: Option<u64>,
}

/// The host address of emulated global memory `[addr, addr + len)` for a kernel running with
/// `ctx` (a [`RunCtx`] the launch passed the runner), or NULL with the reason.
/// A kernel reaches only its own NPU's HBM: a DataCopy reaches another card's HBM only over HCCS
/// (hardware-atlas-a2.md, "Cross-card"), which needs peer access set up; the emulation models no
/// peer access (the stricter choice), so an address of another NPU is rejected like any address
/// outside the device's memory.
unsafe extern "C" fn host_gm(
    ctx: *mut c_void,
    addr: u64,
    len: u64,
    err: *mut c_char,
    err_len: usize,
) -> *mut c_void {
    let npus = &machine().npus;
    // SAFETY: NULL or the `RunCtx` of the launch running (it outlives the run).
    let run = unsafe { (ctx as *const RunCtx).as_ref() };
    let running = run.map(|r| r.device);
    let recorded_at = run.and_then(|r| r.recorded_at);
    let resolved = match (running, npus.iter().position(|n| n.memory.owns(addr))) {
        (None, _) => Err("no kernel launch is running".to_string()),
        (_, None) => Err(format!("0x{addr:x} is not device memory")),
        (Some(running), Some(owner)) if owner as i32 != running => Err(format!(
            "0x{addr:x} is memory of NPU {owner}, but the kernel runs on NPU {running} (a kernel \
             reaches only its own device's HBM)"
        )),
        (Some(_), Some(owner)) => npus[owner]
            .memory
            .host_ptr(addr, len as usize, recorded_at)
            .map_err(|f| f.message),
    };
    match resolved {
        Ok(p) => p as *mut c_void,
        Err(m) => {
            write_message(err, err_len, &m);
            std::ptr::null_mut()
        }
    }
}

/// Args owned by a queued launch; freed by the kernel's own deleter.
struct LaunchArgs {
    args: *mut c_void,
    drop_args: Entry,
}

// SAFETY: the args blob is plain data copied by the generated stub, used by one task.
unsafe impl Send for LaunchArgs {}

impl Drop for LaunchArgs {
    fn drop(&mut self) {
        // SAFETY: the generated deleter of this blob, called once.
        unsafe { (self.drop_args)(self.args) };
    }
}

/// Queues a kernel launch on an emulated stream (called by the library's generated
/// `aclrtlaunch_<kernel>` entry points through the bound host table).
unsafe extern "C" fn host_launch(
    stream: *mut c_void,
    name: *const c_char,
    block_dim: u32,
    entry: Entry,
    args: *mut c_void,
    drop_args: Entry,
    run: RunFn,
) -> u32 {
    let owned = LaunchArgs { args, drop_args };
    // SAFETY: the generated stub passes its kernel's static name.
    let kernel = unsafe { CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned();
    if block_dim == 0 {
        return ACL_ERROR_RT_PARAM_INVALID as u32;
    }
    let stream = match machine().stream(stream) {
        Ok(s) => s,
        Err(f) => return report(f) as u32,
    };
    // The kernel reaches only the memory of the device its stream belongs to.
    let device = stream.device();
    let queued = stream.enqueue(Box::new(move || {
        // The whole blob, kept for every run (a graph replays it).
        let owned = &owned;
        let mut stats = EmuStats::default();
        let mut per_block = vec![EmuBlockStats::default(); block_dim as usize];
        let mut err = [0 as c_char; 1024];
        let c_name = CString::new(kernel.clone()).unwrap_or_default();
        // SAFETY: the buffers are sized as the runner expects; `owned` keeps the args alive.
        let run_ctx = RunCtx {
            device,
            recorded_at: super::graph::replaying(),
        };
        let ctx = &run_ctx as *const RunCtx as *mut c_void;
        let code = unsafe {
            run(
                ctx,
                c_name.as_ptr(),
                block_dim,
                entry,
                owned.args,
                &mut stats,
                per_block.as_mut_ptr(),
                err.as_mut_ptr(),
                err.len(),
            )
        };
        {
            let mut totals = TOTALS.lock().unwrap();
            totals.launches += 1;
            totals.gm_bytes += stats.gm_bytes_read + stats.gm_bytes_written;
        }
        LOG.lock().unwrap().push(LaunchStats {
            kernel: kernel.clone(),
            block_dim,
            cores: if stats.core_kind == EMU_CORE_CUBE {
                CoreKind::Cube
            } else {
                CoreKind::Vector
            },
            gm_bytes_read: stats.gm_bytes_read,
            gm_bytes_written: stats.gm_bytes_written,
            data_copies: stats.data_copies,
            ub_peak_bytes: stats.ub_peak_bytes,
            vector_instructions: stats.vector_instructions,
            vector_repeats: stats.vector_repeats,
            cube_cycles: stats.cube_cycles,
            mmad_calls: stats.mmad_calls,
            per_block_gm_bytes: per_block.iter().map(|b| b.gm_bytes).collect(),
            per_block_vector_repeats: per_block.iter().map(|b| b.vector_repeats).collect(),
            per_block_vector_instructions: per_block
                .iter()
                .map(|b| b.vector_instructions)
                .collect(),
            per_block_cube_cycles: per_block.iter().map(|b| b.cube_cycles).collect(),
            per_block_mmad_calls: per_block.iter().map(|b| b.mmad_calls).collect(),
        });
        if code == 0 {
            Ok(())
        } else {
            // SAFETY: the runner NUL-terminates its message.
            let message = unsafe { CStr::from_ptr(err.as_ptr()) }
                .to_string_lossy()
                .into_owned();
            Err(Fault { code, message })
        }
    }));
    match queued {
        Ok(()) => 0,
        // The launch call's status, with its message for aclGetRecentErrMsg.
        Err(f) => report(f) as u32,
    }
}

/// A kernel library built against the Ascend C emulation, bound to the emulated machine.
pub struct EmulatedKernelLibrary {
    lib: SharedLibrary,
}

impl EmulatedKernelLibrary {
    /// Opens the library at `path` and binds it to the emulated machine.
    pub fn open(path: &Path) -> AclResult<Self> {
        let lib = SharedLibrary::open(path)?;
        let bind = lib.lookup("ascendc_emu_bind").ok_or_else(|| {
            AclError::Library(format!(
                "{} is not a kernel library built against the Ascend C emulation (no ascendc_emu_bind)",
                path.display()
            ))
        })?;
        // SAFETY: `ascendc_emu_bind` has this C signature (ascendc_emu_abi.h); the host table is
        // static, so it outlives the library.
        unsafe {
            let bind: unsafe extern "C" fn(*const HostTable) =
                std::mem::transmute::<*const c_void, _>(bind);
            bind(&HOST);
        }
        Ok(Self { lib })
    }
}

impl SymbolSource for EmulatedKernelLibrary {
    fn lookup(&self, name: &str) -> Option<*const c_void> {
        self.lib.lookup(name)
    }

    fn describe(&self) -> String {
        format!("emulated Ascend C kernels ({})", self.lib.describe())
    }
}
