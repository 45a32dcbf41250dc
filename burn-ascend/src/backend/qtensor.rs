//! The quantized tensor primitive: quantized values and their scales on the device, with the
//! scheme.

use burn_backend::quantization::QuantLevel;
use burn_backend::QTensorPrimitive;
use burn_std::QuantScheme;

use crate::ops::quant::Granularity;

use super::*;

/// A quantized tensor: I8 values and F32 scales (one per tensor, or one per block of
/// consecutive row-major elements) as device tensors, and the quantization scheme. The values
/// are unpacked on the device whatever the scheme's store; the scheme keeps the store the data
/// came with, so that reading it back gives the same scheme.
#[derive(Clone, Debug)]
pub struct AscendQTensor {
    /// The quantized values (I8, unpacked).
    pub values: AscendTensor,
    /// The scales (F32, `[1]` per tensor or `[blocks]` per block).
    pub scales: AscendTensor,
    /// How the values were quantized (and how the host stores them).
    pub scheme: QuantScheme,
}

impl AscendQTensor {
    /// How the scales are shared, from the scheme.
    pub fn granularity(&self) -> Granularity {
        granularity(&self.scheme)
    }
}

/// How a scheme shares its scales.
pub(crate) fn granularity(scheme: &QuantScheme) -> Granularity {
    match scheme.level {
        QuantLevel::Tensor => Granularity::Tensor,
        QuantLevel::Block(size) => Granularity::Block(size.num_elements()),
    }
}

impl QTensorPrimitive for AscendQTensor {
    fn scheme(&self) -> &QuantScheme {
        &self.scheme
    }

    fn default_scheme() -> QuantScheme {
        QuantScheme::default().with_store(burn_backend::quantization::QuantStore::Native)
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
