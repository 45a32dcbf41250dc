//! The served backend: the one place that names it, so that swapping in another `BackendIr`
//! backend changes only this file.
//!
//! Until the Burn 0.22 Ascend adapter exists this is burn-flex, Burn's own CPU backend, which
//! implements `BackendIr`.

/// The backend whose devices the server hosts.
pub type ServedBackend = burn_flex::Flex;

/// A device of [`ServedBackend`].
pub type ServedDevice = burn_backend::tensor::Device<ServedBackend>;

/// The device called `name` on the command line. burn-flex has one device, `cpu`.
pub fn parse_device(name: &str) -> Result<ServedDevice, String> {
    match name {
        "cpu" => Ok(burn_flex::FlexDevice),
        _ => Err("the served backend (burn-flex) has one device, `cpu`".to_string()),
    }
}

/// The device served when none is named.
pub const DEFAULT_DEVICE: &str = "cpu";
