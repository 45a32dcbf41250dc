//! The device runtime: device selection, per-device contexts (stream, caching allocators,
//! transfers, operator launch). Nothing here knows of Burn.

pub mod allocator;
pub mod context;
pub mod device;

pub use allocator::MemoryStats;
pub use context::{DeviceContext, DeviceStorage};
pub use device::AscendDevice;
