//! Profiling windows on ACL events: a window opens with a timed event recorded on the
//! context's stream and closes with a second one; the device time between them is what the
//! stream ran in between (`aclrtEventElapsedTime`), read once the device has reached the end.
//!
//! Windows nest and overlap (each has its own events) and are keyed by a process-wide id. A
//! window belongs to the stream it was opened on: one stream per context, so the context's id
//! names it, and a reset device's new context is another stream. Closing a window from another
//! stream is refused (the pair would time nothing), and the window stays open to be closed
//! where it belongs or abandoned. Nothing waits while a window is open or when it closes: only
//! [`ClosedWindow::measure`] waits, for the end event.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::context::DeviceContext;
use crate::acl::types::aclrtEvent;
use crate::acl::types::event_flag::ACL_EVENT_TIME_LINE;
use crate::acl::{AclApi, AclError, AclResult};

/// An event created with `ACL_EVENT_TIME_LINE` (the flag timing needs, acl-abi.md §3.4),
/// destroyed on drop.
struct TimedEvent {
    api: &'static AclApi,
    handle: aclrtEvent,
}

// SAFETY: an event handle may be recorded, waited on and destroyed from any thread.
unsafe impl Send for TimedEvent {}
unsafe impl Sync for TimedEvent {}

impl TimedEvent {
    /// Creates a timed event and records it on `ctx`'s stream, in order with the work queued
    /// there.
    fn record(ctx: &DeviceContext) -> AclResult<Self> {
        let api = ctx.bind();
        let mut handle = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        api.check(
            unsafe { (api.core.aclrtCreateEventWithFlag)(&mut handle, ACL_EVENT_TIME_LINE) },
            "aclrtCreateEventWithFlag",
        )?;
        let event = Self { api, handle };
        // SAFETY: a live event and the context's stream.
        let status = ctx.issue(|| unsafe { (api.core.aclrtRecordEvent)(handle, ctx.stream()) })?;
        api.check(status, "aclrtRecordEvent")?;
        Ok(event)
    }
}

impl Drop for TimedEvent {
    fn drop(&mut self) {
        // SAFETY: a live event, destroyed once. A failure leaves nothing to undo.
        unsafe { (self.api.core.aclrtDestroyEvent)(self.handle) };
    }
}

/// An open window: its start event and the stream (context id) it was recorded on.
struct Open {
    stream: u64,
    start: TimedEvent,
}

fn windows() -> &'static Mutex<HashMap<u64, Open>> {
    static WINDOWS: OnceLock<Mutex<HashMap<u64, Open>>> = OnceLock::new();
    WINDOWS.get_or_init(Default::default)
}

/// A window opened by [`DeviceContext::profile_start`]: its id and the stream it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WindowId {
    /// Unique in the process.
    pub id: u64,
    /// The stream it was opened on ([`DeviceContext::stream_id`]).
    pub opened_on: u64,
}

/// A closed window, measured by [`ClosedWindow::measure`].
pub struct ClosedWindow {
    ctx: Arc<DeviceContext>,
    start: TimedEvent,
    end: TimedEvent,
}

impl ClosedWindow {
    /// Waits until the device has reached the window's end, then reads the device time
    /// between its two events. A device fault raised inside the window (or before it, on the
    /// stream) is the error: the work did not run, so there is nothing to measure.
    pub fn measure(self) -> AclResult<Duration> {
        // The calling thread may be one that never used the device (a server's response task).
        let api = self.ctx.bind();
        // SAFETY: live events recorded on the context's stream; valid out-pointer.
        unsafe {
            api.check(
                (api.core.aclrtSynchronizeEvent)(self.end.handle),
                "aclrtSynchronizeEvent",
            )?;
            let mut ms = 0.0f32;
            api.check(
                (api.core.aclrtEventElapsedTime)(&mut ms, self.start.handle, self.end.handle),
                "aclrtEventElapsedTime",
            )?;
            Ok(Duration::from_secs_f64(f64::from(ms) / 1e3))
        }
    }
}

impl DeviceContext {
    /// Opens a profiling window at the stream's current position. Refused during a graph
    /// capture: the event would be a node of the graph, not a point of the stream, and
    /// measuring it would invalidate the capture (aclgraph-abi.md §3, `EVENT_CAPTURED`).
    pub fn profile_start(&self) -> AclResult<WindowId> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        self.refuse_capture("open")?;
        let start = TimedEvent::record(self)?;
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let stream = self.stream_id();
        windows().lock().unwrap().insert(id, Open { stream, start });
        Ok(WindowId {
            id,
            opened_on: stream,
        })
    }

    /// Closes `window` at the stream's current position, recording its end after everything
    /// queued so far. Refused (the window stays open) when it was opened on another stream,
    /// or during a graph capture; an unknown window is an error.
    pub fn profile_end(self: &Arc<Self>, window: WindowId) -> AclResult<ClosedWindow> {
        self.refuse_capture("close")?;
        let mut open = windows().lock().unwrap();
        match open.get(&window.id) {
            None => {
                return Err(AclError::InvalidArgument(format!(
                    "profiling window {} is not open (already closed or abandoned, or never \
                     opened)",
                    window.id
                )))
            }
            Some(w) if w.stream != window.opened_on || w.stream != self.stream_id() => {
                return Err(AclError::InvalidArgument(format!(
                    "profiling window {} was opened on stream {} and cannot be closed on \
                     stream {} ({}): a window closes on the stream it was opened on (the \
                     device's context when it opened; a reset device has a new one)",
                    window.id,
                    w.stream,
                    self.stream_id(),
                    self.device()
                )))
            }
            Some(_) => {}
        }
        let end = TimedEvent::record(self)?;
        let start = open
            .remove(&window.id)
            .expect("checked above, under the same lock")
            .start;
        Ok(ClosedWindow {
            ctx: self.clone(),
            start,
            end,
        })
    }

    /// Windows open on this context's stream.
    pub fn open_windows(&self) -> usize {
        let stream = self.stream_id();
        windows()
            .lock()
            .unwrap()
            .values()
            .filter(|w| w.stream == stream)
            .count()
    }

    fn refuse_capture(&self, what: &str) -> AclResult<()> {
        if self.is_capturing() {
            return Err(AclError::InvalidArgument(format!(
                "a profiling window cannot {what} while a graph is captured on {}: its event \
                 would be recorded into the graph, not timed on the stream",
                self.device()
            )));
        }
        Ok(())
    }
}

/// Drops `window` without measuring it, from wherever the caller is: its start event is
/// destroyed and no end is recorded. Nothing to do for a window that is not open.
pub fn abandon(window: WindowId) {
    let mut open = windows().lock().unwrap();
    if open
        .get(&window.id)
        .is_some_and(|w| w.stream == window.opened_on)
    {
        open.remove(&window.id);
    }
}
