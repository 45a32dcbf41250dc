//! Emulated ACL graphs through the function table: work issued to a capturing stream is
//! recorded, not run; replays re-run it with the addresses it had at capture; and every call
//! `../shared/ascend/aclgraph-abi.md` forbids during capture returns its documented code and
//! invalidates the capture. One test per rule.
//!
//! A capture forbids synchronising anything on its device, so the tests of this file take one
//! lock and never overlap.

mod common;

use std::ffi::c_void;
use std::sync::MutexGuard;

use ascend_acl::handles::{HostScalar, ScalarDesc, TensorDesc, TensorListDesc};
use ascend_acl::table::{GraphFns, SymbolSource};
use ascend_acl::types::capture::*;
use ascend_acl::types::memcpy_kind::*;
use ascend_acl::types::status::*;
use ascend_acl::types::*;
use ascend_acl::{AclApi, DataType};
use ascend_emulator::{work_counters, EmulatedRuntime};
use common::{malloc, stream};

/// The table over the emulated runtime with device 0 bound to the calling thread, and the lock
/// that keeps this file's tests apart.
fn api() -> (&'static AclApi, MutexGuard<'static, ()>) {
    let serial = common::serial();
    (common::api(), serial)
}

fn graph(api: &AclApi) -> &GraphFns {
    api.graph
        .as_ref()
        .expect("the emulator has the graph functions")
}

fn sync(api: &AclApi, s: aclrtStream) {
    // SAFETY: a live stream.
    api.check(unsafe { (api.core.aclrtSynchronizeStream)(s) }, "sync")
        .unwrap();
}

fn write_f32(api: &AclApi, dst: *mut c_void, values: &[f32]) {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
    // SAFETY: `dst` holds `bytes.len()` bytes.
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

fn read_f32(api: &AclApi, src: *mut c_void, n: usize) -> Vec<f32> {
    let mut bytes = vec![0u8; n * 4];
    // SAFETY: `src` holds `n` f32; the caller synchronised.
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

fn begin(api: &AclApi, s: aclrtStream, mode: i32) {
    // SAFETY: a live stream.
    api.check(
        unsafe { (graph(api).aclmdlRICaptureBegin)(s, mode) },
        "aclmdlRICaptureBegin",
    )
    .unwrap();
}

/// Ends the capture: the graph, or the status.
fn end(api: &AclApi, s: aclrtStream) -> Result<aclmdlRI, i32> {
    let mut ri = std::ptr::null_mut();
    // SAFETY: a live stream, valid out-pointer.
    match unsafe { (graph(api).aclmdlRICaptureEnd)(s, &mut ri) } {
        0 => Ok(ri),
        code => {
            assert!(ri.is_null(), "a failed capture returns no graph");
            Err(code)
        }
    }
}

fn replay(api: &AclApi, ri: aclmdlRI, s: aclrtStream) -> i32 {
    // SAFETY: plain call.
    unsafe { (graph(api).aclmdlRIExecuteAsync)(ri, s) }
}

fn destroy(api: &AclApi, ri: aclmdlRI) -> i32 {
    // SAFETY: plain call.
    unsafe { (graph(api).aclmdlRIDestroy)(ri) }
}

fn status(api: &AclApi, s: aclrtStream) -> (i32, aclmdlRI) {
    let (mut status, mut ri) = (-1, std::ptr::null_mut());
    // SAFETY: a live stream, valid out-pointers.
    api.check(
        unsafe { (graph(api).aclmdlRICaptureGetInfo)(s, &mut status, &mut ri) },
        "aclmdlRICaptureGetInfo",
    )
    .unwrap();
    (status, ri)
}

/// `out = x + y` through aclnnAdd's two phases, phase two on `s`; the descriptors are returned
/// to stay alive as long as the caller needs.
fn add(
    api: &'static AclApi,
    s: aclrtStream,
    x: *mut c_void,
    y: *mut c_void,
    out: *mut c_void,
    n: usize,
) -> i32 {
    // SAFETY: each buffer holds `n` f32 elements.
    let t = |p| unsafe { TensorDesc::new(api, &[n], &[1], 0, DataType::F32, n, p) }.unwrap();
    let (tx, ty, to) = (t(x), t(y), t(out));
    let alpha = ScalarDesc::new(api, HostScalar::Float(1.0)).unwrap();
    // SAFETY: the table types each operator with its declared signature.
    let (phase1, phase2) = unsafe {
        api.ops
            .aclnnAdd
            .resolve(api.source(), "aclnnAdd", "aclnnAddGetWorkspaceSize")
    }
    .unwrap();
    let (mut ws, mut exec) = (0u64, std::ptr::null_mut());
    // SAFETY: live descriptors and out-pointers; aclnnAdd needs no workspace here.
    unsafe {
        let status = phase1(
            tx.as_ptr(),
            ty.as_ptr(),
            alpha.as_ptr(),
            to.as_ptr(),
            &mut ws,
            &mut exec,
        );
        api.check(status, "aclnnAddGetWorkspaceSize").unwrap();
        assert_eq!(ws, 0);
        phase2(std::ptr::null_mut(), 0, exec, s)
    }
}

#[test]
fn captured_work_is_recorded_not_run_and_each_replay_reruns_it_at_the_captured_addresses() {
    let (api, _serial) = api();
    let s = stream(api);
    let (x, y, out, copy) = (
        malloc(api, 64),
        malloc(api, 64),
        malloc(api, 64),
        malloc(api, 64),
    );
    write_f32(api, x, &[1.0, 2.0, 3.0, 4.0]);
    write_f32(api, y, &[10.0; 4]);
    write_f32(api, out, &[-1.0; 4]);
    write_f32(api, copy, &[-1.0; 4]);
    assert_eq!(status(api, s).0, ACL_MODEL_RI_CAPTURE_STATUS_NONE);

    let before = work_counters();
    begin(api, s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL);
    let (active, capturing) = status(api, s);
    assert_eq!(active, ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE);
    api.check(add(api, s, x, y, out, 4), "aclnnAdd").unwrap();
    // SAFETY: both buffers hold 64 bytes.
    api.check(
        unsafe { (api.core.aclrtMemcpyAsync)(copy, 64, out, 16, ACL_MEMCPY_DEVICE_TO_DEVICE, s) },
        "d2d",
    )
    .unwrap();
    let ri = end(api, s).unwrap();
    assert_eq!(ri, capturing, "GetInfo named the graph being captured");
    assert_eq!(status(api, s).0, ACL_MODEL_RI_CAPTURE_STATUS_NONE);
    sync(api, s);
    assert_eq!(
        read_f32(api, out, 4),
        [-1.0; 4],
        "nothing ran during capture"
    );
    assert_eq!(work_counters().since(&before).submissions, 0);

    let before = work_counters();
    api.check(replay(api, ri, s), "aclmdlRIExecuteAsync")
        .unwrap();
    sync(api, s);
    let work = work_counters().since(&before);
    assert_eq!((work.submissions, work.aclnn_launches), (1, 1));
    assert_eq!(read_f32(api, copy, 4), [11.0, 12.0, 13.0, 14.0]);

    // New data at the captured addresses: the replay reads it.
    write_f32(api, x, &[100.0, 200.0, 300.0, 400.0]);
    api.check(replay(api, ri, s), "aclmdlRIExecuteAsync")
        .unwrap();
    api.check(replay(api, ri, s), "aclmdlRIExecuteAsync")
        .unwrap();
    sync(api, s);
    assert_eq!(read_f32(api, copy, 4), [110.0, 210.0, 310.0, 410.0]);

    api.check(destroy(api, ri), "aclmdlRIDestroy").unwrap();
    assert_eq!(replay(api, ri, s), ACL_ERROR_RT_PARAM_INVALID, "destroyed");
    assert_eq!(destroy(api, ri), ACL_ERROR_RT_PARAM_INVALID);
}

fn write_i64(api: &AclApi, dst: *mut c_void, values: &[i64]) {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
    // SAFETY: `dst` holds `bytes.len()` bytes.
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

/// aclnnGroupedMatmulV4 grouping the rows of `x [m, k]` along M over `weight [experts, k, n]`
/// with the group sizes at `sizes` (`[experts]` i64), into `out [m, n]`, all f32.
fn grouped_matmul(
    api: &'static AclApi,
    s: aclrtStream,
    (x, weight, sizes, out): (*mut c_void, *mut c_void, *mut c_void, *mut c_void),
    (m, k, n, experts): (usize, usize, usize, usize),
) -> i32 {
    let t = |shape: &[usize], dtype, p| {
        let strides: Vec<usize> = (0..shape.len())
            .map(|i| shape[i + 1..].iter().product())
            .collect();
        let elems = shape.iter().product();
        // SAFETY: each buffer holds its shape's elements, dense.
        unsafe { TensorDesc::new(api, shape, &strides, 0, dtype, elems, p) }.unwrap()
    };
    let list = |d| TensorListDesc::new(api, vec![d]).unwrap();
    let xs = list(t(&[m, k], DataType::F32, x));
    let ws = list(t(&[experts, k, n], DataType::F32, weight));
    let outs = list(t(&[m, n], DataType::F32, out));
    let group_list = t(&[experts], DataType::I64, sizes);
    // SAFETY: the table types each operator with its declared signature.
    let (phase1, phase2) = unsafe {
        api.ops.aclnnGroupedMatmulV4.resolve(
            api.source(),
            "aclnnGroupedMatmulV4",
            "aclnnGroupedMatmulV4GetWorkspaceSize",
        )
    }
    .unwrap();
    let none = std::ptr::null();
    let (mut ws_size, mut exec) = (0u64, std::ptr::null_mut());
    // SAFETY: live descriptors and out-pointers; the absent optionals are NULL.
    unsafe {
        let status = phase1(
            xs.as_ptr(),
            ws.as_ptr(),
            none,
            none,
            none,
            none,
            none,
            none,
            group_list.as_ptr(),
            none,
            none,
            none,
            3, // splitItem: single tensors
            0, // groupType: along M
            1, // groupListType: group sizes
            0, // actType: none
            outs.as_ptr().cast_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut ws_size,
            &mut exec,
        );
        api.check(status, "aclnnGroupedMatmulV4GetWorkspaceSize")
            .unwrap();
        let workspace = if ws_size > 0 {
            malloc(api, ws_size as usize)
        } else {
            std::ptr::null_mut()
        };
        phase2(workspace, ws_size, exec, s)
    }
}

#[test]
fn a_grouped_matmul_counts_the_weights_of_the_experts_its_rows_route_to_launched_and_replayed() {
    let (api, _serial) = api();
    let s = stream(api);
    let (m, k, n, experts) = (3, 32, 16, 4);
    let bufs = (
        malloc(api, m * k * 4),
        malloc(api, experts * k * n * 4),
        malloc(api, experts * 8),
        malloc(api, m * n * 4),
    );
    let (x, weight, sizes, out) = bufs;
    write_f32(api, x, &vec![1.0; m * k]);
    // Expert e's weights are all e + 1: a row of ones through it gives k * (e + 1).
    let w: Vec<f32> = (0..experts * k * n)
        .map(|i| (i / (k * n) + 1) as f32)
        .collect();
    write_f32(api, weight, &w);
    // x, out and the group list, always; the weights of each expert that owns rows.
    let fixed = (m * k * 4 + m * n * 4 + experts * 8) as u64;
    let expert_bytes = (k * n * 4) as u64;

    // Every row to expert 1: one expert's weights are read, not four.
    write_i64(api, sizes, &[0, 3, 0, 0]);
    let before = work_counters();
    api.check(
        grouped_matmul(api, s, bufs, (m, k, n, experts)),
        "aclnnGroupedMatmulV4",
    )
    .unwrap();
    sync(api, s);
    assert_eq!(read_f32(api, out, m * n), vec![64.0; m * n]);
    assert_eq!(
        work_counters().since(&before).aclnn_bytes,
        fixed + expert_bytes
    );

    // Recorded, then replayed with the rows spread over experts 0 to 2: the replay counts
    // the experts of the group list it reads.
    begin(api, s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL);
    api.check(
        grouped_matmul(api, s, bufs, (m, k, n, experts)),
        "aclnnGroupedMatmulV4",
    )
    .unwrap();
    let ri = end(api, s).unwrap();
    write_i64(api, sizes, &[1, 1, 1, 0]);
    let before = work_counters();
    api.check(replay(api, ri, s), "aclmdlRIExecuteAsync")
        .unwrap();
    sync(api, s);
    let row = |v: f32| vec![v; n];
    assert_eq!(
        read_f32(api, out, m * n),
        [row(32.0), row(64.0), row(96.0)].concat()
    );
    let work = work_counters().since(&before);
    assert_eq!(
        (work.aclnn_launches, work.aclnn_bytes),
        (1, fixed + 3 * expert_bytes)
    );
    api.check(destroy(api, ri), "aclmdlRIDestroy").unwrap();
}

#[test]
fn a_replay_of_freed_memory_faults_on_the_device() {
    let (api, _serial) = api();
    // SAFETY: plain call; the emulated machine has two NPUs (a fault is sticky: device 1).
    api.check(unsafe { (api.core.aclrtSetDevice)(1) }, "aclrtSetDevice")
        .unwrap();
    let s = stream(api);
    let (a, b) = (malloc(api, 64), malloc(api, 64));
    begin(api, s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL);
    // SAFETY: both hold 64 bytes.
    api.check(
        unsafe { (api.core.aclrtMemcpyAsync)(b, 64, a, 64, ACL_MEMCPY_DEVICE_TO_DEVICE, s) },
        "d2d",
    )
    .unwrap();
    let ri = end(api, s).unwrap();
    // SAFETY: a live allocation, freed once.
    api.check(unsafe { (api.core.aclrtFree)(a) }, "aclrtFree")
        .unwrap();
    api.check(replay(api, ri, s), "aclmdlRIExecuteAsync")
        .unwrap();
    // SAFETY: a live stream.
    let code = unsafe { (api.core.aclrtSynchronizeStream)(s) };
    assert_ne!(code, 0, "the replay read freed memory");
    assert!(api.recent_error_message().contains("graph replay"));
    api.check(destroy(api, ri), "aclmdlRIDestroy").unwrap();
    // SAFETY: device 1 is ours; the forced reset clears the fault whoever bound the device.
    api.check(unsafe { force_reset(api)(1) }, "reset").unwrap();
    common::bind(api);
}

/// `aclrtResetDeviceForce` (the tests bind devices from many threads, each call counted).
fn force_reset(api: &AclApi) -> unsafe extern "C" fn(i32) -> i32 {
    api.optional
        .aclrtResetDeviceForce
        .expect("CANN 8.1.RC1 has it")
}

/// Runs `forbidden` during a GLOBAL capture on a new stream: checks its status, then that the
/// capture ended invalidated (no graph).
fn forbidden_during_capture(
    expected: i32,
    forbidden: impl FnOnce(&'static AclApi, aclrtStream) -> i32,
) {
    let (api, _serial) = api();
    let s = stream(api);
    begin(api, s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL);
    let code = forbidden(api, s);
    let message = api.recent_error_message();
    assert_eq!(code, expected, "{}: {message}", status::name(code));
    assert_eq!(status(api, s).0, ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED);
    assert_eq!(end(api, s), Err(ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED));
    assert!(api.recent_error_message().contains("invalidated"));
    sync(api, s);
}

#[test]
fn synchronising_the_capturing_stream_is_refused() {
    // SAFETY: a live stream.
    forbidden_during_capture(ACL_ERROR_RT_STREAM_CAPTURED, |api, s| unsafe {
        (api.core.aclrtSynchronizeStream)(s)
    });
}

#[test]
fn synchronising_another_stream_of_the_device_is_refused() {
    forbidden_during_capture(ACL_ERROR_RT_STREAM_CAPTURED, |api, _| {
        let other = stream(api);
        // SAFETY: a live stream.
        unsafe { (api.core.aclrtSynchronizeStream)(other) }
    });
}

#[test]
fn resetting_the_device_is_refused() {
    // SAFETY: plain call.
    forbidden_during_capture(ACL_ERROR_RT_STREAM_CAPTURED, |api, _| unsafe {
        (api.core.aclrtResetDevice)(0)
    });
}

#[test]
fn a_synchronous_copy_is_refused_in_global_mode() {
    forbidden_during_capture(ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT, |api, _| {
        let d = malloc(api, 64);
        let host = [0u8; 64];
        // SAFETY: both hold 64 bytes.
        unsafe { (api.core.aclrtMemcpy)(d, 64, host.as_ptr() as _, 64, ACL_MEMCPY_HOST_TO_DEVICE) }
    });
}

#[test]
fn a_synchronous_copy_from_another_thread_is_refused_in_global_mode() {
    forbidden_during_capture(ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT, |api, _| {
        let d = malloc(api, 64) as usize;
        std::thread::spawn(move || {
            common::bind(api);
            let host = [0u8; 64];
            // SAFETY: both hold 64 bytes.
            unsafe {
                (api.core.aclrtMemcpy)(
                    d as _,
                    64,
                    host.as_ptr() as _,
                    64,
                    ACL_MEMCPY_HOST_TO_DEVICE,
                )
            }
        })
        .join()
        .unwrap()
    });
}

#[test]
fn freeing_device_memory_is_refused() {
    forbidden_during_capture(ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT, |api, _| {
        let d = malloc(api, 64);
        // SAFETY: a live allocation.
        unsafe { (api.core.aclrtFree)(d) }
    });
}

#[test]
fn work_on_the_default_stream_is_refused() {
    forbidden_during_capture(ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT, |api, _| {
        let d = malloc(api, 64);
        // SAFETY: `d` holds 64 bytes; NULL is the default stream.
        unsafe { (api.core.aclrtMemsetAsync)(d, 64, 0, 64, std::ptr::null_mut()) }
    });
}

#[test]
fn querying_an_event_recorded_in_the_capture_is_refused() {
    forbidden_during_capture(ACL_ERROR_RT_EVENT_CAPTURED, |api, s| {
        let mut e = std::ptr::null_mut();
        let mut done = 0;
        // SAFETY: valid out-pointers, a live stream.
        unsafe {
            api.check((api.core.aclrtCreateEvent)(&mut e), "event")
                .unwrap();
            api.check((api.core.aclrtRecordEvent)(e, s), "record")
                .unwrap();
            let code = (api.core.aclrtQueryEventStatus)(e, &mut done);
            assert_eq!(
                (api.core.aclrtSynchronizeEvent)(e),
                ACL_ERROR_RT_EVENT_CAPTURED
            );
            code
        }
    });
}

#[test]
fn timing_events_recorded_in_the_capture_is_refused() {
    forbidden_during_capture(ACL_ERROR_RT_EVENT_CAPTURED, |api, s| {
        let (mut start, mut end) = (std::ptr::null_mut(), std::ptr::null_mut());
        let mut ms = 0.0f32;
        // SAFETY: valid out-pointers, a live stream.
        unsafe {
            for e in [&mut start, &mut end] {
                api.check((api.core.aclrtCreateEvent)(e), "event").unwrap();
                api.check((api.core.aclrtRecordEvent)(*e, s), "record")
                    .unwrap();
            }
            (api.core.aclrtEventElapsedTime)(&mut ms, start, end)
        }
    });
}

#[test]
fn waiting_on_an_event_recorded_before_the_capture_is_refused() {
    let (api, serial) = api();
    let mut e = std::ptr::null_mut();
    let s = stream(api);
    // SAFETY: valid out-pointer, a live stream.
    unsafe {
        api.check((api.core.aclrtCreateEvent)(&mut e), "event")
            .unwrap();
        api.check((api.core.aclrtRecordEvent)(e, s), "record")
            .unwrap();
    }
    drop(serial);
    let e = e as usize;
    // SAFETY: a live event and stream.
    forbidden_during_capture(ACL_ERROR_RT_CAPTURE_DEPENDENCY, move |api, s| unsafe {
        (api.core.aclrtStreamWaitEvent)(s, e as _)
    });
}

#[test]
fn forking_into_a_side_stream_is_refused() {
    forbidden_during_capture(ACL_ERROR_RT_STREAM_CAPTURE_CONFLICT, |api, s| {
        let side = stream(api);
        let mut e = std::ptr::null_mut();
        // SAFETY: valid out-pointer, live streams.
        unsafe {
            api.check((api.core.aclrtCreateEvent)(&mut e), "event")
                .unwrap();
            api.check((api.core.aclrtRecordEvent)(e, s), "record")
                .unwrap();
            (api.core.aclrtStreamWaitEvent)(side, e)
        }
    });
}

#[test]
fn an_async_copy_through_pageable_host_memory_is_refused() {
    let (api, _serial) = api();
    let s = stream(api);
    let d = malloc(api, 64);
    let pageable = [0u8; 128];
    let aligned = pageable
        .as_ptr()
        .wrapping_add(pageable.as_ptr().align_offset(64));
    begin(api, s, ACL_MODEL_RI_CAPTURE_MODE_RELAXED);
    // SAFETY: `d` holds 64 bytes, `aligned` 64 bytes of the vector.
    let code = unsafe {
        (api.core.aclrtMemcpyAsync)(d, 64, aligned as _, 64, ACL_MEMCPY_HOST_TO_DEVICE, s)
    };
    assert_eq!(code, ACL_ERROR_RT_PARAM_INVALID);
    assert!(api.recent_error_message().contains("page-locked"));
    api.check(destroy(api, end(api, s).unwrap()), "destroy")
        .unwrap();
}

#[test]
fn thread_local_mode_forbids_unsafe_calls_only_on_the_capturing_thread() {
    let (api, _serial) = api();
    let s = stream(api);
    let d = malloc(api, 64) as usize;
    begin(api, s, ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL);
    let copy = move |api: &AclApi| {
        let host = [7u8; 64];
        // SAFETY: both hold 64 bytes.
        unsafe {
            (api.core.aclrtMemcpy)(
                d as _,
                64,
                host.as_ptr() as _,
                64,
                ACL_MEMCPY_HOST_TO_DEVICE,
            )
        }
    };
    let elsewhere = std::thread::spawn(move || {
        common::bind(api);
        copy(api)
    })
    .join()
    .unwrap();
    assert_eq!(elsewhere, 0, "another thread may copy synchronously");
    assert_eq!(copy(api), ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT);
    assert_eq!(end(api, s), Err(ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED));
}

#[test]
fn a_relaxed_thread_copies_at_once_and_the_copy_is_not_recorded() {
    let (api, _serial) = api();
    let s = stream(api);
    let d = malloc(api, 16);
    write_f32(api, d, &[0.0; 4]);
    begin(api, s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL);
    let mut mode = ACL_MODEL_RI_CAPTURE_MODE_RELAXED;
    let exchange = |mode: &mut i32| {
        // SAFETY: valid in/out pointer.
        api.check(
            unsafe { (graph(api).aclmdlRICaptureThreadExchangeMode)(mode) },
            "exchange",
        )
        .unwrap()
    };
    exchange(&mut mode);
    assert_eq!(mode, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL, "the previous mode");
    write_f32(api, d, &[5.0; 4]);
    exchange(&mut mode);
    assert_eq!(mode, ACL_MODEL_RI_CAPTURE_MODE_RELAXED);
    let ri = end(api, s).unwrap();
    write_f32(api, d, &[1.0; 4]);
    api.check(replay(api, ri, s), "replay").unwrap();
    sync(api, s);
    assert_eq!(read_f32(api, d, 4), [1.0; 4], "the graph holds no copy");
    api.check(destroy(api, ri), "destroy").unwrap();
}

#[test]
fn capture_begin_and_end_misuse_get_their_codes() {
    let (api, _serial) = api();
    let g = graph(api);
    let s = stream(api);
    // SAFETY: plain calls on live streams.
    unsafe {
        assert_eq!(
            (g.aclmdlRICaptureBegin)(std::ptr::null_mut(), ACL_MODEL_RI_CAPTURE_MODE_GLOBAL),
            ACL_ERROR_RT_PARAM_INVALID,
            "the default stream cannot capture"
        );
        assert_eq!((g.aclmdlRICaptureBegin)(s, 7), ACL_ERROR_RT_PARAM_INVALID);
    }
    assert_eq!(end(api, s), Err(ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED));
    begin(api, s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL);
    // SAFETY: as above.
    unsafe {
        assert_eq!(
            (g.aclmdlRICaptureBegin)(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL),
            ACL_ERROR_RT_STREAM_CAPTURED
        );
        assert_eq!(
            (api.core.aclrtDestroyStream)(s),
            ACL_ERROR_RT_STREAM_CAPTURED
        );
    }
    let (_, ri) = status(api, s);
    assert_eq!(destroy(api, ri), ACL_ERROR_RT_MODEL_CAPTURED);
    assert_eq!(replay(api, ri, stream(api)), ACL_ERROR_RT_MODEL_CAPTURED);
    let s_addr = s as usize;
    let other_thread = std::thread::spawn(move || {
        common::bind(api);
        end(api, s_addr as _).map(|ri| ri as usize)
    })
    .join()
    .unwrap();
    assert_eq!(other_thread, Err(ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD));
    let ri = end(api, s).unwrap();
    api.check(destroy(api, ri), "destroy").unwrap();
}

#[test]
fn a_relaxed_capture_may_end_on_another_thread() {
    let (api, _serial) = api();
    let s = stream(api) as usize;
    begin(api, s as _, ACL_MODEL_RI_CAPTURE_MODE_RELAXED);
    let ri = std::thread::spawn(move || {
        common::bind(api);
        end(api, s as _).map(|ri| ri as usize)
    })
    .join()
    .unwrap()
    .unwrap();
    api.check(destroy(api, ri as _), "destroy").unwrap();
}

#[test]
fn replay_onto_a_capturing_stream_and_destroy_during_a_replay_are_refused() {
    let (api, _serial) = api();
    let (s, t) = (stream(api), stream(api));
    const BYTES: usize = 64 << 20;
    let (a, b) = (malloc(api, BYTES), malloc(api, BYTES));
    begin(api, s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL);
    for _ in 0..8 {
        // SAFETY: both hold BYTES bytes.
        api.check(
            unsafe {
                (api.core.aclrtMemcpyAsync)(b, BYTES, a, BYTES, ACL_MEMCPY_DEVICE_TO_DEVICE, s)
            },
            "d2d",
        )
        .unwrap();
    }
    let ri = end(api, s).unwrap();
    begin(api, t, ACL_MODEL_RI_CAPTURE_MODE_RELAXED);
    assert_eq!(replay(api, ri, t), ACL_ERROR_RT_STREAM_CAPTURED);
    api.check(destroy(api, end(api, t).unwrap()), "destroy")
        .unwrap();
    // Half a gigabyte of copies is still running when the next call comes.
    api.check(replay(api, ri, s), "replay").unwrap();
    assert_eq!(destroy(api, ri), ACL_ERROR_RT_MODEL_RUNNING);
    sync(api, s);
    api.check(destroy(api, ri), "destroy").unwrap();
}

#[test]
fn a_graph_replays_only_on_a_stream_of_its_own_device() {
    let (api, _serial) = api();
    let s = stream(api);
    let d = malloc(api, 64);
    begin(api, s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL);
    // SAFETY: `d` holds 64 bytes.
    api.check(
        unsafe { (api.core.aclrtMemsetAsync)(d, 64, 1, 64, s) },
        "memset",
    )
    .unwrap();
    let ri = end(api, s).unwrap();
    // SAFETY: plain call; the emulated machine has two NPUs.
    api.check(unsafe { (api.core.aclrtSetDevice)(1) }, "aclrtSetDevice")
        .unwrap();
    let other = stream(api);
    assert_eq!(replay(api, ri, other), ACL_ERROR_RT_PARAM_INVALID);
    assert!(api.recent_error_message().contains("NPU 0"));
    common::bind(api);
    let mut bad = 9;
    // SAFETY: valid in/out pointer.
    let code = unsafe { (graph(api).aclmdlRICaptureThreadExchangeMode)(&mut bad) };
    assert_eq!(code, ACL_ERROR_RT_PARAM_INVALID, "an unknown mode");
    api.check(destroy(api, ri), "destroy").unwrap();
}

/// The emulated runtime without one of the graph functions, as a CANN older than 8.1.RC1.
struct WithoutGraph;

impl SymbolSource for WithoutGraph {
    fn lookup(&self, name: &str) -> Option<*const c_void> {
        (name != "aclmdlRICaptureGetInfo")
            .then(|| EmulatedRuntime.lookup(name))
            .flatten()
    }

    fn describe(&self) -> String {
        "emulated runtime without aclmdlRICaptureGetInfo".into()
    }
}

#[test]
fn a_runtime_without_the_graph_functions_loads_and_says_what_it_lacks() {
    let api = AclApi::new(Box::new(WithoutGraph)).expect("the graph functions are optional");
    let why = api.graph.err().expect("no graph support");
    assert!(why.contains("aclmdlRICaptureGetInfo"), "{why}");
    assert!(!why.contains("aclmdlRICaptureBegin"), "{why}");
}

/// Binds device 1 (a fault is sticky, so the tests that fault use it), runs `f`, then resets
/// device 1 and binds device 0 again.
fn on_device_1(api: &'static AclApi, f: impl FnOnce(aclrtStream)) {
    // SAFETY: plain call; the emulated machine has two NPUs.
    api.check(unsafe { (api.core.aclrtSetDevice)(1) }, "aclrtSetDevice")
        .unwrap();
    f(stream(api));
    // SAFETY: device 1 is ours; the forced reset clears the fault whoever bound the device.
    api.check(unsafe { force_reset(api)(1) }, "reset").unwrap();
    common::bind(api);
}

/// The replay's status at the stream synchronisation, and the runtime's message.
fn replay_and_sync(api: &AclApi, ri: aclmdlRI, s: aclrtStream) -> (i32, String) {
    api.check(replay(api, ri, s), "aclmdlRIExecuteAsync")
        .unwrap();
    // SAFETY: a live stream.
    let code = unsafe { (api.core.aclrtSynchronizeStream)(s) };
    (code, api.recent_error_message())
}

#[test]
fn a_block_the_caching_allocator_freed_after_the_capture_faults_the_replay() {
    let (api, _serial) = api();
    let freed = api
        .debug_block_freed
        .expect("the emulated runtime has the allocator debug hook");
    on_device_1(api, |s| {
        let (a, b) = (malloc(api, 64), malloc(api, 64));
        write_f32(api, a, &[7.0; 16]);
        // Freed (and handed out again) before the capture: the graph may use it.
        // SAFETY: a live allocation.
        api.check(unsafe { freed(a) }, "ascendEmuDebugBlockFreed")
            .unwrap();
        begin(api, s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL);
        // SAFETY: both hold 64 bytes.
        api.check(
            unsafe { (api.core.aclrtMemcpyAsync)(b, 64, a, 64, ACL_MEMCPY_DEVICE_TO_DEVICE, s) },
            "d2d",
        )
        .unwrap();
        let ri = end(api, s).unwrap();
        assert_eq!(replay_and_sync(api, ri, s).0, 0);
        assert_eq!(read_f32(api, b, 16), [7.0; 16]);

        // Freed by the allocator after the graph recorded the copy: eager work may still use
        // the block (it is the next owner's), the graph's replay may not.
        // SAFETY: a live allocation.
        api.check(unsafe { freed(a) }, "ascendEmuDebugBlockFreed")
            .unwrap();
        // SAFETY: both hold 64 bytes.
        api.check(
            unsafe { (api.core.aclrtMemcpyAsync)(a, 64, b, 64, ACL_MEMCPY_DEVICE_TO_DEVICE, s) },
            "eager d2d",
        )
        .unwrap();
        sync(api, s);
        let (code, message) = replay_and_sync(api, ri, s);
        assert_ne!(
            code, 0,
            "the replay used a block freed after it was recorded"
        );
        assert!(
            message.contains("graph replay") && message.contains("caching allocator freed"),
            "{message}"
        );
        api.check(destroy(api, ri), "aclmdlRIDestroy").unwrap();
        // SAFETY: a host pointer is not device memory.
        let host = unsafe { freed(&mut 0u8 as *mut u8 as *mut c_void) };
        assert_eq!(host, ACL_ERROR_RT_PARAM_INVALID);
    });
}

#[test]
fn a_recorded_executor_rebound_after_the_capture_faults_the_replay() {
    let (api, _serial) = api();
    on_device_1(api, |s| {
        let (x, y, out, other) = (
            malloc(api, 64),
            malloc(api, 64),
            malloc(api, 64),
            malloc(api, 64),
        );
        write_f32(api, x, &[1.0; 16]);
        write_f32(api, y, &[2.0; 16]);
        // SAFETY: each buffer holds 16 f32.
        let t = |p| unsafe { TensorDesc::new(api, &[16], &[1], 0, DataType::F32, 16, p) }.unwrap();
        let (tx, ty, to) = (t(x), t(y), t(out));
        let alpha = ScalarDesc::new(api, HostScalar::Float(1.0)).unwrap();
        // SAFETY: the table types each operator with its declared signature.
        let (phase1, phase2) = unsafe {
            api.ops
                .aclnnAdd
                .resolve(api.source(), "aclnnAdd", "aclnnAddGetWorkspaceSize")
        }
        .unwrap();
        let (mut ws, mut exec) = (0u64, std::ptr::null_mut());
        // SAFETY: live descriptors and out-pointers; a fresh executor made repeatable.
        unsafe {
            let status = phase1(
                tx.as_ptr(),
                ty.as_ptr(),
                alpha.as_ptr(),
                to.as_ptr(),
                &mut ws,
                &mut exec,
            );
            api.check(status, "aclnnAddGetWorkspaceSize").unwrap();
            let repeatable = api.optional.aclSetAclOpExecutorRepeatable.unwrap();
            api.check(repeatable(exec), "aclSetAclOpExecutorRepeatable")
                .unwrap();
        }
        begin(api, s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL);
        // SAFETY: the repeatable executor of aclnnAdd; no workspace.
        api.check(
            unsafe { phase2(std::ptr::null_mut(), 0, exec, s) },
            "aclnnAdd",
        )
        .unwrap();
        let ri = end(api, s).unwrap();
        assert_eq!(replay_and_sync(api, ri, s).0, 0);
        assert_eq!(read_f32(api, out, 16), [3.0; 16]);

        // Eager use of the same executor with another input, as the executor cache does.
        let set_input = api.optional.aclSetInputTensorAddr.unwrap();
        // SAFETY: slot 0 of the executor, its own descriptor; `other` holds 16 f32.
        api.check(
            unsafe { set_input(exec, 0, tx.as_ptr(), other) },
            "aclSetInputTensorAddr",
        )
        .unwrap();
        let (code, message) = replay_and_sync(api, ri, s);
        assert_eq!(code, ACL_ERROR_RT_AICORE_EXCEPTION, "{message}");
        assert!(
            message.contains("graph replay") && message.contains("rebound"),
            "{message}"
        );
        api.check(destroy(api, ri), "aclmdlRIDestroy").unwrap();
        // SAFETY: the executor is ours, destroyed once.
        api.check(
            unsafe { (api.core.aclDestroyAclOpExecutor)(exec) },
            "aclDestroyAclOpExecutor",
        )
        .unwrap();
    });
}
