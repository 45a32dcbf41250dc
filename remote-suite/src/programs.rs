//! The programs: plain Burn 0.22 code, generic over nothing, given only a `Device`.

use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::{Device, Int, Tensor, TensorData};

/// A two-layer perceptron classifying `FEATURES` inputs into `CLASSES`.
#[derive(Module, Debug)]
pub struct Mlp {
    hidden: Linear,
    relu: Relu,
    out: Linear,
}

/// Inputs per sample.
pub const FEATURES: usize = 8;
/// Hidden width.
pub const HIDDEN: usize = 32;
/// Output classes.
pub const CLASSES: usize = 3;
/// Samples per batch.
pub const BATCH: usize = 64;

impl Mlp {
    /// A model with Burn's default initialisation on `device` (seeded by the caller); an
    /// autodiff device, for its parameters to be trainable.
    pub fn new(device: &Device) -> Self {
        Self {
            hidden: LinearConfig::new(FEATURES, HIDDEN).init(device),
            relu: Relu::new(),
            out: LinearConfig::new(HIDDEN, CLASSES).init(device),
        }
    }

    /// Logits `[batch, CLASSES]` of `x: [batch, FEATURES]`.
    pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.out.forward(self.relu.forward(self.hidden.forward(x)))
    }
}

/// A synthetic batch, the same bytes on every device: inputs from a fixed formula and the class
/// of each sample from the sign pattern of two input sums.
pub fn batch(device: &Device) -> (Tensor<2>, Tensor<1, Int>) {
    let x: Vec<f32> = (0..BATCH * FEATURES)
        .map(|i| ((i * 37 % 101) as f32 / 50.0 - 1.0) * 1.5)
        .collect();
    let y: Vec<i64> = x
        .chunks(FEATURES)
        .map(|row| {
            let a: f32 = row[..FEATURES / 2].iter().sum();
            let b: f32 = row[FEATURES / 2..].iter().sum();
            i64::from(a > 0.0) + i64::from(b > a)
        })
        .collect();
    (
        Tensor::from_data(TensorData::new(x, [BATCH, FEATURES]), device),
        Tensor::from_data(TensorData::new(y, [BATCH]), device),
    )
}

/// Trains `model` (made on an autodiff device), forked to `device` (with autodiff), for `steps`
/// Adam steps on [`batch`] and returns the loss of each step.
pub fn train(model: Mlp, device: &Device, steps: usize) -> Vec<f32> {
    let device = device.clone().autodiff();
    let mut model = model.fork(&device);
    let (x, y) = batch(&device);
    let loss_fn = CrossEntropyLossConfig::new().init(&device);
    let mut optim = AdamConfig::new().init();
    let mut losses = Vec::with_capacity(steps);
    for _ in 0..steps {
        let loss = loss_fn.forward(model.forward(x.clone()), y.clone());
        losses.push(loss.clone().into_scalar::<f32>());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-2, model, grads);
    }
    losses
}
