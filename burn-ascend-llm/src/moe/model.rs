//! The MoE decoder: embedding, pre-norm blocks (grouped-query attention with rotary positions,
//! then a mixture-of-experts SwiGLU feed-forward), final norm and LM head.
//!
//! Every norm goes through `fused::layer_norm`, the MoE layer through `fused::moe_gather`,
//! `fused::grouped_matmul` and `fused::moe_scatter` (expert counts stay on the device), and
//! decode attention through `fused::decode_attention` (see [`crate::engine::serve`]).

use burn::module::{Module, Param, ParamId};
use burn::nn::{Embedding, EmbeddingConfig, Initializer, Linear, LinearConfig};
use burn::tensor::activation::softmax;
use burn::tensor::backend::Backend;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Bool, DType, IndexingUpdateOp, Int, Tensor, TensorData};
use burn_ascend::{fused, AscendDevice, FusedOps};

use super::config::{ConfigError, MoeConfig};
use super::data_parallel::DataParallel;
use super::expert_parallel::ExpertParallel;
use super::parallel::Parallel;
use crate::engine::serve::StepInputs;
use crate::engine::step::{CacheLayout, PagedAttention, StepModel};
use crate::families::blocks::quant::{operator_scale_type, Projection, Quantize, ScaleReader};

/// The sizes a forward pass needs (kept with the module, not stored in records).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dims {
    /// Query heads.
    pub q_heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// Experts.
    pub experts: usize,
    /// Experts per token.
    pub top_k: usize,
    /// Layer-norm epsilon.
    pub eps: f64,
    /// Rotary embedding base.
    pub rope_theta: f64,
    /// Vocabulary.
    pub vocab: usize,
    /// Whole-sequence attention through `fused::flash_attention` (aclnnFlashAttentionScore and
    /// its fused backward on `Ascend`) rather than the composition over the `[B, H, S, S]`
    /// scores ([`MoeDecoder::with_flash_attention`]).
    pub flash_attention: bool,
}

/// Layer norm with learned scale and shift, through the fused kernel.
#[derive(Module, Debug)]
pub struct Norm<B: Backend> {
    gamma: Param<Tensor<B, 1>>,
    beta: Param<Tensor<B, 1>>,
}

impl<B: FusedOps> Norm<B> {
    fn new(size: usize, device: &B::Device) -> Self {
        Self {
            gamma: Param::from_tensor(Tensor::ones([size], device)),
            beta: Param::from_tensor(Tensor::zeros([size], device)),
        }
    }

    /// Normalises the last dim.
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>, eps: f64) -> Tensor<B, D> {
        fused::layer_norm(x, Some(self.gamma.val()), Some(self.beta.val()), eps).0
    }
}

/// Query, key and value projections of a block.
#[derive(Module, Debug)]
pub struct Attention<B: Backend> {
    q: Projection<B>,
    k: Projection<B>,
    v: Projection<B>,
    o: Projection<B>,
}

/// Rotary position embedding of `x [.., S, heads, D]` at `positions [S]` (f32 positions are
/// exact up to 2^24), with the frequencies `theta^(-2i/D)`.
pub fn rope<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    positions: Tensor<B, 1>,
    theta: f64,
) -> Tensor<B, D> {
    let d = x.dims()[D - 1];
    rotate(x, positions, &rope_frequencies(theta, d), 1.0)
}

/// The rotary frequencies `theta^(-2i/d)`, `i < d / 2`, of heads of `d` dims (computed in f64).
pub fn rope_frequencies(theta: f64, d: usize) -> Vec<f32> {
    (0..d / 2)
        .map(|i| theta.powf(-(2.0 * i as f64) / d as f64) as f32)
        .collect()
}

/// Rotates the halves of `x [.., S, heads, D]` (`D = 2 * inv_freq.len()`) by the angles
/// `positions [S] x inv_freq`, cos and sin scaled by `factor` (YaRN's attention factor; 1 for
/// plain rope).
///
/// The angles are computed in f32 whatever x's dtype, and only cos and sin take it: f16 holds
/// whole numbers exactly only up to 2048 and bf16 up to 256, so positions (or frequencies) in
/// the model's dtype would turn later tokens by a neighbour's angle.
pub fn rotate<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    positions: Tensor<B, 1>,
    inv_freq: &[f32],
    factor: f32,
) -> Tensor<B, D> {
    let d = x.dims()[D - 1];
    let half = inv_freq.len();
    assert_eq!(
        d,
        2 * half,
        "rotary embedding of {d} dims with {half} frequencies"
    );
    let device = x.device();
    let inv_freq = Tensor::<B, 1>::from_data(
        TensorData::new(inv_freq.to_vec(), [half]),
        (&device, DType::F32),
    );
    let s = positions.dims()[0];
    let angles = positions.cast(DType::F32).reshape([s, 1]) * inv_freq.reshape([1, half]);
    let shape_of = |t: Tensor<B, 2>| {
        let mut target = [1usize; D];
        target[D - 3] = s;
        target[D - 1] = d;
        let t = Tensor::cat(vec![t.clone(), t], 1);
        let t = if factor == 1.0 {
            t
        } else {
            t.mul_scalar(factor)
        };
        t.cast(x.dtype()).reshape(target)
    };
    let (cos, sin) = (shape_of(angles.clone().cos()), shape_of(angles.sin()));
    let x1 = x.clone().narrow(D - 1, 0, half);
    let x2 = x.clone().narrow(D - 1, half, half);
    let rotated = Tensor::cat(vec![x2.neg(), x1], D - 1);
    x * cos + rotated * sin
}

impl<B: FusedOps> Attention<B> {
    fn new(cfg: &MoeConfig, device: &B::Device) -> Self {
        let hd = cfg.head_dim();
        let linear = |i, o| Projection::from(LinearConfig::new(i, o).with_bias(false).init(device));
        Self {
            q: linear(cfg.hidden, cfg.q_heads * hd),
            k: linear(cfg.hidden, cfg.kv_heads * hd),
            v: linear(cfg.hidden, cfg.kv_heads * hd),
            o: linear(cfg.q_heads * hd, cfg.hidden),
        }
    }

    /// Projects `x [B, S, H]` to rotated queries `[B, S, HQ, D]`, rotated keys and values
    /// `[B, S, HKV, D]`, for the tokens at `positions [S]`.
    pub fn project(
        &self,
        x: Tensor<B, 3>,
        positions: Tensor<B, 1>,
        dims: &Dims,
    ) -> (Tensor<B, 4>, Tensor<B, 4>, Tensor<B, 4>) {
        let [b, s, _] = x.dims();
        let q = self
            .q
            .forward(x.clone())
            .reshape([b, s, dims.q_heads, dims.head_dim]);
        let k = self
            .k
            .forward(x.clone())
            .reshape([b, s, dims.kv_heads, dims.head_dim]);
        let v = self
            .v
            .forward(x)
            .reshape([b, s, dims.kv_heads, dims.head_dim]);
        (
            rope(q, positions.clone(), dims.rope_theta),
            rope(k, positions, dims.rope_theta),
            v,
        )
    }

    /// Causal attention over the whole sequence (training, prefill, and the reference path).
    pub fn dense(&self, x: Tensor<B, 3>, positions: Tensor<B, 1>, dims: &Dims) -> Tensor<B, 3> {
        let (q, k, v) = self.project(x, positions, dims);
        self.attend(q, k, v, dims)
    }

    /// Causal attention of projected queries `[B, S, HQ, D]` over keys and values
    /// `[B, S, HKV, D]`, through the output projection: `[B, S, H]`.
    pub fn attend(
        &self,
        q: Tensor<B, 4>,
        k: Tensor<B, 4>,
        v: Tensor<B, 4>,
        dims: &Dims,
    ) -> Tensor<B, 3> {
        let [b, s, _, _] = q.dims();
        if dims.flash_attention {
            // Grouped-query heads as they are: the operator maps query head h to kv head
            // h / (HQ / HKV), as `widen` below does.
            let options = AttentionModuleOptions {
                scale: None,
                softcap: None,
                is_causal: true,
            };
            let [q, k, v] = [q, k, v].map(|t| t.swap_dims(1, 2));
            let out = fused::flash_attention(q, k, v, None, options);
            return self.o.forward(out.swap_dims(1, 2).reshape([
                b,
                s,
                dims.q_heads * dims.head_dim,
            ]));
        }
        let group = dims.q_heads / dims.kv_heads;
        let widen = |t: Tensor<B, 4>| {
            t.swap_dims(1, 2)
                .unsqueeze_dim::<5>(2)
                .expand([b, dims.kv_heads, group, s, dims.head_dim])
                .reshape([b, dims.q_heads, s, dims.head_dim])
        };
        let q = q.swap_dims(1, 2);
        let (k, v) = (widen(k), widen(v));
        let scale = (dims.head_dim as f64).powf(-0.5);
        let scores = q.matmul(k.swap_dims(2, 3)) * scale;
        let device = scores.device();
        let rows = Tensor::<B, 1, Int>::arange(0..s as i64, &device).reshape([s, 1]);
        let cols = Tensor::<B, 1, Int>::arange(0..s as i64, &device).reshape([1, s]);
        let future: Tensor<B, 2, Bool> = cols.greater(rows);
        let scores = scores.mask_fill(
            future.unsqueeze::<4>().expand([b, dims.q_heads, s, s]),
            f32::NEG_INFINITY,
        );
        let out = softmax(scores, 3).matmul(v);
        self.o.forward(
            out.swap_dims(1, 2)
                .reshape([b, s, dims.q_heads * dims.head_dim]),
        )
    }

    /// The output projection of attention results `[T, HQ * D]`.
    pub fn output(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.o.forward(x)
    }

    fn quantize(self, mode: Quantize) -> Self {
        Self {
            q: self.q.quantize(mode),
            k: self.k.quantize(mode),
            v: self.v.quantize(mode),
            o: self.o.quantize(mode),
        }
    }
}

/// A mixture-of-experts SwiGLU feed-forward.
#[derive(Module, Debug)]
pub struct Moe<B: Backend> {
    pub(crate) router: Linear<B>,
    /// The routed experts, float or quantized ([`MoeDecoder::quantize`]).
    pub(crate) experts: Experts<B>,
    /// How the layer runs across NPUs, if it does ([`super::parallel`]).
    #[module(skip)]
    pub parallel: Parallel,
}

/// A router's probabilities `[T, E]` over the experts, or the logits whose softmax (in f32)
/// they are, taken when asked: serving never asks (only the load-balancing loss reads them),
/// so a router whose fused operator does not give them launches nothing for them.
#[derive(Debug, Clone)]
pub enum RouterProbs<B: Backend> {
    /// The probabilities.
    Probs(Tensor<B, 2>),
    /// The logits.
    Logits(Tensor<B, 2>),
}

impl<B: Backend> RouterProbs<B> {
    /// The probabilities, f32 from logits.
    pub fn get(self) -> Tensor<B, 2> {
        match self {
            RouterProbs::Probs(p) => p,
            RouterProbs::Logits(l) => softmax(l.cast(DType::F32), 1),
        }
    }
}

impl<B: Backend> From<Tensor<B, 2>> for RouterProbs<B> {
    fn from(probs: Tensor<B, 2>) -> Self {
        RouterProbs::Probs(probs)
    }
}

/// Where a MoE layer sends its tokens.
pub struct Routing<B: Backend> {
    /// `[T, E]` router probabilities.
    pub probs: RouterProbs<B>,
    /// `[T * k]` the expert of each (token, choice), token-major.
    pub ids: Tensor<B, 1, Int>,
    /// `[T * k]` the weight of each (token, choice).
    pub weights: Tensor<B, 1>,
    /// The experts chosen among (E).
    pub experts: usize,
}

impl<B: Backend> Routing<B> {
    /// The routing of tokens to the experts `ids [T, k]` with `weights [T, k]`, by a router
    /// whose probabilities over the experts are `probs [T, E]`: the flattened choices. The
    /// row order and the rows per expert are computed where asked ([`Routing::order`],
    /// [`Routing::group_sizes`]): the experts' forward groups its rows with
    /// `fused::moe_permute`, which computes both itself.
    pub fn from_choices(
        probs: impl Into<RouterProbs<B>>,
        ids: Tensor<B, 2, Int>,
        weights: Tensor<B, 2>,
    ) -> Self {
        let probs = probs.into();
        let experts = match &probs {
            RouterProbs::Probs(t) | RouterProbs::Logits(t) => t.dims()[1],
        };
        let [t, k] = ids.dims();
        Routing {
            probs,
            ids: ids.reshape([t * k]),
            weights: weights.reshape([t * k]),
            experts,
        }
    }

    /// `[T * k]` I32: the (token, choice) pairs in expert order, token order within an expert:
    /// the row layout `fused::moe_gather` produces.
    pub fn order(&self) -> Tensor<B, 1, Int> {
        self.ids.clone().argsort(0).cast(DType::I32)
    }

    /// `[E]` I64: rows per expert ([`rows_per_expert`]).
    pub fn group_sizes(&self) -> Tensor<B, 1, Int> {
        rows_per_expert(self.ids.clone(), self.experts)
    }

    /// `[E]` the fraction of rows routed to each expert (detached): what the load-balancing
    /// loss weighs, computed when asked (serving does not).
    pub fn fraction(&self) -> Tensor<B, 1> {
        let rows = self.ids.dims()[0];
        (self.group_sizes().float().cast(DType::F32) / rows as f64).detach()
    }
}

/// Rows per expert `[experts]` of rows routed to `ids [R]` (each in `0..experts`), in I64, the
/// type of aclnnGroupedMatmulV4's group list: a one added at each row's expert, one scatter-add
/// (a one-hot `[R, E]` summed over its rows took five launches; Burn's `one_hot` would also
/// read the largest id back to check it, a host synchronisation a captured decode step cannot
/// have).
pub fn rows_per_expert<B: Backend>(ids: Tensor<B, 1, Int>, experts: usize) -> Tensor<B, 1, Int> {
    let (device, rows) = (ids.device(), ids.dims()[0]);
    let ones = Tensor::<B, 1, Int>::ones([rows], (&device, DType::I64));
    Tensor::<B, 1, Int>::zeros([experts], (&device, DType::I64)).scatter(
        0,
        ids,
        ones,
        IndexingUpdateOp::Add,
    )
}

/// `x [T, H]` through the experts `routing` chose (`k` per token): its rows grouped by expert
/// (`fused::moe_permute`), the experts' SwiGLU (`gate_up [E, H, 2F]` as [`gate_up`] lays them
/// out, `down [E, F, H]`), the results summed back to their tokens, weighted, plus `add [T, H]`
/// if given (`fused::moe_unpermute`, which adds a shared expert's output in the same launch).
pub fn routed_experts<B: FusedOps>(
    x: Tensor<B, 2>,
    routing: &Routing<B>,
    k: usize,
    [gate_up, down]: [Tensor<B, 3>; 2],
    add: Option<Tensor<B, 2>>,
) -> Tensor<B, 2> {
    let p = fused::moe_permute(x, routing.ids.clone(), k, routing.experts);
    let y = swiglu_experts(p.rows, gate_up, down, p.group_sizes);
    fused::moe_unpermute(y, p.row_idx, routing.weights.clone(), k, add)
}

/// Gate and up weights `[E, H, F]` side by side, `[E, H, 2F]`: each expert's gate features,
/// then its up features (vLLM's `w13` order), so one grouped matmul computes both and
/// [`fused::swiglu`] joins them. Stacked along the features of their `[E, F, H]` views: a
/// loaded weight (a transposed view of the checkpoint's rows) is copied as it lies and stays
/// a transposed view.
pub fn gate_up<B: Backend>(gate: Tensor<B, 3>, up: Tensor<B, 3>) -> Tensor<B, 3> {
    Tensor::cat(vec![gate.swap_dims(1, 2), up.swap_dims(1, 2)], 1).swap_dims(1, 2)
}

/// The gate and up halves `[E, H, F]` of [`gate_up`]'s `[E, H, 2F]` (views).
pub fn split_gate_up<B: Backend>(gate_up: Tensor<B, 3>) -> [Tensor<B, 3>; 2] {
    let f = gate_up.dims()[2] / 2;
    [gate_up.clone().narrow(2, 0, f), gate_up.narrow(2, f, f)]
}

/// One projection's experts quantised per output channel: int8 `[E, K, N]` and f32 `[E, N]`.
#[derive(Module, Debug)]
pub struct QuantizedProjection<B: Backend> {
    /// The int8 weights (parameters so that the model's record, which a device reset restores,
    /// holds them; plain tensor fields are constants Burn leaves out of it).
    pub weights: Param<Tensor<B, 3, Int>>,
    /// The per-channel scales, f32.
    pub scales: Param<Tensor<B, 2>>,
    /// The scales in the type the grouped matmul reads them in, when that is not f32
    /// ([`operator_scale_type`]).
    pub operator_scales: Option<Param<Tensor<B, 2>>>,
    /// W8A16 per-channel weight offsets `[E, N]` in the compute type, the weight being
    /// `(w + offset) * scale` (an asymmetric pre-quantized checkpoint's; GroupedMatmulV4's
    /// A16W8 antiquant offset).
    pub offsets: Option<Param<Tensor<B, 2>>>,
}

impl<B: Backend> QuantizedProjection<B> {
    /// int8 `weights [E, K, N]` with f32 per-channel `scales [E, N]` (and W8A16 `offsets`,
    /// f32), for experts of float type `dtype` run in `mode`.
    pub fn new(
        weights: Tensor<B, 3, Int>,
        scales: Tensor<B, 2>,
        offsets: Option<Tensor<B, 2>>,
        mode: Quantize,
        dtype: DType,
    ) -> Self {
        let compute = quant_compute_type(dtype);
        let scale_type = operator_scale_type(ScaleReader::GroupedMatmul, mode, compute);
        Self {
            weights: Param::initialized(ParamId::new(), weights),
            operator_scales: (scale_type != DType::F32)
                .then(|| Param::initialized(ParamId::new(), scales.clone().cast(scale_type))),
            scales: Param::initialized(ParamId::new(), scales),
            offsets: offsets.map(|o| Param::initialized(ParamId::new(), o.cast(compute))),
        }
    }

    /// Gate and up projections side by side ([`gate_up`]'s layout): weights, scales and
    /// offsets joined along their output channels, on the device (each channel keeps its
    /// scale). Both have offsets or neither.
    pub fn gate_up(gate: Self, up: Self) -> Self {
        let param = |t| Param::initialized(ParamId::new(), t);
        let join = |a: Param<Tensor<B, 2>>, b: Param<Tensor<B, 2>>| {
            param(Tensor::cat(vec![a.val(), b.val()], 1))
        };
        let pair = |a: Option<Param<Tensor<B, 2>>>, b: Option<Param<Tensor<B, 2>>>| match (a, b) {
            (Some(a), Some(b)) => Some(join(a, b)),
            (None, None) => None,
            _ => panic!("gate and up projections of one layer are quantized alike"),
        };
        Self {
            weights: Param::initialized(
                ParamId::new(),
                Tensor::cat(vec![gate.weights.val(), up.weights.val()], 2),
            ),
            scales: join(gate.scales, up.scales),
            operator_scales: pair(gate.operator_scales, up.operator_scales),
            offsets: pair(gate.offsets, up.offsets),
        }
    }

    /// The scales as the grouped matmul takes them.
    fn operator_scales(&self) -> Tensor<B, 2> {
        self.operator_scales.as_ref().unwrap_or(&self.scales).val()
    }
}

/// The experts' gate and up projections (side by side, [`gate_up`]) and down projection
/// quantised for [`routed_experts_quantized`].
#[derive(Module, Debug)]
pub struct QuantizedExperts<B: Backend> {
    /// `[E, H, 2F]` and `[E, F, H]` quantised.
    pub projections: [QuantizedProjection<B>; 2],
    /// Which quantised path the experts run.
    #[module(skip)]
    pub mode: Quantize,
    /// The float type the weights had (what [`QuantizedExperts::dequantized`] gives).
    #[module(skip)]
    pub dtype: DType,
}

impl<B: Backend> QuantizedExperts<B> {
    /// Quantises float expert weights `[gate, up, down]` per output channel, on the device,
    /// gate and up one at a time, then their int8 columns joined ([`gate_up`]'s layout; each
    /// channel has its own scale, so they quantise as they would apart). Quantizing the float
    /// `[E, H, 2F]` whole would hold f32 temporaries of both at once (quantizing as a model
    /// loads keeps the device's peak to the int8 model and about one float layer).
    pub fn quantize([gate, up, down]: [Tensor<B, 3>; 3], mode: Quantize) -> Self {
        let dtype = gate.dtype();
        let quantize = |w| {
            let (weights, scales) = fused::quantize_weight_per_channel::<B, 3, 2>(w);
            QuantizedProjection::new(weights, scales.detach(), None, mode, dtype)
        };
        let gate = quantize(gate);
        let gate_up = QuantizedProjection::gate_up(gate, quantize(up));
        Self {
            projections: [gate_up, quantize(down)],
            mode,
            dtype,
        }
    }

    /// [`QuantizedExperts::quantize`] of float expert weights `[gate_up, down]` ([`gate_up`]'s
    /// layout).
    pub fn quantize_gate_up([gate_up, down]: [Tensor<B, 3>; 2], mode: Quantize) -> Self {
        let [gate, up] = split_gate_up(gate_up);
        Self::quantize([gate, up, down], mode)
    }

    /// The weights `[gate_up, down]` they compute with, dequantized on the device (int8 times
    /// the channel's scale, in f32) and cast to the float type they had.
    pub fn dequantized(&self) -> [Tensor<B, 3>; 2] {
        self.projections.each_ref().map(|p| {
            let mut w = p.weights.val().float().cast(DType::F32);
            if let Some(o) = &p.offsets {
                w = w + o.val().cast(DType::F32).unsqueeze_dim(1);
            }
            (w * p.scales.val().unsqueeze_dim(1)).cast(self.dtype)
        })
    }
}

/// Routed experts' stacked float weights.
#[derive(Module, Debug)]
pub struct ExpertWeights<B: Backend> {
    /// `[E, H, 2F]`: gate and up side by side ([`gate_up`]).
    pub gate_up: Param<Tensor<B, 3>>,
    /// `[E, F, H]`
    pub down: Param<Tensor<B, 3>>,
}

/// A MoE layer's routed experts: float, or quantized for inference. The quantized form holds
/// only the int8 weights and their scales (the float weights are dropped, so quantizing frees
/// their device memory); saving it writes the dequantized weights ([`Experts::weights`]).
// One per layer, built once: the size difference of the variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum Experts<B: Backend> {
    /// The float weights.
    Float(ExpertWeights<B>),
    /// Quantized per output channel (a record parameter like the float weights, so a device
    /// reset restores it with the rest).
    Quantized(QuantizedExperts<B>),
}

impl<B: Backend> Experts<B> {
    /// Float experts `gate_up [E, H, 2F]` ([`gate_up`]'s layout) and `down [E, F, H]`.
    pub fn new(gate_up: Param<Tensor<B, 3>>, down: Param<Tensor<B, 3>>) -> Self {
        Experts::Float(ExpertWeights { gate_up, down })
    }

    /// The experts quantized per output channel on the device (quantized ones stay as they
    /// are).
    pub fn quantize(self, mode: Quantize) -> Self {
        match self {
            Experts::Float(w) => Experts::Quantized(QuantizedExperts::quantize_gate_up(
                [w.gate_up.val(), w.down.val()],
                mode,
            )),
            q => q,
        }
    }

    /// The float weights, unless the experts are quantized.
    pub fn float(&self) -> Option<&ExpertWeights<B>> {
        match self {
            Experts::Float(w) => Some(w),
            Experts::Quantized(_) => None,
        }
    }

    /// The device the weights are on.
    pub fn device(&self) -> B::Device {
        match self {
            Experts::Float(w) => w.gate_up.val().device(),
            Experts::Quantized(q) => q.projections[0].weights.val().device(),
        }
    }

    /// The weights `[gate, up, down]` the experts compute with, in their float type: quantized
    /// ones dequantized on the device.
    pub fn weights(&self) -> [Tensor<B, 3>; 3] {
        let [gate_up, down] = match self {
            Experts::Float(w) => [w.gate_up.val(), w.down.val()],
            Experts::Quantized(q) => q.dequantized(),
        };
        let [gate, up] = split_gate_up(gate_up);
        [gate, up, down]
    }
}

impl<B: FusedOps> Experts<B> {
    /// `x [T, H]` through the experts `routing` chose (`k` per token), weighted, per token,
    /// plus `add [T, H]` if given (in the same launch on `Ascend`).
    pub fn forward(
        &self,
        x: Tensor<B, 2>,
        routing: &Routing<B>,
        k: usize,
        add: Option<Tensor<B, 2>>,
    ) -> Tensor<B, 2> {
        match self {
            Experts::Float(w) => {
                routed_experts(x, routing, k, [w.gate_up.val(), w.down.val()], add)
            }
            Experts::Quantized(q) => routed_experts_quantized(x, routing, k, q, add),
        }
    }

    /// Rows already grouped by expert (`group_sizes [E]` I64 rows for each of these experts,
    /// in expert order, adding up to the rows: what expert parallelism receives) through their
    /// experts' SwiGLU, in the rows' dtype.
    pub fn grouped(&self, rows: Tensor<B, 2>, group_sizes: Tensor<B, 1, Int>) -> Tensor<B, 2> {
        match self {
            Experts::Float(w) => swiglu_experts(rows, w.gate_up.val(), w.down.val(), group_sizes),
            Experts::Quantized(q) => {
                let dtype = rows.dtype();
                let compute = quant_compute_type(dtype);
                let y = match q.mode {
                    Quantize::W8A8 => {
                        let (x, x_scale) =
                            fused::dynamic_quant::<B, 2, 1>(rows.cast(compute), None);
                        quantized_swiglu_a8(q, x, x_scale, group_sizes, compute)
                    }
                    Quantize::W8A16 => quantized_swiglu_a16(q, rows.cast(compute), group_sizes),
                };
                y.cast(dtype)
            }
        }
    }
}

/// The type the quantised experts compute and return in: x's when it is F16 or BF16 (the types
/// aclnnGroupedMatmulV4's quantised forms produce), else BF16 (its range is f32's).
fn quant_compute_type(dtype: DType) -> DType {
    match dtype {
        DType::F16 | DType::BF16 => dtype,
        _ => DType::BF16,
    }
}

/// [`routed_experts`] with quantised experts: W8A8 gathers and quantises the rows in one pass
/// (`fused::moe_gather_quant`), runs the int8 grouped matmuls and quantises the SwiGLU's
/// output per row for the down projection; W8A16 gathers float rows and runs the antiquant
/// grouped matmuls. Both compute in x's dtype when it is F16/BF16, else in BF16, and return
/// x's dtype.
pub fn routed_experts_quantized<B: FusedOps>(
    x: Tensor<B, 2>,
    routing: &Routing<B>,
    k: usize,
    experts: &QuantizedExperts<B>,
    add: Option<Tensor<B, 2>>,
) -> Tensor<B, 2> {
    let dtype = x.dtype();
    let compute = quant_compute_type(dtype);
    let e = routing.experts;
    let (y, row_idx) = match experts.mode {
        Quantize::W8A8 => {
            let rows = fused::moe_gather_quant(x, routing.ids.clone(), k, e);
            let y = quantized_swiglu_a8(experts, rows.rows, rows.scales, rows.group_sizes, compute);
            (y, rows.row_idx)
        }
        Quantize::W8A16 => {
            let p = fused::moe_permute(x, routing.ids.clone(), k, e);
            let y = quantized_swiglu_a16(experts, p.rows.cast(compute), p.group_sizes);
            (y, p.row_idx)
        }
    };
    fused::moe_unpermute(y.cast(dtype), row_idx, routing.weights.clone(), k, add)
}

/// W8A8 experts' SwiGLU over int8 rows grouped by expert (`x_scale [R]` their per-row scales,
/// `group_sizes [E]`): the int8 grouped matmuls, the SwiGLU's output quantized per row for the
/// down projection; in `compute`.
fn quantized_swiglu_a8<B: FusedOps>(
    experts: &QuantizedExperts<B>,
    x: Tensor<B, 2, Int>,
    x_scale: Tensor<B, 1>,
    group_sizes: Tensor<B, 1, Int>,
    compute: DType,
) -> Tensor<B, 2> {
    let [gate_up, down] = &experts.projections;
    let project = |p: &QuantizedProjection<B>, x, x_scale| {
        let (w, s) = (p.weights.val(), p.operator_scales());
        fused::grouped_matmul_quant(x, w, s, Some(x_scale), group_sizes.clone(), compute)
    };
    let gu = project(gate_up, x, x_scale);
    let (h, h_scale) = fused::dynamic_quant::<B, 2, 1>(fused::swiglu(gu), None);
    project(down, h, h_scale)
}

/// W8A16 experts' SwiGLU over float rows (in `compute`) grouped by expert: the antiquant
/// grouped matmuls.
fn quantized_swiglu_a16<B: FusedOps>(
    experts: &QuantizedExperts<B>,
    rows: Tensor<B, 2>,
    group_sizes: Tensor<B, 1, Int>,
) -> Tensor<B, 2> {
    let compute = rows.dtype();
    let [gate_up, down] = &experts.projections;
    let project = |p: &QuantizedProjection<B>, x| {
        let (w, s) = (p.weights.val(), p.operator_scales().cast(compute));
        let offsets = p.offsets.as_ref().map(Param::val);
        fused::grouped_matmul_antiquant(x, w, s, offsets, group_sizes.clone())
    };
    project(down, fused::swiglu(project(gate_up, rows)))
}

/// The experts' SwiGLU over `rows [R, H]` grouped by expert (`group_sizes [E]`, adding up to
/// R): one grouped matmul by the gate and up weights side by side (`gate_up [E, H, 2F]`,
/// [`gate_up`]), one SwiGLU, one grouped matmul by `down [E, F, H]`; the groups cover every
/// row, so no output is zero-filled first (`fused::grouped_matmul_covered`).
pub fn swiglu_experts<B: FusedOps>(
    rows: Tensor<B, 2>,
    gate_up: Tensor<B, 3>,
    down: Tensor<B, 3>,
    group_sizes: Tensor<B, 1, Int>,
) -> Tensor<B, 2> {
    let gu = fused::grouped_matmul_covered(rows, gate_up, group_sizes.clone());
    fused::grouped_matmul_covered(fused::swiglu(gu), down, group_sizes)
}

impl<B: FusedOps> Moe<B> {
    fn new(cfg: &MoeConfig, device: &B::Device) -> Self {
        let (e, h, f) = (cfg.experts, cfg.hidden, cfg.expert_hidden);
        let init = |shape: [usize; 3], fan_in: usize| {
            Initializer::Normal {
                mean: 0.0,
                std: (fan_in as f64).powf(-0.5),
            }
            .init(shape, device)
        };
        Self {
            router: LinearConfig::new(h, e).with_bias(false).init(device),
            experts: Experts::new(init([e, h, 2 * f], h), init([e, f, h], f)),
            parallel: Parallel::default(),
        }
    }

    /// Routes `x [T, H]`: router probabilities, each token's top-k experts and weights, and
    /// the expert-sorted row order.
    pub fn route(&self, x: Tensor<B, 2>, dims: &Dims) -> Routing<B> {
        let probs = softmax(self.router.forward(x), 1);
        let (top, ids) = probs.clone().topk_with_indices(dims.top_k, 1);
        let weights = top.clone() / top.sum_dim(1);
        Routing::from_choices(probs, ids, weights)
    }

    /// The load-balancing loss of a routing (Switch style: experts times the dot product of
    /// each expert's routed fraction and mean router probability).
    pub fn aux_loss(probs: Tensor<B, 2>, fraction: Tensor<B, 1>, dims: &Dims) -> Tensor<B, 1> {
        let e = dims.experts;
        let mean_prob = probs.mean_dim(0).reshape([e]);
        (fraction * mean_prob).sum() * e as f64
    }

    /// `x [T, H]` through the experts; also the load-balancing loss.
    pub fn forward(&self, x: Tensor<B, 2>, dims: &Dims) -> (Tensor<B, 2>, Tensor<B, 1>) {
        if let Some(experts) = self.parallel.get::<ExpertParallel<B>>() {
            return experts.forward(x, dims);
        }
        let k = dims.top_k;
        let routing = self.route(x.clone(), dims);
        let fraction = match self.parallel.get::<DataParallel<B>>() {
            Some(replicas) => replicas.global_fraction(routing.fraction()),
            None => routing.fraction(),
        };
        let out = self.experts.forward(x, &routing, k, None);
        (out, Self::aux_loss(routing.probs.get(), fraction, dims))
    }
}

/// One pre-norm transformer block.
#[derive(Module, Debug)]
pub struct Block<B: Backend> {
    attn_norm: Norm<B>,
    /// The block's attention.
    pub attn: Attention<B>,
    ffn_norm: Norm<B>,
    /// The block's mixture of experts.
    pub moe: Moe<B>,
}

impl<B: FusedOps> Block<B> {
    /// The attention sub-layer's input: the normalised residual stream.
    pub fn attn_input<const D: usize>(&self, x: Tensor<B, D>, dims: &Dims) -> Tensor<B, D> {
        self.attn_norm.forward(x, dims.eps)
    }

    /// The feed-forward sub-layer with its residual: `x + moe(norm(x))` for `x [T, H]`.
    pub fn feed_forward(&self, x: Tensor<B, 2>, dims: &Dims) -> (Tensor<B, 2>, Tensor<B, 1>) {
        let (y, aux) = self
            .moe
            .forward(self.ffn_norm.forward(x.clone(), dims.eps), dims);
        (x + y, aux)
    }
}

/// The whole model.
#[derive(Module, Debug)]
pub struct MoeDecoder<B: Backend> {
    embed: Embedding<B>,
    /// The blocks, in order.
    pub blocks: Vec<Block<B>>,
    norm: Norm<B>,
    head: Linear<B>,
    #[module(skip)]
    dims: Dims,
    /// How the model was quantized for inference, if it was.
    #[module(skip)]
    quantized: Option<Quantize>,
}

impl<B: FusedOps> MoeDecoder<B> {
    /// A freshly initialised model.
    pub fn new(cfg: &MoeConfig, device: &B::Device) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(Self {
            embed: EmbeddingConfig::new(cfg.vocab, cfg.hidden).init(device),
            blocks: (0..cfg.layers)
                .map(|_| Block {
                    attn_norm: Norm::new(cfg.hidden, device),
                    attn: Attention::new(cfg, device),
                    ffn_norm: Norm::new(cfg.hidden, device),
                    moe: Moe::new(cfg, device),
                })
                .collect(),
            norm: Norm::new(cfg.hidden, device),
            head: LinearConfig::new(cfg.hidden, cfg.vocab)
                .with_bias(false)
                .init(device),
            dims: Dims {
                q_heads: cfg.q_heads,
                kv_heads: cfg.kv_heads,
                head_dim: cfg.head_dim(),
                experts: cfg.experts,
                top_k: cfg.top_k,
                eps: cfg.eps,
                rope_theta: cfg.rope_theta,
                vocab: cfg.vocab,
                flash_attention: false,
            },
            quantized: None,
        })
    }

    /// The model for inference with int8 weights: the attention projections (q/k/v/o) and
    /// the experts quantized per output channel on the device, their float weights dropped;
    /// the embedding, routers, norms and LM head stay float, as vLLM's W8A8 schemes keep them. The int8 operators take
    /// F16/BF16 activations: an f32 model runs the same arithmetic composed. Training it is
    /// refused ([`super::train::TrainError::Quantized`]). Quantize before splitting the
    /// experts across NPUs is refused: a sharded layer runs its float shards.
    pub fn quantize(self, mode: Quantize) -> Result<Self, ConfigError> {
        if self.blocks.iter().any(|b| b.moe.parallel.is_set()) {
            return Err(ConfigError(format!(
                "quantizing ({mode}) a model whose MoE layers run across NPUs: quantize the \
                 model on one NPU"
            )));
        }
        let blocks = self
            .blocks
            .into_iter()
            .map(|b| Block {
                attn: b.attn.quantize(mode),
                moe: Moe {
                    experts: b.moe.experts.quantize(mode),
                    ..b.moe
                },
                ..b
            })
            .collect();
        Ok(Self {
            blocks,
            quantized: Some(mode),
            ..self
        })
    }

    /// How it was quantized, if it was.
    pub fn quantized(&self) -> Option<Quantize> {
        self.quantized
    }

    /// The sizes of a forward pass.
    pub fn dims(&self) -> &Dims {
        &self.dims
    }

    /// The model with its whole-sequence attention ([`MoeDecoder::forward`], training) through
    /// `fused::flash_attention` when `on`: no `[B, H, S, S]` score matrix in the forward or the
    /// backward. Off by default: the composition is the reference the fixtures were made with.
    pub fn with_flash_attention(mut self, on: bool) -> Self {
        self.dims.flash_attention = on;
        self
    }

    /// Token embeddings `[B, S, H]`.
    pub fn embed(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        self.embed.forward(tokens)
    }

    /// Logits `[T, V]` of final hidden states `[T, H]`.
    pub fn logits(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.head.forward(self.norm.forward(x, self.dims.eps))
    }

    /// Causal forward pass over whole sequences: logits `[B, S, V]` and the summed
    /// load-balancing loss of the MoE layers.
    pub fn forward(&self, tokens: Tensor<B, 2, Int>) -> (Tensor<B, 3>, Tensor<B, 1>) {
        let [b, s] = tokens.dims();
        let device = tokens.device();
        // f32 whatever the device's default float dtype: see `rope`.
        let positions = Tensor::<B, 1>::from_data(
            TensorData::new((0..s).map(|p| p as f32).collect::<Vec<_>>(), [s]),
            (&device, DType::F32),
        );
        let mut x = self.embed(tokens);
        let h = x.dims()[2];
        let mut aux = Tensor::<B, 1>::zeros([1], &device);
        for block in &self.blocks {
            let attended = block.attn.dense(
                block.attn_input(x.clone(), &self.dims),
                positions.clone(),
                &self.dims,
            );
            let (y, a) = block.feed_forward((x + attended).reshape([b * s, h]), &self.dims);
            x = y.reshape([b, s, h]);
            aux = aux + a;
        }
        let v = self.dims.vocab;
        (self.logits(x.reshape([b * s, h])).reshape([b, s, v]), aux)
    }
}

impl<B: FusedOps> StepModel<B> for MoeDecoder<B> {
    fn vocab(&self) -> usize {
        self.dims.vocab
    }

    fn cache_layout(&self) -> CacheLayout {
        CacheLayout {
            layers: self.blocks.len(),
            query_heads: self.dims.q_heads,
            kv_heads: self.dims.kv_heads,
            key_dim: self.dims.head_dim,
            value_dim: Some(self.dims.head_dim),
            dtype: self.head.weight.val().dtype(),
        }
    }

    fn step(&self, x: &[StepInputs<B>], attention: &mut [PagedAttention<'_, B>]) -> Tensor<B, 2> {
        // The step runs on the server's device (only the experts are spread).
        let (x, attention) = (&x[0], &mut attention[0]);
        let t = x.tokens.dims()[0];
        let dims = self.dims;
        let rows = |v: Tensor<B, 4>| v.reshape([t, dims.kv_heads, dims.head_dim]);
        let sm_scale = (dims.head_dim as f32).powf(-0.5);
        let mut h = self.embed(x.tokens.clone().reshape([1, t]));
        let hidden = h.dims()[2];
        for (layer, block) in self.blocks.iter().enumerate() {
            let (q, k, v) = block.attn.project(
                block.attn_input(h.clone(), &dims),
                x.positions.clone(),
                &dims,
            );
            let attended = attention.attend(
                layer,
                q.reshape([t, dims.q_heads, dims.head_dim]),
                vec![rows(k)],
                Some(rows(v)),
                sm_scale,
                dims.head_dim,
            );
            let attended = block
                .attn
                .output(attended.reshape([t, dims.q_heads * dims.head_dim]));
            h = block
                .feed_forward(h.reshape([t, hidden]) + attended, &dims)
                .0
                .reshape([1, t, hidden]);
        }
        self.logits(h.reshape([t, hidden]).select(0, x.sample_rows.clone()))
    }

    fn forward_logits(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        self.forward(tokens).0
    }

    fn capture_refusal(&self) -> Option<String> {
        refuse_parallel(self)
    }

    fn other_devices(&self) -> Vec<AscendDevice> {
        ExpertParallel::of(self).map_or_else(Vec::new, |e| e.devices().to_vec())
    }

    fn after_reset(self) -> Self {
        match ExpertParallel::of(&self).map(ExpertParallel::rebuilder) {
            Some((devices, shard)) => shard(self, &devices).unwrap_or_else(|e| {
                panic!("splitting the experts across {devices:?} again after a failed step: {e}")
            }),
            None => self,
        }
    }
}

/// Why the decode step of `model` cannot be captured, if a layer runs across NPUs (expert or
/// data parallel): CANN records HCCL collectives issued on a capturing stream, and a graph
/// holding collectives must be replayed by every rank from the same capture session
/// (aclgraph-abi.md §6, hccl-abi.md §8), which the capture of one device's step is not.
fn refuse_parallel<B: FusedOps>(model: &MoeDecoder<B>) -> Option<String> {
    let layers = model
        .blocks
        .iter()
        .filter(|b| b.moe.parallel.is_set())
        .count();
    (layers > 0).then(|| {
        format!(
            "captured decode of a model that runs across NPUs ({layers} MoE layers are expert- or \
             data-parallel) is refused: their collectives would be recorded into one device's \
             graph; the server decodes eagerly"
        )
    })
}
