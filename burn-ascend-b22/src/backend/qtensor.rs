//! The quantized tensor primitive: quantized values and their scales on the device, with the
//! scheme.

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
        granularity(&self.scheme, self.values.shape())
    }
}

/// How a scheme shares its scales over a tensor of `shape`. The core quantizes per tensor or
/// per run of consecutive row-major elements; Burn 0.22's blocks are rectangles, which are
/// such runs when the block is 1-D (`[b]`, extent 1 on the other dims) and divides the last
/// dim. Other schemes (multi-dim blocks, two scale levels, scales not stored as f32, lookup
/// tables) are refused by name.
pub(crate) fn granularity(scheme: &QuantScheme, shape: &[usize]) -> Granularity {
    use burn_backend::quantization::{QuantMode, ScaleDtype};
    let last = shape.last().copied().unwrap_or(1);
    let supported = match (scheme.block_size(), scheme.tensor_scale()) {
        _ if scheme.mode != QuantMode::Symmetric || scheme.scale_dtype() != ScaleDtype::F32 => None,
        (None, Some(_)) => Some(Granularity::Tensor),
        (Some(block), None) => match block.as_slice() {
            [b] if *b > 0 && last % *b as usize == 0 => Some(Granularity::Block(*b as usize)),
            _ => None,
        },
        _ => None,
    };
    supported.unwrap_or_else(|| {
        raise(AscendError::invalid(
            "quantization",
            format!(
                "scheme {scheme:?} on a {shape:?} tensor is not supported: symmetric, f32 scales, \
                 one level, per tensor or per 1-D block dividing the last dim"
            ),
        ))
    })
}

impl TensorMetadata for AscendQTensor {
    type Device = AscendDevice;

    fn dtype(&self) -> DType {
        DType::QFloat(self.scheme)
    }

    fn shape(&self) -> Shape {
        TensorMetadata::shape(&self.values)
    }

    fn rank(&self) -> usize {
        self.values.shape().len()
    }

    fn device(&self) -> AscendDevice {
        TensorMetadata::device(&self.values)
    }

    /// Never in place: values and scales are replaced together.
    fn can_mut(&self) -> bool {
        false
    }
}
