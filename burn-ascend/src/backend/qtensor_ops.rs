//! `QTensorOps` for [`Ascend`]: one line per method onto the op-mapping layer.

use burn_backend::quantization::QuantizationParametersPrimitive;
use burn_std::QuantScheme;

use super::*;

impl QTensorOps<Ascend> for Ascend {
    fn q_from_data(_data: TensorData, _device: &Device<Ascend>) -> QuantizedTensor<Ascend> {
        unsupported("q_from_data")
    }

    fn quantize(
        _tensor: FloatTensor<Ascend>,
        _scheme: &QuantScheme,
        _qparams: QuantizationParametersPrimitive<Ascend>,
    ) -> QuantizedTensor<Ascend> {
        unsupported("quantize")
    }

    fn dequantize(_tensor: QuantizedTensor<Ascend>, _dtype: FloatDType) -> FloatTensor<Ascend> {
        unsupported("dequantize")
    }

    fn q_device(_tensor: &QuantizedTensor<Ascend>) -> Device<Ascend> {
        unsupported("q_device")
    }

    fn q_to_device(
        _tensor: QuantizedTensor<Ascend>,
        _device: &Device<Ascend>,
    ) -> QuantizedTensor<Ascend> {
        unsupported("q_to_device")
    }

    fn q_reshape(_tensor: QuantizedTensor<Ascend>, _shape: Shape) -> QuantizedTensor<Ascend> {
        unsupported("q_reshape")
    }

    async fn q_into_data(_tensor: QuantizedTensor<Ascend>) -> Result<TensorData, ExecutionError> {
        unsupported("q_into_data")
    }

    fn q_expand(_tensor: QuantizedTensor<Ascend>, _shape: Shape) -> QuantizedTensor<Ascend> {
        unsupported("q_expand")
    }

    fn q_swap_dims(
        _tensor: QuantizedTensor<Ascend>,
        _dim1: usize,
        _dim2: usize,
    ) -> QuantizedTensor<Ascend> {
        unsupported("q_swap_dims")
    }

    fn q_permute(_tensor: QuantizedTensor<Ascend>, _axes: &[usize]) -> QuantizedTensor<Ascend> {
        unsupported("q_permute")
    }

    fn q_flip(_tensor: QuantizedTensor<Ascend>, _axes: &[usize]) -> QuantizedTensor<Ascend> {
        unsupported("q_flip")
    }

    fn q_select(
        _tensor: QuantizedTensor<Ascend>,
        _dim: usize,
        _indices: IntTensor<Ascend>,
    ) -> QuantizedTensor<Ascend> {
        unsupported("q_select")
    }

    fn q_slice(_tensor: QuantizedTensor<Ascend>, _slices: &[Slice]) -> QuantizedTensor<Ascend> {
        unsupported("q_slice")
    }
}
