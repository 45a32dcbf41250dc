//! `burn_ir::BackendIr` for [`Ascend`]: how Burn's IR interpreter (burn-remote's server, burn-
//! router) holds our tensors between ops.

use burn_ir::{BackendIr, TensorHandle};

use super::*;

/// A tensor of any kind as Burn's IR interpreter holds it.
#[derive(Debug, Clone)]
pub enum AscendHandle {
    /// A float, int or bool tensor.
    Tensor(AscendTensor),
    /// A quantized tensor (values and scales).
    Quantized(AscendQTensor),
}

impl AscendHandle {
    fn tensor(self, kind: &str) -> AscendTensor {
        match self {
            Self::Tensor(t) => t,
            // The interpreter keeps each handle with the kind it was registered as.
            Self::Quantized(_) => unreachable!("a quantized handle used as a {kind} tensor"),
        }
    }
}

/// The tensor of `handle`, under the handle's recorded shape (a view when it differs).
fn shaped(handle: TensorHandle<AscendHandle>, kind: &str) -> AscendTensor {
    let t = handle.handle.tensor(kind);
    if t.shape() == handle.shape.as_slice() {
        t
    } else {
        Ascend::float_reshape(t, handle.shape)
    }
}

impl BackendIr for Ascend {
    type Handle = AscendHandle;

    fn float_tensor(handle: TensorHandle<Self::Handle>) -> FloatTensor<Self> {
        shaped(handle, "float")
    }

    fn int_tensor(handle: TensorHandle<Self::Handle>) -> IntTensor<Self> {
        shaped(handle, "int")
    }

    fn bool_tensor(handle: TensorHandle<Self::Handle>) -> BoolTensor<Self> {
        shaped(handle, "bool")
    }

    fn quantized_tensor(handle: TensorHandle<Self::Handle>) -> QuantizedTensor<Self> {
        match handle.handle {
            AscendHandle::Quantized(q) => q,
            AscendHandle::Tensor(_) => {
                unreachable!("a float/int/bool handle used as a quantized tensor")
            }
        }
    }

    fn float_tensor_handle(tensor: FloatTensor<Self>) -> Self::Handle {
        AscendHandle::Tensor(tensor)
    }

    fn int_tensor_handle(tensor: IntTensor<Self>) -> Self::Handle {
        AscendHandle::Tensor(tensor)
    }

    fn bool_tensor_handle(tensor: BoolTensor<Self>) -> Self::Handle {
        AscendHandle::Tensor(tensor)
    }

    fn quantized_tensor_handle(tensor: QuantizedTensor<Self>) -> Self::Handle {
        AscendHandle::Quantized(tensor)
    }
}
