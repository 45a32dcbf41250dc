//! A MoE router's softmax and top-k in one launch: aclnnMoeGatingTopKSoftmaxV2
//! (`aclnn-fused-decode-ops.md` §3.2), where a composition takes six (cast, softmax, top-k,
//! sum, divide, cast).

use crate::acl::aclnn;
use crate::acl::handles::Absent;
use crate::acl::{AclResult, DataType};
use crate::ops::broadcast::invalid_input;
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
