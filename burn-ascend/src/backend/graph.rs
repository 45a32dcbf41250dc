//! ACL graphs on [`Ascend`]: capture the ops a closure runs once, replay them with one call.
//!
//! ```no_run
//! use burn_tensor::{Tensor, TensorData};
//! use burn_ascend::{graph, Ascend, AscendDevice};
//!
//! let device = AscendDevice::default();
//! let x = Tensor::<Ascend, 1>::zeros([4], &device); // a static input
//! let (step, y) = graph::capture(&device, || x.clone().exp() + 1.0).unwrap();
//! for i in 0..3 {
//!     graph::write(&x, TensorData::from([i as f32; 4])).unwrap(); // new input, same buffer
//!     step.replay().unwrap();
//!     println!("{}", y.clone()); // the output tensor, rewritten by each replay
//! }
//! ```
//!
//! Rules (the runtime's, `crate::runtime::graph`): tensors the closure creates keep their
//! buffers for the graph's life (a private pool); inputs that change between replays are
//! tensors created before the capture and written in place with [`write()`] (or [`assign()`]);
//! host data the closure itself uploads is a constant of the graph; the closure must not read
//! tensors or otherwise synchronise (the capture then fails, naming the call). Only the
//! values change between replays: shapes, the ops run and their scalar arguments are fixed at
//! capture.

use burn_tensor::{Int, Tensor, TensorData, TensorPrimitive};

pub use crate::runtime::graph::Graph;

use super::{data_type, Ascend, AscendDevice, AscendTensor};
use crate::acl::{AclError, AclResult};
use crate::runtime::graph;

/// Whether `device` can capture graphs, or why not: [`graph::supported`] on the adapter's
/// device.
pub fn supported(device: &AscendDevice) -> Result<(), String> {
    graph::supported(&device.into())
}

/// Runs `f` with the device's stream capturing: [`graph::capture`] on the adapter's device.
pub fn capture<R>(device: &AscendDevice, f: impl FnOnce() -> R) -> AclResult<(Graph, R)> {
    graph::capture(&device.into(), f)
}

/// A tensor of [`Ascend`] whose device buffer can be written in place.
pub trait StaticTensor {
    /// The device tensor behind it.
    fn device_tensor(&self) -> AclResult<AscendTensor>;
}

impl<const D: usize> StaticTensor for Tensor<Ascend, D> {
    fn device_tensor(&self) -> AclResult<AscendTensor> {
        match self.clone().into_primitive() {
            TensorPrimitive::Float(t) => Ok(t),
            TensorPrimitive::QFloat(_) => Err(AclError::InvalidArgument(
                "graph: a quantized tensor cannot be written in place".into(),
            )),
        }
    }
}

impl<const D: usize> StaticTensor for Tensor<Ascend, D, Int> {
    fn device_tensor(&self) -> AclResult<AscendTensor> {
        Ok(self.clone().into_primitive())
    }
}

/// Writes `data` into `tensor`'s own buffer, in stream order (queued before a later replay):
/// how a captured graph's inputs get each step's values. `data` must have the tensor's shape
/// and dtype, and the tensor must be dense (not a strided view).
pub fn write(tensor: &impl StaticTensor, data: TensorData) -> AclResult<()> {
    let t = tensor.device_tensor()?;
    let dtype = data_type(data.dtype);
    if data.shape.as_slice() != t.shape() || dtype != t.dtype() {
        return Err(AclError::InvalidArgument(format!(
            "graph::write: data of shape {:?} and dtype {dtype} into a tensor {}",
            data.shape.as_slice(),
            t.describe()
        )));
    }
    if !t.layout().is_contiguous() || t.layout().offset != 0 {
        return Err(AclError::InvalidArgument(format!(
            "graph::write: {} is a view, not a dense tensor of its own",
            t.describe()
        )));
    }
    t.ctx().upload(t.storage()?, data.as_bytes())
}

/// Copies `src` into `dst`'s own buffer on the device (same shape; converted to `dst`'s
/// dtype), in stream order: keeps state such as a KV cache at one address across steps.
pub fn assign(dst: &impl StaticTensor, src: &impl StaticTensor) -> AclResult<()> {
    let (dst, src) = (dst.device_tensor()?, src.device_tensor()?);
    if dst.shape() != src.shape() {
        return Err(AclError::InvalidArgument(format!(
            "graph::assign: {} into {}: the shapes differ",
            src.describe(),
            dst.describe()
        )));
    }
    crate::ops::copy::copy_into(&dst, &src)
}

/// Writes the rows of `src` into `dst`'s own buffer at the rows `rows` (1-D int32 or int64,
/// distinct) of its first dimension, in stream order (aclnnInplaceIndexCopy): updates state such
/// as a KV cache in place, moving only the rows written. Fails as the backend's tensor ops do
/// (a panic that [`crate::try_run`] returns as the error), so it can sit among them in a step.
pub fn write_rows<const D: usize>(
    dst: &Tensor<Ascend, D>,
    rows: &Tensor<Ascend, 1, Int>,
    src: &Tensor<Ascend, D>,
) {
    let written = (|| {
        let (dst, src) = (dst.device_tensor()?, src.device_tensor()?);
        crate::ops::index::index_copy_in_place(&dst, 0, &*rows.device_tensor()?, &src)
    })();
    super::run("write_rows", written);
}
