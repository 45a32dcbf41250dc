//! The fused-ops API: Burn's custom-operation pattern. [`FusedOps`] has one method per fused
//! operation (contracts: the project's fused-ops specification), each with a default composed
//! from standard Burn ops, so model code using it runs on any backend; the defaults are also the
//! reference the kernels are tested against. `Ascend` overrides them with the Ascend C kernels
//! (and aclnn's grouped matmul and RMS norm). `Autodiff<B>` runs the inner backend's fused ops
//! forward and records their adjoints, built from the inner backend's fused ops, for the
//! backward pass (see `autodiff.rs`). `Fusion<Ascend>` records each fused op as one custom op of
//! its stream, run by Ascend's kernel (see `fusion.rs`).

mod autodiff;
pub mod composed;
mod fusion;
mod paged;

pub use paged::{
    alloc_extend, decode_attention, extend_attention, paged_prefill_attention, AllocExtendOutput,
    AllocatedSlots, DecodeAttentionOptions, DecodeAttentionOutput, DecodePath, ExtendPath,
    PrefillLens,
};

pub use crate::ops::fused::{ExtendLens, GroupTopk};

use burn_tensor::{Int, Tensor, TensorPrimitive};

use super::*;
use crate::ops::flash_attention as flash;
use crate::ops::fused;
use crate::ops::quant_matmul;

type Float2<B> = Tensor<B, 2>;
type Ints<B> = Tensor<B, 1, Int>;

fn float<B: Backend, const D: usize>(t: FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

fn prim<B: Backend, const D: usize>(t: Tensor<B, D>) -> FloatTensor<B> {
    t.into_primitive().tensor()
}

fn int<B: Backend, const D: usize>(t: IntTensor<B>) -> Tensor<B, D, Int> {
    Tensor::from_primitive(t)
}

/// Layer-norm results: normalised rows and the f32 row statistics.
pub struct LayerNormOutput<B: Backend> {
    /// `(x - mean) * rstd * gamma + beta`, x's shape and dtype.
    pub y: FloatTensor<B>,
    /// Row means `[M]`, f32.
    pub mean: FloatTensor<B>,
    /// Row reciprocal standard deviations `[M]`, f32.
    pub rstd: FloatTensor<B>,
}

/// Layer-norm gradients.
pub struct LayerNormGrads<B: Backend> {
    /// Gradient of x, x's shape and dtype.
    pub dx: FloatTensor<B>,
    /// Gradient of gamma `[N]`.
    pub dgamma: FloatTensor<B>,
    /// Gradient of beta `[N]`.
    pub dbeta: FloatTensor<B>,
}

/// A MoE router's choice, from [`FusedOps::moe_gating_softmax`].
pub struct MoeGating<B: Backend> {
    /// `[T, K]` in the logits' dtype: the chosen experts' probabilities.
    pub weights: FloatTensor<B>,
    /// `[T, K]` integers: the chosen experts, most probable first.
    pub ids: IntTensor<B>,
    /// `[T, E]` f32: the softmax over all experts (for load-balancing statistics), when the
    /// computation gives it: the composed default always, `Ascend`'s one operator only without
    /// renormalisation (§3.2: it does not write the softmax with `renorm = 1`). A caller that
    /// needs it then takes the softmax of the logits, only when it does.
    pub probs: Option<FloatTensor<B>>,
}

impl From<fused::Gating> for MoeGating<Ascend> {
    fn from(g: fused::Gating) -> Self {
        Self {
            weights: g.weights.into(),
            ids: g.ids.into(),
            probs: g.probs.map(Into::into),
        }
    }
}

/// RMS-norm results: normalised rows and the f32 row statistic.
pub struct RmsNormOutput<B: Backend> {
    /// `x * rstd * gamma`, x's shape and dtype.
    pub y: FloatTensor<B>,
    /// Row reciprocal root mean squares `[M]`, f32.
    pub rstd: FloatTensor<B>,
}

/// Residual add + RMS-norm results.
pub struct AddRmsNormOutput<B: Backend> {
    /// `x * rstd * gamma`, x1's shape and dtype.
    pub y: FloatTensor<B>,
    /// Row reciprocal root mean squares `[M]`, f32.
    pub rstd: FloatTensor<B>,
    /// The sum `x1 + x2` that was normalised (the new residual), x1's shape and dtype.
    pub x: FloatTensor<B>,
}

/// RMS-norm gradients.
pub struct RmsNormGrads<B: Backend> {
    /// Gradient of x, x's shape and dtype.
    pub dx: FloatTensor<B>,
    /// Gradient of gamma `[N]`, f32.
    pub dgamma: FloatTensor<B>,
}

/// What the fused attention's backward needs from its forward.
#[derive(Debug, Clone)]
pub struct FlashAttentionSaved<B: Backend> {
    /// The operator's output before rows without an unmasked key were zeroed.
    pub raw_out: FloatTensor<B>,
    /// Row maxima of the scaled scores, `[B, H, Sq, 8]` f32 (aclnnFlashAttentionScore's layout).
    pub softmax_max: FloatTensor<B>,
    /// Row sums of the exponentials, `[B, H, Sq, 8]` f32.
    pub softmax_sum: FloatTensor<B>,
}

/// The fused attention's forward results.
pub struct FlashAttentionOutput<B: Backend> {
    /// `[B, H, Sq, Dv]`, 0 on rows without an unmasked key (Burn's convention).
    pub out: FloatTensor<B>,
    /// For [`FusedOps::flash_attention_backward`].
    pub saved: FlashAttentionSaved<B>,
}

/// The fused attention's gradients, each in its operand's shape and dtype.
pub struct FlashAttentionGrads<B: Backend> {
    /// Gradient of the queries.
    pub dq: FloatTensor<B>,
    /// Gradient of the keys.
    pub dk: FloatTensor<B>,
    /// Gradient of the values.
    pub dv: FloatTensor<B>,
}

/// Rows gathered to their experts and quantised to int8, from [`FusedOps::moe_gather_quant`].
pub struct MoeQuantRows<B: Backend> {
    /// `[T*K, H]` int8: row `i` is token `order[i] / K` quantised, where `order` sorts the
    /// token-major slots stably by expert (the rows [`FusedOps::moe_gather`] gives for it).
    pub rows: IntTensor<B>,
    /// `[T*K]` f32: each row's scale, `max|row| / 127` (0 for an all-zero row).
    pub scales: FloatTensor<B>,
    /// `[T*K]` int32: for each token-major slot `t*K + k`, its row (the inverse of `order`).
    pub row_idx: IntTensor<B>,
    /// `[E]` int32: the rows of each expert.
    pub group_sizes: IntTensor<B>,
}

/// A MoE layer's tokens grouped by expert, from [`FusedOps::moe_permute`].
pub struct MoePermuted<B: Backend> {
    /// `[T*K, H]` in x's dtype: row `i` is token `s_i / K`, for the token-major slots `s_i`
    /// sorted stably by expert (the rows [`FusedOps::moe_gather`] gives for that sort).
    pub rows: FloatTensor<B>,
    /// `[T*K]` int32: for each token-major slot `t*K + k`, its row (the inverse of the sort).
    pub row_idx: IntTensor<B>,
    /// `[E]` int64: the rows of each expert (the group list type of
    /// [`FusedOps::grouped_matmul`]'s operator).
    pub group_sizes: IntTensor<B>,
}

/// Fused operations.
pub trait FusedOps: Backend {
    /// `x + y` over 1-D float tensors of equal length.
    fn vector_add(x: FloatTensor<Self>, y: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::float_add(x, y)
    }

    /// `x + y` over 1-D integer tensors of equal length.
    fn int_vector_add(x: IntTensor<Self>, y: IntTensor<Self>) -> IntTensor<Self> {
        Self::int_add(x, y)
    }

    /// Layer norm over the last dim of `x` (leading dims flattened into rows), statistics in f32.
    fn layer_norm(
        x: FloatTensor<Self>,
        gamma: Option<FloatTensor<Self>>,
        beta: Option<FloatTensor<Self>>,
        eps: f64,
    ) -> LayerNormOutput<Self> {
        composed::layer_norm::<Self>(x, gamma, beta, eps)
    }

    /// Gradients of [`FusedOps::layer_norm`]: `dx = rstd * (g - mean_N(g) - xhat * mean_N(g *
    /// xhat))` with `g = dy * gamma` and `xhat = (x - mean) * rstd`; `dgamma = sum_M dy * xhat`,
    /// `dbeta = sum_M dy`.
    fn layer_norm_backward(
        dy: FloatTensor<Self>,
        x: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        gamma: Option<FloatTensor<Self>>,
    ) -> LayerNormGrads<Self> {
        composed::layer_norm_backward::<Self>(dy, x, mean, rstd, gamma)
    }

    /// Burn's `module::attention` without a bias: `softmax(mask(scale * q k^T)) v` over `[B, H,
    /// Sq, D]` queries and `[B, Hk, Sk, D]` keys, `[B, Hk, Sk, Dv]` values (`Hk` = `H` for
    /// Burn's contract; a divisor of `H` where the fused operator takes grouped queries), 0 on
    /// rows without an unmasked key. On `Ascend` it runs aclnnFlashAttentionScore where the call
    /// fits it (see `ops::flash_attention`), and under `Autodiff<Ascend>` its gradient is
    /// aclnnFlashAttentionScoreGrad from the saved softmax statistics: Burn's own
    /// `module::attention` cannot do that under `Autodiff`, whose `attention` is always Burn's
    /// composed fallback. Backends without a fused attention (and `Fusion<Ascend>`, whose
    /// forward reaches Ascend's flash path through its own `attention`) take `Self::attention`,
    /// and `Autodiff` over them differentiates that composition.
    fn flash_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        mask: Option<BoolTensor<Self>>,
        options: AttentionModuleOptions,
    ) -> FloatTensor<Self> {
        match Self::flash_attention_forward(q.clone(), k.clone(), v.clone(), mask.clone(), options)
        {
            Some(f) => f.out,
            None => Self::attention(q, k, v, mask, None, options),
        }
    }

    /// The fused forward of [`FusedOps::flash_attention`] with what its backward needs, or
    /// `None` where this backend has no fused attention for the call (softcap, a dtype or
    /// shape the operator does not take).
    fn flash_attention_forward(
        _q: FloatTensor<Self>,
        _k: FloatTensor<Self>,
        _v: FloatTensor<Self>,
        _mask: Option<BoolTensor<Self>>,
        _options: AttentionModuleOptions,
    ) -> Option<FlashAttentionOutput<Self>> {
        None
    }

    /// Gradients of [`FusedOps::flash_attention`] for the output gradient `dy`, from
    /// [`FusedOps::flash_attention_forward`]'s saved statistics. Only a backend whose forward
    /// returns them is asked (`Autodiff` composes the others).
    fn flash_attention_backward(
        _q: FloatTensor<Self>,
        _k: FloatTensor<Self>,
        _v: FloatTensor<Self>,
        _mask: Option<BoolTensor<Self>>,
        _options: AttentionModuleOptions,
        _saved: FlashAttentionSaved<Self>,
        _dy: FloatTensor<Self>,
    ) -> FlashAttentionGrads<Self> {
        panic!(
            "flash_attention_backward: this backend's flash_attention_forward saves no \
             statistics, so Autodiff differentiates its composed attention instead"
        )
    }

    /// RMS norm over the last dim of `x` (leading dims flattened into rows `[M]`): `y = x *
    /// rstd * gamma` with `rstd = 1 / sqrt(mean_N(x^2) + eps)` per row, computed in f32. gamma
    /// is `[N]` in x's dtype, or f32 for an f16/bf16 x; eps is finite and `>= 0`. Rows without
    /// columns get a NaN rstd (the mean of no values).
    ///
    /// Invalid input: on `Ascend` and `Fusion<Ascend>` a gamma of another shape or dtype, a
    /// non-float x or a negative eps fails at the call with an error naming `rms_norm`, the
    /// shapes and the dtypes. The composed default leaves them to the backend's ops.
    fn rms_norm(x: FloatTensor<Self>, gamma: FloatTensor<Self>, eps: f64) -> RmsNormOutput<Self> {
        composed::rms_norm::<Self>(x, gamma, eps)
    }

    /// Residual add then RMS norm: `x = x1 + x2` (x1's dtype; x2 has x1's shape and dtype),
    /// then [`FusedOps::rms_norm`] of `x`, returning `x` too. gamma is `[N]` in x1's dtype.
    ///
    /// Invalid input: as [`FusedOps::rms_norm`], the error naming `add_rms_norm`.
    fn add_rms_norm(
        x1: FloatTensor<Self>,
        x2: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        eps: f64,
    ) -> AddRmsNormOutput<Self> {
        composed::add_rms_norm::<Self>(x1, x2, gamma, eps)
    }

    /// Gradients of [`FusedOps::rms_norm`]: `dx = rstd * (g - xhat * mean_N(g * xhat))` with
    /// `g = dy * gamma` and `xhat = x * rstd`; `dgamma = sum_M dy * xhat` (f32). `dy` has x's
    /// shape and dtype, `rstd` is the forward's `[M]` f32.
    fn rms_norm_backward(
        dy: FloatTensor<Self>,
        x: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
    ) -> RmsNormGrads<Self> {
        composed::rms_norm_backward::<Self>(dy, x, rstd, gamma)
    }

    /// A softmax MoE router's choice from its logits `[T, E]`: the softmax over the experts
    /// in f32, each token's `top_k` experts (most probable first) and their probabilities,
    /// divided by their sum when `renormalize` (Mixtral; Qwen's `norm_topk_prob`), as
    /// transformers computes them. On `Ascend` one aclnnMoeGatingTopKSoftmaxV2 (CANN 8.1.RC1
    /// on), which breaks ties towards the lower expert id and, renormalising, gives no `probs`.
    ///
    /// Invalid input: logits that are not 2-D float, or `top_k` outside `1..=E`, fail at the call
    /// with an error naming `moe_gating_softmax` and the shape on `Ascend`; the composed default
    /// leaves them to the backend's ops.
    fn moe_gating_softmax(
        logits: FloatTensor<Self>,
        top_k: usize,
        renormalize: bool,
    ) -> MoeGating<Self> {
        composed::moe_gating_softmax::<Self>(logits, top_k, renormalize)
    }

    /// A grouped MoE router's choice from its logits `[T, E]` (DeepSeek-V2's
    /// `group_limited_greedy`, DeepSeek-V3's `noaux_tc`; [`GroupTopk`] says which), as
    /// transformers computes it in f32: the scores (softmax or sigmoid), the selection values
    /// (scores plus the selection-only `bias [E]`), the best `keep_groups` groups by their best
    /// or two best selection values with every other expert's selection value set to 0, the
    /// `top_k` largest selection values and their weights (the selection values, or the
    /// unbiased scores, renormalised and scaled as asked), rounded once to `weights_dtype` (the
    /// model's: no cast follows). `weights` are `[T, K]`, `probs` the f32 scores `[T, E]`. On
    /// `Ascend` one launch of the `moe_group_topk` kernel (ties: the lower id), where this
    /// composition takes about fifteen.
    ///
    /// Invalid input (logits not 2-D, more than 4096 experts on `Ascend`, groups that do not
    /// split the experts, `keep_groups` or `top_k` out of range) fails at the call with an error
    /// naming `moe_group_topk` and the shapes on `Ascend`; the composed default leaves them to
    /// the backend's ops.
    fn moe_group_topk(
        logits: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        choice: GroupTopk,
        weights_dtype: burn_tensor::DType,
    ) -> MoeGating<Self> {
        composed::moe_group_topk::<Self>(logits, bias, choice, weights_dtype)
    }

    /// Rotary position embedding of `q [T, Nq, D]` and `k [T, Nk, D]`: token `t` turned by row
    /// `rows[t]` of `cos_sin [P, D]` (the cosines of its `D / 2` angles, then their sines, in
    /// q's dtype). Rotate-half (GPT-NeoX, transformers' `apply_rotary_pos_emb`) turns the
    /// pairs `(i, i + D/2)`: `x * [cos, cos] + [-x2, x1] * [sin, sin]`; `interleaved` (GPT-J,
    /// DeepSeek's `rope_interleave`) turns the adjacent pairs `(2i, 2i + 1)` by angle `i`, and
    /// leaves them in place. On `Ascend` one aclnnRopeWithSinCosCache (CANN 8.1.RC1 on) where
    /// it takes the head dim (a multiple of 32, of 16 in f32), computing in f32 with one
    /// rounding; the composed default rounds each step in q's dtype.
    ///
    /// Invalid input: shapes or dtypes that disagree fail at the call with an error naming
    /// `rotary_embedding` and the shapes on `Ascend`; a row outside `cos_sin` is an AI Core error
    /// naming it there (the composed default leaves both to the backend's ops).
    fn rotary_embedding(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        cos_sin: FloatTensor<Self>,
        rows: IntTensor<Self>,
        interleaved: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        composed::rotary_embedding::<Self>(q, k, cos_sin, rows, interleaved)
    }

    /// SwiGLU of gate and up projections computed side by side: `silu(x[.., :N]) * x[.., N:]`
    /// for `x [.., 2N]` (one matmul by the gate and up weights concatenated along their
    /// outputs, gate first, as vLLM's `gate_up_proj`), `[.., N]` in x's dtype. On `Ascend` one
    /// aclnnSwiGlu (CANN 8.1.RC1 on), computing each element in f32 with one rounding; the
    /// composed default rounds each step in x's dtype.
    ///
    /// Invalid input: a non-float x, or one whose last dim is odd, fails at the call with an
    /// error naming `swiglu` and the shape on `Ascend`; the composed default leaves it to the
    /// backend's ops.
    fn swiglu(x: FloatTensor<Self>) -> FloatTensor<Self> {
        composed::swiglu::<Self>(x)
    }

    /// `out[i] = x[indices[i] / top_k]` for `x [T, H]` and a permutation `indices [T*K]`.
    ///
    /// Invalid input: on `Ascend` an index outside `[0, T*K)` is an AI Core error naming it
    /// (reported at the next synchronisation or read); indices that are not a permutation are one
    /// too with `BURN_ASCEND_VALIDATE=1` (that check reads the indices once per block), and
    /// otherwise gather their rows as given. The composed default gathers as given and leaves
    /// out-of-range indices to the backend's `select`.
    fn moe_gather(
        x: FloatTensor<Self>,
        indices: IntTensor<Self>,
        top_k: usize,
    ) -> FloatTensor<Self> {
        composed::moe_gather::<Self>(x, indices, top_k)
    }

    /// `out[indices[i] / K] += w(indices[i]) * y[i]` for `y [T*K, H]`, accumulated in f32;
    /// `indices` is a permutation of `0..T*K`.
    ///
    /// Invalid input: on `Ascend` an index outside `[0, T*K)`, or indices that are not a
    /// permutation (a repeated value), are an AI Core error naming the index or the slot no index
    /// reaches, always (reported at the next synchronisation or read). The composed default
    /// computes the formula as written (a repeated index adds its rows twice) and leaves
    /// out-of-range indices to the backend's `select`.
    fn moe_scatter(
        y: FloatTensor<Self>,
        indices: IntTensor<Self>,
        weights: Option<FloatTensor<Self>>,
        top_k: usize,
    ) -> FloatTensor<Self> {
        composed::moe_scatter::<Self>(y, indices, weights, top_k)
    }

    /// A MoE layer's tokens `x [T, H]` grouped by expert for the token-major expert ids
    /// `expert_ids [T*K]` (values in `0..num_experts`): the rows sorted stably by expert, each
    /// slot's row and the rows per expert (see [`MoePermuted`]), for
    /// [`FusedOps::grouped_matmul`] and then [`FusedOps::moe_unpermute`]. On `Ascend` one
    /// aclnnMoeInitRoutingV2 (CANN 8.1.RC1 on) and a cast of its counts to int64, where a
    /// composition takes a sort, a gather and a count.
    ///
    /// Invalid input: operands of other shapes or types fail at the call with an error naming
    /// `moe_permute` and the shapes on `Ascend`; an id outside `0..num_experts` is an AI Core
    /// error naming it there (reported at the next synchronisation or read). The composed
    /// default counts no row for such an id and sorts it by value.
    fn moe_permute(
        x: FloatTensor<Self>,
        expert_ids: IntTensor<Self>,
        top_k: usize,
        num_experts: usize,
    ) -> MoePermuted<Self> {
        composed::moe_permute::<Self>(x, expert_ids, top_k, num_experts)
    }

    /// The inverse of [`FusedOps::moe_permute`], weighted: `out [T, H]` with `out[t] = add[t] +
    /// sum_k weights[t*K + k] * rows[row_idx[t*K + k]]` for `rows [R, H]` and an optional addend
    /// `add [T, H]` (a shared expert's output), summed in f32 and rounded once to the rows'
    /// dtype. On `Ascend` one aclnnMoeTokenUnpermute without an addend, one
    /// aclnnMoeFinalizeRoutingV2 with one (CANN 8.1.RC1 on; the addend then needs no add of its
    /// own).
    ///
    /// Invalid input: operands of other shapes or types fail at the call with an error naming
    /// `moe_unpermute` and the shapes on `Ascend`; a row index outside `rows` is an AI Core
    /// error there. The composed default leaves both to the backend's ops.
    fn moe_unpermute(
        rows: FloatTensor<Self>,
        row_idx: IntTensor<Self>,
        weights: FloatTensor<Self>,
        top_k: usize,
        add: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        composed::moe_unpermute::<Self>(rows, row_idx, weights, top_k, add)
    }

    /// `out[i] = x[perm[i]]` for `x [S, D]`; repeated values are a valid gather.
    ///
    /// Invalid input: on `Ascend` an index outside `[0, S)` is an AI Core error naming it
    /// (reported at the next synchronisation or read). The composed default leaves it to the
    /// backend's `select`.
    fn token_rearrange(x: FloatTensor<Self>, perm: IntTensor<Self>) -> FloatTensor<Self> {
        composed::token_rearrange::<Self>(x, perm)
    }

    /// Paged KV-cache slot allocation (contract 4) for requests growing from `prefix_lens[b]`
    /// to `seq_lens[b]` tokens in pages of `page_size` slots: request b's new token j (in
    /// `p..s`) takes slot `last_loc[b] + 1 + (j - p)` while inside its partly filled last page,
    /// else `free_pages[page_base(b) + j / page_size - ceil(p / page_size)] * page_size + j %
    /// page_size`, where page_base(b) counts the new pages of the requests before b. `prefix_lens`,
    /// `seq_lens`, `last_loc` `[B]` and `free_pages` `[P]` share one index dtype (int32, or int64
    /// for caches of 2^31 slots or more); `extend_total = sum(seq_lens - prefix_lens)` is known
    /// to the scheduler. The totals (pages taken, tokens extended) stay on the device.
    ///
    /// Invalid input: on `Ascend` the kernel checks on the device, and an AI Core error naming
    /// `alloc_extend` and the bad value is reported at the next synchronisation or read, for
    /// `prefix_lens < 0` or `> seq_lens`, a `last_loc` off its page offset, a batch needing more
    /// pages than `free_pages` lists, a negative or too large page id, and lengths that do not
    /// add up to `extend_total`. The composed default computes the formula regardless: -1 for
    /// slots of pages past the free list or positions past the lengths, no check of `last_loc`.
    ///
    /// Inference-only: no gradient is defined (`Autodiff` keeps this composed default).
    fn alloc_extend(
        prefix_lens: IntTensor<Self>,
        seq_lens: IntTensor<Self>,
        last_loc: IntTensor<Self>,
        free_pages: IntTensor<Self>,
        page_size: usize,
        extend_total: usize,
    ) -> AllocExtendOutput<Self> {
        composed::alloc_extend::<Self>(
            prefix_lens,
            seq_lens,
            last_loc,
            free_pages,
            page_size,
            extend_total,
        )
    }

    /// Split-KV grouped decode attention over a paged cache (contract 5): one query token per
    /// request, `q [B, HQ, Dk]`, attends to its cached keys `k_cache[kv_indices[kv_indptr[b] ..
    /// kv_indptr[b + 1]]]` (`k_cache [N, HKV, Dk]`, kv head `h / (HQ / HKV)`) and values
    /// (`v_cache [N, HKV, Dv]`, or the first `options.value_dim` dims of the key rows when
    /// `None`: the MLA layouts). Stage 1 cuts each request's keys into `num_kv_splits[b]` (in
    /// `1..=max_kv_splits`) chunks of `ceil(L / splits)` and takes each chunk's softmax; stage 2
    /// merges them by their log-sum-exp. `kv_indptr`, `kv_indices` and `num_kv_splits` are int32
    /// and stay on the device; every request has at least one key.
    ///
    /// Invalid input: on `Ascend` the kernel checks on the device, and an AI Core error naming
    /// `decode_attention` and the bad value is reported at the next synchronisation or read, for
    /// a `kv_indptr` entry below 0 or past `kv_indices`, a decreasing `kv_indptr`, a request
    /// without keys (invalid by the contract, not a zero result), a `num_kv_splits[b]` outside
    /// `1..=max_kv_splits` and a slot outside the caches. The composed default computes regardless:
    /// it clamps the split counts, and a request without keys gets zeros and `lse = -inf`.
    ///
    /// Inference-only: no gradient is defined (`Autodiff` keeps this composed default).
    fn decode_attention(
        q: FloatTensor<Self>,
        k_cache: FloatTensor<Self>,
        v_cache: Option<FloatTensor<Self>>,
        kv_indptr: IntTensor<Self>,
        kv_indices: IntTensor<Self>,
        num_kv_splits: IntTensor<Self>,
        options: DecodeAttentionOptions,
    ) -> DecodeAttentionOutput<Self> {
        composed::decode_attention::<Self>(
            q,
            k_cache,
            v_cache,
            kv_indptr,
            kv_indices,
            num_kv_splits,
            options,
        )
    }

    /// Paged prefill (extend) attention: request `r`'s chunk of `lens.q_lens[r]` new tokens
    /// (the rows of `q [T, HQ, D]`, requests one after another) attends causally to its
    /// `lens.kv_lens[r]` cached tokens, the chunk's own included as its last `q_lens[r]`: row `i`
    /// sees positions `0..=kv_lens[r] - q_lens[r] + i`. Position `j` of request `r` is slot
    /// `block_table[r, j / page_size] * page_size + j % page_size` of `k_cache [N, HKV, D]` and
    /// `v_cache [N, HKV, Dv]` (kv head `h / (HQ / HKV)`). `block_table [B, W]` (int32 on `Ascend`)
    /// stays on the device; the lengths are the scheduler's host values. Out `[T, HQ, Dv]`.
    ///
    /// `Ascend` runs `aclnnFusedInferAttentionScoreV3`'s paged form, which takes f16/bf16,
    /// page sizes a multiple of 128 (at most 512), head dims a multiple of 16 (at most 512) and
    /// Dv = D ([`paged_prefill_refusal`] says why a call does not fit): other calls are refused
    /// with an error naming the rule. A block-table entry outside the caches is an AI Core error
    /// reported at the next synchronisation or read. The composed default computes any sizes.
    ///
    /// Inference-only: no gradient is defined (`Autodiff` keeps this composed default).
    fn paged_prefill_attention(
        q: FloatTensor<Self>,
        k_cache: FloatTensor<Self>,
        v_cache: FloatTensor<Self>,
        block_table: IntTensor<Self>,
        lens: PrefillLens<'_>,
        sm_scale: f32,
    ) -> FloatTensor<Self> {
        composed::paged_prefill_attention::<Self>(
            q,
            k_cache,
            v_cache,
            block_table,
            lens.q_lens,
            lens.kv_lens,
            lens.page_size,
            sm_scale,
        )
    }

    /// Paged extend attention, the general form of [`FusedOps::paged_prefill_attention`]:
    /// request `r`'s chunk of `lens.q_lens[r]` rows of `q [T, HQ, Dk]` attends causally to its
    /// `lens.kv_lens[r]` cached tokens (the chunk's own last) through its row of `block_table
    /// [R, W]` in pages of `lens.page_size`. Values are `v_cache [N, HKV, Dv]`, or with `None`
    /// (multi-head latent attention) the first `lens.value_dim` dims of the key rows. Out
    /// `[T, HQ, Dv]` in q's dtype.
    ///
    /// `Ascend` runs either `aclnnFusedInferAttentionScoreV3` (where it takes the call: f16/bf16,
    /// value rows with Dv = Dk, pages a multiple of 128) or the extend kernels (f16 and bf16 on
    /// the cube, f32 on the vector path; any page size, MLA), the one the device model finds
    /// faster unless `path` asks for one (the composed default has one path and ignores it). A
    /// block-table entry outside the caches is an AI Core error reported at the next
    /// synchronisation or read.
    ///
    /// Inference-only: no gradient is defined (`Autodiff` keeps this composed default).
    fn extend_attention(
        q: FloatTensor<Self>,
        k_cache: FloatTensor<Self>,
        v_cache: Option<FloatTensor<Self>>,
        block_table: IntTensor<Self>,
        lens: ExtendLens<'_>,
        sm_scale: f32,
        _path: Option<ExtendPath>,
    ) -> FloatTensor<Self> {
        composed::extend_attention::<Self>(q, k_cache, v_cache, block_table, lens, sm_scale)
    }

    /// Grouped matmul of MoE experts: the rows of `x [R, K]` are grouped contiguously by
    /// expert, expert `e` owning the next `group_sizes[e]` rows, and `out[r] = x[r] @
    /// weights[e]` for `weights [E, K, N]`, out `[R, N]`. Rows past `sum(group_sizes)` are zero.
    /// `group_sizes [E]` (integers) stays on the device.
    fn grouped_matmul(
        x: FloatTensor<Self>,
        weights: FloatTensor<Self>,
        group_sizes: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        composed::grouped_matmul::<Self>(x, weights, group_sizes)
    }

    /// [`FusedOps::grouped_matmul`] of rows the groups cover exactly, `sum(group_sizes) = R`
    /// (the rows [`FusedOps::moe_permute`] gives): on `Ascend` the output is not zero-filled
    /// first (one launch fewer), so rows past a smaller total are left unwritten there; under
    /// `BURN_ASCEND_VALIDATE=1` such a total is refused at the call, naming it (a read of the
    /// sizes). The default is [`FusedOps::grouped_matmul`] (rows past the total zero), which
    /// `Autodiff` differentiates.
    fn grouped_matmul_covered(
        x: FloatTensor<Self>,
        weights: FloatTensor<Self>,
        group_sizes: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        Self::grouped_matmul(x, weights, group_sizes)
    }

    /// Weight gradient of [`FusedOps::grouped_matmul`]: `[E, K, N]` with `dw[e] = x_e^T @
    /// dy_e`, where `x_e` and `dy_e` are the rows of `x [R, K]` and `dy [R, N]` in group `e`.
    fn grouped_matmul_weight_grad(
        x: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        group_sizes: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        composed::grouped_matmul_weight_grad::<Self>(x, dy, group_sizes)
    }

    /// Per-token symmetric int8 quantization of float `x [M, K]`, its columns first multiplied
    /// by `smooth [K]` (x's type; SmoothQuant's migration of activation outliers into the
    /// weights) if given: `(q [M, K] I8, scale [M] F32)` with `scale = max_k |x| / 127` and
    /// `q = rint(x / scale)` (f32, ties to even; a row of zeros gets scale 0 and values 0).
    /// `Ascend` runs aclnnDynamicQuant (its smooth scales input) for F16/BF16 `x`.
    fn dynamic_quant(
        x: FloatTensor<Self>,
        smooth: Option<FloatTensor<Self>>,
    ) -> (IntTensor<Self>, FloatTensor<Self>) {
        composed::dynamic_quant::<Self>(x, smooth)
    }

    /// W8A16: float `x [M, K]` times the int8 `weight [K, N]` dequantized in x's type
    /// (`w * scale`, rounded once), out `[M, N]` in x's type. `scale` (float, 1-D): `[1]` per
    /// tensor, `[N]` per output channel, or with `group > 0` `[ceil(K / group) * N]` (row-major
    /// `[groups, N]`), one row of scales per `group` rows of the weight (`group` a multiple of
    /// 32 below K). `Ascend` runs aclnnWeightQuantBatchMatmulV2 for F16/BF16 `x`.
    fn weight_quant_matmul(
        x: FloatTensor<Self>,
        weight: IntTensor<Self>,
        scale: FloatTensor<Self>,
        group: usize,
    ) -> FloatTensor<Self> {
        composed::weight_quant_matmul::<Self>(x, weight, scale, group)
    }

    /// W8A8: int8 `x [M, K]` times int8 `weight [K, N]`, summed exactly in int32, converted to
    /// f32 and scaled by `weight_scale` (F32 `[N]` per output channel, or `[1]`) and `x_scale`
    /// (F32 `[M]` per token, or `[1]`), out `[M, N]` in `out_dtype`. `Ascend` runs
    /// aclnnQuantMatmulV4 for F16/BF16 outputs.
    fn quant_matmul(
        x: IntTensor<Self>,
        weight: IntTensor<Self>,
        weight_scale: FloatTensor<Self>,
        x_scale: FloatTensor<Self>,
        out_dtype: FloatDType,
    ) -> FloatTensor<Self> {
        composed::quant_matmul::<Self>(x, weight, weight_scale, x_scale, out_dtype)
    }

    /// Gathers `x [T, H]` to its experts and quantises each row to int8 in one pass: the rows
    /// of [`FusedOps::moe_gather`] for the permutation sorting the token-major expert ids
    /// `expert_ids [T*K]` (values in `0..num_experts`) stably by expert, each quantised
    /// dynamically in f32: `scale = max|row| / 127`, `q = round_ties_even(row / scale)` (0 where
    /// the scale is 0). Inference-only (`Autodiff` keeps the composed default, without
    /// gradient).
    ///
    /// Invalid input: on `Ascend` (aclnnMoeInitRoutingQuantV2) an id outside `0..num_experts` is
    /// an AI Core error naming it (reported at the next synchronisation or read); the composed
    /// default counts no row for it and sorts it by value.
    fn moe_gather_quant(
        x: FloatTensor<Self>,
        expert_ids: IntTensor<Self>,
        top_k: usize,
        num_experts: usize,
    ) -> MoeQuantRows<Self> {
        composed::moe_gather_quant::<Self>(x, expert_ids, top_k, num_experts)
    }

    /// A8W8 grouped matmul of MoE experts: int8 `x [M, K]` grouped by expert as in
    /// [`FusedOps::grouped_matmul`], int8 `weights [E, K, N]`,
    /// `out[r] = (x[r] . w[e][:, n]) * w_scale[e, n] * x_scale[r]`: the sum exact in int32, the
    /// scaling in f32, rounded once
    /// to `out` (F16 or BF16). For a BF16 out the weight scale is rounded to bf16 first (the
    /// A2 operator takes a bf16 scale then). Rows past `sum(group_sizes)` are zero.
    /// `w_scale [E, N]` is f32 or bf16 (bf16 is what the operator reads for a BF16 out, so
    /// keeping it so spares a cast per call), `x_scale [M]` f32. Inference-only.
    fn grouped_matmul_quant(
        x: IntTensor<Self>,
        weights: IntTensor<Self>,
        w_scale: FloatTensor<Self>,
        x_scale: Option<FloatTensor<Self>>,
        group_sizes: IntTensor<Self>,
        out: DType,
    ) -> FloatTensor<Self> {
        composed::grouped_matmul_quant::<Self>(x, weights, w_scale, x_scale, group_sizes, out)
    }

    /// A16W8 grouped matmul of MoE experts: F16/BF16 `x [M, K]` grouped as in
    /// [`FusedOps::grouped_matmul`] times int8 `weights [E, K, N]` dequantised per output
    /// channel in x's type, `(w + w_offset[e, n]) * w_scale[e, n]` (each step rounded to x's
    /// type; `w_scale`, `w_offset` `[E, N]` in x's type), accumulated in f32 and rounded once to
    /// x's type. Rows past `sum(group_sizes)` are zero. Inference-only.
    fn grouped_matmul_antiquant(
        x: FloatTensor<Self>,
        weights: IntTensor<Self>,
        w_scale: FloatTensor<Self>,
        w_offset: Option<FloatTensor<Self>>,
        group_sizes: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        composed::grouped_matmul_antiquant::<Self>(x, weights, w_scale, w_offset, group_sizes)
    }
}

fn attention_options(o: AttentionModuleOptions) -> crate::ops::attention::AttentionOptions {
    crate::ops::attention::AttentionOptions {
        scale: o.scale,
        softcap: o.softcap,
        is_causal: o.is_causal,
    }
}

impl FusedOps for Ascend {
    fn vector_add(x: FloatTensor<Self>, y: FloatTensor<Self>) -> FloatTensor<Self> {
        if !has_kernels(&x, &["vector_add"]) {
            run("vector_add", fused::check_vector_add(&x, &y));
            return Self::float_add(x, y);
        }
        run("vector_add", fused::vector_add(&x, &y))
    }

    fn int_vector_add(x: IntTensor<Self>, y: IntTensor<Self>) -> IntTensor<Self> {
        if !has_kernels(&x, &["vector_add"]) {
            run("vector_add", fused::check_vector_add(&x, &y));
            return Self::int_add(x, y);
        }
        run("vector_add", fused::vector_add(&x, &y))
    }

    fn layer_norm(
        x: FloatTensor<Self>,
        gamma: Option<FloatTensor<Self>>,
        beta: Option<FloatTensor<Self>>,
        eps: f64,
    ) -> LayerNormOutput<Self> {
        if !has_kernels(&x, &["layer_norm"]) {
            run(
                "layer_norm",
                fused::check_layer_norm(&x, gamma.as_ref(), beta.as_ref()),
            );
            return composed::layer_norm::<Self>(x, gamma, beta, eps);
        }
        let (y, mean, rstd) = run(
            "layer_norm",
            fused::layer_norm(&x, gamma.as_deref(), beta.as_deref(), eps),
        );
        LayerNormOutput { y, mean, rstd }
    }

    fn layer_norm_backward(
        dy: FloatTensor<Self>,
        x: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        gamma: Option<FloatTensor<Self>>,
    ) -> LayerNormGrads<Self> {
        if !has_kernels(&x, &["layer_norm_backward"]) {
            run(
                "layer_norm_backward",
                fused::check_layer_norm_backward(&dy, &x, &mean, &rstd, gamma.as_ref()),
            );
            return composed::layer_norm_backward::<Self>(dy, x, mean, rstd, gamma);
        }
        let (dx, dgamma, dbeta) = run(
            "layer_norm_backward",
            fused::layer_norm_backward(&dy, &x, &mean, &rstd, gamma.as_deref()),
        );
        LayerNormGrads { dx, dgamma, dbeta }
    }

    fn flash_attention_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        mask: Option<BoolTensor<Self>>,
        options: AttentionModuleOptions,
    ) -> Option<FlashAttentionOutput<Self>> {
        if !flash::fits(&q, &k, &v, false, options.softcap) {
            return None;
        }
        let (out, saved) = run(
            "attention",
            flash::flash_attention(&q, &k, &v, mask.as_deref(), attention_options(options)),
        );
        Some(FlashAttentionOutput {
            out,
            saved: FlashAttentionSaved {
                raw_out: saved.raw_out.into(),
                softmax_max: saved.softmax_max.into(),
                softmax_sum: saved.softmax_sum.into(),
            },
        })
    }

    fn flash_attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        mask: Option<BoolTensor<Self>>,
        options: AttentionModuleOptions,
        saved: FlashAttentionSaved<Self>,
        dy: FloatTensor<Self>,
    ) -> FlashAttentionGrads<Self> {
        let saved = flash::FlashSaved {
            raw_out: saved.raw_out.into(),
            softmax_max: saved.softmax_max.into(),
            softmax_sum: saved.softmax_sum.into(),
        };
        let (dq, dk, dv) = run(
            "attention_backward",
            flash::flash_attention_backward(
                &q,
                &k,
                &v,
                mask.as_deref(),
                attention_options(options),
                &saved,
                &dy,
            ),
        );
        FlashAttentionGrads { dq, dk, dv }
    }

    fn rms_norm(x: FloatTensor<Self>, gamma: FloatTensor<Self>, eps: f64) -> RmsNormOutput<Self> {
        let (y, rstd) = run("rms_norm", fused::rms_norm(&x, &gamma, eps));
        RmsNormOutput { y, rstd }
    }

    fn add_rms_norm(
        x1: FloatTensor<Self>,
        x2: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        eps: f64,
    ) -> AddRmsNormOutput<Self> {
        let (y, rstd, x) = run("add_rms_norm", fused::add_rms_norm(&x1, &x2, &gamma, eps));
        AddRmsNormOutput { y, rstd, x }
    }

    fn rms_norm_backward(
        dy: FloatTensor<Self>,
        x: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
    ) -> RmsNormGrads<Self> {
        let (dx, dgamma) = run(
            "rms_norm_backward",
            fused::rms_norm_backward(&dy, &x, &rstd, &gamma),
        );
        RmsNormGrads { dx, dgamma }
    }

    fn moe_gating_softmax(
        logits: FloatTensor<Self>,
        top_k: usize,
        renormalize: bool,
    ) -> MoeGating<Self> {
        if !fused::gating_fits(&logits, top_k) || !fused::gating_available(&logits) {
            run(
                "moe_gating_softmax",
                fused::check_moe_gating_softmax(&logits, top_k),
            );
            return composed::moe_gating_softmax::<Self>(logits, top_k, renormalize);
        }
        run(
            "moe_gating_softmax",
            fused::moe_gating_softmax(&logits, top_k, renormalize),
        )
        .into()
    }

    fn moe_group_topk(
        logits: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        choice: GroupTopk,
        weights_dtype: burn_tensor::DType,
    ) -> MoeGating<Self> {
        // The kernel takes f32, as the composition computes (a cast only for other logits).
        let f32s =
            |t: FloatTensor<Self>| run("moe_group_topk", crate::ops::copy::cast(&t, DataType::F32));
        let (logits, bias) = (f32s(logits), bias.map(f32s));
        if !has_kernels(&logits, &["moe_group_topk"]) {
            run(
                "moe_group_topk",
                fused::check_moe_group_topk(&logits, bias.as_ref(), &choice),
            );
            return composed::moe_group_topk::<Self>(logits, bias, choice, weights_dtype);
        }
        run(
            "moe_group_topk",
            fused::moe_group_topk(&logits, bias.as_deref(), &choice, data_type(weights_dtype)),
        )
        .into()
    }

    fn rotary_embedding(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        cos_sin: FloatTensor<Self>,
        rows: IntTensor<Self>,
        interleaved: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        if !fused::rope_fits(&q, &k) || !fused::rope_available(&q) {
            run(
                "rotary_embedding",
                fused::check_rotary_embedding(&q, &k, &cos_sin, &rows),
            );
            return composed::rotary_embedding::<Self>(q, k, cos_sin, rows, interleaved);
        }
        run(
            "rotary_embedding",
            fused::rotary_embedding(&q, &k, &cos_sin, &rows, interleaved),
        )
    }

    fn moe_permute(
        x: FloatTensor<Self>,
        expert_ids: IntTensor<Self>,
        top_k: usize,
        num_experts: usize,
    ) -> MoePermuted<Self> {
        if !fused::moe_permute_fits(&x) || !fused::moe_permute_available(&x) {
            run(
                "moe_permute",
                fused::check_moe_permute(&x, &expert_ids, top_k, num_experts),
            );
            return composed::moe_permute::<Self>(x, expert_ids, top_k, num_experts);
        }
        let p = run(
            "moe_permute",
            fused::moe_permute(&x, &expert_ids, top_k, num_experts),
        );
        MoePermuted {
            rows: p.rows.into(),
            row_idx: p.row_idx.into(),
            group_sizes: p.group_sizes.into(),
        }
    }

    fn moe_unpermute(
        rows: FloatTensor<Self>,
        row_idx: IntTensor<Self>,
        weights: FloatTensor<Self>,
        top_k: usize,
        add: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        if !fused::moe_permute_fits(&rows) || !fused::moe_permute_available(&rows) {
            run(
                "moe_unpermute",
                fused::check_moe_unpermute(&rows, &row_idx, &weights, top_k),
            );
            return composed::moe_unpermute::<Self>(rows, row_idx, weights, top_k, add);
        }
        match add {
            Some(add) if fused::moe_finalize_available(&rows) => run(
                "moe_unpermute",
                fused::moe_unpermute_add(&rows, &row_idx, &weights, top_k, &add),
            ),
            add => {
                let out: AscendTensor = run(
                    "moe_unpermute",
                    fused::moe_unpermute(&rows, &row_idx, &weights, top_k),
                );
                match add {
                    Some(add) => prim(float::<Self, 2>(out) + float::<Self, 2>(add)),
                    None => out,
                }
            }
        }
    }

    fn swiglu(x: FloatTensor<Self>) -> FloatTensor<Self> {
        if !fused::swiglu_fits(&x) || !fused::swiglu_available(&x) {
            run("swiglu", fused::check_swiglu(&x));
            return composed::swiglu::<Self>(x);
        }
        run("swiglu", fused::swiglu(&x))
    }

    fn moe_gather(
        x: FloatTensor<Self>,
        indices: IntTensor<Self>,
        top_k: usize,
    ) -> FloatTensor<Self> {
        if !has_kernels(&x, &["moe_gather"]) {
            run("moe_gather", fused::check_moe_gather(&x, &indices, top_k));
            return composed::moe_gather::<Self>(x, indices, top_k);
        }
        run("moe_gather", fused::moe_gather(&x, &indices, top_k))
    }

    fn moe_scatter(
        y: FloatTensor<Self>,
        indices: IntTensor<Self>,
        weights: Option<FloatTensor<Self>>,
        top_k: usize,
    ) -> FloatTensor<Self> {
        if !has_kernels(&y, &["moe_scatter"]) {
            run(
                "moe_scatter",
                fused::check_moe_scatter(&y, &indices, weights.as_ref(), top_k),
            );
            return composed::moe_scatter::<Self>(y, indices, weights, top_k);
        }
        run(
            "moe_scatter",
            fused::moe_scatter(&y, &indices, weights.as_deref(), top_k),
        )
    }

    fn token_rearrange(x: FloatTensor<Self>, perm: IntTensor<Self>) -> FloatTensor<Self> {
        if !has_kernels(&x, &["token_rearrange"]) {
            run("token_rearrange", fused::check_token_rearrange(&x, &perm));
            return composed::token_rearrange::<Self>(x, perm);
        }
        run("token_rearrange", fused::token_rearrange(&x, &perm))
    }

    fn alloc_extend(
        prefix_lens: IntTensor<Self>,
        seq_lens: IntTensor<Self>,
        last_loc: IntTensor<Self>,
        free_pages: IntTensor<Self>,
        page_size: usize,
        extend_total: usize,
    ) -> AllocExtendOutput<Self> {
        if !has_kernels(&seq_lens, &["alloc_extend"]) {
            run(
                "alloc_extend",
                fused::check_alloc_extend(
                    &prefix_lens,
                    &seq_lens,
                    &last_loc,
                    &free_pages,
                    page_size,
                    extend_total,
                ),
            );
            return composed::alloc_extend::<Self>(
                prefix_lens,
                seq_lens,
                last_loc,
                free_pages,
                page_size,
                extend_total,
            );
        }
        let (slots, totals) = run(
            "alloc_extend",
            fused::alloc_extend(
                &prefix_lens,
                &seq_lens,
                &last_loc,
                &free_pages,
                page_size,
                extend_total,
            ),
        );
        AllocExtendOutput { slots, totals }
    }

    fn decode_attention(
        q: FloatTensor<Self>,
        k_cache: FloatTensor<Self>,
        v_cache: Option<FloatTensor<Self>>,
        kv_indptr: IntTensor<Self>,
        kv_indices: IntTensor<Self>,
        num_kv_splits: IntTensor<Self>,
        options: DecodeAttentionOptions,
    ) -> DecodeAttentionOutput<Self> {
        // The kernels of the path the plan takes; an unplannable call reports why at launch.
        let plan = fused::decode_attention_plan(
            &q,
            &k_cache,
            v_cache.as_deref(),
            &kv_indptr,
            &kv_indices,
            &num_kv_splits,
            &options,
        );
        let path = match plan {
            Ok(Some(plan)) => plan.path(),
            _ => fused::DecodePath::Vector,
        };
        if !has_kernels(&q, path.kernels()) {
            run(
                "decode_attention",
                fused::check_decode_attention(
                    &q,
                    &k_cache,
                    v_cache.as_ref(),
                    &kv_indptr,
                    &kv_indices,
                    &num_kv_splits,
                    &options,
                ),
            );
            return composed::decode_attention::<Self>(
                q,
                k_cache,
                v_cache,
                kv_indptr,
                kv_indices,
                num_kv_splits,
                options,
            );
        }
        let r = run(
            "decode_attention",
            fused::decode_attention(
                &q,
                &k_cache,
                v_cache.as_deref(),
                &kv_indptr,
                &kv_indices,
                &num_kv_splits,
                options,
            ),
        );
        DecodeAttentionOutput {
            out: r.out.into(),
            lse: r.lse.into(),
            part_out: r.part_out.into(),
            part_lse: r.part_lse.into(),
        }
    }

    fn paged_prefill_attention(
        q: FloatTensor<Self>,
        k_cache: FloatTensor<Self>,
        v_cache: FloatTensor<Self>,
        block_table: IntTensor<Self>,
        lens: PrefillLens<'_>,
        sm_scale: f32,
    ) -> FloatTensor<Self> {
        let mask = run(
            "paged_prefill_attention",
            flash::compressed_causal_mask(q.ctx()),
        );
        run(
            "paged_prefill_attention",
            fused::paged_prefill_attention(
                &q,
                &k_cache,
                &v_cache,
                &block_table,
                &mask,
                lens.q_lens,
                lens.kv_lens,
                lens.page_size,
                sm_scale,
            ),
        )
    }

    fn extend_attention(
        q: FloatTensor<Self>,
        k_cache: FloatTensor<Self>,
        v_cache: Option<FloatTensor<Self>>,
        block_table: IntTensor<Self>,
        lens: ExtendLens<'_>,
        sm_scale: f32,
        path: Option<ExtendPath>,
    ) -> FloatTensor<Self> {
        const OP: &str = "extend_attention";
        run(
            OP,
            fused::check_extend_attention(&q, &k_cache, v_cache.as_ref(), &block_table, &lens),
        );
        // FIA where it takes the call and the loaded CANN exports it (8.1.RC1 on): older
        // releases serve every prefill through the kernels.
        let fia = v_cache.as_ref().filter(|v| {
            fused::paged_prefill_refusal(
                q.dtype(),
                lens.page_size,
                q.shape()[2],
                Some(v.shape()[2]),
            )
            .is_none()
                && fused::paged_prefill_missing(q.ctx().bind()).is_none()
        });
        let plan = fused::extend_attention_plan(
            &q,
            &k_cache,
            v_cache.as_deref(),
            &block_table,
            &lens,
            sm_scale,
        );
        let kernels = matches!(&plan, Ok(Some(p)) if has_kernels(&q, p.kernels()));
        let take = match (path, plan, fia) {
            (Some(p), _, _) => p,
            (None, Ok(Some(plan)), Some(_)) if kernels => {
                if plan.estimate.kernels_s < plan.estimate.fia_s {
                    ExtendPath::Kernels
                } else {
                    ExtendPath::Fused
                }
            }
            (None, _, Some(_)) => ExtendPath::Fused,
            (None, Ok(Some(_)), None) if kernels => ExtendPath::Kernels,
            (None, Ok(None), None) => ExtendPath::Kernels,
            // Shapes the kernels cannot tile, or no kernels on the device: the composed default.
            (None, _, None) => {
                return composed::extend_attention::<Self>(
                    q,
                    k_cache,
                    v_cache,
                    block_table,
                    lens,
                    sm_scale,
                )
            }
        };
        match (take, v_cache) {
            (ExtendPath::Fused, Some(v)) => Self::paged_prefill_attention(
                q,
                k_cache,
                v,
                block_table,
                PrefillLens {
                    q_lens: lens.q_lens,
                    kv_lens: lens.kv_lens,
                    page_size: lens.page_size,
                },
                sm_scale,
            ),
            (ExtendPath::Fused, None) => run::<CoreTensor>(
                OP,
                Err(crate::ops::broadcast::invalid_input(
                    OP,
                    "the fused operator was asked for, but the cache has no value rows (MLA)"
                        .into(),
                )),
            ),
            (ExtendPath::Kernels, v) => run(
                OP,
                fused::extend_attention(&q, &k_cache, v.as_deref(), &block_table, &lens, sm_scale),
            ),
        }
    }

    fn grouped_matmul(
        x: FloatTensor<Self>,
        weights: FloatTensor<Self>,
        group_sizes: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        // A CANN older than the operator: the composed default, after the same contract.
        if !fused::grouped_matmul_available(&x) {
            run(
                "grouped_matmul",
                fused::check_grouped_matmul(&x, &weights, &group_sizes),
            );
            return composed::grouped_matmul::<Self>(x, weights, group_sizes);
        }
        run(
            "grouped_matmul",
            fused::grouped_matmul(&x, &weights, &group_sizes),
        )
    }

    fn grouped_matmul_covered(
        x: FloatTensor<Self>,
        weights: FloatTensor<Self>,
        group_sizes: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        const OP: &str = "grouped_matmul_covered";
        if !fused::grouped_matmul_available(&x) {
            return Self::grouped_matmul(x, weights, group_sizes);
        }
        if run(OP, fused::validation(OP)) {
            run(
                OP,
                fused::preflight::grouped_matmul_covered(&x, &weights, &group_sizes),
            );
        }
        run(
            OP,
            fused::grouped_matmul_covered(&x, &weights, &group_sizes),
        )
    }

    fn grouped_matmul_weight_grad(
        x: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        group_sizes: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        if !fused::grouped_matmul_available(&x) {
            run(
                "grouped_matmul_weight_grad",
                fused::check_grouped_matmul_weight_grad(&x, &dy, &group_sizes),
            );
            return composed::grouped_matmul_weight_grad::<Self>(x, dy, group_sizes);
        }
        run(
            "grouped_matmul_weight_grad",
            fused::grouped_matmul_weight_grad(&x, &dy, &group_sizes),
        )
    }

    fn dynamic_quant(
        x: FloatTensor<Self>,
        smooth: Option<FloatTensor<Self>>,
    ) -> (IntTensor<Self>, FloatTensor<Self>) {
        run(
            "dynamic_quant",
            quant_matmul::check_dynamic_quant(&x, smooth.as_ref()),
        );
        if x.dtype() == DataType::F32 {
            // The operator takes F16/BF16; f32 rows keep their precision on the composition.
            return composed::dynamic_quant::<Self>(x, smooth);
        }
        run(
            "dynamic_quant",
            quant_matmul::dynamic_quant(&x, smooth.as_deref()),
        )
    }

    fn weight_quant_matmul(
        x: FloatTensor<Self>,
        weight: IntTensor<Self>,
        scale: FloatTensor<Self>,
        group: usize,
    ) -> FloatTensor<Self> {
        run(
            "weight_quant_matmul",
            quant_matmul::check_weight_quant_matmul(&x, &weight, &scale, group),
        );
        if x.dtype() == DataType::F32 {
            return composed::weight_quant_matmul::<Self>(x, weight, scale, group);
        }
        run(
            "weight_quant_matmul",
            quant_matmul::weight_quant_matmul(&x, &weight, &scale, None, group),
        )
    }

    fn quant_matmul(
        x: IntTensor<Self>,
        weight: IntTensor<Self>,
        weight_scale: FloatTensor<Self>,
        x_scale: FloatTensor<Self>,
        out_dtype: FloatDType,
    ) -> FloatTensor<Self> {
        run(
            "quant_matmul",
            quant_matmul::check_quant_matmul(&x, &weight, &weight_scale, &x_scale),
        );
        let out = float_type(out_dtype);
        if !matches!(out, DataType::F16 | DataType::BF16) {
            return composed::quant_matmul::<Self>(x, weight, weight_scale, x_scale, out_dtype);
        }
        run(
            "quant_matmul",
            quant_matmul::quant_matmul(&x, &weight, &weight_scale, &x_scale, out),
        )
    }

    fn moe_gather_quant(
        x: FloatTensor<Self>,
        expert_ids: IntTensor<Self>,
        top_k: usize,
        num_experts: usize,
    ) -> MoeQuantRows<Self> {
        let r = run(
            "moe_gather_quant",
            fused::moe_init_routing_quant(&x, &expert_ids, top_k, num_experts),
        );
        MoeQuantRows {
            rows: r.rows.into(),
            scales: r.scales.into(),
            row_idx: r.row_idx.into(),
            group_sizes: r.group_sizes.into(),
        }
    }

    fn grouped_matmul_quant(
        x: IntTensor<Self>,
        weights: IntTensor<Self>,
        w_scale: FloatTensor<Self>,
        x_scale: Option<FloatTensor<Self>>,
        group_sizes: IntTensor<Self>,
        out: DType,
    ) -> FloatTensor<Self> {
        run(
            "grouped_matmul_quant",
            fused::grouped_matmul_quant(
                &x,
                &weights,
                &w_scale,
                x_scale.as_deref(),
                &group_sizes,
                data_type(out),
            ),
        )
    }

    fn grouped_matmul_antiquant(
        x: FloatTensor<Self>,
        weights: IntTensor<Self>,
        w_scale: FloatTensor<Self>,
        w_offset: Option<FloatTensor<Self>>,
        group_sizes: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        run(
            "grouped_matmul_antiquant",
            fused::grouped_matmul_antiquant(
                &x,
                &weights,
                &w_scale,
                w_offset.as_deref(),
                &group_sizes,
            ),
        )
    }
}

/// Why `Ascend`'s paged prefill (aclnnFusedInferAttentionScoreV3) cannot run over a cache of
/// `dtype` rows with these page size and key/value dims (`value_dim` `None`: no value rows),
/// or `None` when it can: the rules [`FusedOps::paged_prefill_attention`] names.
pub fn paged_prefill_refusal(
    dtype: DType,
    page_size: usize,
    key_dim: usize,
    value_dim: Option<usize>,
) -> Option<String> {
    fused::paged_prefill_refusal(data_type(dtype), page_size, key_dim, value_dim)
}

/// Whether `t`'s device can run every kernel of a fused op; when it cannot, the op checks its
/// contract (the kernel path checks it inside `ops::fused`) and runs its composed default (and
/// the device says so once, see `DeviceContext::has_kernel`).
fn has_kernels(t: &crate::ops::AscendTensor, kernels: &[&'static str]) -> bool {
    kernels.iter().all(|k| t.ctx().has_kernel(k))
}

#[cfg(feature = "flex")]
impl FusedOps for burn_flex::Flex {}

/// `x + y` elementwise over 1-D tensors of equal length.
pub fn vector_add<B: FusedOps>(x: Tensor<B, 1>, y: Tensor<B, 1>) -> Tensor<B, 1> {
    float(B::vector_add(prim(x), prim(y)))
}

/// [`vector_add`] for integer tensors.
pub fn int_vector_add<B: FusedOps>(
    x: Tensor<B, 1, Int>,
    y: Tensor<B, 1, Int>,
) -> Tensor<B, 1, Int> {
    int(B::int_vector_add(x.into_primitive(), y.into_primitive()))
}

/// Layer norm over the last dim: `(y, mean, rstd)` with `mean` and `rstd` per row (f32).
pub fn layer_norm<B: FusedOps, const D: usize>(
    x: Tensor<B, D>,
    gamma: Option<Tensor<B, 1>>,
    beta: Option<Tensor<B, 1>>,
    eps: f64,
) -> (Tensor<B, D>, Tensor<B, 1>, Tensor<B, 1>) {
    let out = <B as FusedOps>::layer_norm(prim(x), gamma.map(prim), beta.map(prim), eps);
    (float(out.y), float(out.mean), float(out.rstd))
}

/// The gradients `(dx, dgamma, dbeta)` of [`layer_norm`].
pub fn layer_norm_backward<B: FusedOps, const D: usize>(
    dy: Tensor<B, D>,
    x: Tensor<B, D>,
    mean: Tensor<B, 1>,
    rstd: Tensor<B, 1>,
    gamma: Option<Tensor<B, 1>>,
) -> (Tensor<B, D>, Tensor<B, 1>, Tensor<B, 1>) {
    let g = B::layer_norm_backward(prim(dy), prim(x), prim(mean), prim(rstd), gamma.map(prim));
    (float(g.dx), float(g.dgamma), float(g.dbeta))
}

/// Attention without a bias, its backward fused under `Autodiff<Ascend>`. See
/// [`FusedOps::flash_attention`].
pub fn flash_attention<B: FusedOps>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    mask: Option<Tensor<B, 4, burn_tensor::Bool>>,
    options: AttentionModuleOptions,
) -> Tensor<B, 4> {
    let mask = mask.map(|m| m.into_primitive());
    float(B::flash_attention(prim(q), prim(k), prim(v), mask, options))
}

/// RMS norm over the last dim: `(y, rstd)` with `rstd` per row (f32); gamma `[N]` in x's dtype
/// (or f32 for an f16/bf16 x). See [`FusedOps::rms_norm`].
pub fn rms_norm<B: FusedOps, const D: usize>(
    x: Tensor<B, D>,
    gamma: Tensor<B, 1>,
    eps: f64,
) -> (Tensor<B, D>, Tensor<B, 1>) {
    let out = B::rms_norm(prim(x), prim(gamma), eps);
    (float(out.y), float(out.rstd))
}

/// `q [T, Nq, D]` and `k [T, Nk, D]` turned by rotary embedding (rotate-half, or GPT-J's
/// adjacent pairs if `interleaved`), token `t` by row `rows[t]` of `cos_sin [P, D]`. See
/// [`FusedOps::rotary_embedding`].
pub fn rotary_embedding<B: FusedOps>(
    q: Tensor<B, 3>,
    k: Tensor<B, 3>,
    cos_sin: Tensor<B, 2>,
    rows: Tensor<B, 1, Int>,
    interleaved: bool,
) -> (Tensor<B, 3>, Tensor<B, 3>) {
    let rows = rows.into_primitive();
    let (q, k) = B::rotary_embedding(prim(q), prim(k), prim(cos_sin), rows, interleaved);
    (float(q), float(k))
}

/// A MoE layer's tokens grouped by expert, from [`moe_permute`].
pub struct PermutedRows<B: Backend> {
    /// `[T*K, H]`: the rows sorted stably by expert.
    pub rows: Tensor<B, 2>,
    /// `[T*K]` int32: each token-major slot's row.
    pub row_idx: Tensor<B, 1, Int>,
    /// `[E]` int64: the rows of each expert.
    pub group_sizes: Tensor<B, 1, Int>,
}

/// `x [T, H]` grouped by expert for the token-major `expert_ids [T*K]`: see
/// [`FusedOps::moe_permute`].
pub fn moe_permute<B: FusedOps>(
    x: Tensor<B, 2>,
    expert_ids: Tensor<B, 1, Int>,
    top_k: usize,
    num_experts: usize,
) -> PermutedRows<B> {
    let p = B::moe_permute(prim(x), expert_ids.into_primitive(), top_k, num_experts);
    PermutedRows {
        rows: float(p.rows),
        row_idx: int(p.row_idx),
        group_sizes: int(p.group_sizes),
    }
}

/// `[T, H]`: each token's rows `rows[row_idx[t*K + k]]` summed with their `weights [T*K]`,
/// plus `add [T, H]` if given: see [`FusedOps::moe_unpermute`].
pub fn moe_unpermute<B: FusedOps>(
    rows: Tensor<B, 2>,
    row_idx: Tensor<B, 1, Int>,
    weights: Tensor<B, 1>,
    top_k: usize,
    add: Option<Tensor<B, 2>>,
) -> Tensor<B, 2> {
    let (idx, w) = (row_idx.into_primitive(), prim(weights));
    float(B::moe_unpermute(prim(rows), idx, w, top_k, add.map(prim)))
}

/// `silu(x[.., :N]) * x[.., N:]` for `x [.., 2N]`: see [`FusedOps::swiglu`].
pub fn swiglu<B: FusedOps, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    float(B::swiglu(prim(x)))
}

/// Residual add and RMS norm over the last dim: `(y, rstd, x)` where `x = x1 + x2` is the
/// normalised sum (the new residual stream). See [`FusedOps::add_rms_norm`].
pub fn add_rms_norm<B: FusedOps, const D: usize>(
    x1: Tensor<B, D>,
    x2: Tensor<B, D>,
    gamma: Tensor<B, 1>,
    eps: f64,
) -> (Tensor<B, D>, Tensor<B, 1>, Tensor<B, D>) {
    let out = B::add_rms_norm(prim(x1), prim(x2), prim(gamma), eps);
    (float(out.y), float(out.rstd), float(out.x))
}

/// The gradients `(dx, dgamma)` of [`rms_norm`]; dgamma is f32.
pub fn rms_norm_backward<B: FusedOps, const D: usize>(
    dy: Tensor<B, D>,
    x: Tensor<B, D>,
    rstd: Tensor<B, 1>,
    gamma: Tensor<B, 1>,
) -> (Tensor<B, D>, Tensor<B, 1>) {
    let g = B::rms_norm_backward(prim(dy), prim(x), prim(rstd), prim(gamma));
    (float(g.dx), float(g.dgamma))
}

/// Expert-major permutation of tokens: `out[i] = x[indices[i] / top_k]`.
pub fn moe_gather<B: FusedOps>(
    x: Tensor<B, 2>,
    indices: Tensor<B, 1, Int>,
    top_k: usize,
) -> Tensor<B, 2> {
    float(B::moe_gather(prim(x), indices.into_primitive(), top_k))
}

/// Weighted un-permutation and top-k reduction of expert outputs.
pub fn moe_scatter<B: FusedOps>(
    y: Tensor<B, 2>,
    indices: Tensor<B, 1, Int>,
    weights: Option<Tensor<B, 1>>,
    top_k: usize,
) -> Tensor<B, 2> {
    float(B::moe_scatter(
        prim(y),
        indices.into_primitive(),
        weights.map(prim),
        top_k,
    ))
}

/// Row gather by a permutation: `out[i] = x[perm[i]]`.
pub fn token_rearrange<B: FusedOps>(x: Tensor<B, 2>, perm: Tensor<B, 1, Int>) -> Tensor<B, 2> {
    float(B::token_rearrange(prim(x), perm.into_primitive()))
}

/// Grouped matmul of MoE experts: `out[r] = x[r] @ weights[e]` for the rows `r` of group `e`,
/// the rows of `x [R, K]` grouped contiguously by expert (`group_sizes[e]` rows each, on the
/// device), `weights [E, K, N]`, out `[R, N]`; rows past `sum(group_sizes)` are zero.
pub fn grouped_matmul<B: FusedOps>(
    x: Tensor<B, 2>,
    weights: Tensor<B, 3>,
    group_sizes: Tensor<B, 1, Int>,
) -> Tensor<B, 2> {
    float(B::grouped_matmul(
        prim(x),
        prim(weights),
        group_sizes.into_primitive(),
    ))
}

/// [`grouped_matmul`] of rows the groups cover exactly (`sum(group_sizes) = R`): see
/// [`FusedOps::grouped_matmul_covered`].
pub fn grouped_matmul_covered<B: FusedOps>(
    x: Tensor<B, 2>,
    weights: Tensor<B, 3>,
    group_sizes: Tensor<B, 1, Int>,
) -> Tensor<B, 2> {
    let sizes = group_sizes.into_primitive();
    float(B::grouped_matmul_covered(prim(x), prim(weights), sizes))
}

/// The weight gradient of [`grouped_matmul`]: `dw[e] = x_e^T @ dy_e` over the rows of group
/// `e`, `[E, K, N]`.
pub fn grouped_matmul_weight_grad<B: FusedOps>(
    x: Tensor<B, 2>,
    dy: Tensor<B, 2>,
    group_sizes: Tensor<B, 1, Int>,
) -> Tensor<B, 3> {
    float(B::grouped_matmul_weight_grad(
        prim(x),
        prim(dy),
        group_sizes.into_primitive(),
    ))
}

/// Per-token symmetric int8 quantization of `x [.., K]` (float), its columns first multiplied by
/// `smooth [K]` if given: `(q, scale)`, `q` I8 of x's shape and `scale` F32 of x's shape
/// without its last dim; see [`FusedOps::dynamic_quant`].
pub fn dynamic_quant<B: FusedOps, const D: usize, const S: usize>(
    x: Tensor<B, D>,
    smooth: Option<Tensor<B, 1>>,
) -> (Tensor<B, D, Int>, Tensor<B, S>) {
    assert_eq!(
        S + 1,
        D,
        "dynamic_quant: the scales have one dim fewer than x"
    );
    let dims = x.dims();
    let k = dims[D - 1];
    let rows = dims[..D - 1].iter().product::<usize>();
    let (q, s) = B::dynamic_quant(prim(x.reshape([rows, k])), smooth.map(prim));
    let mut scale_dims = [0; S];
    scale_dims.copy_from_slice(&dims[..D - 1]);
    (
        int::<B, 2>(q).reshape(dims),
        float::<B, 1>(s).reshape(scale_dims),
    )
}

/// W8A16 product: float `x [M, K]` times the int8 `weight [K, N]` under `scale` (`[1]`, `[N]`,
/// or `[ceil(K / group) * N]` with `group > 0`), `[M, N]` in x's dtype; see
/// [`FusedOps::weight_quant_matmul`].
pub fn weight_quant_matmul<B: FusedOps>(
    x: Tensor<B, 2>,
    weight: Tensor<B, 2, Int>,
    scale: Tensor<B, 1>,
    group: usize,
) -> Tensor<B, 2> {
    float(B::weight_quant_matmul(
        prim(x),
        weight.into_primitive(),
        prim(scale),
        group,
    ))
}

/// W8A8 product: int8 `x [M, K]` times int8 `weight [K, N]` with F32 `weight_scale [N]` (or
/// `[1]`) and `x_scale [M]` (or `[1]`), `[M, N]` in `out_dtype`; see
/// [`FusedOps::quant_matmul`].
pub fn quant_matmul<B: FusedOps>(
    x: Tensor<B, 2, Int>,
    weight: Tensor<B, 2, Int>,
    weight_scale: Tensor<B, 1>,
    x_scale: Tensor<B, 1>,
    out_dtype: FloatDType,
) -> Tensor<B, 2> {
    float(B::quant_matmul(
        x.into_primitive(),
        weight.into_primitive(),
        prim(weight_scale),
        prim(x_scale),
        out_dtype,
    ))
}

/// Float weights `w [.., K, N]` (a layer's `[K, N]`, MoE experts' `[E, K, N]`) quantised
/// symmetrically per output channel, on the device (Burn ops; no host compute): `q` I8 of w's
/// shape and `scale` F32 `[.., N]` (w's shape without K), `scale = max_k |w| / 127` (computed
/// from w converted to f32) and `q = round_ties_even(w / scale)`, so `|q| <= 127` and
/// `w ~ q * scale` within half a step. A zero channel gets scale 0 and zeros (see
/// [`composed::quantize_along`]).
pub fn quantize_weight_per_channel<B: Backend, const D: usize, const S: usize>(
    w: Tensor<B, D>,
) -> (Tensor<B, D, Int>, Tensor<B, S>) {
    assert!(
        D >= 2 && S + 1 == D,
        "quantize_weight_per_channel: weights [.., K, N] and scales [.., N], got {D} and {S} dims"
    );
    let (q, scale) = composed::quantize_along(w.cast(DType::F32), D - 2);
    (q, scale.squeeze_dim(D - 2))
}

/// [`FusedOps::moe_gather_quant`] on tensors: the quantised rows, their scales, each slot's row
/// and the rows per expert.
pub struct QuantRows<B: Backend> {
    /// `[T*K, H]` int8 (dtype `I8`), expert-major.
    pub rows: Tensor<B, 2, Int>,
    /// `[T*K]` f32: each row's dequantisation scale.
    pub scales: Tensor<B, 1>,
    /// `[T*K]` int32: the row of each token-major slot `t*K + k`.
    pub row_idx: Tensor<B, 1, Int>,
    /// `[E]` int32: rows per expert, the group sizes of the grouped matmuls.
    pub group_sizes: Tensor<B, 1, Int>,
}

/// Gathers `x [T, H]` to the experts of its token-major ids `expert_ids [T*K]` and quantises
/// each gathered row to int8 (scale `max|row| / 127`, f32) in one pass: the rows are those of
/// [`moe_gather`] with the stable expert sort of the ids (`Routing::order` in the model), so
/// [`moe_scatter`] with that order brings the expert outputs back.
pub fn moe_gather_quant<B: FusedOps>(
    x: Tensor<B, 2>,
    expert_ids: Tensor<B, 1, Int>,
    top_k: usize,
    num_experts: usize,
) -> QuantRows<B> {
    let r = B::moe_gather_quant(prim(x), expert_ids.into_primitive(), top_k, num_experts);
    QuantRows {
        rows: int(r.rows),
        scales: float(r.scales),
        row_idx: int(r.row_idx),
        group_sizes: int(r.group_sizes),
    }
}

/// A8W8 grouped matmul of MoE experts (see [`FusedOps::grouped_matmul_quant`]): int8 rows
/// `x [M, K]` with per-row f32 scales `x_scale [M]`, int8 `weights [E, K, N]` with per-channel
/// f32 or bf16 scales `w_scale [E, N]`, `group_sizes [E]` on the device; out `[M, N]` of `out`
/// (F16 or BF16).
pub fn grouped_matmul_quant<B: FusedOps>(
    x: Tensor<B, 2, Int>,
    weights: Tensor<B, 3, Int>,
    w_scale: Tensor<B, 2>,
    x_scale: Option<Tensor<B, 1>>,
    group_sizes: Tensor<B, 1, Int>,
    out: DType,
) -> Tensor<B, 2> {
    float(B::grouped_matmul_quant(
        x.into_primitive(),
        weights.into_primitive(),
        prim(w_scale),
        x_scale.map(prim),
        group_sizes.into_primitive(),
        out,
    ))
}

/// A16W8 grouped matmul of MoE experts (see [`FusedOps::grouped_matmul_antiquant`]): F16/BF16
/// `x [M, K]`, int8 `weights [E, K, N]` with per-channel `w_scale [E, N]` (and `w_offset`) in
/// x's dtype; out `[M, N]` in x's dtype.
pub fn grouped_matmul_antiquant<B: FusedOps>(
    x: Tensor<B, 2>,
    weights: Tensor<B, 3, Int>,
    w_scale: Tensor<B, 2>,
    w_offset: Option<Tensor<B, 2>>,
    group_sizes: Tensor<B, 1, Int>,
) -> Tensor<B, 2> {
    float(B::grouped_matmul_antiquant(
        prim(x),
        weights.into_primitive(),
        prim(w_scale),
        w_offset.map(prim),
        group_sizes.into_primitive(),
    ))
}
