//! Hugging Face model families on burn-ascend's fused ops.

pub mod blocks;
