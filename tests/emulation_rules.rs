//! The emulated NPU rejects what the hardware rejects, and each rejection reaches the caller as
//! a clear error with CANN's status code: device memory capacity (with the allocator's
//! release-and-retry), per-op dtype support, contiguity requirements, invalid views, use of
//! freed memory and out-of-bounds access. Every test runs alone (`serial`): the fault tests
//! reset NPU 0, which ends the device context the others are using.

mod common;

use common::panic_message;

use std::sync::Arc;

use burn::tensor::Tensor;
use burn_ascend::acl::aclnn;
use burn_ascend::acl::handles::TensorDesc;
use burn_ascend::acl::types::status::*;
use burn_ascend::acl::types::CUBE_MATH_KEEP_DTYPE;
use burn_ascend::acl::{AclError, DataType};
use burn_ascend::emulator as emulated;
use burn_ascend::ops::AscendTensor;
use burn_ascend::runtime::DeviceContext;
use burn_ascend::{Ascend, AscendDevice};
use serial_test::serial;

const MIB: usize = 1 << 20;

fn ctx(index: usize) -> Arc<DeviceContext> {
    DeviceContext::get(&AscendDevice::Emulated(index).into()).expect("emulated device opens")
}

/// A descriptor built by hand, deliberately wrong in the tests that use it.
fn raw_desc(
    api: &'static burn_ascend::acl::AclApi,
    shape: &[usize],
    strides: &[usize],
    offset: usize,
    dtype: DataType,
    storage_elems: usize,
    base: *mut std::ffi::c_void,
) -> Result<TensorDesc<'static>, AclError> {
    // SAFETY: only the emulated device is used here, which checks every access; the tests
    // assert that it reports these descriptors' misuse.
    unsafe { TensorDesc::new(api, shape, strides, offset, dtype, storage_elems, base) }
}

fn code(e: &AclError) -> i32 {
    e.code().unwrap_or_else(|| panic!("not a call error: {e}"))
}

#[test]
#[serial]
fn out_of_memory_releases_the_cache_retries_then_reports_sizes() {
    if common::skipped_on_npu("out_of_memory_releases_the_cache_retries_then_reports_sizes") {
        return;
    }
    let ctx = ctx(1);
    ctx.release_cache().unwrap();
    emulated::set_device_memory_limit(1, 64 * MIB as u64);

    let big = AscendTensor::empty(&ctx, vec![10 * MIB], DataType::F32).unwrap();
    drop(big); // 40 MiB now cached, not freed
    let before = ctx.memory_stats();
    let held = AscendTensor::empty(&ctx, vec![7 * MIB], DataType::F32)
        .expect("fits once the cache is released");
    let after = ctx.memory_stats();
    assert_eq!(after.cache_flushes, before.cache_flushes + 1);
    assert!(after.device_frees > before.device_frees);

    let err = AscendTensor::empty(&ctx, vec![10 * MIB], DataType::F32)
        .expect_err("40 MiB more does not fit");
    assert_eq!(code(&err), ACL_ERROR_RT_MEMORY_ALLOCATION);
    let text = err.to_string();
    assert!(
        text.contains("out of device memory") && text.contains("allocating 41943040 bytes"),
        "{text}"
    );

    let message = panic_message(|| {
        let _ = Tensor::<Ascend, 1>::zeros([10 * MIB], &AscendDevice::Emulated(1));
    });
    assert!(message.contains("out of device memory"), "{message}");

    drop(held);
    emulated::set_device_memory_limit(1, 64 << 30);
}

/// CANN versions report an exhausted HBM with different statuses (`acl-abi.md` §5.1, §5.2):
/// each one releases the cache and retries, and is a typed out-of-memory error when the retry
/// fails too.
#[test]
#[serial]
fn every_out_of_memory_status_of_cann_releases_the_cache_and_retries() {
    if common::skipped_on_npu("every_out_of_memory_status_of_cann_releases_the_cache_and_retries") {
        return;
    }
    /// Gives NPU 1 back its capacity and default status, even if an assertion failed.
    struct Restore;
    impl Drop for Restore {
        fn drop(&mut self) {
            emulated::set_device_memory_limit(1, 64 << 30);
            emulated::set_out_of_memory_status(1, ACL_ERROR_RT_MEMORY_ALLOCATION);
        }
    }
    let _restore = Restore;
    let ctx = ctx(1);
    for status in [ACL_ERROR_RT_DEVICE_OOM, ACL_ERROR_BAD_ALLOC] {
        ctx.release_cache().unwrap();
        emulated::set_device_memory_limit(1, 64 * MIB as u64);
        emulated::set_out_of_memory_status(1, status);
        drop(AscendTensor::empty(&ctx, vec![10 * MIB], DataType::F32).unwrap());
        let before = ctx.memory_stats();
        let held = AscendTensor::empty(&ctx, vec![7 * MIB], DataType::F32)
            .unwrap_or_else(|e| panic!("status {status}: fits once the cache is released: {e}"));
        assert_eq!(ctx.memory_stats().cache_flushes, before.cache_flushes + 1);

        let err = AscendTensor::empty(&ctx, vec![10 * MIB], DataType::F32)
            .expect_err("40 MiB more does not fit");
        assert_eq!(code(&err), status);
        assert!(
            matches!(err, AclError::OutOfMemory { requested, .. } if requested == 40 * MIB),
            "status {status}: {err}"
        );
        let typed = burn_ascend::try_run(|| {
            Tensor::<Ascend, 1>::zeros([10 * MIB], &AscendDevice::Emulated(1))
        })
        .expect_err("40 MiB more does not fit");
        assert!(
            matches!(typed, burn_ascend::AscendError::OutOfMemory { .. }),
            "status {status}: {typed:?}"
        );
        drop(held);
    }
}

#[test]
#[serial]
fn an_unsupported_dtype_is_rejected_with_the_real_status() {
    if common::skipped_on_npu("an_unsupported_dtype_is_rejected_with_the_real_status") {
        return;
    }
    let ctx = ctx(0);
    let a = AscendTensor::empty(&ctx, vec![2, 2], DataType::I32).unwrap();
    let out = AscendTensor::empty(&ctx, vec![2, 2], DataType::I32).unwrap();
    let err = aclnn!(
        &*ctx,
        aclnnMatmul(
            a.desc().unwrap(),
            a.desc().unwrap(),
            out.desc().unwrap(),
            CUBE_MATH_KEEP_DTYPE
        )
    )
    .expect_err("aclnnMatmul has no integer path on Atlas A2");
    assert_eq!(code(&err), ACLNN_ERR_PARAM_INVALID);
    let text = err.to_string();
    assert!(
        text.contains("aclnnMatmulGetWorkspaceSize") && text.contains("DT_INT32"),
        "{text}"
    );
}

#[test]
#[serial]
fn a_non_contiguous_bool_cast_is_rejected() {
    if common::skipped_on_npu("a_non_contiguous_bool_cast_is_rejected") {
        return;
    }
    let ctx = ctx(0);
    let b = AscendTensor::empty(&ctx, vec![2, 3], DataType::Bool).unwrap();
    let transposed = b.with_layout(b.layout().permute(&[1, 0]));
    let out = AscendTensor::empty(&ctx, vec![3, 2], DataType::F32).unwrap();
    let err = aclnn!(
        &*ctx,
        aclnnCast(
            transposed.desc().unwrap(),
            DataType::F32.acl(),
            out.desc().unwrap()
        )
    )
    .expect_err("aclnnCast needs a contiguous BOOL input");
    assert!(err.to_string().contains("must be contiguous"), "{err}");
}

#[test]
#[serial]
fn invalid_views_are_rejected_by_aclcreatetensor() {
    if common::skipped_on_npu("invalid_views_are_rejected_by_aclcreatetensor") {
        return;
    }
    let ctx = ctx(0);
    let api = ctx.bind();
    let t = AscendTensor::empty(&ctx, vec![16], DataType::F32).unwrap();
    let base = t.storage_ptr();

    let past_storage = raw_desc(api, &[4, 4], &[4, 1], 10, DataType::F32, 16, base)
        .err()
        .expect("view past the storage");
    assert!(
        past_storage.to_string().contains("reaches element 25"),
        "{past_storage}"
    );

    let unaligned = raw_desc(
        api,
        &[2],
        &[1],
        0,
        DataType::F32,
        16,
        (base as usize + 4) as *mut _,
    )
    .err()
    .expect("unaligned base");
    assert!(
        unaligned.to_string().contains("32-byte aligned"),
        "{unaligned}"
    );

    let dims = [4i64];
    let negative = [-1i64];
    let storage = [16i64];
    // SAFETY: valid arrays; a NULL result is the expected rejection.
    let raw = unsafe {
        (api.core.aclCreateTensor)(
            dims.as_ptr(),
            1,
            DataType::F32.acl(),
            negative.as_ptr(),
            3,
            2,
            storage.as_ptr(),
            1,
            base,
        )
    };
    assert!(raw.is_null());
    assert!(api.recent_error_message().contains("negative stride"));
}

#[test]
#[serial]
fn use_of_freed_memory_is_an_ai_core_error_at_synchronisation() {
    if common::skipped_on_npu("use_of_freed_memory_is_an_ai_core_error_at_synchronisation") {
        return;
    }
    let ctx = ctx(0);
    let t = AscendTensor::empty(&ctx, vec![1024], DataType::F32).unwrap();
    let desc = t.desc().unwrap();
    drop(t);
    ctx.release_cache().unwrap();
    aclnn!(&*ctx, aclnnInplaceZero(&desc)).expect("the launch itself is queued");
    let err = ctx
        .synchronize()
        .expect_err("the kernel touches freed memory");
    assert_eq!(code(&err), ACL_ERROR_RT_AICORE_EXCEPTION);
    let text = err.to_string();
    assert!(
        text.contains("aclnnInplaceZero") && text.contains("not live device memory"),
        "{text}"
    );
    let again = ctx
        .synchronize()
        .expect_err("the device stays faulted until reset");
    assert!(again.to_string().contains("aclnnInplaceZero"), "{again}");
    burn_ascend::reset_device(&AscendDevice::Emulated(0)).unwrap();
}

#[test]
#[serial]
fn out_of_bounds_access_is_an_ai_core_error() {
    if common::skipped_on_npu("out_of_bounds_access_is_an_ai_core_error") {
        return;
    }
    let ctx = ctx(0);
    let t = AscendTensor::empty(&ctx, vec![256], DataType::F32).unwrap();
    // A descriptor claiming more storage than was allocated passes aclCreateTensor (which cannot
    // know the allocation) and faults when the kernel runs.
    let lie = raw_desc(
        ctx.bind(),
        &[4096],
        &[1],
        0,
        DataType::F32,
        4096,
        t.storage_ptr(),
    )
    .unwrap();
    aclnn!(&*ctx, aclnnInplaceOne(&lie)).unwrap();
    let err = ctx
        .synchronize()
        .expect_err("the kernel writes past the allocation");
    assert_eq!(code(&err), ACL_ERROR_RT_AICORE_EXCEPTION);
    assert!(err.to_string().contains("out-of-bounds"), "{err}");
    burn_ascend::reset_device(&AscendDevice::Emulated(0)).unwrap();
}
