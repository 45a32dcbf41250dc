//! The tensor primitive: a shared device buffer, a strided layout and an element type.

use std::sync::Arc;

use super::layout::Layout;
use crate::acl::cache::View;
use crate::acl::handles::TensorDesc;
use crate::acl::{AclResult, DataType};
use crate::runtime::{DeviceContext, DeviceStorage};

/// A tensor on an Ascend device (float, int and bool tensors alike). Views share `storage`.
#[derive(Clone, Debug)]
pub struct AscendTensor {
    pub(crate) storage: Arc<DeviceStorage>,
    pub(crate) layout: Layout,
    pub(crate) dtype: DataType,
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
            storage: Arc::new(storage),
            layout,
            dtype,
        })
    }

    /// The device context holding the data.
    pub fn ctx(&self) -> &Arc<DeviceContext> {
        self.storage.context()
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

    /// The device address of the storage this view lies in.
    pub fn storage_ptr(&self) -> *mut std::ffi::c_void {
        self.storage.ptr()
    }

    /// The device buffer this view lies in.
    pub fn storage(&self) -> &DeviceStorage {
        &self.storage
    }

    /// The same storage under another layout.
    pub fn with_layout(&self, layout: Layout) -> Self {
        Self {
            storage: self.storage.clone(),
            layout,
            dtype: self.dtype,
        }
    }

    /// This view as `aclCreateTensor` takes it (an argument of `aclnn_cached!`).
    pub fn view(&self) -> View<'_> {
        View {
            shape: &self.layout.shape,
            strides: &self.layout.strides,
            offset: self.layout.offset,
            dtype: self.dtype,
            storage_elems: self.storage.bytes() / self.dtype.size(),
            base: self.storage.ptr(),
            owner: crate::acl::handles::OpLauncher::context_id(&**self.ctx()),
        }
    }

    /// An `aclTensor` describing this view, lent by the thread's descriptor cache.
    pub fn desc(&self) -> AclResult<TensorDesc<'static>> {
        // SAFETY: the storage holds `bytes / size` elements and outlives the descriptor's use
        // (it is freed in stream order after the last operator that reads it).
        unsafe { TensorDesc::cached(self.ctx().bind(), &self.view()) }
    }

    /// An `aclTensor` of its own describing this view, for a tensor list (which takes
    /// ownership) or an operator that rewrites its descriptor (Nonzero).
    pub fn desc_owned(&self) -> AclResult<TensorDesc<'static>> {
        // SAFETY: as for `desc`.
        unsafe { self.view().describe(self.ctx().bind()) }
    }

    /// `[2, 3] DT_FLOAT`, for error messages.
    pub fn describe(&self) -> String {
        format!("{:?} {}", self.layout.shape, self.dtype)
    }
}
