//! The routes (axum), the generation of one request as the HTTP side sees it, server-sent
//! events in OpenAI's chunk format, and the serving loop (hyper, HTTP/1.1) with its limits and
//! its drain on shutdown or when the engine can no longer serve.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{FromRequest, Request as HttpRequest, State};
use axum::http::{header, StatusCode};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::StreamExt;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch, Semaphore};

use crate::api::{
    self, ApiError, ChatRequest, Checked, CompletionRequest, Prompt, SamplingDefaults,
};
use crate::chat::ChatTemplate;
use crate::engine::{Engine, Event, Events};
use crate::metrics;
use crate::text::{Detokenizer, Piece, Reasoning, ReasoningSplit, Tokenizer};
use burn_ascend_llm::engine::scheduler::RequestId;
use burn_ascend_llm::engine::serve::{Request, Sampling, ServeError};

/// What the server serves: the model's name, its tokenizer and chat template.
#[derive(Clone)]
pub struct ModelSpec {
    /// The name clients give as `model`.
    pub name: String,
    /// Its tokenizer.
    pub tokenizer: Tokenizer,
    /// Its chat template (without one, `/v1/chat/completions` is a 400).
    pub chat: Option<Arc<ChatTemplate>>,
    /// The sampling of the fields a request leaves out.
    pub sampling: SamplingDefaults,
    /// The parser that splits a chat reply's reasoning from its answer (`reasoning_content`),
    /// if any (vLLM's `--reasoning-parser`).
    pub reasoning: Option<Reasoning>,
}

/// Tokens a completion generates when `max_tokens` is not given (OpenAI's default).
const DEFAULT_MAX_TOKENS: usize = 16;

/// What a client may hold or send ([`Limits::new`] gives the defaults, as the program's
/// options do). HTTP/2 is off: a connection carries one request at a time (HTTP/1.1; pipelined
/// requests are answered in turn).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Time a client has to send a request's head (request line and headers), from the
    /// connection's start or, on a kept-alive connection, from the end of the previous response;
    /// then the connection is closed. It bounds idle kept-alive connections too.
    pub header_timeout: Duration,
    /// Time a client has to send a request's whole body once its head has come; then 408.
    pub body_timeout: Duration,
    /// Bytes a request body may have; more is a 413.
    pub max_body_bytes: usize,
    /// Connections served at once; further ones wait in the listener's accept backlog (the
    /// kernel's queue of connections not yet accepted) until one closes.
    pub max_connections: usize,
    /// Tokens a prompt may have (a chat: its rendered conversation); more is a 400.
    pub max_prompt_tokens: usize,
    /// Requests parsed, tokenized or rendered by the chat template at once, on tokio's blocking
    /// threads (never on the workers that stream every request's tokens); others wait.
    pub tokenizer_threads: usize,
}

impl Limits {
    /// The defaults for a server whose longest sequence is `max_seq` tokens: 10 s for the head,
    /// 30 s for the body, 8 MiB bodies, 512 connections, prompts of up to `max_seq - 1` tokens
    /// (one is left to generate), a tokenizer thread per core.
    pub fn new(max_seq: usize) -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_body_bytes: 8 << 20,
            max_connections: 512,
            max_prompt_tokens: max_seq.saturating_sub(1).max(1),
            tokenizer_threads: std::thread::available_parallelism().map_or(1, usize::from),
        }
    }
}

impl fmt::Display for Limits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "request head within {:?}, body within {:?} and {} bytes; {} connections at once \
             (more wait in the accept backlog); one request at a time per connection (HTTP/1.1, \
             HTTP/2 off); prompts of up to {} tokens; {} tokenizer threads",
            self.header_timeout,
            self.body_timeout,
            self.max_body_bytes,
            self.max_connections,
            self.max_prompt_tokens,
            self.tokenizer_threads,
        )
    }
}

/// The server's state, shared by its handlers.
pub struct App {
    engine: Engine,
    model: ModelSpec,
    limits: Limits,
    /// Permits of the tokenizer threads.
    tokenizers: Arc<Semaphore>,
    created: u64,
    draining: AtomicBool,
    in_flight: AtomicUsize,
    next_id: AtomicU64,
}

impl App {
    /// Serves `model` through `engine`, with the default limits ([`Limits::new`]).
    pub fn new(engine: Engine, model: ModelSpec) -> Arc<Self> {
        let limits = Limits::new(engine.config().max_seq);
        Self::with_limits(engine, model, limits)
    }

    /// Serves `model` through `engine` within `limits`.
    pub fn with_limits(engine: Engine, model: ModelSpec, limits: Limits) -> Arc<Self> {
        Arc::new(Self {
            engine,
            model,
            limits,
            tokenizers: Arc::new(Semaphore::new(limits.tokenizer_threads)),
            created: unix_now(),
            draining: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
        })
    }

    /// Its limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The routes.
    pub fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/v1/models", get(models))
            .route("/v1/completions", post(completions))
            .route("/v1/chat/completions", post(chat_completions))
            .route("/health", get(health))
            .route("/metrics", get(prometheus))
            .with_state(self.clone())
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Generation requests not yet answered in full.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// From now on new requests get 503.
    pub fn stop_admitting(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    fn admit(self: &Arc<Self>) -> Result<InFlight, ApiError> {
        if let Some(why) = self.engine.failure() {
            return Err(ApiError::unavailable(&why));
        }
        if self.draining.load(Ordering::SeqCst) {
            return Err(ApiError::shutting_down());
        }
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        Ok(InFlight(self.clone()))
    }

    /// Runs `work` (parsing, tokenizing, rendering a chat) on tokio's blocking threads, at most
    /// `tokenizer_threads` at once, so that a long prompt holds back no async worker, which
    /// every stream's tokens go through. The permit goes with the work: a client that leaves
    /// does not free a thread still busy with its prompt.
    async fn off_workers<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let permit = self
            .tokenizers
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| ApiError::internal(format!("the tokenizer threads are gone: {e}")))?;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            work()
        })
        .await
        .map_err(|e| ApiError::internal(format!("preparing the prompt failed: {e}")))?
    }

    /// Submits `prompt` (from field `param`) with the checked fields as choice `choice` of the
    /// request (its seed is the request's plus `choice`, so that choices differ and a seeded
    /// request repeats); `max_tokens` when not given is `default` (`None`: up to the longest
    /// sequence).
    async fn start(
        &self,
        prompt: Vec<u32>,
        param: &str,
        checked: &Checked,
        default: Option<usize>,
        choice: usize,
    ) -> Result<Live, ApiError> {
        let max_seq = self.engine.config().max_seq;
        if prompt.is_empty() {
            return Err(ApiError::invalid(param, "the prompt is empty"));
        }
        if prompt.len() > self.limits.max_prompt_tokens {
            return Err(api::prompt_too_long(
                param,
                prompt.len(),
                self.limits.max_prompt_tokens,
            ));
        }
        let room = max_seq.saturating_sub(prompt.len());
        let new_tokens = checked.max_tokens.or(default).unwrap_or(room);
        if new_tokens == 0 || prompt.len().saturating_add(new_tokens) > max_seq {
            return Err(api::too_long(prompt.len(), new_tokens.max(1), max_seq));
        }
        let sampling = if checked.temperature == 0.0 {
            Sampling::Greedy
        } else {
            Sampling::Random {
                temperature: checked.temperature,
                top_k: checked.top_k.unwrap_or(self.engine.vocab()),
                top_p: checked.top_p,
                min_p: checked.min_p,
                seed: checked
                    .seed
                    .map_or_else(|| self.fresh_seed(), |s| s.wrapping_add(choice as u64)),
            }
        };
        let mut stop = self.model.tokenizer.eos_ids().to_vec();
        stop.extend(&checked.stop_token_ids);
        let prompt_tokens = prompt.len();
        let text = Detokenizer::after(&prompt, checked.stop.clone());
        let request = Request {
            prompt,
            new_tokens,
            sampling,
            stop,
        };
        // A new request the engine cannot take is refused as such (503), not failed (500).
        let (id, events) = self.engine.submit(request).await.map_err(|e| match e {
            ServeError::Unrecoverable(why) => ApiError::unavailable(&why),
            e => ApiError::engine(e),
        })?;
        Ok(Live {
            engine: self.engine.clone(),
            id,
            events,
            text,
            reasoning: None,
            prompt_tokens,
            done: false,
        })
    }

    fn fresh_seed(&self) -> u64 {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        nanos ^ self.next_id.fetch_add(1, Ordering::Relaxed) << 32
    }

    fn response_id(&self, prefix: &str) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        format!("{prefix}-{:x}{n:08x}", self.created)
    }
}

/// A generation request being answered: counted until its response (or stream) ends.
struct InFlight(Arc<App>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(json!({ "error": self.body }))).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, secs.into());
        }
        response
    }
}

/// What the HTTP side takes from a request's events.
enum Output {
    /// Text now final.
    Text(Piece),
    /// The last text and OpenAI's finish reason.
    Done(Piece, &'static str),
    /// It failed.
    Failed(ApiError),
}

/// A submitted request: cancelled in the engine if dropped before its end (the client went
/// away).
struct Live {
    engine: Engine,
    id: RequestId,
    events: Events,
    text: Detokenizer,
    /// A chat reply's splitter of reasoning and answer, when the server has a parser.
    reasoning: Option<ReasoningSplit>,
    prompt_tokens: usize,
    done: bool,
}

impl Live {
    async fn next(&mut self, tokenizer: &Tokenizer) -> Output {
        loop {
            let event = self.events.recv().await;
            match event {
                Some(Event::Token(token)) => {
                    let delta = self.text.push(tokenizer, token);
                    if delta.stopped {
                        // The engine may have more tokens of it queued: it stops now.
                        self.events.stopped();
                        self.engine.stop(self.id);
                        self.done = true;
                        return Output::Done(self.last(delta.text), "stop");
                    }
                    let piece = self.split(&delta.text);
                    if !piece.is_empty() {
                        return Output::Text(piece);
                    }
                }
                Some(Event::End(Ok(finish))) => {
                    self.done = true;
                    let rest = self.text.finish();
                    return Output::Done(self.last(rest), api::finish_reason(finish));
                }
                Some(Event::End(Err(e))) => {
                    self.done = true;
                    return Output::Failed(ApiError::engine(e));
                }
                None => {
                    self.done = true;
                    let why = self.engine.failure();
                    return Output::Failed(ApiError::internal(format!(
                        "the engine ended the request without a result: {}",
                        why.as_deref().unwrap_or("its thread has stopped")
                    )));
                }
            }
        }
    }

    /// `text` split into reasoning and answer (all answer without a parser).
    fn split(&mut self, text: &str) -> Piece {
        match &mut self.reasoning {
            Some(r) => r.push(text),
            None => Piece::content(text.to_string()),
        }
    }

    /// The reply's last `text`, with what the parser held back.
    fn last(&mut self, text: String) -> Piece {
        let mut piece = self.split(&text);
        if let Some(r) = &mut self.reasoning {
            piece.push(r.finish());
        }
        piece
    }

    fn usage(&self) -> api::Usage {
        api::Usage::new(self.prompt_tokens, self.text.tokens())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if !self.done {
            self.engine.cancel(self.id);
        }
    }
}

async fn models(State(app): State<Arc<App>>) -> Json<Value> {
    let card = api::ModelCard {
        id: app.model.name.clone(),
        object: "model".into(),
        created: app.created,
        owned_by: "burn-ascend".into(),
        max_model_len: app.engine.config().max_seq,
    };
    Json(json!({ "object": "list", "data": [card] }))
}

async fn prometheus(State(app): State<Arc<App>>) -> Response {
    (
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        app.engine.metrics().render(),
    )
        .into_response()
}

async fn health(State(app): State<Arc<App>>) -> Response {
    if let Some(why) = app.engine.failure() {
        ApiError::unavailable(&why).into_response()
    } else if app.draining.load(Ordering::SeqCst) {
        ApiError::shutting_down().into_response()
    } else {
        StatusCode::OK.into_response()
    }
}

/// Which endpoint a generation answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Completion,
    Chat,
}

/// A request's body, read within the body timeout and the size limit.
struct Body(Bytes);

impl FromRequest<Arc<App>> for Body {
    type Rejection = ApiError;

    async fn from_request(request: HttpRequest, app: &Arc<App>) -> Result<Self, ApiError> {
        let limit = app.limits.max_body_bytes;
        let declared = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if let Some(size) = declared.filter(|&size| size > limit as u64) {
            return Err(ApiError::too_large(Some(size), limit));
        }
        let read = Limited::new(request.into_body(), limit).collect();
        match tokio::time::timeout(app.limits.body_timeout, read).await {
            Ok(Ok(body)) => Ok(Body(body.to_bytes())),
            Ok(Err(e)) if e.is::<LengthLimitError>() => Err(ApiError::too_large(None, limit)),
            Ok(Err(e)) => {
                let mut error = ApiError::invalid("", format!("cannot read the body: {e}"));
                error.body.param = None;
                Err(error)
            }
            Err(_) => Err(ApiError::body_timeout(app.limits.body_timeout)),
        }
    }
}

async fn completions(State(app): State<Arc<App>>, Body(body): Body) -> Response {
    let run = async {
        let flight = app.admit()?;
        let prepared = app.clone();
        let (prompts, checked) = app
            .off_workers(move || prepared.completion_prompt(&body))
            .await?;
        // Choice i * n + j is prompt i's j-th, as OpenAI orders a batch's choices. A choice the
        // engine refuses drops (and so cancels) those already submitted.
        let mut lives = Vec::with_capacity(prompts.len() * checked.n);
        for prompt in prompts {
            for _ in 0..checked.n {
                let choice = lives.len();
                let live = app
                    .start(
                        prompt.clone(),
                        "prompt",
                        &checked,
                        Some(DEFAULT_MAX_TOKENS),
                        choice,
                    )
                    .await?;
                lives.push(live);
            }
        }
        Ok(respond(app.clone(), Kind::Completion, lives, checked, flight).await)
    };
    run.await.unwrap_or_else(ApiError::into_response)
}

async fn chat_completions(State(app): State<Arc<App>>, Body(body): Body) -> Response {
    let run = async {
        let flight = app.admit()?;
        let prepared = app.clone();
        let (prompt, checked) = app.off_workers(move || prepared.chat_prompt(&body)).await?;
        let mut lives = Vec::with_capacity(checked.n);
        for choice in 0..checked.n {
            let mut live = app
                .start(prompt.clone(), "messages", &checked, None, choice)
                .await?;
            live.reasoning = app.model.reasoning.map(ReasoningSplit::new);
            lives.push(live);
        }
        Ok(respond(app.clone(), Kind::Chat, lives, checked, flight).await)
    };
    run.await.unwrap_or_else(ApiError::into_response)
}

impl App {
    /// A completion request's prompts' tokens (one, or a batch) and checked fields.
    fn completion_prompt(&self, body: &[u8]) -> Result<(Vec<Vec<u32>>, Checked), ApiError> {
        let (request, common): (CompletionRequest, _) = api::parse(body)?;
        let checked = common.check(&self.model.name, &self.model.sampling)?;
        request.check_unsupported(checked.n)?;
        let encode = |text: &str| {
            self.model
                .tokenizer
                .encode(text)
                .map_err(|e| ApiError::invalid("prompt", e))
        };
        let prompts = match request.prompt {
            Prompt::Text(text) => vec![encode(&text)?],
            Prompt::Tokens(ids) => vec![ids],
            Prompt::Texts(v) => v.iter().map(|t| encode(t)).collect::<Result<_, _>>()?,
            Prompt::Batches(v) => v,
        };
        if prompts.is_empty() {
            return Err(ApiError::invalid("prompt", "the batch of prompts is empty"));
        }
        Ok((prompts, checked))
    }

    /// A chat request's prompt tokens (its conversation rendered by the chat template) and
    /// checked fields.
    fn chat_prompt(&self, body: &[u8]) -> Result<(Vec<u32>, Checked), ApiError> {
        let (request, common): (ChatRequest, _) = api::parse(body)?;
        let mut checked = common.check(&self.model.name, &self.model.sampling)?;
        request.check_unsupported()?;
        checked.max_tokens = match request.max_completion_tokens {
            Some(0) => {
                return Err(ApiError::invalid(
                    "max_completion_tokens",
                    "max_completion_tokens is 0: at least one token is generated",
                ))
            }
            Some(m) => Some(usize::try_from(m).unwrap_or(usize::MAX)),
            None => checked.max_tokens,
        };
        let Some(template) = &self.model.chat else {
            return Err(ApiError::invalid(
                "messages",
                format!(
                    "model `{}` has no chat template (tokenizer_config.json has no \
                     chat_template): use /v1/completions",
                    self.model.name
                ),
            ));
        };
        let kwargs = request.chat_template_kwargs.unwrap_or_default();
        let text = template
            .render_with(&request.messages, true, &kwargs)
            .map_err(|e| ApiError::invalid("messages", e.to_string()))?;
        // The template writes the special tokens (BOS...) itself.
        let prompt = self
            .model
            .tokenizer
            .encode_rendered(&text)
            .map_err(|e| ApiError::invalid("messages", e))?;
        Ok((prompt, checked))
    }
}

/// The whole answer, or its stream: one choice per live request, in order.
async fn respond(
    app: Arc<App>,
    kind: Kind,
    lives: Vec<Live>,
    checked: Checked,
    flight: InFlight,
) -> Response {
    let prefix = match kind {
        Kind::Completion => "cmpl",
        Kind::Chat => "chatcmpl",
    };
    let head = Head {
        id: app.response_id(prefix),
        created: unix_now(),
        model: app.model.name.clone(),
        kind,
    };
    let n = checked.n;
    if checked.stream {
        return stream(app, head, lives, n, checked.include_usage, flight);
    }
    let mut choices = Vec::with_capacity(lives.len());
    let mut usage = Usage::default();
    for (index, mut live) in lives.into_iter().enumerate() {
        let mut text = Piece::default();
        let finish = loop {
            match live.next(&app.model.tokenizer).await {
                Output::Text(t) => text.push(t),
                Output::Done(t, finish) => {
                    text.push(t);
                    break finish;
                }
                // The other choices are dropped, and so cancelled.
                Output::Failed(e) => return e.into_response(),
            }
        };
        usage.add(&live, index, n);
        choices.push(match kind {
            Kind::Completion => json!({
                "index": index, "text": text.content, "logprobs": null, "finish_reason": finish,
            }),
            Kind::Chat => {
                let mut message = json!({ "role": "assistant", "content": text.content });
                if app.model.reasoning.is_some() {
                    message["reasoning_content"] =
                        json!((!text.reasoning.is_empty()).then_some(text.reasoning));
                }
                json!({
                    "index": index,
                    "message": message,
                    "logprobs": null,
                    "finish_reason": finish,
                })
            }
        });
    }
    let mut body = head.object(false);
    body["choices"] = json!(choices);
    body["usage"] = json!(usage.total());
    drop(flight);
    Json(body).into_response()
}

/// The usage of a request's choices: each prompt's tokens once (its `n` choices share it, as
/// OpenAI counts them), every choice's generated tokens.
#[derive(Debug, Default)]
struct Usage {
    prompt: usize,
    completion: usize,
}

impl Usage {
    /// Adds choice `index` (of `n` per prompt).
    fn add(&mut self, live: &Live, index: usize, n: usize) {
        let usage = live.usage();
        if index.is_multiple_of(n) {
            self.prompt += usage.prompt_tokens;
        }
        self.completion += usage.completion_tokens;
    }

    fn total(&self) -> api::Usage {
        api::Usage::new(self.prompt, self.completion)
    }
}

/// The fields every response and chunk of a request share.
struct Head {
    id: String,
    created: u64,
    model: String,
    kind: Kind,
}

impl Head {
    fn object(&self, chunk: bool) -> Value {
        let object = match (self.kind, chunk) {
            (Kind::Completion, _) => "text_completion",
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
        };
        json!({ "id": self.id, "object": object, "created": self.created, "model": self.model })
    }

    /// A chunk of choice `index`'s `text`, with the finish reason on its last.
    fn chunk(&self, index: usize, text: &Piece, finish: Option<&str>, usage: bool) -> SseEvent {
        let choice = match self.kind {
            Kind::Completion => json!({
                "index": index, "text": text.content, "logprobs": null,
                "finish_reason": finish,
            }),
            Kind::Chat => {
                let mut delta = json!({});
                if !text.reasoning.is_empty() {
                    delta["reasoning_content"] = json!(text.reasoning);
                }
                if !text.content.is_empty() {
                    delta["content"] = json!(text.content);
                }
                json!({
                    "index": index,
                    "delta": delta,
                    "logprobs": null,
                    "finish_reason": finish,
                })
            }
        };
        let mut chunk = self.object(true);
        chunk["choices"] = json!([choice]);
        if usage {
            chunk["usage"] = Value::Null;
        }
        SseEvent::default().data(chunk.to_string())
    }
}

/// What one choice's stream yields: its index, the output, and at its end the choice's
/// request (for its usage).
type ChoiceEvent = (usize, Output, Option<Live>);

/// The answer as server-sent events: OpenAI's chunks (the choices' interleaved as their tokens
/// come), the usage chunk if asked, then `[DONE]`. An error after the stream began is sent as
/// an `{"error": ...}` event (vLLM's way) and ends the stream. The client going away drops the
/// stream, which cancels the requests.
fn stream(
    app: Arc<App>,
    head: Head,
    lives: Vec<Live>,
    n: usize,
    usage: bool,
    flight: InFlight,
) -> Response {
    let mut queue = VecDeque::new();
    if head.kind == Kind::Chat {
        for index in 0..lives.len() {
            let mut first = head.object(true);
            first["choices"] = json!([{
                "index": index,
                "delta": { "role": "assistant", "content": "" },
                "logprobs": null,
                "finish_reason": null,
            }]);
            if usage {
                first["usage"] = Value::Null;
            }
            queue.push_back(SseEvent::default().data(first.to_string()));
        }
    }
    let choices =
        futures_util::stream::select_all(lives.into_iter().enumerate().map(|(index, live)| {
            let app = app.clone();
            let choice: ChoiceStream =
                Box::pin(futures_util::stream::unfold(Some(live), move |live| {
                    let app = app.clone();
                    async move {
                        let mut live = live?;
                        let output = live.next(&app.model.tokenizer).await;
                        Some(match output {
                            Output::Text(_) => ((index, output, None), Some(live)),
                            Output::Done(..) | Output::Failed(_) => {
                                ((index, output, Some(live)), None)
                            }
                        })
                    }
                }));
            choice
        }));
    let state = Streaming {
        head,
        choices,
        n,
        usage,
        counted: Usage::default(),
        queue,
        ended: false,
        _flight: flight,
    };
    let events = futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(event) = s.queue.pop_front() {
                return Some((Ok::<_, Infallible>(event), s));
            }
            if s.ended {
                return None;
            }
            let Some((index, output, ended)) = s.choices.next().await else {
                // Every choice ended.
                if s.usage {
                    let mut last = s.head.object(true);
                    last["choices"] = json!([]);
                    last["usage"] = json!(s.counted.total());
                    s.queue
                        .push_back(SseEvent::default().data(last.to_string()));
                }
                s.queue.push_back(SseEvent::default().data("[DONE]"));
                s.ended = true;
                continue;
            };
            match output {
                Output::Text(t) => {
                    let chunk = s.head.chunk(index, &t, None, s.usage);
                    s.queue.push_back(chunk);
                }
                Output::Done(t, finish) => {
                    let chunk = s.head.chunk(index, &t, Some(finish), s.usage);
                    s.queue.push_back(chunk);
                    if let Some(live) = &ended {
                        s.counted.add(live, index, s.n);
                    }
                }
                Output::Failed(e) => {
                    let mut error = json!({ "error": e.body });
                    error["error"]["code"] = json!(e.status.as_u16());
                    s.queue
                        .push_back(SseEvent::default().data(error.to_string()));
                    s.queue.push_back(SseEvent::default().data("[DONE]"));
                    s.ended = true;
                }
            }
        }
    });
    Sse::new(events).into_response()
}

/// One choice's stream.
type ChoiceStream = std::pin::Pin<Box<dyn futures_util::Stream<Item = ChoiceEvent> + Send>>;

/// The choices' streams, merged.
type Choices = futures_util::stream::SelectAll<ChoiceStream>;

struct Streaming {
    head: Head,
    choices: Choices,
    /// Choices per prompt.
    n: usize,
    usage: bool,
    counted: Usage,
    queue: VecDeque<SseEvent>,
    ended: bool,
    _flight: InFlight,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// How serving ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    /// Requests still unanswered when the drain window closed.
    pub unfinished: usize,
    /// Why the engine could no longer serve, if that is what ended serving (a program then
    /// exits non-zero so that its supervisor restarts it).
    pub failure: Option<String>,
}

/// Serves `app` on `listener` within its [`Limits`] until `shutdown` resolves or the engine can
/// no longer serve ([`Engine::failed`]); then stops admitting (new requests get 503), lets the
/// requests in flight finish for up to `drain` and returns how many had not, and the engine's
/// failure if any.
pub async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    drain: Duration,
) -> std::io::Result<Served> {
    let limits = app.limits;
    let (stop, stopped) = oneshot::channel::<()>();
    // Dropped when serving returns: connections still open then are closed.
    let (cut, connections_cut) = watch::channel(());
    let accepting = tokio::spawn(accept(
        listener,
        app.router(),
        limits,
        stopped,
        connections_cut,
    ));
    let engine = app.engine.clone();
    tokio::select! {
        () = shutdown => {}
        _ = engine.failed() => {}
    }
    app.stop_admitting();
    let deadline = tokio::time::Instant::now() + drain;
    while app.in_flight() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let unfinished = app.in_flight();
    let _ = stop.send(());
    let graceful = accepting
        .await
        .map_err(|e| std::io::Error::other(format!("the accepting task failed: {e}")))?;
    // Connections still streaming past the deadline would hold the graceful shutdown: cut.
    let _ = tokio::time::timeout(Duration::from_secs(1), graceful.shutdown()).await;
    drop(cut);
    Ok(Served {
        unfinished,
        failure: engine.failure(),
    })
}

/// Accepts connections until `stopped`, at most `max_connections` open at once (the others wait
/// in the accept backlog), each served by hyper's HTTP/1.1 with the header timeout; returns
/// what shuts the open ones down gracefully.
async fn accept(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    mut stopped: oneshot::Receiver<()>,
    cut: watch::Receiver<()>,
) -> GracefulShutdown {
    let graceful = GracefulShutdown::new();
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let mut http = hyper::server::conn::http1::Builder::new();
    // Without a timer hyper enforces no header timeout (axum::serve sets none): a client
    // sending half a head would hold its connection for ever.
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    loop {
        let permit = tokio::select! {
            _ = &mut stopped => break,
            permit = open.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            _ = &mut stopped => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of file descriptors, a connection reset before it was accepted: as
                // axum::serve does, wait a moment and accept again.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let service = TowerToHyperService::new(router.clone());
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        let mut cut = cut.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = connection => {}
                _ = cut.changed() => {}
            }
            drop(permit);
        });
    }
    graceful
}
