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

/// Where the next piece goes in a ring whose pieces the stream releases in queue order.
///
/// After a wrap to offset 0 the oldest piece can be one of the skipped tail, which does not
/// overlap the new reservation while a newer piece at the head still does: so the ring looks for
/// the *newest* overlapping piece, waits for it, and with it (stream order) for every older one.
#[derive(Default)]
struct Placement {
    head: usize,
    pieces: VecDeque<InFlight>,
}

impl Placement {
    /// Reserves `len` bytes (a multiple of [`ALIGN`], at most [`STAGING_BYTES`]): `wait` blocks
    /// until a piece's copy has run, `done` asks whether it has; released pieces' events go to
    /// `spare`. Returns the offset.
    fn reserve<E>(
        &mut self,
        len: usize,
        mut wait: impl FnMut(aclrtEvent) -> Result<(), E>,
        mut done: impl FnMut(aclrtEvent) -> Result<bool, E>,
        spare: &mut Vec<aclrtEvent>,
    ) -> Result<usize, E> {
        let start = if self.head + len > STAGING_BYTES {
            0
        } else {
            self.head
        };
        let end = start + len;
        if let Some(newest) = self
            .pieces
            .iter()
            .rposition(|p| p.start < end && start < p.end)
        {
            wait(self.pieces[newest].done)?;
            spare.extend(self.pieces.drain(..=newest).map(|p| p.done));
        }
        // Recycle the events of copies that have run, so the ring holds few.
        while let Some(oldest) = self.pieces.front() {
            if !done(oldest.done)? {
                break;
            }
            spare.extend(self.pieces.pop_front().map(|p| p.done));
        }
        self.head = end;
        Ok(start)
    }
}

/// The page-locked ring of one device context.
pub(crate) struct StagingRing {
    base: *mut u8,
    placement: Placement,
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
            placement: Placement::default(),
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
            self.placement.pieces.push_back(InFlight {
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
        self.placement.reserve(
            len,
            // SAFETY: a live event recorded on the context's stream.
            |e| {
                api.check(
                    unsafe { (api.core.aclrtSynchronizeEvent)(e) },
                    "aclrtSynchronizeEvent",
                )
            },
            |e| Self::complete(api, e),
            &mut self.spare_events,
        )
    }

    fn complete(api: &AclApi, event: aclrtEvent) -> AclResult<bool> {
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
                .placement
                .pieces
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

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    /// A stream that copies nothing until told to wait for a piece, and then (stream order)
    /// every piece queued up to it; no reservation may overlap a piece still pending.
    #[test]
    fn a_reservation_never_overlaps_a_pending_copy() {
        // The sequence that overwrote the second lap's first piece: the oldest pending piece
        // after the wrap (the first lap's 0.5 MiB tail) does not overlap, a newer one does.
        let sizes = [2.0, 2.0, 2.0, 1.5, 0.5, 2.0, 2.0, 2.0, 1.25, 1.0];
        let mut ring = Placement::default();
        let mut spare = Vec::new();
        // Event "handles" are queue positions; `completed` is how far the stream has run.
        let completed = std::cell::Cell::new(0usize);
        let mut pending: Vec<(usize, usize, usize)> = Vec::new();
        for (n, mib) in sizes.iter().enumerate() {
            let len = (mib * MIB as f64) as usize;
            let start = ring
                .reserve(
                    len,
                    |e| {
                        completed.set(completed.get().max(e as usize));
                        Ok::<_, ()>(())
                    },
                    |e| Ok(e as usize <= completed.get()),
                    &mut spare,
                )
                .unwrap();
            pending.retain(|&(_, _, seq)| seq > completed.get());
            for &(s, e, seq) in &pending {
                assert!(
                    e <= start || start + len <= s,
                    "reservation {n} [{start}, +{len}) overwrites queued copy {seq} [{s}, {e})"
                );
            }
            let seq = n + 1;
            ring.pieces.push_back(InFlight {
                start,
                end: start + len,
                done: seq as aclrtEvent,
            });
            pending.push((start, start + len, seq));
        }
        // Stream order: waiting only ever went as far as needed (the tail is still queued).
        assert!(completed.get() < sizes.len());
    }
}
