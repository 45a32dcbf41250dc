//! What the remote route costs, in one run: the same programs on the device of an in-process
//! burn-ascend-server (Burn 0.22 through burn-remote on loopback), on the same emulated device in
//! process (Burn 0.21's `burn_ascend::Ascend`: Burn 0.22 cannot name an outside backend in
//! process; src/programs_burn021.rs), and on Burn's own CPU backend, flex, of both versions. The
//! programs: one element-wise op, a sum and its read back (the round trip), and a short training
//! run of the suite's model. remote/ascend is the route's cost, ascend/flex 0.21 the (emulated)
//! device's against the CPU under the same Burn, remote/flex 0.22 what a Burn 0.22 program pays
//! for the served device over its in-process CPU backend.

#[path = "../src/programs_burn021.rs"]
mod programs_burn021;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use burn::tensor::{Device, Tensor};
use burn021::backend::{Autodiff, Flex};
use burn021::tensor::ElementConversion;
use burn_ascend::{Ascend, AscendDevice};
use burn_ascend_remote_suite::programs::{train, Mlp};
use burn_ascend_remote_suite::LocalServer;
use criterion::{Bencher, Criterion};

const ROUND_TRIP: &str = "add 1024 f32, sum, read back";
const TRAINING: &str = "MLP: model to device, 4 Adam steps";
const STEPS: usize = 4;

/// Total time and calls per (program, device), as criterion ran them (warm-up included).
type Times = HashMap<(&'static str, &'static str), (Duration, u64)>;
static TIMES: Mutex<Option<Times>> = Mutex::new(None);

/// Times `iters` calls of `f` and records them under `(program, device)` for the ratio table.
fn timed<T>(
    b: &mut Bencher,
    program: &'static str,
    device: &'static str,
    mut f: impl FnMut() -> T,
) {
    b.iter_custom(|iters| {
        let start = Instant::now();
        for _ in 0..iters {
            std::hint::black_box(f());
        }
        let took = start.elapsed();
        let mut times = TIMES.lock().unwrap();
        let e = times
            .get_or_insert_with(HashMap::new)
            .entry((program, device))
            .or_default();
        e.0 += took;
        e.1 += iters;
        took
    });
}

fn mean(program: &str, device: &str) -> Option<f64> {
    let times = TIMES.lock().unwrap();
    let (d, n) = times.as_ref()?.get(&(program, device))?;
    (*n > 0).then(|| d.as_secs_f64() / *n as f64)
}

fn benches(c: &mut Criterion) {
    let server = LocalServer::start();
    let devices = [("flex 0.22", Device::flex()), ("remote", server.device())];
    // The device the server serves (its default, emulated:0), in process.
    let ascend = AscendDevice::Emulated(0);

    let mut group = c.benchmark_group(ROUND_TRIP);
    for (name, device) in &devices {
        let x = Tensor::<1>::from_floats([0.5f32; 1024], device);
        group.bench_function(*name, |b| {
            timed(b, ROUND_TRIP, name, || {
                (x.clone() + 1.0).sum().into_scalar::<f32>()
            })
        });
    }
    let x = burn021::tensor::Tensor::<Ascend, 1>::from_floats([0.5f32; 1024], &ascend);
    group.bench_function("ascend", |b| {
        timed(b, ROUND_TRIP, "ascend", || {
            (x.clone() + 1.0).sum().into_scalar().elem::<f32>()
        })
    });
    let x = burn021::tensor::Tensor::<Flex, 1>::from_floats([0.5f32; 1024], &Default::default());
    group.bench_function("flex 0.21", |b| {
        timed(b, ROUND_TRIP, "flex 0.21", || {
            (x.clone() + 1.0).sum().into_scalar().elem::<f32>()
        })
    });
    group.finish();

    let model = Mlp::new(&Device::flex().autodiff());
    let mut group = c.benchmark_group(TRAINING);
    group.sample_size(10);
    for (name, device) in &devices {
        group.bench_function(*name, |b| {
            timed(b, TRAINING, name, || train(model.clone(), device, STEPS))
        });
    }
    group.bench_function("ascend", |b| {
        timed(b, TRAINING, "ascend", || {
            programs_burn021::train::<Autodiff<Ascend>>(&ascend, STEPS)
        })
    });
    group.bench_function("flex 0.21", |b| {
        timed(b, TRAINING, "flex 0.21", || {
            programs_burn021::train::<Autodiff<Flex>>(&Default::default(), STEPS)
        })
    });
    group.finish();
}

/// The ratio table: each program's mean time per device and the ratios.
fn report() {
    let us = |t: Option<f64>| t.map_or("-".into(), |t| format!("{:.1}", t * 1e6));
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => format!("{:.2}", a / b),
        _ => "-".into(),
    };
    println!(
        "\n| program | flex 0.22 (µs) | flex 0.21 (µs) | ascend in process (µs) | remote (µs) \
         | remote/ascend | ascend/flex 0.21 | remote/flex 0.22 |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for program in [ROUND_TRIP, TRAINING] {
        let [flex22, flex21, ascend, remote] =
            ["flex 0.22", "flex 0.21", "ascend", "remote"].map(|d| mean(program, d));
        println!(
            "| {program} | {} | {} | {} | {} | {} | {} | {} |",
            us(flex22),
            us(flex21),
            us(ascend),
            us(remote),
            ratio(remote, ascend),
            ratio(ascend, flex21),
            ratio(remote, flex22),
        );
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    benches(&mut c);
    c.final_summary();
    report();
}
