//! Whether a tensor owns its buffer outright, for adapters whose framework reuses buffers in
//! place (Burn 0.22's `TensorMetadata::can_mut`).

use std::sync::Arc;

use super::tensor::AscendTensor;

impl AscendTensor {
    /// True when no other tensor or view shares this tensor's storage and the tensor covers
    /// all of it, densely and in order: writing it in place then changes no other value.
    pub fn is_unique(&self) -> bool {
        Arc::strong_count(&self.storage) == 1
            && self.layout.offset == 0
            && self.layout.is_contiguous()
            && self.layout.numel() * self.dtype.size() == self.storage.bytes()
    }
}
