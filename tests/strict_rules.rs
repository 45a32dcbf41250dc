//! Rules the emulated NPU enforces where real-NPU bugs hide, through the backend: object
//! lifetimes across the two aclnn phases, the arrays nnopbase hands back, sticky device faults
//! and device reset, page-locked staging of uploads, configuration errors, and the bugs these
//! rules exposed in the op mapping (each test here failed before its fix).

mod common;

use burn::tensor::{Bool, Tensor, TensorData};
use burn_ascend::acl::aclnn;
use burn_ascend::acl::handles::TensorDesc;
use burn_ascend::acl::view_dims::live_arrays;
use burn_ascend::acl::DataType;
use burn_ascend::ops::AscendTensor;
use burn_ascend::runtime::DeviceContext;
use common::*;
use serial_test::serial;

/// `linear` with a bias is one aclnnAddmm whose two `aclScalar`s (alpha, beta) must live until
/// phase two: the op mapping used to destroy them right after phase one.
#[test]
fn linear_with_a_bias_keeps_its_scalars_alive_until_phase_two() {
    let device = device();
    let x = Tensor::<Ascend, 2>::from_floats([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], &device);
    let w = Tensor::<Ascend, 2>::from_floats([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], &device);
    let b = Tensor::<Ascend, 1>::from_floats([0.5, -0.5], &device);
    let y = burn::tensor::module::linear(x, w, Some(b));
    y.into_data()
        .assert_eq(&TensorData::from([[4.5, 4.5], [10.5, 10.5]]), false);
}

/// The array `aclGetViewShape` returns is the caller's to free (acl-abi.md 6.2): `argwhere`
/// used to leak it.
#[test]
#[serial(view_arrays)]
fn argwhere_frees_the_array_nnopbase_returns() {
    if skipped_on_npu("argwhere_frees_the_array_nnopbase_returns") {
        return;
    }
    let device = device();
    let mask = Tensor::<Ascend, 2, Bool>::from_bool(
        TensorData::from([[true, false, true], [false, false, true]]),
        &device,
    );
    let before = live_arrays();
    let found = mask.argwhere();
    assert_eq!(live_arrays(), before, "the view-shape array was not freed");
    found
        .into_data()
        .assert_eq(&TensorData::from([[0i64, 0], [0, 2], [1, 2]]), false);
}

/// A fault is sticky: no output of the faulting op, nor of anything queued after it, ever reads
/// back as Ok, on any thread, and each failure names the original fault. A reset brings the
/// device back: tensors of the old context fail clearly, new work runs.
#[test]
#[serial(fault_device)]
fn a_device_fault_is_sticky_until_the_device_is_reset() {
    if skipped_on_npu("a_device_fault_is_sticky_until_the_device_is_reset") {
        return;
    }
    reset_fault_device();
    let device = fault_device();
    let before = Tensor::<Ascend, 1>::from_floats([1.0, 2.0], &device);
    let old = Tensor::<Ascend, 1>::from_floats([5.0], &device);
    let faulting = provoke_fault(&device);
    // Work after the fault fails at its launch or at its read, whichever the device reaches
    // first: either way it never reads back as Ok.
    let after = before.clone();
    for (what, read) in [
        (
            "the faulting op's output",
            Box::new(move || drop(burn_ascend::ops::creation::to_bytes(&faulting).unwrap()))
                as Box<dyn FnOnce()>,
        ),
        (
            "work after the fault",
            Box::new(move || drop((after * 3.0).into_data())),
        ),
    ] {
        let text = panic_message(read);
        assert!(
            text.contains("aclnnInplaceOne kernel") && text.contains("out-of-bounds"),
            "{what}: {text}"
        );
    }
    let on_another_thread =
        std::thread::spawn(move || panic_message(move || drop(before.into_data())))
            .join()
            .unwrap();
    assert!(
        on_another_thread.contains("aclnnInplaceOne kernel"),
        "another thread's read names the original fault: {on_another_thread}"
    );

    burn_ascend::reset_device(&device).unwrap();
    let text = panic_message(move || drop((old + 1.0).into_data()));
    assert!(text.contains("was reset after a fault"), "{text}");
    let fresh = Tensor::<Ascend, 1>::from_floats([1.0, 2.0], &device) * 3.0;
    fresh
        .into_data()
        .assert_eq(&TensorData::from([3.0f32, 6.0]), false);
    reset_fault_device();
}

/// Uploads go through the page-locked staging ring: larger than the ring, many at once, mixed
/// with work on the stream, they arrive intact.
#[test]
fn uploads_larger_than_the_staging_ring_arrive_intact() {
    let device = device();
    let big: Vec<f32> = (0..5_000_000).map(|i| (i % 9973) as f32).collect();
    let tensors: Vec<Tensor<Ascend, 1>> = (0..4)
        .map(|k| Tensor::<Ascend, 1>::from_floats(&big[k * 1000..], &device) + k as f32)
        .collect();
    for (k, t) in tensors.into_iter().enumerate() {
        let got: Vec<f32> = t.into_data().to_vec().unwrap();
        assert_eq!(got.len(), big.len() - k * 1000);
        assert!(
            got.iter()
                .zip(&big[k * 1000..])
                .all(|(g, w)| *g == w + k as f32),
            "upload {k} arrived changed"
        );
    }
}

const CHILD_ENV_TEST: &str = "child_reads_a_bad_emulator_variable";

#[test]
#[ignore = "run by a_configuration_variable_that_does_not_parse_is_an_error_naming_it"]
fn child_reads_a_bad_emulator_variable() {
    let text = panic_message(|| drop(Tensor::<Ascend, 1>::zeros([4], &AscendDevice::Emulated(0))));
    println!("CHILD SAW: {text}");
}

/// A configuration variable that does not parse is an error naming it, not silently ignored.
#[test]
fn a_configuration_variable_that_does_not_parse_is_an_error_naming_it() {
    if skipped_on_npu("a_configuration_variable_that_does_not_parse_is_an_error_naming_it") {
        return;
    }
    for (var, value, message) in [
        (
            "BURN_ASCEND_EMU_HBM_MIB",
            "64MiB",
            "BURN_ASCEND_EMU_HBM_MIB=\"64MiB\" is not a valid HBM capacity",
        ),
        (
            "BURN_ASCEND_EMU_DEVICES",
            "two",
            "BURN_ASCEND_EMU_DEVICES=\"two\" is not a valid number of emulated NPUs",
        ),
        (
            "BURN_ASCEND_EMU_THREADS",
            "0",
            "BURN_ASCEND_EMU_THREADS=\"0\" is not a valid host thread count",
        ),
        (
            "ASCEND_LAUNCH_BLOCKING",
            "yes",
            "ASCEND_LAUNCH_BLOCKING=\"yes\" is not understood: use 1 or 0",
        ),
    ] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", CHILD_ENV_TEST, "--nocapture"])
            .env(var, value)
            .output()
            .expect("the test binary runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("CHILD SAW:") && stdout.contains(message),
            "{var}={value}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// An element count or byte size past the address space is an error naming the shape (it
/// used to wrap to 0, and the sum of a [2^32, 2^32] tensor was 0).
#[test]
fn a_shape_too_large_to_address_is_an_error() {
    let text = panic_message(|| {
        drop(Tensor::<Ascend, 2>::zeros(
            [1usize << 32, 1usize << 32],
            &device(),
        ))
    });
    assert!(
        text.contains("[4294967296, 4294967296]")
            && text.contains("more bytes than an address space can"),
        "{text}"
    );
}

/// Every op, and every fused op, takes operands of one device: mixing devices is a clear error
/// naming both, raised before anything runs. Serial with the faulting tests: the second device
/// is theirs, and one of them resetting it mid-test would lose this test's tensors there.
#[test]
#[serial(fault_device)]
fn operands_on_two_devices_are_a_clear_error_naming_both() {
    let (here, there) = (device(), second_device());
    if here == there {
        eprintln!("operands_on_two_devices_are_a_clear_error_naming_both: needs two devices");
        return;
    }
    let a = Tensor::<Ascend, 1>::from_floats([1.0, 2.0], &here);
    let b = Tensor::<Ascend, 1>::from_floats([3.0, 4.0], &there);
    // Burn's tensor API checks some ops itself; the backend checks every op it is given.
    let prim = |t: &Tensor<Ascend, 1>| t.clone().into_primitive().tensor();
    let text = panic_message(|| {
        use burn::tensor::ops::FloatTensorOps;
        drop(Ascend::float_add(prim(&a), prim(&b)))
    });
    assert!(
        text.contains("aclnnAdd")
            && text.contains(&format!("lives on {there}"))
            && text.contains(&format!("runs on {here}")),
        "{text}"
    );
    let x = Tensor::<Ascend, 2>::from_floats([[1.0, 2.0], [3.0, 4.0]], &here);
    let indices = Tensor::<Ascend, 1, burn::tensor::Int>::from_data(
        TensorData::from([1i32, 0]),
        (&there, burn::tensor::DType::I32),
    );
    let text = panic_message(|| drop(burn_ascend::fused::moe_gather(x, indices, 1)));
    assert!(
        text.contains("moe_gather")
            && text.contains("different devices")
            && text.contains(&here.to_string())
            && text.contains(&there.to_string()),
        "{text}"
    );
    // Moved first, the same op runs.
    (a + b.to_device(&here))
        .into_data()
        .assert_eq(&TensorData::from([4.0f32, 6.0]), false);
}

/// Below the backend's check, the emulated device itself refuses an operator that reaches
/// another NPU's memory: an AI Core error naming both NPUs.
#[test]
#[serial(fault_device)]
fn an_operator_reaching_another_npus_memory_faults_on_the_device() {
    if skipped_on_npu("an_operator_reaching_another_npus_memory_faults_on_the_device") {
        return;
    }
    reset_fault_device();
    let (runs_on, holds) = (fault_device(), device());
    let foreign = AscendTensor::empty(
        &DeviceContext::get(&holds.into()).unwrap(),
        vec![64],
        DataType::F32,
    )
    .unwrap();
    let ctx = DeviceContext::get(&runs_on.into()).unwrap();
    // A descriptor built by hand carries no owner, so only the device can notice.
    // SAFETY: a live allocation of 64 floats (of the other device, on purpose).
    let desc = unsafe {
        TensorDesc::new(
            ctx.bind(),
            &[64],
            &[1],
            0,
            DataType::F32,
            64,
            foreign.storage_ptr(),
        )
    }
    .unwrap();
    aclnn!(&*ctx, aclnnInplaceZero(&desc)).expect("the launch itself is queued");
    let err = ctx
        .synchronize()
        .expect_err("the kernel reaches another NPU")
        .to_string();
    assert!(
        err.contains("aclnnInplaceZero kernel")
            && err.contains(&format!(
                "is memory of NPU {}, but the kernel runs on NPU {}",
                holds.index(),
                runs_on.index()
            )),
        "{err}"
    );
    reset_fault_device();
}

/// Integer division by zero. By a scalar: an argument error at the call, as burn-flex fails
/// (it panics); by a tensor holding a zero: CANN leaves the result undefined, and the emulated
/// NPU stops with an AI Core error naming the element (the stricter choice). Both used to give
/// 0.
#[test]
#[serial(fault_device)]
fn integer_division_by_zero_is_an_error() {
    use burn::tensor::Int;
    use burn_ascend::{try_run, AscendError};

    let ints = |v: [i32; 3], d: &burn_ascend::AscendDevice| {
        Tensor::<Ascend, 1, Int>::from_data(TensorData::from(v), d)
    };
    let x = || ints([5, 0, -5], &device());
    let flex = std::panic::catch_unwind(|| {
        Tensor::<Flex, 1, Int>::from_data(TensorData::from([5, 0, -5]), &Default::default())
            .div_scalar(0)
            .into_data()
    });
    assert!(
        flex.is_err(),
        "burn-flex fails on an integer division by zero"
    );
    for (what, result) in [
        ("div_scalar", try_run(|| x().div_scalar(0).into_data())),
        (
            "remainder_scalar",
            try_run(|| x().remainder_scalar(0).into_data()),
        ),
    ] {
        match result {
            Err(AscendError::InvalidArgument { message, .. }) => assert!(
                message.contains("integer division of [3] DT_INT32 by zero"),
                "{what}: {message}"
            ),
            other => panic!("{what}: expected an argument error, got {other:?}"),
        }
    }
    // Non-zero divisors still truncate as burn-flex does.
    assert_eq!(
        x().div_scalar(-2).into_data().to_vec::<i32>().unwrap(),
        [-2, 0, 2]
    );
    if skipped_on_npu("integer_division_by_zero_is_an_error (tensor divisor)") {
        return;
    }
    let d = fault_device();
    let got = try_run(|| ints([5, 0, -5], &d).div(ints([1, 0, 1], &d)).into_data());
    reset_fault_device();
    match got {
        Err(AscendError::DeviceFault { message, .. }) => assert!(
            message.contains("aclnnDivMod kernel: integer division by zero (other[1] = 0)"),
            "{message}"
        ),
        other => panic!("expected a device fault, got {other:?}"),
    }
}
