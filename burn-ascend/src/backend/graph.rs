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

/// The rows a step writes to one cache: each token's cache row is `rows` side by side along the
/// last dim (one tensor, or several that make it up, such as MLA's latent and rotary rows).
#[derive(Debug, Clone, Copy)]
pub struct CacheWrite<'a> {
    /// The cache `[slots, heads, width]`, written in place.
    pub cache: &'a Tensor<Ascend, 3>,
    /// The step's rows `[T, heads, w_i]`, the `w_i` adding up to `width`.
    pub rows: &'a [Tensor<Ascend, 3>],
}

/// Writes the step's rows at `slots [T]` (int32 or int64, distinct) of each cache, in place and
/// in stream order, as [`write_rows`] does for one. With one or two row tensors in all (keys and
/// values, or MLA's latent and rotary rows of one cache of one head) this is one launch of the
/// `kv_cache_write` kernel, which writes the rows of several tensors straight into their columns
/// of the cache rows; otherwise, or on a device without the kernel, each cache's rows are joined
/// and written by aclnnInplaceIndexCopy. Fails as the backend's tensor ops do (a panic that
/// [`crate::try_run`] returns as the error), naming the shapes.
pub fn write_cache(slots: &Tensor<Ascend, 1, Int>, writes: &[CacheWrite<'_>]) {
    super::run("write_cache", cache_write(slots, writes));
}

fn cache_write(slots: &Tensor<Ascend, 1, Int>, writes: &[CacheWrite<'_>]) -> AclResult<()> {
    use crate::ops::copy::{cat, reshape_view};
    use crate::ops::fused::{kv_cache_write, CachePart};
    use crate::ops::index::index_copy_in_place;
    use crate::ops::AscendTensor as Core;
    let core = |t: &dyn StaticTensor| t.device_tensor().map(AscendTensor::into_inner);
    let slots = core(slots)?;
    let mut caches = Vec::with_capacity(writes.len());
    let mut rows = Vec::with_capacity(writes.len());
    for w in writes {
        let cache = core(w.cache)?;
        let parts: Vec<Core> = w.rows.iter().map(|r| core(r)).collect::<AclResult<_>>()?;
        let (heads, width) = (cache.shape()[1], cache.shape()[2]);
        let fits = !parts.is_empty()
            && parts.iter().all(|r| r.shape()[1] == heads)
            && parts.iter().map(|r| r.shape()[2]).sum::<usize>() == width;
        if !fits {
            let shapes: Vec<String> = parts.iter().map(Core::describe).collect();
            return Err(AclError::InvalidArgument(format!(
                "write_cache: rows {} side by side do not make up the rows of the cache {}",
                shapes.join(", "),
                cache.describe()
            )));
        }
        caches.push(cache);
        rows.push(parts);
    }
    let tensors: usize = rows.iter().map(Vec::len).sum();
    // The kernel writes column ranges of flattened cache rows: a cache of several row tensors
    // qualifies only with one head, where each tensor's columns are one range.
    let columns = rows
        .iter()
        .zip(&caches)
        .all(|(r, c)| r.len() == 1 || c.shape()[1] == 1);
    if tensors <= 2 && columns && slots.ctx().has_kernel("kv_cache_write") {
        let flat = |t: &Core| {
            let s = t.shape();
            reshape_view(t, vec![s[0], s[1] * s[2]])
        };
        let flat_caches: Vec<Core> = caches.iter().map(flat).collect::<AclResult<_>>()?;
        let mut owned = Vec::with_capacity(tensors);
        for (cache, parts) in flat_caches.iter().zip(&rows) {
            let mut offset = 0;
            for part in parts {
                let part = flat(part)?;
                let cols = part.shape()[1];
                owned.push((cache, part, offset));
                offset += cols;
            }
        }
        let parts: Vec<CachePart<'_, Core>> = owned
            .iter()
            .map(|(cache, rows, offset)| CachePart {
                cache: *cache,
                rows,
                offset: *offset,
            })
            .collect();
        return kv_cache_write(&slots, &parts);
    }
    for (cache, parts) in caches.iter().zip(&rows) {
        let joined = match parts.as_slice() {
            [one] => one.clone(),
            many => cat(many, 2)?,
        };
        index_copy_in_place(cache, 0, &slots, &joined)?;
    }
    Ok(())
}
