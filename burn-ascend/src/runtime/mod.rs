//! The device runtime: device selection, per-device contexts (stream, caching allocators,
//! transfers, operator launch), communicators across devices. Nothing here knows of Burn.

pub mod allocator;
pub mod collective;
pub mod context;
pub mod device;
mod rendezvous;

pub use allocator::MemoryStats;
pub use collective::Communicator;
pub use context::{DeviceContext, DeviceStorage};
pub use device::AscendDevice;
