//! `ASCEND_LAUNCH_BLOCKING=1` synchronises after every operator, so an asynchronous device
//! error surfaces at the operator that caused it, with the operator named; and graph capture,
//! which forbids synchronising, is refused, saying why.
//!
//! This file holds a single test because the variable is read when the device context is
//! created, once per process.

mod common;

use burn_ascend::acl::aclnn;
use burn_ascend::acl::handles::TensorDesc;
use burn_ascend::acl::types::status::ACL_ERROR_RT_AICORE_EXCEPTION;
use burn_ascend::acl::DataType;
use burn_ascend::ops::AscendTensor;
use burn_ascend::runtime::context::ENV_LAUNCH_BLOCKING;
use burn_ascend::runtime::DeviceContext;
use burn_ascend::AscendDevice;

#[test]
fn a_faulting_kernel_fails_its_own_launch() {
    if common::skipped_on_npu("a_faulting_kernel_fails_its_own_launch") {
        return;
    }
    std::env::set_var(ENV_LAUNCH_BLOCKING, "1");
    let ctx = DeviceContext::get(&AscendDevice::Emulated(0).into()).unwrap();
    let t = AscendTensor::empty(&ctx, vec![64], DataType::F32).unwrap();
    // SAFETY: deliberately larger than the allocation; the emulated device checks the access.
    let oversized = unsafe {
        TensorDesc::new(
            ctx.bind(),
            &[1024],
            &[1],
            0,
            DataType::F32,
            1024,
            t.storage_ptr(),
        )
    }
    .unwrap();
    let err = aclnn!(&*ctx, aclnnInplaceZero(&oversized))
        .expect_err("the launch itself reports the fault in blocking mode");
    assert_eq!(err.code(), Some(ACL_ERROR_RT_AICORE_EXCEPTION));
    assert!(err.to_string().contains("aclnnInplaceZero kernel"), "{err}");
    // The fault is sticky: the device context stays stopped, naming it, until it is reset.
    let again = ctx
        .synchronize()
        .expect_err("a faulted device stays faulted");
    assert!(
        again.to_string().contains("aclnnInplaceZero kernel"),
        "{again}"
    );
    burn_ascend::reset_device(&AscendDevice::Emulated(0)).unwrap();
    let fresh = DeviceContext::get(&AscendDevice::Emulated(0).into()).unwrap();
    let zeros = burn_ascend::ops::creation::zeros(&fresh, vec![64], DataType::F32).unwrap();
    let bytes =
        burn_ascend::ops::creation::to_bytes(&zeros).expect("the reset device runs new work");
    assert_eq!(bytes, vec![0u8; 256]);
    // The old context's tensor is gone with it, and says so.
    let stale = burn_ascend::ops::creation::to_bytes(&t).expect_err("a tensor of the old context");
    assert!(
        stale.to_string().contains("was reset after a fault"),
        "{stale}"
    );
    // A synchronisation after every op is what a graph capture forbids: no capture, saying why.
    let why = burn_ascend::graph::supported(&AscendDevice::Emulated(0)).unwrap_err();
    assert!(why.contains(ENV_LAUNCH_BLOCKING), "{why}");
    let err = burn_ascend::graph::capture(&AscendDevice::Emulated(0), || ()).unwrap_err();
    assert!(err.to_string().contains(ENV_LAUNCH_BLOCKING), "{err}");
}
