//! A model quantized with Burn's own `Quantizer` runs its `nn::Linear` layers on
//! aclnnWeightQuantBatchMatmulV2 with no code change: Burn 0.21's `Linear::forward` hands
//! `linear` its weight through `TensorPrimitive::tensor`, i.e. `dequantize`, which for a
//! per-tensor int8 weight is lazy on `Ascend`. The int8 path never materialises the float
//! weight (operator counts, device memory); every other use of the dequantized tensor
//! materialises it once and sees Burn's dequantized values (burn-flex).

mod common;

use burn::module::{Module, Param, Quantizer};
use burn::nn::{Linear, Relu};
use burn::tensor::backend::Backend;
use burn::tensor::quantization::{Calibration, QuantLevel, QuantScheme, QuantStore, QuantValue};
use burn::tensor::{DType, Tensor, TensorData};
use burn_ascend::emulator::aclnn_launches_of;
use burn_fusion::Fusion;
use common::*;

/// Tests that count operator runs or measure the device's memory run one at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Deterministic values in `[-1, 1)` (a fixed LCG).
fn uniform(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn linear<B: Backend>(
    d_in: usize,
    d_out: usize,
    bias: bool,
    seed: u64,
    dev: &B::Device,
) -> Linear<B> {
    let weight = Tensor::from_data(
        TensorData::new(uniform(d_in * d_out, seed), [d_in, d_out]),
        dev,
    );
    Linear {
        weight: Param::from_tensor(weight),
        bias: bias.then(|| {
            Param::from_tensor(Tensor::from_data(
                TensorData::new(uniform(d_out, seed + 1), [d_out]),
                dev,
            ))
        }),
    }
}

/// Three `nn::Linear` layers, the middle one without bias.
#[derive(Module, Debug)]
struct Mlp<B: Backend> {
    a: Linear<B>,
    b: Linear<B>,
    c: Linear<B>,
    act: Relu,
}

impl<B: Backend> Mlp<B> {
    /// The same weights on every backend.
    fn new(dev: &B::Device) -> Self {
        Self {
            a: linear(32, 48, true, 1, dev),
            b: linear(48, 40, false, 3, dev),
            c: linear(40, 16, true, 5, dev),
            act: Relu::new(),
        }
    }

    fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let x = self.act.forward(self.a.forward(x));
        let x = self.act.forward(self.b.forward(x));
        self.c.forward(x)
    }
}

fn per_tensor_int8() -> Quantizer {
    Quantizer {
        calibration: Calibration::MinMax,
        scheme: QuantScheme::default()
            .with_value(QuantValue::Q8S)
            .with_level(QuantLevel::Tensor)
            .with_store(QuantStore::Native),
    }
}

/// Casts a module's float parameters (quantized ones stay as they are).
struct ToDtype(DType);

impl<B: Backend> burn::module::ModuleMapper<B> for ToDtype {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let tensor = match tensor.dtype() {
            DType::QFloat(_) => tensor,
            _ => tensor.cast(self.0),
        };
        Param::from_mapped_value(id, tensor, mapper)
    }
}

fn f32s(d: TensorData) -> Vec<f32> {
    d.convert::<f32>().to_vec().unwrap()
}

/// The largest difference of two outputs relative to the largest magnitude of the second.
fn relative_error(got: TensorData, want: TensorData) -> f32 {
    let (g, w) = (f32s(got), f32s(want));
    assert_eq!(g.len(), w.len());
    let scale = w.iter().fold(0f32, |m, v| m.max(v.abs()));
    g.iter()
        .zip(&w)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()))
        / scale
}

/// Launches of each operator while `f` runs.
fn launches<R>(ops: &[&str], f: impl FnOnce() -> R) -> (R, Vec<u64>) {
    let before: Vec<u64> = ops.iter().map(|op| aclnn_launches_of(op)).collect();
    let r = f();
    let after = ops.iter().map(|op| aclnn_launches_of(op));
    (r, after.zip(before).map(|(a, b)| a - b).collect())
}

const WQBMM: &str = "aclnnWeightQuantBatchMatmulV2";
/// What the float paths launch: Burn's dequantization (Cast, Mul) and a float matmul.
const FLOAT_OPS: [&str; 3] = ["aclnnMul", "aclnnMatmul", "aclnnAddmm"];

#[test]
fn a_quantizer_quantized_linear_model_runs_on_weight_quant_batch_matmul() {
    let _serial = serial();
    let dev = device();
    let x_data = TensorData::new(uniform(2 * 3 * 32, 7), [2, 3, 32]);
    // Burn's reference: the same quantized model on burn-flex in f32, on the bf16 inputs.
    let flex_model = Mlp::<Flex>::new(&Default::default()).quantize_weights(&mut per_tensor_int8());
    let x_bf16 = TensorData::new(
        f32s(
            Tensor::<Flex, 3>::from_data(x_data.clone(), &Default::default())
                .cast(DType::BF16)
                .into_data(),
        ),
        [2, 3, 32],
    );
    let want = flex_model
        .forward(Tensor::<Flex, 3>::from_data(x_bf16, &Default::default()))
        .into_data();

    for dtype in [DType::BF16, DType::F16] {
        let model = Mlp::<Ascend>::new(&dev)
            .map(&mut ToDtype(dtype))
            .quantize_weights(&mut per_tensor_int8());
        let x = Tensor::<Ascend, 3>::from_data(x_data.clone(), (&dev, dtype));
        let mut ops = vec![WQBMM];
        ops.extend(FLOAT_OPS);
        let (out, n) = launches(&ops, || model.forward(x.clone()).into_data());
        assert_eq!(
            n[0], 3,
            "{dtype:?}: one aclnnWeightQuantBatchMatmulV2 per Linear"
        );
        // Burn's Quantizer quantizes the biases too: each is dequantized (one aclnnMul of its
        // 48 or 16 elements); the weights are not, and no float matmul runs.
        assert_eq!(
            n[1..],
            [2, 0, 0],
            "{dtype:?}: [aclnnMul, aclnnMatmul, aclnnAddmm]"
        );
        assert_eq!(out.dtype, dtype);
        let err = relative_error(out, want.clone());
        assert!(
            err < 0.01,
            "{dtype:?}: relative error {err} against burn-flex"
        );

        // Without a bias, `Linear::forward` is bit for bit Burn's `q_matmul` of the same
        // quantized weight (`x.matmul(q)`, which ran on aclnnWeightQuantBatchMatmulV2 before).
        let h = Tensor::<Ascend, 3>::from_data(
            TensorData::new(uniform(2 * 3 * 48, 9), [2, 3, 48]),
            (&dev, dtype),
        );
        let by_linear = model.b.forward(h.clone()).into_data();
        let by_matmul = h.matmul(model.b.weight.val().unsqueeze::<3>()).into_data();
        assert_eq!(by_linear, by_matmul, "{dtype:?}");
    }
}

#[test]
fn the_int8_path_never_holds_a_float_copy_of_the_weights() {
    let _serial = serial();
    let dev = device();
    let (k, n) = (512, 512);
    let model = linear::<Ascend>(k, n, true, 11, &dev)
        .map(&mut ToDtype(DType::BF16))
        .quantize_weights(&mut per_tensor_int8());
    let x = Tensor::<Ascend, 2>::from_data(
        TensorData::new(uniform(4 * k, 12), [4, k]),
        (&dev, DType::BF16),
    );
    Ascend::sync(&dev).unwrap();
    let before = Ascend::memory_stats(&dev).bytes_in_use;
    Ascend::reset_peak_memory(&dev);
    let y = model.forward(x);
    Ascend::sync(&dev).unwrap();
    let added = Ascend::memory_stats(&dev).peak_bytes_in_use - before;
    // The weight dequantizes to the device's default float type (F32): 1 MiB. Dequantizing it
    // holds that and more; the int8 path holds the [4, 512] output and the scale.
    let float_weight = k * n * 4;
    assert!(
        added < float_weight / 8,
        "the forward's peak added {added} bytes (a float weight is {float_weight})"
    );
    assert_eq!(y.dims(), [4, n]);
}

#[test]
fn a_lazily_dequantized_tensor_reads_as_burns_dequantization_everywhere() {
    let _serial = serial();
    let dev = device();
    let (k, n) = (6, 5);
    let w = Tensor::<Ascend, 2>::from_data(TensorData::new(uniform(k * n, 21), [k, n]), &dev);
    let scheme = per_tensor_int8().scheme;
    let q = w.quantize_dynamic(&scheme);
    // Burn's dequantization of the same int8 values and scale, on burn-flex.
    let flex =
        |t: Tensor<Ascend, 2>| Tensor::<Flex, 2>::from_data(t.into_data(), &Default::default());
    let want = flex(q.clone()).dequantize();
    let eager = |t: Tensor<Flex, 2>| Tensor::<Ascend, 2>::from_data(t.into_data(), &dev);

    // Dequantizing launches nothing; the first read launches Burn's dequantization once.
    let (lazy, n0) = launches(&["aclnnMul"], || q.clone().dequantize());
    Ascend::sync(&dev).unwrap();
    assert_eq!(n0, [0], "dequantize is deferred");
    let (read, n1) = launches(&["aclnnMul"], || lazy.clone().into_data());
    assert_eq!(n1, [1], "materialised once");
    assert_eq!(read, want.clone().into_data());

    // Each fresh lazy tensor gives the eager result in every kind of use.
    let fresh = || q.clone().dequantize();
    let y = Tensor::<Ascend, 2>::from_data(TensorData::new(uniform(n * 3, 22), [n, 3]), &dev);
    let x = Tensor::<Ascend, 2>::from_data(TensorData::new(uniform(4 * k, 23), [4, k]), &dev);
    let cases: Vec<(&str, Tensor<Ascend, 2>, Tensor<Ascend, 2>)> = vec![
        ("add", fresh() + 1.5, eager(want.clone()) + 1.5),
        (
            "slice",
            fresh().slice([1..4, 2..5]),
            eager(want.clone()).slice([1..4, 2..5]),
        ),
        (
            "transpose",
            fresh().transpose(),
            eager(want.clone()).transpose(),
        ),
        (
            "lhs of a matmul",
            fresh().matmul(y.clone()),
            eager(want.clone()).matmul(y.clone()),
        ),
        // An F32 activation keeps the f32 matmul on the materialised weight.
        (
            "f32 rhs of a matmul",
            x.clone().matmul(fresh()),
            x.clone().matmul(eager(want.clone())),
        ),
        (
            "cast",
            fresh().cast(DType::F16).cast(DType::F32),
            eager(want.clone()).cast(DType::F16).cast(DType::F32),
        ),
    ];
    for (what, got, expected) in cases {
        assert_eq!(got.into_data(), expected.into_data(), "{what}");
    }

    // Clones read from several threads at once: one materialisation, the same values.
    let shared = fresh();
    let (reads, n2) = launches(&["aclnnMul"], || {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    let t = shared.clone();
                    s.spawn(move || (t * 2.0).into_data())
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        })
    });
    assert_eq!(n2, [1], "one materialisation shared by the clones");
    for r in reads {
        assert_eq!(r, (eager(want.clone()) * 2.0).into_data());
    }

    // Used as an int8 weight first, then read: still the dequantized values.
    let lazy = fresh();
    let xh = x.clone().cast(DType::BF16);
    let (_, n3) = launches(&[WQBMM], || xh.matmul(lazy.clone()).into_data());
    assert_eq!(n3, [1]);
    assert_eq!(lazy.into_data(), want.into_data());
}

#[test]
fn fusion_runs_the_quantized_linears_on_weight_quant_batch_matmul() {
    let _serial = serial();
    // Fusion records `linear` as Burn's composition, whose matmul and bias add need one float
    // type: the device's default is the model's (BF16), on a device no other test here uses.
    let dev = second_device();
    burn::tensor::set_default_dtypes::<Fusion<Ascend>>(&dev, DType::BF16, DType::I64)
        .expect("a fresh device");
    let x_data = TensorData::new(uniform(3 * 32, 31), [3, 32]);
    let on_ascend = {
        let model = Mlp::<Ascend>::new(&dev)
            .map(&mut ToDtype(DType::BF16))
            .quantize_weights(&mut per_tensor_int8());
        model
            .forward(Tensor::<Ascend, 2>::from_data(
                x_data.clone(),
                (&dev, DType::BF16),
            ))
            .into_data()
    };
    let model = Mlp::<Fusion<Ascend>>::new(&dev)
        .map(&mut ToDtype(DType::BF16))
        .quantize_weights(&mut per_tensor_int8());
    let x = Tensor::<Fusion<Ascend>, 2>::from_data(x_data, (&dev, DType::BF16));
    <Fusion<Ascend> as Backend>::sync(&dev).unwrap();
    let mut ops = vec![WQBMM];
    ops.extend(FLOAT_OPS);
    let (out, n) = launches(&ops, || model.forward(x).into_data());
    // The biases' dequantization (aclnnMul) as on Ascend; no float matmul.
    assert_eq!(n, [3, 2, 0, 0], "[{WQBMM}, {FLOAT_OPS:?}]");
    let err = relative_error(out, on_ascend);
    assert!(err < 0.01, "relative error {err} against Ascend");
}

#[test]
fn autodiff_takes_the_int8_path_forward_and_the_materialised_weight_backward() {
    use burn_autodiff::Autodiff;
    type Ad = Autodiff<Ascend>;
    let _serial = serial();
    let dev = device();
    let (k, n) = (32, 24);
    // Burn 0.21's Autodiff has no quantization ops (its `dequantize` is `todo!()`), so the
    // lazily dequantized weight enters the graph as an inner tensor.
    let q = Tensor::<Ascend, 2>::from_data(TensorData::new(uniform(k * n, 41), [k, n]), &dev)
        .quantize_dynamic(&per_tensor_int8().scheme);
    let dequantized = Tensor::<Flex, 2>::from_data(q.clone().into_data(), &Default::default())
        .dequantize()
        .into_data();
    let x_data = TensorData::new(uniform(4 * k, 42), [4, k]);
    let run = |w: Tensor<Ascend, 2>| {
        let x = Tensor::<Ad, 2>::from_data(x_data.clone(), (&dev, DType::BF16)).require_grad();
        let y = burn::tensor::module::linear(x.clone(), Tensor::<Ad, 2>::from_inner(w), None);
        let g = (y.clone() * y.clone()).sum().backward();
        (y.into_data(), x.grad(&g).unwrap().into_data())
    };
    let ((y, dx), n) = launches(&[WQBMM], || run(q.clone().dequantize()));
    assert_eq!(n, [1], "the forward ran on the int8 weight");
    let (y_want, dx_want) = run(Tensor::from_data(dequantized, &dev));
    let err = relative_error(y, y_want);
    assert!(err < 0.01, "forward relative error {err}");
    let err = relative_error(dx, dx_want);
    assert!(err < 0.01, "gradient relative error {err}");
}

#[test]
fn a_first_read_during_a_graph_capture_is_a_typed_argument_error() {
    let _serial = serial();
    let dev = device();
    let (k, n) = (3, 4);
    let w = Tensor::<Ascend, 2>::from_data(TensorData::new(uniform(k * n, 31), [k, n]), &dev);
    let q = w.quantize_dynamic(&per_tensor_int8().scheme);
    let lazy = q.clone().dequantize();
    // Materialising is refused inside the op (the core's `view`), which cannot return an
    // error: `try_run` still gets it as a value, as for the adapter's own ops.
    let (_, got) =
        burn_ascend::graph::capture(&dev, || burn_ascend::try_run(|| lazy.clone() + 1.0))
            .expect("the capture itself ends cleanly");
    match got {
        Err(burn_ascend::AscendError::InvalidArgument { op, message }) => {
            assert_eq!(op, "dequantize");
            assert!(message.contains("during a graph capture"), "{message}");
        }
        other => panic!("expected a typed argument error, got {other:?}"),
    }
    // Nothing was materialised: read after the capture, it is Burn's dequantization.
    let want = Tensor::<Flex, 2>::from_data(q.into_data(), &Default::default()).dequantize();
    assert_eq!(lazy.into_data(), want.into_data());
}

/// A lazily dequantized tensor first read inside a graph capture is refused, naming why: the
/// dequantization would be recorded, not run, and the tensor's buffer would hold nothing until
/// a replay. Read before the capture, it is captured and replayed with Burn's values.
#[test]
fn a_lazy_tensor_first_read_in_a_graph_capture_is_refused() {
    let _serial = serial();
    let dev = device();
    let w = Tensor::<Ascend, 2>::from_data(TensorData::new(uniform(48, 31), [6, 8]), &dev);
    let q = w.quantize_dynamic(&per_tensor_int8().scheme);
    let want =
        Tensor::<Flex, 2>::from_data(q.clone().into_data(), &Default::default()).dequantize() * 2.0;

    let lazy = q.dequantize();
    let failed = burn_ascend::graph::capture(&dev, || lazy.clone() * 2.0);
    let why = failed.expect_err("materialising in a capture").to_string();
    assert!(
        why.contains("first read during a graph capture") && why.contains("[6, 8]"),
        "{why}"
    );

    // The device goes on: read eagerly once, the same tensor is captured and replayed.
    assert_eq!((lazy.clone() * 2.0).into_data(), want.clone().into_data());
    let (step, doubled) = burn_ascend::graph::capture(&dev, || lazy.clone() * 2.0).unwrap();
    step.replay().unwrap();
    assert_eq!(doubled.into_data(), want.into_data());
}
