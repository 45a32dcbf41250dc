//! What the adapter's test files share: the emulated NPU and reading a float tensor back.

use burn_ascend_b22::AscendDevice;
use burn_backend::tensor::FloatTensor;
use burn_backend::{try_read_sync, Backend, TensorData};

/// The first emulated NPU.
pub fn npu() -> AscendDevice {
    AscendDevice::Emulated(0)
}

/// The values of `t`, read back (and any deferred device error raised).
pub fn read<B: Backend>(t: FloatTensor<B>) -> TensorData {
    try_read_sync(B::float_into_data(t))
        .expect("the read completes")
        .expect("the read succeeds")
}
