//! Ops Burn 0.22 changed or added, called by a Burn 0.22 program (no Ascend type in it) on a
//! burn-ascend-server device and on Burn's own CPU backend: the served backend receives them
//! through burn-remote's IR, and the results agree.

mod common;

use burn::tensor::module::{adaptive_avg_pool3d, max_pool2d_with_indices};
use burn::tensor::ops::MaxPoolOptions;
use burn::tensor::{Device, IndexingUpdateOp, Int, Tensor, TensorData, Tolerance};
use burn_ascend_remote_suite::LocalServer;

fn floats(shape: &[usize], seed: f32) -> TensorData {
    common::floats(shape, seed, 256.0)
}

/// The same program's result on the served device and on the CPU backend.
fn both(program: impl Fn(&Device) -> TensorData) -> (TensorData, TensorData) {
    let server = LocalServer::start();
    (program(&server.device()), program(&Device::flex()))
}

#[test]
fn scatter_and_select_assign_with_min_max_mul_match_the_cpu_backend() {
    let (remote, local) = both(|device| {
        let x = Tensor::<2>::from_data(floats(&[3, 5], 0.1), device);
        let idx = Tensor::<2, Int>::from_data(
            TensorData::new(vec![0i32, 2, 2, 4, 1, 1, 1, 3, 4, 0, 4, 2], [3, 4]),
            device,
        );
        let v = Tensor::<2>::from_data(floats(&[3, 4], 2.0), device);
        let rows = Tensor::<1, Int>::from_data(TensorData::new(vec![1i32, 0, 1], [3]), device);
        let w = Tensor::<2>::from_data(floats(&[3, 5], 3.1), device);
        let max = x
            .clone()
            .scatter(1, idx.clone(), v.clone(), IndexingUpdateOp::Max);
        let min = x.clone().scatter(1, idx, v, IndexingUpdateOp::Min);
        let mul = x.select_assign(0, rows, w, IndexingUpdateOp::Mul);
        Tensor::cat(vec![max, min, mul], 0).into_data()
    });
    remote.assert_approx_eq::<f32>(&local, Tolerance::absolute(1e-5));
}

#[test]
fn pooling_ops_match_the_cpu_backend() {
    let (remote, local) = both(|device| {
        let x = Tensor::<5>::from_data(floats(&[1, 2, 5, 4, 3], 0.5), device);
        let pooled = adaptive_avg_pool3d(x, [2, 3, 2]).reshape([2, 12]);
        let y = Tensor::<4>::from_data(floats(&[1, 2, 4, 6], 1.5), device);
        let (values, indices) = max_pool2d_with_indices(
            y,
            MaxPoolOptions::new([3, 2])
                .with_stride([1, 2])
                .with_padding([1, 0]),
        );
        Tensor::cat(
            vec![
                pooled,
                values.reshape([2, 12]),
                indices.float().reshape([2, 12]),
            ],
            1,
        )
        .into_data()
    });
    remote.assert_approx_eq::<f32>(&local, Tolerance::absolute(1e-5));
}

/// Autodiff runs in the program; the served device computes the backward ops it is sent
/// (here the 3-D adaptive pool's gradient).
#[test]
fn a_gradient_through_adaptive_avg_pool3d_matches_the_cpu_backend() {
    let (remote, local) = both(|device| {
        let device = device.clone().autodiff();
        let x = Tensor::<5>::from_data(floats(&[1, 2, 5, 4, 3], 0.9), &device).require_grad();
        let pooled = adaptive_avg_pool3d(x.clone(), [3, 2, 2]);
        let loss = (pooled.clone() * pooled).sum();
        let grads = loss.backward();
        x.grad(&grads).expect("x has a gradient").into_data()
    });
    remote.assert_approx_eq::<f32>(&local, Tolerance::absolute(1e-5));
}

/// FFT left Burn's IR for burn-signal: the program sends `rfft`/`irfft` as custom ops, which
/// the server executes on the backend (`SignalOps`). Spectrum and round trip agree.
#[test]
fn rfft_and_irfft_through_the_server_match_the_cpu_backend() {
    use burn::tensor::signal::{irfft, rfft};
    let (remote, local) = both(|device| {
        let x = Tensor::<2>::from_data(floats(&[3, 16], 0.7), device);
        let (re, im) = rfft(x, 1, None);
        let back = irfft(re.clone(), im.clone(), 1, Some(16));
        Tensor::cat(vec![re, im, back], 1).into_data()
    });
    remote.assert_approx_eq::<f32>(&local, Tolerance::absolute(1e-4));
}
