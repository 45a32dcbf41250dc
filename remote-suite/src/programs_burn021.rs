//! The programs of `programs.rs` written for Burn 0.21, run in process on `burn_ascend::Ascend`:
//! the in-process Ascend reference of the remote route. Burn 0.22 cannot name an outside backend
//! in process (its backends are a closed set), so the same device in process is the Burn 0.21
//! adapter. Same model, weights ([`linear_values`]), batch ([`batch_values`]), loss and Adam
//! steps as [`train`](crate::programs::train).
//!
//! Not part of the library, which is Burn 0.22 only: the bench and `tests/in_process_ascend.rs`
//! include this file (`#[path]`), with Burn 0.21 as the dev-dependency `burn021`.

// `#[derive(Module)]` expands to `burn::module::...`: here that must be Burn 0.21.
use burn021 as burn;

use burn021::module::{Module, Param};
use burn021::nn::loss::CrossEntropyLossConfig;
use burn021::nn::{Linear, Relu};
use burn021::optim::{AdamConfig, GradientsParams, Optimizer};
use burn021::tensor::backend::{AutodiffBackend, Backend};
use burn021::tensor::{ElementConversion, Int, Tensor, TensorData};
use burn_ascend_remote_suite::programs::{
    batch_values, linear_values, BATCH, CLASSES, FEATURES, HIDDEN,
};

/// The two-layer perceptron of `programs::Mlp`.
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    hidden: Linear<B>,
    relu: Relu,
    out: Linear<B>,
}

impl<B: Backend> Mlp<B> {
    /// The model of `programs::Mlp::new`, on `device`.
    pub fn new(device: &B::Device) -> Self {
        Self {
            hidden: linear(FEATURES, HIDDEN, device),
            relu: Relu::new(),
            out: linear(HIDDEN, CLASSES, device),
        }
    }

    /// Logits `[batch, CLASSES]` of `x: [batch, FEATURES]`.
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.out.forward(self.relu.forward(self.hidden.forward(x)))
    }
}

fn linear<B: Backend>(fan_in: usize, fan_out: usize, device: &B::Device) -> Linear<B> {
    let (weight, bias) = linear_values(fan_in, fan_out);
    Linear {
        weight: Param::from_tensor(Tensor::from_data(
            TensorData::new(weight, [fan_in, fan_out]),
            device,
        )),
        bias: Some(Param::from_tensor(Tensor::from_data(
            TensorData::new(bias, [fan_out]),
            device,
        ))),
    }
}

/// Builds the model on `device` and trains it for `steps` Adam steps on the suite's batch, as
/// `programs::train` does (the model's weights uploaded, then each step's loss read back).
pub fn train<B: AutodiffBackend>(device: &B::Device, steps: usize) -> Vec<f32> {
    let mut model = Mlp::<B>::new(device);
    let (x, y) = batch_values();
    let x = Tensor::<B, 2>::from_data(TensorData::new(x, [BATCH, FEATURES]), device);
    let y = Tensor::<B, 1, Int>::from_data(TensorData::new(y, [BATCH]), device);
    let loss_fn = CrossEntropyLossConfig::new().init(device);
    let mut optim = AdamConfig::new().init();
    let mut losses = Vec::with_capacity(steps);
    for _ in 0..steps {
        let loss = loss_fn.forward(model.forward(x.clone()), y.clone());
        losses.push(loss.clone().into_scalar().elem::<f32>());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-2, model, grads);
    }
    losses
}
