//! Emulated streams and events: each stream is a FIFO run by its own worker thread, so work
//! is queued, never run inside the launching call, and runs in launch order.
//!
//! Device faults are sticky, as an AI Core exception leaves the device context unusable until
//! it is reset (the safe model, as CUDA does for kernel faults): the first failing task records
//! its fault on the device ([`DeviceFault`]); from then on no work of that device runs (queued
//! tasks are skipped, new launches are refused) and every synchronisation reports that same
//! fault, naming the op or kernel that raised it, until `aclrtResetDevice`. Markers (event
//! records and waits) still run, so nothing waiting on the device hangs.
//!
//! A stream that captures a graph (`graph.rs`) records the work issued to it instead of running
//! it; tasks are `FnMut` so that a replay can run them again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use super::fault::{fault, panic_text, Fault};
use super::graph::{self, Model};
use ascend_acl::types::status::*;

/// Work queued on a stream (run again by each replay of a graph that recorded it).
pub(crate) type Task = Box<dyn FnMut() -> Result<(), Fault> + Send>;

/// A task recorded by a capture, with the name and modelled bytes of the aclnn operator it is
/// (counted when a replay is queued, as a launch is counted when it is queued).
pub(crate) struct Recorded {
    pub task: Task,
    pub aclnn: Option<(&'static str, u64)>,
    /// The logical-free tick when it was recorded (`memory.rs`).
    pub recorded_at: u64,
}

/// The sticky fault state of one device context.
#[derive(Default)]
pub(crate) struct DeviceFault {
    fault: Mutex<Option<Fault>>,
}

impl DeviceFault {
    /// The fault that stopped the device, if any.
    pub fn get(&self) -> Option<Fault> {
        self.fault.lock().unwrap().clone()
    }

    /// Fails with the device's fault, if it has one.
    pub fn check(&self) -> Result<(), Fault> {
        match self.get() {
            Some(f) => Err(sticky(f)),
            None => Ok(()),
        }
    }

    fn record(&self, f: Fault) {
        self.fault.lock().unwrap().get_or_insert(f);
    }

    /// Clears the fault (`aclrtResetDevice`).
    pub fn clear(&self) {
        self.fault.lock().unwrap().take();
    }
}

/// The fault as reported by calls after it: same code, the original message.
fn sticky(f: Fault) -> Fault {
    Fault {
        code: f.code,
        message: format!(
            "{} (the device stopped at this fault: every later call on it fails until \
             aclrtResetDevice)",
            f.message
        ),
    }
}

enum Job {
    /// Device work: skipped once the device has faulted.
    Work(Task),
    /// Host bookkeeping (events): always runs.
    Marker(Box<dyn FnOnce() + Send>),
}

/// One stream and its worker.
pub(crate) struct Stream {
    device: i32,
    /// Unique in the process: which stream an event was recorded on.
    id: u64,
    /// The device's default stream (NULL handle), which may not be used during a capture.
    default: bool,
    /// The graph this stream is capturing into.
    capture: Mutex<Option<Arc<Model>>>,
    fault: Arc<DeviceFault>,
    sender: Mutex<Option<Sender<Job>>>,
    pending: Arc<(Mutex<usize>, Condvar)>,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Stream {
    pub fn new(device: i32, default: bool, fault_state: Arc<DeviceFault>) -> Arc<Self> {
        let (tx, rx) = channel::<Job>();
        let pending: Arc<(Mutex<usize>, Condvar)> = Arc::default();
        let (done, faults) = (pending.clone(), fault_state.clone());
        let worker = std::thread::Builder::new()
            .name(format!("emulated-npu{device}-stream"))
            .spawn(move || {
                for job in rx {
                    match job {
                        Job::Marker(mark) => mark(),
                        Job::Work(_) if faults.get().is_some() => {}
                        Job::Work(mut task) => {
                            let result =
                                std::panic::catch_unwind(std::panic::AssertUnwindSafe(&mut task))
                                    .unwrap_or_else(|p| {
                                        Err(fault(
                                            ACL_ERROR_RT_AICORE_EXCEPTION,
                                            format!("kernel aborted: {}", panic_text(&p)),
                                        ))
                                    });
                            if let Err(f) = result {
                                faults.record(f);
                            }
                        }
                    }
                    let (lock, cv) = &*done;
                    *lock.lock().unwrap() -= 1;
                    cv.notify_all();
                }
            })
            .expect("cannot start an emulated stream worker thread");
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Arc::new(Self {
            device,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            default,
            capture: Mutex::default(),
            fault: fault_state,
            sender: Mutex::new(Some(tx)),
            pending,
            worker: Mutex::new(Some(worker)),
        })
    }

    /// The device the stream belongs to.
    pub fn device(&self) -> i32 {
        self.device
    }

    fn send(&self, job: Job) -> Result<(), Fault> {
        *self.pending.0.lock().unwrap() += 1;
        let sender = self.sender.lock().unwrap();
        match sender.as_ref().map(|s| s.send(job)) {
            Some(Ok(())) => Ok(()),
            _ => {
                *self.pending.0.lock().unwrap() -= 1;
                Err(fault(
                    ACL_ERROR_RT_PARAM_INVALID,
                    format!(
                        "a stream of device {} used after its destruction",
                        self.device
                    ),
                ))
            }
        }
    }

    /// The graph this stream is capturing into, if any.
    pub fn capture(&self) -> Option<Arc<Model>> {
        self.capture.lock().unwrap().clone()
    }

    /// Starts recording into `model`; fails if the stream already captures.
    pub fn begin_capture(&self, model: Arc<Model>) -> Result<(), ()> {
        let mut capture = self.capture.lock().unwrap();
        if capture.is_some() {
            return Err(());
        }
        *capture = Some(model);
        Ok(())
    }

    /// Stops recording.
    pub fn end_capture(&self) {
        self.capture.lock().unwrap().take();
    }

    /// Queues `task`; it runs after everything queued before it. A faulted device refuses it;
    /// a capturing stream records it.
    pub fn enqueue(&self, task: Task) -> Result<(), Fault> {
        self.submit(task, None)
    }

    /// [`Stream::enqueue`] for the aclnn operator `op` moving `bytes` (modelled), counted as
    /// launched when it is queued, or when a replay of the graph that recorded it is.
    pub fn enqueue_op(&self, task: Task, op: &'static str, bytes: u64) -> Result<(), Fault> {
        self.submit(task, Some((op, bytes)))
    }

    fn submit(&self, task: Task, aclnn: Option<(&'static str, u64)>) -> Result<(), Fault> {
        self.fault.check()?;
        if let Some(model) = self.capture() {
            return model.record(Recorded {
                task,
                aclnn,
                recorded_at: super::memory::free_clock(),
            });
        }
        if self.default {
            graph::check_default_stream(self.device, "work queued")?;
        }
        if let Some((op, bytes)) = aclnn {
            super::counters::launched(op, bytes);
        }
        super::counters::submitted();
        self.send(Job::Work(task))
    }

    /// Queues one replay of a graph, whose recorded aclnn operators are `ops` (name, bytes).
    pub fn enqueue_replay(&self, replay: Task, ops: &[(&'static str, u64)]) -> Result<(), Fault> {
        self.fault.check()?;
        if self.default {
            graph::check_default_stream(self.device, "aclmdlRIExecuteAsync")?;
        }
        for &(op, bytes) in ops {
            super::counters::launched(op, bytes);
        }
        super::counters::submitted();
        self.send(Job::Work(replay))
    }

    /// Queues host bookkeeping that runs in stream order even on a faulted device.
    fn enqueue_marker(&self, mark: Box<dyn FnOnce() + Send>) -> Result<(), Fault> {
        self.send(Job::Marker(mark))
    }

    /// Waits for all queued work; reports the device's fault, every time, until reset. Refused
    /// while a stream of the device captures.
    pub fn synchronize(&self) -> Result<(), Fault> {
        graph::check_sync(
            self.device,
            "aclrtSynchronizeStream",
            ACL_ERROR_RT_STREAM_CAPTURED,
        )?;
        let (lock, cv) = &*self.pending;
        drop(cv.wait_while(lock.lock().unwrap(), |n| *n > 0).unwrap());
        self.fault.check()
    }

    /// Stops the worker after the queued work.
    pub fn shutdown(&self) {
        self.sender.lock().unwrap().take();
        if let Some(worker) = self.worker.lock().unwrap().take() {
            let _ = worker.join();
        }
    }
}

/// An event: recorded on a stream, complete once the stream reaches it. The stream's worker
/// stamps it when it reaches it: the emulated device's clock is the host's monotonic clock as
/// the worker runs the stream's work (the emulator models no per-stream device time), so the
/// time between two events is the time the worker spent on the work between them (and idle,
/// waiting for the host to queue it, as a device's stream would be).
pub(crate) struct Event {
    /// Whether records are stamped (`aclrtCreateEvent`, or `ACL_EVENT_TIME_LINE`).
    timed: bool,
    state: Mutex<EventState>,
    cv: Condvar,
}

#[derive(Default)]
struct EventState {
    recorded: u64,
    completed: u64,
    /// The device of the latest record, whose fault a wait reports.
    device: Option<Arc<DeviceFault>>,
    /// The device number of the latest record.
    device_id: Option<i32>,
    /// The stream (id) of the latest record.
    stream: Option<u64>,
    /// When the worker reached a record (the record's ticket and its stamp).
    stamp: Option<(u64, Instant)>,
    /// The graph (handle) whose capture recorded the event last: waits and queries are then
    /// forbidden until it is recorded again outside a capture.
    captured_by: Option<usize>,
}

impl Event {
    /// An event whose records are stamped for `aclrtEventElapsedTime` when `timed`.
    pub fn new(timed: bool) -> Self {
        Self {
            timed,
            state: Mutex::default(),
            cv: Condvar::new(),
        }
    }

    pub fn record(self: &Arc<Self>, stream: &Stream) -> Result<(), Fault> {
        stream.fault.check()?;
        if let Some(model) = stream.capture() {
            // Recorded inside a capture: a node of the graph, not a point of the host's stream.
            self.state.lock().unwrap().captured_by = Some(model.handle());
            return Ok(());
        }
        if stream.default {
            graph::check_default_stream(stream.device, "aclrtRecordEvent")?;
        }
        let ticket = {
            let mut s = self.state.lock().unwrap();
            s.recorded += 1;
            s.device = Some(stream.fault.clone());
            s.device_id = Some(stream.device);
            s.stream = Some(stream.id);
            s.captured_by = None;
            s.recorded
        };
        let event = self.clone();
        stream.enqueue_marker(Box::new(move || {
            let mut s = event.state.lock().unwrap();
            s.completed = s.completed.max(ticket);
            if event.timed {
                s.stamp = Some((ticket, Instant::now()));
            }
            event.cv.notify_all();
        }))
    }

    /// Refuses a synchronisation or query of an event recorded inside a capture, or while a
    /// stream of its device captures (aclgraph-abi.md §3, §4 rule 2).
    fn check_query(&self, what: &str) -> Result<(), Fault> {
        let (captured_by, device) = {
            let s = self.state.lock().unwrap();
            (s.captured_by, s.device_id)
        };
        if let Some(handle) = captured_by {
            let why = format!("{what}: the event was last recorded inside a graph capture");
            graph::invalidate(handle, &why);
            return Err(fault(ACL_ERROR_RT_EVENT_CAPTURED, why));
        }
        match device {
            Some(d) => graph::check_sync(d, what, ACL_ERROR_RT_EVENT_CAPTURED),
            None => Ok(()),
        }
    }

    pub fn is_complete(&self) -> Result<bool, Fault> {
        self.check_query("aclrtQueryEventStatus")?;
        let s = self.state.lock().unwrap();
        Ok(s.completed >= s.recorded)
    }

    /// Waits for the latest record; reports the fault of its device, if it has one.
    pub fn wait(&self) -> Result<(), Fault> {
        self.check_query("aclrtSynchronizeEvent")?;
        let s = self.state.lock().unwrap();
        let target = s.recorded;
        let s = self.cv.wait_while(s, |s| s.completed < target).unwrap();
        match &s.device {
            Some(device) => device.check(),
            None => Ok(()),
        }
    }

    /// Makes `stream` wait (on the device) until the event's latest record completes.
    pub fn wait_on(self: &Arc<Self>, stream: &Stream) -> Result<(), Fault> {
        stream.fault.check()?;
        let captured_by = self.state.lock().unwrap().captured_by;
        if let Some(model) = stream.capture() {
            // Inside one recording, stream order already holds.
            return graph::check_capture_wait(&model, captured_by);
        }
        if let Some(handle) = captured_by.filter(|&h| graph::is_capturing(h)) {
            return graph::refuse_fork(handle);
        }
        if stream.default {
            graph::check_default_stream(stream.device, "aclrtStreamWaitEvent")?;
        }
        let target = self.state.lock().unwrap().recorded;
        let event = self.clone();
        stream.enqueue_marker(Box::new(move || {
            let s = event.state.lock().unwrap();
            drop(event.cv.wait_while(s, |s| s.completed < target).unwrap());
        }))
    }

    /// `aclrtEventElapsedTime`: the time from `start`'s latest record to `end`'s (this event's),
    /// in milliseconds. CANN's rules, each one refused with its code:
    /// - both recorded (hicann/runtime `Event::ElapsedTime`: `RT_ERROR_EVENT_RECORDER_NULL`,
    ///   which reaches the caller as `ACL_ERROR_RT_INTERNAL_ERROR`);
    /// - both stamped: created by `aclrtCreateEvent` or with `ACL_EVENT_TIME_LINE` (acl-abi.md
    ///   §3.4: the flag is "needed for timing"; stricter reading: an event created with flags
    ///   but without it has no timestamp, `ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID`);
    /// - both recorded on one stream (the runtime's documented call order, aclrtEventElapsedTime
    ///   doc in hicann/runtime: start and end recorded "in the same stream"; the runtime does not
    ///   check it: stricter reading, `ACL_ERROR_RT_PARAM_INVALID`, as a time across streams
    ///   measures no work);
    /// - both reached by the stream (the timestamp is written when the record task completes,
    ///   invalid until then: `ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID`);
    /// - `end` recorded after `start` (the runtime returns the negative difference; stricter
    ///   reading: `ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL`, the code CANN has for it);
    /// - neither recorded inside a graph capture, nor timed while the device captures
    ///   (aclgraph-abi.md §3 and §4 rule 2, `ACL_ERROR_RT_EVENT_CAPTURED`).
    pub fn elapsed_since(&self, start: &Event) -> Result<f32, Fault> {
        start.check_query("aclrtEventElapsedTime")?;
        self.check_query("aclrtEventElapsedTime")?;
        let what = "aclrtEventElapsedTime";
        // One lock at a time: the same event may be both ends.
        let read = |e: &Event| {
            let s = e.state.lock().unwrap();
            (s.recorded, s.stream, s.stamp)
        };
        let (start_records, start_stream, start_stamp) = read(start);
        let (end_records, end_stream, end_stamp) = read(self);
        if start_records == 0 || end_records == 0 {
            return Err(fault(
                ACL_ERROR_RT_INTERNAL_ERROR,
                format!(
                    "{what}: the {} event was never recorded",
                    if start_records == 0 { "start" } else { "end" }
                ),
            ));
        }
        if !start.timed || !self.timed {
            return Err(fault(
                ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID,
                format!(
                    "{what}: the {} event was created without ACL_EVENT_TIME_LINE, so it has \
                     no timestamp",
                    if start.timed { "end" } else { "start" }
                ),
            ));
        }
        if start_stream != end_stream {
            return Err(fault(
                ACL_ERROR_RT_PARAM_INVALID,
                format!(
                    "{what}: the start and end events were last recorded on different streams \
                     (CANN times two events recorded on one stream)"
                ),
            ));
        }
        let stamp = |records: u64, stamp: Option<(u64, Instant)>, which: &str| match stamp {
            Some((ticket, at)) if ticket == records => Ok(at),
            _ => Err(fault(
                ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID,
                format!(
                    "{what}: the stream has not reached the {which} event's latest record yet \
                     (synchronise the event or the stream first)"
                ),
            )),
        };
        let from = stamp(start_records, start_stamp, "start")?;
        let to = stamp(end_records, end_stamp, "end")?;
        if to < from {
            return Err(fault(
                ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL,
                format!("{what}: the end event was recorded before the start event"),
            ));
        }
        Ok(((to - from).as_secs_f64() * 1e3) as f32)
    }
}
