//! Large language models on Burn, served and trained on Ascend NPUs: the Hugging Face
//! mixture-of-experts families (Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2/V3) and a built-in MoE
//! decoder, their checkpoints read and written, their training, and a serving engine
//! (continuous batching over a paged KV cache, captured decode, recovery from device faults).
//!
//! Everything is generic over [`burn_ascend::FusedOps`]: on `Ascend` the fused Ascend C kernels
//! run, on any other Burn backend their composed defaults do (with the `flex` feature, burn-flex
//! is one).
//!
//! - [`engine`]: the serving engine and the one step interface a model implements; it names no
//!   model.
//! - [`moe`]: the built-in MoE decoder and the training loop.
//! - [`families`]: the Hugging Face families on one decoder skeleton and shared blocks
//!   (attention kinds, routers, norms, quantized projections).
//! - [`hf`]: checkpoint files (safetensors, `config.json`, tokenizer) read and written.
//!
//! Serve a small built-in decoder on the default device (an NPU when CANN finds one, else the
//! emulated NPU):
//!
//! ```
//! use burn_ascend::{Ascend, AscendDevice};
//! use burn_ascend_llm::engine::serve::{Request, ServeConfig, Server};
//! use burn_ascend_llm::moe::config::MoeConfig;
//! use burn_ascend_llm::moe::model::MoeDecoder;
//!
//! let device = AscendDevice::default();
//! let cfg = MoeConfig::new()
//!     .with_hidden(64)
//!     .with_layers(2)
//!     .with_q_heads(4)
//!     .with_kv_heads(2)
//!     .with_experts(4)
//!     .with_top_k(2)
//!     .with_expert_hidden(64)
//!     .with_max_seq(32);
//! let model = MoeDecoder::<Ascend>::new(&cfg, &device)?;
//! let serving = ServeConfig {
//!     pages: 16,
//!     page_size: 4,
//!     max_seq: 32,
//!     max_kv_splits: 2,
//!     step_tokens: 16,
//!     max_waiting: 8,
//!     record_logits: false,
//! };
//! let mut server = Server::new(model, serving, &device)?;
//! let out = server.generate(&[Request::greedy(b"Hello".map(u32::from).to_vec(), 4)]);
//! let generation = out.results[0].as_ref().map_err(ToString::to_string)?;
//! assert_eq!(generation.tokens.len(), 4);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

pub mod engine;
pub mod families;
pub mod hf;
pub mod moe;
