//! A pattern fusion: layer norm as Burn composes it (`ModuleOps::layer_norm`'s default, which
//! `Fusion` records op by op) runs as one launch of the `layer_norm` Ascend C kernel instead of
//! two mean reductions and seven element-wise ops.
//!
//! The recorded pattern, over the last axis of `x`:
//! `m = mean_dim(x)`, `c = x - m`, `v = mean_dim(c * c)`, `d = sqrt(v + eps)`, `n = c / d`,
//! then optionally `n * gamma` and `+ beta` (each `[.., 1, H]`, possibly reshaped from `[H]`
//! just before). Every intermediate must die inside the block, since the kernel produces only
//! the result.

/// Emits the `layer_norm` module's items (see [`ascend_fusion!`](crate::ascend_fusion)).
#[doc(hidden)]
#[macro_export]
macro_rules! __ascend_fusion_layer_norm {
    ($handle:ident) => {
        use burn_backend::ops::FloatTensorOps;
        use burn_fusion::stream::Context;
        use burn_ir::{
            BinaryOpIr, FloatOperationIr, NumericOperationIr, OperationIr, ScalarIr, TensorIr,
            TensorStatus,
        };

        use super::super::{run, Ascend};
        use super::pattern::{consumed, leading_ones, numeric, parameter, reshape};
        use super::{global, scalar, take_input, $handle};
        use $crate::ops::fused::layer_norm;

        /// What a recorded prefix of the pattern has bound.
        #[derive(Debug, Clone, PartialEq)]
        struct Bound {
            x: TensorIr,
            eps: ScalarIr,
            gamma: Option<TensorIr>,
            beta: Option<TensorIr>,
            /// The tensor the block produces so far.
            result: TensorIr,
            /// The result is the full pattern up to here (a layer norm, with or without affine).
            complete: bool,
        }

        fn is_last_axis(axis: usize, x: &TensorIr) -> bool {
            axis + 1 == x.shape.rank()
        }

        /// `Some(bound)` while `ops` is a prefix of the pattern, `None` once it is not.
        fn parse(ops: &[OperationIr]) -> Option<Bound> {
            use NumericOperationIr as N;
            // mean_dim(x)
            let op = ops.first()?;
            let N::MeanDim(mean) = numeric(op)? else {
                return None;
            };
            let x = mean.input.clone();
            if !is_last_axis(mean.axis, &x) || super::lower::elem_type(x.dtype)?.bytes() == 1 {
                return None;
            }
            let partial = |result: &TensorIr| Bound {
                x: x.clone(),
                eps: ScalarIr::Float(0.0),
                gamma: None,
                beta: None,
                result: result.clone(),
                complete: false,
            };
            // c = x - m
            let Some(op) = ops.get(1) else {
                return Some(partial(&mean.out));
            };
            let N::Sub(sub) = numeric(op)? else {
                return None;
            };
            if sub.lhs.id != x.id || !consumed(&sub.rhs, mean.out.id) {
                return None;
            }
            let c = &sub.out;
            // sq = c * c
            let Some(op) = ops.get(2) else {
                return Some(partial(c));
            };
            let N::Mul(sq) = numeric(op)? else {
                return None;
            };
            if sq.lhs.id != c.id || sq.rhs.id != c.id || sq.rhs.status != TensorStatus::ReadOnly {
                return None;
            }
            // v = mean_dim(sq)
            let Some(op) = ops.get(3) else {
                return Some(partial(&sq.out));
            };
            let N::MeanDim(var) = numeric(op)? else {
                return None;
            };
            if !consumed(&var.input, sq.out.id) || !is_last_axis(var.axis, &x) {
                return None;
            }
            // v + eps
            let Some(op) = ops.get(4) else {
                return Some(partial(&var.out));
            };
            let N::AddScalar(add) = numeric(op)? else {
                return None;
            };
            if !consumed(&add.lhs, var.out.id) {
                return None;
            }
            let eps = add.rhs;
            // d = sqrt(v + eps)
            let Some(op) = ops.get(5) else {
                return Some(partial(&add.out));
            };
            let OperationIr::Float(_, FloatOperationIr::Sqrt(sqrt)) = op else {
                return None;
            };
            if !consumed(&sqrt.input, add.out.id) {
                return None;
            }
            // n = c / d
            let Some(op) = ops.get(6) else {
                return Some(partial(&sqrt.out));
            };
            let N::Div(div) = numeric(op)? else {
                return None;
            };
            if !consumed(&div.lhs, c.id) || !consumed(&div.rhs, sqrt.out.id) {
                return None;
            }
            let mut bound = Bound {
                // The subtraction is x's last use in the block: its status says who else holds x.
                x: sub.lhs.clone(),
                eps,
                gamma: None,
                beta: None,
                result: div.out.clone(),
                complete: true,
            };
            // Then `* gamma` and `+ beta`, each optionally reshaped from [H] just before.
            let mut rest: Vec<&OperationIr> = ops[7..].iter().collect();
            for (i, kind) in [Affine::Scale, Affine::Shift].into_iter().enumerate() {
                if rest.is_empty() {
                    return Some(bound);
                }
                if i == 0 && matches!(rest[0], OperationIr::NumericFloat(_, N::Add(_))) {
                    continue; // no gamma, only beta
                }
                let (param, used) = affine(&rest, kind, &bound)?;
                match param {
                    None => {
                        bound.complete = false;
                        return Some(bound);
                    }
                    Some((param, out)) => {
                        match kind {
                            Affine::Scale => bound.gamma = Some(param),
                            Affine::Shift => bound.beta = Some(param),
                        }
                        bound.result = out;
                        bound.complete = true;
                        rest.drain(..used);
                    }
                }
            }
            rest.is_empty().then_some(bound)
        }

        #[derive(Debug, Clone, Copy, PartialEq)]
        enum Affine {
            Scale,
            Shift,
        }

        /// Parses `[reshape(param)], result op param` at the head of `rest`: `Some((None, _))` for a
        /// valid but unfinished prefix, `Some((Some((param [H], out)), ops used))` when complete.
        #[allow(clippy::type_complexity)]
        fn affine(
            rest: &[&OperationIr],
            kind: Affine,
            bound: &Bound,
        ) -> Option<(Option<(TensorIr, TensorIr)>, usize)> {
            let h = *bound.x.shape.last()?;
            let rank = bound.x.shape.rank();
            let row_shaped = |t: &TensorIr| leading_ones(t, rank, &[h]) && t.dtype == bound.x.dtype;
            let reshaped = reshape(rest[0]);
            let at = usize::from(reshaped.is_some());
            if let Some(r) = reshaped {
                let param_ok =
                    r.input.shape.rank() == 1 && r.input.shape[0] == h && row_shaped(&r.out);
                if !param_ok {
                    return None;
                }
            }
            let Some(op) = rest.get(at) else {
                return Some((None, 0));
            };
            let bin: &BinaryOpIr = match (kind, op) {
                (Affine::Scale, OperationIr::NumericFloat(_, NumericOperationIr::Mul(b)))
                | (Affine::Shift, OperationIr::NumericFloat(_, NumericOperationIr::Add(b))) => b,
                _ => return None,
            };
            let (other, mine) = if bin.lhs.id == bound.result.id {
                (&bin.rhs, &bin.lhs)
            } else {
                (&bin.lhs, &bin.rhs)
            };
            if !consumed(mine, bound.result.id) || !row_shaped(other) {
                return None;
            }
            let param = parameter(reshaped, other, &[h])?;
            Some((Some((param, bin.out.clone())), at + 1))
        }

        $crate::__ascend_fusion_pattern_types! {
            /// The composed layer norm as a `Pattern`.
            LayerNormPattern { grows: true, complete: |b| b.complete }
            /// Recognises the composed layer norm in the op stream.
            LayerNormFuser
            /// A composed layer norm run by the `layer_norm` kernel.
            LayerNormOptimization = LayerNorm, "layer_norm"
        }

        impl LayerNormOptimization {
            pub(super) fn execute(&mut self, context: &mut Context<$handle>) {
                let b = parse(&self.ops).expect("a recorded block parses as it did when fused");
                let eps = scalar(context, &b.eps);
                let out = global(context, &b.result);
                let h = *out.shape.last().expect("rank >= 1");
                let xt = take_input(context, &b.x);
                let mut param = |t: &Option<TensorIr>| {
                    t.as_ref()
                        .map(|t| Ascend::float_reshape(take_input(context, t), [h].into()))
                };
                let (g, bt) = (param(&b.gamma), param(&b.beta));
                let (y, _, _) = run(
                    "layer_norm",
                    layer_norm(&xt, g.as_deref(), bt.as_deref(), eps as f64),
                );
                context.handles.register_handle(out.id, $handle::Tensor(y));
            }
        }
    };
}
