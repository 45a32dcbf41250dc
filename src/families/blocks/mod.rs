//! Building blocks of the Hugging Face model families.

pub mod deepseek_router;
pub mod mla;
pub mod yarn;
