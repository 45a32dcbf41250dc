//! Fusers that recognise a fixed sequence of recorded ops (a pattern) and hand a whole match to
//! one optimization. They accept ops while the ops so far are a prefix of the pattern.

/// Emits the `pattern` module's items (see [`ascend_fusion!`](crate::ascend_fusion)).
#[doc(hidden)]
#[macro_export]
macro_rules! __ascend_fusion_pattern {
    () => {
        use std::marker::PhantomData;

        use burn_fusion::{FuserProperties, FuserStatus, OperationFuser};
        use burn_ir::{
            BaseOperationIr, FloatOperationIr, NumericOperationIr, OperationIr, ShapeOpIr,
            TensorId, TensorIr, TensorStatus,
        };

        use super::lower::SIZE_ONE;
        use super::AscendOptimization;

        /// Whether `t` is tensor `id` at its last use (the block may let it go).
        pub(super) fn consumed(t: &TensorIr, id: TensorId) -> bool {
            t.id == id && t.status == TensorStatus::ReadWrite
        }

        /// The numeric float op of `op`, if it is one.
        pub(super) fn numeric(op: &OperationIr) -> Option<&NumericOperationIr> {
            match op {
                OperationIr::NumericFloat(_, n) => Some(n),
                _ => None,
            }
        }

        /// The float-specific op of `op`, if it is one.
        pub(super) fn float(op: &OperationIr) -> Option<&FloatOperationIr> {
            match op {
                OperationIr::Float(_, f) => Some(f),
                _ => None,
            }
        }

        /// The float reshape of `op`, if it is one.
        pub(super) fn reshape(op: &OperationIr) -> Option<&ShapeOpIr> {
            match op {
                OperationIr::BaseFloat(BaseOperationIr::Reshape(r)) => Some(r),
                _ => None,
            }
        }

        /// Whether `t` is `[1, .., 1, tail..]` of rank `rank`.
        pub(super) fn leading_ones(t: &TensorIr, rank: usize, tail: &[usize]) -> bool {
            let lead = rank.saturating_sub(tail.len());
            t.shape.rank() == rank
                && t.shape.iter().take(lead).all(|&d| d == SIZE_ONE)
                && t.shape.iter().skip(lead).eq(tail.iter())
        }

        /// The parameter behind operand `used`: the input of `reshape` when the operand is its (dying)
        /// output and the input has shape `want`, else the operand itself.
        pub(super) fn parameter(
            reshape: Option<&ShapeOpIr>,
            used: &TensorIr,
            want: &[usize],
        ) -> Option<TensorIr> {
            match reshape {
                Some(r) => {
                    let ok = consumed(used, r.out.id) && r.input.shape.iter().eq(want.iter());
                    ok.then(|| r.input.clone())
                }
                None => Some(used.clone()),
            }
        }

        /// A sequence of recorded ops with one optimization that runs it.
        pub trait Pattern: Send + 'static {
            /// Whether a complete match may still grow (by optional trailing ops).
            const GROWS: bool;

            /// `Some(complete)` while `ops` is a prefix of the pattern (`complete`: a whole match that
            /// can run as is), `None` once it is not.
            fn matches(ops: &[OperationIr]) -> Option<bool>;

            /// The optimization that runs the complete match `ops`.
            fn optimization(ops: Vec<OperationIr>) -> AscendOptimization;
        }

        /// The fuser of a [`Pattern`].
        #[derive(Debug)]
        pub struct PatternFuser<P> {
            ops: Vec<OperationIr>,
            complete: bool,
            status: FuserStatus,
            pattern: PhantomData<fn() -> P>,
        }

        impl<P> Default for PatternFuser<P> {
            fn default() -> Self {
                Self {
                    ops: Vec::new(),
                    complete: false,
                    status: FuserStatus::Open,
                    pattern: PhantomData,
                }
            }
        }

        impl<P> Clone for PatternFuser<P> {
            fn clone(&self) -> Self {
                Self {
                    ops: self.ops.clone(),
                    complete: self.complete,
                    status: self.status,
                    pattern: PhantomData,
                }
            }
        }

        impl<P: Pattern> OperationFuser<AscendOptimization> for PatternFuser<P> {
            fn fuse(&mut self, operation: &OperationIr) {
                if self.status == FuserStatus::Closed {
                    return;
                }
                self.ops.push(operation.clone());
                match P::matches(&self.ops) {
                    Some(complete) => {
                        self.complete = complete;
                        if complete && !P::GROWS {
                            self.status = FuserStatus::Closed;
                        }
                    }
                    None => {
                        self.ops.pop();
                        self.status = FuserStatus::Closed;
                    }
                }
            }

            fn finish(&mut self) -> AscendOptimization {
                P::optimization(self.ops.clone())
            }

            fn reset(&mut self) {
                *self = Self::default();
            }

            fn status(&self) -> FuserStatus {
                self.status
            }

            fn properties(&self) -> FuserProperties {
                FuserProperties {
                    score: self.ops.len() as u64,
                    ready: self.complete,
                }
            }

            fn len(&self) -> usize {
                self.ops.len()
            }

            fn clone_dyn(&self) -> Box<dyn OperationFuser<AscendOptimization>> {
                Box::new(self.clone())
            }
        }
    };
}

/// Emits a pattern fuser's types from its module's `parse`: the `Pattern` (complete when
/// `$complete` holds of the parsed prefix), its fuser and the optimization that stores the
/// recorded ops (each execution parses them again).
///
#[doc(hidden)]
#[macro_export]
macro_rules! __ascend_fusion_pattern_types {
    (
        $(#[$pattern_doc:meta])* $pattern:ident { grows: $grows:literal, complete: |$b:ident| $complete:expr }
        $(#[$fuser_doc:meta])* $fuser:ident
        $(#[$opt_doc:meta])* $opt:ident = $variant:ident, $name:literal
    ) => {
        $(#[$pattern_doc])*
        #[derive(Debug)]
        pub struct $pattern;

        impl super::pattern::Pattern for $pattern {
            const GROWS: bool = $grows;

            fn matches(ops: &[burn_ir::OperationIr]) -> Option<bool> {
                parse(ops).map(|$b| $complete)
            }

            fn optimization(ops: Vec<burn_ir::OperationIr>) -> super::AscendOptimization {
                super::AscendOptimization::$variant($opt { ops })
            }
        }

        $(#[$fuser_doc])*
        pub type $fuser = super::pattern::PatternFuser<$pattern>;

        $(#[$opt_doc])*
        #[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
        pub struct $opt {
            ops: Vec<burn_ir::OperationIr>,
        }

        impl burn_fusion::NumOperations for $opt {
            fn len(&self) -> usize {
                self.ops.len()
            }

            fn name(&self) -> &'static str {
                $name
            }
        }
    };
}
