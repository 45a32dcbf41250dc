//! `burn_ascend::graph`: a captured block of ops replays to the same values as running it
//! eagerly, with new inputs written in place each time; its private pool keeps eager tensors
//! off its buffers; a capture that synchronises fails, saying why, and leaves the device usable.
//!
//! A capture forbids synchronising anything on its device, so these tests run one at a time.

mod common;

use burn::tensor::{Int, Tensor, TensorData};
use burn_ascend::{fused, graph, Ascend, AscendDevice};
use common::device;
use serial_test::serial;

/// A block touching every kind of work: an uploaded constant, aclnn operators (matmul, a
/// reduction, element-wise math), a fused Ascend C kernel and an integer gather.
fn block(
    x: &Tensor<Ascend, 2>,
    w: &Tensor<Ascend, 2>,
    rows: &Tensor<Ascend, 1, Int>,
    device: &AscendDevice,
) -> Tensor<Ascend, 2> {
    let bias = Tensor::<Ascend, 1>::from_floats([0.5, -1.0, 2.0, 0.25], device);
    let h = x.clone().matmul(w.clone()) + bias.reshape([1, 4]);
    let h = fused::layer_norm(h, None, None, 1e-5).0;
    let h = h.clone().exp() / h.exp().sum_dim(1);
    h.select(0, rows.clone())
}

fn floats(t: Tensor<Ascend, 2>) -> Vec<f32> {
    t.into_data().to_vec().unwrap()
}

fn input(step: usize) -> TensorData {
    TensorData::new(
        (0..24)
            .map(|i| ((i * 7 + step * 13) % 11) as f32 / 4.0 - 1.0)
            .collect::<Vec<f32>>(),
        [6, 4],
    )
}

fn row_order(step: usize) -> TensorData {
    TensorData::new(vec![(step % 6) as i32, 5, 0], [3])
}

#[test]
#[serial(graph)]
fn replays_match_eager_runs_with_inputs_written_in_place() {
    let device = device();
    let w = Tensor::<Ascend, 2>::from_data(
        TensorData::new(
            (0..16).map(|i| i as f32 / 8.0 - 1.0).collect::<Vec<_>>(),
            [4, 4],
        ),
        &device,
    );
    let x = Tensor::<Ascend, 2>::from_data(input(0), &device);
    let rows = Tensor::<Ascend, 1, Int>::from_data(row_order(0), &device);
    let (step, out) = graph::capture(&device, || block(&x, &w, &rows, &device)).unwrap();
    for i in 0..4 {
        graph::write(&x, input(i)).unwrap();
        graph::write(&rows, row_order(i)).unwrap();
        step.replay().unwrap();
        let eager = block(
            &Tensor::from_data(input(i), &device),
            &w,
            &Tensor::from_data(row_order(i), &device),
            &device,
        );
        assert_eq!(floats(out.clone()), floats(eager), "replay {i}");
    }
}

#[test]
#[serial(graph)]
fn eager_tensors_never_share_the_graph_buffers() {
    let device = device();
    let x = Tensor::<Ascend, 1>::zeros([256], &device);
    // Intermediates of the same size as the eager tensors below, freed inside the capture.
    let (step, out) = graph::capture(&device, || {
        let a = x.clone() + 1.0;
        let b = a * 3.0;
        b.sum()
    })
    .unwrap();
    assert!(step.pool_bytes() > 0);
    let keep: Vec<Tensor<Ascend, 1>> = (0..8)
        .map(|i| Tensor::<Ascend, 1>::full([256], i as f32, &device))
        .collect();
    graph::write(&x, TensorData::new(vec![1.0f32; 256], [256])).unwrap();
    step.replay().unwrap();
    step.replay().unwrap();
    assert_eq!(out.into_data().to_vec::<f32>().unwrap(), [256.0 * 6.0]);
    for (i, t) in keep.into_iter().enumerate() {
        assert_eq!(t.into_data().to_vec::<f32>().unwrap(), vec![i as f32; 256]);
    }
}

#[test]
#[serial(graph)]
fn a_capture_that_reads_a_tensor_fails_saying_why_and_the_device_goes_on() {
    let device = device();
    let x = Tensor::<Ascend, 1>::ones([8], &device);
    let failed = graph::capture(&device, || (x.clone() * 2.0).into_data());
    let why = failed.expect_err("a read synchronises").to_string();
    assert!(why.contains("aclrtSynchronizeStream"), "{why}");
    assert!(why.contains("capturing"), "{why}");
    // Nothing was recorded or run; the device works eagerly and captures again.
    assert_eq!(
        (x.clone() + 1.0).into_data().to_vec::<f32>().unwrap(),
        [2.0; 8]
    );
    let (step, y) = graph::capture(&device, || x.clone() * 3.0).unwrap();
    step.replay().unwrap();
    assert_eq!(y.into_data().to_vec::<f32>().unwrap(), [3.0; 8]);
}

#[test]
#[serial(graph)]
fn writing_data_of_another_shape_or_dtype_is_refused() {
    let device = device();
    let x = Tensor::<Ascend, 2>::zeros([2, 3], &device);
    let e = graph::write(&x, TensorData::new(vec![0f32; 6], [3, 2])).unwrap_err();
    assert!(
        e.to_string().contains("[3, 2]") && e.to_string().contains("[2, 3]"),
        "{e}"
    );
    let e = graph::write(&x, TensorData::new(vec![0i32; 6], [2, 3])).unwrap_err();
    assert!(e.to_string().contains("graph::write"), "{e}");
    let view = x.clone().slice([0..2, 1..3]);
    let e = graph::write(&view, TensorData::new(vec![0f32; 4], [2, 2])).unwrap_err();
    assert!(e.to_string().contains("view"), "{e}");
}

#[test]
#[serial(graph)]
fn dropping_a_graph_and_its_tensors_returns_its_pool_to_the_cache() {
    let device = device();
    let x = Tensor::<Ascend, 1>::zeros([4096], &device);
    let before = Ascend::memory_stats(&device);
    let (step, out) = graph::capture(&device, || (x.clone() + 2.0).exp()).unwrap();
    let pool = step.pool_bytes();
    assert!(pool >= 4096 * 4);
    step.replay().unwrap();
    drop(step);
    // The output still holds its pool block: the pool outlives the graph until it is dropped.
    assert_eq!(
        out.into_data().to_vec::<f32>().unwrap(),
        vec![2f32.exp(); 4096]
    );
    let after = Ascend::memory_stats(&device);
    assert_eq!(
        after.bytes_reserved,
        before.bytes_reserved + pool,
        "{after:?}"
    );
    assert_eq!(after.bytes_in_use, before.bytes_in_use, "{after:?}");
}

#[test]
#[serial]
fn write_rows_writes_the_rows_in_place_and_refuses_rows_of_another_shape() {
    let device = device();
    let host: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let cache = Tensor::<Ascend, 2>::from_data(TensorData::new(host.clone(), [6, 2]), &device);
    let before = cache.clone().into_primitive().tensor().storage_ptr();
    let rows = Tensor::<Ascend, 1, Int>::from_data(
        TensorData::new(vec![4i32, 1], [2]),
        (&device, burn::tensor::DType::I32),
    );
    let values = Tensor::<Ascend, 2>::from_floats([[-1.0, -2.0], [-3.0, -4.0]], &device);
    graph::write_rows(&cache, &rows, &values);
    let mut want = host;
    want[8..10].copy_from_slice(&[-1.0, -2.0]);
    want[2..4].copy_from_slice(&[-3.0, -4.0]);
    assert_eq!(floats(cache.clone()), want);
    assert_eq!(
        cache.clone().into_primitive().tensor().storage_ptr(),
        before,
        "the same buffer"
    );
    let wide = Tensor::<Ascend, 2>::zeros([2, 3], &device);
    let err = burn_ascend::try_run(|| graph::write_rows(&cache, &rows, &wide))
        .expect_err("rows of 3 into rows of 2");
    assert!(err.to_string().contains("aclnnInplaceIndexCopy"), "{err}");
}
