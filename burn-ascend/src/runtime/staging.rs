//! Page-locked staging for host-to-device uploads.
//!
//! `aclrtMemcpyAsync` is asynchronous only from page-locked host memory (`aclrtMallocHost`),
//! and CANN 8.0 asks for 64-byte aligned host addresses (acl-abi.md 3.3 and trap 14). So every
//! upload the op path makes (tensor data, index tables, the programs of fused element-wise
//! blocks) goes through one page-locked ring per device context: the bytes are copied into the
//! ring, the copy is queued on the stream, and an event recorded behind it marks when that part
//! of the ring may be written again. The host waits only when the ring wraps onto data the
//! stream has not copied yet, never for the queue as a whole.

use std::collections::VecDeque;
use std::ffi::c_void;

use crate::acl::types::event_status::ACL_EVENT_RECORDED_STATUS_COMPLETE;
use crate::acl::types::memcpy_kind::ACL_MEMCPY_HOST_TO_DEVICE;
use crate::acl::types::{aclrtEvent, aclrtStream};
use crate::acl::{AclApi, AclResult};

/// Bytes of page-locked memory per device context.
pub const STAGING_BYTES: usize = 8 << 20;
/// Largest piece one copy stages: a quarter of the ring, so a large upload streams through it.
const PIECE: usize = STAGING_BYTES / 4;
/// Host addresses of asynchronous copies are 64-byte aligned (CANN 8.0).
const ALIGN: usize = 64;

/// A part of the ring the stream has yet to copy from.
struct InFlight {
    start: usize,
    end: usize,
    done: aclrtEvent,
}

/// The page-locked ring of one device context.
pub(crate) struct StagingRing {
    base: *mut u8,
    head: usize,
    in_flight: VecDeque<InFlight>,
    spare_events: Vec<aclrtEvent>,
}

// SAFETY: the ring is used under its context's mutex; the pointers are page-locked host memory
// and event handles, valid from any thread.
unsafe impl Send for StagingRing {}

impl StagingRing {
    /// Allocates the ring (the calling thread has the device bound).
    pub fn new(api: &AclApi) -> AclResult<Self> {
        let mut base = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        api.check(
            unsafe { (api.core.aclrtMallocHost)(&mut base, STAGING_BYTES) },
            "aclrtMallocHost",
        )?;
        Ok(Self {
            base: base as *mut u8,
            head: 0,
            in_flight: VecDeque::new(),
            spare_events: Vec::new(),
        })
    }

    /// Queues the copy of `bytes` into device memory at `dst` (holding `dst_len` bytes) on
    /// `stream`, in pieces through the ring.
    pub fn upload(
        &mut self,
        api: &AclApi,
        stream: aclrtStream,
        dst: *mut c_void,
        dst_len: usize,
        bytes: &[u8],
    ) -> AclResult<()> {
        for (i, piece) in bytes.chunks(PIECE).enumerate() {
            let at = i * PIECE;
            let start = self.reserve(api, piece.len())?;
            // SAFETY: the reservation lies in the ring and the stream no longer reads it.
            unsafe {
                std::ptr::copy_nonoverlapping(piece.as_ptr(), self.base.add(start), piece.len());
            }
            // SAFETY: `dst + at` holds `dst_len - at` bytes; the staged bytes stay untouched
            // until the event recorded below completes.
            let status = unsafe {
                (api.core.aclrtMemcpyAsync)(
                    (dst as *mut u8).add(at) as *mut c_void,
                    dst_len - at,
                    self.base.add(start) as *const c_void,
                    piece.len(),
                    ACL_MEMCPY_HOST_TO_DEVICE,
                    stream,
                )
            };
            api.check(status, "aclrtMemcpyAsync")?;
            let done = self.event(api)?;
            // SAFETY: a live event and the context's stream.
            api.check(
                unsafe { (api.core.aclrtRecordEvent)(done, stream) },
                "aclrtRecordEvent",
            )?;
            self.in_flight.push_back(InFlight {
                start,
                end: start + piece.len().div_ceil(ALIGN) * ALIGN,
                done,
            });
        }
        Ok(())
    }

    /// The offset of `len` free bytes, waiting for the stream to finish with them if needed.
    fn reserve(&mut self, api: &AclApi, len: usize) -> AclResult<usize> {
        let len = len.div_ceil(ALIGN) * ALIGN;
        let start = if self.head + len > STAGING_BYTES {
            0
        } else {
            self.head
        };
        let end = start + len;
        // Copies complete in stream order, so the oldest reservation is released first.
        while let Some(oldest) = self.in_flight.front() {
            let overlaps = oldest.start < end && start < oldest.end;
            if overlaps {
                // SAFETY: a live event recorded on the context's stream.
                api.check(
                    unsafe { (api.core.aclrtSynchronizeEvent)(oldest.done) },
                    "aclrtSynchronizeEvent",
                )?;
            } else if !self.complete(api, oldest.done)? {
                break;
            }
            let done = self.in_flight.pop_front().expect("front exists").done;
            self.spare_events.push(done);
        }
        self.head = end;
        Ok(start)
    }

    fn complete(&self, api: &AclApi, event: aclrtEvent) -> AclResult<bool> {
        let mut status = 0;
        // SAFETY: a live event; valid out-pointer.
        api.check(
            unsafe { (api.core.aclrtQueryEventStatus)(event, &mut status) },
            "aclrtQueryEventStatus",
        )?;
        Ok(status == ACL_EVENT_RECORDED_STATUS_COMPLETE)
    }

    fn event(&mut self, api: &AclApi) -> AclResult<aclrtEvent> {
        if let Some(e) = self.spare_events.pop() {
            return Ok(e);
        }
        let mut e = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        api.check(
            unsafe { (api.core.aclrtCreateEvent)(&mut e) },
            "aclrtCreateEvent",
        )?;
        Ok(e)
    }

    /// Frees the ring and its events; the stream has finished with them (the context
    /// synchronised it, or reset the device).
    pub fn release(self, api: &AclApi) {
        // SAFETY: nothing reads the ring or waits on the events any more; each is released once.
        unsafe {
            for e in self
                .in_flight
                .iter()
                .map(|f| f.done)
                .chain(self.spare_events)
            {
                (api.core.aclrtDestroyEvent)(e);
            }
            (api.core.aclrtFreeHost)(self.base as *mut c_void);
        }
    }
}
