//! `Ascend` as a `burn-fusion` backend, so that `Fusion<Ascend>` (and `Autodiff<Fusion<Ascend>>`)
//! records the op stream lazily and runs it on the device.
//!
//! The fusers, the optimizations and `FusionBackend for Ascend` are burn-ascend-core's
//! `ascend_fusion!`, one source for both Burn adapters (see `burn_ascend_core::fusion`): runs of
//! element-wise ops as one `elementwise_program` launch, layer norm, linear and (log-)softmax as
//! Burn composes them as one `layer_norm` launch, one aclnnAddmm and one aclnnSoftmax /
//! aclnnLogSoftmax. This module adds the handle burn-fusion holds our tensors in, and
//! `BackendIr`.

use burn_backend::ops::{BoolTensorOps, FloatTensorOps, IntTensorOps};
use burn_backend::tensor::{BoolTensor, FloatTensor, IntTensor, QuantizedTensor};
use burn_backend::{Shape, TensorMetadata};
use burn_ir::{BackendIr, TensorHandle};

use super::{Ascend, AscendQTensor};
use crate::AscendTensor;

burn_ascend_core::ascend_fusion!(AscendFusionHandle);

/// A tensor of any kind as the fusion runtime holds it.
#[derive(Debug, Clone)]
pub enum AscendFusionHandle {
    /// A float, int or bool tensor.
    Tensor(AscendTensor),
    /// A quantized tensor (values and scales).
    Quantized(AscendQTensor),
}

impl AscendFusionHandle {
    fn tensor(self, kind: &str) -> AscendTensor {
        match self {
            Self::Tensor(t) => t,
            // Fusion keeps each handle with the kind it was registered as.
            Self::Quantized(_) => unreachable!("a quantized handle used as a {kind} tensor"),
        }
    }
}

impl BackendIr for Ascend {
    type Handle = AscendFusionHandle;

    fn float_tensor(handle: TensorHandle<Self::Handle>) -> FloatTensor<Self> {
        shaped(handle, "float", Ascend::float_reshape)
    }

    fn int_tensor(handle: TensorHandle<Self::Handle>) -> IntTensor<Self> {
        shaped(handle, "int", Ascend::int_reshape)
    }

    fn bool_tensor(handle: TensorHandle<Self::Handle>) -> BoolTensor<Self> {
        shaped(handle, "bool", Ascend::bool_reshape)
    }

    fn quantized_tensor(handle: TensorHandle<Self::Handle>) -> QuantizedTensor<Self> {
        match handle.handle {
            AscendFusionHandle::Quantized(q) => q,
            AscendFusionHandle::Tensor(_) => {
                unreachable!("a float/int/bool handle used as a quantized tensor")
            }
        }
    }

    fn float_tensor_handle(tensor: FloatTensor<Self>) -> Self::Handle {
        AscendFusionHandle::Tensor(tensor)
    }

    fn int_tensor_handle(tensor: IntTensor<Self>) -> Self::Handle {
        AscendFusionHandle::Tensor(tensor)
    }

    fn bool_tensor_handle(tensor: BoolTensor<Self>) -> Self::Handle {
        AscendFusionHandle::Tensor(tensor)
    }

    fn quantized_tensor_handle(tensor: QuantizedTensor<Self>) -> Self::Handle {
        AscendFusionHandle::Quantized(tensor)
    }
}

/// The tensor of a handle with the shape the op stream recorded for it. The views agree while
/// no optimization rewrites handles; one that differed would be reshaped rather than trusted.
fn shaped(
    handle: TensorHandle<AscendFusionHandle>,
    kind: &str,
    reshape: fn(AscendTensor, Shape) -> AscendTensor,
) -> AscendTensor {
    let t = handle.handle.tensor(kind);
    if TensorMetadata::shape(&t) == handle.shape {
        t
    } else {
        reshape(t, handle.shape)
    }
}
