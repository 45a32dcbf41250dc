//! The emulated device as seen by the emulated Ascend C kernels of `burn-ascend-kernels`:
//! their launches queue on emulated streams and their global-memory accesses resolve in
//! emulated HBM, with the same checks as every other device access.

use std::ffi::c_void;

use burn_ascend_kernels::emulation::{KernelFault, KernelHost, KernelTask};

use super::fault::Fault;
use super::machine::machine;

/// The emulated machine, registered with the kernels crate when the machine starts.
pub(crate) struct EmulatedKernelHost;

impl KernelHost for EmulatedKernelHost {
    fn enqueue(&self, stream: *mut c_void, task: KernelTask) -> Result<(), KernelFault> {
        let stream = machine().stream(stream).map_err(|f| KernelFault {
            code: f.code,
            message: f.message,
        })?;
        stream.enqueue(Box::new(move || {
            task().map_err(|f| Fault {
                code: f.code,
                message: f.message,
            })
        }));
        Ok(())
    }

    fn global_memory(&self, addr: u64, len: u64) -> Result<*mut u8, String> {
        let npu = machine()
            .npu_of(addr)
            .ok_or_else(|| format!("0x{addr:x} is not device memory"))?;
        let (block, offset) = npu
            .memory
            .resolve(addr, len as usize)
            .map_err(|f| f.message)?;
        Ok(block.host_ptr(offset))
    }
}
