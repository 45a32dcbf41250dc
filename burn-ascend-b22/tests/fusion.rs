//! `Fusion<Ascend>` for Burn 0.22 at the primitive level on the emulated NPU, against burn-flex
//! 0.22 on the same inputs, with the device's work counters showing that each fuser fired: a
//! run of element-wise ops as one `elementwise_program` launch, layer norm, linear, softmax and
//! log-softmax as Burn composes them as one `layer_norm` launch, one aclnnAddmm and one
//! aclnnSoftmax / aclnnLogSoftmax; and gradients through `Autodiff<Fusion<Ascend>>`, with fewer
//! launches than `Autodiff<Ascend>`. The counters are process-wide, so the tests take turns.

mod common;

use std::sync::{Mutex, MutexGuard};

use burn_ascend_b22::emulator::{aclnn_launches_of, work_counters};
use burn_ascend_b22::Ascend;
use burn_autodiff::Autodiff;
use burn_backend::ops::{ActivationOps, FloatTensorOps};
use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, Backend, Shape, TensorData, TensorMetadata, Tolerance};
use burn_flex::{Flex, FlexDevice};
use burn_fusion::Fusion;
use common::{npu, read};

type F = Fusion<Ascend>;

/// Held by every test: the work counters count the whole process.
static COUNTERS: Mutex<()> = Mutex::new(());

fn alone() -> MutexGuard<'static, ()> {
    COUNTERS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Deterministic test values (no RNG): distinct, of both signs, not integers.
fn float_data(shape: &[usize], seed: f32) -> TensorData {
    let v: Vec<f32> = (0..shape.iter().product::<usize>())
        .map(|i| ((i as f32 * 0.37 + seed).sin() * 2.0 * 64.0).round() / 64.0)
        .collect();
    TensorData::new(v, shape.to_vec())
}

fn tol() -> Tolerance<f32> {
    Tolerance::rel_abs(1e-5, 2e-6)
}

/// The device work `f` queued on the emulated NPU: (kernel launches, aclnn launches), and the
/// launches of each aclnn operator in `ops`.
struct Work {
    kernels: u64,
    aclnn: u64,
    of: Vec<u64>,
}

/// Runs `block` on `Fusion<Ascend>` over tensors made (and synchronised) beforehand, reads its
/// result and returns it with the work it queued.
fn fused(
    inputs: &[TensorData],
    ops: &[&str],
    block: impl FnOnce(Vec<FloatTensor<F>>) -> FloatTensor<F>,
) -> (TensorData, Work) {
    let tensors: Vec<_> = inputs
        .iter()
        .map(|d| F::float_from_data(d.clone(), &npu()))
        .collect();
    F::sync(&npu()).expect("sync");
    let (before, before_of) = (
        work_counters(),
        ops.iter().map(|o| aclnn_launches_of(o)).collect::<Vec<_>>(),
    );
    let out = read::<F>(block(tensors));
    let w = work_counters().since(&before);
    let of = ops
        .iter()
        .zip(before_of)
        .map(|(o, b)| aclnn_launches_of(o) - b)
        .collect();
    (
        out,
        Work {
            kernels: w.kernel_launches,
            aclnn: w.aclnn_launches,
            of,
        },
    )
}

fn on_flex(
    inputs: &[TensorData],
    block: impl FnOnce(Vec<FloatTensor<Flex>>) -> FloatTensor<Flex>,
) -> TensorData {
    let tensors = inputs
        .iter()
        .map(|d| Flex::float_from_data(d.clone(), &FlexDevice))
        .collect();
    read::<Flex>(block(tensors))
}

/// `gelu(x * 1.5 + 0.25)`: GELU as Burn composes it (erf and all) after a scale and shift.
fn gelu_block<B: Backend>(mut t: Vec<FloatTensor<B>>) -> FloatTensor<B> {
    let x = t.remove(0);
    B::gelu(B::float_add_scalar(
        B::float_mul_scalar(x, 1.5.into()),
        0.25.into(),
    ))
}

/// `exp(x) * 0.5 + x / y - 3`, masked to 0 where `x > y`.
fn arith_block<B: Backend>(mut t: Vec<FloatTensor<B>>) -> FloatTensor<B> {
    let (x, y) = (t.remove(0), t.remove(0));
    let e = B::float_mul_scalar(B::float_exp(x.clone()), 0.5.into());
    let s = B::float_add(e, B::float_div(x.clone(), y.clone()));
    let s = B::float_sub_scalar(s, 3.0.into());
    let gt = B::float_greater(x, y, burn_std::BoolStore::Native);
    B::float_mask_fill(s, gt, 0.0.into())
}

#[test]
fn elementwise_runs_are_one_program_launch() {
    let _g = alone();
    let x = [float_data(&[16, 96], 0.3)];
    let (got, work) = fused(&x, &[], gelu_block::<F>);
    got.assert_approx_eq(&on_flex(&x, gelu_block::<Flex>), tol());
    assert_eq!(
        (work.kernels, work.aclnn),
        (1, 0),
        "gelu's block is one program launch"
    );

    // Divisors kept away from zero.
    let y = TensorData::new(
        float_data(&[16, 96], 1.1)
            .iter::<f32>()
            .map(|v| if v.abs() < 0.25 { 0.25 + v.abs() } else { v })
            .collect(),
        vec![16, 96],
    );
    let [x] = x;
    let inputs = [x, y];
    let (got, work) = fused(&inputs, &[], arith_block::<F>);
    got.assert_approx_eq(&on_flex(&inputs, arith_block::<Flex>), tol());
    assert_eq!(
        (work.kernels, work.aclnn),
        (1, 0),
        "the masked chain is one program launch"
    );
}

fn layer_norm_block<B: Backend>(mut t: Vec<FloatTensor<B>>) -> FloatTensor<B> {
    let (x, g, b) = (t.remove(0), t.remove(0), t.remove(0));
    B::layer_norm(x, g, Some(b), 1e-5)
}

#[test]
fn composed_layer_norm_is_one_layer_norm_launch() {
    let _g = alone();
    let inputs = [
        float_data(&[24, 160], 0.5),
        float_data(&[160], 1.7),
        float_data(&[160], 2.9),
    ];
    let (got, work) = fused(&inputs, &[], layer_norm_block::<F>);
    got.assert_approx_eq(
        &on_flex(&inputs, layer_norm_block::<Flex>),
        Tolerance::<f32>::rel_abs(1e-4, 1e-5),
    );
    assert_eq!((work.kernels, work.aclnn), (1, 0), "one layer_norm launch");
}

/// `linear(x, w, b)`, the bias flattened to `[n]` first (a reshape in the block when it comes as
/// `[1, n]`, nothing when it is `[n]` already).
fn linear_block<B: Backend>(mut t: Vec<FloatTensor<B>>) -> FloatTensor<B> {
    let (x, w, b) = (t.remove(0), t.remove(0), t.remove(0));
    let n = b.shape().num_elements();
    B::linear(x, w, Some(B::float_reshape(b, Shape::new([n]))))
}

#[test]
fn composed_linear_is_one_addmm() {
    let _g = alone();
    // Rank 2 (Burn keeps the batched form) and rank 3 with few rows per batch (Burn 0.22
    // folds the batches into the rows: reshapes around the matmul and the bias add); a bias
    // reshaped from `[1, n]` just before (a reshape of a rank-2 tensor that is not the weight's).
    for (x_shape, b_shape) in [
        (&[5, 12][..], &[9][..]),
        (&[2, 5, 12], &[9]),
        (&[5, 12], &[1, 9]),
    ] {
        let inputs = [
            float_data(x_shape, 0.2),
            float_data(&[12, 9], 1.3),
            float_data(b_shape, 2.4),
        ];
        let (got, work) = fused(&inputs, &["aclnnAddmm"], linear_block::<F>);
        got.assert_approx_eq(&on_flex(&inputs, linear_block::<Flex>), tol());
        assert_eq!(
            (work.kernels, work.aclnn, work.of[0]),
            (0, 1, 1),
            "x {x_shape:?}, bias {b_shape:?}: one aclnnAddmm"
        );
    }
}

#[test]
fn composed_softmax_and_log_softmax_are_one_operator() {
    let _g = alone();
    let x = [float_data(&[6, 4, 33], 0.9)];
    for (dim, log) in [(2, false), (1, false), (2, true), (1, true)] {
        let op = if log {
            "aclnnLogSoftmax"
        } else {
            "aclnnSoftmax"
        };
        let (got, work) = fused(&x, &[op], |mut t| match log {
            true => F::log_softmax(t.remove(0), dim),
            false => F::softmax(t.remove(0), dim),
        });
        let want = on_flex(&x, |mut t| match log {
            true => Flex::log_softmax(t.remove(0), dim),
            false => Flex::softmax(t.remove(0), dim),
        });
        got.assert_approx_eq(&want, tol());
        assert_eq!(
            (work.kernels, work.aclnn, work.of[0]),
            (0, 1, 1),
            "{op} over dim {dim}"
        );
    }
}

/// `sum(softmax(silu(y) + tanh(y) * 0.5, 1) * t)` with `y = linear(x)`: the gradients of x, the
/// weight and the bias. (Not GELU: `Fusion` keeps `ActivationOps`' default `gelu_backward`, the
/// tanh approximation's derivative, 5e-4 off the exact one eager `Ascend` and burn-flex take.)
fn training_step<B: AutodiffBackend>(data: &[TensorData], device: &B::Device) -> Vec<TensorData> {
    let leaf =
        |d: &TensorData| B::float_set_require_grad(B::float_from_data(d.clone(), device), true);
    let (x, w, b) = (leaf(&data[0]), leaf(&data[1]), leaf(&data[2]));
    let target = B::float_from_data(data[3].clone(), device);
    let y = B::linear(x.clone(), w.clone(), Some(b.clone()));
    let z = B::float_add(
        B::float_mul(B::sigmoid(y.clone()), y.clone()),
        B::float_mul_scalar(B::float_tanh(y), 0.5.into()),
    );
    let loss = B::float_sum(B::float_mul(B::softmax(z, 1), target));
    let grads = B::backward(loss);
    [x, w, b]
        .iter()
        .map(|t| read::<B::InnerBackend>(B::grad(t, &grads).expect("a gradient")))
        .collect()
}

#[test]
fn autodiff_over_fusion_matches_flex_with_fewer_launches() {
    let _g = alone();
    let data = [
        float_data(&[8, 12], 0.4),
        float_data(&[12, 10], 1.6),
        float_data(&[10], 2.2),
        float_data(&[8, 10], 3.1),
    ];
    let launches = |f: &dyn Fn() -> Vec<TensorData>| {
        let before = work_counters();
        let out = f();
        let w = work_counters().since(&before);
        (out, w.kernel_launches, w.aclnn_launches)
    };
    let (fused, fused_kernels, fused_aclnn) =
        launches(&|| training_step::<Autodiff<F>>(&data, &npu()));
    let (eager, eager_kernels, eager_aclnn) =
        launches(&|| training_step::<Autodiff<Ascend>>(&data, &npu()));
    let flex = training_step::<Autodiff<Flex>>(&data, &FlexDevice);
    for (i, name) in ["x", "weight", "bias"].iter().enumerate() {
        println!("{name}");
        fused[i].assert_approx_eq(&flex[i], Tolerance::<f32>::rel_abs(1e-4, 1e-5));
        eager[i].assert_approx_eq(&flex[i], Tolerance::<f32>::rel_abs(1e-4, 1e-5));
    }
    println!(
        "Autodiff<Fusion<Ascend>>: {fused_kernels} kernels + {fused_aclnn} aclnn; \
         Autodiff<Ascend>: {eager_kernels} kernels + {eager_aclnn} aclnn"
    );
    assert!(
        fused_kernels > eager_kernels,
        "fused element-wise runs launch programs ({fused_kernels} vs {eager_kernels} kernels)"
    );
    assert!(
        fused_kernels + fused_aclnn < eager_kernels + eager_aclnn,
        "fusion saves launches ({fused_kernels} + {fused_aclnn} vs {eager_kernels} + {eager_aclnn})"
    );
}
