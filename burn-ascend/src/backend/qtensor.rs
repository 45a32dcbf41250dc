//! The quantized tensor primitive: quantized values on the device with their scheme.

use burn_backend::QTensorPrimitive;
use burn_std::QuantScheme;

use super::*;

/// A quantized tensor: the quantized values as a device tensor and the quantization scheme.
#[derive(Clone, Debug)]
pub struct AscendQTensor {
    /// The quantized values.
    pub values: AscendTensor,
    /// How the values were quantized.
    pub scheme: QuantScheme,
}

impl QTensorPrimitive for AscendQTensor {
    fn scheme(&self) -> &QuantScheme {
        &self.scheme
    }
}

impl TensorMetadata for AscendQTensor {
    fn dtype(&self) -> DType {
        DType::QFloat(self.scheme)
    }

    fn shape(&self) -> Shape {
        TensorMetadata::shape(&self.values)
    }

    fn rank(&self) -> usize {
        self.values.shape().len()
    }
}
