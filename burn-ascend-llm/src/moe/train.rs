//! Next-token training with Adam, plus the load-balancing loss: of the built-in MoE decoder,
//! or of any model that is a [`TrainModel`] (the Hugging Face families' decoder).

use std::time::Instant;

use burn::module::AutodiffModule;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Int, Tensor, TensorData};
use burn_ascend::FusedOps;

use super::model::MoeDecoder;
use crate::families::blocks::quant::Quantize;

/// A model [`train`] fine-tunes.
pub trait TrainModel<B: AutodiffBackend>: AutodiffModule<B> {
    /// Logits `[B, S, V]` of whole sequences `tokens [B, S]` and the model's load-balancing
    /// loss (unweighted).
    fn forward_train(&self, tokens: Tensor<B, 2, Int>) -> (Tensor<B, 3>, Tensor<B, 1>);

    /// How the model was quantized for inference, if it was: [`train`] refuses it.
    fn quantized(&self) -> Option<Quantize> {
        None
    }
}

impl<B: AutodiffBackend + FusedOps> TrainModel<B> for MoeDecoder<B> {
    fn forward_train(&self, tokens: Tensor<B, 2, Int>) -> (Tensor<B, 3>, Tensor<B, 1>) {
        self.forward(tokens)
    }

    fn quantized(&self) -> Option<Quantize> {
        MoeDecoder::quantized(self)
    }
}

/// Training settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrainConfig {
    /// Optimizer steps.
    pub steps: usize,
    /// Sequences per step.
    pub batch: usize,
    /// Tokens per sequence.
    pub seq_len: usize,
    /// Adam learning rate.
    pub learning_rate: f64,
    /// Weight of the load-balancing loss.
    pub aux_weight: f64,
}

impl TrainConfig {
    /// Checks that every size is positive and the learning rate a positive finite number.
    pub fn validate(&self) -> Result<(), TrainError> {
        let sizes = [
            ("steps", self.steps),
            ("batch", self.batch),
            ("seq_len", self.seq_len),
        ];
        if let Some((name, _)) = sizes.iter().find(|(_, v)| *v == 0) {
            return Err(TrainError::Config(format!("{name} must be at least 1")));
        }
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return Err(TrainError::Config(format!(
                "the learning rate {} must be positive and finite",
                self.learning_rate
            )));
        }
        if !(self.aux_weight.is_finite() && self.aux_weight >= 0.0) {
            return Err(TrainError::Config(format!(
                "the load-balancing weight {} must be finite and not negative",
                self.aux_weight
            )));
        }
        Ok(())
    }
}

/// What one step did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepReport {
    /// Step number, from 1.
    pub step: usize,
    /// Cross-entropy of the next byte.
    pub loss: f32,
    /// Load-balancing loss.
    pub aux: f32,
    /// Training tokens per second over the step.
    pub tokens_per_second: f64,
}

/// Sequences of `seq_len + 1` tokens starting at evenly spread offsets that move with `step`,
/// split into inputs and next-token targets.
pub fn batch<B: AutodiffBackend>(
    tokens: &[u32],
    cfg: &TrainConfig,
    step: usize,
    device: &B::Device,
) -> (Tensor<B, 2, Int>, Tensor<B, 2, Int>) {
    let span = cfg.seq_len + 1;
    let room = tokens.len().saturating_sub(span).max(1);
    let mut inputs = Vec::with_capacity(cfg.batch * cfg.seq_len);
    let mut targets = Vec::with_capacity(cfg.batch * cfg.seq_len);
    for b in 0..cfg.batch {
        let start = (b * room / cfg.batch + step * 97) % room;
        let window: Vec<i32> = (0..span)
            .map(|i| tokens[(start + i) % tokens.len()] as i32)
            .collect();
        inputs.extend_from_slice(&window[..cfg.seq_len]);
        targets.extend_from_slice(&window[1..]);
    }
    let shape = [cfg.batch, cfg.seq_len];
    (
        Tensor::from_data(TensorData::new(inputs, shape), device),
        Tensor::from_data(TensorData::new(targets, shape), device),
    )
}

/// Training that cannot go on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TrainError {
    /// Settings training cannot run with.
    #[error("invalid training settings: {0}")]
    Config(String),
    /// The loss is NaN or infinite: the weights are ruined (a learning rate too high?).
    #[error(
        "the loss became {loss} (auxiliary loss {aux}) after {updates} optimizer steps: \
         training stopped, the weights are not usable (try a lower learning rate)"
    )]
    NonFinite {
        /// Optimizer steps applied to the weights that gave it.
        updates: usize,
        /// The cross-entropy.
        loss: f32,
        /// The load-balancing loss.
        aux: f32,
    },
    /// The model's weights are int8 (inference only: the int8 operators have no gradients).
    #[error("the model is quantized ({0}) for inference: train the float model, then quantize it")]
    Quantized(Quantize),
}

/// Trains `model` for `cfg.steps` steps on `tokens`, reporting each step. Checks `cfg` first,
/// and stops at the first loss that is not finite, that of the final weights (on one more
/// batch) included, so a model it returns never computes NaN on the training data.
pub fn train<B: AutodiffBackend + FusedOps, M: TrainModel<B>>(
    mut model: M,
    tokens: &[u32],
    cfg: &TrainConfig,
    device: &B::Device,
    mut report: impl FnMut(StepReport),
) -> Result<M, TrainError> {
    cfg.validate()?;
    if let Some(q) = model.quantized() {
        return Err(TrainError::Quantized(q));
    }
    let mut optim = AdamConfig::new().init();
    let loss_fn = CrossEntropyLossConfig::new().init(device);
    // The cross-entropy and load-balancing loss of `model` on the batch of `step`.
    let losses = |model: &M, step: usize| {
        let (inputs, targets) = batch::<B>(tokens, cfg, step, device);
        let (logits, aux) = model.forward_train(inputs);
        let [b, s, v] = logits.dims();
        let ce = loss_fn.forward(logits.reshape([b * s, v]), targets.reshape([b * s]));
        (ce, aux)
    };
    let scalar = |t: Tensor<B, 1>| {
        t.into_data()
            .convert::<f32>()
            .to_vec::<f32>()
            .expect("a scalar")[0]
    };
    let finite = |updates: usize, loss: f32, aux: f32| {
        if loss.is_finite() && aux.is_finite() {
            Ok(())
        } else {
            Err(TrainError::NonFinite { updates, loss, aux })
        }
    };
    for step in 1..=cfg.steps {
        let start = Instant::now();
        let (ce, aux) = losses(&model, step);
        let loss = ce.clone() + aux.clone() * cfg.aux_weight;
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(cfg.learning_rate, model, grads);
        let (loss, aux) = (scalar(ce), scalar(aux));
        finite(step - 1, loss, aux)?;
        let secs = start.elapsed().as_secs_f64().max(1e-9);
        report(StepReport {
            step,
            loss,
            aux,
            tokens_per_second: (cfg.batch * cfg.seq_len) as f64 / secs,
        });
    }
    if cfg.steps > 0 {
        let (ce, aux) = losses(&model, cfg.steps + 1);
        finite(cfg.steps, scalar(ce), scalar(aux))?;
    }
    Ok(model)
}
