//! Burn's device traits for [`AscendDevice`].

use burn_backend::{DeviceId, DeviceOps};

use super::*;

const TYPE_NPU: u16 = 0;
const TYPE_EMULATED: u16 = 1;

impl burn_std::device::Device for AscendDevice {
    fn from_id(id: DeviceId) -> Self {
        match id.type_id {
            TYPE_NPU => AscendDevice::Npu(id.index_id as usize),
            _ => AscendDevice::Emulated(id.index_id as usize),
        }
    }

    fn to_id(&self) -> DeviceId {
        match self {
            AscendDevice::Npu(i) => DeviceId::new(TYPE_NPU, *i as u16),
            AscendDevice::Emulated(i) => DeviceId::new(TYPE_EMULATED, *i as u16),
        }
    }
}

impl DeviceOps for AscendDevice {}

/// Devices of a kind: real NPUs CANN reports, or the emulated machine's NPUs.
pub(super) fn count(type_id: u16) -> usize {
    let device = match type_id {
        TYPE_NPU => AscendDevice::Npu(0),
        _ => AscendDevice::Emulated(0),
    };
    crate::runtime::device::device_count(&device).unwrap_or(0)
}
