//! The tensor primitive of the Burn adapter: the core's tensor under a local type.

use std::ops::Deref;

use bytemuck::TransparentWrapper;

use super::*;
use crate::ops;

// The tensor type, its conversions and `Lift`, the same in both adapters
// (burn-ascend-core's adapter_methods).
burn_ascend_core::adapter_tensor!();

impl ops::fused::Operand for AscendTensor {
    fn dims(&self) -> &[usize] {
        self.0.shape()
    }

    fn data_type(&self) -> DataType {
        self.0.dtype()
    }
}

impl TensorMetadata for AscendTensor {
    fn dtype(&self) -> DType {
        burn_dtype(self.0.dtype())
    }

    fn shape(&self) -> Shape {
        Shape::from(self.0.shape().to_vec())
    }

    fn rank(&self) -> usize {
        self.0.shape().len()
    }
}

/// Values that are the same in the core and the adapter.
macro_rules! unchanged {
    ($($t:ty),*) => {$(
        impl Lift for $t {
            type Out = $t;
            fn lift(self) -> $t {
                self
            }
        }
    )*};
}

unchanged!(
    (),
    bool,
    Arc<DeviceContext>,
    ops::fused::DecodeDims,
    burn_ascend_kernels::tiling::ExtendShape,
    ops::fused::DecodeAttentionTensors,
    ops::fused::QuantRouting,
    ops::fused::Permuted,
    ops::fused::Gating,
    ops::flash_attention::FlashSaved,
    ops::deform::DeformGrads
);
