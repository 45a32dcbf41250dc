//! Training on `Autodiff<Ascend>` follows `Autodiff<Flex>`: an MLP with Adam and a small CNN
//! (convolutions, max and adaptive pooling, interpolation) with SGD and momentum start from the
//! same weights (built from the same host data on each backend), and their loss curves must
//! agree step by step and fall.
//!
//! The loop is the one Burn's learner runs (forward, loss, backward, `GradientsParams`,
//! `Optimizer::step`), written out: burn-train would add its dataset and logging stack to the
//! test build without exercising anything more of the backend.

mod common;

use burn::module::{Module, Param};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::pool::{AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig, MaxPool2d, MaxPool2dConfig};
use burn::nn::{Linear, LinearConfig, PaddingConfig2d, Relu};
use burn::optim::momentum::MomentumConfig;
use burn::optim::{AdamConfig, GradientsParams, Optimizer, SgdConfig};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::module::interpolate;
use burn::tensor::ops::{InterpolateMode, InterpolateOptions};
use burn::tensor::{DType, ElementConversion, Int, Tensor, TensorData};
use burn_autodiff::Autodiff;
use common::*;

/// Deterministic values in [-scale, scale).
fn values(n: usize, seed: usize, scale: f64) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let h = ((i + seed) * 7919 + 13) % 997;
            ((h as f64 / 997.0 * 2.0 - 1.0) * scale) as f32
        })
        .collect()
}

fn tensor<B: Backend, const D: usize>(
    d: &B::Device,
    shape: [usize; D],
    seed: usize,
    scale: f64,
) -> Tensor<B, D> {
    let n = shape.iter().product();
    Tensor::from_data(TensorData::new(values(n, seed, scale), shape), d)
}

/// A linear layer with weights from [`values`] (Burn's default init draws from the backend's
/// own generator, which differs between backends).
fn linear<B: Backend>(d: &B::Device, inputs: usize, outputs: usize, seed: usize) -> Linear<B> {
    let mut l = LinearConfig::new(inputs, outputs).init(d);
    let k = (1.0 / inputs as f64).sqrt();
    l.weight = Param::from_tensor(tensor(d, [inputs, outputs], seed, k));
    l.bias = Some(Param::from_tensor(tensor(d, [outputs], seed + 1, k)));
    l
}

fn conv<B: Backend>(
    d: &B::Device,
    c_in: usize,
    c_out: usize,
    padding: usize,
    seed: usize,
) -> Conv2d<B> {
    let mut c = Conv2dConfig::new([c_in, c_out], [3, 3])
        .with_padding(PaddingConfig2d::Explicit(
            padding, padding, padding, padding,
        ))
        .init(d);
    let k = (1.0 / (c_in * 9) as f64).sqrt();
    c.weight = Param::from_tensor(tensor(d, [c_out, c_in, 3, 3], seed, k));
    c.bias = Some(Param::from_tensor(tensor(d, [c_out], seed + 1, k)));
    c
}

#[derive(Module, Debug)]
struct Mlp<B: Backend> {
    hidden: Linear<B>,
    out: Linear<B>,
    relu: Relu,
}

impl<B: Backend> Mlp<B> {
    fn new(d: &B::Device) -> Self {
        Self {
            hidden: linear(d, 8, 16, 0),
            out: linear(d, 16, 3, 100),
            relu: Relu::new(),
        }
    }

    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.out.forward(self.relu.forward(self.hidden.forward(x)))
    }
}

#[derive(Module, Debug)]
struct Cnn<B: Backend> {
    conv1: Conv2d<B>,
    conv2: Conv2d<B>,
    pool: MaxPool2d,
    adaptive: AdaptiveAvgPool2d,
    head: Linear<B>,
    relu: Relu,
}

impl<B: Backend> Cnn<B> {
    fn new(d: &B::Device) -> Self {
        Self {
            conv1: conv(d, 1, 4, 1, 200),
            conv2: conv(d, 4, 6, 0, 300),
            pool: MaxPool2dConfig::new([2, 2]).init(),
            adaptive: AdaptiveAvgPool2dConfig::new([2, 2]).init(),
            head: linear(d, 24, 3, 400),
            relu: Relu::new(),
        }
    }

    fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 2> {
        let x = self.relu.forward(self.conv1.forward(x));
        let x = self.pool.forward(x);
        let x = interpolate(
            x,
            [6, 6],
            InterpolateOptions::new(InterpolateMode::Bilinear),
        );
        let x = self.relu.forward(self.conv2.forward(x));
        let x = self.adaptive.forward(x);
        self.head.forward(x.flatten(1, 3))
    }
}

/// Class `i % 3` for sample `i`, made learnable by shifting its inputs by the class.
fn labels<B: Backend>(d: &B::Device, n: usize) -> Tensor<B, 1, Int> {
    Tensor::from_data(
        TensorData::new((0..n as i64).map(|i| i % 3).collect(), [n]),
        d,
    )
}

fn train_mlp<B: AutodiffBackend>(d: &B::Device, steps: usize) -> Vec<f64> {
    let n = 12;
    let classes = labels::<B>(d, n);
    let shift = classes.clone().float().unsqueeze_dim::<2>(1) * 0.8;
    let x = tensor::<B, 2>(d, [n, 8], 7, 1.0) + shift;
    let mut model = Mlp::<B>::new(d);
    let mut optim = AdamConfig::new().init::<B, Mlp<B>>();
    let loss_fn = CrossEntropyLossConfig::new().init(d);
    let mut losses = Vec::new();
    for _ in 0..steps {
        let loss = loss_fn.forward(model.forward(x.clone()), classes.clone());
        losses.push(loss.clone().into_scalar().elem::<f64>());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(2e-2, model, grads);
    }
    losses
}

fn train_cnn<B: AutodiffBackend>(d: &B::Device, steps: usize) -> Vec<f64> {
    let n = 6;
    let classes = labels::<B>(d, n);
    let shift = classes.clone().float().reshape([n, 1, 1, 1]) * 0.5;
    let x = tensor::<B, 4>(d, [n, 1, 8, 8], 11, 1.0) + shift;
    let mut model = Cnn::<B>::new(d);
    let mut optim = SgdConfig::new()
        .with_momentum(Some(MomentumConfig::new().with_momentum(0.9)))
        .init::<B, Cnn<B>>();
    let loss_fn = CrossEntropyLossConfig::new().init(d);
    let mut losses = Vec::new();
    for _ in 0..steps {
        let loss = loss_fn.forward(model.forward(x.clone()), classes.clone());
        losses.push(loss.clone().into_scalar().elem::<f64>());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(5e-2, model, grads);
    }
    losses
}

/// The two curves agree within `tol` (relative) at every step, and training made progress.
fn assert_same_descent(what: &str, ascend: &[f64], flex: &[f64], tol: f64) {
    assert_eq!(ascend.len(), flex.len());
    for (step, (a, f)) in ascend.iter().zip(flex).enumerate() {
        assert!(
            (a - f).abs() <= tol * f.abs().max(1.0),
            "{what}: step {step} loss {a} on Ascend, {f} on the reference\n ascend {ascend:?}\n flex   {flex:?}"
        );
    }
    let (first, last) = (flex[0], flex[flex.len() - 1]);
    assert!(
        last < 0.8 * first && ascend[ascend.len() - 1] < 0.8 * ascend[0],
        "{what}: the loss did not fall: ascend {ascend:?}, flex {flex:?}"
    );
}

#[test]
fn mlp_with_adam_follows_the_reference() {
    let ascend = train_mlp::<Autodiff<Ascend>>(&device(), 15);
    let flex = train_mlp::<Autodiff<Flex>>(&Default::default(), 15);
    assert_same_descent("MLP + Adam", &ascend, &flex, 1e-4);
}

#[test]
fn cnn_with_sgd_momentum_follows_the_reference() {
    let ascend = train_cnn::<Autodiff<Ascend>>(&device(), 12);
    let flex = train_cnn::<Autodiff<Flex>>(&Default::default(), 12);
    assert_same_descent("CNN + SGD", &ascend, &flex, 1e-4);
}

#[test]
fn half_precision_step_matches_the_reference() {
    // Burn's modules and optimizers work in the default float dtype, so half precision is
    // checked on one F16 forward and backward step.
    fn step<B: AutodiffBackend>(d: &B::Device) -> Vec<TensorData> {
        let x = tensor::<B, 2>(d, [4, 8], 3, 1.0)
            .cast(DType::F16)
            .require_grad();
        let w = tensor::<B, 2>(d, [8, 3], 5, 0.5)
            .cast(DType::F16)
            .require_grad();
        let loss = burn::tensor::activation::log_softmax(x.clone().matmul(w.clone()), 1).sum();
        let value = loss.clone().into_data();
        let grads = loss.backward();
        vec![
            value,
            x.grad(&grads).expect("x is tracked").into_data(),
            w.grad(&grads).expect("w is tracked").into_data(),
        ]
    }
    compare(
        "F16 step",
        Tolerance::LOOSE,
        ("Autodiff<Ascend>", || step::<Autodiff<Ascend>>(&device())),
        || step::<Autodiff<Flex>>(&Default::default()),
    );
}
