//! What the remote route costs, on the device of an in-process burn-ascend-server against Burn's
//! own CPU backend in the same run: one element-wise op read back (the round trip), and a short
//! training run of the suite's model.

use burn::tensor::{Device, Tensor};
use burn_ascend_remote_suite::programs::{train, Mlp};
use burn_ascend_remote_suite::LocalServer;
use criterion::{criterion_group, criterion_main, Criterion};

fn round_trip(c: &mut Criterion) {
    let server = LocalServer::start();
    let devices = [("cpu", Device::flex()), ("remote", server.device())];

    let mut group = c.benchmark_group("add 1024 f32, sum, read back");
    for (name, device) in &devices {
        let x = Tensor::<1>::from_floats([0.5f32; 1024], device);
        group.bench_function(*name, |b| {
            b.iter(|| (x.clone() + 1.0).sum().into_scalar::<f32>())
        });
    }
    group.finish();

    let model = Mlp::new(&Device::flex().autodiff());
    let mut group = c.benchmark_group("MLP: model to device, 4 Adam steps");
    group.sample_size(10);
    for (name, device) in &devices {
        group.bench_function(*name, |b| b.iter(|| train(model.clone(), device, 4)));
    }
    group.finish();
}

criterion_group!(benches, round_trip);
criterion_main!(benches);
