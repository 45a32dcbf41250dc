//! Errors a program can handle: `burn_ascend::try_run` returns the typed `AscendError` of a
//! failing op (out of memory, device fault, bad argument, lost device) instead of the panic, on
//! `Ascend` and on `Fusion<Ascend>`, and other panics keep unwinding. Fused ops on
//! `Fusion<Ascend>` check their contract when recorded: a bad call fails at its call site with
//! the op's message, and the thread's later Fusion ops still run.

mod common;

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Int, Tensor, TensorData, Tolerance};
use burn_ascend::fused;
use burn_ascend::{try_run, Ascend, AscendError};
use burn_ascend_suite::host_values::host_values;
use burn_fusion::Fusion;
use common::{device, fault_device, reset_fault_device, Flex};
use serial_test::serial;

type Fused = Fusion<Ascend>;

fn rows<B: Backend>(device: &B::Device) -> Tensor<B, 2> {
    Tensor::from_data(host_values(vec![4, 16], 1), device)
}

fn indices<B: Backend>(v: &[i32], device: &B::Device) -> Tensor<B, 1, Int> {
    Tensor::from_data(
        TensorData::new(v.to_vec(), [v.len()]).convert_dtype(DType::I32),
        (device, DType::I32),
    )
}

#[test]
fn out_of_memory_is_a_value_with_its_sizes() {
    // 1 TiB: more than any Atlas A2 (64 GB of HBM), emulated or real.
    let bytes = 1usize << 40;
    let err = try_run(|| Tensor::<Ascend, 1>::empty([bytes / 4], &device()))
        .expect_err("1 TiB does not fit");
    let AscendError::OutOfMemory {
        requested,
        capacity,
        ref message,
        ..
    } = err
    else {
        panic!("expected OutOfMemory, got {err:?}");
    };
    assert_eq!(requested, bytes);
    assert!(capacity > 0 && capacity < bytes, "capacity {capacity}");
    assert!(
        message.contains(&format!("allocating {bytes} bytes")),
        "{message}"
    );
    // The panic text is the error's: what a program without try_run sees.
    assert!(err.to_string().starts_with("burn-ascend: "), "{err}");
    // The device still serves.
    let x = Tensor::<Ascend, 1>::from_floats([1.0, 2.0], &device());
    assert_eq!((x + 1.0).into_data().to_vec::<f32>().unwrap(), [2.0, 3.0]);
}

#[test]
#[serial(fault_device)]
fn a_kernel_fault_is_a_device_fault_then_a_reset_serves_again() {
    for fusion in [false, true] {
        let bad = [0, 1, -3, 2, 4, 5, 6, 7];
        let err = if fusion {
            try_run(|| {
                fused::moe_gather(
                    rows::<Fused>(&fault_device()),
                    indices::<Fused>(&bad, &fault_device()),
                    2,
                )
                .into_data()
            })
        } else {
            try_run(|| {
                fused::moe_gather(
                    rows::<Ascend>(&fault_device()),
                    indices::<Ascend>(&bad, &fault_device()),
                    2,
                )
                .into_data()
            })
        }
        .expect_err("an index outside [0, 8) faults");
        reset_fault_device();
        let AscendError::DeviceFault { ref message, .. } = err else {
            panic!("fusion {fusion}: expected DeviceFault, got {err:?}");
        };
        if !common::skipped_on_npu("a_kernel_fault_is_a_device_fault_then_a_reset_serves_again") {
            assert!(
                message.contains("moe_gather: indices[2] = -3 is outside [0, 8)"),
                "fusion {fusion}: {message}"
            );
        }
    }
    // After the reset, the same op with good indices gives the composed reference.
    let good = [7, 0, 6, 1, 5, 2, 4, 3];
    let got = fused::moe_gather(
        rows::<Ascend>(&fault_device()),
        indices::<Ascend>(&good, &fault_device()),
        2,
    )
    .into_data();
    let flex = Default::default();
    let want = fused::moe_gather(rows::<Flex>(&flex), indices::<Flex>(&good, &flex), 2).into_data();
    got.assert_approx_eq::<f32>(&want, Tolerance::absolute(0.0));
}

/// Every thread that works on a device binds it (`aclrtSetDevice`), and CANN destroys the
/// context only once as many `aclrtResetDevice` calls balance them (acl-abi.md §3.1, emulated
/// strictly): `reset_device` must reset the faulted device however many threads used it.
fn fault_used_from_threads_then_reset() {
    let _faulted = common::provoke_fault(&fault_device());
    let workers: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(|| {
                try_run(|| (Tensor::<Ascend, 1>::ones([8], &fault_device()) + 1.0).into_data())
            })
        })
        .collect();
    for w in workers {
        let err = w.join().unwrap().expect_err("the device has faulted");
        assert!(matches!(err, AscendError::DeviceFault { .. }), "{err:?}");
    }
    reset_fault_device();
    let x = Tensor::<Ascend, 1>::from_floats([1.0, 2.0], &fault_device());
    let sum = std::thread::spawn(|| {
        (Tensor::<Ascend, 1>::from_floats([3.0], &fault_device()) * 2.0)
            .into_data()
            .to_vec::<f32>()
            .unwrap()
    });
    assert_eq!((x + 1.0).into_data().to_vec::<f32>().unwrap(), [2.0, 3.0]);
    assert_eq!(sum.join().unwrap(), [6.0]);
}

#[test]
#[serial(fault_device)]
fn a_device_used_from_several_threads_resets_after_a_fault() {
    fault_used_from_threads_then_reset();
}

/// The same on a CANN without `aclrtResetDeviceForce` (8.0, emulated in a child process): the
/// reset balances each binding its context made.
#[test]
fn on_cann_8_0_a_reset_balances_every_binding() {
    if common::skipped_on_npu("on_cann_8_0_a_reset_balances_every_binding") {
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "reset_on_cann_8_0", "--ignored", "--nocapture"])
        .env(burn_ascend::emulator::ENV_CANN, "8.0.0")
        .output()
        .expect("the test binary starts");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("1 passed"), "{stdout}\n{stderr}");
}

/// The child of [`on_cann_8_0_a_reset_balances_every_binding`].
#[test]
#[ignore = "run by on_cann_8_0_a_reset_balances_every_binding in a process emulating CANN 8.0"]
fn reset_on_cann_8_0() {
    assert_eq!(
        std::env::var(burn_ascend::emulator::ENV_CANN).as_deref(),
        Ok("8.0.0"),
        "started by on_cann_8_0_a_reset_balances_every_binding"
    );
    let api = burn_ascend::runtime::AscendDevice::from(fault_device())
        .api()
        .unwrap();
    assert!(api.optional.aclrtResetDeviceForce.is_none());
    fault_used_from_threads_then_reset();
}

/// On `Fusion<Ascend>` the fault is found on burn-fusion's device thread, in whichever of its
/// tasks reaches it: every time, the caller gets the typed error naming the kernel (not
/// burn-fusion's bare `CallError`), and after the reset the device reads again.
#[test]
#[serial(fault_device)]
fn on_fusion_every_kernel_fault_is_typed_and_a_reset_device_reads_again() {
    let bad = [0, 1, -3, 2, 4, 5, 6, 7];
    let good = [7, 0, 6, 1, 5, 2, 4, 3];
    let flex = Default::default();
    let want = fused::moe_gather(rows::<Flex>(&flex), indices::<Flex>(&good, &flex), 2)
        .into_data()
        .to_vec::<f32>()
        .unwrap();
    for round in 0..20 {
        let err = try_run(|| {
            let y = fused::moe_gather(
                rows::<Fused>(&fault_device()),
                indices::<Fused>(&bad, &fault_device()),
                2,
            );
            // Later work of the same stream, queued behind the fault, then a read.
            (y * 2.0 + 1.0).sum().into_data()
        })
        .expect_err("an index outside [0, 8) faults");
        reset_fault_device();
        let AscendError::DeviceFault { ref message, .. } = err else {
            panic!("round {round}: expected DeviceFault, got {err:?}");
        };
        if !common::skipped_on_npu("on_fusion_every_kernel_fault_is_typed") {
            assert!(
                message.contains("moe_gather: indices[2] = -3 is outside [0, 8)"),
                "round {round}: {message}"
            );
        }
        let got = try_run(|| {
            fused::moe_gather(
                rows::<Fused>(&fault_device()),
                indices::<Fused>(&good, &fault_device()),
                2,
            )
            .into_data()
        })
        .unwrap_or_else(|e| panic!("round {round}: after the reset: {e:?}"));
        assert_eq!(got.to_vec::<f32>().unwrap(), want, "round {round}");
    }
}

/// The probe of the issue: a moe_gather whose indices have the wrong length.
#[test]
fn a_bad_fused_call_fails_at_its_call_site_on_ascend_and_on_fusion() {
    let want = "indices must be [8] int32, got [5] DT_INT32";
    let on_ascend = try_run(|| {
        fused::moe_gather(
            rows::<Ascend>(&device()),
            indices::<Ascend>(&[0, 1, 2, 3, 4], &device()),
            2,
        )
    })
    .expect_err("5 indices for 4 tokens x 2");
    // On Fusion the error comes from recording the op, before anything runs.
    let on_fusion = try_run(|| {
        fused::moe_gather(
            rows::<Fused>(&device()),
            indices::<Fused>(&[0, 1, 2, 3, 4], &device()),
            2,
        )
    })
    .expect_err("5 indices for 4 tokens x 2");
    for err in [&on_ascend, &on_fusion] {
        match err {
            AscendError::InvalidArgument { op, message } => {
                assert_eq!(op, "moe_gather");
                assert!(message.contains(want), "{message}");
            }
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }
    assert_eq!(on_ascend, on_fusion, "one contract, one message");
    // The thread's later Fusion ops run.
    let x = Tensor::<Fused, 1>::from_floats([1.0, 2.0, 3.0], &device());
    assert_eq!(
        (x * 2.0).into_data().to_vec::<f32>().unwrap(),
        [2.0, 4.0, 6.0]
    );
}

#[test]
fn every_fused_contract_is_checked_when_recorded_on_fusion() {
    let d = device();
    let f = |shape: Vec<usize>| Tensor::<Fused, 2>::from_data(host_values(shape, 2), &d);
    // ((op, message), a call breaking its contract)
    type Case<'a> = ((&'static str, &'static str), Box<dyn FnOnce() + 'a>);
    let cases: Vec<Case> = vec![
        (
            ("layer_norm", "gamma must be [16], got [8] DT_FLOAT"),
            Box::new(|| {
                let g = Tensor::<Fused, 1>::from_data(host_values(vec![8], 3), &d);
                let _ = fused::layer_norm(f(vec![4, 16]), Some(g), None, 1e-5);
            }),
        ),
        (
            (
                "moe_scatter",
                "y must be [T*K, H] with K = 3 >= 1, got [8, 16] DT_FLOAT",
            ),
            Box::new(|| {
                let _ = fused::moe_scatter(f(vec![8, 16]), indices::<Fused>(&[0; 8], &d), None, 3);
            }),
        ),
        (
            (
                "token_rearrange",
                "perm must be [4] int32 or int64, got [3] DT_INT32",
            ),
            Box::new(|| {
                let _ = fused::token_rearrange(f(vec![4, 16]), indices::<Fused>(&[0, 1, 2], &d));
            }),
        ),
        (
            (
                "grouped_matmul",
                "needs x [R, K] and weights [E, K, N], got [4, 16] DT_FLOAT and [2, 8, 4] DT_FLOAT",
            ),
            Box::new(|| {
                let w = Tensor::<Fused, 3>::from_data(host_values(vec![2, 8, 4], 4), &d);
                let _ = fused::grouped_matmul(f(vec![4, 16]), w, indices::<Fused>(&[2, 2], &d));
            }),
        ),
    ];
    for ((op, want), call) in cases {
        let err = try_run(call).expect_err(want);
        assert!(
            matches!(&err, AscendError::InvalidArgument { op: o, message } if o == op && message.contains(want)),
            "want {op}: {want:?}, got {err:?}"
        );
    }
}

#[test]
#[serial(fault_device)]
fn a_tensor_of_a_reset_device_is_device_lost() {
    let x = Tensor::<Ascend, 1>::from_floats([1.0, 2.0], &fault_device());
    reset_fault_device();
    let err = try_run(|| (x + 1.0).into_data()).expect_err("its context is gone");
    assert!(
        matches!(err, AscendError::DeviceLost { .. }),
        "expected DeviceLost, got {err:?}"
    );
    assert!(err.to_string().contains("was reset"), "{err}");
}

/// On `Fusion<Ascend>` the op on the stale tensor runs on burn-fusion's device thread: it
/// reports `DeviceLost` at the read, and the device's later Fusion work still runs.
#[test]
#[serial(fault_device)]
fn on_fusion_a_tensor_of_a_reset_device_is_device_lost_and_new_work_runs() {
    let x = Tensor::<Fused, 1>::from_floats([1.0, 2.0], &fault_device());
    reset_fault_device();
    let err = try_run(|| (x + 1.0).into_data()).expect_err("its context is gone");
    assert!(
        matches!(err, AscendError::DeviceLost { .. }),
        "expected DeviceLost, got {err:?}"
    );
    let y = Tensor::<Fused, 1>::from_floats([1.0, 2.0], &fault_device());
    let got = try_run(|| (y * 3.0).into_data()).unwrap_or_else(|e| panic!("new work: {e:?}"));
    assert_eq!(got.to_vec::<f32>().unwrap(), [3.0, 6.0]);
}

#[test]
fn burn_argument_checks_are_invalid_arguments_and_other_panics_unwind() {
    let a = Tensor::<Ascend, 2>::ones([2, 3], &device());
    let b = Tensor::<Ascend, 2>::ones([4, 5], &device());
    let err = try_run(|| a.matmul(b)).expect_err("[2, 3] @ [4, 5]");
    assert!(
        matches!(&err, AscendError::InvalidArgument { op, .. } if op == "Matmul"),
        "{err:?}"
    );
    let payload = std::panic::catch_unwind(|| try_run(|| panic!("a bug in the caller")))
        .expect_err("the caller's own panic is not the backend's error");
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"a bug in the caller"));
}
