//! burn-ascend's fused ops called by a Burn 0.22 program (no Ascend type in it) through
//! `burn-ascend-client` on a burn-ascend-server device (the served emulated NPU runs its fused
//! kernels), against each op's composition in plain Burn 0.22 ops on Burn's own CPU backend.
//! Tolerances as the Burn 0.21 suite's fused-op tests use for f32.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::time::Duration;

use burn::tensor::{DType, Device, Int, Tensor, TensorData, Tolerance};
use burn_ascend_client as fused;
use burn_ascend_remote_suite::LocalServer;

fn floats(shape: &[usize], seed: f32) -> TensorData {
    common::floats(shape, seed, 256.0)
}

fn ints(values: &[i32], device: &Device) -> Tensor<1, Int> {
    Tensor::from_data(TensorData::new(values.to_vec(), [values.len()]), device)
}

fn assert_close(what: &str, got: TensorData, want: TensorData, tolerance: Tolerance<f32>) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    assert_eq!(got.dtype(), DType::F32, "{what}: dtype");
    got.assert_approx_eq::<f32>(&want, tolerance);
}

/// RMS norm of `x [.., N]` in plain Burn ops: `x / sqrt(mean(x^2) + eps) * gamma`.
fn rms_norm_composed<const D: usize>(x: Tensor<D>, gamma: Tensor<1>, eps: f64) -> Tensor<D> {
    let rstd = (x.clone().powi_scalar(2).mean_dim(D - 1) + eps)
        .sqrt()
        .recip();
    x * rstd * gamma.unsqueeze()
}

#[test]
fn rms_norm_and_add_rms_norm_match_their_composition() {
    let server = LocalServer::start();
    let (remote, cpu) = (server.device(), Device::flex());
    let eps = 1e-6;
    let x = floats(&[2, 3, 40], 0.3);
    let x2 = floats(&[2, 3, 40], 1.7);
    let gamma = floats(&[40], 2.2);

    let y = fused::rms_norm(
        Tensor::<3>::from_data(x.clone(), &remote),
        Tensor::from_data(gamma.clone(), &remote),
        eps,
    );
    let want = rms_norm_composed(
        Tensor::<3>::from_data(x.clone(), &cpu),
        Tensor::from_data(gamma.clone(), &cpu),
        eps,
    );
    assert_close(
        "rms_norm",
        y.into_data(),
        want.into_data(),
        Tolerance::absolute(1e-5),
    );

    let (y, sum) = fused::add_rms_norm(
        Tensor::<3>::from_data(x.clone(), &remote),
        Tensor::from_data(x2.clone(), &remote),
        Tensor::from_data(gamma.clone(), &remote),
        eps,
    );
    let want_sum = Tensor::<3>::from_data(x, &cpu) + Tensor::from_data(x2, &cpu);
    let want = rms_norm_composed(want_sum.clone(), Tensor::from_data(gamma, &cpu), eps);
    assert_close(
        "add_rms_norm: y",
        y.into_data(),
        want.into_data(),
        Tolerance::absolute(1e-5),
    );
    assert_close(
        "add_rms_norm: x1 + x2",
        sum.into_data(),
        want_sum.into_data(),
        Tolerance::absolute(0.0),
    );
}

#[test]
fn layer_norm_matches_its_composition() {
    let server = LocalServer::start();
    let (remote, cpu) = (server.device(), Device::flex());
    let eps = 1e-5;
    let (x, gamma, beta) = (
        floats(&[5, 24], 0.9),
        floats(&[24], 3.3),
        floats(&[24], 4.1),
    );
    let y = fused::layer_norm(
        Tensor::<2>::from_data(x.clone(), &remote),
        Tensor::from_data(gamma.clone(), &remote),
        Tensor::from_data(beta.clone(), &remote),
        eps,
    );
    let x = Tensor::<2>::from_data(x, &cpu);
    let centred = x.clone() - x.mean_dim(1);
    let var = centred.clone().powi_scalar(2).mean_dim(1);
    let want =
        centred * (var + eps).sqrt().recip() * Tensor::<1>::from_data(gamma, &cpu).unsqueeze()
            + Tensor::<1>::from_data(beta, &cpu).unsqueeze();
    assert_close(
        "layer_norm",
        y.into_data(),
        want.into_data(),
        Tolerance::absolute(4e-5),
    );
}

#[test]
fn moe_gather_and_moe_scatter_match_their_composition() {
    let server = LocalServer::start();
    let (remote, cpu) = (server.device(), Device::flex());
    let (tokens, top_k, hidden) = (4, 2, 16);
    // A permutation of the token-major slots 0..8, as routing by expert gives it.
    let perm = [1, 4, 6, 0, 3, 7, 2, 5];
    let x = floats(&[tokens, hidden], 0.5);
    let y = floats(&[tokens * top_k, hidden], 1.5);
    let w = floats(&[tokens * top_k], 2.5);

    let gathered = fused::moe_gather(
        Tensor::from_data(x.clone(), &remote),
        ints(&perm, &remote),
        top_k,
    );
    let want = Tensor::<2>::from_data(x, &cpu).select(0, ints(&perm, &cpu) / top_k as i64);
    assert_close(
        "moe_gather",
        gathered.into_data(),
        want.into_data(),
        Tolerance::absolute(0.0),
    );

    // out[perm[i] / K] += w[perm[i]] * y[i], with and without the weights.
    let scatter_cpu = |weighted: bool| {
        let idx = ints(&perm, &cpu);
        let mut terms = Tensor::<2>::from_data(y.clone(), &cpu);
        if weighted {
            let w = Tensor::<1>::from_data(w.clone(), &cpu).select(0, idx.clone());
            terms = terms * w.unsqueeze_dim(1);
        }
        Tensor::<2>::zeros([tokens, hidden], &cpu).select_assign(
            0,
            idx / top_k as i64,
            terms,
            burn::tensor::IndexingUpdateOp::Add,
        )
    };
    for weighted in [false, true] {
        let got = fused::moe_scatter(
            Tensor::from_data(y.clone(), &remote),
            ints(&perm, &remote),
            weighted.then(|| Tensor::from_data(w.clone(), &remote)),
            top_k,
        );
        assert_close(
            &format!("moe_scatter (weights: {weighted})"),
            got.into_data(),
            scatter_cpu(weighted).into_data(),
            Tolerance::absolute(1e-5),
        );
    }
}

#[test]
fn grouped_matmul_matches_its_composition() {
    let server = LocalServer::start();
    let (remote, cpu) = (server.device(), Device::flex());
    let (rows, k, n) = (9, 16, 12);
    // Three experts own rows 0..3, none, 3..8; row 8 is past the groups (zero).
    let sizes = [3, 0, 5];
    let x = floats(&[rows, k], 0.7);
    let w = floats(&[sizes.len(), k, n], 1.9);
    let got = fused::grouped_matmul(
        Tensor::from_data(x.clone(), &remote),
        Tensor::from_data(w.clone(), &remote),
        ints(&sizes, &remote),
    );
    let (x, w) = (
        Tensor::<2>::from_data(x, &cpu),
        Tensor::<3>::from_data(w, &cpu),
    );
    let mut start = 0;
    let mut parts = Vec::new();
    for (e, &size) in sizes.iter().enumerate() {
        let size = size as usize;
        if size > 0 {
            let we = w.clone().narrow(0, e, 1).squeeze_dim::<2>(0);
            parts.push(x.clone().narrow(0, start, size).matmul(we));
        }
        start += size;
    }
    parts.push(Tensor::zeros([rows - start, n], &cpu));
    assert_close(
        "grouped_matmul",
        got.into_data(),
        Tensor::cat(parts, 0).into_data(),
        Tolerance::rel_abs(2e-4, 2e-4),
    );
}

/// Decode attention in plain Burn ops: per request and head, softmax of the (capped) scaled
/// scores over the request's cached keys, times their values; and the scores' log-sum-exp.
fn decode_attention_composed(
    inputs: &DecodeInputs,
    options: fused::DecodeAttentionOptions,
    device: &Device,
) -> (Tensor<3>, Tensor<2>) {
    let [batch, q_heads, dim_k] = inputs.q_shape;
    let [_, kv_heads, dim_v] = inputs.v_shape;
    let q = Tensor::<3>::from_data(inputs.q.clone(), device);
    let k = Tensor::<3>::from_data(inputs.k.clone(), device);
    let v = Tensor::<3>::from_data(inputs.v.clone(), device);
    let (mut outs, mut lses) = (Vec::new(), Vec::new());
    for b in 0..batch {
        let (start, end) = (inputs.indptr[b] as usize, inputs.indptr[b + 1] as usize);
        let keys = end - start;
        let idx = ints(&inputs.indices[start..end], device);
        for h in 0..q_heads {
            let kv = h / (q_heads / kv_heads);
            let kb = k
                .clone()
                .select(0, idx.clone())
                .narrow(1, kv, 1)
                .reshape([keys, dim_k]);
            let vb = v
                .clone()
                .select(0, idx.clone())
                .narrow(1, kv, 1)
                .reshape([keys, dim_v]);
            let qh = q
                .clone()
                .narrow(0, b, 1)
                .narrow(1, h, 1)
                .reshape([dim_k, 1]);
            let mut scores = kb.matmul(qh).reshape([1, keys]) * options.sm_scale;
            if let Some(cap) = options.logit_cap {
                scores = (scores / cap).tanh() * cap;
            }
            let max = scores.clone().max_dim(1);
            let e = (scores - max.clone()).exp();
            let sum = e.clone().sum_dim(1);
            lses.push(max + sum.clone().log());
            outs.push((e / sum).matmul(vb));
        }
    }
    (
        Tensor::cat(outs, 0).reshape([batch, q_heads, dim_v]),
        Tensor::cat(lses, 0).reshape([batch, q_heads]),
    )
}

struct DecodeInputs {
    q_shape: [usize; 3],
    v_shape: [usize; 3],
    q: TensorData,
    k: TensorData,
    v: TensorData,
    indptr: Vec<i32>,
    indices: Vec<i32>,
    splits: Vec<i32>,
}

#[test]
fn decode_attention_matches_its_composition() {
    let server = LocalServer::start();
    let (remote, cpu) = (server.device(), Device::flex());
    // Two requests of 3 and 4 cached keys in a cache of 10 slots, 4 query heads over 2 kv heads.
    let (slots, kv_heads, dim_k, dim_v) = (10, 2, 16, 8);
    let inputs = DecodeInputs {
        q_shape: [2, 4, dim_k],
        v_shape: [slots, kv_heads, dim_v],
        q: floats(&[2, 4, dim_k], 0.2),
        k: floats(&[slots, kv_heads, dim_k], 1.1),
        v: floats(&[slots, kv_heads, dim_v], 2.3),
        indptr: vec![0, 3, 7],
        indices: vec![5, 1, 8, 0, 2, 9, 4],
        splits: vec![2, 3],
    };
    for logit_cap in [None, Some(5.0)] {
        let options = fused::DecodeAttentionOptions {
            max_kv_splits: 4,
            sm_scale: 0.25,
            logit_cap,
        };
        let (out, lse) = fused::decode_attention(
            Tensor::from_data(inputs.q.clone(), &remote),
            Tensor::from_data(inputs.k.clone(), &remote),
            Tensor::from_data(inputs.v.clone(), &remote),
            ints(&inputs.indptr, &remote),
            ints(&inputs.indices, &remote),
            ints(&inputs.splits, &remote),
            options,
        );
        let (want_out, want_lse) = decode_attention_composed(&inputs, options, &cpu);
        let tolerance = Tolerance::rel_abs(1e-4, 1e-4);
        assert_close(
            &format!("decode_attention out (cap {logit_cap:?})"),
            out.into_data(),
            want_out.into_data(),
            tolerance,
        );
        assert_close(
            &format!("decode_attention lse (cap {logit_cap:?})"),
            lse.into_data(),
            want_lse.into_data(),
            tolerance,
        );
    }
}

/// A call breaking the contract fails at the call with a message naming the op, the shapes and
/// the dtypes, and does not wait on the server (a bounded wait: a hang fails the test).
#[test]
fn bad_input_is_a_clear_error_not_a_hang() {
    let server = LocalServer::start();
    let device = server.device();
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let result = catch_unwind(AssertUnwindSafe(|| {
            fused::rms_norm(
                Tensor::<2>::ones([4, 8], &device),
                Tensor::<1>::ones([6], &device),
                1e-6,
            )
            .into_data()
        }));
        let message = match result {
            Ok(_) => None,
            Err(payload) => Some(
                payload
                    .downcast_ref::<String>()
                    .cloned()
                    .unwrap_or_default(),
            ),
        };
        sender.send(message).unwrap();
    });
    let message = receiver
        .recv_timeout(Duration::from_secs(60))
        .expect("the bad call neither failed nor returned within 60 s")
        .expect("a gamma of the wrong length was accepted");
    for part in ["rms_norm", "gamma", "[6]", "[4, 8]", "F32"] {
        assert!(
            message.contains(part),
            "the error should name {part}: {message}"
        );
    }
}

/// A call the client lets through but the server refuses (here a hand-built custom op with a
/// gamma of the wrong length, as a client of another version might send) fails the client's
/// read of its outputs (with the core's error) instead of waiting.
#[test]
fn a_call_the_server_refuses_fails_the_read_not_a_hang() {
    use burn::backend::ops::FloatTensorOps;
    use burn::backend::{try_read_sync, DispatchDevice, Remote, Shape};
    use burn::remote::CustomOpClient;
    use burn_ir::{CustomOpIr, ScalarIr, TensorIr};

    let server = LocalServer::start();
    let device = server.device();
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let DispatchDevice::Remote(remote) = device.as_dispatch() else {
            panic!("a remote device")
        };
        let x = Remote::float_from_data(TensorData::new(vec![1.0f32; 8], [2, 4]), remote);
        let gamma = Remote::float_from_data(TensorData::new(vec![1.0f32; 3], [3]), remote);
        let client = CustomOpClient::new(remote);
        let outputs = [
            TensorIr::uninit(
                client.create_empty_handle(),
                Shape::from([2, 4]),
                DType::F32,
            ),
            TensorIr::uninit(client.create_empty_handle(), Shape::from([2]), DType::F32),
        ];
        let op = CustomOpIr::with_scalars(
            fused::ids::RMS_NORM,
            &[x.into_ir(), gamma.into_ir()],
            &outputs,
            vec![ScalarIr::Float(1e-6)],
        );
        let y = client.register(op).remove(0);
        let read = try_read_sync(Remote::float_into_data(y)).map(|r| r.is_ok());
        sender.send(read).unwrap();
    });
    let read = receiver
        .recv_timeout(Duration::from_secs(60))
        .expect("the refused call's read neither failed nor returned within 60 s");
    assert_ne!(
        read,
        Some(true),
        "the server ran an rms_norm with a [3] gamma for [2, 4]"
    );
}
