//! The differential conformance suite (issue 3): every method of Burn 0.21's
//! `FloatTensorOps`, `IntTensorOps`, `BoolTensorOps`, `ActivationOps` and `TransactionOps`,
//! reached through the public tensor API, runs on `Ascend` (the suite's device, `common::device()`) and
//! on `burn_flex::Flex`, the reference, and the results are compared.
//!
//! Most tests are entries of the op tables (`ops!` in `common`): each names the dtypes it
//! accepts, its arity and a body generic over the backend; the arity chooses the operand
//! layouts (every view, broadcasting, size-1 and empty shapes). The other modules cover what a
//! table cannot: edge values, large tensors, random ops and property-based shapes.
//!
//! `CONFORMANCE_SELF_CHECK=1 cargo test --test conformance` runs the reference on both sides of
//! every table entry, which checks the table without the device.

mod common;

#[path = "conformance/activation.rs"]
mod activation;
#[path = "conformance/bool.rs"]
mod bool;
#[path = "conformance/edge.rs"]
mod edge;
#[path = "conformance/float.rs"]
mod float;
#[path = "conformance/int.rs"]
mod int;
#[path = "conformance/large.rs"]
mod large;
#[path = "conformance/properties.rs"]
mod properties;
#[path = "conformance/random.rs"]
mod random;
#[path = "conformance/transaction.rs"]
mod transaction;
