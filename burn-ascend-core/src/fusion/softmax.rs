//! A pattern fusion: softmax and log-softmax as Burn composes them (`ActivationOps`' defaults,
//! which `Fusion` records op by op: a max, a shift, exp, a sum, then a divide or a log and a
//! subtract) run as one aclnnSoftmax or aclnnLogSoftmax, as eager `Ascend` does.
//!
//! Softmax: `m = max_dim(x)`, `c = x - m`, `e = exp(c)`, `s = sum_dim(e)`, `e / s`.
//! Log-softmax: the same up to `s`, then `c - log(s)`. Either may start with `x = x0 * a`
//! (softmin's negation, attention's scale), which then runs first as one aclnnMuls. Every
//! intermediate must die inside the block.

/// Emits the `softmax` module's items (see [`ascend_fusion!`](crate::ascend_fusion)).
#[doc(hidden)]
#[macro_export]
macro_rules! __ascend_fusion_softmax {
    ($handle:ident) => {
        use burn_backend::ops::{ActivationOps, FloatTensorOps};
        use burn_fusion::stream::Context;
        use burn_ir::{
            FloatOperationIr, NumericOperationIr, OperationIr, ScalarIr, TensorIr, TensorStatus,
        };

        use super::super::Ascend;
        use super::lower::scalar_f64;
        use super::pattern::{consumed, float, numeric};
        use super::{global, scalar_value, take_input, $handle};

        /// What a recorded prefix of the pattern has bound.
        #[derive(Debug, Clone, PartialEq)]
        struct Bound {
            /// x as its last use in the block (the shift) recorded it.
            x: TensorIr,
            /// `x = x0 * a` first: x0 as the block's multiply recorded it, and `a`.
            scaled: Option<(TensorIr, ScalarIr)>,
            dim: usize,
            log: bool,
            out: Option<TensorIr>,
        }

        /// `Some(bound)` while `ops` is a prefix of either pattern (`bound.out` once complete).
        fn parse(ops: &[OperationIr]) -> Option<Bound> {
            use NumericOperationIr as N;
            let (scaled, ops) = match numeric(ops.first()?)? {
                N::MulScalar(m) => (Some(m), &ops[1..]),
                _ => (None, ops),
            };
            let Some(first) = ops.first() else {
                // A lone multiply may start the pattern; the max decides.
                return scaled.map(|m| Bound {
                    x: m.out.clone(),
                    scaled: Some((m.lhs.clone(), m.rhs)),
                    dim: 0,
                    log: false,
                    out: None,
                });
            };
            let N::MaxDim(max) = numeric(first)? else {
                return None;
            };
            let (x, dim) = (&max.input, max.axis);
            if scaled.is_some_and(|m| m.out.id != x.id) {
                return None;
            }
            let mut bound = Bound {
                x: x.clone(),
                scaled: scaled.map(|m| (m.lhs.clone(), m.rhs)),
                dim,
                log: false,
                out: None,
            };
            let Some(op) = ops.get(1) else {
                return Some(bound);
            };
            let N::Sub(shift) = numeric(op)? else {
                return None;
            };
            if shift.lhs.id != x.id || !consumed(&shift.rhs, max.out.id) {
                return None;
            }
            // A scaled x is never written out, so it must die here.
            if bound.scaled.is_some() && shift.lhs.status != TensorStatus::ReadWrite {
                return None;
            }
            bound.x = shift.lhs.clone();
            let c = &shift.out;
            let Some(op) = ops.get(2) else {
                return Some(bound);
            };
            let FloatOperationIr::Exp(exp) = float(op)? else {
                return None;
            };
            // Softmax's shift dies in exp; log-softmax keeps it for the final subtraction.
            if exp.input.id != c.id {
                return None;
            }
            bound.log = exp.input.status == TensorStatus::ReadOnly;
            let e = &exp.out;
            let Some(op) = ops.get(3) else {
                return Some(bound);
            };
            let N::SumDim(sum) = numeric(op)? else {
                return None;
            };
            let e_status = if bound.log {
                TensorStatus::ReadWrite
            } else {
                TensorStatus::ReadOnly
            };
            if sum.input.id != e.id || sum.input.status != e_status || sum.axis != dim {
                return None;
            }
            let s = &sum.out;
            let Some(op) = ops.get(4) else {
                return Some(bound);
            };
            if !bound.log {
                let N::Div(div) = numeric(op)? else {
                    return None;
                };
                if !consumed(&div.lhs, e.id) || !consumed(&div.rhs, s.id) || ops.len() > 5 {
                    return None;
                }
                bound.out = Some(div.out.clone());
                return Some(bound);
            }
            let FloatOperationIr::Log(log) = float(op)? else {
                return None;
            };
            if !consumed(&log.input, s.id) {
                return None;
            }
            let Some(op) = ops.get(5) else {
                return Some(bound);
            };
            let N::Sub(sub) = numeric(op)? else {
                return None;
            };
            if !consumed(&sub.lhs, c.id) || !consumed(&sub.rhs, log.out.id) || ops.len() > 6 {
                return None;
            }
            bound.out = Some(sub.out.clone());
            Some(bound)
        }

        $crate::__ascend_fusion_pattern_types! {
            /// The composed softmax and log-softmax as a `Pattern`.
            SoftmaxPattern { grows: false, complete: |b| b.out.is_some() }
            /// Recognises the composed softmax and log-softmax in the op stream.
            SoftmaxFuser
            /// A composed softmax or log-softmax run as one aclnn operator.
            SoftmaxOptimization = Softmax, "softmax"
        }

        impl SoftmaxOptimization {
            pub(super) fn execute(&mut self, context: &mut Context<$handle>) {
                let b = parse(&self.ops).expect("a recorded block parses as it did when fused");
                let out = global(context, &b.out.expect("a complete pattern"));
                let x = match &b.scaled {
                    Some((x0, a)) => {
                        let a = scalar_f64(&scalar_value(context, a));
                        Ascend::float_mul_scalar(take_input(context, x0), a.into())
                    }
                    None => take_input(context, &b.x),
                };
                let y = if b.log {
                    Ascend::log_softmax(x, b.dim)
                } else {
                    Ascend::softmax(x, b.dim)
                };
                context.handles.register_handle(out.id, $handle::Tensor(y));
            }
        }
    };
}
