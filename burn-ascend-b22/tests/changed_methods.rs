//! The methods Burn 0.22 changed or added, at the primitive level on the emulated NPU, against
//! burn-flex 0.22 (Burn's own CPU backend) on the same inputs: scatter and select-assign with
//! every update rule, pooling indices of the dtype asked for, 3-D adaptive average pooling and
//! its gradient, the tensor's device and in-place flag, flush, and gradients through
//! `burn_autodiff::Autodiff<Ascend>`.

use burn_ascend_b22::{Ascend, AscendDevice};
use burn_autodiff::Autodiff;
use burn_backend::ops::{FloatTensorOps, IntTensorOps, ModuleOps, QTensorOps};
use burn_backend::tensor::{FloatTensor, IndexingUpdateOp, IntTensor};
use burn_backend::{
    try_read_sync, AutodiffBackend, Backend, DType, FloatDType, IntDType, Shape, TensorData,
    TensorMetadata, Tolerance,
};
use burn_flex::{Flex, FlexDevice};

const UPDATES: [IndexingUpdateOp; 5] = [
    IndexingUpdateOp::Assign,
    IndexingUpdateOp::Add,
    IndexingUpdateOp::Mul,
    IndexingUpdateOp::Min,
    IndexingUpdateOp::Max,
];

fn npu() -> AscendDevice {
    AscendDevice::Emulated(0)
}

fn read<B: Backend>(t: FloatTensor<B>) -> TensorData {
    try_read_sync(B::float_into_data(t))
        .expect("the read completes")
        .expect("the read succeeds")
}

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

/// Values equal; indices equal as numbers and of the dtype asked for.
fn check_pool_indices(dtype: IntDType, ours: IntTensor<Ascend>, theirs: IntTensor<Flex>) {
    let (ours, theirs) = (read_int::<Ascend>(ours), read_int::<Flex>(theirs));
    assert_eq!(ours.dtype(), DType::from(dtype));
    let ours: Vec<i64> = ours.convert::<i64>().try_into_vec().unwrap();
    let theirs: Vec<i64> = theirs.convert::<i64>().try_into_vec().unwrap();
    assert_eq!(ours, theirs);
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
