//! An OpenAI-compatible HTTP server over the serving engine
//! ([`burn_ascend_llm::engine::serve::Server`]), as vLLM's: `GET /v1/models`, `POST /v1/completions` and `POST /v1/chat/completions` (streamed as
//! server-sent events in OpenAI's chunk format, ending with `[DONE]`), `GET /health`,
//! `GET /metrics`.
//!
//! - [`engine`]: the engine loop on its own thread; the HTTP side never blocks it.
//! - [`api`]: OpenAI's request, response and error objects, and the checks of each field.
//! - [`text`]: the tokenizer, and the incremental detokenizer with `stop` strings.
//! - [`chat`]: the checkpoint's chat template.
//! - [`metrics`]: the Prometheus metrics, under vLLM's names.
//! - [`routes`]: the handlers (axum), streaming, cancellation of a request whose client went
//!   away, and [`routes::serve`], which drains the requests in flight on shutdown.
//!
//! The program `burn-ascend-openai` (`cargo install --path burn-ascend-openai`) serves a Hugging
//! Face checkpoint with them; `burn-ascend-openai --help` lists its options.

#![warn(missing_docs)]

pub mod api;
pub mod chat;
pub mod engine;
pub mod metrics;
pub mod routes;
pub mod text;

pub use engine::Engine;
pub use routes::{serve, App, Limits, ModelSpec, Served};
pub use text::Tokenizer;
