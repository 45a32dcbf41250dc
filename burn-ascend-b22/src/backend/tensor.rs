//! The tensor primitive of the Burn 0.22 adapter: the core's tensor under a local type.

use std::ops::Deref;

use bytemuck::TransparentWrapper;

use super::*;
use crate::ops;

// The tensor type, its conversions and `Lift`, the same in both adapters
// (burn-ascend-core's adapter_methods).
burn_ascend_core::adapter_tensor!();

impl TensorMetadata for AscendTensor {
    type Device = AscendDevice;

    fn dtype(&self) -> DType {
        burn_dtype(self.0.dtype())
    }

    fn shape(&self) -> Shape {
        Shape::from(self.0.shape().to_vec())
    }

    fn rank(&self) -> usize {
        self.0.shape().len()
    }

    fn device(&self) -> AscendDevice {
        self.0.ctx().device().into()
    }

    /// Whether Burn may reuse the buffer in place: no other tensor or view shares it and this
    /// tensor covers all of it, densely.
    fn can_mut(&self) -> bool {
        self.0.is_unique()
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

unchanged!((), Arc<DeviceContext>, ops::deform::DeformGrads);
