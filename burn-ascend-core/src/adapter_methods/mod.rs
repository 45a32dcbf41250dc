//! The Burn-facing op methods both adapters implement, stated once.
//!
//! `burn-ascend` (Burn 0.21) and `burn-ascend-b22` (Burn 0.22) implement Burn's op traits on this
//! crate, one line per method onto [`crate::ops`], and most of those methods read the same for
//! both Burn versions. Each macro here emits the methods (or module-level helpers) whose text is
//! identical in both adapters; each adapter invokes it inside its own trait impl (or module),
//! where the names resolve to its Burn version's types (`FloatTensor<Ascend>`, `Shape`, `Scalar`,
//! ...) and to the items of its `backend` module (the `Ascend` type and the helpers `run`,
//! `context`, `from_data`, `float_type`, ..., the identical ones emitted there by
//! [`adapter_backend_helpers!`](crate::adapter_backend_helpers)). The methods whose signatures or
//! bodies differ between the versions stay in the adapter, beside the invocation, and so do the
//! dtype maps and the error recording (`try_run`, `record`), which name each version's own types.
//!
//! This crate depends on no Burn: the macros are tokens until an adapter expands them, and the
//! adapters' builds (and their tests) are what check them.

mod activation;
mod backend;
mod bool;
mod device;
mod float;
mod int;
mod module;
mod qtensor_ops;
mod tensor;
mod transaction;
