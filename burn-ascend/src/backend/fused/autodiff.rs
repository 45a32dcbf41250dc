//! `FusedOps` for `Autodiff<B>`: each fused op runs forward on the inner backend (its kernel on
//! Ascend) and records a backward step made of the inner backend's fused ops, so training runs
//! the kernels both ways:
//! - `moe_gather` and `moe_scatter` are each other's adjoints: the gradient of a gather is the
//!   unweighted scatter of the output gradient (the top-k copies of a token summed), the gradient
//!   of a scatter is the gather of the output gradient times each row's routing weight, and the
//!   weights' gradient is the dot product of each expert output row with its token's gradient;
//! - `token_rearrange` sends each gradient row back to the row it was read from (the inverse
//!   permutation when `perm` is one);
//! - `layer_norm` differentiates through [`FusedOps::layer_norm_backward`]; its mean and rstd
//!   are statistics, returned without gradient (as PyTorch's native layer norm does);
//! - `rms_norm` differentiates through [`FusedOps::rms_norm_backward`]; its rstd is a statistic,
//!   returned without gradient; `add_rms_norm` keeps its composed default, a tracked add then
//!   this `rms_norm`, so both its outputs (the norm and the sum) carry gradients;
//! - `grouped_matmul` takes its input gradient from `grouped_matmul` with the weights' last two
//!   dims swapped and its weight gradient from [`FusedOps::grouped_matmul_weight_grad`].
//!
//! - `flash_attention` differentiates through [`FusedOps::flash_attention_backward`] from the
//!   forward's saved softmax statistics, where the inner backend's forward is fused; otherwise
//!   it is Autodiff's own (composed) attention.
//!
//! `vector_add` keeps its composed default, which is differentiable.

use burn_autodiff::checkpoint::base::Checkpointer;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::{binary, unary, Backward, Ops, OpsKind};
use burn_autodiff::{Autodiff, NodeId};
use burn_tensor::IndexingUpdateOp;

use super::*;

type Ad<B, C> = Autodiff<B, C>;

#[derive(Debug)]
struct MoeGather;

impl<B: FusedOps> Backward<B, 1> for MoeGather {
    /// Indices and top-k.
    type State = (IntTensor<B>, usize);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let (indices, top_k) = ops.state;
        unary::<B, _>(ops.parents, ops.node, grads, |grad| {
            B::moe_scatter(grad, indices, None, top_k)
        });
    }
}

#[derive(Debug)]
struct MoeScatter;

/// What the backward pass of `moe_scatter` needs.
#[derive(Debug, Clone)]
struct MoeScatterState<B: Backend> {
    indices: IntTensor<B>,
    top_k: usize,
    /// The expert outputs, for the weights' gradient.
    y: Option<NodeId>,
    /// The routing weights, for the outputs' gradient.
    weights: Option<NodeId>,
    /// The routing weights' type, for their gradient.
    weights_dtype: Option<DType>,
}

/// Parents: `[y]`, or `[y, weights]`.
impl<B: FusedOps, const N: usize> Backward<B, N> for MoeScatter {
    type State = MoeScatterState<B>;

    fn backward(self, ops: Ops<Self::State, N>, grads: &mut Gradients, cp: &mut Checkpointer) {
        let s = ops.state;
        let grad = grads.consume::<B>(&ops.node);
        let mut parents = ops.parents.into_iter();
        let (y_parent, w_parent) = (parents.next().flatten(), parents.next().flatten());
        // Row i of the gathered gradient is the gradient of the token that row i feeds.
        let gathered: Float2<B> = float(B::moe_gather(grad, s.indices.clone(), s.top_k));
        let idx: Ints<B> = int(s.indices);
        if let (Some(node), Some(dtype)) = (w_parent, s.weights_dtype) {
            let y: Float2<B> = float(cp.retrieve_node_output(s.y.expect("y is kept for dw")));
            let [slots, _] = y.dims();
            let per_row = (gathered.clone().cast(DType::F32) * y.cast(DType::F32))
                .sum_dim(1)
                .reshape([slots]);
            let dw = Tensor::<B, 1>::zeros([slots], (&per_row.device(), DType::F32))
                .select_assign(0, idx.clone(), per_row, IndexingUpdateOp::Add)
                .cast(dtype);
            grads.register::<B>(node.id, prim(dw));
        }
        if let Some(node) = y_parent {
            let dy = match s.weights {
                Some(id) => {
                    let w: Tensor<B, 1> = float(cp.retrieve_node_output(id));
                    let w = w.cast(gathered.dtype()).select(0, idx).unsqueeze_dim(1);
                    gathered * w
                }
                None => gathered,
            };
            grads.register::<B>(node.id, prim(dy));
        }
    }
}

/// `moe_scatter` of `inputs = [y]` or `[y, weights]`.
fn moe_scatter<B: FusedOps, C: CheckpointStrategy, const N: usize>(
    inputs: [&FloatTensor<Ad<B, C>>; N],
    indices: IntTensor<B>,
    top_k: usize,
) -> FloatTensor<Ad<B, C>> {
    let (y, weights) = (inputs[0], inputs.get(1).copied());
    let forward = |indices| {
        B::moe_scatter(
            y.primitive.clone(),
            indices,
            weights.map(|w| w.primitive.clone()),
            top_k,
        )
    };
    match MoeScatter
        .prepare::<C>(inputs.map(|t| t.node.clone()))
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(mut prep) => {
            let w_tracked = weights.is_some_and(|w| w.is_tracked());
            let state = MoeScatterState {
                indices: indices.clone(),
                top_k,
                y: w_tracked.then(|| prep.checkpoint(y)),
                weights: weights
                    .filter(|_| y.is_tracked())
                    .map(|w| prep.checkpoint(w)),
                weights_dtype: weights.map(|w| w.primitive.dtype()),
            };
            prep.finish(state, forward(indices))
        }
        OpsKind::UnTracked(prep) => prep.finish(forward(indices)),
    }
}

#[derive(Debug)]
struct TokenRearrange;

impl<B: FusedOps> Backward<B, 1> for TokenRearrange {
    /// The permutation.
    type State = IntTensor<B>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let perm = ops.state;
        unary::<B, _>(ops.parents, ops.node, grads, |grad| {
            let grad: Float2<B> = float(grad);
            prim(
                grad.zeros_like()
                    .select_assign(0, int(perm), grad, IndexingUpdateOp::Add),
            )
        });
    }
}

#[derive(Debug)]
struct LayerNorm;

/// What the backward pass of `layer_norm` needs.
#[derive(Debug, Clone)]
struct LayerNormState<B: Backend> {
    x: NodeId,
    gamma: Option<NodeId>,
    mean: FloatTensor<B>,
    rstd: FloatTensor<B>,
    /// The types of gamma and beta, if given, for their gradients.
    gamma_dtype: Option<DType>,
    beta_dtype: Option<DType>,
}

/// Parents: x, then gamma and beta when given.
impl<B: FusedOps, const N: usize> Backward<B, N> for LayerNorm {
    type State = LayerNormState<B>;

    fn backward(self, ops: Ops<Self::State, N>, grads: &mut Gradients, cp: &mut Checkpointer) {
        let s = ops.state;
        let dy = grads.consume::<B>(&ops.node);
        let x = cp.retrieve_node_output(s.x);
        let gamma = s.gamma.map(|id| cp.retrieve_node_output(id));
        let g = B::layer_norm_backward(dy, x, s.mean, s.rstd, gamma);
        let mut parents = ops.parents.into_iter();
        let as_param = |t: FloatTensor<B>, dtype: DType| {
            if t.dtype() == dtype {
                t
            } else {
                prim(float::<B, 1>(t).cast(dtype))
            }
        };
        if let Some(node) = parents.next().flatten() {
            grads.register::<B>(node.id, g.dx);
        }
        if let Some(dtype) = s.gamma_dtype {
            if let Some(node) = parents.next().flatten() {
                grads.register::<B>(node.id, as_param(g.dgamma, dtype));
            }
        }
        if let Some(dtype) = s.beta_dtype {
            if let Some(node) = parents.next().flatten() {
                grads.register::<B>(node.id, as_param(g.dbeta, dtype));
            }
        }
    }
}

/// `layer_norm` of `inputs = [x]`, `[x, gamma]`, `[x, beta]` or `[x, gamma, beta]`.
fn layer_norm<B: FusedOps, C: CheckpointStrategy, const N: usize>(
    inputs: [&FloatTensor<Ad<B, C>>; N],
    has_gamma: bool,
    eps: f64,
) -> LayerNormOutput<Ad<B, C>> {
    let x = inputs[0];
    let gamma = has_gamma.then(|| inputs[1]);
    let beta = (N > 1 + has_gamma as usize).then(|| inputs[N - 1]);
    let out = <B as FusedOps>::layer_norm(
        x.primitive.clone(),
        gamma.map(|g| g.primitive.clone()),
        beta.map(|b| b.primitive.clone()),
        eps,
    );
    let (mean, rstd) = (out.mean.clone(), out.rstd.clone());
    let y = match LayerNorm
        .prepare::<C>(inputs.map(|t| t.node.clone()))
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(mut prep) => {
            let state = LayerNormState {
                x: prep.checkpoint(x),
                gamma: gamma.map(|g| prep.checkpoint(g)),
                mean: out.mean,
                rstd: out.rstd,
                gamma_dtype: gamma.map(|g| g.primitive.dtype()),
                beta_dtype: beta.map(|b| b.primitive.dtype()),
            };
            prep.finish(state, out.y)
        }
        OpsKind::UnTracked(prep) => prep.finish(out.y),
    };
    // The statistics are untracked outputs; built directly rather than through
    // `AutodiffBackend::from_inner`, whose impl needs `B: DistributedBackend` when Burn's
    // `distributed` feature is on.
    LayerNormOutput {
        y,
        mean: <FloatTensor<Ad<B, C>>>::new(mean),
        rstd: <FloatTensor<Ad<B, C>>>::new(rstd),
    }
}

#[derive(Debug)]
struct RmsNorm;

/// What the backward pass of `rms_norm` needs.
#[derive(Debug, Clone)]
struct RmsNormState<B: Backend> {
    x: NodeId,
    gamma: NodeId,
    rstd: FloatTensor<B>,
    /// gamma's type, for its gradient.
    gamma_dtype: DType,
}

/// Parents: x and gamma.
impl<B: FusedOps> Backward<B, 2> for RmsNorm {
    type State = RmsNormState<B>;

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, cp: &mut Checkpointer) {
        let s = ops.state;
        let dy = grads.consume::<B>(&ops.node);
        let x = cp.retrieve_node_output(s.x);
        let gamma = cp.retrieve_node_output(s.gamma);
        let g = B::rms_norm_backward(dy, x, s.rstd, gamma);
        let [x_parent, gamma_parent] = ops.parents;
        if let Some(node) = x_parent {
            grads.register::<B>(node.id, g.dx);
        }
        if let Some(node) = gamma_parent {
            let dgamma = if g.dgamma.dtype() == s.gamma_dtype {
                g.dgamma
            } else {
                prim(float::<B, 1>(g.dgamma).cast(s.gamma_dtype))
            };
            grads.register::<B>(node.id, dgamma);
        }
    }
}

#[derive(Debug)]
struct FlashAttention;

/// What the backward pass of `flash_attention` needs.
#[derive(Debug, Clone)]
struct FlashAttentionState<B: Backend> {
    q: NodeId,
    k: NodeId,
    v: NodeId,
    mask: Option<BoolTensor<B>>,
    options: AttentionModuleOptions,
    saved: FlashAttentionSaved<B>,
}

/// Parents: q, k and v.
impl<B: FusedOps> Backward<B, 3> for FlashAttention {
    type State = FlashAttentionState<B>;

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, cp: &mut Checkpointer) {
        let s = ops.state;
        let dy = grads.consume::<B>(&ops.node);
        let q = cp.retrieve_node_output(s.q);
        let k = cp.retrieve_node_output(s.k);
        let v = cp.retrieve_node_output(s.v);
        let g = B::flash_attention_backward(q, k, v, s.mask, s.options, s.saved, dy);
        let [qp, kp, vp] = ops.parents;
        for (parent, grad) in [(qp, g.dq), (kp, g.dk), (vp, g.dv)] {
            if let Some(node) = parent {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

#[derive(Debug)]
struct GroupedMatmul;

impl<B: FusedOps> Backward<B, 2> for GroupedMatmul {
    /// x (kept when the weights need a gradient), the weights (kept when x does), group sizes.
    type State = (Option<NodeId>, Option<NodeId>, IntTensor<B>);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, cp: &mut Checkpointer) {
        let (x, weights, sizes) = ops.state;
        let x: Option<FloatTensor<B>> = x.map(|id| cp.retrieve_node_output(id));
        let weights: Option<FloatTensor<B>> = weights.map(|id| cp.retrieve_node_output(id));
        let dx_sizes = sizes.clone();
        binary::<B, _, _>(
            ops.parents,
            ops.node,
            grads,
            |grad| {
                let w = weights.expect("the weights are kept for dx");
                B::grouped_matmul(grad, B::float_swap_dims(w, 1, 2), dx_sizes)
            },
            |grad| B::grouped_matmul_weight_grad(x.expect("x is kept for dw"), grad, sizes),
        );
    }
}

impl<B: FusedOps, C: CheckpointStrategy> FusedOps for Autodiff<B, C> {
    fn layer_norm(
        x: FloatTensor<Self>,
        gamma: Option<FloatTensor<Self>>,
        beta: Option<FloatTensor<Self>>,
        eps: f64,
    ) -> LayerNormOutput<Self> {
        match (&gamma, &beta) {
            (None, None) => layer_norm::<B, C, 1>([&x], false, eps),
            (Some(g), None) => layer_norm::<B, C, 2>([&x, g], true, eps),
            (None, Some(b)) => layer_norm::<B, C, 2>([&x, b], false, eps),
            (Some(g), Some(b)) => layer_norm::<B, C, 3>([&x, g, b], true, eps),
        }
    }

    fn flash_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        mask: Option<BoolTensor<Self>>,
        options: AttentionModuleOptions,
    ) -> FloatTensor<Self> {
        let forward = B::flash_attention_forward(
            q.primitive.clone(),
            k.primitive.clone(),
            v.primitive.clone(),
            mask.clone(),
            options,
        );
        // No fused forward for this call: Autodiff's attention, Burn's differentiable
        // composition.
        let Some(forward) = forward else {
            return Self::attention(q, k, v, mask, None, options);
        };
        match FlashAttention
            .prepare::<C>([q.node.clone(), k.node.clone(), v.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let state = FlashAttentionState {
                    q: prep.checkpoint(&q),
                    k: prep.checkpoint(&k),
                    v: prep.checkpoint(&v),
                    mask,
                    options,
                    saved: forward.saved,
                };
                prep.finish(state, forward.out)
            }
            OpsKind::UnTracked(prep) => prep.finish(forward.out),
        }
    }

    fn rms_norm(x: FloatTensor<Self>, gamma: FloatTensor<Self>, eps: f64) -> RmsNormOutput<Self> {
        let out = <B as FusedOps>::rms_norm(x.primitive.clone(), gamma.primitive.clone(), eps);
        let rstd = out.rstd.clone();
        let y = match RmsNorm
            .prepare::<C>([x.node.clone(), gamma.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let state = RmsNormState {
                    x: prep.checkpoint(&x),
                    gamma: prep.checkpoint(&gamma),
                    rstd: out.rstd,
                    gamma_dtype: gamma.primitive.dtype(),
                };
                prep.finish(state, out.y)
            }
            OpsKind::UnTracked(prep) => prep.finish(out.y),
        };
        // rstd is an untracked output, built as layer_norm builds its statistics.
        RmsNormOutput {
            y,
            rstd: <FloatTensor<Self>>::new(rstd),
        }
    }

    fn moe_gather(
        x: FloatTensor<Self>,
        indices: IntTensor<Self>,
        top_k: usize,
    ) -> FloatTensor<Self> {
        match MoeGather
            .prepare::<C>([x.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let out = B::moe_gather(x.primitive, indices.clone(), top_k);
                prep.finish((indices, top_k), out)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::moe_gather(x.primitive, indices, top_k)),
        }
    }

    fn moe_scatter(
        y: FloatTensor<Self>,
        indices: IntTensor<Self>,
        weights: Option<FloatTensor<Self>>,
        top_k: usize,
    ) -> FloatTensor<Self> {
        match &weights {
            None => moe_scatter::<B, C, 1>([&y], indices, top_k),
            Some(w) => moe_scatter::<B, C, 2>([&y, w], indices, top_k),
        }
    }

    fn token_rearrange(x: FloatTensor<Self>, perm: IntTensor<Self>) -> FloatTensor<Self> {
        match TokenRearrange
            .prepare::<C>([x.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let out = B::token_rearrange(x.primitive, perm.clone());
                prep.finish(perm, out)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::token_rearrange(x.primitive, perm)),
        }
    }

    fn grouped_matmul(
        x: FloatTensor<Self>,
        weights: FloatTensor<Self>,
        group_sizes: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        match GroupedMatmul
            .prepare::<C>([x.node.clone(), weights.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let state = (
                    weights.is_tracked().then(|| prep.checkpoint(&x)),
                    x.is_tracked().then(|| prep.checkpoint(&weights)),
                    group_sizes.clone(),
                );
                let out = B::grouped_matmul(x.primitive, weights.primitive, group_sizes);
                prep.finish(state, out)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::grouped_matmul(
                x.primitive,
                weights.primitive,
                group_sizes,
            )),
        }
    }
}
