//! The device runtime: device selection, per-device contexts (stream, caching allocators,
//! page-locked staging, transfers, operator launch, reset after a fault). Nothing here knows
//! of Burn.

pub mod allocator;
pub mod context;
pub mod device;
pub mod graph;
mod staging;

pub use allocator::MemoryStats;
pub use context::{reset_device, DeviceContext, DeviceStorage};
pub use device::AscendDevice;
