//! `QTensorOps` for [`Ascend`]: one line per method onto the op-mapping layer.
//!
//! Layout ops of per-tensor quantized tensors are views or copies of the I8 values under the
//! same scale. Per-block scales are tied to the row-major order of the elements, so for those
//! (as in Burn's reference) the op runs on the dequantized tensor, which is quantized again
//! with fresh scales. Arithmetic (`q_matmul` included) keeps Burn's dequantize-op-quantize
//! defaults: the 0.21 adapter's int8 matmul paths are not ported.

use burn_backend::quantization::{
    QuantStore, QuantValue, QuantizationParametersPrimitive, QuantizedBytes,
};
use burn_std::QuantScheme;

use crate::ops::quant::{self, Granularity};

use super::qtensor::granularity;
use super::*;

// The helpers both adapters share (burn-ascend-core's adapter_methods).
burn_ascend_core::adapter_qtensor_helpers!();

/// The values of `data` in the byte layout of `scheme`'s store: native I8, or packed into
/// little-endian u32 words (innermost dim, as Burn packs), followed by the f32 scales.
fn stored(values: Vec<i8>, shape: Vec<usize>, scheme: QuantScheme, scales: &[f32]) -> TensorData {
    let sub_byte = matches!(
        scheme.value,
        QuantValue::Q4F | QuantValue::Q4S | QuantValue::Q2F | QuantValue::Q2S
    );
    match scheme.store {
        QuantStore::PackedU32(_) if sub_byte => {
            let bits = scheme.value.size_bits();
            let per_word = 32 / bits;
            let mask = (1u32 << bits) - 1;
            let mut bytes: Vec<u8> = values
                .chunks(per_word)
                .map(|chunk| {
                    chunk
                        .iter()
                        .enumerate()
                        .fold(0u32, |w, (i, &v)| w | ((v as u32 & mask) << (i * bits)))
                })
                .flat_map(u32::to_le_bytes)
                .collect();
            bytes.extend(scales.iter().flat_map(|s| s.to_le_bytes()));
            TensorData::from_bytes_vec(bytes, shape, DType::QFloat(scheme))
        }
        // 8-bit values take the same bytes packed four to a word as native.
        _ => TensorData::quantized(values, shape, scheme, scales, None),
    }
}

impl QTensorOps<Ascend> for Ascend {
    // The methods both adapters share (burn-ascend-core's adapter_methods); below, this
    // Burn version's own.
    burn_ascend_core::adapter_qtensor_ops!();

    fn q_from_data(data: TensorData, device: &Device<Ascend>) -> QuantizedTensor<Ascend> {
        let DType::QFloat(scheme) = data.dtype() else {
            raise(AscendError::invalid(
                "q_from_data",
                format!("needs quantized data, got {:?}", data.dtype()),
            ));
        };
        let shape = data.shape().to_vec();
        granularity(&scheme, &shape);
        // Packed stores are unpacked on the way in: the device holds one I8 per value, and the
        // scheme (with its store) goes back out with the data.
        let (values, decoded) = QuantizedBytes {
            bytes: data.into_bytes(),
            scheme,
            shape: Shape::from(shape.clone()),
        }
        .into_vec_i8();
        let scales = decoded.block;
        let ctx = context(device);
        let bytes: Vec<u8> = values.iter().map(|&v| v as u8).collect();
        let scale_bytes: Vec<u8> = scales.iter().flat_map(|s| s.to_le_bytes()).collect();
        AscendQTensor {
            values: run(
                "q_from_data",
                creation::from_bytes(&ctx, shape, DataType::I8, &bytes),
            ),
            scales: run(
                "q_from_data",
                creation::from_bytes(&ctx, vec![scales.len()], DataType::F32, &scale_bytes),
            ),
            scheme,
        }
    }

    fn quantize(
        tensor: FloatTensor<Ascend>,
        scheme: &QuantScheme,
        qparams: QuantizationParametersPrimitive<Ascend>,
    ) -> QuantizedTensor<Ascend> {
        let range = value_range(scheme);
        let g = granularity(scheme, tensor.shape());
        let scales = run("quantize", quant::validated_scales(&qparams.scales));
        let values = run("quantize", quant::quantize(&tensor, &scales, g, range));
        AscendQTensor {
            values,
            scales,
            scheme: *scheme,
        }
    }

    fn quantize_dynamic(
        tensor: FloatTensor<Ascend>,
        scheme: &QuantScheme,
    ) -> QuantizedTensor<Ascend> {
        // Blocks are runs of consecutive row-major elements (Burn's reference), which need not
        // line up with the last dim, so the scales are computed here rather than by Burn's
        // default range computation.
        let range = value_range(scheme);
        let g = granularity(scheme, tensor.shape());
        let scales = run("quantize_dynamic", quant::dynamic_scales(&tensor, g, range));
        let values = run(
            "quantize_dynamic",
            quant::quantize(&tensor, &scales, g, range),
        );
        AscendQTensor {
            values,
            scales,
            scheme: *scheme,
        }
    }

    fn dequantize(tensor: QuantizedTensor<Ascend>, dtype: FloatDType) -> FloatTensor<Ascend> {
        run(
            "dequantize",
            quant::dequantize(
                &tensor.values,
                &tensor.scales,
                tensor.granularity(),
                float_type(dtype),
            ),
        )
    }
}
