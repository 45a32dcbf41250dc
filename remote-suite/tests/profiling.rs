//! A Burn 0.22 program (no Ascend type in it) profiling its work on a burn-ascend-server device
//! with `Device::profile`: burn-remote opens and closes the window on the served backend, which
//! times it with ACL events on the NPU's stream, so the program gets device time that grows with
//! the work inside the window (a server whose backend opens no windows gives wall time between
//! two syncs instead, `TimingMethod::System`).

use std::time::{Duration, Instant};

use burn::tensor::{read_sync, Device, Tensor, TensorData, TimingMethod, Tolerance};
use burn_ascend_remote_suite::LocalServer;

/// `x + a @ a`, `count` times, from `x = a`: work whose device time grows with `count`.
fn products(a: &Tensor<2>, count: usize) -> Tensor<2> {
    (0..count).fold(a.clone(), |x, _| x + a.clone().matmul(a.clone()))
}

fn matrix(n: usize, device: &Device) -> Tensor<2> {
    let values: Vec<f32> = (0..n * n).map(|i| ((i % 13) as f32 - 6.0) / 64.0).collect();
    Tensor::from_data(TensorData::new(values, [n, n]), device)
}

/// `count` products profiled on `device`: the result, the measured time and the host time of
/// the whole call, resolution included.
fn profiled(device: &Device, a: &Tensor<2>, count: usize) -> (Tensor<2>, Duration, Duration) {
    let host = Instant::now();
    let (out, duration) = device
        .profile(|| products(a, count))
        .unwrap_or_else(|e| panic!("profiling {count} products: {e}"));
    assert_eq!(duration.timing_method(), TimingMethod::Device);
    let measured = read_sync(duration.resolve())
        .expect("the served device measured the window")
        .duration();
    (out, measured, host.elapsed())
}

#[test]
fn a_program_profiles_work_on_the_served_device_in_device_time() {
    let server = LocalServer::start();
    let device = server.device();
    let a = matrix(160, &device);
    // The first products also fill the server's caches (executors, memory): not the work
    // compared.
    profiled(&device, &a, 8);
    let (_, one, one_host) = profiled(&device, &a, 1);
    let (out, eight, eight_host) = profiled(&device, &a, 8);
    for (measured, host) in [(one, one_host), (eight, eight_host)] {
        assert!(
            Duration::ZERO < measured && measured <= host,
            "{measured:?} measured in {host:?} of host time"
        );
    }
    assert!(eight > one, "eight products {eight:?}, one {one:?}");
    // The profiled work computed what it computes unprofiled on Burn's CPU backend.
    let reference = products(&matrix(160, &Device::flex()), 8).into_data();
    out.into_data()
        .assert_approx_eq::<f32>(&reference, Tolerance::absolute(1e-4));
}
