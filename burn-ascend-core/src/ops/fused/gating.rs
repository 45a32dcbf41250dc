//! A MoE router's choice in one launch: softmax and top-k by aclnnMoeGatingTopKSoftmaxV2
//! (`aclnn-fused-decode-ops.md` §3.2), where a composition takes six (cast, softmax, top-k,
//! sum, divide, cast); DeepSeek's group-limited choices (softmax or sigmoid scores, a selection
//! bias, groups scored by their best or two best experts) by our `moe_group_topk` kernel, as
//! CANN's aclnnMoeGatingTopK would (8.1.RC1 does not declare it, §1), where a composition takes
//! about fifteen.

use burn_ascend_kernels::{launch, tiling};

use super::{data_ptr, device_props, kernel_float, same_device};
use crate::acl::aclnn;
use crate::acl::handles::Absent;
use crate::acl::{AclResult, DataType};
use crate::ops::broadcast::invalid_input;
use crate::ops::copy::contiguous;
use crate::ops::tensor::AscendTensor;

/// Largest top-k the operator takes (§3.2).
const MAX_TOP_K: usize = 1024;

/// What [`moe_gating_softmax`] gives for logits `[T, E]`.
#[derive(Debug, Clone)]
pub struct Gating {
    /// `[T, K]` in the logits' dtype: the chosen experts' probabilities (renormalised to sum
    /// to 1 when asked).
    pub weights: AscendTensor,
    /// `[T, K]` int32: the chosen experts, most probable first (ties: the lower id).
    pub ids: AscendTensor,
    /// `[T, E]` f32: the softmax over all experts, which the operator gives without
    /// renormalisation only (§3.2: `outputSoftmaxResultFlag` works with `renorm = 0`).
    pub probs: Option<AscendTensor>,
}

/// Whether `t`'s CANN exports aclnnMoeGatingTopKSoftmaxV2 (8.1.RC1 on, `ascend_acl::release`).
pub fn gating_available(t: &AscendTensor) -> bool {
    ascend_acl::aclnn_exported!(t.ctx().bind(), aclnnMoeGatingTopKSoftmaxV2).is_ok()
}

/// The contract of [`moe_gating_softmax`]: float logits `[T, E]`, `1 <= top_k <= E`.
pub fn check_moe_gating_softmax(logits: &AscendTensor, top_k: usize) -> AclResult<()> {
    let dims = logits.shape();
    if dims.len() != 2 || !logits.dtype.is_float() || top_k == 0 || top_k > dims[1] {
        return Err(invalid_input(
            "moe_gating_softmax",
            format!(
                "needs float logits [T, E] and 1 <= top_k <= E, got {} and top_k {top_k}",
                logits.describe()
            ),
        ));
    }
    Ok(())
}

/// Whether the operator takes `logits` and `top_k` (F16, BF16 or F32 on A2; k at most 1024).
pub fn gating_fits(logits: &AscendTensor, top_k: usize) -> bool {
    matches!(logits.dtype, DataType::F16 | DataType::BF16 | DataType::F32) && top_k <= MAX_TOP_K
}

/// Softmax over each row of `logits [T, E]` (in f32), its `top_k` experts and their
/// probabilities; with `renormalize` the chosen probabilities sum to 1 (the operator's
/// `renorm = 1`: the softmax of the chosen logits, the same values), and the softmax over all
/// experts is not given.
pub fn moe_gating_softmax(
    logits: &AscendTensor,
    top_k: usize,
    renormalize: bool,
) -> AclResult<Gating> {
    const OP: &str = "moe_gating_softmax";
    check_moe_gating_softmax(logits, top_k)?;
    let (t, e) = (logits.shape()[0], logits.shape()[1]);
    let ctx = logits.ctx();
    let gating = Gating {
        weights: AscendTensor::empty(ctx, vec![t, top_k], logits.dtype)?,
        ids: AscendTensor::empty(ctx, vec![t, top_k], DataType::I32)?,
        probs: match renormalize {
            false => Some(AscendTensor::empty(ctx, vec![t, e], DataType::F32)?),
            true => None,
        },
    };
    if t == 0 {
        return Ok(gating);
    }
    let probs = gating.probs.as_ref().map(|p| p.desc()).transpose()?;
    aclnn!(
        &**ctx,
        aclnnMoeGatingTopKSoftmaxV2(
            logits.desc()?,
            Absent,
            top_k as i64,
            i64::from(renormalize),
            probs.is_some(),
            gating.weights.desc()?,
            gating.ids.desc()?,
            probs.as_ref()
        )
    )
    .map_err(|e| {
        e.with_context(|| {
            format!(
                "{OP}: aclnnMoeGatingTopKSoftmaxV2 of {} (top {top_k}, renormalised: {renormalize})",
                logits.describe()
            )
        })
    })?;
    Ok(gating)
}

/// Most experts `moe_group_topk` takes: a token's row stays in the unified buffer.
pub const GROUP_TOPK_MAX_EXPERTS: usize = 4096;

/// How a grouped router chooses each token's experts (DeepSeek's `group_limited_greedy` and
/// `noaux_tc`; see [`moe_group_topk`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupTopk {
    /// Experts chosen per token.
    pub top_k: usize,
    /// Groups the experts split into, in order.
    pub groups: usize,
    /// Groups kept per token.
    pub keep_groups: usize,
    /// A group scores the sum of its two best selection values (`noaux_tc`), else its best.
    pub group_top_two: bool,
    /// Sigmoid scores (`noaux_tc`), else softmax.
    pub sigmoid: bool,
    /// The weights are the chosen experts' scores (`noaux_tc`), else their selection values
    /// (the masked scores `group_limited_greedy` takes its top-k of).
    pub gather_scores: bool,
    /// The weights are divided by their sum (+ 1e-20) before the factor.
    pub renormalize: bool,
    /// Factor on the weights (`routed_scaling_factor`).
    pub scale: f64,
}

/// The contract of [`moe_group_topk`]: f32 logits `[T, E]` with `E <= 4096`, an f32 `bias [E]`
/// if any, `groups` dividing E (into groups of two or more when they score their two best),
/// `1 <= keep_groups <= groups`, `1 <= top_k <=` the experts of the kept groups.
pub fn check_moe_group_topk(
    logits: &impl super::Operand,
    bias: Option<&impl super::Operand>,
    choice: &GroupTopk,
) -> AclResult<()> {
    let bad = |why: String| {
        Err(invalid_input(
            "moe_group_topk",
            format!(
                "{why}; got logits {}{} and {choice:?}",
                logits.describe(),
                bias.map_or(String::new(), |b| format!(", bias {}", b.describe()))
            ),
        ))
    };
    let dims = logits.dims();
    if dims.len() != 2 || logits.data_type() != DataType::F32 {
        return bad("the logits must be [T, E] f32".into());
    }
    let e = dims[1];
    if e == 0 || e > GROUP_TOPK_MAX_EXPERTS {
        return bad(format!("E must be in 1..={GROUP_TOPK_MAX_EXPERTS}"));
    }
    if let Some(b) = bias {
        if b.dims() != [e] || b.data_type() != DataType::F32 {
            return bad(format!("the bias must be [{e}] f32"));
        }
    }
    let least = if choice.group_top_two { 2 } else { 1 };
    if choice.groups == 0 || !e.is_multiple_of(choice.groups) || e / choice.groups < least {
        return bad(format!(
            "groups must split the {e} experts into groups of at least {least}"
        ));
    }
    if choice.keep_groups == 0 || choice.keep_groups > choice.groups {
        return bad("keep_groups must be in 1..=groups".into());
    }
    let kept = choice.keep_groups * (e / choice.groups);
    if choice.top_k == 0 || choice.top_k > kept {
        return bad(format!(
            "top_k must be in 1..={kept}, the experts of the kept groups"
        ));
    }
    if dims[0] > u32::MAX as usize {
        return bad("at most 2^32 - 1 tokens".into());
    }
    Ok(())
}

/// A grouped router's choice for f32 `logits [T, E]`, its weights in `weights` (f32, f16 or
/// bf16: rounded once from f32), in one launch of the `moe_group_topk` kernel, as
/// transformers' DeepSeek routers compute it: scores (softmax or sigmoid), selection values
/// (the scores plus `bias`), the best `keep_groups` groups by their best or two best selection
/// values, every other expert's selection value set to 0 (as transformers masks them), the
/// `top_k` largest selection values (ties: the lower id), and their weights (see
/// [`GroupTopk`]). `probs` holds the scores.
pub fn moe_group_topk(
    logits: &AscendTensor,
    bias: Option<&AscendTensor>,
    choice: &GroupTopk,
    weights: DataType,
) -> AclResult<Gating> {
    const OP: &str = "moe_group_topk";
    same_device(OP, &[Some(logits), bias])?;
    check_moe_group_topk(logits, bias, choice)?;
    let weight_type = kernel_float(weights).ok_or_else(|| {
        invalid_input(
            OP,
            format!("the weights are f32, f16 or bf16, not {weights}"),
        )
    })?;
    let (t, e) = (logits.shape()[0], logits.shape()[1]);
    let ctx = logits.ctx();
    let scores = AscendTensor::empty(ctx, vec![t, e], DataType::F32)?;
    let gating = Gating {
        weights: AscendTensor::empty(ctx, vec![t, choice.top_k], weights)?,
        ids: AscendTensor::empty(ctx, vec![t, choice.top_k], DataType::I32)?,
        probs: Some(scores.clone()),
    };
    if t == 0 {
        return Ok(gating);
    }
    let logits = contiguous(logits)?;
    let bias = bias.map(contiguous).transpose()?;
    let plan = tiling::moe_group_topk(
        t as u64,
        e as u64,
        bias.is_some(),
        &tiling::GroupTopkChoice {
            top_k: choice.top_k as u64,
            groups: choice.groups as u64,
            keep_groups: choice.keep_groups as u64,
            group_top_two: choice.group_top_two,
            sigmoid: choice.sigmoid,
            gather_scores: choice.gather_scores,
            renorm: choice.renormalize,
            scale: choice.scale as f32,
        },
        weight_type,
        &device_props(ctx)?,
    );
    let buffers = launch::MoeGroupTopkBuffers {
        logits: data_ptr(&logits),
        bias: bias.as_ref().map_or(std::ptr::null_mut(), data_ptr),
        scores: data_ptr(&scores),
        weights: data_ptr(&gating.weights),
        ids: data_ptr(&gating.ids),
    };
    // SAFETY: every buffer holds what the tiling describes and outlives the kernel in stream
    // order, as in `alloc_extend`.
    ctx.launch_kernel(OP, |kernels, stream| unsafe {
        kernels.moe_group_topk(stream, plan, buffers)
    })
    .map_err(|e| e.with_context(|| format!("{OP} of {} ({choice:?})", logits.describe())))?;
    Ok(gating)
}
