//! Data-parallel training through Burn's distributed API (feature `distributed`) on the 2 NPUs
//! of the emulated machine: each device trains a replica on half of every batch, marked
//! parameters have their gradients averaged by HCCL during `backward`, and after several steps
//! both replicas hold the same weights, which match single-device training on the whole batches.
//!
//! Also Burn 0.21's own tests of the API (`burn-backend-tests`: `tensor/distributed.rs` and
//! `autodiff/all_reduce.rs`, with and without checkpointing), restated for these devices: they
//! issue every device's `all_reduce` from one thread and resolve each result before the next
//! device's call.
//!
//! Run with `cargo test -p burn-ascend --features distributed --test ddp` (never with
//! `--workspace`: the feature would reach the suite's `Autodiff<Flex>`, see the README).

use burn::module::{AutodiffModule, Module, ModuleMapper, Param};
use burn::nn::{Linear, LinearConfig};
use burn::optim::{GradientsParams, Optimizer, SgdConfig};
use burn::tensor::activation::relu;
use burn::tensor::backend::distributed::{
    DistributedBackend, DistributedConfig, DistributedParamId, ReduceOperation,
};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData, TensorPrimitive, Tolerance};
use burn_ascend::emulator::hccl::{hccl_counters, Kind};
use burn_ascend::{Ascend, AscendDevice};
use burn_autodiff::checkpoint::strategy::BalancedCheckpointing;
use burn_autodiff::Autodiff;
use burn_fusion::Fusion;
use burn_std::device::Device as _;
use serial_test::serial;

const DEVICES: [AscendDevice; 2] = [AscendDevice::Emulated(0), AscendDevice::Emulated(1)];
const STEPS: usize = 4;
const BATCH: usize = 8;

#[derive(Module, Debug)]
struct Mlp<B: Backend> {
    a: Linear<B>,
    b: Linear<B>,
}

/// A linear layer with fixed weights: Burn initialises parameters lazily, so a freshly built
/// module cloned before first use would give every clone its own random draw.
fn linear<B: Backend>(d_in: usize, d_out: usize, seed: usize, device: &B::Device) -> Linear<B> {
    let value = |i: usize| ((i * 7919 + seed * 104729) % 997) as f32 / 997.0 - 0.5;
    let mut layer = LinearConfig::new(d_in, d_out).init(device);
    let w: Vec<f32> = (0..d_in * d_out).map(value).collect();
    let b: Vec<f32> = (0..d_out).map(|i| value(i + 5000) * 0.1).collect();
    layer.weight = Param::from_tensor(Tensor::from_data(TensorData::new(w, [d_in, d_out]), device));
    layer.bias = Some(Param::from_tensor(Tensor::from_data(
        TensorData::new(b, [d_out]),
        device,
    )));
    layer
}

impl<B: Backend> Mlp<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            a: linear(6, 16, 1, device),
            b: linear(16, 3, 2, device),
        }
    }

    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.b.forward(relu(self.a.forward(x)))
    }
}

/// Marks every parameter for gradient synchronisation, as burn-train's sharder does. Optimizer
/// steps drop the mark, so it is applied before every step.
struct Shard;

impl<B: AutodiffBackend> ModuleMapper<B> for Shard {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let tensor = tensor.set_distributed(DistributedParamId::from(id.val()));
        Param::from_mapped_value(id, tensor, mapper)
    }
}

/// Batch `step` of fixed inputs `[BATCH, 6]` and targets `[BATCH, 3]`, as host data.
fn batch(step: usize) -> (Vec<f32>, Vec<f32>) {
    let x = (0..BATCH * 6)
        .map(|i| (((i + 7 * step) * 37 % 23) as f32 - 11.0) / 7.0)
        .collect();
    let y = (0..BATCH * 3)
        .map(|i| (((i + 3 * step) * 17 % 13) as f32 - 6.0) / 5.0)
        .collect();
    (x, y)
}

/// Rows `rows` of batch `step` on `device`.
fn rows<B: Backend>(
    step: usize,
    rows: std::ops::Range<usize>,
    device: &B::Device,
) -> (Tensor<B, 2>, Tensor<B, 2>) {
    let (x, y) = batch(step);
    let n = rows.len();
    (
        Tensor::from_data(
            TensorData::new(x[rows.start * 6..rows.end * 6].to_vec(), [n, 6]),
            device,
        ),
        Tensor::from_data(
            TensorData::new(y[rows.start * 3..rows.end * 3].to_vec(), [n, 3]),
            device,
        ),
    )
}

fn loss<B: Backend>(model: &Mlp<B>, x: Tensor<B, 2>, y: Tensor<B, 2>) -> Tensor<B, 1> {
    (model.forward(x) - y).powi_scalar(2).mean()
}

/// `STEPS` SGD steps of `model` on whole batches on one device.
fn single_device<B: AutodiffBackend>(mut model: Mlp<B>, device: &B::Device) -> Mlp<B> {
    let mut optim = SgdConfig::new().init();
    for step in 0..STEPS {
        let (x, y) = rows::<B>(step, 0..BATCH, device);
        let grads = GradientsParams::from_grads(loss(&model, x, y).backward(), &model);
        model = optim.step(0.1, model, grads);
    }
    model
}

/// The same steps with each device training a replica on its half of every batch. With
/// `lockstep`, no replica starts a step before every replica has finished the previous one:
/// Burn 0.21's gradient-sync server loses a registration that arrives before the last device
/// of the previous round has synced (see `burn-ascend/src/backend/distributed.rs`), which
/// `Ascend` prevents in `submit_sync_collective` but `Fusion<Ascend>`, running Burn's own
/// hooks, does not.
fn data_parallel<B>(model: Mlp<B>, lockstep: bool) -> Vec<Mlp<B>>
where
    B: AutodiffBackend<Device = AscendDevice> + DistributedBackend,
{
    B::start_communication_server(
        &DEVICES,
        DistributedConfig {
            all_reduce_op: ReduceOperation::Mean,
        },
    );
    let barrier = std::sync::Barrier::new(DEVICES.len());
    let replicas = std::thread::scope(|s| {
        let barrier = &barrier;
        let workers: Vec<_> = DEVICES
            .iter()
            .enumerate()
            .map(|(i, device)| {
                let mut model = model.clone().fork(device);
                s.spawn(move || {
                    let mut optim = SgdConfig::new().init();
                    let half = BATCH / DEVICES.len();
                    for step in 0..STEPS {
                        if lockstep {
                            barrier.wait();
                        }
                        model = model.map(&mut Shard);
                        let (x, y) = rows::<B>(step, i * half..(i + 1) * half, device);
                        // `backward` returns once every device queued the averaging.
                        let grads = loss(&model, x, y).backward();
                        let grads = GradientsParams::from_grads(grads, &model);
                        model = optim.step(0.1, model, grads);
                    }
                    model
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    B::close_communication_server(&DEVICES[0]);
    replicas
}

fn weights<B: AutodiffBackend>(model: &Mlp<B>) -> Vec<TensorData> {
    let m = model.valid();
    vec![
        m.a.weight.val().into_data(),
        m.a.bias.as_ref().unwrap().val().into_data(),
        m.b.weight.val().into_data(),
        m.b.bias.as_ref().unwrap().val().into_data(),
    ]
}

fn matches_single_device<B>(lockstep: bool)
where
    B: AutodiffBackend<Device = AscendDevice> + DistributedBackend,
{
    let model = Mlp::<B>::new(&DEVICES[0]);
    let reference = weights(&single_device(model.clone(), &DEVICES[0]));
    let before = hccl_counters();
    let replicas = data_parallel(model, lockstep);
    // The counters count a transfer once every rank has run it, on its stream: the last step's
    // all-reduces may still be queued when the workers return.
    for device in &DEVICES {
        B::sync(device).expect("the devices run the queued all-reduces");
    }
    let moved = hccl_counters().since(&before).of(Kind::AllReduce);
    // One all-reduce per parameter per step, each counted once for both ranks.
    assert_eq!(moved.calls, (4 * STEPS) as u64);
    let (w0, w1) = (weights(&replicas[0]), weights(&replicas[1]));
    for ((a, b), r) in w0.iter().zip(&w1).zip(&reference) {
        // Both replicas applied the same averaged gradients: bitwise equal.
        assert_eq!(a, b);
        // Against one device on whole batches only the summation order differs.
        a.assert_approx_eq::<f32>(r, Tolerance::absolute(1e-5));
    }
}

#[test]
#[serial]
fn data_parallel_training_matches_one_device_on_autodiff_ascend() {
    matches_single_device::<Autodiff<Ascend>>(false);
}

#[test]
#[serial]
fn data_parallel_training_matches_one_device_on_autodiff_fusion_ascend() {
    matches_single_device::<Autodiff<Fusion<Ascend>>>(true);
}

fn float(
    t: Tensor<Ascend, 1>,
) -> <Ascend as burn::tensor::backend::BackendTypes>::FloatTensorPrimitive {
    t.into_primitive().tensor()
}

fn values(t: <Ascend as burn::tensor::backend::BackendTypes>::FloatTensorPrimitive) -> Vec<f32> {
    Tensor::<Ascend, 1>::from_primitive(TensorPrimitive::Float(t))
        .into_data()
        .to_vec()
        .unwrap()
}

#[test]
#[serial]
fn all_reduce_is_issued_per_device_without_waiting_for_the_peers() {
    let ids: Vec<_> = DEVICES.iter().map(|d| d.to_id()).collect();
    for (op, expected) in [
        (ReduceOperation::Sum, [4.0f32, 6.0]),
        (ReduceOperation::Mean, [2.0, 3.0]),
    ] {
        let x0 = float(Tensor::from_floats([1.0, 2.0], &DEVICES[0]));
        let x1 = float(Tensor::from_floats([3.0, 4.0], &DEVICES[1]));
        // Issued from one thread for both devices, as Burn's sync server does: the first call
        // must return before the second rank exists.
        let r0 = Ascend::all_reduce(x0, op, ids.clone());
        let r1 = Ascend::all_reduce(x1, op, ids.clone());
        assert_eq!(values(r0.resolve()), expected, "{op:?}");
        assert_eq!(values(r1.resolve()), expected, "{op:?}");
    }
}

/// The end of a marked `backward` holds each device until every device of the round has
/// reached it (see `burn-ascend/src/backend/distributed.rs`); a device that never comes (its
/// training thread failed) releases the others after the collectives' execution timeout, with
/// an error saying how many came, instead of holding them forever.
#[test]
#[serial]
fn a_device_missing_at_the_end_of_a_round_does_not_hold_the_others_forever() {
    burn_ascend::collective::set_exec_timeout(Some(std::time::Duration::from_secs(1)));
    Ascend::start_communication_server(
        &DEVICES,
        DistributedConfig {
            all_reduce_op: ReduceOperation::Mean,
        },
    );
    let start = std::time::Instant::now();
    let waited = std::panic::catch_unwind(|| Ascend::submit_sync_collective(&DEVICES[0]));
    let elapsed = start.elapsed();
    burn_ascend::collective::set_exec_timeout(None);
    Ascend::close_communication_server(&DEVICES[0]);
    let panic = waited.expect_err("device 1 never reaches the end of the round");
    let text = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(text.contains("only 1 of 2 devices"), "{text}");
    assert!(elapsed < std::time::Duration::from_secs(10), "{elapsed:?}");
}

// Burn 0.21's `burn-backend-tests` for the distributed API, restated on the emulated NPUs.

type Checkpointed = Autodiff<Ascend, BalancedCheckpointing>;

/// Values in [0, 10) from a fixed-seed generator (Burn's test draws them at random).
fn draws(seed: u64, n: usize) -> Vec<f32> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 40) as f32 / (1u64 << 24) as f32 * 10.0
        })
        .collect()
}

/// `tensor/distributed.rs::test_all_reduce`: 100 rounds of a `[20, 20]` sum, each device's
/// `all_reduce` issued and resolved in turn from one thread, then every result read.
fn all_reduce_from_one_thread<B: AutodiffBackend<Device = AscendDevice> + DistributedBackend>() {
    let ids: Vec<_> = DEVICES.iter().map(|d| d.to_id()).collect();
    let size = 20 * 20;
    for round in 0..100u64 {
        let data: Vec<Vec<f32>> = (0..DEVICES.len() as u64)
            .map(|d| draws(round * 7 + d, size))
            .collect();
        let expected: Vec<f32> = (0..size).map(|i| data.iter().map(|v| v[i]).sum()).collect();
        let outputs: Vec<Tensor<B, 2>> = data
            .iter()
            .zip(&DEVICES)
            .map(|(v, device)| {
                let t = Tensor::<B, 1>::from_data(TensorData::from(v.as_slice()), device)
                    .reshape([20, 20]);
                let out = B::all_reduce(
                    t.into_primitive().tensor(),
                    ReduceOperation::Sum,
                    ids.clone(),
                );
                Tensor::from_primitive(TensorPrimitive::Float(out.resolve()))
            })
            .collect();
        for out in outputs {
            out.flatten::<1>(0, 1).into_data().assert_approx_eq::<f32>(
                &TensorData::from(expected.as_slice()),
                Tolerance::default(),
            );
        }
    }
}

/// `tensor/distributed.rs::test_all_reduce_multithread`: one thread per device, each reading
/// its result before its next round.
fn all_reduce_from_a_thread_per_device<
    B: AutodiffBackend<Device = AscendDevice> + DistributedBackend,
>() {
    let ids: Vec<_> = DEVICES.iter().map(|d| d.to_id()).collect();
    let size = 20 * 20;
    let rounds = 100u64;
    std::thread::scope(|s| {
        for (d, device) in DEVICES.iter().enumerate() {
            let ids = ids.clone();
            s.spawn(move || {
                for round in 0..rounds {
                    let mine = draws(round * 7 + d as u64, size);
                    let t = Tensor::<B, 1>::from_data(TensorData::from(mine.as_slice()), device)
                        .reshape([20, 20]);
                    let out = B::all_reduce(
                        t.into_primitive().tensor(),
                        ReduceOperation::Sum,
                        ids.clone(),
                    );
                    let out = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(out.resolve()));
                    let expected: Vec<f32> = (0..size)
                        .map(|i| {
                            (0..DEVICES.len() as u64)
                                .map(|p| draws(round * 7 + p, size)[i])
                                .sum()
                        })
                        .collect();
                    out.flatten::<1>(0, 1).into_data().assert_approx_eq::<f32>(
                        &TensorData::from(expected.as_slice()),
                        Tolerance::default(),
                    );
                }
            });
        }
    });
}

/// `autodiff/all_reduce.rs::compute_all_reduce`: each device's all-reduce issued and resolved
/// in turn from one thread.
fn reduce_each<B: AutodiffBackend<Device = AscendDevice> + DistributedBackend>(
    tensors: &[Tensor<B, 1>],
    op: ReduceOperation,
) -> Vec<Tensor<B, 1>> {
    let ids: Vec<_> = tensors.iter().map(|t| t.device().to_id()).collect();
    tensors
        .iter()
        .map(|t| {
            let out = B::all_reduce(t.clone().into_primitive().tensor(), op, ids.clone());
            Tensor::from_primitive(TensorPrimitive::Float(out.resolve()))
        })
        .collect()
}

/// `autodiff/all_reduce.rs::compute_gradients` and `compare_gradients`: every output's
/// `backward` (whose all-reduce of the gradient is again one device at a time), then the
/// outputs and the inputs' gradients read.
fn outputs_and_gradients<B: AutodiffBackend<Device = AscendDevice> + DistributedBackend>(
    inputs: Vec<Tensor<B, 1>>,
    op: ReduceOperation,
    output: &[f32],
    gradient: &[f32],
) {
    let outs = reduce_each(&inputs, op);
    let grads: Vec<_> = inputs
        .iter()
        .zip(&outs)
        .map(|(i, o)| i.grad(&o.backward()).expect("a gradient"))
        .collect();
    for o in outs {
        o.into_data().assert_eq(&TensorData::from(output), false);
    }
    for g in grads {
        g.into_data().assert_eq(&TensorData::from(gradient), false);
    }
}

fn pair<B: AutodiffBackend<Device = AscendDevice>>() -> [Tensor<B, 1>; 2] {
    [
        Tensor::<B, 1>::from_floats([2.0, 5.0], &DEVICES[0]).require_grad(),
        Tensor::<B, 1>::from_floats([4.0, 1.0], &DEVICES[1]).require_grad(),
    ]
}

/// `should_diff_all_reduce_sum`.
fn diff_sum<B: AutodiffBackend<Device = AscendDevice> + DistributedBackend>() {
    outputs_and_gradients(
        pair::<B>().to_vec(),
        ReduceOperation::Sum,
        &[6.0, 6.0],
        &[2.0, 2.0],
    );
}

/// `should_diff_all_reduce_mean`.
fn diff_mean<B: AutodiffBackend<Device = AscendDevice> + DistributedBackend>() {
    outputs_and_gradients(
        pair::<B>().to_vec(),
        ReduceOperation::Mean,
        &[3.0, 3.0],
        &[1.0, 1.0],
    );
}

/// `should_diff_all_reduce_complex_1`: the second output scaled before its `backward`.
fn diff_complex<B: AutodiffBackend<Device = AscendDevice> + DistributedBackend>() {
    let inputs = pair::<B>();
    let outs = reduce_each(&inputs, ReduceOperation::Sum);
    let scaled = outs[1].clone().mul_scalar(4.0);
    let grads_0 = outs[0].backward();
    let grads_1 = scaled.backward();
    let grad_0 = inputs[0].grad(&grads_0).unwrap();
    let grad_1 = inputs[1].grad(&grads_1).unwrap();
    outs[0]
        .clone()
        .into_data()
        .assert_eq(&TensorData::from([6.0f32, 6.0]), false);
    scaled
        .into_data()
        .assert_eq(&TensorData::from([24.0f32, 24.0]), false);
    grad_0
        .into_data()
        .assert_eq(&TensorData::from([5.0f32, 5.0]), false);
    grad_1
        .into_data()
        .assert_eq(&TensorData::from([5.0f32, 5.0]), false);
}

/// `should_diff_all_reduce_all_devices`: device i holds `[i, i]`.
fn diff_all_devices<B: AutodiffBackend<Device = AscendDevice> + DistributedBackend>() {
    let inputs: Vec<Tensor<B, 1>> = DEVICES
        .iter()
        .enumerate()
        .map(|(i, d)| Tensor::<B, 1>::from_floats([i as f32; 2], d).require_grad())
        .collect();
    let value = (0..DEVICES.len()).sum::<usize>() as f32;
    let n = DEVICES.len() as f32;
    outputs_and_gradients(inputs, ReduceOperation::Sum, &[value; 2], &[n; 2]);
}

macro_rules! burn_distributed_tests {
    ($($name:ident: $f:ident::<$b:ty>;)*) => {$(
        #[test]
        #[serial]
        fn $name() {
            $f::<$b>();
        }
    )*};
}

burn_distributed_tests! {
    burn_test_all_reduce: all_reduce_from_one_thread::<Autodiff<Ascend>>;
    burn_test_all_reduce_multithread: all_reduce_from_a_thread_per_device::<Autodiff<Ascend>>;
    burn_should_diff_all_reduce_sum: diff_sum::<Autodiff<Ascend>>;
    burn_should_diff_all_reduce_mean: diff_mean::<Autodiff<Ascend>>;
    burn_should_diff_all_reduce_complex_1: diff_complex::<Autodiff<Ascend>>;
    burn_should_diff_all_reduce_all_devices: diff_all_devices::<Autodiff<Ascend>>;
    burn_checkpointing_should_diff_all_reduce_sum: diff_sum::<Checkpointed>;
    burn_checkpointing_should_diff_all_reduce_mean: diff_mean::<Checkpointed>;
    burn_checkpointing_should_diff_all_reduce_complex_1: diff_complex::<Checkpointed>;
    burn_checkpointing_should_diff_all_reduce_all_devices: diff_all_devices::<Checkpointed>;
}
