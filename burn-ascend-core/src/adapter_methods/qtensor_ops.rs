//! The shared part of Burn's `QTensorOps` and their helpers.

/// The `QTensorOps` methods whose text is the same for Burn 0.21 and 0.22, for each adapter's
/// `impl QTensorOps<Ascend> for Ascend` (the methods that differ stand beside the invocation).
#[macro_export]
macro_rules! adapter_qtensor_ops {
    () => {
        fn q_to_device(
            tensor: QuantizedTensor<Ascend>,
            device: &Device<Ascend>,
        ) -> QuantizedTensor<Ascend> {
            AscendQTensor {
                values: run(
                    "q_to_device",
                    copy::to_device(&tensor.values, &device.into()),
                ),
                scales: run(
                    "q_to_device",
                    copy::to_device(&tensor.scales, &device.into()),
                ),
                scheme: tensor.scheme,
            }
        }

        fn q_reshape(tensor: QuantizedTensor<Ascend>, shape: Shape) -> QuantizedTensor<Ascend> {
            layout_op(tensor, |t| {
                run("q_reshape", copy::reshape(&t, shape.to_vec()))
            })
        }

        async fn q_into_data(
            tensor: QuantizedTensor<Ascend>,
        ) -> Result<TensorData, ExecutionError> {
            let shape = tensor.values.shape().to_vec();
            let read = |e: AclError| ExecutionError::WithContext {
                reason: format!(
                    "burn-ascend: reading quantized {} back: {e}",
                    tensor.values.describe()
                ),
            };
            let mut bytes =
                creation::to_bytes_many(cores(&[tensor.values.clone(), tensor.scales.clone()]))
                    .map_err(read)?;
            let scale_bytes = bytes.pop().expect("two tensors were read");
            let values: Vec<i8> = bytes
                .pop()
                .expect("two tensors were read")
                .into_iter()
                .map(|b| b as i8)
                .collect();
            let scales: Vec<f32> = scale_bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            Ok(stored(values, shape, tensor.scheme, &scales))
        }

        fn q_expand(tensor: QuantizedTensor<Ascend>, shape: Shape) -> QuantizedTensor<Ascend> {
            layout_op(tensor, |t| expand(t, shape))
        }

        fn q_swap_dims(
            tensor: QuantizedTensor<Ascend>,
            dim1: usize,
            dim2: usize,
        ) -> QuantizedTensor<Ascend> {
            layout_op(tensor, |t| {
                t.with_layout(t.layout().swap_dims(dim1, dim2)).into()
            })
        }

        fn q_permute(tensor: QuantizedTensor<Ascend>, axes: &[usize]) -> QuantizedTensor<Ascend> {
            layout_op(tensor, |t| t.with_layout(t.layout().permute(axes)).into())
        }

        fn q_flip(tensor: QuantizedTensor<Ascend>, axes: &[usize]) -> QuantizedTensor<Ascend> {
            layout_op(tensor, |t| run("q_flip", copy::flip(&t, axes)))
        }

        fn q_select(
            tensor: QuantizedTensor<Ascend>,
            dim: usize,
            indices: IntTensor<Ascend>,
        ) -> QuantizedTensor<Ascend> {
            layout_op(tensor, |t| {
                run("q_select", index::select_index(&t, dim, &indices))
            })
        }

        fn q_slice(tensor: QuantizedTensor<Ascend>, slices: &[Slice]) -> QuantizedTensor<Ascend> {
            layout_op(tensor, |t| {
                let s = dim_slices(t.shape(), slices);
                run("q_slice", copy::slice(&t, &s))
            })
        }

        fn q_gather(
            dim: usize,
            tensor: QuantizedTensor<Ascend>,
            indices: IntTensor<Ascend>,
        ) -> QuantizedTensor<Ascend> {
            // Per tensor, gathering the values keeps the scale exactly (Burn's default would
            // re-derive it from the gathered values).
            layout_op(tensor, |t| {
                run("q_gather", index::gather(dim, &t, &indices))
            })
        }
    };
}

/// The helpers of both adapters' `QTensorOps` whose text is the same for Burn 0.21 and 0.22,
/// for each adapter's `qtensor_ops` module.
#[macro_export]
macro_rules! adapter_qtensor_helpers {
    () => {
        /// The integer range of a scheme's values (Burn stores all of them in I8).
        fn value_range(scheme: &QuantScheme) -> (f64, f64) {
            match scheme.value {
                QuantValue::Q8F
                | QuantValue::Q8S
                | QuantValue::Q4F
                | QuantValue::Q4S
                | QuantValue::Q2F
                | QuantValue::Q2S => {
                    let (a, b) = scheme.value.range();
                    (a as f64, b as f64)
                }
                other => raise(AscendError::invalid(
                    "quantize",
                    format!("quantization to {other:?} is not supported (integer schemes Q8F/Q8S/Q4F/Q4S/Q2F/Q2S only)"),
                )),
            }
        }

        /// `op` on the values under the same scales (per tensor), or on the dequantized tensor,
        /// quantized again (per block).
        fn layout_op(
            tensor: AscendQTensor,
            op: impl FnOnce(AscendTensor) -> AscendTensor,
        ) -> AscendQTensor {
            match tensor.granularity() {
                Granularity::Tensor => AscendQTensor {
                    values: op(tensor.values),
                    ..tensor
                },
                Granularity::Block(_) => {
                    let scheme = tensor.scheme;
                    let float = Ascend::dequantize(tensor, FloatDType::F32);
                    Ascend::quantize_dynamic(op(float), &scheme)
                }
            }
        }
    };
}
