//! Hugging Face checkpoints: reading a model directory as transformers writes it (`config.json`,
//! `model.safetensors` or shards with `model.safetensors.index.json`), its tokenizer
//! (`tokenizer.json`, `tokenizer_config.json`, `generation_config.json`), and saving weights back
//! in the same layout, and writing a checkpoint of random weights for a config ([`dummy`]). File
//! formats only: the model families map tensor names to parameters.

mod checkpoint;
pub mod dummy;
mod error;
mod save;
mod tokenizer;

pub use checkpoint::{Checkpoint, Element, TensorInfo};
pub use error::CheckpointError;
pub use save::save;
pub use tokenizer::TextTokenizer;
