//! Data-parallel training on several NPUs: one replica of the model per NPU, each step's batch
//! split evenly across them, the replicas' gradients averaged by one all-reduce of all of them
//! (one bucket, as DDP frameworks coalesce gradients to pay the collective's latency once),
//! then the same optimizer step on every replica.
//!
//! This uses `burn_ascend::collective` directly rather than Burn's distributed API, because that
//! API is a Cargo feature that makes `Autodiff<Flex>` stop compiling, and this package's tests
//! train on `Autodiff<Flex>` (burn-ascend's own `distributed` feature and its test cover Burn's
//! API).
//!
//! The load-balancing loss is not a sum over tokens: its routed fractions are batch-wide. Each
//! replica's MoE layers therefore average their fractions across the replicas
//! ([`DataParallel::global_fraction`]), so that the averaged gradients are those of one device
//! training on the whole batch, up to summation order.

use std::sync::Arc;
use std::thread::ScopedJoinHandle;

use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::Tensor;
use burn_ascend::collective::{self, CollectiveOps, Communicator, Reduce};
use burn_ascend::{AscendDevice, FusedOps};

use super::model::MoeDecoder;
use super::parallel::Parallel;
use super::train::{batch, StepReport, TrainConfig, TrainError};

type Mean<B> = fn(&Communicator, Tensor<B, 1>) -> Tensor<B, 1>;

/// The replicas' group, as a MoE layer of each replica sees it.
pub struct DataParallel<B: Backend> {
    comm: Arc<Communicator>,
    // Bound where the backend's collectives are known (the layer only knows `FusedOps`).
    mean: Mean<B>,
}

impl<B: Backend> DataParallel<B> {
    /// The routed fractions averaged over the replicas (each replica holds an equal share of
    /// the batch, so this is the whole batch's fraction).
    pub fn global_fraction(&self, fraction: Tensor<B, 1>) -> Tensor<B, 1> {
        (self.mean)(&self.comm, fraction)
    }
}

/// Initialises every parameter: Burn initialises parameters lazily, and a clone of an untouched
/// module would draw its own random weights.
struct Materialize;

impl<B: Backend> ModuleVisitor<B> for Materialize {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let _ = param.val();
    }
}

/// Averages the replicas' gradients in one all-reduce: every replica's gradients flattened and
/// concatenated (in the order the module visits its parameters), reduced, and split back.
struct Bucket<'a, B: AutodiffBackend> {
    grads: &'a mut [GradientsParams],
    devices: &'a [AscendDevice],
    /// The parameters in the bucket, with their shapes.
    layout: Vec<(ParamId, Vec<usize>)>,
    /// Per replica, its flattened gradients.
    parts: Vec<Vec<Tensor<B::InnerBackend, 1>>>,
    /// Per replica, the reduced bucket (for the second pass).
    reduced: Vec<Tensor<B::InnerBackend, 1>>,
}

impl<B: AutodiffBackend<Device = AscendDevice>> ModuleVisitor<B> for Bucket<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if self.reduced.is_empty() {
            // First pass: gather each replica's gradient of this parameter.
            let got: Vec<Option<Tensor<B::InnerBackend, D>>> = self
                .grads
                .iter_mut()
                .map(|g| g.remove::<B::InnerBackend, D>(param.id))
                .collect();
            if got.iter().all(Option::is_none) {
                return;
            }
            let shape = param.val().dims();
            let numel: usize = shape.iter().product();
            for ((part, g), device) in self.parts.iter_mut().zip(got).zip(self.devices) {
                let g = g.unwrap_or_else(|| Tensor::zeros(shape, device));
                part.push(g.reshape([numel]));
            }
            self.layout.push((param.id, shape.to_vec()));
        } else if let Some(at) = self.layout.iter().position(|(id, _)| *id == param.id) {
            // Second pass: hand each replica its share of the reduced bucket.
            let offset: usize = self.layout[..at]
                .iter()
                .map(|(_, s)| s.iter().product::<usize>())
                .sum();
            let shape: [usize; D] = self.layout[at].1.clone().try_into().expect("the rank");
            let numel: usize = shape.iter().product();
            for (g, reduced) in self.grads.iter_mut().zip(&self.reduced) {
                let part = reduced.clone().narrow(0, offset, numel).reshape(shape);
                g.register::<B::InnerBackend, D>(param.id, part);
            }
        }
    }
}

/// Averages the gradients of `replicas` (one per device of `comm`, same module) in place; a
/// failed all-reduce (a device fault, a retired communicator) is an error, not a panic.
fn average_gradients<B>(
    comm: &Communicator,
    devices: &[AscendDevice],
    replica: &MoeDecoder<B>,
    grads: &mut [GradientsParams],
) -> Result<(), String>
where
    B: AutodiffBackend<Device = AscendDevice> + FusedOps,
    B::InnerBackend: CollectiveOps,
{
    let mut bucket = Bucket::<B> {
        grads,
        devices,
        layout: Vec::new(),
        parts: vec![Vec::new(); devices.len()],
        reduced: Vec::new(),
    };
    replica.visit(&mut bucket);
    let flat: Vec<Tensor<B::InnerBackend, 1>> = std::mem::take(&mut bucket.parts)
        .into_iter()
        .map(|parts| Tensor::cat(parts, 0))
        .collect();
    bucket.reduced = burn_ascend::try_run(|| collective::all_reduce(comm, flat, Reduce::Mean))
        .map_err(|e| format!("averaging the gradients: {e}"))?;
    replica.visit(&mut bucket);
    Ok(())
}

/// Trains `model` with `cfg` on `devices` (the batch is split evenly across them), reporting
/// each step; returns the trained model on the first device. Identical to
/// [`super::train::train`] on one device, up to summation order; like it, checks `cfg` first
/// and stops at the first loss that is not finite, that of the final weights (on one more
/// batch) included.
pub fn train_data_parallel<B>(
    model: MoeDecoder<B>,
    tokens: &[u32],
    cfg: &TrainConfig,
    devices: &[AscendDevice],
    mut report: impl FnMut(StepReport),
) -> Result<MoeDecoder<B>, String>
where
    B: AutodiffBackend<Device = AscendDevice> + FusedOps,
    B::InnerBackend: CollectiveOps,
{
    cfg.validate().map_err(|e| e.to_string())?;
    let n = devices.len();
    if n == 0 || !cfg.batch.is_multiple_of(n) {
        return Err(format!(
            "a batch of {} sequences does not split evenly over {n} devices",
            cfg.batch
        ));
    }
    let comm = Communicator::local(devices).map_err(|e| e.to_string())?;
    let mut model = model;
    model.visit(&mut Materialize);
    let replicas_hook = Parallel::new(DataParallel::<B> {
        comm: comm.clone(),
        mean: |comm, f| {
            let reduced = collective::all_reduce(comm, vec![f.inner()], Reduce::Mean);
            Tensor::from_inner(reduced.into_iter().next().expect("one rank's result"))
        },
    });
    for block in &mut model.blocks {
        block.moe.parallel = replicas_hook.clone();
    }
    let mut replicas: Vec<MoeDecoder<B>> = devices.iter().map(|d| model.clone().fork(d)).collect();
    let mut optims: Vec<_> = (0..n).map(|_| AdamConfig::new().init()).collect();
    let per = cfg.batch / n;
    // Replica `r`'s cross-entropy and load-balancing loss on its share of the batch of `step`.
    let losses = |replica: &MoeDecoder<B>, r: usize, step: usize, device: &AscendDevice| {
        let (inputs, targets) = batch::<B>(tokens, cfg, step, device);
        let inputs = inputs.narrow(0, r * per, per);
        let targets = targets.narrow(0, r * per, per);
        let (logits, aux) = replica.forward(inputs);
        let [b, t, v] = logits.dims();
        let ce = CrossEntropyLossConfig::new()
            .init(device)
            .forward(logits.reshape([b * t, v]), targets.reshape([b * t]));
        (ce, aux)
    };
    let finite = |updates: usize, loss: f32, aux: f32| {
        if loss.is_finite() && aux.is_finite() {
            Ok(())
        } else {
            Err(TrainError::NonFinite { updates, loss, aux }.to_string())
        }
    };
    for step in 1..=cfg.steps {
        let start = std::time::Instant::now();
        // One thread per replica: a replica's forward waits on the devices for the others'
        // collectives, so the replicas must be driven concurrently.
        let results: Vec<(MoeDecoder<B>, GradientsParams, f32, f32)> = std::thread::scope(|s| {
            let workers: Vec<_> = replicas
                .drain(..)
                .zip(devices)
                .enumerate()
                .map(|(r, (replica, device))| {
                    let losses = &losses;
                    s.spawn(move || {
                        let (ce, aux) = losses(&replica, r, step, device);
                        let loss = ce.clone() + aux.clone() * cfg.aux_weight;
                        let grads = GradientsParams::from_grads(loss.backward(), &replica);
                        (replica, grads, scalar(ce), scalar(aux))
                    })
                })
                .collect();
            joined("step", workers)
        })?;
        let mut grads = Vec::with_capacity(n);
        let (mut ce, mut aux) = (0.0, 0.0);
        for (replica, g, c, a) in results {
            replicas.push(replica);
            grads.push(g);
            ce += c / n as f32;
            aux += a / n as f32;
        }
        finite(step - 1, ce, aux)?;
        average_gradients(&comm, devices, &replicas[0], &mut grads)?;

        // The optimizer steps run concurrently too, as they would on the NPUs.
        replicas = std::thread::scope(|s| {
            let workers: Vec<_> = replicas
                .drain(..)
                .zip(grads)
                .zip(&mut optims)
                .map(|((replica, g), optim)| {
                    s.spawn(move || optim.step(cfg.learning_rate, replica, g))
                })
                .collect();
            joined("optimizer step", workers)
        })?;
        report(StepReport {
            step,
            loss: ce,
            aux,
            tokens_per_second: (cfg.batch * cfg.seq_len) as f64
                / start.elapsed().as_secs_f64().max(1e-9),
        });
    }
    if cfg.steps > 0 {
        // The final weights on one more batch, as single-device training checks them.
        let (ce, aux) = std::thread::scope(|s| {
            let workers: Vec<_> = replicas
                .iter()
                .zip(devices)
                .enumerate()
                .map(|(r, (replica, device))| {
                    let (losses, replica) = (&losses, replica.clone());
                    s.spawn(move || {
                        let (ce, aux) = losses(&replica, r, cfg.steps + 1, device);
                        (scalar(ce), scalar(aux))
                    })
                })
                .collect();
            joined("check", workers).map(|all| {
                all.into_iter().fold((0.0, 0.0), |(c, a), (ce, aux)| {
                    (c + ce / n as f32, a + aux / n as f32)
                })
            })
        })?;
        finite(cfg.steps, ce, aux)?;
    }
    let mut trained = replicas.swap_remove(0);
    for block in &mut trained.blocks {
        block.moe.parallel = Parallel::default();
    }
    Ok(trained)
}

/// The replicas' results, or an error naming each replica that failed. The replicas meet only
/// inside collectives on the devices: when one fails (a device fault, say), the others wait for
/// it there until the collectives' execution timeout
/// (`burn_ascend::collective::set_exec_timeout`) and fail in turn, and training ends with this
/// error rather than a panic.
fn joined<T>(what: &str, workers: Vec<ScopedJoinHandle<'_, T>>) -> Result<Vec<T>, String> {
    let mut done = Vec::with_capacity(workers.len());
    let mut failed = Vec::new();
    for (r, w) in workers.into_iter().enumerate() {
        match w.join() {
            Ok(v) => done.push(v),
            Err(panic) => {
                let text = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "a panic without a message".into());
                failed.push(format!("replica {r}'s {what} failed: {text}"));
            }
        }
    }
    if failed.is_empty() {
        Ok(done)
    } else {
        Err(failed.join("; "))
    }
}

fn scalar<B: Backend>(t: Tensor<B, 1>) -> f32 {
    t.into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .expect("a scalar")[0]
}
