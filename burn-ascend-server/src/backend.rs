//! The served backend: the one place that names it, so that swapping in another `BackendIr`
//! backend changes only this file.
//!
//! It is burn-ascend's Burn 0.22 adapter under burn-fusion, `Fusion<Ascend>`: real NPUs through
//! CANN (`npu:N`) or the NPUs of the emulated Ascend runtime (`emulated:N`), which needs no
//! hardware. Fusion records what clients send and runs it in blocks: runs of element-wise ops as
//! one kernel launch, and layer norm, linear and softmax as Burn composes them as one operator
//! each (see `burn_ascend_b22::fusion`).

use burn_remote::server::CustomOpRegistry;

/// The backend whose devices the server hosts.
pub type ServedBackend = burn_fusion::Fusion<burn_ascend_b22::Ascend>;

/// A device of [`ServedBackend`].
pub type ServedDevice = burn_ascend_b22::AscendDevice;

/// The device called `name` on the command line: `npu`, `npu:N`, `emulated` or `emulated:N`.
/// It is opened here, so that a device this machine lacks stops the server at start, naming
/// why, rather than failing a client later.
pub fn parse_device(name: &str) -> Result<ServedDevice, String> {
    let device = ServedDevice::parse(name).ok_or_else(|| {
        "Ascend devices are `npu:N` (a real NPU through CANN) or `emulated:N` (the emulated NPU)"
            .to_string()
    })?;
    burn_ascend_b22::runtime::DeviceContext::get(&device.into()).map_err(|e| e.to_string())?;
    Ok(device)
}

/// The custom operations the server executes for clients: burn-signal's FFT (`rfft`, `irfft`:
/// Burn 0.22 programs send them as custom ops, FFT not being part of Burn's IR) and
/// burn-ascend's fused ops (`ascend::*`, sent by the `burn-ascend-client` crate).
///
/// Their handlers run on `Ascend`, recorded in the fusion stream in order with the ops around
/// them (`burn_ascend_b22::fused::through_fusion`).
pub fn custom_ops() -> CustomOpRegistry<ServedBackend> {
    let mut inner = CustomOpRegistry::new();
    burn_signal::register_fft_ops(&mut inner);
    burn_ascend_b22::fused::register(&mut inner);
    let mut ids = FFT_IDS.to_vec();
    ids.extend(burn_ascend_b22::fused::IDS);
    burn_ascend_b22::fused::through_fusion(inner, &ids)
}

/// The ids burn-signal 0.22.1 sends its FFT custom ops under (crate-private constants there:
/// `custom::RFFT`, `custom::IRFFT`). remote-suite's FFT tests fail if they change.
const FFT_IDS: [&str; 2] = ["signal::rfft", "signal::irfft"];

/// The device served when none is named: the emulated NPU, which every machine has.
pub const DEFAULT_DEVICE: &str = "emulated:0";
