//! Next-byte training of the MoE decoder with Adam, plus the load-balancing loss.

use std::time::Instant;

use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Int, Tensor, TensorData};
use burn_ascend::FusedOps;

use super::model::MoeDecoder;

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

/// Trains `model` for `cfg.steps` steps on `tokens`, reporting each step.
pub fn train<B: AutodiffBackend + FusedOps>(
    mut model: MoeDecoder<B>,
    tokens: &[u32],
    cfg: &TrainConfig,
    device: &B::Device,
    mut report: impl FnMut(StepReport),
) -> MoeDecoder<B> {
    let mut optim = AdamConfig::new().init();
    let loss_fn = CrossEntropyLossConfig::new().init(device);
    for step in 1..=cfg.steps {
        let start = Instant::now();
        let (inputs, targets) = batch::<B>(tokens, cfg, step, device);
        let (logits, aux) = model.forward(inputs);
        let [b, s, v] = logits.dims();
        let ce = loss_fn.forward(logits.reshape([b * s, v]), targets.reshape([b * s]));
        let loss = ce.clone() + aux.clone() * cfg.aux_weight;
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(cfg.learning_rate, model, grads);
        let scalar = |t: Tensor<B, 1>| {
            t.into_data()
                .convert::<f32>()
                .to_vec::<f32>()
                .expect("a scalar")[0]
        };
        let (loss, aux) = (scalar(ce), scalar(aux));
        let secs = start.elapsed().as_secs_f64().max(1e-9);
        report(StepReport {
            step,
            loss,
            aux,
            tokens_per_second: (b * s) as f64 / secs,
        });
    }
    model
}
