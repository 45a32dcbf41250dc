//! A pattern fusion: linear as Burn composes it (`ModuleOps::linear`'s default, which `Fusion`
//! records op by op) runs as `Ascend::linear`: one aclnnAddmm, the bias added in the matmul's
//! epilogue (one aclnnWeightQuantBatchMatmulV2 for a lazily dequantized int8 weight).
//!
//! The recorded pattern: `[w' = reshape(w)] y = x @ w' [b' = reshape(b)] out = y + b'`, with
//! `w [k, n]` (reshaped to `[1, .., k, n]` for an `x` of higher rank), `b [n]` (reshaped to
//! `[1, .., n]`), and `y` dying inside the block.

/// Emits the `linear` module's items (see [`ascend_fusion!`](crate::ascend_fusion)).
#[doc(hidden)]
#[macro_export]
macro_rules! __ascend_fusion_linear {
    ($handle:ident) => {
        use burn_backend::ops::{FloatTensorOps, ModuleOps};
        use burn_fusion::stream::Context;
        use burn_ir::{FloatOperationIr, NumericOperationIr, OperationIr, TensorIr, TensorStatus};
        use burn_std::DType;

        use super::super::Ascend;
        use super::pattern::{leading_ones, parameter, reshape};
        use super::{global, take_input, $handle};

        /// The operands of a recognised (prefix of a) linear.
        #[derive(Debug, Clone, PartialEq)]
        struct Bound {
            x: TensorIr,
            /// The weight as `[k, n]`.
            weight: Option<TensorIr>,
            /// The bias as `[n]`.
            bias: Option<TensorIr>,
            out: Option<TensorIr>,
        }

        /// `Some(bound)` while `ops` is a prefix of the pattern.
        fn parse(ops: &[OperationIr]) -> Option<Bound> {
            let mut at = 0;
            let weight_reshape = ops.first().and_then(reshape);
            if weight_reshape.is_some() {
                at += 1;
            }
            let Some(op) = ops.get(at) else {
                // A lone reshape may start the pattern if it is Burn's weight reshape, `[k, n]` to
                // `[1, .., 1, k, n]` (any other one would hold the block and keep the linear that
                // follows from fusing); the matmul decides.
                let r = weight_reshape?;
                let (rank_in, rank_out) = (r.input.shape.rank(), r.out.shape.rank());
                let lifted = rank_in == 2
                    && rank_out > 2
                    && leading_ones(&r.out, rank_out, &[r.input.shape[0], r.input.shape[1]]);
                return lifted.then(|| Bound {
                    x: r.input.clone(),
                    weight: None,
                    bias: None,
                    out: None,
                });
            };
            let OperationIr::Float(_, FloatOperationIr::Matmul(mm)) = op else {
                return None;
            };
            let (x, w) = (&mm.lhs, &mm.rhs);
            let rank = x.shape.rank();
            let cube = matches!(x.dtype, DType::F32 | DType::F16 | DType::BF16);
            if rank < 2 || !cube || w.dtype != x.dtype {
                return None;
            }
            let kn = [w.shape[w.shape.rank() - 2], w.shape[w.shape.rank() - 1]];
            let weight = parameter(weight_reshape, w, &kn)?;
            if !leading_ones(w, rank, &kn) {
                return None;
            }
            at += 1;
            let mut bound = Bound {
                x: x.clone(),
                weight: Some(weight),
                bias: None,
                out: None,
            };
            let bias_reshape = ops.get(at).and_then(reshape);
            if bias_reshape.is_some() {
                at += 1;
            }
            let Some(op) = ops.get(at) else {
                return Some(bound);
            };
            let OperationIr::NumericFloat(_, NumericOperationIr::Add(add)) = op else {
                return None;
            };
            let y = &mm.out;
            let (mine, other) = if add.lhs.id == y.id {
                (&add.lhs, &add.rhs)
            } else {
                (&add.rhs, &add.lhs)
            };
            let n = [kn[1]];
            if mine.id != y.id
                || mine.status != TensorStatus::ReadWrite
                || other.dtype != x.dtype
                || !leading_ones(other, rank, &n)
            {
                return None;
            }
            let bias = parameter(bias_reshape, other, &n)?;
            bound.bias = Some(bias);
            bound.out = Some(add.out.clone());
            (at + 1 == ops.len()).then_some(bound)
        }

        $crate::__ascend_fusion_pattern_types! {
            /// The composed linear as a `Pattern`.
            LinearPattern { grows: false, complete: |b| b.out.is_some() }
            /// Recognises the composed linear in the op stream.
            LinearFuser
            /// A composed linear run as one aclnnAddmm.
            LinearOptimization = Linear, "linear"
        }

        impl LinearOptimization {
            pub(super) fn execute(&mut self, context: &mut Context<$handle>) {
                let b = parse(&self.ops).expect("a recorded block parses as it did when fused");
                let recorded = |t: &Option<TensorIr>| t.clone().expect("a complete pattern");
                let (w, bias) = (recorded(&b.weight), recorded(&b.bias));
                let out = global(context, &recorded(&b.out));
                let (k, n) = {
                    let w = global(context, &w);
                    (w.shape[w.shape.rank() - 2], w.shape[w.shape.rank() - 1])
                };
                let xt = take_input(context, &b.x);
                let wt = Ascend::float_reshape(take_input(context, &w), [k, n].into());
                let bt = Ascend::float_reshape(take_input(context, &bias), [n].into());
                // Through the backend's `linear`: a lazily dequantized int8 weight takes its int8 path.
                let y = Ascend::linear(xt, wt, Some(bt));
                context.handles.register_handle(out.id, $handle::Tensor(y));
            }
        }
    };
}
