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
use burn_ascend::runtime::DeviceContext;
use burn_ascend::AscendTensor;
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

/// Launches a kernel that writes past its tensor on `device` (a descriptor claiming more
/// storage than was allocated), so the device faults when the stream reaches it.
fn provoke_fault(device: &AscendDevice) -> AscendTensor {
    let ctx = DeviceContext::get(device).unwrap();
    let t = AscendTensor::empty(&ctx, vec![64], DataType::F32).unwrap();
    // SAFETY: deliberately larger than the allocation; the emulated device checks the access.
    let lie = unsafe {
        TensorDesc::new(
            ctx.bind(),
            &[4096],
            &[1],
            0,
            DataType::F32,
            4096,
            t.storage_ptr(),
        )
    }
    .unwrap();
    aclnn!(&*ctx, aclnnInplaceOne(&lie)).expect("the launch itself is queued");
    t
}

fn panic_text(f: impl FnOnce()) -> String {
    let p = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("it fails");
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
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
        let text = panic_text(read);
        assert!(
            text.contains("aclnnInplaceOne kernel") && text.contains("out-of-bounds"),
            "{what}: {text}"
        );
    }
    let on_another_thread =
        std::thread::spawn(move || panic_text(move || drop(before.into_data())))
            .join()
            .unwrap();
    assert!(
        on_another_thread.contains("aclnnInplaceOne kernel"),
        "another thread's read names the original fault: {on_another_thread}"
    );

    burn_ascend::reset_device(&device).unwrap();
    let text = panic_text(move || drop((old + 1.0).into_data()));
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
    let text = panic_text(|| drop(Tensor::<Ascend, 1>::zeros([4], &AscendDevice::Emulated(0))));
    println!("CHILD SAW: {text}");
}

/// A configuration variable that does not parse is an error naming it, not silently ignored.
#[test]
fn a_configuration_variable_that_does_not_parse_is_an_error_naming_it() {
    if skipped_on_npu("a_configuration_variable_that_does_not_parse_is_an_error_naming_it") {
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", CHILD_ENV_TEST, "--nocapture"])
        .env("BURN_ASCEND_EMU_HBM_MIB", "64MiB")
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("CHILD SAW:")
            && stdout.contains("BURN_ASCEND_EMU_HBM_MIB=\"64MiB\" is not a valid HBM capacity"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
