//! Collectives across two NPUs (`burn_ascend::collective`) on `Ascend` and `Fusion<Ascend>`,
//! against closed-form results: all-reduce (sum, mean, max, product; non-contiguous inputs),
//! broadcast, all-gather, reduce-scatter, all-to-all of rows with uneven counts, send and
//! receive; the errors of bad calls; and, on the emulated NPUs, that a collective moves its
//! bytes over the links only (no operator, no host staging).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Int, Tensor, TensorData};
use burn_ascend::collective::{self, CollectiveOps, Communicator, Reduce};
use burn_ascend::emulator::hccl::{hccl_counters, Kind};
use burn_ascend::emulator::work_counters;
use burn_ascend::{Ascend, AscendDevice};
use burn_fusion::Fusion;
use common::{
    device, fault_device, provoke_fault, reset_fault_device, second_device, skipped_on_npu,
};
use serial_test::serial;

/// The two devices and their communicator, or `None` (after saying so) on a one-NPU machine.
fn pair(test: &str) -> Option<([AscendDevice; 2], Arc<Communicator>)> {
    let devices = [device(), second_device()];
    if devices[0] == devices[1] {
        eprintln!("{test}: skipped: the machine has one NPU");
        return None;
    }
    let comm = Communicator::local(&devices).expect("a communicator of two NPUs");
    Some((devices, comm))
}

fn floats<B: Backend>(values: &[f32], shape: [usize; 2], device: &B::Device) -> Tensor<B, 2> {
    Tensor::from_data(TensorData::new(values.to_vec(), shape), device)
}

fn host<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().to_vec().unwrap()
}

fn all_reduce_cases<B: CollectiveOps>(test: &str) {
    let Some((d, comm)) = pair(test) else { return };
    let a: Vec<f32> = (0..6).map(|i| i as f32 - 2.5).collect();
    let b: Vec<f32> = (0..6).map(|i| (i * i) as f32 * 0.5 - 1.0).collect();
    let zip =
        |f: fn(f32, f32) -> f32| -> Vec<f32> { a.iter().zip(&b).map(|(x, y)| f(*x, *y)).collect() };
    for (op, want) in [
        (Reduce::Sum, zip(|x, y| x + y)),
        (Reduce::Mean, zip(|x, y| (x + y) / 2.0)),
        (Reduce::Max, zip(f32::max)),
        (Reduce::Min, zip(f32::min)),
        (Reduce::Prod, zip(|x, y| x * y)),
    ] {
        let out = collective::all_reduce(
            &comm,
            vec![
                floats::<B>(&a, [2, 3], &d[0]),
                floats::<B>(&b, [2, 3], &d[1]),
            ],
            op,
        );
        assert_eq!(out[0].device(), d[0]);
        assert_eq!(out[1].device(), d[1]);
        for o in out {
            assert_eq!(host(o), want, "{op:?}");
        }
    }
    // A transposed (non-contiguous) view reduces as its logical values.
    let out = collective::all_reduce(
        &comm,
        vec![
            floats::<B>(&a, [2, 3], &d[0]).transpose(),
            floats::<B>(&b, [2, 3], &d[1]).transpose(),
        ],
        Reduce::Sum,
    );
    let want = floats::<B>(&zip(|x, y| x + y), [2, 3], &d[0]).transpose();
    assert_eq!(host(out[1].clone()), host(want));
    // Half precision reduces in its own dtype.
    let half = |v: &[f32], dev| floats::<B>(v, [2, 3], dev).cast(DType::BF16);
    let out = collective::all_reduce(&comm, vec![half(&a, &d[0]), half(&b, &d[1])], Reduce::Sum);
    assert_eq!(out[0].dtype(), DType::BF16);
    assert_eq!(host(out[0].clone()), zip(|x, y| x + y));
}

#[test]
#[serial]
fn all_reduce_on_ascend() {
    all_reduce_cases::<Ascend>("all_reduce_on_ascend");
}

#[test]
#[serial]
fn all_reduce_on_fusion_ascend() {
    all_reduce_cases::<Fusion<Ascend>>("all_reduce_on_fusion_ascend");
}

fn movement_cases<B: CollectiveOps>(test: &str) {
    let Some((d, comm)) = pair(test) else { return };
    let x0 = floats::<B>(&[1., 2., 3., 4.], [2, 2], &d[0]);
    let x1 = floats::<B>(&[5., 6., 7., 8.], [2, 2], &d[1]);
    let b = collective::broadcast(&comm, vec![x0.clone(), x1.clone()], 1);
    assert_eq!(host(b[0].clone()), [5., 6., 7., 8.]);
    assert_eq!(
        host(x1.clone()),
        [5., 6., 7., 8.],
        "the root's input is untouched"
    );
    let g = collective::all_gather(&comm, vec![x0.clone(), x1.clone()]);
    for t in g {
        assert_eq!(t.dims(), [4, 2]);
        assert_eq!(host(t), [1., 2., 3., 4., 5., 6., 7., 8.]);
    }
    let gi = collective::all_gather_int(
        &comm,
        vec![
            Tensor::<B, 1, Int>::from_ints([1, 2, 3], &d[0]),
            Tensor::<B, 1, Int>::from_ints([4, 5, 6], &d[1]),
        ],
    );
    assert_eq!(
        gi[1].clone().into_data().to_vec::<i32>().unwrap(),
        [1, 2, 3, 4, 5, 6]
    );
    let rs = collective::reduce_scatter(&comm, vec![x0, x1], Reduce::Sum);
    assert_eq!(host(rs[0].clone()), [6., 8.]);
    assert_eq!(host(rs[1].clone()), [10., 12.]);
    // Rank 0 sends 1 row to itself and 2 to rank 1; rank 1 sends 0 to rank 0 and 1 to itself.
    let rows = [vec![1, 2], vec![0, 1]];
    let s0 = floats::<B>(&[1., 1., 2., 2., 3., 3.], [3, 2], &d[0]);
    let s1 = floats::<B>(&[9., 9.], [1, 2], &d[1]);
    let r = collective::all_to_all_v(&comm, vec![s0, s1], &rows);
    assert_eq!(r[0].dims(), [1, 2]);
    assert_eq!(host(r[0].clone()), [1., 1.]);
    assert_eq!(r[1].dims(), [3, 2]);
    assert_eq!(host(r[1].clone()), [2., 2., 3., 3., 9., 9.]);
}

#[test]
#[serial]
fn broadcast_gather_scatter_and_all_to_all_on_ascend() {
    movement_cases::<Ascend>("broadcast_gather_scatter_and_all_to_all_on_ascend");
}

#[test]
#[serial]
fn broadcast_gather_scatter_and_all_to_all_on_fusion_ascend() {
    movement_cases::<Fusion<Ascend>>("broadcast_gather_scatter_and_all_to_all_on_fusion_ascend");
}

#[test]
#[serial]
fn send_and_receive_between_two_npus() {
    let Some((d, comm)) = pair("send_and_receive_between_two_npus") else {
        return;
    };
    let x = floats::<Ascend>(&[1.5, -2.0, 3.0, 0.25], [2, 2], &d[0]).transpose();
    let prim = x.clone().into_primitive().tensor();
    burn_ascend::ops::collective::send(&comm, &prim, 1).unwrap();
    let got = burn_ascend::ops::collective::recv(&comm, &d[1].into(), vec![2, 2], prim.dtype(), 0)
        .unwrap();
    let got = Tensor::<Ascend, 2>::from_primitive(burn::tensor::TensorPrimitive::Float(got.into()));
    assert_eq!(got.device(), d[1]);
    assert_eq!(host(got), host(x));
}

fn message(f: impl FnOnce()) -> String {
    let p =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("the call must fail");
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

#[test]
#[serial]
fn bad_collectives_fail_with_the_op_shapes_and_reason() {
    let Some((d, comm)) = pair("bad_collectives_fail_with_the_op_shapes_and_reason") else {
        return;
    };
    // Atlas A2's HCCL does not reduce f64.
    let c = comm.clone();
    let m = message(move || {
        let t = |dev| Tensor::<Ascend, 1>::zeros([4], dev).cast(DType::F64);
        collective::all_reduce(&c, vec![t(&d[0]), t(&d[1])], Reduce::Sum);
    });
    assert!(
        m.contains("all_reduce") && m.contains("[4] DT_DOUBLE") && m.contains("HCCL_E_NOT_SUPPORT"),
        "{m}"
    );
    let c = comm.clone();
    let m = message(move || {
        collective::all_reduce(
            &c,
            vec![
                Tensor::<Ascend, 1>::zeros([4], &d[0]),
                Tensor::<Ascend, 1>::zeros([5], &d[1]),
            ],
            Reduce::Sum,
        );
    });
    assert!(
        m.contains("same shape and dtype") && m.contains("[5] DT_FLOAT"),
        "{m}"
    );
    let c = comm.clone();
    let m = message(move || {
        collective::all_reduce(
            &c,
            vec![
                Tensor::<Ascend, 1>::zeros([4], &d[0]),
                Tensor::<Ascend, 1>::zeros([4], &d[0]),
            ],
            Reduce::Sum,
        );
    });
    assert!(m.contains("two tensors for the rank on"), "{m}");
    let c = comm.clone();
    let m = message(move || {
        let rows = [vec![1, 0], vec![0, 1]];
        let t = |n, dev| Tensor::<Ascend, 2>::zeros([n, 2], dev);
        collective::all_to_all_v(&c, vec![t(2, &d[0]), t(1, &d[1])], &rows);
    });
    assert!(m.contains("passed 2 rows but the counts send 1"), "{m}");
    let m = match Communicator::local(&[d[0], d[0]]) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a device listed twice must be refused"),
    };
    assert!(m.contains("listed twice"), "{m}");
}

#[test]
#[serial]
fn a_collective_moves_its_bytes_over_the_links_only() {
    if skipped_on_npu("a_collective_moves_its_bytes_over_the_links_only") {
        return;
    }
    let Some((d, comm)) = pair("a_collective_moves_its_bytes_over_the_links_only") else {
        return;
    };
    let x: Vec<_> = d
        .iter()
        .map(|dev| Tensor::<Ascend, 2>::ones([64, 32], dev))
        .collect();
    for dev in &d {
        Ascend::sync(dev).unwrap();
    }
    let (work, links) = (work_counters(), hccl_counters());
    let out = collective::all_reduce(&comm, x, Reduce::Sum);
    for dev in &d {
        Ascend::sync(dev).unwrap();
    }
    let work = work_counters().since(&work);
    let moved = hccl_counters().since(&links).of(Kind::AllReduce);
    // No operator ran: the sum is the collective's, the inputs were already contiguous.
    assert_eq!(work.launches(), 0, "{work:?}");
    assert_eq!(moved.calls, 1);
    // Two-shot all-reduce of 8 KiB on 2 ranks: 2 (N - 1) S bytes cross the links.
    assert_eq!(moved.traffic.link_bytes, 2 * (64 * 32 * 4));
    assert_eq!(moved.traffic.link_bytes, moved.traffic.min_link_bytes);
    assert_eq!(host(out[1].clone()), vec![2.0; 64 * 32]);
}

/// A fault stops its device's collectives as it stops all its work, and the peer left waiting
/// fails after `HCCL_EXEC_TIMEOUT` instead of hanging; the partial issue retires the
/// communicator, whose later use is a clear error, and a new communicator works.
#[test]
#[serial]
fn a_fault_and_a_reset_reach_the_collectives_of_the_device() {
    let test = "a_fault_and_a_reset_reach_the_collectives_of_the_device";
    if skipped_on_npu(test) {
        return;
    }
    let Some((d, _)) = pair(test) else { return };
    assert_eq!(d[1], fault_device());
    // A reset drops the cached communicator: the next one waits 1 s for a missing rank.
    reset_fault_device();
    std::env::set_var("HCCL_EXEC_TIMEOUT", "1");
    let comm = Communicator::local(&d);
    std::env::remove_var("HCCL_EXEC_TIMEOUT");
    let comm = comm.unwrap();
    let x = |dev: &AscendDevice| Tensor::<Ascend, 1>::from_floats([1.0, 2.0], dev);
    let (x0, x1) = (x(&d[0]), x(&d[1]));
    drop(provoke_fault(&d[1]));
    assert!(Ascend::sync(&d[1]).is_err(), "the fault is reported");
    let c = comm.clone();
    let m = message(move || {
        collective::all_reduce(&c, vec![x0, x1], Reduce::Sum);
    });
    assert!(
        m.contains("HcclAllReduce")
            && m.contains("HCCL_E_RUNTIME")
            && m.contains("aclnnInplaceOne kernel")
            && m.contains("partial issue"),
        "{m}"
    );
    // Rank 0's part was queued before rank 1 was refused: it waits out HCCL_EXEC_TIMEOUT,
    // which stops device 0 in turn.
    let e = Ascend::sync(&d[0]).expect_err("rank 0 times out");
    assert!(e.to_string().contains("HCCL_EXEC_TIMEOUT"), "{e}");
    burn_ascend::reset_device(&d[0]).unwrap();
    reset_fault_device();
    let c = comm.clone();
    let m = message(move || {
        collective::all_reduce(&c, vec![x(&d[0]), x(&d[1])], Reduce::Sum);
    });
    assert!(
        m.contains("the communicator was retired") && m.contains("partial issue"),
        "{m}"
    );
    let fresh = Communicator::local(&d).unwrap();
    assert!(!Arc::ptr_eq(&comm, &fresh));
    let out = collective::all_reduce(&fresh, vec![x(&d[0]), x(&d[1])], Reduce::Sum);
    for o in out {
        assert_eq!(host(o), [2.0, 4.0]);
    }
}

/// A collective issued on a capturing stream is refused with HCCL_E_NOT_SUPPORT: A2 supports
/// collectives in ACL graphs, but the emulated HCCL does not model their replay, so it takes the
/// stricter side. The first rank's refusal stops the op before the second rank queues anything.
#[test]
#[serial]
fn a_collective_inside_a_graph_capture_is_refused() {
    let test = "a_collective_inside_a_graph_capture_is_refused";
    if skipped_on_npu(test) {
        return;
    }
    let Some((d, comm)) = pair(test) else { return };
    let (a, b) = (
        floats::<Ascend>(&[1.0; 6], [2, 3], &d[0]),
        floats::<Ascend>(&[2.0; 6], [2, 3], &d[1]),
    );
    let err = burn_ascend::graph::capture(&d[0], || {
        collective::all_reduce(&comm, vec![a.clone(), b.clone()], Reduce::Sum)
    })
    .expect_err("the emulated HCCL refuses a collective under capture")
    .to_string();
    assert!(
        err.contains("HCCL_E_NOT_SUPPORT") && err.contains("inside an ACL graph capture"),
        "{err}"
    );
    // Outside the capture the same collective runs.
    let out = collective::all_reduce(&comm, vec![a, b], Reduce::Sum);
    for o in out {
        assert_eq!(host(o), [3.0; 6]);
    }
}

/// A fresh communicator's first transfer connects its ranks, which on HCCL blocks each issuing
/// thread until every rank has issued its own (hccl-abi.md §6 rule 5): the ranks of one call are
/// issued from their devices' own threads, and later calls may issue one rank at a time from
/// one thread.
#[test]
#[serial]
fn a_new_communicator_issues_each_rank_from_its_own_thread() {
    let test = "a_new_communicator_issues_each_rank_from_its_own_thread";
    let Some((d, _)) = pair(test) else { return };
    // A reset drops the cached communicator, so the next one is new and unconnected.
    reset_fault_device();
    let comm = Communicator::local(&d).unwrap();
    let x = |v: f32, dev: &AscendDevice| Tensor::<Ascend, 1>::from_floats([v, 2.0 * v], dev);
    let out = collective::all_reduce(&comm, vec![x(1.0, &d[0]), x(3.0, &d[1])], Reduce::Sum);
    // One rank per call, both calls from this thread before either result is read.
    let r0 = collective::all_reduce(&comm, vec![x(5.0, &d[0])], Reduce::Max);
    let r1 = collective::all_reduce(&comm, vec![x(-1.0, &d[1])], Reduce::Max);
    for o in out {
        assert_eq!(host(o), [4.0, 8.0]);
    }
    for r in r0.into_iter().chain(r1) {
        assert_eq!(host(r), [5.0, 10.0]);
    }
}

/// A rank refused at issue after another rank of the same transfer was issued (a partial
/// issue): the communicator is retired at once, since every later transfer on it would pair
/// with the wrong one (the ranks' sequences are out of step); the rank issued fails after the
/// execution timeout; a new communicator works.
#[test]
#[serial]
fn a_partial_issue_retires_the_communicator() {
    let test = "a_partial_issue_retires_the_communicator";
    if skipped_on_npu(test) {
        return;
    }
    let Some((d, _)) = pair(test) else { return };
    reset_fault_device();
    std::env::set_var("HCCL_EXEC_TIMEOUT", "1");
    let comm = Communicator::local(&d);
    std::env::remove_var("HCCL_EXEC_TIMEOUT");
    let comm = comm.unwrap();
    let x = |v: f32, dev: &AscendDevice| {
        Tensor::<Ascend, 1>::from_floats([v, 2.0 * v], dev)
            .into_primitive()
            .tensor()
            .into_inner()
    };
    let (x0, x1) = (x(1.0, &d[0]), x(3.0, &d[1]));
    // Rank 1's stream captures a graph, so HCCL refuses rank 1's part (the emulated HCCL does
    // not model collectives in graphs), after rank 0's part was queued.
    let (_graph, refused) = burn_ascend::graph::capture(&d[1], || {
        burn_ascend::ops::collective::all_reduce(&comm, &[x0.clone(), x1.clone()], Reduce::Sum)
    })
    .unwrap();
    let Err(e) = refused else {
        panic!("rank 1 is refused")
    };
    let e = e.to_string();
    assert!(
        e.contains("HCCL_E_NOT_SUPPORT") && e.contains("partial issue") && e.contains("retired"),
        "{e}"
    );
    // The next transfer is refused instead of pairing rank 1's part with rank 0's first one.
    let Err(e) = burn_ascend::ops::collective::all_reduce(&comm, &[x0, x1], Reduce::Sum) else {
        panic!("the communicator is retired")
    };
    let e = e.to_string();
    assert!(e.contains("retired") && e.contains("partial issue"), "{e}");
    let start = Instant::now();
    let e = Ascend::sync(&d[0]).expect_err("rank 0 times out");
    assert!(e.to_string().contains("HCCL_EXEC_TIMEOUT"), "{e}");
    assert!(start.elapsed() < Duration::from_secs(10));
    burn_ascend::reset_device(&d[0]).unwrap();
    let fresh = Communicator::local(&d).unwrap();
    assert!(!Arc::ptr_eq(&comm, &fresh));
    let out = collective::all_reduce(
        &fresh,
        vec![
            Tensor::<Ascend, 1>::from_floats([1.0, 2.0], &d[0]),
            Tensor::<Ascend, 1>::from_floats([3.0, 6.0], &d[1]),
        ],
        Reduce::Sum,
    );
    for o in out {
        assert_eq!(host(o), [4.0, 8.0]);
    }
}

/// The execution timeout: 120 s unless set (HCCL's default of 1836 s would hang an
/// interactive session for half an hour on a rank that never comes), and a value set in code
/// bounds a rank's wait for a peer that never issues its part; the device's next
/// synchronisation fails, and the communicator's asynchronous error retires it.
#[test]
#[serial]
fn the_execution_timeout_is_a_setting_with_an_interactive_default() {
    let test = "the_execution_timeout_is_a_setting_with_an_interactive_default";
    if skipped_on_npu(test) {
        return;
    }
    let Some((d, _)) = pair(test) else { return };
    std::env::remove_var("HCCL_EXEC_TIMEOUT");
    collective::set_exec_timeout(None);
    assert_eq!(collective::exec_timeout(), Some(Duration::from_secs(120)));
    collective::set_exec_timeout(Some(Duration::from_millis(300)));
    assert_eq!(collective::exec_timeout(), Some(Duration::from_secs(1)));
    reset_fault_device();
    let comm = Communicator::local(&d);
    collective::set_exec_timeout(None);
    let comm = comm.unwrap();
    // Rank 0 alone: rank 1 never issues its part.
    let start = Instant::now();
    let out = collective::all_reduce(
        &comm,
        vec![Tensor::<Ascend, 1>::from_floats([1.0], &d[0])],
        Reduce::Sum,
    );
    let e = Ascend::sync(&d[0]).expect_err("rank 0 times out");
    assert!(e.to_string().contains("HCCL_EXEC_TIMEOUT"), "{e}");
    assert!(start.elapsed() < Duration::from_secs(10));
    drop(out);
    let e =
        collective::check_async_errors(&d[0].into()).expect_err("the rank's asynchronous error");
    assert!(e.to_string().contains("HCCL_E_TIMEOUT"), "{e}");
    let c = comm.clone();
    let m = message(move || {
        collective::all_reduce(
            &c,
            vec![Tensor::<Ascend, 1>::from_floats([1.0], &d[1])],
            Reduce::Sum,
        );
    });
    assert!(m.contains("retired"), "{m}");
    burn_ascend::reset_device(&d[0]).unwrap();
}

/// `reset_device` retires the device's communicators before it waits for the device's work: a
/// collective issued while it waits would otherwise be queued on the stream being reset, and
/// lost with it.
#[test]
#[serial]
fn a_collective_issued_during_a_reset_is_refused() {
    let test = "a_collective_issued_during_a_reset_is_refused";
    if skipped_on_npu(test) {
        return;
    }
    let Some((d, _)) = pair(test) else { return };
    reset_fault_device();
    collective::set_exec_timeout(Some(Duration::from_secs(1)));
    let comm = Communicator::local(&d);
    collective::set_exec_timeout(None);
    let comm = comm.unwrap();
    let x = || {
        Tensor::<Ascend, 1>::from_floats([1.0, 2.0], &d[1])
            .into_primitive()
            .tensor()
            .into_inner()
    };
    // Rank 1 alone: its part keeps device 1 busy until the execution timeout.
    let (x1, y1) = (x(), x());
    burn_ascend::ops::collective::all_reduce(&comm, &[x1], Reduce::Sum).unwrap();
    std::thread::scope(|s| {
        let reset = s.spawn(|| burn_ascend::reset_device(&d[1]));
        std::thread::sleep(Duration::from_millis(300));
        let Err(e) = burn_ascend::ops::collective::all_reduce(&comm, &[y1], Reduce::Sum) else {
            panic!("a collective issued while the device is being reset must be refused")
        };
        let e = e.to_string();
        assert!(
            e.contains("is being reset") || e.contains("was reset"),
            "{e}"
        );
        reset.join().unwrap().unwrap();
    });
}

/// Data-parallel training whose replica fails mid-training (its device faults after the first
/// step) ends with an error naming the replica, within the collectives' execution timeout:
/// the other replica waits for it inside a collective on its device until then, instead of
/// half an hour, and no panic escapes.
#[test]
#[serial]
fn data_parallel_training_ends_with_an_error_when_a_replica_fails() {
    use burn_ascend_llm::moe::config::MoeConfig;
    use burn_ascend_llm::moe::corpus;
    use burn_ascend_llm::moe::data_parallel::train_data_parallel;
    use burn_ascend_llm::moe::model::MoeDecoder;
    use burn_ascend_llm::moe::train::TrainConfig;
    type B = burn_autodiff::Autodiff<Ascend>;
    let test = "data_parallel_training_ends_with_an_error_when_a_replica_fails";
    if skipped_on_npu(test) {
        return;
    }
    let Some((d, _)) = pair(test) else { return };
    // A new communicator, whose ranks wait 1 s for a peer.
    reset_fault_device();
    std::env::set_var("HCCL_EXEC_TIMEOUT", "1");
    let cfg = MoeConfig::new()
        .with_hidden(32)
        .with_layers(1)
        .with_q_heads(2)
        .with_kv_heads(1)
        .with_experts(2)
        .with_top_k(1)
        .with_expert_hidden(32)
        .with_max_seq(16);
    let train_cfg = TrainConfig {
        steps: 3,
        batch: 2,
        seq_len: 8,
        learning_rate: 1e-2,
        aux_weight: 0.01,
    };
    let model = MoeDecoder::<B>::new(&cfg, &d[0]).expect("a valid config");
    let start = Instant::now();
    let trained = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        train_data_parallel(model, &corpus::tokens(), &train_cfg, &d, |r| {
            if r.step == 1 {
                drop(provoke_fault(&d[1]));
            }
        })
    }));
    std::env::remove_var("HCCL_EXEC_TIMEOUT");
    let trained = trained.expect("no panic escapes the training");
    let Err(e) = trained else {
        panic!("training on a faulted NPU must fail")
    };
    assert!(e.contains("replica 1's step failed"), "{e}");
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "{:?}",
        start.elapsed()
    );
    burn_ascend::reset_device(&d[0]).unwrap();
    reset_fault_device();
}
