//! The engine loop on its own thread: it owns the [`Server`], takes submissions and
//! cancellations over a channel, steps while there is work, and sends each request's tokens
//! and its end back over the request's own channel. The HTTP side only ever sends it a command
//! and awaits replies: it never blocks a step, and a step never waits for a client.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use burn_ascend::FusedOps;
use tokio::sync::{mpsc as tokio_mpsc, oneshot};

use crate::moe::scheduler::RequestId;
use crate::moe::serve::{FinishReason, Request, ServeConfig, ServeError, Server};
use crate::moe::step::StepModel;

/// What a request receives from the engine.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Its next token.
    Token(u32),
    /// It ended (after its last token), or failed.
    End(Result<FinishReason, ServeError>),
}

enum Command {
    Submit {
        request: Request,
        events: tokio_mpsc::UnboundedSender<Event>,
        reply: oneshot::Sender<Result<RequestId, ServeError>>,
    },
    Cancel(RequestId),
    InjectFault,
}

/// The engine's state as of its last step, for `/metrics` and `/health`.
#[derive(Debug, Default)]
pub struct Stats {
    running: AtomicUsize,
    waiting: AtomicUsize,
    free_pages: AtomicUsize,
    preemptions: AtomicUsize,
    cancelled: AtomicUsize,
}

/// A copy of [`Stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Requests running (holding cache pages).
    pub running: usize,
    /// Requests waiting to be admitted (new or preempted).
    pub waiting: usize,
    /// Free cache pages.
    pub free_pages: usize,
    /// Preemptions since the start.
    pub preemptions: usize,
    /// Requests cancelled before their end (their client went away, or their text reached a
    /// stop string) since the start.
    pub cancelled: usize,
}

/// A handle on the engine thread (cheap to clone). The thread ends when every handle is gone
/// and its requests have ended.
#[derive(Clone)]
pub struct Engine {
    commands: mpsc::Sender<Command>,
    stats: Arc<Stats>,
    config: ServeConfig,
    vocab: usize,
}

impl Engine {
    /// Starts the engine thread, which builds its server with `make` (the model is loaded on
    /// the thread that runs it). Returns once the server is built, or `make`'s error.
    pub fn spawn<B, M, F>(make: F) -> Result<(Self, JoinHandle<()>), String>
    where
        B: FusedOps,
        M: StepModel<B>,
        F: FnOnce() -> Result<Server<B, M>, String> + Send + 'static,
    {
        let (commands, inbox) = mpsc::channel();
        let (ready, built) = mpsc::channel();
        let stats = Arc::new(Stats::default());
        let shared = stats.clone();
        let thread = std::thread::Builder::new()
            .name("engine".into())
            .spawn(move || {
                let server = match make() {
                    Ok(server) => server,
                    Err(e) => {
                        let _ = ready.send(Err(e));
                        return;
                    }
                };
                let _ = ready.send(Ok((*server.config(), server.vocab())));
                run(server, &inbox, &shared);
            })
            .map_err(|e| format!("cannot start the engine thread: {e}"))?;
        let (config, vocab) = built
            .recv()
            .map_err(|_| "the engine thread panicked while building its server".to_string())??;
        let engine = Self {
            commands,
            stats,
            config,
            vocab,
        };
        engine
            .stats
            .free_pages
            .store(config.pages, Ordering::Relaxed);
        Ok((engine, thread))
    }

    /// Queues `request`: its id and the channel of its tokens and end, or why it is refused
    /// ([`ServeError::Overloaded`] when the waiting queue is full).
    pub async fn submit(
        &self,
        request: Request,
    ) -> Result<(RequestId, tokio_mpsc::UnboundedReceiver<Event>), ServeError> {
        let (events, receiver) = tokio_mpsc::unbounded_channel();
        let (reply, replied) = oneshot::channel();
        self.send(Command::Submit {
            request,
            events,
            reply,
        });
        let id = replied.await.expect("the engine thread runs")?;
        Ok((id, receiver))
    }

    /// Cancels request `id` before its next step: it leaves the server and its pages return.
    pub fn cancel(&self, id: RequestId) {
        self.send(Command::Cancel(id));
    }

    /// For tests of the recovery: the next step faults on the device ([`Server::inject_fault`]).
    pub fn inject_fault(&self) {
        self.send(Command::InjectFault);
    }

    fn send(&self, command: Command) {
        // The thread only stops when every handle is gone; a panic in a step would be a bug,
        // reported by the thread.
        self.commands
            .send(command)
            .expect("the engine thread has stopped (a step panicked)");
    }

    /// The engine's state as of its last step.
    pub fn stats(&self) -> StatsSnapshot {
        let load = |a: &AtomicUsize| a.load(Ordering::Relaxed);
        StatsSnapshot {
            running: load(&self.stats.running),
            waiting: load(&self.stats.waiting),
            free_pages: load(&self.stats.free_pages),
            preemptions: load(&self.stats.preemptions),
            cancelled: load(&self.stats.cancelled),
        }
    }

    /// The server's settings.
    pub fn config(&self) -> &ServeConfig {
        &self.config
    }

    /// The model's vocabulary.
    pub fn vocab(&self) -> usize {
        self.vocab
    }
}

/// The loop: waits for a command when idle, else takes those that came and runs a step.
fn run<B: FusedOps, M: StepModel<B>>(
    mut server: Server<B, M>,
    inbox: &mpsc::Receiver<Command>,
    stats: &Stats,
) {
    let mut streams: HashMap<RequestId, tokio_mpsc::UnboundedSender<Event>> = HashMap::new();
    loop {
        let command = if server.is_idle() {
            match inbox.recv_timeout(Duration::from_secs(1)) {
                Ok(c) => Some(c),
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        } else {
            // Handles gone with requests left: they run to their end, nobody listens.
            inbox.try_recv().ok()
        };
        if let Some(command) = command {
            match command {
                Command::Submit {
                    request,
                    events,
                    reply,
                } => {
                    let submitted = server.submit(request);
                    if let Ok(id) = submitted {
                        streams.insert(id, events);
                    }
                    // A handler gone before the reply cancels what it submitted.
                    if let Err(Ok(id)) = reply.send(submitted) {
                        cancel(&mut server, &mut streams, id, stats);
                    }
                }
                Command::Cancel(id) => cancel(&mut server, &mut streams, id, stats),
                Command::InjectFault => server.inject_fault(),
            }
            publish(&server, stats);
            continue;
        }
        let report = server.step();
        for (id, token) in report.sampled {
            let gone = streams
                .get(&id)
                .is_some_and(|s| s.send(Event::Token(token)).is_err());
            // Its receiver was dropped (the client went away): it stops here.
            if gone && !report.finished.iter().any(|(f, _)| *f == id) {
                cancel(&mut server, &mut streams, id, stats);
            }
        }
        for (id, result) in report.finished {
            if let Some(stream) = streams.remove(&id) {
                let _ = stream.send(Event::End(result.map(|g| g.finish)));
            }
        }
        publish(&server, stats);
    }
}

/// Cancels `id` if it is still pending (it may have ended meanwhile).
fn cancel<B: FusedOps, M: StepModel<B>>(
    server: &mut Server<B, M>,
    streams: &mut HashMap<RequestId, tokio_mpsc::UnboundedSender<Event>>,
    id: RequestId,
    stats: &Stats,
) {
    streams.remove(&id);
    if server.cancel(id).is_some() {
        stats.cancelled.fetch_add(1, Ordering::Relaxed);
    }
}

fn publish<B: FusedOps, M: StepModel<B>>(server: &Server<B, M>, stats: &Stats) {
    let waiting = server.waiting();
    stats.waiting.store(waiting, Ordering::Relaxed);
    stats
        .running
        .store(server.pending() - waiting, Ordering::Relaxed);
    stats
        .free_pages
        .store(server.pool().free_pages(), Ordering::Relaxed);
    stats
        .preemptions
        .store(server.preemptions(), Ordering::Relaxed);
}
