//! The emulated AscendCL runtime through the function table: copies in every direction,
//! memset, events ordering two streams, and the two-phase call's workspace and executor rules.

mod common;

use std::ffi::c_void;

use ascend_acl::handles::{HostScalar, ScalarDesc, TensorDesc};
use ascend_acl::table::Phase2Fn;
use ascend_acl::types::event_status::ACL_EVENT_RECORDED_STATUS_COMPLETE;
use ascend_acl::types::memcpy_kind::*;
use ascend_acl::types::status::*;
use ascend_acl::types::*;
use ascend_acl::{AclApi, DataType};
use common::{api, malloc, stream};

#[test]
fn copies_in_every_direction_and_memset() {
    let api = api();
    let s = stream(api);
    let (a, b) = (malloc(api, 64), malloc(api, 64));
    let src: Vec<u8> = (0..64).collect();
    let mut back = vec![0u8; 64];
    // SAFETY: every buffer holds 64 bytes.
    unsafe {
        api.check(
            (api.core.aclrtMemcpy)(a, 64, src.as_ptr() as _, 64, ACL_MEMCPY_HOST_TO_DEVICE),
            "h2d",
        )
        .unwrap();
        api.check(
            (api.core.aclrtMemcpyAsync)(b, 64, a, 64, ACL_MEMCPY_DEVICE_TO_DEVICE, s),
            "d2d",
        )
        .unwrap();
        api.check((api.core.aclrtMemsetAsync)(a, 64, 0xAB, 16, s), "memset")
            .unwrap();
        api.check((api.core.aclrtSynchronizeStream)(s), "sync")
            .unwrap();
        api.check(
            (api.core.aclrtMemcpy)(back.as_mut_ptr() as _, 64, b, 64, ACL_MEMCPY_DEVICE_TO_HOST),
            "d2h",
        )
        .unwrap();
        assert_eq!(back, src);
        api.check(
            (api.core.aclrtMemcpy)(back.as_mut_ptr() as _, 64, a, 64, ACL_MEMCPY_DEVICE_TO_HOST),
            "d2h",
        )
        .unwrap();
        assert!(back[..16].iter().all(|&x| x == 0xAB) && back[16..] == src[16..]);

        let status = (api.core.aclrtMemcpy)(
            back.as_mut_ptr() as _,
            64,
            a,
            128,
            ACL_MEMCPY_DEVICE_TO_HOST,
        );
        assert_eq!(status, ACL_ERROR_RT_PARAM_INVALID, "count beyond destMax");
        let status = (api.core.aclrtMemcpy)(
            back.as_mut_ptr() as _,
            64,
            src.as_ptr() as _,
            64,
            ACL_MEMCPY_DEVICE_TO_HOST,
        );
        assert_eq!(
            status, ACL_ERROR_RT_PARAM_INVALID,
            "a host source for a device-to-host copy"
        );
        assert!(api.recent_error_message().contains("not a device address"));

        for p in [a, b] {
            api.check((api.core.aclrtFree)(p), "free").unwrap();
        }
        assert_eq!(
            (api.core.aclrtFree)(a),
            ACL_ERROR_RT_MEMORY_FREE,
            "double free"
        );
        api.check((api.core.aclrtDestroyStream)(s), "destroy")
            .unwrap();
    }
}

#[test]
fn an_event_orders_work_across_streams() {
    let api = api();
    let (producer, consumer) = (stream(api), stream(api));
    let (a, b) = (malloc(api, 4096), malloc(api, 4096));
    let mut event = std::ptr::null_mut();
    let mut back = vec![0u8; 4096];
    // SAFETY: every buffer holds 4096 bytes.
    unsafe {
        api.check((api.core.aclrtCreateEvent)(&mut event), "event")
            .unwrap();
        api.check(
            (api.core.aclrtMemsetAsync)(a, 4096, 7, 4096, producer),
            "memset",
        )
        .unwrap();
        api.check((api.core.aclrtRecordEvent)(event, producer), "record")
            .unwrap();
        api.check((api.core.aclrtStreamWaitEvent)(consumer, event), "wait")
            .unwrap();
        api.check(
            (api.core.aclrtMemcpyAsync)(b, 4096, a, 4096, ACL_MEMCPY_DEVICE_TO_DEVICE, consumer),
            "d2d",
        )
        .unwrap();
        api.check((api.core.aclrtSynchronizeStream)(consumer), "sync")
            .unwrap();
        api.check(
            (api.core.aclrtMemcpy)(
                back.as_mut_ptr() as _,
                4096,
                b,
                4096,
                ACL_MEMCPY_DEVICE_TO_HOST,
            ),
            "d2h",
        )
        .unwrap();
        assert!(back.iter().all(|&x| x == 7));
        api.check((api.core.aclrtSynchronizeEvent)(event), "sync event")
            .unwrap();
        let mut status = -1;
        api.check(
            (api.core.aclrtQueryEventStatus)(event, &mut status),
            "query",
        )
        .unwrap();
        assert_eq!(status, ACL_EVENT_RECORDED_STATUS_COMPLETE);
        api.check((api.core.aclrtDestroyEvent)(event), "destroy event")
            .unwrap();
        assert_eq!(
            (api.core.aclrtRecordEvent)(event, producer),
            ACL_ERROR_RT_PARAM_INVALID,
            "destroyed event"
        );
        for s in [producer, consumer] {
            api.check((api.core.aclrtDestroyStream)(s), "destroy")
                .unwrap();
        }
        for p in [a, b] {
            api.check((api.core.aclrtFree)(p), "free").unwrap();
        }
    }
}

#[test]
fn a_thread_without_a_device_gets_context_null() {
    let api = api();
    let status = std::thread::spawn(move || {
        let mut p = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the call is expected to fail.
        unsafe { (api.core.aclrtMalloc)(&mut p, 64, ACL_MEM_MALLOC_HUGE_FIRST) }
    })
    .join()
    .unwrap();
    assert_eq!(status, ACL_ERROR_RT_CONTEXT_NULL);
}

/// Phase one of aclnnAdd on `[n]` f32 views of `x`, as the raw table entries: the workspace
/// size, the executor, phase two, and the objects the executor refers to (alive until dropped).
type PhaseOne = (
    u64,
    *mut aclOpExecutor,
    Phase2Fn,
    (TensorDesc<'static>, ScalarDesc<'static>),
);

fn add_phase_one(api: &'static AclApi, x: *mut c_void, n: usize) -> PhaseOne {
    // SAFETY: `x` holds `n` f32 elements.
    let t = unsafe { TensorDesc::new(api, &[n], &[1], 0, DataType::F32, n, x) }.unwrap();
    let alpha = ScalarDesc::new(api, HostScalar::Float(1.0)).unwrap();
    // SAFETY: the table types each operator with its declared signature.
    let (phase1, phase2) = unsafe {
        api.ops
            .aclnnAdd
            .resolve(api.source(), "aclnnAdd", "aclnnAddGetWorkspaceSize")
    }
    .unwrap();
    let (mut ws, mut exec) = (0u64, std::ptr::null_mut());
    // SAFETY: live descriptors and out-pointers.
    let status = unsafe {
        phase1(
            t.as_ptr(),
            t.as_ptr(),
            alpha.as_ptr(),
            t.as_ptr(),
            &mut ws,
            &mut exec,
        )
    };
    api.check(status, "aclnnAddGetWorkspaceSize").unwrap();
    (ws, exec, phase2, (t, alpha))
}

#[test]
fn an_object_destroyed_between_the_phases_fails_phase_two() {
    let api = api();
    let x = malloc(api, 256);
    for destroy_scalar in [true, false] {
        let (_, exec, phase2, (t, alpha)) = add_phase_one(api, x, 64);
        if destroy_scalar {
            drop(alpha);
        } else {
            drop(t);
        }
        // SAFETY: the executor comes from phase one; NULL stream = default stream.
        let status = unsafe { phase2(std::ptr::null_mut(), 0, exec, std::ptr::null_mut()) };
        assert_eq!(status, ACLNN_ERR_PARAM_INVALID);
        let message = api.recent_error_message();
        let (kind, name) = if destroy_scalar {
            ("aclScalar", "alpha")
        } else {
            ("aclTensor", "self")
        };
        assert!(
            message.contains(kind)
                && message.contains(&format!("`{name}`"))
                && message.contains("destroyed before phase two"),
            "{message}"
        );
    }
    // A destroyed object cannot be destroyed again, nor used by a new phase one.
    // SAFETY: `x` holds 64 f32 elements.
    let t = unsafe { TensorDesc::new(api, &[64], &[1], 0, DataType::F32, 64, x) }.unwrap();
    let raw = t.as_ptr();
    drop(t);
    // SAFETY: deliberately a destroyed handle; the emulated runtime checks it.
    assert_eq!(
        unsafe { (api.core.aclDestroyTensor)(raw) },
        ACLNN_ERR_PARAM_INVALID
    );
    assert!(api.recent_error_message().contains("not a live aclTensor"));
}

#[test]
fn an_executor_runs_once_and_a_missing_workspace_is_rejected() {
    let api = api();
    let x = malloc(api, 256);
    let (ws, exec, phase2, _objects) = add_phase_one(api, x, 64);
    assert_eq!(ws, 0);
    // SAFETY: the executor comes from phase one; NULL stream = default stream.
    unsafe {
        api.check(
            phase2(std::ptr::null_mut(), 0, exec, std::ptr::null_mut()),
            "aclnnAdd",
        )
        .unwrap();
        assert_eq!(
            phase2(
                std::ptr::null_mut(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut()
            ),
            ACLNN_ERR_PARAM_NULLPTR
        );
    }

    let (a, out) = (malloc(api, 64), malloc(api, 64));
    // SAFETY: both hold 4x4 f32.
    let (ta, tout) = unsafe {
        (
            TensorDesc::new(api, &[4, 4], &[4, 1], 0, DataType::F32, 16, a).unwrap(),
            TensorDesc::new(api, &[4, 4], &[4, 1], 0, DataType::F32, 16, out).unwrap(),
        )
    };
    // SAFETY: as above.
    let (phase1, phase2) = unsafe {
        api.ops
            .aclnnMatmul
            .resolve(api.source(), "aclnnMatmul", "aclnnMatmulGetWorkspaceSize")
    }
    .unwrap();
    let (mut ws, mut exec) = (0u64, std::ptr::null_mut());
    // SAFETY: live descriptors and out-pointers.
    unsafe {
        api.check(
            phase1(
                ta.as_ptr(),
                ta.as_ptr(),
                tout.as_ptr(),
                CUBE_MATH_KEEP_DTYPE,
                &mut ws,
                &mut exec,
            ),
            "phase1",
        )
        .unwrap();
        assert!(ws > 0, "matmul asks for a workspace");
        let status = phase2(std::ptr::null_mut(), 0, exec, std::ptr::null_mut());
        assert_eq!(status, ACLNN_ERR_PARAM_INVALID);
        assert!(api.recent_error_message().contains("workspace"));
    }
}

fn upload_f32(api: &AclApi, dst: *mut c_void, values: &[f32]) {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
    // SAFETY: `dst` holds at least `bytes.len()` bytes.
    let status = unsafe {
        (api.core.aclrtMemcpy)(
            dst,
            bytes.len(),
            bytes.as_ptr() as _,
            bytes.len(),
            ACL_MEMCPY_HOST_TO_DEVICE,
        )
    };
    api.check(status, "h2d").unwrap();
}

fn download_f32(api: &AclApi, src: *mut c_void, n: usize) -> Vec<f32> {
    let mut bytes = vec![0u8; n * 4];
    // SAFETY: `src` holds at least `n` f32; the caller synchronised.
    let status = unsafe {
        (api.core.aclrtMemcpy)(
            bytes.as_mut_ptr() as _,
            bytes.len(),
            src,
            bytes.len(),
            ACL_MEMCPY_DEVICE_TO_HOST,
        )
    };
    api.check(status, "d2h").unwrap();
    bytes
        .chunks(4)
        .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn a_repeatable_executor_relaunches_with_rebound_addresses() {
    let api = api();
    let set_repeatable = api.optional.aclSetAclOpExecutorRepeatable.unwrap();
    let set_input = api.optional.aclSetInputTensorAddr.unwrap();
    let set_output = api.optional.aclSetOutputTensorAddr.unwrap();
    let s = stream(api);
    let [x, y, out1, out2] = [0; 4].map(|_| malloc(api, 64));
    upload_f32(api, x, &[1.0, 2.0, 3.0, 4.0]);
    upload_f32(api, y, &[10.0, 20.0, 30.0, 40.0]);
    let desc = |p| {
        // SAFETY: every buffer holds 4 f32.
        unsafe { TensorDesc::new(api, &[4], &[1], 0, DataType::F32, 4, p) }.unwrap()
    };
    let (tx, ty, tout) = (desc(x), desc(y), desc(out1));
    let alpha = ScalarDesc::new(api, HostScalar::Float(1.0)).unwrap();
    // SAFETY: the table types each operator with its declared signature.
    let (phase1, phase2) = unsafe {
        api.ops
            .aclnnAdd
            .resolve(api.source(), "aclnnAdd", "aclnnAddGetWorkspaceSize")
    }
    .unwrap();
    let (mut ws, mut exec) = (0u64, std::ptr::null_mut());
    // SAFETY: live descriptors, buffers and out-pointers throughout.
    unsafe {
        let status = phase1(
            tx.as_ptr(),
            ty.as_ptr(),
            alpha.as_ptr(),
            tout.as_ptr(),
            &mut ws,
            &mut exec,
        );
        api.check(status, "phase1").unwrap();
        assert_eq!(
            set_input(exec, 0, tx.as_ptr(), y),
            ACLNN_ERR_PARAM_INVALID,
            "not repeatable yet"
        );
        api.check(set_repeatable(exec), "repeatable").unwrap();
        api.check(phase2(std::ptr::null_mut(), 0, exec, s), "launch 1")
            .unwrap();
        // Rebinding while launch 1 is still queued must not reach it.
        api.check(set_input(exec, 0, tx.as_ptr(), y), "rebind self")
            .unwrap();
        api.check(set_output(exec, 0, tout.as_ptr(), out2), "rebind out")
            .unwrap();
        api.check(phase2(std::ptr::null_mut(), 0, exec, s), "launch 2")
            .unwrap();
        api.check((api.core.aclrtSynchronizeStream)(s), "sync")
            .unwrap();
        assert_eq!(download_f32(api, out1, 4), [11.0, 22.0, 33.0, 44.0]);
        assert_eq!(download_f32(api, out2, 4), [20.0, 40.0, 60.0, 80.0]);

        assert_eq!(
            set_input(exec, 2, tx.as_ptr(), y),
            ACLNN_ERR_PARAM_INVALID,
            "index 2"
        );
        assert_eq!(
            set_output(exec, 1, tout.as_ptr(), y),
            ACLNN_ERR_PARAM_INVALID,
            "index 1"
        );
        assert_eq!(
            set_input(exec, 0, tx.as_ptr(), (y as *mut u8).add(4) as _),
            ACLNN_ERR_PARAM_INVALID,
            "misaligned"
        );
        assert_eq!(
            set_input(std::ptr::null_mut(), 0, tx.as_ptr(), y),
            ACLNN_ERR_INNER_NULLPTR
        );
        assert_eq!(
            set_input(exec, 0, std::ptr::null_mut(), y),
            ACLNN_ERR_INNER_NULLPTR
        );

        api.check((api.core.aclDestroyAclOpExecutor)(exec), "destroy")
            .unwrap();
        assert_eq!(
            phase2(std::ptr::null_mut(), 0, exec, s),
            ACLNN_ERR_INNER,
            "launch after destroy"
        );
        assert!(api.recent_error_message().contains("not a live executor"));
        assert_eq!(
            set_input(exec, 0, tx.as_ptr(), x),
            ACLNN_ERR_INNER,
            "rebind after destroy"
        );
        assert_eq!(
            (api.core.aclDestroyAclOpExecutor)(exec),
            ACLNN_ERR_INNER,
            "destroy twice"
        );
        assert_eq!(
            (api.core.aclDestroyAclOpExecutor)(std::ptr::null_mut()),
            ACLNN_ERR_INNER_NULLPTR
        );
        assert_eq!(
            set_repeatable(std::ptr::null_mut()),
            ACLNN_ERR_INNER_NULLPTR
        );
        for p in [x, y, out1, out2] {
            api.check((api.core.aclrtFree)(p), "free").unwrap();
        }
        api.check((api.core.aclrtDestroyStream)(s), "destroy stream")
            .unwrap();
    }
}

#[test]
fn a_one_shot_executor_runs_once_and_can_be_destroyed_unlaunched() {
    let api = api();
    let set_repeatable = api.optional.aclSetAclOpExecutorRepeatable.unwrap();
    let x = malloc(api, 256);
    let (_, exec, phase2, _objects) = add_phase_one(api, x, 64);
    // SAFETY: the executor comes from phase one; NULL stream = default stream.
    unsafe {
        api.check(
            phase2(std::ptr::null_mut(), 0, exec, std::ptr::null_mut()),
            "launch",
        )
        .unwrap();
        assert_eq!(
            phase2(std::ptr::null_mut(), 0, exec, std::ptr::null_mut()),
            ACLNN_ERR_INNER,
            "a second launch of a one-shot executor"
        );
        assert_eq!(
            set_repeatable(exec),
            ACLNN_ERR_INNER,
            "repeatable after its launch"
        );
        assert_eq!(
            (api.core.aclDestroyAclOpExecutor)(exec),
            ACLNN_ERR_INNER,
            "consumed by its launch"
        );
    }
    let (_, unlaunched, _, _objects) = add_phase_one(api, x, 64);
    // SAFETY: as above.
    unsafe {
        api.check(
            (api.core.aclDestroyAclOpExecutor)(unlaunched),
            "destroy unlaunched",
        )
        .unwrap();
    }

    // An operator the emulation does not model as repeatable refuses, and still runs once.
    // SAFETY: `x` holds 64 f32 (and so 64 f16 of the output).
    let (src, dst) = unsafe {
        (
            TensorDesc::new(api, &[64], &[1], 0, DataType::F32, 64, x).unwrap(),
            TensorDesc::new(api, &[64], &[1], 0, DataType::F16, 128, x).unwrap(),
        )
    };
    // SAFETY: the table types each operator with its declared signature.
    let (phase1, phase2) = unsafe {
        api.ops
            .aclnnCast
            .resolve(api.source(), "aclnnCast", "aclnnCastGetWorkspaceSize")
    }
    .unwrap();
    let (mut ws, mut exec) = (0u64, std::ptr::null_mut());
    // SAFETY: live descriptors and out-pointers.
    unsafe {
        api.check(
            phase1(
                src.as_ptr(),
                DataType::F16.acl(),
                dst.as_ptr(),
                &mut ws,
                &mut exec,
            ),
            "phase1",
        )
        .unwrap();
        assert_eq!(set_repeatable(exec), ACLNN_ERR_PARAM_INVALID);
        api.check(
            phase2(std::ptr::null_mut(), 0, exec, std::ptr::null_mut()),
            "cast",
        )
        .unwrap();
        api.check(
            (api.core.aclrtSynchronizeStream)(std::ptr::null_mut()),
            "sync",
        )
        .unwrap();
        api.check((api.core.aclrtFree)(x), "free").unwrap();
    }
}

/// Page-locked host memory of `bytes` bytes.
fn malloc_host(api: &AclApi, bytes: usize) -> *mut u8 {
    let mut p = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    api.check(
        unsafe { (api.core.aclrtMallocHost)(&mut p, bytes) },
        "aclrtMallocHost",
    )
    .unwrap();
    p as *mut u8
}

/// Device 1 bound to the calling thread (tests that fault a device keep off device 0, which
/// the other tests of this file share, and reset device 1 when done).
fn api_on_device_1() -> &'static AclApi {
    let api = api();
    // SAFETY: plain call; the emulated machine has two NPUs.
    api.check(unsafe { (api.core.aclrtSetDevice)(1) }, "aclrtSetDevice")
        .unwrap();
    api
}

/// `aclrtResetDeviceForce`: the tests bind device 1 once each, and every binding counts.
fn force_reset(api: &AclApi) -> unsafe extern "C" fn(i32) -> i32 {
    api.optional
        .aclrtResetDeviceForce
        .expect("CANN 8.1.RC1 has it")
}

/// Enough queued work that a copy queued behind it cannot have run when the call returns.
const BUSY_BYTES: usize = 128 << 20;

#[test]
fn asynchronous_host_copies_need_page_locked_memory_and_run_in_stream_order() {
    let api = api();
    let s = stream(api);
    let dev = malloc(api, 4096);
    let pageable = vec![7u8; 4096];
    // SAFETY: every buffer holds 4096 bytes.
    unsafe {
        let status = (api.core.aclrtMemcpyAsync)(
            dev,
            4096,
            pageable.as_ptr() as _,
            4096,
            ACL_MEMCPY_HOST_TO_DEVICE,
            s,
        );
        assert_eq!(status, ACL_ERROR_RT_PARAM_INVALID, "pageable source");
        assert!(api.recent_error_message().contains("not page-locked"));

        let pinned = malloc_host(api, 4096 + 64);
        assert_eq!(
            pinned as usize % 64,
            0,
            "aclrtMallocHost aligns to 64 bytes"
        );
        let status = (api.core.aclrtMemcpyAsync)(
            dev,
            4096,
            pinned.add(32) as _,
            4096,
            ACL_MEMCPY_HOST_TO_DEVICE,
            s,
        );
        assert_eq!(status, ACL_ERROR_RT_PARAM_INVALID, "unaligned source");
        assert!(api.recent_error_message().contains("64-byte aligned"));

        // Queued behind other work, the copy runs in stream order (that it runs later, not at
        // the call, shows in the test of a source rewritten before it ran).
        let busy = malloc(api, BUSY_BYTES);
        std::ptr::write_bytes(pinned, 1, 4096);
        api.check(
            (api.core.aclrtMemsetAsync)(busy, BUSY_BYTES, 0, BUSY_BYTES, s),
            "memset",
        )
        .unwrap();
        api.check(
            (api.core.aclrtMemcpyAsync)(dev, 4096, pinned as _, 4096, ACL_MEMCPY_HOST_TO_DEVICE, s),
            "h2d",
        )
        .unwrap();
        api.check((api.core.aclrtSynchronizeStream)(s), "sync")
            .unwrap();
        let mut back = vec![0u8; 4096];
        api.check(
            (api.core.aclrtMemcpy)(
                back.as_mut_ptr() as _,
                4096,
                dev,
                4096,
                ACL_MEMCPY_DEVICE_TO_HOST,
            ),
            "d2h",
        )
        .unwrap();
        assert!(back.iter().all(|&b| b == 1), "the copied bytes");

        api.check((api.core.aclrtFreeHost)(pinned as _), "free host")
            .unwrap();
        assert_eq!(
            (api.core.aclrtFreeHost)(pinned as _),
            ACL_ERROR_RT_PARAM_INVALID,
            "double free of page-locked memory"
        );
        for p in [dev, busy] {
            api.check((api.core.aclrtFree)(p), "free").unwrap();
        }
        api.check((api.core.aclrtDestroyStream)(s), "destroy")
            .unwrap();
    }
}

/// Queues, on `s`, work that keeps the stream busy and behind it a 4096-byte copy from new
/// page-locked memory into new device memory; returns both (the copy has not run yet).
fn copy_behind_busy_work(api: &AclApi, s: aclrtStream) -> (*mut c_void, *mut u8) {
    let (dev, busy) = (malloc(api, 4096), malloc(api, BUSY_BYTES));
    let pinned = malloc_host(api, 4096);
    // SAFETY: every buffer holds what the calls say.
    unsafe {
        api.check(
            (api.core.aclrtMemsetAsync)(busy, BUSY_BYTES, 0, BUSY_BYTES, s),
            "memset",
        )
        .unwrap();
        api.check(
            (api.core.aclrtMemcpyAsync)(dev, 4096, pinned as _, 4096, ACL_MEMCPY_HOST_TO_DEVICE, s),
            "h2d",
        )
        .unwrap();
    }
    (dev, pinned)
}

#[test]
#[serial_test::serial(device_1)]
fn freeing_a_page_locked_buffer_before_its_copy_ran_faults_and_the_fault_is_sticky() {
    let api = api_on_device_1();
    let s = stream(api);
    let other = stream(api);
    let (dev, pinned) = copy_behind_busy_work(api, s);
    // SAFETY: every buffer holds what the calls say; the early free is the point of the test.
    unsafe {
        api.check((api.core.aclrtFreeHost)(pinned as _), "free host")
            .unwrap();
        let status = (api.core.aclrtSynchronizeStream)(s);
        assert_eq!(status, ACL_ERROR_RT_AICORE_EXCEPTION);
        let first = api.recent_error_message();
        assert!(
            first.contains("page-locked host buffer was freed"),
            "{first}"
        );

        // Sticky: every later synchronisation, on any stream of the device, reports it again,
        // and the device refuses new work and reads.
        for stream in [s, other] {
            assert_eq!(
                (api.core.aclrtSynchronizeStream)(stream),
                ACL_ERROR_RT_AICORE_EXCEPTION
            );
            assert!(api
                .recent_error_message()
                .contains("page-locked host buffer was freed"));
        }
        assert_eq!(
            (api.core.aclrtMemsetAsync)(dev, 4096, 0, 4096, other),
            ACL_ERROR_RT_AICORE_EXCEPTION
        );
        let mut back = vec![0u8; 16];
        assert_eq!(
            (api.core.aclrtMemcpy)(
                back.as_mut_ptr() as _,
                16,
                dev,
                16,
                ACL_MEMCPY_DEVICE_TO_HOST
            ),
            ACL_ERROR_RT_AICORE_EXCEPTION
        );

        // A reset clears it: the old streams and memory are gone, the thread binds again.
        api.check(force_reset(api)(1), "reset").unwrap();
        assert_eq!(
            (api.core.aclrtSynchronizeStream)(s),
            ACL_ERROR_RT_PARAM_INVALID,
            "a stream of the reset context"
        );
        assert_eq!(
            (api.core.aclrtMalloc)(&mut std::ptr::null_mut(), 64, ACL_MEM_MALLOC_HUGE_FIRST),
            ACL_ERROR_RT_CONTEXT_NULL,
            "the thread must bind the reset device again"
        );
        api.check((api.core.aclrtSetDevice)(1), "set device")
            .unwrap();
        let fresh = malloc(api, 64);
        api.check(
            (api.core.aclrtMemsetAsync)(fresh, 64, 3, 64, std::ptr::null_mut()),
            "memset",
        )
        .unwrap();
        api.check(
            (api.core.aclrtSynchronizeStream)(std::ptr::null_mut()),
            "sync",
        )
        .unwrap();
        api.check((api.core.aclrtFree)(fresh), "free").unwrap();
    }
}

/// acl-abi.md 3.3: an asynchronous copy reads its page-locked source when the stream reaches
/// it. Rewriting the source in between would upload the new bytes on an NPU without a word; the
/// emulation faults instead, naming the copy, so a staging ring that reuses a region too early
/// is caught.
#[test]
#[serial_test::serial(device_1)]
fn rewriting_a_page_locked_source_before_its_copy_ran_faults_naming_the_copy() {
    let api = api_on_device_1();
    let s = stream(api);
    let (_, pinned) = copy_behind_busy_work(api, s);
    // SAFETY: the page-locked buffer holds 4096 bytes; the early rewrite is the point of the test.
    unsafe {
        *pinned.add(100) = 7;
        assert_eq!(
            (api.core.aclrtSynchronizeStream)(s),
            ACL_ERROR_RT_AICORE_EXCEPTION
        );
        let message = api.recent_error_message();
        assert!(
            message.contains("aclrtMemcpyAsync (host-to-device, 4096 bytes")
                && message.contains("overwritten after the copy was queued"),
            "{message}"
        );
        api.check(force_reset(api)(1), "reset").unwrap();
        api.check((api.core.aclrtFreeHost)(pinned as _), "free host")
            .unwrap();
    }
}

/// acl-abi.md §3.1: CANN counts `aclrtSetDevice` calls per process, and `aclrtResetDevice`
/// destroys the context only when the count returns to zero (the stricter reading: every call
/// counts); `aclrtResetDeviceForce` (8.1.RC1 on) destroys it regardless.
#[test]
#[serial_test::serial(device_1)]
fn a_reset_destroys_the_context_only_when_every_set_device_is_balanced() {
    let api = api_on_device_1();
    // SAFETY: plain calls on device 1, which this test owns (serial).
    unsafe {
        api.check(force_reset(api)(1), "force").unwrap();
        let other = std::thread::spawn(|| {
            let on_thread = crate::api();
            on_thread
                .check(
                    (on_thread.core.aclrtSetDevice)(1),
                    "set device on another thread",
                )
                .unwrap();
        });
        other.join().unwrap();
        api.check((api.core.aclrtSetDevice)(1), "set device")
            .unwrap();
        let kept = malloc(api, 64);
        // Two SetDevice calls (one per thread), one reset: the context and its memory live on.
        api.check((api.core.aclrtResetDevice)(1), "reset").unwrap();
        api.check(
            (api.core.aclrtMemsetAsync)(kept, 64, 1, 64, std::ptr::null_mut()),
            "memset after a partial reset",
        )
        .unwrap();
        api.check(
            (api.core.aclrtSynchronizeStream)(std::ptr::null_mut()),
            "sync",
        )
        .unwrap();
        // The second reset balances the other thread's call: now the memory is gone.
        api.check((api.core.aclrtResetDevice)(1), "reset").unwrap();
        api.check((api.core.aclrtSetDevice)(1), "set device")
            .unwrap();
        assert_ne!((api.core.aclrtFree)(kept), 0, "freed by the reset");
        // Force resets however many calls are outstanding.
        api.check((api.core.aclrtSetDevice)(1), "set device")
            .unwrap();
        let gone = malloc(api, 64);
        api.check(force_reset(api)(1), "force").unwrap();
        api.check((api.core.aclrtSetDevice)(1), "set device")
            .unwrap();
        assert_ne!((api.core.aclrtFree)(gone), 0, "freed by the forced reset");
    }
}

/// The emulator exports what its CANN release declares, no more: aclnnRightShift first appears
/// after 8.1.RC1 (`ascend_acl::release`), so an 8.1.RC1 table lacks it, as dlsym would.
#[test]
fn the_emulated_release_exports_only_what_that_release_declares() {
    use ascend_acl::release::CannRelease;
    use ascend_acl::table::SymbolSource;
    use ascend_emulator::EmulatedRelease;
    let old = EmulatedRelease(CannRelease::V8_1_RC1);
    assert!(old.lookup("aclnnRightShiftGetWorkspaceSize").is_none());
    assert!(old.lookup("aclnnRightShift").is_none());
    assert!(old.lookup("aclnnAdd").is_some());
    assert!(old.lookup("aclrtResetDeviceForce").is_some());
    let older = AclApi::new(Box::new(EmulatedRelease(CannRelease::V8_0_0))).unwrap();
    assert!(older.optional.aclrtResetDeviceForce.is_none());
    assert!(older.graph.as_ref().err().unwrap().contains("8.1.RC1"));
    let newer = EmulatedRelease(CannRelease::V8_5_0);
    assert!(newer.lookup("aclnnRightShiftGetWorkspaceSize").is_some());
    // The default table is the default release's.
    assert_eq!(ascend_emulator::DEFAULT_CANN, CannRelease::V8_1_RC1);
    // SAFETY: the table's own entry, resolved under its own names.
    let resolved = unsafe {
        api().ops.aclnnRightShift.resolve(
            api().source(),
            "aclnnRightShift",
            "aclnnRightShiftGetWorkspaceSize",
        )
    };
    assert!(resolved.is_err());
}

/// The quantised MoE routing operator is an 8.1.RC1 function (ASSUMPTION, the stricter reading
/// of `aclnn-quant-attention-norm.md`: declared by the 8.1.RC1 headers, absent from
/// `aclnn-ops.tsv`): an 8.0 table lacks it, phase one and two alike.
#[test]
fn moe_init_routing_quant_v2_is_exported_from_8_1_rc1_on() {
    use ascend_acl::release::CannRelease;
    use ascend_acl::table::SymbolSource;
    use ascend_emulator::EmulatedRelease;
    let old = EmulatedRelease(CannRelease::V8_0_0);
    assert!(old
        .lookup("aclnnMoeInitRoutingQuantV2GetWorkspaceSize")
        .is_none());
    assert!(old.lookup("aclnnMoeInitRoutingQuantV2").is_none());
    let current = EmulatedRelease(CannRelease::V8_1_RC1);
    assert!(current
        .lookup("aclnnMoeInitRoutingQuantV2GetWorkspaceSize")
        .is_some());
    assert!(current.lookup("aclnnMoeInitRoutingQuantV2").is_some());
}
