#![allow(missing_docs, non_snake_case, clippy::missing_safety_doc)]
//! ACL graphs (`aclmdlRI*`): stream capture and replay, as `../shared/ascend/aclgraph-abi.md`
//! describes them (sections cited as §n below).
//!
//! Between `aclmdlRICaptureBegin` and `aclmdlRICaptureEnd`, work issued to the capturing stream
//! (operators, kernels, asynchronous copies and memsets) is recorded in the graph, not run
//! (§2): each recorded task keeps the device addresses, shapes and host scalars it had when it
//! was issued (§5), because it is the very task the stream would have run. `aclmdlRIExecuteAsync`
//! queues one replay of the recorded tasks, in order, on a stream; `aclmdlRIDestroy` frees them.
//!
//! What CANN forbids while a capture is active returns its documented code (§3, §4), and a
//! forbidden call that concerns the capture also invalidates it, so that `aclmdlRICaptureEnd`
//! reports `ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED` (507903) and no graph results:
//! - synchronising or querying a stream or an event of the device while any of its streams
//!   captures (§4 rule 2: "in any mode"): 107027 for streams (and device resets), 107028 for
//!   events; querying an event recorded inside a capture stays 107028 until it is recorded again
//!   outside one;
//! - the "unsafe" calls of §4 rule 3 where the capture mode forbids them: synchronous
//!   `aclrtMemcpy` (107030); an asynchronous copy through pageable host memory is refused in any
//!   case (107000, as outside capture: see `runtime_api.rs`);
//! - `aclrtFree` where the mode forbids unsafe calls (107030). ASSUMPTION (§4 rule 8 leaves its
//!   legality UNVERIFIED): the stricter choice, so the backend never comes to rely on it;
//! - any work on the default stream while a stream of its device captures (§4 rule 5; the code
//!   of the documented event case, 107031, for all of it: ASSUMPTION, stricter);
//! - beginning on the default stream (§10 leaves the code UNVERIFIED: 107000 here), on a stream
//!   already capturing (107027) or with an unknown mode (107000); ending on a stream that is not
//!   capturing (107036) or, unless the mode is RELAXED, from another thread (107038);
//! - replaying onto a capturing stream (107027), replaying or destroying a graph still being
//!   captured (107026; for the replay an ASSUMPTION, stricter), destroying a graph with a replay
//!   still queued (107037 at once, where 9.x polls up to ten seconds first: stricter);
//! - a capturing stream waiting on an event not recorded in its own capture (107024,
//!   ASSUMPTION), and any other stream waiting on an event recorded inside a capture: a fork
//!   into a side stream (§4 rule 7), which this emulation does not model, refused with 107032.
//!
//! Task groups and task updates (§5) are not emulated: the backend reads everything that
//! changes between replays from device memory instead.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::ThreadId;

use super::fault::{fault, guard, Fault};
use super::machine::machine;
use super::stream::{Recorded, Stream};
use ascend_acl::types::capture::*;
use ascend_acl::types::status::*;
use ascend_acl::types::{aclError, aclmdlRI, aclrtStream};

enum State {
    Capturing {
        thread: ThreadId,
        mode: i32,
    },
    /// A forbidden call broke the capture: why.
    Invalidated(String),
    Ready,
}

/// One graph (`aclmdlRI`): the tasks recorded by a capture.
pub(crate) struct Model {
    handle: usize,
    device: i32,
    state: Mutex<State>,
    tasks: Mutex<Vec<Recorded>>,
    /// Replays queued and not yet finished.
    pending: AtomicUsize,
}

impl Model {
    /// Records a task issued to the capturing stream.
    pub fn record(&self, task: Recorded) -> Result<(), Fault> {
        self.tasks.lock().unwrap().push(task);
        Ok(())
    }

    /// The `aclmdlRI` handle.
    pub fn handle(&self) -> usize {
        self.handle
    }

    fn is_capturing(&self) -> bool {
        matches!(*self.state.lock().unwrap(), State::Capturing { .. })
    }

    /// Breaks a capture after a forbidden call; `aclmdlRICaptureEnd` reports `why`.
    fn invalidate(&self, why: &str) {
        let mut state = self.state.lock().unwrap();
        if matches!(*state, State::Capturing { .. }) {
            *state = State::Invalidated(why.to_string());
        }
    }

    /// Whether this capture forbids an unsafe call on the calling thread (§4 rule 3).
    fn forbids_unsafe(&self) -> bool {
        match *self.state.lock().unwrap() {
            State::Capturing { thread, mode } => {
                mode == ACL_MODEL_RI_CAPTURE_MODE_GLOBAL
                    || (mode == ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL
                        && thread == std::thread::current().id())
            }
            _ => false,
        }
    }

    /// The recorded tasks, in order; the first failure stops the replay.
    fn run(&self) -> Result<(), Fault> {
        /// Clears the replay mark even when a task panics (the worker goes on with other work).
        struct Unmark;
        impl Drop for Unmark {
            fn drop(&mut self) {
                REPLAYING.with(|r| r.set(None));
            }
        }
        let _unmark = Unmark;
        for (i, recorded) in self.tasks.lock().unwrap().iter_mut().enumerate() {
            REPLAYING.with(|r| r.set(Some(recorded.recorded_at)));
            (recorded.task)().map_err(|f| Fault {
                code: f.code,
                message: format!("graph replay, task {i}: {}", f.message),
            })?;
        }
        Ok(())
    }
}

/// Live graphs by handle (handles are never reused, so a stale one is recognised).
fn models() -> &'static Mutex<HashMap<usize, Arc<Model>>> {
    static MODELS: OnceLock<Mutex<HashMap<usize, Arc<Model>>>> = OnceLock::new();
    MODELS.get_or_init(Default::default)
}

fn model(handle: aclmdlRI) -> Result<Arc<Model>, Fault> {
    models()
        .lock()
        .unwrap()
        .get(&(handle as usize))
        .cloned()
        .ok_or_else(|| {
            fault(
                ACL_ERROR_RT_PARAM_INVALID,
                format!("{handle:?} is not a live aclmdlRI"),
            )
        })
}

/// The captures active on `device`.
fn capturing_on(device: i32) -> Vec<Arc<Model>> {
    models()
        .lock()
        .unwrap()
        .values()
        .filter(|m| m.device == device && m.is_capturing())
        .cloned()
        .collect()
}

thread_local! {
    /// Set on a stream worker while it runs a replay's task: the `memory::free_clock` tick the task was
    /// recorded at (memory it touches must not have been freed logically since).
    static REPLAYING: Cell<Option<u64>> = const { Cell::new(None) };
}

/// The tick the task this thread runs was recorded at, when it runs a graph replay.
pub(crate) fn replaying() -> Option<u64> {
    REPLAYING.with(Cell::get)
}

/// The debug hook of a caching allocator above the runtime: it took the block at `ptr` back
/// for reuse without freeing it. Replays of graphs recorded before then fault when they touch
/// it (`memory.rs`). Not a CANN function: the backend resolves it optionally, so the real CANN
/// path, which lacks it, is unaffected.
pub unsafe extern "C" fn ascendEmuDebugBlockFreed(ptr: *mut std::ffi::c_void) -> aclError {
    guard("ascendEmuDebugBlockFreed", || {
        let addr = ptr as u64;
        let npu = machine().npu_of(addr).ok_or_else(|| {
            fault(
                ACL_ERROR_RT_PARAM_INVALID,
                format!("ascendEmuDebugBlockFreed: {ptr:?} is not device memory"),
            )
        })?;
        npu.memory.logical_free(addr)
    })
}

thread_local! {
    /// The calling thread's capture mode (`aclmdlRICaptureThreadExchangeMode`): RELAXED opts the
    /// thread out of the unsafe-call checks.
    static THREAD_MODE: Cell<i32> = const { Cell::new(ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) };
}

/// Refuses a synchronisation or query (of a stream, an event or the device) while a stream of
/// `device` captures (§4 rule 2), invalidating those captures. `code` is the call's documented
/// status (107027 for streams and the device, 107028 for events).
pub(crate) fn check_sync(device: i32, what: &str, code: i32) -> Result<(), Fault> {
    let active = capturing_on(device);
    if active.is_empty() {
        return Ok(());
    }
    let why = format!("{what} while a stream of device {device} is capturing a graph");
    for m in &active {
        m.invalidate(&why);
    }
    Err(fault(
        code,
        format!("{why} (CANN forbids synchronising or querying during capture)"),
    ))
}

/// Refuses an unsafe call (synchronous copy, `aclrtFree`) where a capture on `device` forbids
/// it for the calling thread, invalidating that capture.
pub(crate) fn check_unsafe(device: i32, what: &str) -> Result<(), Fault> {
    if THREAD_MODE.with(Cell::get) == ACL_MODEL_RI_CAPTURE_MODE_RELAXED {
        return Ok(());
    }
    let forbidding: Vec<Arc<Model>> = capturing_on(device)
        .into_iter()
        .filter(|m| m.forbids_unsafe())
        .collect();
    if forbidding.is_empty() {
        return Ok(());
    }
    let why = format!("{what} while a stream of device {device} is capturing a graph");
    for m in &forbidding {
        m.invalidate(&why);
    }
    Err(fault(
        ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT,
        format!(
            "{why}: the capture mode forbids it (aclmdlRICaptureThreadExchangeMode with RELAXED \
             opts a thread out)"
        ),
    ))
}

/// Refuses work on the default stream while a stream of its device captures (§4 rule 5).
pub(crate) fn check_default_stream(device: i32, what: &str) -> Result<(), Fault> {
    let active = capturing_on(device);
    if active.is_empty() {
        return Ok(());
    }
    let why = format!(
        "{what} on the default stream while a stream of device {device} is capturing a graph"
    );
    for m in &active {
        m.invalidate(&why);
    }
    Err(fault(ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT, why))
}

/// The capture of `model` (a handle) is still active: waiting on or querying its events is
/// forbidden.
pub(crate) fn is_capturing(model: usize) -> bool {
    models()
        .lock()
        .unwrap()
        .get(&model)
        .is_some_and(|m| m.is_capturing())
}

/// Invalidates the capture of graph `handle`, if it is still capturing.
pub(crate) fn invalidate(handle: usize, why: &str) {
    if let Some(m) = models().lock().unwrap().get(&handle) {
        m.invalidate(why);
    }
}

/// A capturing stream waits on an event: legal only for an event recorded in the same capture
/// (then stream order already holds in the recording).
pub(crate) fn check_capture_wait(
    capture: &Model,
    event_capture: Option<usize>,
) -> Result<(), Fault> {
    if event_capture == Some(capture.handle) {
        return Ok(());
    }
    let why = "a capturing stream waited on an event not recorded in its capture";
    capture.invalidate(why);
    Err(fault(ACL_ERROR_RT_CAPTURE_DEPENDENCY, why))
}

/// A stream that is not capturing waits on an event recorded inside a capture: a fork into a
/// side stream (§4 rule 7), not modelled here.
pub(crate) fn refuse_fork(event_capture: usize) -> Result<(), Fault> {
    let why = "a stream waited on an event recorded inside a capture (a fork into a side \
               stream, which the emulated runtime does not model)";
    invalidate(event_capture, why);
    Err(fault(ACL_ERROR_RT_STREAM_CAPTURE_CONFLICT, why))
}

unsafe fn out<'a, T>(p: *mut T, name: &str) -> Result<&'a mut T, Fault> {
    p.as_mut()
        .ok_or_else(|| fault(ACL_ERROR_RT_PARAM_INVALID, format!("{name} is NULL")))
}

fn capture_stream(stream: aclrtStream, what: &str) -> Result<Arc<Stream>, Fault> {
    if stream.is_null() {
        return Err(fault(
            ACL_ERROR_RT_PARAM_INVALID,
            format!("{what}: the default stream cannot capture (aclgraph-abi.md §4 rule 5)"),
        ));
    }
    machine().stream(stream)
}

pub unsafe extern "C" fn aclmdlRICaptureBegin(stream: aclrtStream, mode: i32) -> aclError {
    const WHAT: &str = "aclmdlRICaptureBegin";
    guard(WHAT, || {
        let s = capture_stream(stream, WHAT)?;
        if !(ACL_MODEL_RI_CAPTURE_MODE_GLOBAL..=ACL_MODEL_RI_CAPTURE_MODE_RELAXED).contains(&mode) {
            return Err(fault(
                ACL_ERROR_RT_PARAM_INVALID,
                format!("{WHAT}: unknown aclmdlRICaptureMode {mode}"),
            ));
        }
        machine().npu(s.device())?.fault.check()?;
        static NEXT: AtomicUsize = AtomicUsize::new(0x6d00_0001);
        let model = Arc::new(Model {
            handle: NEXT.fetch_add(1, Ordering::Relaxed),
            device: s.device(),
            state: Mutex::new(State::Capturing {
                thread: std::thread::current().id(),
                mode,
            }),
            tasks: Mutex::default(),
            pending: AtomicUsize::new(0),
        });
        s.begin_capture(model.clone()).map_err(|_| {
            fault(
                ACL_ERROR_RT_STREAM_CAPTURED,
                format!("{WHAT}: the stream is already capturing"),
            )
        })?;
        models().lock().unwrap().insert(model.handle, model);
        Ok(())
    })
}

pub unsafe extern "C" fn aclmdlRICaptureGetInfo(
    stream: aclrtStream,
    status: *mut i32,
    model_ri: *mut aclmdlRI,
) -> aclError {
    guard("aclmdlRICaptureGetInfo", || {
        let status = out(status, "status")?;
        let model_ri = out(model_ri, "modelRI")?;
        let s = machine().stream(stream)?;
        match s.capture() {
            None => *status = ACL_MODEL_RI_CAPTURE_STATUS_NONE,
            Some(m) => {
                *status = match *m.state.lock().unwrap() {
                    State::Capturing { .. } => ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE,
                    _ => ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED,
                };
                *model_ri = m.handle as aclmdlRI;
            }
        }
        Ok(())
    })
}

pub unsafe extern "C" fn aclmdlRICaptureEnd(
    stream: aclrtStream,
    model_ri: *mut aclmdlRI,
) -> aclError {
    const WHAT: &str = "aclmdlRICaptureEnd";
    guard(WHAT, || {
        let model_ri = out(model_ri, "modelRI")?;
        let s = capture_stream(stream, WHAT)?;
        let m = s.capture().ok_or_else(|| {
            fault(
                ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED,
                format!("{WHAT}: the stream is not capturing"),
            )
        })?;
        let mut state = m.state.lock().unwrap();
        if let State::Capturing { thread, mode } = *state {
            if mode != ACL_MODEL_RI_CAPTURE_MODE_RELAXED && thread != std::thread::current().id() {
                return Err(fault(
                    ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD,
                    format!("{WHAT}: called from another thread than aclmdlRICaptureBegin, and the capture mode is not RELAXED"),
                ));
            }
        }
        let ended = std::mem::replace(&mut *state, State::Ready);
        drop(state);
        s.end_capture();
        if let State::Invalidated(why) = ended {
            models().lock().unwrap().remove(&m.handle);
            *model_ri = std::ptr::null_mut();
            return Err(fault(
                ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED,
                format!("{WHAT}: the capture was invalidated: {why}"),
            ));
        }
        *model_ri = m.handle as aclmdlRI;
        Ok(())
    })
}

pub unsafe extern "C" fn aclmdlRICaptureThreadExchangeMode(mode: *mut i32) -> aclError {
    guard("aclmdlRICaptureThreadExchangeMode", || {
        let mode = out(mode, "mode")?;
        if !(ACL_MODEL_RI_CAPTURE_MODE_GLOBAL..=ACL_MODEL_RI_CAPTURE_MODE_RELAXED).contains(mode) {
            return Err(fault(
                ACL_ERROR_RT_PARAM_INVALID,
                format!("unknown aclmdlRICaptureMode {mode}"),
            ));
        }
        *mode = THREAD_MODE.with(|t| t.replace(*mode));
        Ok(())
    })
}

/// Decrements a graph's pending replays when its queued replay is done or dropped.
struct Pending(Arc<Model>);

impl Drop for Pending {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Ordering::AcqRel);
    }
}

pub unsafe extern "C" fn aclmdlRIExecuteAsync(model_ri: aclmdlRI, stream: aclrtStream) -> aclError {
    const WHAT: &str = "aclmdlRIExecuteAsync";
    guard(WHAT, || {
        let m = model(model_ri)?;
        if m.is_capturing() || matches!(*m.state.lock().unwrap(), State::Invalidated(_)) {
            return Err(fault(
                ACL_ERROR_RT_MODEL_CAPTURED,
                format!("{WHAT}: the graph is still being captured"),
            ));
        }
        let s = machine().stream(stream)?;
        if s.capture().is_some() {
            return Err(fault(
                ACL_ERROR_RT_STREAM_CAPTURED,
                format!("{WHAT}: the target stream is capturing"),
            ));
        }
        if s.device() != m.device {
            return Err(fault(
                ACL_ERROR_RT_PARAM_INVALID,
                format!(
                    "{WHAT}: the graph was captured on NPU {}, the stream belongs to NPU {}",
                    m.device,
                    s.device()
                ),
            ));
        }
        let ops: Vec<(&'static str, u64)> = m
            .tasks
            .lock()
            .unwrap()
            .iter()
            .filter_map(|r| r.aclnn)
            .collect();
        m.pending.fetch_add(1, Ordering::AcqRel);
        let pending = Pending(m.clone());
        s.enqueue_replay(Box::new(move || pending.0.run()), &ops)
    })
}

pub unsafe extern "C" fn aclmdlRIDestroy(model_ri: aclmdlRI) -> aclError {
    const WHAT: &str = "aclmdlRIDestroy";
    guard(WHAT, || {
        let m = model(model_ri)?;
        if m.is_capturing() {
            return Err(fault(
                ACL_ERROR_RT_MODEL_CAPTURED,
                format!("{WHAT}: the graph is still being captured"),
            ));
        }
        if m.pending.load(Ordering::Acquire) > 0 {
            return Err(fault(
                ACL_ERROR_RT_MODEL_RUNNING,
                format!(
                    "{WHAT}: a replay of the graph is still queued: synchronise its stream first"
                ),
            ));
        }
        models().lock().unwrap().remove(&m.handle);
        Ok(())
    })
}
