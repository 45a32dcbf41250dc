//! CANN's own MoE routing operators, aclnnMoeInitRoutingV2 and aclnnMoeTokenUnpermute: the
//! baselines that the `moe_gather` and `moe_scatter` kernels are measured against.
//!
//! They index the other way round from our kernels: `moe_gather`/`moe_scatter` take the sorting
//! permutation (`indices[i]` is the token-major slot that lands on row `i`), CANN's ops produce
//! and take its inverse (`expanded_row_idx[slot]` is the row slot `t*K + k` lands on).

use crate::acl::aclnn;
use crate::acl::handles::Absent;
use crate::acl::{AclResult, DataType};
use crate::ops::broadcast::invalid_input;
use crate::ops::copy::cast;
use crate::ops::tensor::AscendTensor;

/// expertTokensCountOrCumsumFlag: count the tokens of each expert.
const COUNTS: i64 = 2;

/// What [`cann_moe_init_routing`] produces.
#[derive(Debug, Clone)]
pub struct CannRouting {
    /// The tokens in expert-major order (stable within an expert): `[T*K, H]`, or with a capacity
    /// `[E, capacity, H]`, each expert's first `capacity` rows, zero padded.
    pub expanded_x: AscendTensor,
    /// `[T*K]` int32: for each token-major slot `t*K + k`, its row in `expanded_x` (rows counted
    /// across experts with a capacity; -1 for a dropped slot). [`cann_moe_token_unpermute`] takes
    /// it as `sorted_indices`.
    pub expanded_row_idx: AscendTensor,
    /// `[E]` int32: the tokens routed to each expert, before any capacity cut.
    pub expert_tokens: AscendTensor,
}

/// Checks an int index tensor of `rank` dims and brings it to int32, as the operators take it.
fn int32(op: &str, name: &str, t: &AscendTensor, rank: usize) -> AclResult<AscendTensor> {
    if t.shape().len() != rank || t.dtype.is_float() || t.dtype == DataType::Bool {
        return Err(invalid_input(
            op,
            format!("{name} must be {rank}-D integers, got {}", t.describe()),
        ));
    }
    cast(t, DataType::I32)
}

/// The CANN baseline of `moe_gather`: aclnnMoeInitRoutingV2 routes `x [T, H]` by the top-k
/// expert ids `expert_idx [T, K]` (values in `0..num_experts`). Without a capacity it is
/// dropless: `expanded_x[i] = x[s_i / K]` for the token-major slots `s_i` sorted stably by
/// expert, which is `moe_gather(x, argsort(expert_idx.flatten()), K)`. With `capacity`, each
/// expert keeps its first `capacity` slots (drop/pad mode).
pub fn cann_moe_init_routing(
    x: &AscendTensor,
    expert_idx: &AscendTensor,
    num_experts: usize,
    capacity: Option<usize>,
) -> AclResult<CannRouting> {
    const OP: &str = "cann_moe_init_routing";
    let expert_idx = int32(OP, "expert_idx", expert_idx, 2)?;
    if x.shape().len() != 2 {
        return Err(invalid_input(
            OP,
            format!("x must be [T, H], got {}", x.describe()),
        ));
    }
    let (h, slots) = (x.shape()[1], expert_idx.layout.numel());
    let ctx = x.ctx();
    let expanded_shape = match capacity {
        Some(c) => vec![num_experts, c, h],
        None => vec![slots, h],
    };
    let routing = CannRouting {
        expanded_x: AscendTensor::empty(ctx, expanded_shape, x.dtype)?,
        expanded_row_idx: AscendTensor::empty(ctx, vec![slots], DataType::I32)?,
        expert_tokens: AscendTensor::empty(ctx, vec![num_experts], DataType::I32)?,
    };
    let counts = routing.expert_tokens.desc()?;
    // Counts come from the count output when dropless and from the before-capacity output in
    // drop/pad mode; the operator produces each only in its own mode.
    let (mode, count_flag, count_out, before_flag, before_out) = match capacity {
        None => (0, COUNTS, Some(&counts), false, None),
        Some(_) => (1, 0, None, true, Some(&counts)),
    };
    aclnn!(
        &**ctx,
        aclnnMoeInitRoutingV2(
            x.desc()?,
            expert_idx.desc()?,
            0,
            capacity.unwrap_or(0) as i64,
            num_experts as i64,
            mode,
            count_flag,
            before_flag,
            routing.expanded_x.desc()?,
            routing.expanded_row_idx.desc()?,
            count_out,
            before_out
        )
    )
    .map_err(|e| {
        e.with_context(|| {
            format!(
                "aclnnMoeInitRoutingV2 of {} by {} over {num_experts} experts",
                x.describe(),
                expert_idx.describe()
            )
        })
    })?;
    Ok(routing)
}

/// The CANN baseline of `moe_scatter`: aclnnMoeTokenUnpermute gives `out [T, H]` with
/// `out[t] = sum_k probs[t, k] * permuted[sorted_indices[t*K + k]]`, summed in f32; slots whose
/// row lies past `permuted` (dropped) add nothing. `sorted_indices [T*K]` is
/// [`CannRouting::expanded_row_idx`]; `probs [T, K]` default to K = 1 and weight 1. With the same
/// routing this equals `moe_scatter(permuted, argsort(expert ids), probs.flatten(), K)`.
pub fn cann_moe_token_unpermute(
    permuted: &AscendTensor,
    sorted_indices: &AscendTensor,
    probs: Option<&AscendTensor>,
) -> AclResult<AscendTensor> {
    const OP: &str = "cann_moe_token_unpermute";
    let sorted_indices = int32(OP, "sorted_indices", sorted_indices, 1)?;
    if permuted.shape().len() != 2 || probs.is_some_and(|p| p.shape().len() != 2) {
        return Err(invalid_input(
            OP,
            format!(
                "needs permuted [rows, H] and probs [T, K], got {} and {}",
                permuted.describe(),
                probs.map_or("none".into(), AscendTensor::describe)
            ),
        ));
    }
    let tokens = probs.map_or(sorted_indices.layout.numel(), |p| p.shape()[0]);
    let out = AscendTensor::empty(
        permuted.ctx(),
        vec![tokens, permuted.shape()[1]],
        permuted.dtype,
    )?;
    let probs_desc = probs.map(AscendTensor::desc).transpose()?;
    aclnn!(
        &**permuted.ctx(),
        aclnnMoeTokenUnpermute(
            permuted.desc()?,
            sorted_indices.desc()?,
            &probs_desc,
            false,
            Absent,
            out.desc()?
        )
    )
    .map_err(|e| {
        e.with_context(|| {
            format!(
                "aclnnMoeTokenUnpermute of {} by {}",
                permuted.describe(),
                sorted_indices.describe()
            )
        })
    })?;
    Ok(out)
}
