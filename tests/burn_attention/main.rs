//! Burn's own tests of `module::attention`, run on `Ascend` in f32 (`tests/burn_attention_f16`
//! runs them in f16, as upstream's `tensor_f16.rs` does).
//!
//! `upstream.rs` is `crates/burn-backend-tests/tests/tensor/float/module/attention.rs` of
//! tracel-ai/burn at v0.21.0 (commit 546cacb55fe00168854d19bdf0a5d79bd8060e03; MIT or
//! Apache-2.0), with these changes only: tensors are made on the suite's device (`&device()`
//! for `&Default::default()`), every test is `#[serial]` (launch counts are process-wide), the
//! skips for the metal and cubecl backends are dropped, and the `attention` call of each test
//! that fits aclnnFlashAttentionScore's contract (no bias, no softcap) is wrapped in
//! [`harness::flash_ran`], which asserts that the call launched that operator. Inputs,
//! expectations and tolerances are upstream's.
//!
//! Burn 0.21 has no autodiff test of `attention`, and its `Autodiff` sends `module::attention`
//! to `attention_fallback` (burn-autodiff-0.21.0/src/ops/module.rs), Burn's composition, by
//! design. `harness.rs` adds a gradient twin of each upstream test that fits the flash
//! contract: the same draws, the gradients of `fused::flash_attention` (the fused
//! aclnnFlashAttentionScoreGrad backward) against Burn's differentiated composition on
//! `Autodiff<Ascend>`, at the test's tolerance.

#![allow(clippy::single_range_in_vec_init)]

#[path = "../common/mod.rs"]
mod common;
mod harness;
mod upstream;

pub use harness::{device, flash_ran, TestBackend, TestTensor, TestTensorBool};
pub use serial_test::serial;

pub type FloatElem = f32;
