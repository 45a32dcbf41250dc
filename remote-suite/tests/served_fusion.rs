//! The server serves `Fusion<Ascend>`: a Burn 0.22 program (no Ascend type in it) on the served
//! device gets the CPU backend's results, and the emulated NPU (in this process, under the
//! in-process server) shows what fusion launched for it: an element-wise chain as one program
//! launch, layer norm as one `layer_norm` launch, linear as one aclnnAddmm, softmax as one
//! aclnnSoftmax. With plain `Ascend` served the chain is one aclnn operator per op (the test
//! fails); layer norm, linear and softmax arrive as one IR op each and plain `Ascend` runs them as
//! one launch too, but `Fusion` decomposes them (Burn's default compositions: 9, 2 and 5 ops), so
//! those tests check that our fusers put them back together. The counters count the whole
//! process, so the tests take turns.

mod common;

use std::sync::Mutex;

use burn::tensor::activation::{gelu, softmax};
use burn::tensor::module::{layer_norm, linear};
use burn::tensor::{Device, Tensor, TensorData, Tolerance};
use burn_ascend_b22::emulator::{aclnn_launches_of, work_counters};
use burn_ascend_remote_suite::LocalServer;

static COUNTERS: Mutex<()> = Mutex::new(());

fn floats(shape: &[usize], seed: f32) -> TensorData {
    common::floats(shape, seed, 128.0)
}

/// `program` on the served device (its inputs uploaded before counting) and on the CPU
/// backend: both results, and the served run's (kernel launches, aclnn launches, launches of
/// the aclnn operator `op`).
fn served_and_local(
    inputs: &[TensorData],
    vectors: &[TensorData],
    op: &str,
    program: impl Fn(Vec<Tensor<2>>, Vec<Tensor<1>>) -> Tensor<2>,
) -> (TensorData, TensorData, (u64, u64, u64)) {
    let _alone = COUNTERS.lock().unwrap_or_else(|e| e.into_inner());
    let server = LocalServer::start();
    // Each read makes its upload complete before the work is counted.
    let on = |device: &Device| -> (Vec<Tensor<2>>, Vec<Tensor<1>>) {
        let upload = |d: &TensorData| {
            let t = Tensor::<2>::from_data(d.clone(), device);
            t.clone().into_data();
            t
        };
        let upload_vec = |d: &TensorData| {
            let t = Tensor::<1>::from_data(d.clone(), device);
            t.clone().into_data();
            t
        };
        (
            inputs.iter().map(upload).collect(),
            vectors.iter().map(upload_vec).collect(),
        )
    };
    let (tensors, vecs) = on(&server.device());
    let (before, before_op) = (work_counters(), aclnn_launches_of(op));
    let remote = program(tensors, vecs).into_data();
    let work = work_counters().since(&before);
    let counts = (
        work.kernel_launches,
        work.aclnn_launches,
        aclnn_launches_of(op) - before_op,
    );
    let (tensors, vecs) = on(&Device::flex());
    let local = program(tensors, vecs).into_data();
    (remote, local, counts)
}

fn tol() -> Tolerance<f32> {
    Tolerance::rel_abs(1e-5, 1e-5)
}

#[test]
fn an_elementwise_chain_is_one_program_launch() {
    let x = [floats(&[16, 96], 0.2)];
    let (remote, local, counts) = served_and_local(&x, &[], "", |mut t, _| {
        let x = t.remove(0);
        gelu(x.clone() * 1.5 + 0.25) * x.tanh()
    });
    remote.assert_approx_eq(&local, tol());
    assert_eq!((counts.0, counts.1), (1, 0), "one program launch, no aclnn");
}

#[test]
fn layer_norm_is_one_layer_norm_launch() {
    let x = [floats(&[24, 160], 0.5)];
    let params = [floats(&[160], 1.7), floats(&[160], 2.9)];
    let (remote, local, counts) = served_and_local(&x, &params, "", |mut t, mut v| {
        let (g, b) = (v.remove(0), v.remove(0));
        layer_norm(t.remove(0), g, Some(b), 1e-5)
    });
    remote.assert_approx_eq(&local, Tolerance::<f32>::rel_abs(1e-4, 1e-5));
    assert_eq!((counts.0, counts.1), (1, 0), "one layer_norm launch");
}

#[test]
fn linear_and_softmax_are_one_operator_each() {
    let (xw, b) = (
        [floats(&[5, 12], 0.3), floats(&[12, 9], 1.1)],
        [floats(&[9], 2.3)],
    );
    let (remote, local, counts) = served_and_local(&xw, &b, "aclnnAddmm", |mut t, mut v| {
        let (x, w) = (t.remove(0), t.remove(0));
        linear(x, w, Some(v.remove(0)))
    });
    remote.assert_approx_eq(&local, tol());
    assert_eq!(counts, (0, 1, 1), "one aclnnAddmm");

    let x = [floats(&[6, 33], 0.9)];
    let (remote, local, counts) =
        served_and_local(&x, &[], "aclnnSoftmax", |mut t, _| softmax(t.remove(0), 1));
    remote.assert_approx_eq(&local, tol());
    assert_eq!(counts, (0, 1, 1), "one aclnnSoftmax");
}
