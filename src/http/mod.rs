//! Pieces of the OpenAI-compatible HTTP server: the checkpoint's chat template and the
//! Prometheus metrics.

pub mod chat;
pub mod metrics;
