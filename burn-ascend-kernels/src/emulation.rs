//! The host side of the Ascend C emulation: how emulated kernels reach the emulated device.
//!
//! The entry points exist only in emulated builds (no CANN at build time); the registration and
//! the launch log exist in every build, so the emulated runtime can register itself either way.
//!
//! The emulated runtime (in `burn-ascend`) registers a [`KernelHost`]; the generated
//! `aclrtlaunch_<kernel>` entry points call [`ascendc_emu_launch`], which queues the kernel's
//! blocks on the host's stream, and the emulated Ascend C API reads and writes global memory
//! through [`ascendc_emu_gm`]. Each finished launch leaves its counters in a log.

use std::ffi::c_void;
#[cfg(ascendc_emulated)]
use std::ffi::{c_char, CStr};
use std::sync::{Mutex, OnceLock};

/// A status and message raised by a kernel (an AI Core error on hardware).
#[derive(Debug, Clone)]
pub struct KernelFault {
    /// The runtime status code.
    pub code: i32,
    /// What went wrong, naming the kernel and block.
    pub message: String,
}

/// Work queued on a stream.
pub type KernelTask = Box<dyn FnOnce() -> Result<(), KernelFault> + Send>;

/// What an emulated device offers the emulated kernels.
pub trait KernelHost: Send + Sync {
    /// Queues `task` on `stream` (an `aclrtStream` of the emulated runtime).
    fn enqueue(&self, stream: *mut c_void, task: KernelTask) -> Result<(), KernelFault>;
    /// The host address of emulated global memory `[addr, addr + len)`, if it is live.
    fn global_memory(&self, addr: u64, len: u64) -> Result<*mut u8, String>;
}

static HOST: OnceLock<&'static dyn KernelHost> = OnceLock::new();

/// Installs the emulated device the kernels run on (once per process).
pub fn register_host(host: &'static dyn KernelHost) {
    let _ = HOST.set(host);
}

/// Counters of one kernel launch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaunchStats {
    /// The kernel.
    pub kernel: String,
    /// Blocks launched.
    pub block_dim: u32,
    /// Bytes read from global memory.
    pub gm_bytes_read: u64,
    /// Bytes written to global memory.
    pub gm_bytes_written: u64,
    /// DataCopy/DataCopyPad calls between global memory and the unified buffer.
    pub data_copies: u64,
    /// Largest unified-buffer footprint of any block, bytes.
    pub ub_peak_bytes: u64,
    /// Global-memory bytes moved by each block (the per-core balance).
    pub per_block_gm_bytes: Vec<u64>,
}

static LOG: Mutex<Vec<LaunchStats>> = Mutex::new(Vec::new());

/// Totals over every kernel launch completed in this process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaunchTotals {
    /// Launches completed (failed ones included).
    pub launches: u64,
    /// Global-memory bytes read and written.
    pub gm_bytes: u64,
}

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

#[cfg(ascendc_emulated)]
#[repr(C)]
#[derive(Default)]
struct EmuStats {
    gm_bytes_read: u64,
    gm_bytes_written: u64,
    data_copies: u64,
    ub_peak_bytes: u64,
}

#[cfg(ascendc_emulated)]
type Entry = unsafe extern "C" fn(*mut c_void);

#[cfg(ascendc_emulated)]
extern "C" {
    fn ascendc_emu_run(
        name: *const c_char,
        block_dim: u32,
        entry: Entry,
        args: *mut c_void,
        stats: *mut EmuStats,
        per_block_gm_bytes: *mut u64,
        err: *mut c_char,
        err_len: usize,
    ) -> i32;
}

/// ACL_ERROR_RT_PARAM_INVALID: a launch the runtime refuses outright.
#[cfg(ascendc_emulated)]
const PARAM_INVALID: u32 = 107000;

#[cfg(ascendc_emulated)]
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

/// Resolves emulated global memory for the emulated Ascend C API.
///
/// # Safety
/// `err` must be NULL or valid for `err_len` bytes.
#[cfg(ascendc_emulated)]
#[no_mangle]
pub unsafe extern "C" fn ascendc_emu_gm(
    addr: u64,
    len: u64,
    err: *mut c_char,
    err_len: usize,
) -> *mut c_void {
    let Some(host) = HOST.get() else {
        write_message(err, err_len, "no emulated device is registered");
        return std::ptr::null_mut();
    };
    match host.global_memory(addr, len) {
        Ok(p) => p as *mut c_void,
        Err(m) => {
            write_message(err, err_len, &m);
            std::ptr::null_mut()
        }
    }
}

/// Args owned by a queued launch; freed by the kernel's own deleter.
#[cfg(ascendc_emulated)]
struct LaunchArgs {
    args: *mut c_void,
    drop_args: Entry,
}

// SAFETY: the args blob is plain data copied by the generated stub, used by one task.
#[cfg(ascendc_emulated)]
unsafe impl Send for LaunchArgs {}

#[cfg(ascendc_emulated)]
impl Drop for LaunchArgs {
    fn drop(&mut self) {
        // SAFETY: the generated deleter of this blob, called once.
        unsafe { (self.drop_args)(self.args) };
    }
}

/// Queues an emulated kernel launch on a stream (called by the generated entry points).
///
/// # Safety
/// `name` is a NUL-terminated static string; `entry` and `drop_args` are the generated functions
/// for `args`.
#[cfg(ascendc_emulated)]
#[no_mangle]
pub unsafe extern "C" fn ascendc_emu_launch(
    stream: *mut c_void,
    name: *const c_char,
    block_dim: u32,
    entry: Entry,
    args: *mut c_void,
    drop_args: Entry,
) -> u32 {
    let owned = LaunchArgs { args, drop_args };
    let kernel = CStr::from_ptr(name).to_string_lossy().into_owned();
    let Some(host) = HOST.get() else {
        return PARAM_INVALID;
    };
    if block_dim == 0 {
        return PARAM_INVALID;
    }
    let task: KernelTask = Box::new(move || {
        let mut stats = EmuStats::default();
        let mut per_block = vec![0u64; block_dim as usize];
        let mut err = [0 as c_char; 1024];
        let c_name = std::ffi::CString::new(kernel.clone()).unwrap_or_default();
        // SAFETY: the buffers are sized as the runner expects; `owned` keeps args alive.
        let code = unsafe {
            ascendc_emu_run(
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
        drop(owned);
        {
            let mut totals = TOTALS.lock().unwrap();
            totals.launches += 1;
            totals.gm_bytes += stats.gm_bytes_read + stats.gm_bytes_written;
        }
        LOG.lock().unwrap().push(LaunchStats {
            kernel: kernel.clone(),
            block_dim,
            gm_bytes_read: stats.gm_bytes_read,
            gm_bytes_written: stats.gm_bytes_written,
            data_copies: stats.data_copies,
            ub_peak_bytes: stats.ub_peak_bytes,
            per_block_gm_bytes: per_block,
        });
        if code == 0 {
            Ok(())
        } else {
            // SAFETY: the runner NUL-terminates its message.
            let message = unsafe { CStr::from_ptr(err.as_ptr()) }
                .to_string_lossy()
                .into_owned();
            Err(KernelFault { code, message })
        }
    });
    match host.enqueue(stream, task) {
        Ok(()) => 0,
        Err(f) => f.code as u32,
    }
}
