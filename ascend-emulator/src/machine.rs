//! The emulated machine: its NPUs (modelled on Atlas A2), the calling thread's current device,
//! and the handle registries that let the runtime reject stale or foreign handles.

use std::cell::Cell;
use std::collections::HashSet;
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::fault::{fault, Fault};
use super::memory::{DeviceMemory, PinnedHost};
use super::stream::{DeviceFault, Event, Stream};
use ascend_acl::release::CannRelease;
use ascend_acl::types::status::*;

/// A chip the emulated NPUs can model: its figures in `../shared/ascend/hardware-atlas-a2.md`
/// §2 (the platform ini's values).
pub(crate) struct Soc {
    /// What `aclrtGetSocName` answers.
    pub name: &'static CStr,
    /// AI cores (one cube core each): `ACL_DEVICE_INFO_AI_CORE_NUM`.
    pub ai_cores: i64,
    /// Vector cores: `ACL_DEVICE_INFO_VECTOR_CORE_NUM`.
    pub vector_cores: i64,
    /// `ACL_DEVICE_INFO_L2_SIZE`, bytes.
    pub l2_bytes: i64,
    /// HBM capacity, bytes.
    pub hbm_bytes: u64,
}

const fn soc(name: &'static CStr, ai_cores: i64, l2_mib: i64, hbm_gib: u64) -> Soc {
    Soc {
        name,
        ai_cores,
        vector_cores: 2 * ai_cores,
        l2_bytes: l2_mib << 20,
        hbm_bytes: hbm_gib << 30,
    }
}

/// The Atlas A2 and A3 chips of the fact sheet (the 910B2C, whose ini gives no HBM size, left
/// out; the 910B4-1's 32 GiB is the ini's, UNCERTAIN). The first is the default.
const SOCS: &[Soc] = &[
    soc(c"Ascend910B2", 24, 192, 64),
    soc(c"Ascend910B1", 24, 192, 64),
    soc(c"Ascend910B3", 20, 192, 64),
    soc(c"Ascend910B4", 20, 96, 32),
    soc(c"Ascend910B4-1", 20, 168, 32),
    soc(c"Ascend910_9391", 24, 192, 64),
    soc(c"Ascend910_9392", 24, 192, 64),
    soc(c"Ascend910_9381", 24, 192, 64),
    soc(c"Ascend910_9382", 24, 192, 64),
    soc(c"Ascend910_9372", 20, 192, 64),
    soc(c"Ascend910_9362", 20, 168, 64),
];
const DEFAULT_DEVICES: usize = 2;

/// Environment variable: number of emulated NPUs (default 2).
pub const ENV_DEVICES: &str = "BURN_ASCEND_EMU_DEVICES";
/// Environment variable: the chip every emulated NPU models, by its SoC name (default
/// `Ascend910B2`; the other Atlas A2/A3 names of `hardware-atlas-a2.md` §2, e.g. `Ascend910B3`
/// with 20 AI cores). It sets what `aclrtGetSocName` and `aclGetDeviceCapability` answer and
/// the HBM capacity.
pub const ENV_SOC: &str = "BURN_ASCEND_EMU_SOC";
/// Environment variable: HBM capacity of each emulated NPU in MiB (default: the chip's, 65536
/// for a 910B2).
pub const ENV_HBM_MIB: &str = "BURN_ASCEND_EMU_HBM_MIB";
/// Environment variable: host threads the emulation computes on (default: the host's hardware
/// threads). The Ascend C runner (`ascendc/src/runner.cpp`) reads it too, for a launch's blocks;
/// here it sizes the pool the aclnn operators split large products and loops over. No result
/// depends on it (each output element is computed by one thread, in the same order).
pub const ENV_THREADS: &str = "BURN_ASCEND_EMU_THREADS";
/// Environment variable: the CANN release the emulated runtime stands for (default 8.1.RC1, the
/// oldest with ACL graphs): functions newer than it are not exported, as `dlsym` finds no
/// function a real release lacks (`ascend_acl::release`).
pub const ENV_CANN: &str = "BURN_ASCEND_EMU_CANN";
/// The release emulated when [`ENV_CANN`] is unset.
pub const DEFAULT_CANN: CannRelease = CannRelease::V8_1_RC1;

pub(crate) struct Npu {
    pub memory: DeviceMemory,
    /// The sticky fault of the device context (see `stream.rs`).
    pub fault: Arc<DeviceFault>,
    /// Bumped by `aclrtResetDevice`: threads bound before it must bind again.
    generation: AtomicU64,
    /// `aclrtSetDevice` calls not yet balanced by `aclrtResetDevice`: the context lives until
    /// the count returns to zero (or `aclrtResetDeviceForce`).
    opened: Mutex<u64>,
    default_stream: Mutex<Option<Arc<Stream>>>,
}

impl Npu {
    pub fn default_stream(&self, id: i32) -> Arc<Stream> {
        self.default_stream
            .lock()
            .unwrap()
            .get_or_insert_with(|| Stream::new(id, true, self.fault.clone()))
            .clone()
    }

    /// A new stream of this device.
    pub fn new_stream(&self, id: i32) -> Arc<Stream> {
        Stream::new(id, false, self.fault.clone())
    }

    /// How many times the device was reset: what a context (or an HCCL communicator) created
    /// on it records, to notice that a reset destroyed it.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}

pub(crate) struct Machine {
    pub npus: Vec<Npu>,
    pub initialized: AtomicBool,
    pub streams: Mutex<HashSet<usize>>,
    pub events: Mutex<HashSet<usize>>,
    /// A configuration variable that did not parse: `aclInit` reports it.
    pub config_error: Option<String>,
    /// Page-locked host memory handed out by `aclrtMallocHost`.
    pub pinned: PinnedHost,
    /// The host threads of the emulated operators ([`ENV_THREADS`]).
    pub pool: rayon::ThreadPool,
    /// The CANN release emulated ([`ENV_CANN`]).
    pub cann: CannRelease,
    /// The chip the NPUs model ([`ENV_SOC`]).
    pub soc: &'static Soc,
}

/// The chip [`ENV_SOC`] names, the default when unset, an error naming the variable and the
/// known chips when it names none of them.
fn env_soc() -> Result<&'static Soc, String> {
    match std::env::var(ENV_SOC) {
        Err(std::env::VarError::NotPresent) => Ok(&SOCS[0]),
        Err(std::env::VarError::NotUnicode(v)) => Err(format!("{ENV_SOC}={v:?} is not text")),
        Ok(v) => SOCS
            .iter()
            .find(|s| s.name.to_bytes() == v.trim().as_bytes())
            .ok_or_else(|| {
                let known: Vec<_> = SOCS.iter().map(|s| s.name.to_string_lossy()).collect();
                format!(
                    "{ENV_SOC}={v:?} is not an emulated chip: give one of {}",
                    known.join(", ")
                )
            }),
    }
}

/// A positive whole number from the environment, `Ok(None)` when unset, an error naming the
/// variable when it does not parse.
fn env_number(name: &str, what: &str) -> Result<Option<u64>, String> {
    match std::env::var(name) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(format!("{name}={v:?} is not text")),
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => Err(format!(
                "{name}={v:?} is not a valid {what}: give a positive whole number"
            )),
        },
    }
}

/// [`ENV_CANN`], or [`DEFAULT_CANN`] when unset; an error naming the variable otherwise.
fn cann_release() -> Result<CannRelease, String> {
    match std::env::var(ENV_CANN) {
        Err(std::env::VarError::NotPresent) => Ok(DEFAULT_CANN),
        Err(std::env::VarError::NotUnicode(v)) => Err(format!("{ENV_CANN}={v:?} is not text")),
        Ok(v) => v.parse().map_err(|e| format!("{ENV_CANN}: {e}")),
    }
}

pub(crate) fn machine() -> &'static Machine {
    static MACHINE: OnceLock<Machine> = OnceLock::new();
    MACHINE.get_or_init(|| {
        let count = env_number(ENV_DEVICES, "number of emulated NPUs");
        let hbm = env_number(ENV_HBM_MIB, "HBM capacity in MiB");
        let threads = env_number(ENV_THREADS, "host thread count");
        let cann = cann_release();
        let soc = env_soc();
        let config_error = [&count, &hbm, &threads]
            .iter()
            .filter_map(|r| r.as_ref().err().cloned())
            .chain(cann.as_ref().err().cloned())
            .chain(soc.as_ref().err().cloned())
            .reduce(|a, b| format!("{a}; {b}"));
        let soc = soc.unwrap_or(&SOCS[0]);
        let count = count.ok().flatten().map_or(DEFAULT_DEVICES, |n| n as usize);
        let hbm = hbm.ok().flatten().map_or(soc.hbm_bytes, |mib| mib << 20);
        let threads = threads.ok().flatten().map_or_else(
            || std::thread::available_parallelism().map_or(1, |n| n.get()),
            |n| n.min(1024) as usize,
        );
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("ascend-emu-{i}"))
            .build()
            .expect("the emulation's host threads start");
        Machine {
            npus: (0..count)
                .map(|id| Npu {
                    memory: DeviceMemory::new(id as i32, hbm),
                    fault: Arc::default(),
                    generation: AtomicU64::new(0),
                    opened: Mutex::new(0),
                    default_stream: Mutex::default(),
                })
                .collect(),
            initialized: AtomicBool::new(false),
            streams: Mutex::default(),
            events: Mutex::default(),
            config_error,
            pinned: PinnedHost::default(),
            pool,
            cann: cann.unwrap_or(DEFAULT_CANN),
            soc,
        }
    })
}

thread_local! {
    /// The device `aclrtSetDevice` bound on this thread, and that device's generation then.
    static CURRENT: Cell<Option<(i32, u64)>> = const { Cell::new(None) };
}

impl Machine {
    pub fn check_initialized(&self) -> Result<(), Fault> {
        if let Some(e) = &self.config_error {
            return Err(fault(ACL_ERROR_INVALID_PARAM, e.clone()));
        }
        if self.initialized.load(Ordering::Acquire) {
            Ok(())
        } else {
            Err(fault(ACL_ERROR_UNINITIALIZE, "aclInit has not been called"))
        }
    }

    pub fn npu(&self, id: i32) -> Result<&Npu, Fault> {
        self.check_initialized()?;
        usize::try_from(id)
            .ok()
            .and_then(|i| self.npus.get(i))
            .ok_or_else(|| {
                fault(
                    ACL_ERROR_RT_INVALID_DEVICEID,
                    format!(
                        "device id {id} is out of range: the emulated machine has {} NPUs",
                        self.npus.len()
                    ),
                )
            })
    }

    pub fn set_current(&self, id: i32) -> Result<(), Fault> {
        let npu = self.npu(id)?;
        *npu.opened.lock().unwrap() += 1;
        CURRENT.with(|c| c.set(Some((id, npu.generation()))));
        Ok(())
    }

    /// `aclrtResetDevice`: one `aclrtSetDevice` fewer; the context is destroyed when none is
    /// left. CANN counts the calls per process (acl-abi.md §3.1: the counting is UNCERTAIN
    /// across versions). The emulation takes the stricter reading, every `aclrtSetDevice` call
    /// counts, whichever thread made it, so a reset that forgets another thread's binding
    /// leaves the device, its memory and its fault in place, as it may on an NPU.
    pub fn release(&self, id: i32) -> Result<(), Fault> {
        let npu = self.npu(id)?;
        super::graph::check_sync(id, "aclrtResetDevice", ACL_ERROR_RT_STREAM_CAPTURED)?;
        let mut opened = npu.opened.lock().unwrap();
        *opened = opened.saturating_sub(1);
        if *opened > 0 {
            return Ok(());
        }
        drop(opened);
        self.reset(id)
    }

    /// The calling thread's device, as `aclrtSetDevice` bound it. A reset of the device since
    /// destroyed the context the thread was bound to: it must bind again.
    pub fn current(&self) -> Result<(i32, &Npu), Fault> {
        self.check_initialized()?;
        let (id, generation) = CURRENT.with(Cell::get).ok_or_else(|| {
            fault(
                ACL_ERROR_RT_CONTEXT_NULL,
                "no device is set on this thread: call aclrtSetDevice first",
            )
        })?;
        let npu = self.npu(id)?;
        if npu.generation() != generation {
            return Err(fault(
                ACL_ERROR_RT_CONTEXT_NULL,
                format!(
                    "device {id} was reset since this thread bound it (aclrtResetDevice \
                     destroyed that context): call aclrtSetDevice again"
                ),
            ));
        }
        Ok((id, npu))
    }

    /// The reset itself (`aclrtResetDeviceForce`, or the last `aclrtResetDevice`): waits for
    /// the device's work, destroys its streams and frees its memory (the context's resources),
    /// clears its fault, and unbinds every thread from it.
    pub fn reset(&self, id: i32) -> Result<(), Fault> {
        let npu = self.npu(id)?;
        super::graph::check_sync(id, "aclrtResetDevice", ACL_ERROR_RT_STREAM_CAPTURED)?;
        *npu.opened.lock().unwrap() = 0;
        let default = npu.default_stream.lock().unwrap().take();
        let mut streams = self.streams.lock().unwrap();
        let own: Vec<usize> = streams
            .iter()
            .copied()
            // SAFETY: registered handles come from Arc::into_raw and are live until removed.
            .filter(|&h| unsafe { (*(h as *const Stream)).device() } == id)
            .collect();
        for h in own {
            streams.remove(&h);
            // SAFETY: as above; the registry's reference is released here, once.
            let s = unsafe { Arc::from_raw(h as *const Stream) };
            s.shutdown();
        }
        drop(streams);
        if let Some(s) = default {
            s.shutdown();
        }
        npu.memory.release_all();
        npu.fault.clear();
        npu.generation.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// The NPU whose address window holds `addr`.
    pub fn npu_of(&self, addr: u64) -> Option<&Npu> {
        self.npus.iter().find(|n| n.memory.owns(addr))
    }

    /// The stream behind a handle; NULL is the current device's default stream.
    pub fn stream(&self, handle: *mut std::ffi::c_void) -> Result<Arc<Stream>, Fault> {
        if handle.is_null() {
            let (id, npu) = self.current()?;
            return Ok(npu.default_stream(id));
        }
        if !self.streams.lock().unwrap().contains(&(handle as usize)) {
            return Err(fault(
                ACL_ERROR_RT_PARAM_INVALID,
                format!("{handle:?} is not a live stream"),
            ));
        }
        // SAFETY: registered handles come from Arc::into_raw and are live until destroyed.
        unsafe {
            Arc::increment_strong_count(handle as *const Stream);
            Ok(Arc::from_raw(handle as *const Stream))
        }
    }

    pub fn event(&self, handle: *mut std::ffi::c_void) -> Result<Arc<Event>, Fault> {
        if !self.events.lock().unwrap().contains(&(handle as usize)) {
            return Err(fault(
                ACL_ERROR_RT_PARAM_INVALID,
                format!("{handle:?} is not a live event"),
            ));
        }
        // SAFETY: as for streams.
        unsafe {
            Arc::increment_strong_count(handle as *const Event);
            Ok(Arc::from_raw(handle as *const Event))
        }
    }
}

/// Sets the HBM capacity of emulated NPU `device` (bytes), for tests of out-of-memory paths.
/// Allocations already made stay; later ones fail once the total would exceed the limit.
pub fn set_device_memory_limit(device: usize, bytes: u64) {
    if let Some(npu) = machine().npus.get(device) {
        npu.memory.set_capacity(bytes);
    }
}

/// Sets the status with which emulated NPU `device` refuses an allocation beyond its capacity
/// (default `ACL_ERROR_RT_MEMORY_ALLOCATION`), for tests of the out-of-memory codes other CANN
/// versions return (`ACL_ERROR_RT_DEVICE_OOM`, `ACL_ERROR_BAD_ALLOC`).
pub fn set_out_of_memory_status(device: usize, status: i32) {
    if let Some(npu) = machine().npus.get(device) {
        npu.memory.set_oom_status(status);
    }
}

/// Calls `f` on consecutive ranges covering `0..n`, on the emulation's host threads when `n` is
/// large enough to pay for the hand-off. Each index is in exactly one range, so a loop whose
/// iterations are independent gives the same result on any number of threads.
pub(crate) fn for_ranges(n: usize, f: impl Fn(std::ops::Range<usize>) + Sync) {
    /// Fewest elements worth a thread (a few microseconds of element work).
    const MIN_PER_THREAD: usize = 1 << 17;
    let pool = &machine().pool;
    let parts = (n / MIN_PER_THREAD).clamp(1, pool.current_num_threads());
    if parts == 1 {
        return f(0..n);
    }
    let step = n.div_ceil(parts);
    let f = &f;
    pool.scope(|s| {
        for p in 0..parts {
            s.spawn(move |_| f(p * step..((p + 1) * step).min(n)));
        }
    });
}
