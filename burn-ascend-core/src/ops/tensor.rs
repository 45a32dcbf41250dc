//! The tensor primitive: a shared device buffer, a strided layout and an element type.
//!
//! A buffer may be *deferred*: a lazily dequantized tensor (`Ascend::dequantize` of a weight
//! the int8 matmul paths take) holds the int8 values and scales it is computed from, and no
//! float buffer. A matmul that recognises it ([`AscendTensor::dequantized_from`]) runs the int8
//! path on the values; any other reader of the elements goes through `Storage::buffer`, the
//! one point that materialises it (once, in stream order, under a lock: clones and views share
//! the storage across threads).

use std::sync::{Arc, Mutex, OnceLock};

use super::layout::Layout;
use super::quant::Granularity;
use crate::acl::cache::View;
use crate::acl::handles::TensorDesc;
use crate::acl::{AclError, AclResult, DataType};
use crate::runtime::{DeviceContext, DeviceStorage};

/// A tensor on an Ascend device (float, int and bool tensors alike). Views share `storage`.
#[derive(Clone, Debug)]
pub struct AscendTensor {
    storage: Arc<Storage>,
    pub(crate) layout: Layout,
    pub(crate) dtype: DataType,
}

/// What a lazily dequantized tensor is computed from: `values * scales` as its dtype, in the
/// values' shape (row-major, contiguous).
#[derive(Clone, Debug)]
pub struct Dequantized {
    /// The quantized values (I8).
    pub values: AscendTensor,
    /// The scales (F32, `[1]` per tensor or one per block).
    pub scales: AscendTensor,
    /// How the scales are shared.
    pub granularity: Granularity,
}

/// The elements of a tensor: a device buffer, or the recipe of a deferred one.
struct Storage {
    ctx: Arc<DeviceContext>,
    buffer: OnceLock<DeviceStorage>,
    /// Set for a lazily dequantized tensor (with its float dtype); its buffer is filled on
    /// first read.
    deferred: Option<(Dequantized, DataType)>,
    /// Held while materialising, so that concurrent first readers launch it once.
    materialising: Mutex<()>,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage")
            .field("buffer", &self.buffer.get())
            .field("deferred", &self.deferred)
            .finish()
    }
}

impl Storage {
    fn ready(buffer: DeviceStorage) -> Self {
        Self {
            ctx: buffer.context().clone(),
            buffer: OnceLock::from(buffer),
            deferred: None,
            materialising: Mutex::new(()),
        }
    }

    /// The device buffer. The one materialisation point of a deferred tensor: its
    /// dequantization is launched on the first call (on the context's stream, so before the
    /// work of the caller that reads it), and every later call returns the same buffer.
    fn buffer(&self) -> AclResult<&DeviceStorage> {
        if let Some(b) = self.buffer.get() {
            return Ok(b);
        }
        let _one = self.materialising.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = self.buffer.get() {
            return Ok(b);
        }
        let (from, dtype) = self
            .deferred
            .as_ref()
            .expect("a storage without a buffer is deferred");
        if self.ctx.is_capturing() {
            // The dequantization would be recorded, not run: the buffer would hold nothing
            // until a replay, yet outlive the capture as the tensor's data.
            return Err(AclError::InvalidArgument(format!(
                "a lazily dequantized {:?} {dtype} tensor is first read during a graph capture; \
                 read it (or run it through an op) before capturing",
                from.values.shape()
            )));
        }
        let dense = super::quant::dequantize(&from.values, &from.scales, from.granularity, *dtype)?;
        // A dense tensor of its own (the dequantization's result is, unless it aliases).
        let dense = if dense.layout.is_contiguous()
            && dense.layout.offset == 0
            && Arc::strong_count(&dense.storage) == 1
        {
            dense
        } else {
            super::copy::contiguous_copy(&dense)?
        };
        let storage = Arc::into_inner(dense.storage).expect("a tensor of its own");
        let buffer = storage
            .buffer
            .into_inner()
            .expect("a dequantized tensor is materialised");
        Ok(self.buffer.get_or_init(|| buffer))
    }

    fn ptr(&self) -> *mut std::ffi::c_void {
        match self.buffer() {
            Ok(b) => b.ptr(),
            Err(e) => crate::error::raise(crate::AscendError::from_acl("dequantize", &e)),
        }
    }
}

impl AscendTensor {
    /// A fresh, uninitialised, contiguous tensor. A shape whose element count or byte size
    /// does not fit the address space is an error naming it (it would otherwise wrap).
    pub fn empty(ctx: &Arc<DeviceContext>, shape: Vec<usize>, dtype: DataType) -> AclResult<Self> {
        let bytes = shape
            .iter()
            .try_fold(dtype.size(), |n, &d| n.checked_mul(d))
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or_else(|| {
                crate::acl::AclError::InvalidArgument(format!(
                    "a {shape:?} {dtype} tensor holds more bytes than an address space can"
                ))
            })?;
        let layout = Layout::contiguous(shape);
        let storage = ctx.alloc(bytes)?;
        Ok(Self {
            storage: Arc::new(Storage::ready(storage)),
            layout,
            dtype,
        })
    }

    /// `values * scales` as `dtype`, deferred: nothing is launched or allocated until the
    /// tensor is read (see `Storage::buffer`) or a matmul takes it as its int8 weight.
    pub fn dequantized_lazily(from: Dequantized, dtype: DataType) -> Self {
        Self {
            storage: Arc::new(Storage {
                ctx: from.values.ctx().clone(),
                buffer: OnceLock::new(),
                deferred: Some((from.clone(), dtype)),
                materialising: Mutex::new(()),
            }),
            layout: Layout::contiguous(from.values.shape().to_vec()),
            dtype,
        }
    }

    /// What this tensor is a lazy dequantization of, if it is one seen whole: a contiguous
    /// view of all its elements (the tensor itself, or a reshape of it such as a weight given
    /// leading unit dims). Whether or not it has been materialised since.
    pub fn dequantized_from(&self) -> Option<&Dequantized> {
        let (from, _) = self.storage.deferred.as_ref()?;
        let whole = self.layout.offset == 0
            && self.layout.is_contiguous()
            && self.layout.numel() == from.values.layout.numel();
        whole.then_some(from)
    }

    /// The device buffer this view lies in, materialising a lazily dequantized tensor (the
    /// error is its dequantization's: out of memory, or a first read during a graph capture).
    /// For a write into the buffer (`burn_ascend::graph::write`) or a read of its bytes.
    pub fn storage(&self) -> AclResult<&DeviceStorage> {
        self.storage.buffer()
    }

    /// The device context holding the data.
    pub fn ctx(&self) -> &Arc<DeviceContext> {
        &self.storage.ctx
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.layout.shape
    }

    /// The element type.
    pub fn dtype(&self) -> DataType {
        self.dtype
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// True when no other tensor or view shares this tensor's storage and the tensor covers
    /// all of its buffer, densely and in order: writing it in place then changes no other value
    /// (for adapters whose framework reuses buffers in place, Burn 0.22's
    /// `TensorMetadata::can_mut`). A lazily dequantized tensor not read yet has no buffer: false.
    pub fn is_unique(&self) -> bool {
        Arc::strong_count(&self.storage) == 1
            && self.layout.offset == 0
            && self.layout.is_contiguous()
            && self
                .storage
                .buffer
                .get()
                .is_some_and(|b| self.layout.numel() * self.dtype.size() == b.bytes())
    }

    /// The device address of the storage this view lies in (materialising a lazily
    /// dequantized tensor; a failure to is raised as the op's error).
    pub fn storage_ptr(&self) -> *mut std::ffi::c_void {
        self.storage.ptr()
    }

    /// The same storage under another layout.
    pub fn with_layout(&self, layout: Layout) -> Self {
        Self {
            storage: self.storage.clone(),
            layout,
            dtype: self.dtype,
        }
    }

    /// This view as `aclCreateTensor` takes it (an argument of `aclnn_cached!`; materialising
    /// a lazily dequantized tensor, a failure to raised as the op's error).
    pub fn view(&self) -> View<'_> {
        match self.try_view() {
            Ok(v) => v,
            Err(e) => crate::error::raise(crate::AscendError::from_acl("dequantize", &e)),
        }
    }

    fn try_view(&self) -> AclResult<View<'_>> {
        let buffer = self.storage()?;
        Ok(View {
            shape: &self.layout.shape,
            strides: &self.layout.strides,
            offset: self.layout.offset,
            dtype: self.dtype,
            storage_elems: buffer.bytes() / self.dtype.size(),
            base: buffer.ptr(),
            owner: crate::acl::handles::OpLauncher::context_id(&**self.ctx()),
        })
    }

    /// An `aclTensor` describing this view, lent by the thread's descriptor cache.
    pub fn desc(&self) -> AclResult<TensorDesc<'static>> {
        // SAFETY: the storage holds `bytes / size` elements and outlives the descriptor's use
        // (it is freed in stream order after the last operator that reads it).
        unsafe { TensorDesc::cached(self.ctx().bind(), &self.try_view()?) }
    }

    /// An `aclTensor` of its own describing this view, for a tensor list (which takes
    /// ownership) or an operator that rewrites its descriptor (Nonzero).
    pub fn desc_owned(&self) -> AclResult<TensorDesc<'static>> {
        // SAFETY: as for `desc`.
        unsafe { self.try_view()?.describe(self.ctx().bind()) }
    }

    /// `[2, 3] DT_FLOAT`, for error messages.
    pub fn describe(&self) -> String {
        format!("{:?} {}", self.layout.shape, self.dtype)
    }
}
