//! The device runtime: device selection, per-device contexts (stream, caching allocators,
//! page-locked staging, transfers, operator launch, reset after a fault), communicators across
//! devices, profiling windows on timed events. Nothing here knows of Burn.

pub mod allocator;
pub mod collective;
pub mod context;
pub mod device;
pub mod graph;
pub mod profile;
mod rendezvous;
mod staging;

pub use allocator::MemoryStats;
pub use collective::Communicator;
pub use context::{reset_device, set_reset_on_fault, DeviceContext, DeviceStorage};
pub use device::AscendDevice;
pub use profile::{ClosedWindow, WindowId};
pub use rendezvous::{ENV_RENDEZVOUS_SECRET, ENV_RENDEZVOUS_SECRET_FILE, MIN_SECRET_BYTES};
