//! `QTensorOps` for [`Ascend`]: one line per method onto the op-mapping layer.
//!
//! Layout ops of per-tensor quantized tensors are views or copies of the I8 values under the
//! same scale. Per-block scales are tied to the row-major order of the elements, so for those
//! (as in Burn's reference) the op runs on the dequantized tensor, which is quantized again
//! with fresh scales. Arithmetic keeps Burn's dequantize-op-quantize defaults, except
//! `q_matmul`, which runs symmetric int8 products on the cube's int8 paths (see [`int8_path`]).
//!
//! `dequantize` of a per-tensor int8 weight is lazy (the core's
//! [`crate::ops::AscendTensor::dequantized_lazily`]): Burn 0.21's `nn::Linear` hands `linear`
//! its weight through `TensorPrimitive::tensor`, which dequantizes, so `linear` and
//! `float_matmul` take such a weight back to its int8 values and run
//! aclnnWeightQuantBatchMatmulV2 ([`lazy_weight_matmul`]); any other reader materialises it.

use std::collections::BTreeSet;
use std::sync::Mutex;

use burn_backend::quantization::{
    QParams, QuantLevel, QuantPropagation, QuantStore, QuantValue, QuantizationParametersPrimitive,
    QuantizedBytes,
};
use burn_backend::{get_device_settings, QTensorPrimitive, TensorPrimitive};
use burn_std::QuantScheme;

use crate::ops::quant_matmul;
use crate::ops::tensor::Dequantized;

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
        _ => TensorData::quantized(values, shape, scheme, scales),
    }
}

/// The int8 matmul a `q_matmul` operand pair can run on.
enum Int8Path {
    /// Float activations times a per-tensor int8 weight: aclnnWeightQuantBatchMatmulV2.
    WeightOnly,
    /// Int8 activations (per tensor, or one scale per row) times a per-tensor int8 weight:
    /// aclnnQuantMatmulV4.
    Both,
}

/// Whether a scheme's values are symmetric int8 (Burn's Q8S, or Q8F whose range includes -128:
/// both are plain int8 to the cube).
fn int8(scheme: &QuantScheme) -> bool {
    matches!(scheme.value, QuantValue::Q8S | QuantValue::Q8F)
}

/// The int8 path for `lhs @ rhs`, if any. The weight (rhs) must be int8 per tensor: Burn's
/// blocks are runs of consecutive row-major elements, which in a `[K, N]` weight run along N
/// within one row of K, and neither operator takes scales of that shape (per-channel scales
/// are one per column, per-group ones one per run of rows). Batch dims of the weight must be
/// 1 (a Linear's weight broadcast over the activation's batch); the activation's are folded
/// into its rows. An int8 activation takes one scale for the tensor or one per row (a block of
/// exactly its last dim).
///
/// Both operators produce F16/BF16 only, so the paths run when the result is F16 or BF16 (the
/// activation's type, or for two quantized operands the device's default float type, as in
/// Burn's default); an F32 result keeps Burn's f32 dequantize-then-matmul, whose precision
/// callers of f32 rely on.
fn int8_path(lhs: &TensorPrimitive<Ascend>, rhs: &TensorPrimitive<Ascend>) -> Option<Int8Path> {
    let TensorPrimitive::QFloat(w) = rhs else {
        return None;
    };
    let ws = w.values.shape();
    let weight_ok = int8(&w.scheme)
        && w.scheme.level == QuantLevel::Tensor
        && ws.len() >= 2
        && ws[..ws.len() - 2].iter().all(|&d| d == 1);
    if !weight_ok {
        return None;
    }
    let k = ws[ws.len() - 2];
    match lhs {
        TensorPrimitive::Float(x) => {
            let shape = x.shape();
            let fits = shape.len() >= 2 && shape[shape.len() - 1] == k;
            let half = matches!(x.dtype(), DataType::F16 | DataType::BF16);
            (fits && half).then_some(Int8Path::WeightOnly)
        }
        TensorPrimitive::QFloat(x) => {
            let shape = x.values.shape();
            let per_row = match x.scheme.level {
                QuantLevel::Tensor => true,
                QuantLevel::Block(b) => b.num_elements() == k,
            };
            let fits = shape.len() >= 2 && shape[shape.len() - 1] == k;
            let target = get_device_settings::<Ascend>(&x.values.ctx().device().into()).float_dtype;
            let half = matches!(target, FloatDType::F16 | FloatDType::BF16);
            (fits && half && int8(&x.scheme) && per_row).then_some(Int8Path::Both)
        }
    }
}

/// Says once per pair of operand kinds that `q_matmul` falls back to dequantize-then-matmul.
fn note_fallback(lhs: &TensorPrimitive<Ascend>, rhs: &TensorPrimitive<Ascend>) {
    static SEEN: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let kind = |t: &TensorPrimitive<Ascend>| match t {
        TensorPrimitive::Float(x) => format!("{:?}", x.dtype()),
        TensorPrimitive::QFloat(q) => format!("{:?}", q.scheme),
    };
    let key = format!("{} @ {}", kind(lhs), kind(rhs));
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if seen.insert(key.clone()) {
        eprintln!(
            "burn-ascend: q_matmul {key} has no int8 path (the weight must be symmetric int8 per \
             tensor, an int8 activation per tensor or per row, the result F16 or BF16); \
             dequantizing, then a float matmul"
        );
    }
}

/// `lhs [.., M, K]` with its batch dims folded into rows: `[rows, K]`, and the output shape
/// `[.., M, N]`.
fn folded(shape: &[usize], n: usize) -> (Vec<usize>, Vec<usize>) {
    let k = shape[shape.len() - 1];
    let rows = shape[..shape.len() - 1].iter().product();
    let mut out = shape.to_vec();
    *out.last_mut().expect("rank >= 2") = n;
    (vec![rows, k], out)
}

/// `x [.., K] @ weight [K, N] (+ bias [N])` on aclnnWeightQuantBatchMatmulV2, x's batch dims
/// folded into rows: `[.., N]` in x's type.
fn weight_only(
    x: &CoreTensor,
    weight: &CoreTensor,
    scales: &CoreTensor,
    bias: Option<&CoreTensor>,
) -> AclResult<CoreTensor> {
    let (rows, out_shape) = folded(x.shape(), weight.shape()[1]);
    let x2 = copy::reshape(x, rows)?;
    let y = quant_matmul::weight_quant_matmul(&x2, weight, scales, bias, 0)?;
    copy::reshape(&y, out_shape)
}

/// Whether `dequantize` of `scheme` is deferred: the schemes whose weights the int8 path takes
/// (symmetric int8 per tensor), to a float type the cube takes.
fn dequantized_lazily(scheme: &QuantScheme, dtype: FloatDType) -> bool {
    int8(scheme)
        && scheme.level == QuantLevel::Tensor
        && matches!(dtype, FloatDType::F32 | FloatDType::F16 | FloatDType::BF16)
}

/// `x @ w (+ bias)` on aclnnWeightQuantBatchMatmulV2 when `w` is a lazily dequantized int8
/// weight `[1.., K, N]` seen whole and `x [.., K]` is F16 or BF16 (with at least w's rank): the
/// product of the int8 values, the float weight never materialised, in x's type (as
/// `q_matmul` gives `x.matmul(q)`). `None` where the float ops should run (materialising w);
/// an F32 activation keeps the f32 matmul, said once, as `q_matmul` does.
pub(super) fn lazy_weight_matmul(
    x: &CoreTensor,
    w: &CoreTensor,
    bias: Option<&CoreTensor>,
) -> Option<AclResult<CoreTensor>> {
    let Dequantized {
        values,
        scales,
        granularity: Granularity::Tensor,
    } = w.dequantized_from()?
    else {
        return None;
    };
    let (xs, ws) = (x.shape(), w.shape());
    let shaped = ws.len() >= 2
        && xs.len() >= ws.len()
        && ws[..ws.len() - 2].iter().all(|&d| d == 1)
        && xs[xs.len() - 1] == ws[ws.len() - 2]
        && bias.is_none_or(|b| b.shape() == [ws[ws.len() - 1]] && b.dtype().is_float());
    if !shaped {
        return None;
    }
    if !matches!(x.dtype(), DataType::F16 | DataType::BF16) {
        note_lazy_fallback(x.dtype());
        return None;
    }
    let (k, n) = (ws[ws.len() - 2], ws[ws.len() - 1]);
    Some(copy::reshape(values, vec![k, n]).and_then(|weight| weight_only(x, &weight, scales, bias)))
}

/// Says once per activation type that a lazily dequantized int8 weight is materialised for a
/// float matmul.
fn note_lazy_fallback(dtype: DataType) {
    static SEEN: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let key = format!("{dtype}");
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if seen.insert(key.clone()) {
        eprintln!(
            "burn-ascend: a {key} activation times a quantized int8 weight has no int8 path \
             (aclnnWeightQuantBatchMatmulV2 takes F16/BF16 activations); dequantizing the \
             weight, then a float matmul"
        );
    }
}

/// `lhs @ w` on `path`, in the activation's float type, or in the device's default float type
/// when both operands are quantized (as Burn's default does).
fn q_matmul_int8(
    path: Int8Path,
    lhs: TensorPrimitive<Ascend>,
    w: AscendQTensor,
) -> AclResult<CoreTensor> {
    let ws = w.values.shape().to_vec();
    let (k, n) = (ws[ws.len() - 2], ws[ws.len() - 1]);
    let weight = copy::reshape(&w.values, vec![k, n])?;
    match (path, lhs) {
        (Int8Path::WeightOnly, TensorPrimitive::Float(x)) => {
            weight_only(&x, &weight, &w.scales, None)
        }
        (Int8Path::Both, TensorPrimitive::QFloat(x)) => {
            let (rows, out_shape) = folded(x.values.shape(), n);
            let out_dtype = float_type(
                get_device_settings::<Ascend>(&x.values.ctx().device().into()).float_dtype,
            );
            let x2 = copy::reshape(&x.values, rows.clone())?;
            // One scale per row of the folded activation, or one for all of them.
            let x_scale = match x.scheme.level {
                QuantLevel::Tensor => x.scales.clone().into_inner(),
                QuantLevel::Block(_) => copy::reshape(&x.scales, vec![rows[0]])?,
            };
            let y = quant_matmul::quant_matmul(&x2, &weight, &w.scales, &x_scale, out_dtype)?;
            copy::reshape(&y, out_shape)
        }
        _ => unreachable!("int8_path pairs each path with its activation kind"),
    }
}

impl QTensorOps<Ascend> for Ascend {
    // The methods both adapters share (burn-ascend-core's adapter_methods); below, this
    // Burn version's own.
    burn_ascend_core::adapter_qtensor_ops!();

    fn q_matmul(
        lhs: TensorPrimitive<Ascend>,
        rhs: TensorPrimitive<Ascend>,
    ) -> TensorPrimitive<Ascend> {
        // Burn's default: the output is quantized again when an operand asks to propagate.
        let propagate = [&lhs, &rhs].iter().rev().find_map(|t| match t {
            TensorPrimitive::QFloat(q) if q.propagation() == QuantPropagation::Propagate => {
                Some(q.scheme)
            }
            _ => None,
        });
        let out = match int8_path(&lhs, &rhs) {
            Some(path) => {
                let TensorPrimitive::QFloat(w) = rhs else {
                    unreachable!("int8_path needs a quantized weight")
                };
                run("q_matmul", q_matmul_int8(path, lhs, w))
            }
            None => {
                note_fallback(&lhs, &rhs);
                let target = match (&lhs, &rhs) {
                    (TensorPrimitive::Float(t), _) | (_, TensorPrimitive::Float(t)) => {
                        Some(FloatDType::from(TensorMetadata::dtype(t)))
                    }
                    _ => None,
                };
                let float = |t: TensorPrimitive<Ascend>| match t {
                    TensorPrimitive::Float(f) => f,
                    TensorPrimitive::QFloat(q) => {
                        let dtype = target.unwrap_or_else(|| {
                            get_device_settings::<Ascend>(&Self::q_device(&q)).float_dtype
                        });
                        Self::dequantize(q, dtype)
                    }
                };
                let (lhs, rhs) = (float(lhs), float(rhs));
                Ascend::float_matmul(lhs, rhs)
            }
        };
        match propagate {
            Some(scheme) => TensorPrimitive::QFloat(Self::quantize_dynamic(out, &scheme)),
            None => TensorPrimitive::Float(out),
        }
    }

    fn q_from_data(data: TensorData, device: &Device<Ascend>) -> QuantizedTensor<Ascend> {
        let DType::QFloat(scheme) = data.dtype else {
            raise(AscendError::invalid(
                "q_from_data",
                format!("needs quantized data, got {:?}", data.dtype),
            ));
        };
        let shape = data.shape.to_vec();
        let num_elements = data.num_elements();
        // Packed stores are unpacked on the way in: the device holds one I8 per value, and the
        // scheme (with its store) goes back out with the data.
        let (values, QParams { scales }) = QuantizedBytes {
            bytes: data.into_bytes(),
            scheme,
            num_elements,
        }
        .into_vec_i8();
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
        let scales = run("quantize", quant::validated_scales(&qparams.scales));
        let values = run(
            "quantize",
            quant::quantize(&tensor, &scales, granularity(scheme), range),
        );
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
        let g = granularity(scheme);
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
        // Deferred where a matmul may take the int8 values instead (see `lazy_weight_matmul`).
        if dequantized_lazily(&tensor.scheme, dtype) {
            let granularity = tensor.granularity();
            return CoreTensor::dequantized_lazily(
                Dequantized {
                    values: tensor.values.into_inner(),
                    scales: tensor.scales.into_inner(),
                    granularity,
                },
                float_type(dtype),
            )
            .into();
        }
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

    fn q_device(tensor: &QuantizedTensor<Ascend>) -> Device<Ascend> {
        tensor.values.ctx().device().into()
    }
}
