//! The engine loop on its own thread: it owns the [`Server`], takes submissions and
//! cancellations over a channel, steps while there is work, and sends each request's tokens
//! and its end back over the request's own channel. The HTTP side only ever sends it a command
//! and awaits replies: it never blocks a step, and a step never waits for a client.
//!
//! Supervision: a failed step is the server's to recover from (its requests fail, the others go
//! on). A failure it cannot recover from, or a panic of this thread, makes the engine unhealthy
//! for good ([`Engine::failure`]): every pending request ends with the reason
//! ([`ServeError::Unrecoverable`]), new ones are refused with it, and [`crate::serve`] drains
//! and returns it so that the program exits and its supervisor restarts it.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use burn_ascend::FusedOps;
use tokio::sync::{mpsc as tokio_mpsc, oneshot, watch};

use crate::metrics::{self, Metrics};
use burn_ascend_llm::engine::scheduler::RequestId;
use burn_ascend_llm::engine::serve::{FinishReason, Request, ServeConfig, ServeError, Server};
use burn_ascend_llm::engine::step::StepModel;

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
        arrived: Instant,
        events: tokio_mpsc::UnboundedSender<Event>,
        reply: oneshot::Sender<Result<RequestId, ServeError>>,
    },
    /// `stopped`: its text reached a stop string (else its client went away).
    Cancel {
        id: RequestId,
        stopped: bool,
    },
    Inject(Injected),
}

/// Failures the tests of supervision inject ([`Engine::inject`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Injected {
    /// The next step faults on the device ([`Server::inject_fault`]): its requests fail with a
    /// 500 naming the fault, and the server recovers.
    DeviceFault,
    /// The next step panics ([`Server::inject_panic`]): its requests fail, and the server
    /// recovers.
    StepPanic,
    /// The next recovery fails ([`Server::fail_next_recovery`]): after a failed step, the
    /// engine is unhealthy.
    FailedRecovery,
    /// The engine thread panics between steps: it ends, and the engine is unhealthy.
    ThreadPanic,
}

/// A request the engine serves, as the HTTP side and the metrics follow it.
struct Followed {
    events: tokio_mpsc::UnboundedSender<Event>,
    arrived: Instant,
    last: Option<Instant>,
    prompt: usize,
    generated: usize,
}

/// The engine's state as of its last step, for `/metrics` and `/health`.
#[derive(Debug, Default)]
pub struct Stats {
    running: AtomicUsize,
    waiting: AtomicUsize,
    free_pages: AtomicUsize,
    preemptions: AtomicUsize,
    cancelled: AtomicUsize,
    steps: AtomicUsize,
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
    /// Steps run since the start.
    pub steps: usize,
}

/// A handle on the engine thread (cheap to clone). The thread ends when every handle is gone
/// and its requests have ended.
#[derive(Clone)]
pub struct Engine {
    commands: tokio_mpsc::UnboundedSender<Command>,
    /// Why the engine can no longer serve, once it cannot.
    health: watch::Receiver<Option<String>>,
    stats: Arc<Stats>,
    metrics: Arc<Metrics>,
    config: ServeConfig,
    vocab: usize,
}

impl Engine {
    /// Starts the engine thread, which builds its server with `make` (the model is loaded on
    /// the thread that runs it) and reports to `metrics`. Returns once the server is built, or
    /// `make`'s error.
    pub fn spawn<B, M, F>(make: F, metrics: Arc<Metrics>) -> Result<(Self, JoinHandle<()>), String>
    where
        B: FusedOps,
        M: StepModel<B>,
        F: FnOnce() -> Result<Server<B, M>, String> + Send + 'static,
    {
        let (commands, mut inbox) = tokio_mpsc::unbounded_channel();
        let (unhealthy, health) = watch::channel(None);
        let (ready, built) = mpsc::channel();
        let stats = Arc::new(Stats::default());
        let shared = stats.clone();
        let reported = metrics.clone();
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
                let mut followed = HashMap::new();
                let ran = catch_unwind(AssertUnwindSafe(|| {
                    run(
                        server,
                        &mut inbox,
                        &mut followed,
                        &shared,
                        &reported,
                        &unhealthy,
                    )
                }));
                if let Err(panic) = ran {
                    let why = format!(
                        "the engine thread panicked: {}",
                        panic_message(panic.as_ref())
                    );
                    // Unhealthy first, so that a client told its request failed finds /health
                    // failing too.
                    unhealthy.send_replace(Some(why.clone()));
                    for (_, f) in followed.drain() {
                        end(f, Err(ServeError::Unrecoverable(why.clone())), &reported);
                    }
                }
            })
            .map_err(|e| format!("cannot start the engine thread: {e}"))?;
        let (config, vocab) = built
            .recv()
            .map_err(|_| "the engine thread panicked while building its server".to_string())??;
        let engine = Self {
            commands,
            health,
            stats,
            metrics,
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
    /// ([`ServeError::Overloaded`] when the waiting queue is full,
    /// [`ServeError::Unrecoverable`] when the engine can no longer serve).
    pub async fn submit(
        &self,
        request: Request,
    ) -> Result<(RequestId, tokio_mpsc::UnboundedReceiver<Event>), ServeError> {
        let (events, receiver) = tokio_mpsc::unbounded_channel();
        let (reply, replied) = oneshot::channel();
        self.send(Command::Submit {
            request,
            arrived: Instant::now(),
            events,
            reply,
        })?;
        let id = replied.await.map_err(|_| self.gone())??;
        Ok((id, receiver))
    }

    /// Cancels request `id` before its next step: it leaves the server and its pages return.
    pub fn cancel(&self, id: RequestId) {
        // An engine that is gone has nothing left to cancel.
        let _ = self.send(Command::Cancel { id, stopped: false });
    }

    /// Ends request `id` because its text reached a stop string (a cancellation counted as a
    /// stop, not an abort).
    pub fn stop(&self, id: RequestId) {
        let _ = self.send(Command::Cancel { id, stopped: true });
    }

    /// The metrics it reports to.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// For tests of the recovery and of supervision: makes `failure` happen (see [`Injected`]).
    pub fn inject(&self, failure: Injected) {
        let _ = self.send(Command::Inject(failure));
    }

    /// Why the engine can no longer serve (a failure its server could not recover from, or a
    /// panic of its thread), or `None` while it serves. Once set, it stays.
    pub fn failure(&self) -> Option<String> {
        self.health.borrow().clone()
    }

    /// Resolves once the engine can no longer serve, with why.
    pub async fn failed(&self) -> String {
        let mut health = self.health.clone();
        let failed = health
            .wait_for(Option::is_some)
            .await
            .map(|why| why.clone().unwrap_or_default());
        match failed {
            Ok(why) => why,
            // Its sender only goes when the thread ends, which it does unhurt only once every
            // handle, this one included, is gone.
            Err(_) => std::future::pending().await,
        }
    }

    fn send(&self, command: Command) -> Result<(), ServeError> {
        self.commands.send(command).map_err(|_| self.gone())
    }

    /// The error of a request the engine thread cannot take: it has ended.
    fn gone(&self) -> ServeError {
        ServeError::Unrecoverable(
            self.failure()
                .unwrap_or_else(|| "the engine thread has stopped".into()),
        )
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
            steps: load(&self.stats.steps),
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

/// The loop: takes the commands that came (waiting for one when idle), then runs a step.
fn run<B: FusedOps, M: StepModel<B>>(
    mut server: Server<B, M>,
    inbox: &mut tokio_mpsc::UnboundedReceiver<Command>,
    followed: &mut HashMap<RequestId, Followed>,
    stats: &Stats,
    metrics: &Metrics,
    unhealthy: &watch::Sender<Option<String>>,
) {
    // Every handle gone and nothing left to do: the thread ends. Handles gone with requests
    // left: they run to their end, nobody listens.
    while let Some(commands) = pending(inbox, server.is_idle()) {
        for command in commands {
            match command {
                Command::Submit {
                    request,
                    arrived,
                    events,
                    reply,
                } => {
                    let prompt = request.prompt.len();
                    let submitted = server.submit(request);
                    if let Ok(id) = submitted {
                        let f = Followed {
                            events,
                            arrived,
                            last: None,
                            prompt,
                            generated: 0,
                        };
                        followed.insert(id, f);
                    }
                    // A handler gone before the reply cancels what it submitted.
                    if let Err(Ok(id)) = reply.send(submitted) {
                        cancel(&mut server, followed, id, false, stats, metrics);
                    }
                }
                Command::Cancel { id, stopped } => {
                    cancel(&mut server, followed, id, stopped, stats, metrics)
                }
                Command::Inject(Injected::DeviceFault) => server.inject_fault(),
                Command::Inject(Injected::StepPanic) => server.inject_panic(),
                Command::Inject(Injected::FailedRecovery) => server.fail_next_recovery(),
                Command::Inject(Injected::ThreadPanic) => {
                    panic!("a panic injected by Engine::inject (a test hook)")
                }
            }
        }
        if !server.is_idle() {
            step(&mut server, followed, stats, metrics, unhealthy);
        }
        publish(&server, stats, metrics);
    }
}

/// The commands that came: every one waiting now (after waiting for the first when `idle`),
/// none that comes while they are handled, so that a flood of commands holds the next step
/// back by no more than those. `None` once every handle is gone and none waits.
fn pending<T>(inbox: &mut tokio_mpsc::UnboundedReceiver<T>, idle: bool) -> Option<Vec<T>> {
    let mut commands = Vec::new();
    if idle {
        commands.push(inbox.blocking_recv()?);
    }
    let waiting = inbox.len();
    commands.extend(std::iter::from_fn(|| inbox.try_recv().ok()).take(waiting));
    Some(commands)
}

/// Runs a step and sends each request its token, and its end when it ended.
fn step<B: FusedOps, M: StepModel<B>>(
    server: &mut Server<B, M>,
    followed: &mut HashMap<RequestId, Followed>,
    stats: &Stats,
    metrics: &Metrics,
    unhealthy: &watch::Sender<Option<String>>,
) {
    let report = server.step();
    stats.steps.fetch_add(1, Ordering::Relaxed);
    // Unhealthy before any request hears of it (see the thread's own panic).
    if let Some(why) = server.failure() {
        unhealthy.send_if_modified(|health| {
            let first = health.is_none();
            if first {
                *health = Some(why.to_string());
            }
            first
        });
    }
    let now = Instant::now();
    metrics.on_preemptions(report.preempted);
    for (id, token) in report.sampled {
        let Some(f) = followed.get_mut(&id) else {
            continue;
        };
        match f.last {
            None => metrics.on_first_token(now - f.arrived),
            Some(last) => metrics.on_token(now - last),
        }
        f.last = Some(now);
        f.generated += 1;
        // Its receiver was dropped (the client went away): it stops here.
        let gone = f.events.send(Event::Token(token)).is_err();
        if gone && !report.finished.iter().any(|(done, _)| *done == id) {
            cancel(server, followed, id, false, stats, metrics);
        }
    }
    for (id, result) in report.finished {
        if let Some(f) = followed.remove(&id) {
            end(f, result.map(|g| g.finish), metrics);
        }
    }
}

/// Sends a request its end, counted in the metrics.
fn end(f: Followed, result: Result<FinishReason, ServeError>, metrics: &Metrics) {
    let reason = match &result {
        Ok(FinishReason::Stop) => metrics::FinishReason::Stop,
        Ok(FinishReason::Length) => metrics::FinishReason::Length,
        Err(_) => metrics::FinishReason::Abort,
    };
    metrics.on_finish(reason, f.prompt, f.generated);
    let _ = f.events.send(Event::End(result));
}

/// A panic's message.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(text), _) => text.to_string(),
        (_, Some(text)) => text.clone(),
        _ => "a panic without a message".into(),
    }
}

/// Cancels `id` if it is still pending (it may have ended meanwhile).
fn cancel<B: FusedOps, M: StepModel<B>>(
    server: &mut Server<B, M>,
    followed: &mut HashMap<RequestId, Followed>,
    id: RequestId,
    stopped: bool,
    stats: &Stats,
    metrics: &Metrics,
) {
    let f = followed.remove(&id);
    if server.cancel(id).is_some() {
        stats.cancelled.fetch_add(1, Ordering::Relaxed);
        if let Some(f) = f {
            let reason = if stopped {
                metrics::FinishReason::Stop
            } else {
                metrics::FinishReason::Abort
            };
            metrics.on_finish(reason, f.prompt, f.generated);
        }
    }
}

fn publish<B: FusedOps, M: StepModel<B>>(server: &Server<B, M>, stats: &Stats, metrics: &Metrics) {
    let waiting = server.waiting();
    let running = server.pending() - waiting;
    let free = server.pool().free_pages();
    let pages = server.config().pages;
    stats.waiting.store(waiting, Ordering::Relaxed);
    stats.running.store(running, Ordering::Relaxed);
    stats.free_pages.store(free, Ordering::Relaxed);
    stats
        .preemptions
        .store(server.preemptions(), Ordering::Relaxed);
    metrics.on_step(running, waiting, (pages - free) as f64 / pages as f64);
}

#[cfg(test)]
mod tests {
    use super::pending;
    use tokio::sync::mpsc::unbounded_channel;

    #[test]
    fn a_burst_of_commands_is_taken_at_once_and_later_ones_wait_for_the_next_step() {
        let (send, mut inbox) = unbounded_channel();
        for i in 0..100 {
            send.send(i).unwrap();
        }
        let mut handled = Vec::new();
        for command in pending(&mut inbox, false).unwrap() {
            // Commands that come while the burst is handled: after the step.
            send.send(1000 + command).unwrap();
            handled.push(command);
        }
        assert_eq!(handled, (0..100).collect::<Vec<_>>());
        let next = pending(&mut inbox, false).unwrap();
        assert_eq!(next, (1000..1100).collect::<Vec<_>>());
        // Idle, it waits for a command, then takes the others waiting with it.
        let sender = std::thread::spawn(move || {
            for i in 0..3 {
                send.send(i).unwrap();
            }
        });
        let mut woken = pending(&mut inbox, true).unwrap();
        sender.join().unwrap();
        woken.extend(pending(&mut inbox, false).unwrap());
        assert_eq!(woken, [0, 1, 2]);
        // Every handle gone and nothing waiting: the loop ends.
        assert_eq!(pending(&mut inbox, true), None);
    }
}
