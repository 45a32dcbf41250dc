//! Burn's own tests of `module::attention` on `Ascend` in f16, as upstream's
//! `tensor_f16.rs` runs them: see `tests/burn_attention/main.rs` for where they come from
//! and what changed.

#![allow(clippy::single_range_in_vec_init)]

#[path = "../common/mod.rs"]
mod common;
#[path = "../burn_attention/harness.rs"]
mod harness;
#[path = "../burn_attention/upstream.rs"]
mod upstream;

pub use harness::{device, flash_ran, TestBackend, TestTensor, TestTensorBool};
pub use serial_test::serial;

pub type FloatElem = burn::tensor::f16;
