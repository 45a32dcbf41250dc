//! `burn_ascend::graph`: a captured block of ops replays to the same values as running it
//! eagerly, with new inputs written in place each time; its private pool keeps eager tensors
//! off its buffers; a capture that synchronises fails, saying why, and leaves the device usable.
//!
//! A capture forbids synchronising anything on its device, so these tests run one at a time.

mod common;

use burn::tensor::{Int, Tensor, TensorData};
use burn_ascend::{fused, graph, try_run, Ascend, AscendDevice};
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
#[serial(graph)]
fn an_eager_tensor_that_dies_in_the_capture_keeps_its_block_until_the_graph_is_dropped() {
    let device = device();
    let values: Vec<f32> = (0..1024).map(|i| i as f32).collect();
    let x = Tensor::<Ascend, 1>::from_data(TensorData::new(values.clone(), [1024]), &device);
    // `x` is eager; its last reference dies inside the closure, after the op reading it was
    // recorded.
    let (step, out) = graph::capture(&device, move || {
        let y = x.clone() * 2.0;
        drop(x);
        y
    })
    .unwrap();
    // Eager tensors of the same size: one would take x's block if it were back in the cache.
    let others: Vec<Tensor<Ascend, 1>> = (0..4)
        .map(|i| Tensor::<Ascend, 1>::full([1024], -(i as f32), &device))
        .collect();
    step.replay().unwrap();
    let doubled: Vec<f32> = values.iter().map(|v| v * 2.0).collect();
    assert_eq!(out.clone().into_data().to_vec::<f32>().unwrap(), doubled);
    for (i, t) in others.iter().enumerate() {
        assert_eq!(
            t.clone().into_data().to_vec::<f32>().unwrap(),
            vec![-(i as f32); 1024]
        );
    }
    // Once the graph is gone the block serves eager work again.
    let in_use = Ascend::memory_stats(&device).bytes_in_use;
    drop(step);
    assert_eq!(
        Ascend::memory_stats(&device).bytes_in_use,
        in_use - 1024 * 4,
        "x's block went back to the cache with the graph"
    );
}

#[test]
#[serial(graph)]
fn work_of_another_thread_during_a_capture_is_refused_not_recorded() {
    let device = device();
    let a = Tensor::<Ascend, 1>::ones([8], &device);
    let b = Tensor::<Ascend, 1>::full([8], 2.0, &device);
    let other_thread = || {
        std::thread::scope(|s| {
            s.spawn(|| try_run(|| (a.clone() + b.clone()).into_data().to_vec::<f32>().unwrap()))
                .join()
                .unwrap()
        })
    };
    let (step, (out, during)) =
        graph::capture(&device, || (a.clone() * 3.0, other_thread())).unwrap();
    let why = during.expect_err("refused during the capture").to_string();
    assert!(
        why.contains("capturing a graph") && why.contains("other threads"),
        "{why}"
    );
    step.replay().unwrap();
    assert_eq!(out.into_data().to_vec::<f32>().unwrap(), [3.0; 8]);
    // After the capture the same work of another thread runs.
    assert_eq!(other_thread().unwrap(), [3.0; 8]);
}

#[test]
#[serial(graph)]
fn a_graph_records_no_executor_of_the_cache_so_eager_reuse_cannot_rebind_it() {
    let device = device();
    let t = |v: f32| Tensor::<Ascend, 1>::full([16], v, &device);
    let (a, b, c, d) = (t(1.0), t(2.0), t(10.0), t(20.0));
    // Caches an executor of `[16] + [16]`.
    assert_eq!(
        (a.clone() + b.clone()).into_data().to_vec::<f32>().unwrap(),
        [3.0; 16]
    );
    let (step, out) = graph::capture(&device, || c.clone() + d.clone()).unwrap();
    // The same op eagerly again: a cache hit, rebinding the cached executor's addresses.
    assert_eq!(
        (a.clone() + b.clone()).into_data().to_vec::<f32>().unwrap(),
        [3.0; 16]
    );
    step.replay().unwrap();
    assert_eq!(out.into_data().to_vec::<f32>().unwrap(), [30.0; 16]);
}

#[test]
#[serial(graph)]
fn a_failed_capture_frees_the_staging_of_its_uploads() {
    let device = device();
    // The eager staging ring exists before counting.
    let _ = Tensor::<Ascend, 1>::from_floats([1.0], &device).into_data();
    let before = burn_ascend::emulator::pinned_host_buffers();
    let failed = graph::capture(&device, || {
        let c = Tensor::<Ascend, 1>::from_floats([1.0, 2.0, 3.0], &device);
        (c * 2.0).into_data()
    });
    assert!(failed.is_err(), "a read fails the capture");
    assert_eq!(burn_ascend::emulator::pinned_host_buffers(), before);
}

#[test]
#[serial(graph)]
fn a_graph_that_cannot_be_destroyed_keeps_its_memory() {
    let device = device();
    let x = Tensor::<Ascend, 2>::ones([1024, 1024], &device);
    let (step, out) = graph::capture(&device, || {
        (0..16).fold(x.clone(), |h, _| h.matmul(x.clone()) * (1.0 / 1024.0))
    })
    .unwrap();
    let pool = step.pool_bytes();
    let before = Ascend::memory_stats(&device);
    // A long replay is queued; another thread's capture then makes the drop's synchronisation
    // fail, so aclmdlRIDestroy meets the replay still queued and fails.
    step.replay().unwrap();
    let (capturing_tx, capturing_rx) = std::sync::mpsc::channel();
    let (dropped_tx, dropped_rx) = std::sync::mpsc::channel::<()>();
    let other = std::thread::spawn(move || {
        graph::capture(&device, || {
            capturing_tx.send(()).unwrap();
            dropped_rx.recv().unwrap();
        })
        .map(|(graph, ())| drop(graph))
    });
    capturing_rx.recv().unwrap();
    drop(step);
    drop(out);
    dropped_tx.send(()).unwrap();
    other.join().unwrap().unwrap();
    // Waits for the replay.
    assert_eq!(
        x.into_data().to_vec::<f32>().unwrap(),
        vec![1.0; 1024 * 1024]
    );
    let after = Ascend::memory_stats(&device);
    // The graph's pool was not taken into the eager cache: the graph might still have run.
    assert_eq!(
        after.bytes_reserved, before.bytes_reserved,
        "pool of {pool} bytes"
    );
    assert!(pool > 0);
}

#[test]
#[serial(graph)]
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
