//! The programs: plain Burn 0.22 code, generic over nothing, given only a `Device`.

use burn::module::{Module, Param};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, Relu};
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
    /// A model on `device` (an autodiff device, for its parameters to be trainable) with weights
    /// from a fixed formula, scaled like Burn's default `U(-k, k)`, `k = 1/sqrt(fan_in)`: every
    /// device starts from the same model, whatever its random generator.
    pub fn new(device: &Device) -> Self {
        Self {
            hidden: linear(FEATURES, HIDDEN, device),
            relu: Relu::new(),
            out: linear(HIDDEN, CLASSES, device),
        }
    }

    /// Logits `[batch, CLASSES]` of `x: [batch, FEATURES]`.
    pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.out.forward(self.relu.forward(self.hidden.forward(x)))
    }
}

/// A `fan_in x fan_out` layer with the weights of [`linear_values`].
fn linear(fan_in: usize, fan_out: usize, device: &Device) -> Linear {
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

/// The weights (`fan_in x fan_out`, row-major) and bias (`fan_out`) of a layer, from a fixed
/// formula in `[-k, k]`, `k = 1/sqrt(fan_in)`. Host values, so that the Burn 0.21 mirror of these
/// programs (`programs_burn021.rs`) starts from the same model.
pub fn linear_values(fan_in: usize, fan_out: usize) -> (Vec<f32>, Vec<f32>) {
    let k = 1.0 / (fan_in as f32).sqrt();
    let value = |i: usize| ((i * 29 % 23) as f32 / 11.0 - 1.0) * k;
    let weight = (0..fan_in * fan_out).map(value).collect();
    let bias = (0..fan_out).map(|i| value(i + 5) * 0.5).collect();
    (weight, bias)
}

/// A synthetic batch, the same bytes on every device: [`batch_values`] as tensors.
pub fn batch(device: &Device) -> (Tensor<2>, Tensor<1, Int>) {
    let (x, y) = batch_values();
    (
        Tensor::from_data(TensorData::new(x, [BATCH, FEATURES]), device),
        Tensor::from_data(TensorData::new(y, [BATCH]), device),
    )
}

/// The batch's inputs (`BATCH x FEATURES`, row-major) from a fixed formula, and the class of
/// each sample from the sign pattern of two input sums.
pub fn batch_values() -> (Vec<f32>, Vec<i64>) {
    let x: Vec<f32> = (0..BATCH * FEATURES)
        .map(|i| ((i * 37 % 101) as f32 / 50.0 - 1.0) * 1.5)
        .collect();
    let y = x
        .chunks(FEATURES)
        .map(|row| {
            let a: f32 = row[..FEATURES / 2].iter().sum();
            let b: f32 = row[FEATURES / 2..].iter().sum();
            i64::from(a > 0.0) + i64::from(b > a)
        })
        .collect();
    (x, y)
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
