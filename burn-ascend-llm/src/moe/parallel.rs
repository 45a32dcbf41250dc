//! The hook through which a MoE layer runs across NPUs: [`Parallel`], a field of every
//! [`Moe`](super::model::Moe) layer, empty on one device. Data parallelism
//! ([`super::data_parallel`]) sets it so that the replicas agree on the routed fractions of the
//! load-balancing loss; expert parallelism ([`super::expert_parallel`]) sets it so that the
//! layer's experts run on the NPUs that hold them.
//!
//! The field must be the same type on a backend and on its autodiff wrapper (Burn copies it
//! through `valid()`), so it holds its state type-erased, and the layer asks for the state of
//! its own backend: state installed for another backend is not used.

use std::any::Any;
use std::sync::Arc;

/// What a MoE layer uses when it runs across NPUs; nothing by default.
#[derive(Clone, Default)]
pub struct Parallel(Option<Arc<dyn Any + Send + Sync>>);

impl Parallel {
    /// A hook holding `state`.
    pub fn new<T: Any + Send + Sync>(state: T) -> Self {
        Self(Some(Arc::new(state)))
    }

    /// The state, if it is a `T`.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.0.as_ref().and_then(|s| s.downcast_ref::<T>())
    }

    /// Whether the layer runs across NPUs (any state is set).
    pub fn is_set(&self) -> bool {
        self.0.is_some()
    }
}

impl std::fmt::Debug for Parallel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(_) => f.write_str("Parallel(set)"),
            None => f.write_str("Parallel(none)"),
        }
    }
}
