//! The int8 matmul paths (aclnnDynamicQuant, aclnnWeightQuantBatchMatmulV2 and
//! aclnnQuantMatmulV4 on the emulated NPU) against the same integer math on burn-flex, the
//! operators' refusals, and Burn's `q_matmul` on them: a model quantized with Burn's own
//! `Quantizer` runs its layers' `x.matmul(weight)` on aclnnWeightQuantBatchMatmulV2 (its
//! `Linear::forward`: tests/lazy_dequantize.rs).

mod common;

use burn::module::{Module, Quantizer};
use burn::nn::{Linear, LinearConfig, Relu};
use burn::tensor::quantization::{Calibration, QuantLevel, QuantScheme, QuantStore, QuantValue};
use burn::tensor::{DType, Int, Tensor, TensorData, TensorPrimitive};
use burn_ascend::acl::aclnn;
use burn_ascend::acl::handles::Absent;
use burn_ascend::acl::{AclError, DataType};
use burn_ascend::emulator::aclnn_launches_of;
use burn_ascend::ops::quant_matmul;
use burn_ascend::ops::AscendTensor;
use burn_flex::FlexDevice;
use common::*;

/// Tests that count operator runs (a process-wide count) run one at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn flex() -> FlexDevice {
    FlexDevice
}

/// Deterministic values in `[-1, 1)` (a fixed LCG, so every run sees the same data).
fn uniform(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn int8s(n: usize, seed: u64) -> Vec<i8> {
    uniform(n, seed)
        .iter()
        .map(|v| (v * 127.0).round() as i8)
        .collect()
}

fn float_on(values: Vec<f32>, shape: [usize; 2], dtype: DType) -> AscendTensor {
    Tensor::<Ascend, 2>::from_data(TensorData::new(values, shape), (&device(), dtype))
        .into_primitive()
        .tensor()
        .into_inner()
}

fn i8_on(values: Vec<i8>, shape: Vec<usize>) -> AscendTensor {
    Tensor::<Ascend, 1, Int>::from_data(
        TensorData::new(values, [shape.iter().product::<usize>()]),
        (&device(), DType::I8),
    )
    .into_primitive()
    .into_inner()
    .reshape_to(shape)
}

trait ReshapeTo {
    fn reshape_to(self, shape: Vec<usize>) -> AscendTensor;
}

impl ReshapeTo for AscendTensor {
    fn reshape_to(self, shape: Vec<usize>) -> AscendTensor {
        burn_ascend::ops::copy::reshape(&self, shape).expect("reshape")
    }
}

fn read(t: AscendTensor) -> TensorData {
    let dims = t.shape().len();
    assert!(dims <= 2);
    match t.dtype() {
        DataType::I8 | DataType::I32 => {
            let n = t.shape().iter().product::<usize>();
            let t = burn_ascend::ops::copy::reshape(&t, vec![n]).expect("reshape");
            Tensor::<Ascend, 1, Int>::from_primitive(t.into()).into_data()
        }
        _ => {
            let n = t.shape().iter().product::<usize>();
            let t = burn_ascend::ops::copy::reshape(&t, vec![n]).expect("reshape");
            Tensor::<Ascend, 1>::from_primitive(TensorPrimitive::Float(t.into())).into_data()
        }
    }
}

fn f32s(d: TensorData) -> Vec<f32> {
    d.convert::<f32>().to_vec::<f32>().unwrap()
}

fn i64s(d: TensorData) -> Vec<i64> {
    d.convert::<i64>().to_vec::<i64>().unwrap()
}

/// Rounds f32 values to a half type and back, on flex.
fn rounded(t: Tensor<Flex, 2>, dtype: DType) -> Tensor<Flex, 2> {
    t.cast(dtype).cast(DType::F32)
}

#[test]
fn dynamic_quant_is_per_token_int8_as_on_flex() {
    let _serial = serial();
    let (m, k) = (5, 48);
    let mut x = uniform(m * k, 1);
    // A row of zeros (scale 0, values 0) and a row with exact ties at +-0.5 ulp of the grid.
    x[k..2 * k].iter_mut().for_each(|v| *v = 0.0);
    for (j, v) in x[2 * k..3 * k].iter_mut().enumerate() {
        *v = [127.0, 0.5, -1.5, 2.5][j % 4];
    }
    for dtype in [DType::BF16, DType::F16] {
        let xa = float_on(x.clone(), [m, k], dtype);
        let (q, s) = quant_matmul::dynamic_quant(&xa, None).expect("dynamic_quant");
        assert_eq!((q.shape(), s.shape()), (&[m, k][..], &[m][..]));
        // Reference: the same f32 math on flex, from x rounded to the input type.
        let xf = rounded(
            Tensor::<Flex, 2>::from_data(TensorData::new(x.clone(), [m, k]), &flex()),
            dtype,
        );
        let max = xf.clone().abs().max_dim(1);
        let safe = max.clone().clamp_min(f32::MIN_POSITIVE);
        let inv = Tensor::<Flex, 2>::full([m, 1], 127.0, &flex()) / safe;
        let want_q = (xf * inv)
            .round()
            .clamp(-127.0, 127.0)
            .mask_fill(max.clone().equal_elem(0.0).expand([m, k]), 0.0);
        let want_s = max / 127.0;
        assert_eq!(i64s(read(q)), i64s(want_q.into_data()), "{dtype:?} values");
        assert_eq!(
            f32s(read(s)),
            f32s(want_s.reshape([m]).into_data()),
            "{dtype:?} scales"
        );
    }
}

#[test]
fn weight_quant_matmul_is_x_times_the_dequantized_weight() {
    let _serial = serial();
    let (m, k, n) = (5, 64, 24);
    let x = uniform(m * k, 2);
    let w = int8s(k * n, 3);
    for dtype in [DType::F16, DType::BF16] {
        // Per tensor, per channel, per group of 32 rows.
        for (scale_rows, group) in [(0usize, 0usize), (1, 0), (2, 32)] {
            let scale_len = if scale_rows == 0 { 1 } else { scale_rows * n };
            let scales: Vec<f32> = uniform(scale_len, 4 + group as u64)
                .iter()
                .map(|v| (v.abs() + 0.5) / 127.0)
                .collect();
            let scale_shape = match scale_rows {
                0 => vec![1],
                1 => vec![n],
                r => vec![r, n],
            };
            let xa = float_on(x.clone(), [m, k], dtype);
            let wa = i8_on(w.clone(), vec![k, n]);
            let sa = burn_ascend::ops::copy::reshape(
                &float_on(scales.clone(), [1, scale_len], dtype),
                scale_shape,
            )
            .unwrap();
            let runs = aclnn_launches_of("aclnnWeightQuantBatchMatmulV2");
            let y = quant_matmul::weight_quant_matmul(&xa, &wa, &sa, None, group)
                .expect("weight_quant_matmul");
            let got = f32s(read(y));
            assert_eq!(aclnn_launches_of("aclnnWeightQuantBatchMatmulV2"), runs + 1);
            // Reference on flex: the weight dequantized in x's type (w * scale, rounded once),
            // an f32 product, rounded to x's type.
            let xf = rounded(
                Tensor::from_data(TensorData::new(x.clone(), [m, k]), &flex()),
                dtype,
            );
            let wf = Tensor::<Flex, 2>::from_data(
                TensorData::new(w.iter().map(|&v| v as f32).collect::<Vec<_>>(), [k, n]),
                &flex(),
            );
            let sf = rounded(
                Tensor::from_data(TensorData::new(scales.clone(), [1, scale_len]), &flex()),
                dtype,
            );
            let sf = match scale_rows {
                0 => sf.expand([k, n]),
                1 => sf.expand([k, n]),
                r => sf.reshape([r, 1, n]).expand([r, group, n]).reshape([k, n]),
            };
            let want = f32s(rounded(xf.matmul(rounded(wf * sf, dtype)), dtype).into_data());
            // Sums of the same f32 products in another order: within one ulp of the output type.
            let ulp = if dtype == DType::F16 {
                1.0 / 1024.0
            } else {
                1.0 / 128.0
            };
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (a - b).abs() <= ulp * b.abs().max(1e-3) + 1e-6,
                    "{dtype:?} scales {scale_shape_dbg:?} [{i}]: {a} vs {b}",
                    scale_shape_dbg = (scale_rows, group)
                );
            }
        }
    }
}

#[test]
fn quant_matmul_is_int32_accumulation_dequantized_in_f32() {
    let _serial = serial();
    let (m, k, n) = (6, 64, 16);
    let (x, w) = (int8s(m * k, 5), int8s(k * n, 6));
    let w_scale: Vec<f32> = uniform(n, 7)
        .iter()
        .map(|v| (v.abs() + 0.1) / 127.0)
        .collect();
    let x_scale: Vec<f32> = uniform(m, 8)
        .iter()
        .map(|v| (v.abs() + 0.1) / 127.0)
        .collect();
    let to_1d = |v: Vec<f32>| {
        let n = v.len();
        burn_ascend::ops::copy::reshape(&float_on(v, [1, n], DType::F32), vec![n]).unwrap()
    };
    for out_dtype in [DataType::BF16, DataType::F16] {
        let y = quant_matmul::quant_matmul(
            &i8_on(x.clone(), vec![m, k]),
            &i8_on(w.clone(), vec![k, n]),
            &to_1d(w_scale.clone()),
            &to_1d(x_scale.clone()),
            out_dtype,
        )
        .expect("quant_matmul");
        // Reference on flex: the int32 sums (exact in f32 here: |sum| < 2^24), times the
        // weight scale, times the token scale, in f32, rounded once to the output type.
        let as_f32 = |v: &[i8], s: [usize; 2]| {
            Tensor::<Flex, 2>::from_data(
                TensorData::new(v.iter().map(|&a| a as f32).collect::<Vec<_>>(), s),
                &flex(),
            )
        };
        let acc = as_f32(&x, [m, k]).matmul(as_f32(&w, [k, n]));
        let ws = Tensor::<Flex, 2>::from_data(TensorData::new(w_scale.clone(), [1, n]), &flex());
        let xs = Tensor::<Flex, 2>::from_data(TensorData::new(x_scale.clone(), [m, 1]), &flex());
        let dtype = if out_dtype == DataType::BF16 {
            DType::BF16
        } else {
            DType::F16
        };
        let want = rounded(acc * ws * xs, dtype);
        assert_eq!(f32s(read(y)), f32s(want.into_data()), "{out_dtype:?}");
    }
}

#[test]
fn quantize_weight_per_channel_matches_flex() {
    let _serial = serial();
    let (k, n) = (40, 12);
    let mut w = uniform(k * n, 9);
    // A zero column takes scale 0 and zero values (no NaN from its 0 / 0).
    for r in 0..k {
        w[r * n + 3] = 0.0;
    }
    let (q, s) = burn_ascend::fused::quantize_weight_per_channel::<Ascend, 2, 1>(
        Tensor::from_data(TensorData::new(w.clone(), [k, n]), &common::device()),
    );
    // The reference on flex, written out: max |w| / 127 per column, w / scale rounded half
    // to even, the zero column's NaN replaced by 0.
    let wf = Tensor::<Flex, 2>::from_data(TensorData::new(w, [k, n]), &flex());
    let scale = wf.clone().abs().max_dim(0) / 127.0;
    let want_q = (wf / scale.clone()).round();
    let want_q = want_q.clone().mask_fill(want_q.is_nan(), 0.0);
    let (q, s) = (q.into_data(), s.into_data());
    assert_eq!(q.dtype, DType::I8);
    assert_eq!(i64s(q), i64s(want_q.into_data()));
    let s = f32s(s);
    assert_eq!(s, f32s(scale.reshape([n]).into_data()));
    assert_eq!(s[3], 0.0);
}

fn launch_error(result: Result<(), AclError>) -> String {
    result.expect_err("the operator should refuse").to_string()
}

#[test]
fn the_emulated_operators_refuse_what_cann_refuses() {
    let _serial = serial();
    if common::skipped_on_npu("the_emulated_operators_refuse_what_cann_refuses") {
        return;
    }
    let (m, k, n) = (4, 64, 8);
    let x = float_on(uniform(m * k, 10), [m, k], DType::F16);
    let w = i8_on(int8s(k * n, 11), vec![k, n]);
    let y = AscendTensor::empty(x.ctx(), vec![m, n], DataType::F16).unwrap();
    let wqbmm = |scale: &AscendTensor, group: i32| -> Result<(), AclError> {
        aclnn!(
            &**x.ctx(),
            aclnnWeightQuantBatchMatmulV2(
                x.desc()?,
                w.desc()?,
                scale.desc()?,
                Absent,
                Absent,
                Absent,
                Absent,
                group,
                y.desc()?
            )
        )
    };
    let per_channel = |dtype| float_on(vec![0.01; n], [1, n], dtype);
    // antiquantGroupSize must be a multiple of 32 below k.
    let text = launch_error(wqbmm(&per_channel(DType::F16), 48));
    assert!(text.contains("antiquantGroupSize 48"), "{text}");
    // The scale is in x's dtype.
    let text = launch_error(wqbmm(&per_channel(DType::F32), 0));
    assert!(
        text.contains("antiquantScale") && text.contains("x's dtype"),
        "{text}"
    );
    // Per-group scales are [ceil(k / g), n].
    let text = launch_error(wqbmm(&per_channel(DType::F16), 32));
    assert!(text.contains("[2, 8] for groups of 32"), "{text}");

    // aclnnQuantMatmulV4 without a per-token scale dequantizes only to bf16 here (f16 out
    // needs the INT64 scale form, not emulated).
    let xi = i8_on(int8s(m * k, 12), vec![m, k]);
    let scale =
        burn_ascend::ops::copy::reshape(&float_on(vec![0.01; n], [1, n], DType::F32), vec![n])
            .unwrap();
    let out16 = AscendTensor::empty(x.ctx(), vec![m, n], DataType::F16).unwrap();
    let text = launch_error((|| {
        aclnn!(
            &**x.ctx(),
            aclnnQuantMatmulV4(
                xi.desc()?,
                w.desc()?,
                scale.desc()?,
                Absent,
                Absent,
                Absent,
                false,
                false,
                out16.desc()?
            )
        )
    })());
    assert!(
        text.contains("aclnnQuantMatmulV4") && text.contains("out (without pertokenScaleOptional)"),
        "{text}"
    );
    // Its operands are int8.
    let text = launch_error((|| {
        aclnn!(
            &**x.ctx(),
            aclnnQuantMatmulV4(
                x.desc()?,
                w.desc()?,
                scale.desc()?,
                Absent,
                Absent,
                Absent,
                false,
                false,
                out16.desc()?
            )
        )
    })());
    assert!(text.contains("x1 dtype"), "{text}");

    // aclnnDynamicQuant takes f16/bf16 x only.
    let x32 = float_on(uniform(m * k, 13), [m, k], DType::F32);
    let q = AscendTensor::empty(x.ctx(), vec![m, k], DataType::I8).unwrap();
    let s = AscendTensor::empty(x.ctx(), vec![m], DataType::F32).unwrap();
    let text = launch_error((|| {
        aclnn!(
            &**x.ctx(),
            aclnnDynamicQuant(x32.desc()?, Absent, q.desc()?, s.desc()?)
        )
    })());
    assert!(
        text.contains("aclnnDynamicQuant") && text.contains("x dtype"),
        "{text}"
    );
    // Its scale output drops x's last dim.
    let s_bad = AscendTensor::empty(x.ctx(), vec![m, 1], DataType::F32).unwrap();
    let text = launch_error((|| {
        aclnn!(
            &**x.ctx(),
            aclnnDynamicQuant(x.desc()?, Absent, q.desc()?, s_bad.desc()?)
        )
    })());
    assert!(text.contains("scaleOut"), "{text}");
}

#[derive(Module, Debug)]
struct Mlp<B: burn::tensor::backend::Backend> {
    up: Linear<B>,
    act: Relu,
    down: Linear<B>,
}

impl<B: burn::tensor::backend::Backend> Mlp<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            up: LinearConfig::new(32, 48).init(device),
            act: Relu::new(),
            down: LinearConfig::new(48, 16).init(device),
        }
    }

    fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        self.down.forward(self.act.forward(self.up.forward(x)))
    }

    /// The same layers as `x.matmul(weight) + bias`, through `q_matmul` (`Linear::forward`
    /// reaches the same operator through a lazily dequantized weight: tests/lazy_dequantize.rs).
    fn forward_matmul<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let dense = |l: &Linear<B>, x: Tensor<B, D>| {
            let y = x.matmul(l.weight.val().unsqueeze::<D>());
            match &l.bias {
                Some(b) => y + b.val().unsqueeze::<D>(),
                None => y,
            }
        };
        dense(&self.down, self.act.forward(dense(&self.up, x)))
    }
}

fn quantizer(value: QuantValue, level: QuantLevel) -> Quantizer {
    Quantizer {
        calibration: Calibration::MinMax,
        scheme: QuantScheme::default()
            .with_value(value)
            .with_level(level)
            .with_store(QuantStore::Native),
    }
}

/// The largest difference of two outputs relative to the largest magnitude of the second.
fn relative_error(got: TensorData, want: TensorData) -> f32 {
    let (g, w) = (f32s(got), f32s(want));
    let scale = w.iter().fold(0f32, |m, v| m.max(v.abs()));
    g.iter()
        .zip(&w)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()))
        / scale
}

#[test]
fn a_model_quantized_with_burns_quantizer_runs_on_weight_quant_batch_matmul() {
    let _serial = serial();
    // A bf16 model: the int8 paths produce F16/BF16 (an f32 model keeps Burn's f32 path).
    let model = Mlp::<Ascend>::new(&device()).map(&mut ToDtype(DType::BF16));
    let x = Tensor::<Ascend, 3>::from_data(
        TensorData::new(uniform(2 * 3 * 32, 14), [2, 3, 32]),
        (&device(), DType::BF16),
    );
    let float_out = model.forward(x.clone()).into_data();
    let quantized = model.quantize_weights(&mut quantizer(QuantValue::Q8S, QuantLevel::Tensor));
    let (wqbmm, mm) = (
        aclnn_launches_of("aclnnWeightQuantBatchMatmulV2"),
        aclnn_launches_of("aclnnMatmul"),
    );
    let out = quantized.forward_matmul(x).into_data();
    assert_eq!(
        aclnn_launches_of("aclnnWeightQuantBatchMatmulV2") - wqbmm,
        2,
        "both Linear layers run on aclnnWeightQuantBatchMatmulV2"
    );
    assert_eq!(aclnn_launches_of("aclnnMatmul") - mm, 0, "no float matmul");
    // Per-tensor int8 weights: within a few percent of the bf16 model.
    let err = relative_error(out, float_out);
    assert!(err < 0.03, "relative error {err}");

    // The same f32 model keeps Burn's f32 dequantize-then-matmul.
    let model = quantized.map(&mut ToDtype(DType::F32));
    let x =
        Tensor::<Ascend, 2>::from_data(TensorData::new(uniform(3 * 32, 18), [3, 32]), &device());
    let runs = aclnn_launches_of("aclnnWeightQuantBatchMatmulV2");
    model.forward_matmul(x).into_data();
    assert_eq!(aclnn_launches_of("aclnnWeightQuantBatchMatmulV2"), runs);
}

/// Casts a module's float parameters (quantized ones stay as they are).
struct ToDtype(DType);

impl<B: burn::tensor::backend::Backend> burn::module::ModuleMapper<B> for ToDtype {
    fn map_float<const D: usize>(
        &mut self,
        param: burn::module::Param<Tensor<B, D>>,
    ) -> burn::module::Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let tensor = match tensor.dtype() {
            DType::QFloat(_) => tensor,
            _ => tensor.cast(self.0),
        };
        burn::module::Param::from_mapped_value(id, tensor, mapper)
    }
}

#[test]
fn int8_activations_times_int8_weights_run_on_quant_matmul() {
    let _serial = serial();
    let (m, k, n) = (3, 32, 16);
    // Two quantized operands give the device's default float type: BF16 on this device (an
    // F32 default keeps Burn's f32 path, see tests/quantization.rs).
    let device = second_device();
    burn::tensor::set_default_dtypes::<Ascend>(&device, DType::BF16, DType::I64)
        .expect("a fresh device");
    let x = Tensor::<Ascend, 2>::from_data(TensorData::new(uniform(m * k, 15), [m, k]), &device);
    let w = Tensor::<Ascend, 2>::from_data(TensorData::new(uniform(k * n, 16), [k, n]), &device);
    let float_out = x.clone().matmul(w.clone()).into_data();
    let scheme = QuantScheme::default()
        .with_value(QuantValue::Q8S)
        .with_store(QuantStore::Native);
    let runs = aclnn_launches_of("aclnnQuantMatmulV4");
    // Activations per row (a block of the last dim) and per tensor.
    for level in [QuantLevel::block([k as u8]), QuantLevel::Tensor] {
        let xq = x.clone().quantize_dynamic(&scheme.with_level(level));
        let wq = w.clone().quantize_dynamic(&scheme);
        let out = xq.clone().matmul(wq.clone()).into_data();
        // Burn's dequantize-then-matmul of the same int8 values and scales.
        let want = xq.dequantize().matmul(wq.dequantize()).into_data();
        assert!(relative_error(out.clone(), want) < 0.01, "{level:?}");
        assert!(relative_error(out, float_out.clone()) < 0.05, "{level:?}");
    }
    assert_eq!(aclnn_launches_of("aclnnQuantMatmulV4") - runs, 2);
}

#[test]
fn schemes_without_an_int8_path_keep_dequantize_then_matmul() {
    let _serial = serial();
    let model = Mlp::<Ascend>::new(&device());
    let x =
        Tensor::<Ascend, 2>::from_data(TensorData::new(uniform(3 * 32, 17), [3, 32]), &device());
    let float_out = model.forward(x.clone()).into_data();
    // Per-block weights (runs of 16 along N): no operator takes those scales.
    let quantized =
        model.quantize_weights(&mut quantizer(QuantValue::Q8S, QuantLevel::block([16])));
    let (wqbmm, mm) = (
        aclnn_launches_of("aclnnWeightQuantBatchMatmulV2"),
        aclnn_launches_of("aclnnMatmul"),
    );
    let out = quantized.forward_matmul(x).into_data();
    assert_eq!(
        aclnn_launches_of("aclnnWeightQuantBatchMatmulV2") - wqbmm,
        0
    );
    assert_eq!(aclnn_launches_of("aclnnMatmul") - mm, 2);
    let err = relative_error(out, float_out);
    assert!(err < 0.03, "relative error {err}");
}

/// The fused quantized ops of backend `B` on `x [4, 64]` in `dtype` and a `[64, 12]` weight:
/// dynamic_quant's values and scales, the weight's per-channel and per-group (of 32 rows)
/// quantization, the W16A8 products under both, the W8A8 products in three output types, and
/// last dynamic_quant's values and scales with smooth scales.
fn fused_quant_results<B: burn_ascend::FusedOps>(
    device: &B::Device,
    dtype: DType,
) -> Vec<TensorData> {
    use burn::tensor::FloatDType;
    use burn_ascend::fused;
    let (m, k, n) = (4, 64, 12);
    let x = Tensor::<B, 2>::from_data(TensorData::new(uniform(m * k, 20), [m, k]), (device, dtype));
    let w = Tensor::<B, 2>::from_data(TensorData::new(uniform(k * n, 21), [k, n]), device);
    let (q, s) = fused::dynamic_quant::<B, 2, 1>(x.clone(), None);
    // Smooth scales in x's type, spread over two octaves.
    let smooth = (0..k).map(|j| 0.5 + j as f32 / 32.0).collect::<Vec<_>>();
    let smooth = Tensor::<B, 1>::from_data(TensorData::new(smooth, [k]), (device, dtype));
    let (q_smooth, s_smooth) = fused::dynamic_quant::<B, 2, 1>(x.clone(), Some(smooth));
    let (wq, ws) = fused::quantize_weight_per_channel::<B, 2, 1>(w);
    // Per-group scales: two groups of 32 rows, the second twice the first.
    let wg = Tensor::cat(vec![ws.clone(), ws.clone() * 2.0], 0);
    let mut out = vec![
        q.clone().into_data(),
        s.clone().into_data(),
        wq.clone().into_data(),
        ws.clone().into_data(),
        fused::weight_quant_matmul(x.clone(), wq.clone(), ws.clone(), 0).into_data(),
        fused::weight_quant_matmul(x, wq.clone(), wg, 32).into_data(),
    ];
    for o in [FloatDType::BF16, FloatDType::F16, FloatDType::F32] {
        out.push(fused::quant_matmul(q.clone(), wq.clone(), ws.clone(), s.clone(), o).into_data());
    }
    out.extend([q_smooth.into_data(), s_smooth.into_data()]);
    out
}

/// The fused ops on Ascend and Fusion<Ascend> (the operators) equal their composed defaults on
/// flex (Burn ops): integer parts and f32 scales exactly, W8A8 outputs exactly (one rounding of
/// the same f32 values), W8A16 outputs within one ulp of their type (f32 sums in another
/// order).
#[test]
fn fused_quant_ops_on_ascend_equal_their_compositions_on_flex() {
    let _serial = serial();
    for dtype in [DType::BF16, DType::F16, DType::F32] {
        let want = fused_quant_results::<Flex>(&flex(), dtype);
        let runs = aclnn_launches_of("aclnnDynamicQuant");
        let on_ascend = fused_quant_results::<Ascend>(&device(), dtype);
        let on_fusion = fused_quant_results::<burn_fusion::Fusion<Ascend>>(&device(), dtype);
        // Autodiff<Ascend> takes the composed defaults (differentiable Burn ops).
        let on_autodiff = fused_quant_results::<burn_autodiff::Autodiff<Ascend>>(&device(), dtype);
        // F32 activations take the composition on Ascend too (the operator is F16/BF16 only).
        // Two per backend: without and with smooth scales.
        let launched = if dtype == DType::F32 { 0 } else { 4 };
        assert_eq!(
            aclnn_launches_of("aclnnDynamicQuant") - runs,
            launched,
            "{dtype:?}"
        );
        for (backend, got) in [
            ("Ascend", on_ascend),
            ("Fusion<Ascend>", on_fusion),
            ("Autodiff<Ascend>", on_autodiff),
        ] {
            for (i, (g, w)) in got.into_iter().zip(&want).enumerate() {
                let what = format!("{backend} {dtype:?} result {i}");
                if !(4..6).contains(&i) {
                    assert_eq!(f32s(g), f32s(w.clone()), "{what}");
                    continue;
                }
                let ulp = match dtype {
                    DType::F16 => 1.0 / 1024.0,
                    DType::BF16 => 1.0 / 128.0,
                    _ => 1e-6,
                };
                for (a, b) in f32s(g).iter().zip(&f32s(w.clone())) {
                    assert!(
                        (a - b).abs() <= ulp * b.abs().max(1e-3) + 1e-6,
                        "{what}: {a} vs {b}"
                    );
                }
            }
        }
    }
}

/// The device model's cube term: whole fractals, 16x16x16 per cycle in f16/bf16, 16x32x16 in
/// int8 (twice the MACs), f32 at a quarter of the f16 rate (hardware-atlas-a2.md §4.1).
#[test]
fn the_cube_term_counts_int8_at_its_own_fractal() {
    use burn_ascend::emulator::work_counters;
    let _serial = serial();
    let (m, k, n) = (20, 96, 40);
    // ceil(20/16) * ceil(40/16) = 2 * 3 fractal columns; k takes 6 (half) or 3 (int8) steps.
    let (half, int8) = (2 * 3 * 6, 2 * 3 * 3);
    let cycles = |f: &dyn Fn()| {
        let before = work_counters();
        f();
        work_counters().since(&before).aclnn_cube_cycles
    };
    let x = float_on(uniform(m * k, 30), [m, k], DType::BF16);
    let w = i8_on(int8s(k * n, 31), vec![k, n]);
    let xi = i8_on(int8s(m * k, 32), vec![m, k]);
    let scale =
        burn_ascend::ops::copy::reshape(&float_on(vec![0.01; n], [1, n], DType::F32), vec![n])
            .unwrap();
    let token =
        burn_ascend::ops::copy::reshape(&float_on(vec![0.02; m], [1, m], DType::F32), vec![m])
            .unwrap();
    let w16 = scale.clone();
    let wqbmm = cycles(&|| {
        read(quant_matmul::weight_quant_matmul(&x, &w, &w16, None, 0).unwrap());
    });
    let qmm = cycles(&|| {
        read(quant_matmul::quant_matmul(&xi, &w, &scale, &token, DataType::BF16).unwrap());
    });
    let xa = Tensor::<Ascend, 2>::from_data(TensorData::new(uniform(m * k, 33), [m, k]), &device());
    let wa = Tensor::<Ascend, 2>::from_data(TensorData::new(uniform(k * n, 34), [k, n]), &device());
    let f32_matmul = cycles(&|| {
        xa.clone().matmul(wa.clone()).into_data();
    });
    assert_eq!((wqbmm, qmm, f32_matmul), (half, int8, 4 * half));
}

/// More of the operators' rules, each tripped once.
#[test]
fn the_emulated_operators_refuse_bad_layouts_and_optional_inputs() {
    let _serial = serial();
    if common::skipped_on_npu("the_emulated_operators_refuse_bad_layouts_and_optional_inputs") {
        return;
    }
    let (m, k, n) = (4, 64, 8);
    let x = float_on(uniform(m * k, 40), [m, k], DType::F16);
    let w = i8_on(int8s(k * n, 41), vec![k, n]);
    let y = AscendTensor::empty(x.ctx(), vec![m, n], DataType::F16).unwrap();
    let scale = float_on(vec![0.01; n], [1, n], DType::F16);
    let ctx = x.ctx().clone();
    // WQBMMv2: the int8-output form (quantScaleOptional) is not emulated.
    let text = launch_error((|| {
        aclnn!(
            &*ctx,
            aclnnWeightQuantBatchMatmulV2(
                x.desc()?,
                w.desc()?,
                scale.desc()?,
                Absent,
                scale.desc()?,
                Absent,
                Absent,
                0,
                y.desc()?
            )
        )
    })());
    assert!(text.contains("quantScaleOptional"), "{text}");
    // WQBMMv2: bias is F16 with f16 x.
    let bias32 = float_on(vec![0.5; n], [1, n], DType::F32);
    let text = launch_error((|| {
        aclnn!(
            &*ctx,
            aclnnWeightQuantBatchMatmulV2(
                x.desc()?,
                w.desc()?,
                scale.desc()?,
                Absent,
                Absent,
                Absent,
                bias32.desc()?,
                0,
                y.desc()?
            )
        )
    })());
    assert!(text.contains("biasOptional"), "{text}");
    // WQBMMv2: the offset matches the scale.
    let offset = float_on(vec![1.0; 1], [1, 1], DType::F16);
    let text = launch_error((|| {
        aclnn!(
            &*ctx,
            aclnnWeightQuantBatchMatmulV2(
                x.desc()?,
                w.desc()?,
                scale.desc()?,
                offset.desc()?,
                Absent,
                Absent,
                Absent,
                0,
                y.desc()?
            )
        )
    })());
    assert!(text.contains("antiquantOffsetOptional"), "{text}");
    // WQBMMv2: a weight view that is neither dense nor transposed.
    let w_wide = i8_on(int8s(k * 2 * n, 42), vec![k, 2 * n]);
    let w_view = burn_ascend::ops::copy::slice(
        &w_wide,
        &[
            burn_ascend::ops::copy::DimSlice {
                start: 0,
                end: k,
                step: 1,
            },
            burn_ascend::ops::copy::DimSlice {
                start: 0,
                end: n,
                step: 1,
            },
        ],
    )
    .unwrap();
    let text = launch_error((|| {
        aclnn!(
            &*ctx,
            aclnnWeightQuantBatchMatmulV2(
                x.desc()?,
                w_view.desc()?,
                scale.desc()?,
                Absent,
                Absent,
                Absent,
                Absent,
                0,
                y.desc()?
            )
        )
    })());
    assert!(
        text.contains("neither dense nor a transposed matrix"),
        "{text}"
    );

    // QuantMatmulV4: offset (int8 output) is not emulated; the per-token scale is [m].
    let xi = i8_on(int8s(m * k, 43), vec![m, k]);
    let s32 =
        burn_ascend::ops::copy::reshape(&float_on(vec![0.01; n], [1, n], DType::F32), vec![n])
            .unwrap();
    let out = AscendTensor::empty(&ctx, vec![m, n], DataType::BF16).unwrap();
    let text = launch_error((|| {
        aclnn!(
            &*ctx,
            aclnnQuantMatmulV4(
                xi.desc()?,
                w.desc()?,
                s32.desc()?,
                s32.desc()?,
                Absent,
                Absent,
                false,
                false,
                out.desc()?
            )
        )
    })());
    assert!(text.contains("offset is given"), "{text}");
    let text = launch_error((|| {
        aclnn!(
            &*ctx,
            aclnnQuantMatmulV4(
                xi.desc()?,
                w.desc()?,
                s32.desc()?,
                Absent,
                s32.desc()?,
                Absent,
                false,
                false,
                out.desc()?
            )
        )
    })());
    assert!(
        text.contains("pertokenScaleOptional") && text.contains("[4]"),
        "{text}"
    );
    // QuantMatmulV4: transposeX2 reads x2 as [n, k]: here k disagrees.
    let text = launch_error((|| {
        aclnn!(
            &*ctx,
            aclnnQuantMatmulV4(
                xi.desc()?,
                w.desc()?,
                s32.desc()?,
                Absent,
                Absent,
                Absent,
                false,
                true,
                out.desc()?
            )
        )
    })());
    assert!(text.contains("disagree on k"), "{text}");

    // DynamicQuant: x has at least 2 dims; yOut is INT8.
    let x1 = burn_ascend::ops::copy::reshape(&x, vec![m * k]).unwrap();
    let q1 = AscendTensor::empty(&ctx, vec![m * k], DataType::I8).unwrap();
    let s0 = AscendTensor::empty(&ctx, vec![], DataType::F32).unwrap();
    let text = launch_error((|| {
        aclnn!(
            &*ctx,
            aclnnDynamicQuant(x1.desc()?, Absent, q1.desc()?, s0.desc()?)
        )
    })());
    assert!(text.contains("2 to 8 dims"), "{text}");
    let q16 = AscendTensor::empty(&ctx, vec![m, k], DataType::F16).unwrap();
    let s = AscendTensor::empty(&ctx, vec![m], DataType::F32).unwrap();
    let text = launch_error((|| {
        aclnn!(
            &*ctx,
            aclnnDynamicQuant(x.desc()?, Absent, q16.desc()?, s.desc()?)
        )
    })());
    assert!(text.contains("yOut dtype"), "{text}");
}
