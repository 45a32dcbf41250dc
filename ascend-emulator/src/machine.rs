//! The emulated machine: its NPUs (modelled on Atlas A2), the calling thread's current device,
//! and the handle registries that let the runtime reject stale or foreign handles.

use std::cell::Cell;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::fault::{fault, Fault};
use super::memory::DeviceMemory;
use super::stream::{Event, Stream};
use ascend_acl::types::status::*;

/// The modelled chip: an Atlas A2 Ascend910B2 (`../shared/ascend/hardware-atlas-a2.md`).
pub(crate) const SOC_NAME: &str = "Ascend910B2";
pub(crate) const AI_CORES: i64 = 24;
pub(crate) const VECTOR_CORES: i64 = 48;
pub(crate) const L2_BYTES: i64 = 192 << 20;
const HBM_BYTES: u64 = 64 << 30;
const DEFAULT_DEVICES: usize = 2;

/// Environment variable: number of emulated NPUs (default 2).
pub const ENV_DEVICES: &str = "BURN_ASCEND_EMU_DEVICES";
/// Environment variable: HBM capacity of each emulated NPU in MiB (default 65536, as a 910B2).
pub const ENV_HBM_MIB: &str = "BURN_ASCEND_EMU_HBM_MIB";

pub(crate) struct Npu {
    pub memory: DeviceMemory,
    default_stream: OnceLock<Arc<Stream>>,
}

impl Npu {
    pub fn default_stream(&self, id: i32) -> Arc<Stream> {
        self.default_stream.get_or_init(|| Stream::new(id)).clone()
    }
}

pub(crate) struct Machine {
    pub npus: Vec<Npu>,
    pub initialized: AtomicBool,
    pub streams: Mutex<HashSet<usize>>,
    pub events: Mutex<HashSet<usize>>,
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

pub(crate) fn machine() -> &'static Machine {
    static MACHINE: OnceLock<Machine> = OnceLock::new();
    MACHINE.get_or_init(|| {
        let count = env_number(ENV_DEVICES).map_or(DEFAULT_DEVICES, |n| n as usize);
        let hbm = env_number(ENV_HBM_MIB).map_or(HBM_BYTES, |mib| mib << 20);
        Machine {
            npus: (0..count)
                .map(|id| Npu {
                    memory: DeviceMemory::new(id as i32, hbm),
                    default_stream: OnceLock::new(),
                })
                .collect(),
            initialized: AtomicBool::new(false),
            streams: Mutex::default(),
            events: Mutex::default(),
        }
    })
}

thread_local! {
    static CURRENT: Cell<Option<i32>> = const { Cell::new(None) };
}

impl Machine {
    pub fn check_initialized(&self) -> Result<(), Fault> {
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
        self.npu(id)?;
        CURRENT.with(|c| c.set(Some(id)));
        Ok(())
    }

    /// The calling thread's device, as `aclrtSetDevice` bound it.
    pub fn current(&self) -> Result<(i32, &Npu), Fault> {
        self.check_initialized()?;
        let id = CURRENT.with(Cell::get).ok_or_else(|| {
            fault(
                ACL_ERROR_RT_CONTEXT_NULL,
                "no device is set on this thread: call aclrtSetDevice first",
            )
        })?;
        Ok((id, self.npu(id)?))
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
