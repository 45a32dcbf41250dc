//! Host dispatch overhead: time per op on tiny tensors (16 elements, 2x2 for matmul), where the
//! device work is negligible and what is measured is the path itself (descriptors, workspace
//! query, launch, allocator; on the emulated NPU also the emulated stream). burn-flex runs the
//! same ops in the same run as the reference.

mod common;

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor};
use burn_ascend::{Ascend, AscendDevice};
use burn_flex::Flex;
use common::{mean, publish, ratio, timed, us, Table};
use criterion::{criterion_group, criterion_main, Criterion};

const OPS: [&str; 5] = ["add", "mul_scalar", "matmul_2x2", "reshape_permute", "sum"];

/// Runs op `name` once on `B` (results dropped; the device queue is drained by the caller).
fn op<B: Backend>(name: &str, a: &Tensor<B, 2>, b: &Tensor<B, 2>, m: &Tensor<B, 2>) {
    match name {
        "add" => drop(a.clone() + b.clone()),
        "mul_scalar" => drop(a.clone() * 2.0),
        "matmul_2x2" => drop(m.clone().matmul(m.clone())),
        "reshape_permute" => drop(a.clone().reshape([2, 8]).permute([1, 0])),
        "sum" => drop(a.clone().sum()),
        _ => unreachable!(),
    }
}

fn bench_backend<B: Backend>(c: &mut Criterion, label: &str, device: &B::Device) {
    let a = Tensor::<B, 1, Int>::arange(0..16, device)
        .float()
        .reshape([4, 4]);
    let b = a.clone() * 0.5;
    let m = Tensor::<B, 1, Int>::arange(0..4, device)
        .float()
        .reshape([2, 2]);
    B::sync(device).unwrap();
    let mut g = c.benchmark_group(format!("host_overhead/{label}"));
    for name in OPS {
        g.bench_function(name, |bench| {
            timed(
                bench,
                &format!("{label}/{name}"),
                || op(name, &a, &b, &m),
                || B::sync(device).unwrap(),
            )
        });
    }
    g.finish();
}

fn host_overhead(c: &mut Criterion) {
    bench_backend::<Ascend>(c, "ascend", &AscendDevice::Emulated(0));
    bench_backend::<Flex>(c, "flex", &Default::default());

    let mut t = Table::new(
        "Host overhead per op, tiny tensors (wall time incl. device queue drain)",
        &[
            "op",
            "Ascend emulated (µs)",
            "burn-flex (µs)",
            "Ascend / flex",
        ],
    );
    for name in OPS {
        let (a, f) = (
            mean(&format!("ascend/{name}")),
            mean(&format!("flex/{name}")),
        );
        t.row(vec![name.into(), us(a), us(f), ratio(a, f)]);
    }
    publish(
        "host_overhead",
        &[t],
        &[
            "Each figure is criterion's mean per call in this run; a batch of calls ends with \
             `B::sync`, so queued device work is included (tiny here).",
            "On the emulated NPU the device side (stream worker thread, emulated kernels) runs on \
             the same two cores, so these times are an upper bound on host-side overhead. The \
             issue's target is < 3 µs/op with descriptor/executor caching, which is not built \
             yet (ARCHITECTURE.md, deviations).",
        ],
    );
}

criterion_group! {
    name = benches;
    config = common::criterion();
    targets = host_overhead
}
criterion_main!(benches);
