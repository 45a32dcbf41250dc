//! Emulated streams and events: each stream is a FIFO run by its own worker thread, so work
//! is queued, never run inside the launching call, and runs in launch order.

use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex};

use super::fault::{fault, panic_text, Fault};
use ascend_acl::types::status::*;

/// Work queued on a stream.
pub(crate) type Task = Box<dyn FnOnce() -> Result<(), Fault> + Send>;

/// The outcome of one task, filled in by the worker.
type Completion = Arc<(Mutex<Option<Result<(), Fault>>>, Condvar)>;

#[derive(Default)]
struct StreamState {
    pending: usize,
    error: Option<Fault>,
}

/// One stream and its worker.
pub(crate) struct Stream {
    device: i32,
    sender: Mutex<Option<Sender<Task>>>,
    state: Arc<(Mutex<StreamState>, Condvar)>,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Stream {
    pub fn new(device: i32) -> Arc<Self> {
        let (tx, rx) = channel::<Task>();
        let state: Arc<(Mutex<StreamState>, Condvar)> = Arc::default();
        let shared = state.clone();
        let worker = std::thread::Builder::new()
            .name(format!("emulated-npu{device}-stream"))
            .spawn(move || {
                for task in rx {
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(task))
                        .unwrap_or_else(|p| {
                            Err(fault(
                                ACL_ERROR_RT_AICORE_EXCEPTION,
                                format!("kernel aborted: {}", panic_text(&p)),
                            ))
                        });
                    let (lock, cv) = &*shared;
                    let mut s = lock.lock().unwrap();
                    if let Err(f) = result {
                        s.error.get_or_insert(f);
                    }
                    s.pending -= 1;
                    cv.notify_all();
                }
            })
            .expect("cannot start an emulated stream worker thread");
        Arc::new(Self {
            device,
            sender: Mutex::new(Some(tx)),
            state,
            worker: Mutex::new(Some(worker)),
        })
    }

    /// The device the stream was created on.
    pub fn device(&self) -> i32 {
        self.device
    }

    /// Queues `task`; it runs after everything queued before it.
    pub fn enqueue(&self, task: Task) {
        self.state.0.lock().unwrap().pending += 1;
        let sender = self.sender.lock().unwrap();
        sender
            .as_ref()
            .expect("stream used after destruction")
            .send(task)
            .expect("emulated stream worker stopped");
    }

    /// Waits for all queued work; reports (once) the first error the work raised.
    pub fn synchronize(&self) -> Result<(), Fault> {
        let (lock, cv) = &*self.state;
        let mut s = cv
            .wait_while(lock.lock().unwrap(), |s| s.pending > 0)
            .unwrap();
        match s.error.take() {
            Some(f) => Err(f),
            None => Ok(()),
        }
    }

    /// Queues `task` and waits for it (and so for everything before it).
    pub fn run_blocking(&self, task: Task) -> Result<(), Fault> {
        let done: Completion = Arc::default();
        let signal = done.clone();
        self.enqueue(Box::new(move || {
            let r = task();
            *signal.0.lock().unwrap() = Some(r.clone());
            signal.1.notify_all();
            r
        }));
        let (lock, cv) = &*done;
        let r = cv
            .wait_while(lock.lock().unwrap(), |r| r.is_none())
            .unwrap()
            .take()
            .unwrap();
        if r.is_err() {
            // Reported here, not again at the next synchronisation.
            self.state.0.lock().unwrap().error = None;
        }
        r
    }

    /// Stops the worker after the queued work.
    pub fn shutdown(&self) {
        self.sender.lock().unwrap().take();
        if let Some(worker) = self.worker.lock().unwrap().take() {
            let _ = worker.join();
        }
    }
}

/// An event: recorded on a stream, complete once the stream reaches it.
#[derive(Default)]
pub(crate) struct Event {
    state: Mutex<EventState>,
    cv: Condvar,
}

#[derive(Default)]
struct EventState {
    recorded: u64,
    completed: u64,
}

impl Event {
    pub fn record(self: &Arc<Self>, stream: &Stream) {
        let ticket = {
            let mut s = self.state.lock().unwrap();
            s.recorded += 1;
            s.recorded
        };
        let event = self.clone();
        stream.enqueue(Box::new(move || {
            let mut s = event.state.lock().unwrap();
            s.completed = s.completed.max(ticket);
            event.cv.notify_all();
            Ok(())
        }));
    }

    pub fn is_complete(&self) -> bool {
        let s = self.state.lock().unwrap();
        s.completed >= s.recorded
    }

    pub fn wait(&self) {
        let s = self.state.lock().unwrap();
        let target = s.recorded;
        let _s = self.cv.wait_while(s, |s| s.completed < target).unwrap();
    }

    /// Makes `stream` wait (on the device) until the event's latest record completes.
    pub fn wait_on(self: &Arc<Self>, stream: &Stream) {
        let target = self.state.lock().unwrap().recorded;
        let event = self.clone();
        stream.enqueue(Box::new(move || {
            let s = event.state.lock().unwrap();
            let _s = event.cv.wait_while(s, |s| s.completed < target).unwrap();
            Ok(())
        }));
    }
}
