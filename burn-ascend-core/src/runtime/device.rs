//! Device selection: a real NPU when CANN loads and reports one, else the emulated NPU (with
//! a one-time notice); `BURN_ASCEND_DEVICE` forces either.

use std::sync::OnceLock;

use crate::acl::loader::CannLibraries;
use crate::acl::{AclApi, AclError, AclResult};

/// Environment variable forcing the default device: `npu`, `npu:N`, `emulated` or
/// `emulated:N`.
pub const ENV_DEVICE: &str = "BURN_ASCEND_DEVICE";

/// An Ascend device: a real NPU through CANN, or an NPU of the emulated Ascend runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AscendDevice {
    /// A real NPU, by device id, through CANN's libraries.
    Npu(usize),
    /// An emulated NPU (modelled on Atlas A2), by device id.
    Emulated(usize),
}

impl Default for AscendDevice {
    /// NPU 0 when CANN loads and has a device, else emulated NPU 0; see [`ENV_DEVICE`].
    fn default() -> Self {
        static DEFAULT: OnceLock<AscendDevice> = OnceLock::new();
        *DEFAULT.get_or_init(select_default)
    }
}

impl std::fmt::Display for AscendDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AscendDevice::Npu(i) => write!(f, "npu:{i}"),
            AscendDevice::Emulated(i) => write!(f, "emulated:{i}"),
        }
    }
}

impl AscendDevice {
    /// Parses `npu`, `npu:N`, `emulated` or `emulated:N`.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim().to_ascii_lowercase();
        let (kind, index) = match text.split_once(':') {
            Some((k, i)) => (k.to_string(), i.parse().ok()?),
            None => (text, 0),
        };
        match kind.as_str() {
            "npu" => Some(AscendDevice::Npu(index)),
            "emulated" | "emu" => Some(AscendDevice::Emulated(index)),
            _ => None,
        }
    }

    /// The device id the runtime API uses.
    pub fn index(&self) -> usize {
        match self {
            AscendDevice::Npu(i) | AscendDevice::Emulated(i) => *i,
        }
    }

    /// The function table serving this device.
    pub fn api(&self) -> AclResult<&'static AclApi> {
        match self {
            AscendDevice::Npu(_) => cann_api(),
            AscendDevice::Emulated(_) => emulated_api(),
        }
    }

    /// The library of fused kernels serving this device.
    pub fn kernels(&self) -> AclResult<&'static burn_ascend_kernels::KernelApi> {
        match self {
            AscendDevice::Npu(_) => burn_ascend_kernels::library::npu(),
            #[cfg(feature = "emulator")]
            AscendDevice::Emulated(_) => burn_ascend_kernels::library::emulated(),
            #[cfg(not(feature = "emulator"))]
            AscendDevice::Emulated(_) => Err(no_emulator()),
        }
    }
}

/// The table filled by the emulated runtime.
#[cfg(feature = "emulator")]
pub fn emulated_api() -> AclResult<&'static AclApi> {
    static API: OnceLock<AclApi> = OnceLock::new();
    Ok(API.get_or_init(|| {
        AclApi::new(Box::new(crate::emulator::EmulatedRuntime))
            .expect("the emulated runtime exports every function")
    }))
}

/// Without the `emulator` feature there is no emulated NPU.
#[cfg(not(feature = "emulator"))]
pub fn emulated_api() -> AclResult<&'static AclApi> {
    Err(no_emulator())
}

#[cfg(not(feature = "emulator"))]
fn no_emulator() -> AclError {
    AclError::Library(
        "burn-ascend was built without its `emulator` feature, so there is no emulated NPU".into(),
    )
}

/// The table filled from CANN's libraries (loaded once).
pub fn cann_api() -> AclResult<&'static AclApi> {
    static API: OnceLock<AclResult<AclApi>> = OnceLock::new();
    API.get_or_init(|| AclApi::new(Box::new(CannLibraries::open()?)))
        .as_ref()
        .map_err(AclError::clone)
}

fn cann_device_count() -> AclResult<u32> {
    let api = cann_api()?;
    super::context::initialize(api)?;
    let mut count = 0u32;
    // SAFETY: `count` is a valid out-pointer.
    api.check(
        unsafe { (api.core.aclrtGetDeviceCount)(&mut count) },
        "aclrtGetDeviceCount",
    )?;
    Ok(count)
}

fn select_default() -> AscendDevice {
    if let Ok(forced) = std::env::var(ENV_DEVICE) {
        match AscendDevice::parse(&forced) {
            Some(device) => return device,
            None => panic!(
                "{ENV_DEVICE}={forced:?} is not a device: use npu, npu:N, emulated or emulated:N"
            ),
        }
    }
    match cann_device_count() {
        Ok(n) if n > 0 => AscendDevice::Npu(0),
        // Nothing else to run on: the first use reports why CANN is unavailable.
        #[cfg(not(feature = "emulator"))]
        _ => AscendDevice::Npu(0),
        #[cfg(feature = "emulator")]
        outcome => {
            let why = match outcome {
                Ok(_) => "CANN loaded but reports no NPU".to_string(),
                Err(e) => e.to_string(),
            };
            eprintln!(
                "burn-ascend: no Ascend NPU available ({why}); running on the emulated NPU \
                 (an in-process model of an Atlas A2 device). Set {ENV_DEVICE}=npu to require \
                 real hardware, or {ENV_DEVICE}=emulated to silence this notice."
            );
            AscendDevice::Emulated(0)
        }
    }
}

/// Number of devices of `device`'s kind.
pub fn device_count(device: &AscendDevice) -> AclResult<usize> {
    match device {
        AscendDevice::Npu(_) => cann_device_count().map(|n| n as usize),
        AscendDevice::Emulated(_) => {
            let api = emulated_api()?;
            super::context::initialize(api)?;
            let mut count = 0u32;
            // SAFETY: `count` is a valid out-pointer.
            api.check(
                unsafe { (api.core.aclrtGetDeviceCount)(&mut count) },
                "aclrtGetDeviceCount",
            )?;
            Ok(count as usize)
        }
    }
}

/// `(free, total)` bytes of `device`'s memory, as `aclrtGetMemInfo` reports them: what a
/// caller sizing long-lived buffers (a KV cache) checks before allocating.
pub fn memory_info(device: &AscendDevice) -> AclResult<(usize, usize)> {
    let ctx = super::context::DeviceContext::get(device)?;
    let api = ctx.bind();
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: valid out-pointers; the device is bound.
    api.check(
        unsafe {
            (api.core.aclrtGetMemInfo)(crate::acl::types::ACL_HBM_MEM, &mut free, &mut total)
        },
        "aclrtGetMemInfo",
    )?;
    Ok((free, total))
}
