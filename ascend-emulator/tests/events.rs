//! Timing with events through the function table: `aclrtEventElapsedTime` measures the work a
//! stream ran between two records, and refuses, with CANN's code, each use CANN does not time
//! (`../shared/ascend/acl-abi.md` §3.4; the runtime's rules as `Event::elapsed_since` cites
//! them). One test per rule.
//!
//! The tests count live events, so they take one lock and never overlap.

mod common;

use std::ffi::c_void;
use std::sync::MutexGuard;
use std::time::Instant;

use ascend_acl::types::event_flag::*;
use ascend_acl::types::event_status::*;
use ascend_acl::types::status::*;
use ascend_acl::types::*;
use ascend_acl::AclApi;
use ascend_emulator::live_events;
use common::stream;

/// The table over the emulated runtime with device 0 bound to the calling thread, and the lock
/// that keeps this file's tests apart.
fn api() -> (&'static AclApi, MutexGuard<'static, ()>) {
    let serial = common::serial();
    (common::api(), serial)
}

/// An event created with `flag` (`None`: `aclrtCreateEvent`).
fn event(api: &AclApi, flag: Option<u32>) -> aclrtEvent {
    let mut e = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    let status = unsafe {
        match flag {
            Some(flag) => (api.core.aclrtCreateEventWithFlag)(&mut e, flag),
            None => (api.core.aclrtCreateEvent)(&mut e),
        }
    };
    api.check(status, "create event").unwrap();
    e
}

fn timed(api: &AclApi) -> aclrtEvent {
    event(api, Some(ACL_EVENT_TIME_LINE))
}

fn record(api: &AclApi, e: aclrtEvent, s: aclrtStream) {
    // SAFETY: a live event and stream.
    api.check(unsafe { (api.core.aclrtRecordEvent)(e, s) }, "record")
        .unwrap();
}

fn sync(api: &AclApi, s: aclrtStream) {
    // SAFETY: a live stream.
    api.check(unsafe { (api.core.aclrtSynchronizeStream)(s) }, "sync")
        .unwrap();
}

fn destroy(api: &AclApi, e: aclrtEvent) {
    // SAFETY: a live event, destroyed once.
    api.check(unsafe { (api.core.aclrtDestroyEvent)(e) }, "destroy")
        .unwrap();
}

/// `aclrtEventElapsedTime(start, end)`: the milliseconds, or the status.
fn elapsed(api: &AclApi, start: aclrtEvent, end: aclrtEvent) -> Result<f32, i32> {
    let mut ms = f32::NAN;
    // SAFETY: valid out-pointer; the events are whatever the test passes.
    match unsafe { (api.core.aclrtEventElapsedTime)(&mut ms, start, end) } {
        0 => Ok(ms),
        code => Err(code),
    }
}

/// A device buffer of `bytes`, to be filled by `memsets`.
struct Buffer(*mut c_void, usize);

impl Buffer {
    fn new(api: &AclApi, bytes: usize) -> Self {
        let mut p = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        api.check(
            unsafe { (api.core.aclrtMalloc)(&mut p, bytes, ACL_MEM_MALLOC_HUGE_FIRST) },
            "aclrtMalloc",
        )
        .unwrap();
        Self(p, bytes)
    }

    /// Queues `n` fills of the whole buffer on `s`: work whose device time grows with `n`.
    fn memsets(&self, api: &AclApi, s: aclrtStream, n: usize) {
        for i in 0..n {
            // SAFETY: the buffer holds `self.1` bytes.
            let status =
                unsafe { (api.core.aclrtMemsetAsync)(self.0, self.1, i as i32, self.1, s) };
            api.check(status, "memset").unwrap();
        }
    }

    fn free(self, api: &AclApi) {
        // SAFETY: a live allocation, the stream synchronised.
        api.check(unsafe { (api.core.aclrtFree)(self.0) }, "free")
            .unwrap();
    }
}

/// The device time of `n` fills of `buffer` between two records on `s`, with the host time
/// from before the first record to after the synchronisation (which bounds it).
fn window(api: &AclApi, s: aclrtStream, buffer: &Buffer, n: usize) -> (f32, f32) {
    let (start, end) = (timed(api), timed(api));
    let host = Instant::now();
    record(api, start, s);
    buffer.memsets(api, s, n);
    record(api, end, s);
    // SAFETY: a live event.
    api.check(
        unsafe { (api.core.aclrtSynchronizeEvent)(end) },
        "sync event",
    )
    .unwrap();
    let host_ms = host.elapsed().as_secs_f32() * 1e3;
    let ms = elapsed(api, start, end).unwrap();
    destroy(api, start);
    destroy(api, end);
    (ms, host_ms)
}

#[test]
fn the_time_between_two_records_is_the_work_the_stream_ran_between_them() {
    let (api, _serial) = api();
    let s = stream(api);
    let buffer = Buffer::new(api, 32 << 20);
    // The first fill also maps the buffer's host pages: not the work being compared.
    buffer.memsets(api, s, 1);
    sync(api, s);
    let (empty, empty_host) = window(api, s, &buffer, 0);
    let (one, one_host) = window(api, s, &buffer, 1);
    let (sixteen, sixteen_host) = window(api, s, &buffer, 16);
    for (ms, host) in [
        (empty, empty_host),
        (one, one_host),
        (sixteen, sixteen_host),
    ] {
        assert!(
            (0.0..=host).contains(&ms),
            "{ms} ms on the device, {host} ms on the host around it"
        );
    }
    assert!(one > 0.0, "a 32 MiB fill took {one} ms");
    assert!(
        sixteen > one && sixteen > empty,
        "16 fills {sixteen} ms, one {one} ms, none {empty} ms"
    );
    buffer.free(api);
}

#[test]
fn an_event_created_by_aclrtcreateevent_is_timed_and_one_without_time_line_is_not() {
    let (api, _serial) = api();
    let s = stream(api);
    let (plain, sync_only, timed) = (
        event(api, None),
        event(api, Some(ACL_EVENT_SYNC)),
        timed(api),
    );
    for e in [plain, sync_only, timed] {
        record(api, e, s);
    }
    sync(api, s);
    assert!(elapsed(api, plain, timed).unwrap() >= 0.0);
    assert_eq!(
        elapsed(api, sync_only, timed),
        Err(ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID)
    );
    assert_eq!(
        elapsed(api, timed, sync_only),
        Err(ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID)
    );
    assert!(api.recent_error_message().contains("ACL_EVENT_TIME_LINE"));
    for e in [plain, sync_only, timed] {
        destroy(api, e);
    }
}

#[test]
fn unknown_event_flags_are_refused() {
    let (api, _serial) = api();
    let mut e = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    let status = unsafe { (api.core.aclrtCreateEventWithFlag)(&mut e, 0x4) };
    assert_eq!(status, ACL_ERROR_INVALID_PARAM);
}

#[test]
fn timing_an_event_never_recorded_is_refused() {
    let (api, _serial) = api();
    let s = stream(api);
    let (start, end) = (timed(api), timed(api));
    record(api, start, s);
    sync(api, s);
    assert_eq!(elapsed(api, start, end), Err(ACL_ERROR_RT_INTERNAL_ERROR));
    assert_eq!(elapsed(api, end, start), Err(ACL_ERROR_RT_INTERNAL_ERROR));
    assert!(api.recent_error_message().contains("never recorded"));
    destroy(api, start);
    destroy(api, end);
}

#[test]
fn timing_events_recorded_on_two_streams_is_refused() {
    let (api, _serial) = api();
    let (a, b) = (stream(api), stream(api));
    let (start, end) = (timed(api), timed(api));
    record(api, start, a);
    record(api, end, b);
    sync(api, a);
    sync(api, b);
    assert_eq!(elapsed(api, start, end), Err(ACL_ERROR_RT_PARAM_INVALID));
    assert!(api.recent_error_message().contains("different streams"));
    // Recorded again on one stream, the pair is timed.
    record(api, end, a);
    sync(api, a);
    assert!(elapsed(api, start, end).unwrap() >= 0.0);
    destroy(api, start);
    destroy(api, end);
}

#[test]
fn timing_an_event_the_stream_has_not_reached_is_refused() {
    let (api, _serial) = api();
    let s = stream(api);
    let buffer = Buffer::new(api, 64 << 20);
    let (start, end) = (timed(api), timed(api));
    // The elapsed-time call must come before the stream reaches `end`, which the query after it
    // confirms; more work makes that likelier on a loaded machine.
    let mut refused = None;
    for fills in [8, 32, 128] {
        record(api, start, s);
        buffer.memsets(api, s, fills);
        record(api, end, s);
        let result = elapsed(api, start, end);
        let mut status = -1;
        // SAFETY: a live event, valid out-pointer.
        api.check(
            unsafe { (api.core.aclrtQueryEventStatus)(end, &mut status) },
            "query",
        )
        .unwrap();
        sync(api, s);
        if status == ACL_EVENT_RECORDED_STATUS_NOT_READY {
            refused = Some(result);
            break;
        }
    }
    let result = refused.expect("the stream finished 128 fills of 64 MiB before the next call");
    assert_eq!(result, Err(ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID));
    assert!(api.recent_error_message().contains("not reached"));
    // Once reached, the same pair is timed.
    assert!(elapsed(api, start, end).unwrap() > 0.0);
    destroy(api, start);
    destroy(api, end);
    buffer.free(api);
}

#[test]
fn timing_an_end_recorded_before_its_start_is_refused() {
    let (api, _serial) = api();
    let s = stream(api);
    let buffer = Buffer::new(api, 1 << 20);
    let (start, end) = (timed(api), timed(api));
    record(api, end, s);
    buffer.memsets(api, s, 1);
    record(api, start, s);
    sync(api, s);
    assert_eq!(
        elapsed(api, start, end),
        Err(ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL)
    );
    assert!(elapsed(api, end, start).unwrap() >= 0.0);
    destroy(api, start);
    destroy(api, end);
    buffer.free(api);
}

#[test]
fn timing_a_destroyed_event_is_refused_and_destroying_frees_it() {
    let (api, _serial) = api();
    let s = stream(api);
    let before = live_events();
    let (start, end) = (timed(api), timed(api));
    assert_eq!(live_events(), before + 2);
    record(api, start, s);
    record(api, end, s);
    sync(api, s);
    destroy(api, start);
    assert_eq!(elapsed(api, start, end), Err(ACL_ERROR_RT_PARAM_INVALID));
    destroy(api, end);
    assert_eq!(live_events(), before);
}
