//! The device of the Burn adapter, with Burn's device traits.

use std::fmt;

use burn_backend::{DeviceId, DeviceOps};

use crate::runtime;

// The device type, its conversions and helpers, the same in both adapters
// (burn-ascend-core's adapter_methods).
burn_ascend_core::adapter_device!();

impl DeviceOps for AscendDevice {}
