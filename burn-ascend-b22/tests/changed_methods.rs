//! The methods Burn 0.22 changed or added, at the primitive level on the emulated NPU, against
//! burn-flex 0.22 (Burn's own CPU backend) on the same inputs: scatter and select-assign with
//! every update rule, pooling indices of the dtype asked for, 3-D adaptive average pooling and
//! its gradient, the tensor's device and in-place flag, flush, and gradients through
//! `burn_autodiff::Autodiff<Ascend>`.

mod common;

use burn_ascend_b22::{Ascend, AscendDevice};
use burn_autodiff::Autodiff;
use burn_backend::ops::{BoolTensorOps, FloatTensorOps, IntTensorOps, ModuleOps, QTensorOps};
use burn_backend::tensor::{IndexingUpdateOp, IntTensor};
use burn_backend::{
    try_read_sync, AutodiffBackend, Backend, DType, FloatDType, IntDType, Shape, TensorData,
    TensorMetadata, Tolerance,
};
use burn_flex::{Flex, FlexDevice};
use common::{npu, read};

const UPDATES: [IndexingUpdateOp; 5] = [
    IndexingUpdateOp::Assign,
    IndexingUpdateOp::Add,
    IndexingUpdateOp::Mul,
    IndexingUpdateOp::Min,
    IndexingUpdateOp::Max,
];

fn read_int<B: Backend>(t: IntTensor<B>) -> TensorData {
    try_read_sync(B::int_into_data(t))
        .expect("the read completes")
        .expect("the read succeeds")
}

/// Deterministic test values (no RNG): distinct, of both signs, not integers.
fn floats(n: usize, seed: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as f32 * 0.37 + seed).sin() * 4.0 * 64.0).round() / 64.0)
        .collect()
}

fn float_data(shape: &[usize], seed: f32) -> TensorData {
    TensorData::new(floats(shape.iter().product(), seed), shape.to_vec())
}

fn int_data(shape: &[usize], seed: f32) -> TensorData {
    let v: Vec<i32> = floats(shape.iter().product(), seed)
        .iter()
        .map(|x| (x * 3.0).round() as i32)
        .collect();
    TensorData::new(v, shape.to_vec())
}

/// Scatter indices along dim 1 of a `[3, 5]` tensor, `[3, 4]`: repeated targets (every update
/// rule but assign, whose result with repeats is unspecified), or distinct ones.
fn scatter_indices(repeats: bool) -> TensorData {
    let v: Vec<i32> = if repeats {
        vec![0, 2, 2, 4, 1, 1, 1, 3, 4, 0, 4, 2]
    } else {
        vec![0, 2, 3, 4, 4, 1, 0, 3, 2, 0, 4, 1]
    };
    TensorData::new(v, [3, 4])
}

fn float_tol() -> Tolerance<f32> {
    Tolerance::absolute(1e-5)
}

#[test]
fn float_scatter_matches_flex_for_every_update() {
    for update in UPDATES {
        let idx = scatter_indices(update != IndexingUpdateOp::Assign);
        let (x, v) = (float_data(&[3, 5], 0.1), float_data(&[3, 4], 2.0));
        let ours = Ascend::float_scatter(
            1,
            Ascend::float_from_data(x.clone(), &npu()),
            Ascend::int_from_data(idx.clone(), &npu()),
            Ascend::float_from_data(v.clone(), &npu()),
            update,
        );
        let theirs = Flex::float_scatter(
            1,
            Flex::float_from_data(x, &FlexDevice),
            Flex::int_from_data(idx, &FlexDevice),
            Flex::float_from_data(v, &FlexDevice),
            update,
        );
        println!("{update:?}");
        read::<Ascend>(ours).assert_approx_eq(&read::<Flex>(theirs), float_tol());
    }
}

#[test]
fn int_scatter_matches_flex_for_every_update() {
    for update in UPDATES {
        let idx = scatter_indices(update != IndexingUpdateOp::Assign);
        let (x, v) = (int_data(&[3, 5], 0.3), int_data(&[3, 4], 1.1));
        let ours = Ascend::int_scatter(
            1,
            Ascend::int_from_data(x.clone(), &npu()),
            Ascend::int_from_data(idx.clone(), &npu()),
            Ascend::int_from_data(v.clone(), &npu()),
            update,
        );
        let theirs = Flex::int_scatter(
            1,
            Flex::int_from_data(x, &FlexDevice),
            Flex::int_from_data(idx, &FlexDevice),
            Flex::int_from_data(v, &FlexDevice),
            update,
        );
        println!("{update:?}");
        read_int::<Ascend>(ours).assert_eq(&read_int::<Flex>(theirs), true);
    }
}

/// Min and max along the first of three dims (the composition moves the scatter axis last).
#[test]
fn scatter_min_max_along_a_leading_dim_of_a_3d_tensor() {
    let idx = TensorData::new(
        vec![1i32, 0, 3, 3, 0, 1, 1, 2, 3, 0, 0, 2, 2, 3, 1, 1, 0, 3],
        [3, 2, 3],
    );
    for update in [IndexingUpdateOp::Min, IndexingUpdateOp::Max] {
        let (x, v) = (float_data(&[4, 2, 3], 0.7), float_data(&[3, 2, 3], 1.9));
        let ours = Ascend::float_scatter(
            0,
            Ascend::float_from_data(x.clone(), &npu()),
            Ascend::int_from_data(idx.clone(), &npu()),
            Ascend::float_from_data(v.clone(), &npu()),
            update,
        );
        let theirs = Flex::float_scatter(
            0,
            Flex::float_from_data(x, &FlexDevice),
            Flex::int_from_data(idx.clone(), &FlexDevice),
            Flex::float_from_data(v, &FlexDevice),
            update,
        );
        read::<Ascend>(ours).assert_approx_eq(&read::<Flex>(theirs), float_tol());
    }
}

/// Select-assign rows of a `[4, 3]` tensor: five value rows, repeated targets except for
/// assign.
fn select_indices(update: IndexingUpdateOp) -> TensorData {
    match update {
        IndexingUpdateOp::Assign => TensorData::new(vec![3i32, 0, 2], [3]),
        _ => TensorData::new(vec![1i32, 3, 1, 0, 1], [5]),
    }
}

#[test]
fn float_select_assign_matches_flex_for_every_update() {
    for update in UPDATES {
        let idx = select_indices(update);
        let rows = idx.shape()[0];
        let (x, v) = (float_data(&[4, 3], 0.4), float_data(&[rows, 3], 3.3));
        let ours = Ascend::float_select_assign(
            Ascend::float_from_data(x.clone(), &npu()),
            0,
            Ascend::int_from_data(idx.clone(), &npu()),
            Ascend::float_from_data(v.clone(), &npu()),
            update,
        );
        let theirs = Flex::float_select_assign(
            Flex::float_from_data(x, &FlexDevice),
            0,
            Flex::int_from_data(idx, &FlexDevice),
            Flex::float_from_data(v, &FlexDevice),
            update,
        );
        println!("{update:?}");
        read::<Ascend>(ours).assert_approx_eq(&read::<Flex>(theirs), float_tol());
    }
}

#[test]
fn int_select_assign_matches_flex_for_every_update() {
    for update in UPDATES {
        let idx = select_indices(update);
        let rows = idx.shape()[0];
        // Along dim 1 this time: the value's columns land on the tensor's columns.
        let (x, v) = (int_data(&[3, 4], 0.9), int_data(&[3, rows], 2.6));
        let ours = Ascend::int_select_assign(
            Ascend::int_from_data(x.clone(), &npu()),
            1,
            Ascend::int_from_data(idx.clone(), &npu()),
            Ascend::int_from_data(v.clone(), &npu()),
            update,
        );
        let theirs = Flex::int_select_assign(
            Flex::int_from_data(x, &FlexDevice),
            1,
            Flex::int_from_data(idx, &FlexDevice),
            Flex::int_from_data(v, &FlexDevice),
            update,
        );
        println!("{update:?}");
        read_int::<Ascend>(ours).assert_eq(&read_int::<Flex>(theirs), true);
    }
}

#[test]
fn scatter_with_mismatched_shapes_is_refused_by_name() {
    let result = burn_ascend_b22::try_run(|| {
        Ascend::float_scatter(
            1,
            Ascend::float_from_data(float_data(&[3, 5], 0.1), &npu()),
            Ascend::int_from_data(TensorData::new(vec![0i32, 1], [1, 2]), &npu()),
            Ascend::float_from_data(float_data(&[1, 2], 0.2), &npu()),
            IndexingUpdateOp::Max,
        )
    });
    let err = result.expect_err("a [1, 2] index into a [3, 5] tensor along 1 must fail");
    assert!(err.to_string().contains("scatter"), "{err}");
}

/// Indices equal as numbers and of the dtype asked for.
fn check_pool_indices(dtype: IntDType, ours: IntTensor<Ascend>, theirs: IntTensor<Flex>) {
    let (ours, theirs) = (read_int::<Ascend>(ours), read_int::<Flex>(theirs));
    assert_eq!(ours.dtype(), DType::from(dtype));
    let ours: Vec<i64> = ours.convert::<i64>().try_into_vec().unwrap();
    let theirs: Vec<i64> = theirs.convert::<i64>().try_into_vec().unwrap();
    assert_eq!(ours, theirs);
}

/// Indices of an int tensor come in its int dtype, as Burn 0.22's IR declares them (burn-router's
/// int ops, through which a remote client declares each output: int64 indices under an int32
/// declaration broke the MoE decoder's routing through the server), with flex's values. (flex
/// itself returns int64 from argmax and argmin whatever the input: only its values are compared.)
#[test]
fn int_index_ops_give_indices_in_the_input_int_dtype() {
    // Distinct values (no ties, whose order sorts may choose freely), of both signs.
    let values: Vec<i64> = (0..15).map(|i| (i * 7 % 15) - 6).collect();
    for dtype in [DType::I32, DType::I64] {
        let data = TensorData::new(values.clone(), [3, 5]).convert_dtype(dtype);
        let ours = || Ascend::int_from_data(data.clone(), &npu());
        let theirs = || Flex::int_from_data(data.clone(), &FlexDevice);
        let cases = [
            (
                "argmax",
                Ascend::int_argmax(ours(), 1),
                Flex::int_argmax(theirs(), 1),
            ),
            (
                "argmin",
                Ascend::int_argmin(ours(), 1),
                Flex::int_argmin(theirs(), 1),
            ),
            (
                "argtopk",
                Ascend::int_argtopk(ours(), 1, 2),
                Flex::int_argtopk(theirs(), 1, 2),
            ),
            (
                "argsort",
                Ascend::int_argsort(ours(), 1, true),
                Flex::int_argsort(theirs(), 1, true),
            ),
            (
                "sort_with_indices",
                Ascend::int_sort_with_indices(ours(), 1, false).1,
                Flex::int_sort_with_indices(theirs(), 1, false).1,
            ),
        ];
        for (op, a, f) in cases {
            let (a, f) = (read_int::<Ascend>(a), read_int::<Flex>(f));
            assert_eq!(a.dtype(), dtype, "{op} of {dtype:?}: the indices' dtype");
            let a: Vec<i64> = a.convert::<i64>().try_into_vec().unwrap();
            let f: Vec<i64> = f.convert::<i64>().try_into_vec().unwrap();
            assert_eq!(a, f, "{op} of {dtype:?}");
        }
    }
}

#[test]
fn max_pool2d_with_indices_gives_the_index_dtype_asked_for() {
    let x = float_data(&[2, 2, 5, 6], 0.5);
    for dtype in [IntDType::I32, IntDType::I64] {
        let ours = Ascend::max_pool2d_with_indices(
            Ascend::float_from_data(x.clone(), &npu()),
            [3, 2],
            [2, 2],
            [1, 0],
            [1, 1],
            false,
            dtype,
        );
        let theirs = Flex::max_pool2d_with_indices(
            Flex::float_from_data(x.clone(), &FlexDevice),
            [3, 2],
            [2, 2],
            [1, 0],
            [1, 1],
            false,
            dtype,
        );
        read::<Ascend>(ours.output).assert_approx_eq(&read::<Flex>(theirs.output), float_tol());
        check_pool_indices(dtype, ours.indices, theirs.indices);
    }
}

#[test]
fn max_pool1d_with_indices_gives_the_index_dtype_asked_for() {
    let x = float_data(&[2, 3, 9], 1.5);
    for dtype in [IntDType::I32, IntDType::I64] {
        let ours = Ascend::max_pool1d_with_indices(
            Ascend::float_from_data(x.clone(), &npu()),
            3,
            2,
            1,
            1,
            true,
            dtype,
        );
        let theirs = Flex::max_pool1d_with_indices(
            Flex::float_from_data(x.clone(), &FlexDevice),
            3,
            2,
            1,
            1,
            true,
            dtype,
        );
        read::<Ascend>(ours.output).assert_approx_eq(&read::<Flex>(theirs.output), float_tol());
        check_pool_indices(dtype, ours.indices, theirs.indices);
    }
}

#[test]
fn adaptive_avg_pool3d_and_its_gradient_match_flex() {
    // Windows that overlap (7 -> 3, 5 -> 2) and an enlarged axis (2 -> 3).
    let x = float_data(&[2, 3, 7, 5, 2], 0.2);
    let out = [3, 2, 3];
    let ours = Ascend::adaptive_avg_pool3d(Ascend::float_from_data(x.clone(), &npu()), out);
    let theirs = Flex::adaptive_avg_pool3d(Flex::float_from_data(x.clone(), &FlexDevice), out);
    read::<Ascend>(ours).assert_approx_eq(&read::<Flex>(theirs), float_tol());

    let grad = float_data(&[2, 3, 3, 2, 3], 4.0);
    let ours = Ascend::adaptive_avg_pool3d_backward(
        Ascend::float_from_data(x.clone(), &npu()),
        Ascend::float_from_data(grad.clone(), &npu()),
    );
    let theirs = Flex::adaptive_avg_pool3d_backward(
        Flex::float_from_data(x, &FlexDevice),
        Flex::float_from_data(grad, &FlexDevice),
    );
    read::<Ascend>(ours).assert_approx_eq(&read::<Flex>(theirs), float_tol());
}

#[test]
fn tensors_know_their_device_and_whether_they_own_their_buffer() {
    let device = npu();
    let t = Ascend::float_from_data(float_data(&[2, 3], 0.0), &device);
    assert_eq!(t.device(), device);
    assert!(t.can_mut(), "a fresh dense tensor owns its buffer");

    let shared = t.clone();
    assert!(
        !t.can_mut(),
        "a buffer another tensor holds is not writable in place"
    );
    drop(shared);
    assert!(t.can_mut());

    let view = Ascend::float_swap_dims(t.clone(), 0, 1);
    drop(t);
    assert!(!view.can_mut(), "a transposed view is not dense in order");

    let q = Ascend::quantize_dynamic(
        Ascend::float_from_data(float_data(&[2, 4], 0.3), &device),
        &Default::default(),
    );
    assert_eq!(q.device(), device);
}

#[test]
fn flush_and_sync_succeed_on_a_live_device() {
    let device = npu();
    let t = Ascend::float_exp(Ascend::float_from_data(float_data(&[4], 0.0), &device));
    Ascend::flush(&device).expect("flush");
    Ascend::sync(&device).expect("sync");
    assert_eq!(read::<Ascend>(t).shape().to_vec(), vec![4]);
}

/// Held by the tests using the second emulated NPU: a graph capture there refuses other
/// threads' work.
static DEVICE_1: std::sync::Mutex<()> = std::sync::Mutex::new(());

type AdA = Autodiff<Ascend>;
type AdF = Autodiff<Flex>;

/// `sum(sigmoid(x @ w) * x @ w)` on both backends: the gradients of `x` and `w` agree.
#[test]
fn autodiff_gradients_of_a_matmul_chain_match_flex() {
    let (x, w) = (float_data(&[3, 4], 0.6), float_data(&[4, 2], 1.4));
    fn run<B: AutodiffBackend>(
        x: TensorData,
        w: TensorData,
        device: &B::Device,
    ) -> (TensorData, TensorData) {
        let x = B::float_set_require_grad(B::float_from_data(x, device), true);
        let w = B::float_set_require_grad(B::float_from_data(w, device), true);
        let y = B::float_matmul(x.clone(), w.clone());
        let loss = B::float_sum(B::float_mul(B::sigmoid(y.clone()), y));
        let grads = B::backward(loss);
        let gx = B::grad(&x, &grads).expect("x has a gradient");
        let gw = B::grad(&w, &grads).expect("w has a gradient");
        (read::<B::InnerBackend>(gx), read::<B::InnerBackend>(gw))
    }
    let ours = run::<AdA>(x.clone(), w.clone(), &npu());
    let theirs = run::<AdF>(x, w, &FlexDevice);
    ours.0
        .assert_approx_eq(&theirs.0, Tolerance::<f32>::rel_abs(1e-4, 1e-5));
    ours.1
        .assert_approx_eq(&theirs.1, Tolerance::<f32>::rel_abs(1e-4, 1e-5));
}

/// The new ops under autodiff: a 3-D adaptive pool, weighted, scatter-added into three
/// sums, squared and summed.
#[test]
fn autodiff_gradients_through_the_new_ops_match_flex() {
    let x = float_data(&[1, 2, 4, 6, 3], 0.8);
    let weights = float_data(&[1, 2, 2, 3, 2], 2.2);
    fn run<B: AutodiffBackend>(
        x: TensorData,
        weights: TensorData,
        device: &B::Device,
    ) -> TensorData {
        let x = B::float_set_require_grad(B::float_from_data(x, device), true);
        let pooled = B::adaptive_avg_pool3d(x.clone(), [2, 3, 2]);
        let weighted = B::float_mul(pooled, B::float_from_data(weights, device));
        let flat = B::float_reshape(weighted, Shape::new([2, 12]));
        let idx = B::int_from_data(
            TensorData::new(vec![0i32, 2, 2, 1, 0, 1, 1, 2, 0, 0, 2, 1], [1, 12]),
            device,
        );
        let flat = B::float_slice(flat, &[burn_backend::Slice::from(0..1)]);
        let scattered = B::float_scatter(
            1,
            B::float_zeros(Shape::new([1, 3]), device, FloatDType::F32),
            idx,
            flat,
            IndexingUpdateOp::Add,
        );
        let loss = B::float_sum(B::float_mul(scattered.clone(), scattered));
        let grads = B::backward(loss);
        read::<B::InnerBackend>(B::grad(&x, &grads).expect("x has a gradient"))
    }
    let ours = run::<AdA>(x.clone(), weights.clone(), &npu());
    let theirs = run::<AdF>(x, weights, &FlexDevice);
    ours.assert_approx_eq(&theirs, Tolerance::<f32>::rel_abs(1e-4, 1e-5));
}

fn bool_data(shape: &[usize], seed: f32) -> TensorData {
    let v: Vec<bool> = floats(shape.iter().product(), seed)
        .iter()
        .map(|x| *x > 0.5)
        .collect();
    TensorData::new(v, shape.to_vec())
}

fn read_bool<B: Backend>(t: burn_backend::tensor::BoolTensor<B>) -> TensorData {
    try_read_sync(B::bool_into_data(t))
        .expect("the read completes")
        .expect("the read succeeds")
}

/// The OR-updates of bool tensors (composed in the core, shared by both adapters).
#[test]
fn bool_scatter_or_and_select_or_match_flex() {
    let (x, v) = (bool_data(&[3, 5], 0.2), bool_data(&[3, 4], 1.7));
    let idx = scatter_indices(true);
    let ours = Ascend::bool_scatter_or(
        1,
        Ascend::bool_from_data(x.clone(), &npu()),
        Ascend::int_from_data(idx.clone(), &npu()),
        Ascend::bool_from_data(v.clone(), &npu()),
    );
    let theirs = Flex::bool_scatter_or(
        1,
        Flex::bool_from_data(x.clone(), &FlexDevice),
        Flex::int_from_data(idx, &FlexDevice),
        Flex::bool_from_data(v, &FlexDevice),
    );
    read_bool::<Ascend>(ours).assert_eq(&read_bool::<Flex>(theirs), true);

    let (idx, v) = (
        select_indices(IndexingUpdateOp::Add),
        bool_data(&[5, 5], 2.9),
    );
    let x = bool_data(&[4, 5], 0.6);
    let ours = Ascend::bool_select_or(
        Ascend::bool_from_data(x.clone(), &npu()),
        0,
        Ascend::int_from_data(idx.clone(), &npu()),
        Ascend::bool_from_data(v.clone(), &npu()),
    );
    let theirs = Flex::bool_select_or(
        Flex::bool_from_data(x, &FlexDevice),
        0,
        Flex::int_from_data(idx, &FlexDevice),
        Flex::bool_from_data(v, &FlexDevice),
    );
    read_bool::<Ascend>(ours).assert_eq(&read_bool::<Flex>(theirs), true);
}

#[test]
fn float_topk_with_indices_matches_flex() {
    let x = float_data(&[3, 7], 0.45);
    for dtype in [IntDType::I32, IntDType::I64] {
        let (v, i) = Ascend::float_topk_with_indices(
            Ascend::float_from_data(x.clone(), &npu()),
            1,
            3,
            dtype,
        );
        let (fv, fi) = Flex::float_topk_with_indices(
            Flex::float_from_data(x.clone(), &FlexDevice),
            1,
            3,
            dtype,
        );
        read::<Ascend>(v).assert_approx_eq(&read::<Flex>(fv), float_tol());
        check_pool_indices(dtype, i, fi);
    }
}

/// Burn 0.22's graph methods: ops between start and stop are recorded, not run; each replay
/// runs them again on the input's current values (written in place between replays). On the
/// second emulated NPU: while it captures, the device refuses other threads' work, and the
/// other tests run on the first (but the collective one, serialised by [`DEVICE_1`]).
#[test]
fn a_captured_graph_replays_on_new_inputs() {
    let _device_1 = DEVICE_1.lock().unwrap_or_else(|p| p.into_inner());
    let device = AscendDevice::Emulated(1);
    let (first, second) = (float_data(&[2, 3], 0.1), float_data(&[2, 3], 5.0));
    let x = Ascend::float_from_data(first.clone(), &device);
    Ascend::graph_start_capture(&device).expect("the emulated NPU captures");
    let y = Ascend::float_add_scalar(Ascend::float_exp(x.clone()), 1.0.into());
    let graph = Ascend::graph_stop_capture(&device).expect("the capture ends");

    let expected = |data: TensorData| {
        let x = Flex::float_from_data(data, &FlexDevice);
        read::<Flex>(Flex::float_add_scalar(Flex::float_exp(x), 1.0.into()))
    };
    // SAFETY: x and y are alive and used by this thread only.
    unsafe { Ascend::graph_replay(&device, &graph) }.expect("replay");
    read::<Ascend>(y.clone()).assert_approx_eq(&expected(first), float_tol());

    // A new input in x's own buffer (the graph reads that address).
    x.ctx()
        .upload(x.storage().unwrap(), second.as_bytes())
        .expect("upload");
    unsafe { Ascend::graph_replay(&device, &graph) }.expect("replay");
    read::<Ascend>(y).assert_approx_eq(&expected(second), float_tol());

    assert!(
        Ascend::graph_stop_capture(&device).is_err(),
        "no capture is open"
    );
}

/// `DistributedOps::all_reduce` on HCCL across the two emulated NPUs, issued device after
/// device from one thread and resolved in between, as Burn's gradient sync does.
#[test]
fn all_reduce_sums_and_averages_across_the_emulated_npus() {
    use burn_backend::distributed::{DistributedOps, ReduceOperation};
    use burn_backend::Device as _;
    let _device_1 = DEVICE_1.lock().unwrap_or_else(|p| p.into_inner());
    let devices = [AscendDevice::Emulated(0), AscendDevice::Emulated(1)];
    let ids: Vec<_> = devices.iter().map(|d| d.to_id()).collect();
    let parts = [float_data(&[2, 3], 0.3), float_data(&[2, 3], 2.4)];
    let sum: Vec<f32> = parts[0]
        .iter::<f32>()
        .zip(parts[1].iter::<f32>())
        .map(|(a, b)| a + b)
        .collect();
    for (op, scale) in [(ReduceOperation::Sum, 1.0), (ReduceOperation::Mean, 0.5)] {
        let expected = TensorData::new(sum.iter().map(|s| s * scale).collect(), [2, 3]);
        let mut results = Vec::new();
        for (device, part) in devices.iter().zip(&parts) {
            let t = Ascend::float_from_data(part.clone(), device);
            results.push(Ascend::all_reduce(t, op, ids.clone()).resolve());
        }
        for r in results {
            read::<Ascend>(r).assert_approx_eq(&expected, float_tol());
        }
    }
}

/// Burn 0.22's convolutions take `(begin, end)` padding per dim; uneven padding (aclnn pads
/// both sides alike) runs on an explicitly padded input. Output and both gradients vs flex.
#[test]
fn conv2d_with_uneven_padding_and_its_gradients_match_flex() {
    use burn_backend::ops::ConvOptions;
    let x = float_data(&[1, 2, 5, 6], 0.15);
    let w = float_data(&[3, 2, 3, 2], 1.35);
    let options = || ConvOptions::new_with_padding([1, 2], [(2, 0), (0, 1)], [1, 1], 1);
    fn run<B: AutodiffBackend>(
        x: TensorData,
        w: TensorData,
        options: ConvOptions<2>,
        device: &B::Device,
    ) -> (TensorData, TensorData, TensorData) {
        let x = B::float_set_require_grad(B::float_from_data(x, device), true);
        let w = B::float_set_require_grad(B::float_from_data(w, device), true);
        let y = B::conv2d(x.clone(), w.clone(), None, options);
        let loss = B::float_sum(B::float_mul(y.clone(), y.clone()));
        let grads = B::backward(loss);
        let gx = B::grad(&x, &grads).expect("x has a gradient");
        let gw = B::grad(&w, &grads).expect("w has a gradient");
        let y = read::<B::InnerBackend>(B::inner(y));
        (y, read::<B::InnerBackend>(gx), read::<B::InnerBackend>(gw))
    }
    let ours = run::<AdA>(x.clone(), w.clone(), options(), &npu());
    let theirs = run::<AdF>(x, w, options(), &FlexDevice);
    assert_eq!(ours.0.shape(), theirs.0.shape());
    let tol = Tolerance::<f32>::rel_abs(1e-4, 1e-4);
    ours.0.assert_approx_eq(&theirs.0, tol);
    ours.1.assert_approx_eq(&theirs.1, tol);
    ours.2.assert_approx_eq(&theirs.2, tol);
}
