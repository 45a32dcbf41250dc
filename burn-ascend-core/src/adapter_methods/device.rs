//! The shared part of the adapters' device type.

/// The device type both adapters define (`AscendDevice`, mirroring the core's
/// [`crate::runtime::AscendDevice`] because of the orphan rule), its conversions, Burn's
/// `Device` trait, `count` and `reset_device`, for each adapter's `device` module; the
/// `DeviceOps` impl, which differs between Burn 0.21 and 0.22, stays in the adapter.
#[macro_export]
macro_rules! adapter_device {
    () => {
        /// An Ascend device: a real NPU through CANN, or an NPU of the emulated Ascend runtime.
        ///
        /// It mirrors the core's [`runtime::AscendDevice`] variant for variant, because Burn's device
        /// traits cannot be implemented on the core's type in this crate (the orphan rule); the two
        /// convert with `From` both ways, and parsing, display and the default device are the core's.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum AscendDevice {
            /// A real NPU, by device id, through CANN's libraries.
            Npu(usize),
            /// An emulated NPU (modelled on Atlas A2), by device id.
            Emulated(usize),
        }

        impl From<runtime::AscendDevice> for AscendDevice {
            fn from(device: runtime::AscendDevice) -> Self {
                match device {
                    runtime::AscendDevice::Npu(i) => AscendDevice::Npu(i),
                    runtime::AscendDevice::Emulated(i) => AscendDevice::Emulated(i),
                }
            }
        }

        impl From<AscendDevice> for runtime::AscendDevice {
            fn from(device: AscendDevice) -> Self {
                match device {
                    AscendDevice::Npu(i) => runtime::AscendDevice::Npu(i),
                    AscendDevice::Emulated(i) => runtime::AscendDevice::Emulated(i),
                }
            }
        }

        impl From<&AscendDevice> for runtime::AscendDevice {
            fn from(device: &AscendDevice) -> Self {
                (*device).into()
            }
        }

        impl Default for AscendDevice {
            /// The core's default device: see [`runtime::AscendDevice::default`].
            fn default() -> Self {
                runtime::AscendDevice::default().into()
            }
        }

        impl fmt::Display for AscendDevice {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                runtime::AscendDevice::from(self).fmt(f)
            }
        }

        impl AscendDevice {
            /// Parses `npu`, `npu:N`, `emulated` or `emulated:N` (see [`runtime::AscendDevice::parse`]).
            pub fn parse(text: &str) -> Option<Self> {
                runtime::AscendDevice::parse(text).map(Into::into)
            }

            /// The device id the runtime API uses.
            pub fn index(&self) -> usize {
                runtime::AscendDevice::from(self).index()
            }
        }

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

        /// Devices of a kind: real NPUs CANN reports, or the emulated machine's NPUs.
        pub(super) fn count(type_id: u16) -> usize {
            let device = match type_id {
                TYPE_NPU => runtime::AscendDevice::Npu(0),
                _ => runtime::AscendDevice::Emulated(0),
            };
            runtime::device::device_count(&device).unwrap_or(0)
        }

        /// Resets `device` after a fault: [`runtime::reset_device`] on the adapter's device.
        pub fn reset_device(device: &AscendDevice) -> $crate::acl::AclResult<()> {
            runtime::reset_device(&device.into())
        }
    };
}
