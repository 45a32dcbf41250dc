//! The device of the Burn 0.22 adapter, with Burn's device traits.

use std::fmt;

use burn_backend::{BoolStore, DType, DeviceId, DeviceOps, DeviceSettings};

use crate::runtime;

// The device type, its conversions and helpers, the same in both adapters
// (burn-ascend-core's adapter_methods).
burn_ascend_core::adapter_device!();

impl DeviceOps for AscendDevice {
    /// What Burn 0.22 creates when a program names no dtype (it has no element types any
    /// more): F32 floats, I32 ints (aclnn's index operators take I32), bools one byte each as
    /// the device stores them; Burn's default quantization.
    fn defaults(&self) -> DeviceSettings {
        DeviceSettings::new(
            DType::F32,
            DType::I32,
            DType::Bool(BoolStore::Native),
            Default::default(),
        )
    }
}
