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
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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

/// Whether a request's end was counted in the metrics (`vllm:request_success_total`): shared by
/// the engine and the request's [`Events`], so that it is counted once, by the side that
/// decided it (see [`Events`]).
#[derive(Debug, Clone, Default)]
struct Counted(Arc<AtomicBool>);

impl Counted {
    /// Counts the end as `reason`, unless it was counted already.
    fn count(&self, metrics: &Metrics, reason: metrics::FinishReason) {
        if !self.0.swap(true, Ordering::SeqCst) {
            metrics.on_finish(reason);
        }
    }
}

/// The finish reason the metrics count a request's end as.
fn reason(result: &Result<FinishReason, ServeError>) -> metrics::FinishReason {
    match result {
        Ok(FinishReason::Stop) => metrics::FinishReason::Stop,
        Ok(FinishReason::Length) => metrics::FinishReason::Length,
        Err(_) => metrics::FinishReason::Error,
    }
}

/// A submitted request's events: its tokens, then its end. Its end is counted in the metrics
/// once, as its client learns it: as the engine ended it when the end is received (or found
/// waiting when they are dropped), as a stop when its text reached a stop string first
/// ([`Events::stopped`]), as an abort when the engine cancels it before its end (its client
/// went away), and as the engine ended it when nobody is left to receive the end.
#[derive(Debug)]
pub struct Events {
    receiver: tokio_mpsc::UnboundedReceiver<Event>,
    counted: Counted,
    metrics: Arc<Metrics>,
}

impl Events {
    /// The next event; `None` once the engine dropped the request without an end (it is gone).
    pub async fn recv(&mut self) -> Option<Event> {
        let event = self.receiver.recv().await;
        match &event {
            Some(Event::End(result)) => self.counted.count(&self.metrics, reason(result)),
            None => self
                .counted
                .count(&self.metrics, metrics::FinishReason::Error),
            Some(Event::Token(_)) => {}
        }
        event
    }

    /// Its text reached a stop string: it ends as a stop, whatever the engine does with it
    /// now.
    pub fn stopped(&self) {
        self.counted
            .count(&self.metrics, metrics::FinishReason::Stop);
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        // No end can come in any more (the engine then counts it itself); one that came is
        // counted as it is.
        self.receiver.close();
        while let Ok(event) = self.receiver.try_recv() {
            if let Event::End(result) = event {
                self.counted.count(&self.metrics, reason(&result));
            }
        }
    }
}

enum Command {
    Submit {
        request: Request,
        arrived: Instant,
        events: tokio_mpsc::UnboundedSender<Event>,
        counted: Counted,
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
    counted: Counted,
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

    /// Queues `request`: its id and its tokens and end, or why it is refused
    /// ([`ServeError::Overloaded`] when the waiting queue is full,
    /// [`ServeError::Unrecoverable`] when the engine can no longer serve).
    pub async fn submit(&self, request: Request) -> Result<(RequestId, Events), ServeError> {
        let (events, receiver) = tokio_mpsc::unbounded_channel();
        let (reply, replied) = oneshot::channel();
        let counted = Counted::default();
        self.send(Command::Submit {
            request,
            arrived: Instant::now(),
            events,
            counted: counted.clone(),
            reply,
        })?;
        let id = replied.await.map_err(|_| self.gone())??;
        let events = Events {
            receiver,
            counted,
            metrics: self.metrics.clone(),
        };
        Ok((id, events))
    }

    /// Cancels request `id` before its next step: it leaves the server and its pages return.
    pub fn cancel(&self, id: RequestId) {
        // An engine that is gone has nothing left to cancel.
        let _ = self.send(Command::Cancel { id, stopped: false });
    }

    /// Ends request `id` because its text reached a stop string (not counted as an abort: its
    /// [`Events::stopped`] counted the stop).
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
                    counted,
                    reply,
                } => {
                    let prompt = request.prompt.len();
                    let submitted = server.submit(request);
                    if let Ok(id) = submitted {
                        metrics.on_admitted();
                        let f = Followed {
                            events,
                            counted,
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

/// Sends a request its end; its tokens are counted in the metrics, and its end too when
/// nobody is left to receive it (see [`Events`]).
fn end(f: Followed, result: Result<FinishReason, ServeError>, metrics: &Metrics) {
    metrics.on_tokens(f.prompt, f.generated);
    let reason = reason(&result);
    if f.events.send(Event::End(result)).is_err() {
        f.counted.count(metrics, reason);
    }
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
            metrics.on_tokens(f.prompt, f.generated);
            // A stop was counted when its text reached the stop string.
            if !stopped {
                f.counted.count(metrics, metrics::FinishReason::Abort);
            }
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
