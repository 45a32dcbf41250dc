//! CANN's own MoE routing operators, aclnnMoeInitRoutingV2 and aclnnMoeTokenUnpermute: the
//! token permutation a MoE layer serves with ([`moe_permute`], [`moe_unpermute`]: one launch
//! for the sort, the gather and the rows per expert, one for the weighted sum back), and the
//! baselines that the `moe_gather` and `moe_scatter` kernels are measured against.
//!
//! They index the other way round from our kernels: `moe_gather`/`moe_scatter` take the sorting
//! permutation (`indices[i]` is the token-major slot that lands on row `i`), CANN's ops produce
//! and take its inverse (`expanded_row_idx[slot]` is the row slot `t*K + k` lands on).

use crate::acl::aclnn;
use crate::acl::handles::Absent;
use crate::acl::{AclResult, DataType};
use crate::ops::broadcast::invalid_input;
use crate::ops::copy::{cast, contiguous, reshape_view};
use crate::ops::creation::zeros;
use crate::ops::tensor::AscendTensor;

use super::Operand;

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

/// Checks a routing's operands: float `x [T, H]`, integer token-major `expert_ids [T*top_k]`,
/// `top_k > 0`, `num_experts > 0`; errors name `op`.
pub(super) fn check_expert_ids<T: Operand>(
    op: &str,
    x: &T,
    expert_ids: &T,
    top_k: usize,
    num_experts: usize,
) -> AclResult<()> {
    super::norm_type(op, x)?;
    let (xd, id) = (x.dims(), expert_ids.dims());
    let dt = expert_ids.data_type();
    if xd.len() != 2
        || id.len() != 1
        || dt.is_float()
        || dt == DataType::Bool
        || top_k == 0
        || num_experts == 0
        || id[0] != xd[0] * top_k
    {
        return Err(invalid_input(
            op,
            format!(
                "needs x [T, H], expert_ids [T*top_k] integers, top_k > 0 and num_experts > 0; \
                 got x {}, expert_ids {}, top_k {top_k}, num_experts {num_experts}",
                x.describe(),
                expert_ids.describe()
            ),
        ));
    }
    Ok(())
}

/// Token-major expert ids `[T*K]` as the routing operators take them: `expertIdx [T, K]`,
/// INT32, contiguous.
pub(super) fn expert_idx(
    expert_ids: &AscendTensor,
    t: usize,
    top_k: usize,
) -> AclResult<AscendTensor> {
    reshape_view(
        &contiguous(&cast(expert_ids, DataType::I32)?)?,
        vec![t, top_k],
    )
}

/// The contract of [`moe_permute`]: float `x [T, H]`, integer `expert_ids [T*top_k]`.
pub fn check_moe_permute<T: Operand>(
    x: &T,
    expert_ids: &T,
    top_k: usize,
    num_experts: usize,
) -> AclResult<()> {
    check_expert_ids("moe_permute", x, expert_ids, top_k, num_experts)
}

/// The contract of [`moe_unpermute`]: float `rows [R, H]`, integer `row_idx [T*top_k]`,
/// float `weights [T*top_k]`, `top_k > 0`.
pub fn check_moe_unpermute<T: Operand>(
    rows: &T,
    row_idx: &T,
    weights: &T,
    top_k: usize,
) -> AclResult<()> {
    const OP: &str = "moe_unpermute";
    super::norm_type(OP, rows)?;
    let (rd, id, wd) = (rows.dims(), row_idx.dims(), weights.dims());
    let it = row_idx.data_type();
    if rd.len() != 2
        || id.len() != 1
        || wd != id
        || it.is_float()
        || it == DataType::Bool
        || !weights.data_type().is_float()
        || top_k == 0
        || id[0] % top_k != 0
    {
        return Err(invalid_input(
            OP,
            format!(
                "needs rows [R, H], row_idx [T*top_k] integers and weights [T*top_k] floats, \
                 top_k > 0; got rows {}, row_idx {}, weights {}, top_k {top_k}",
                rows.describe(),
                row_idx.describe(),
                weights.describe()
            ),
        ));
    }
    Ok(())
}

/// Whether `t`'s CANN exports the two operators of [`moe_permute`] and [`moe_unpermute`]
/// (8.1.RC1 on, `ascend_acl::release`).
pub fn moe_permute_available(t: &AscendTensor) -> bool {
    let api = t.ctx().bind();
    ascend_acl::aclnn_exported!(api, aclnnMoeInitRoutingV2).is_ok()
        && ascend_acl::aclnn_exported!(api, aclnnMoeTokenUnpermute).is_ok()
}

/// Whether the operators take rows of `x`'s type: F16, BF16 or F32 (§4.3).
pub fn moe_permute_fits(x: &AscendTensor) -> bool {
    matches!(x.dtype, DataType::F16 | DataType::BF16 | DataType::F32)
}

/// What [`moe_permute`] produces.
#[derive(Debug, Clone)]
pub struct Permuted {
    /// `[T*K, H]` x's dtype: row `i` is `x[s_i / K]`, for the token-major slots `s_i` sorted
    /// stably by expert.
    pub rows: AscendTensor,
    /// `[T*K]` I32: for each token-major slot `t*K + k`, its row (the inverse of the sort).
    pub row_idx: AscendTensor,
    /// `[E]` I64: the rows of each expert, the grouped matmul's group list type.
    pub group_sizes: AscendTensor,
}

/// A MoE layer's tokens `x [T, H]` routed dropless by the token-major expert ids `expert_ids
/// [T*K]` (values in `0..num_experts`): one aclnnMoeInitRoutingV2 sorting, gathering and
/// counting, and a cast of its INT32 counts to the INT64 aclnnGroupedMatmulV4 takes (as
/// vllm-ascend casts `expert_tokens`).
pub fn moe_permute(
    x: &AscendTensor,
    expert_ids: &AscendTensor,
    top_k: usize,
    num_experts: usize,
) -> AclResult<Permuted> {
    check_moe_permute(x, expert_ids, top_k, num_experts)?;
    let (t, h) = (x.shape()[0], x.shape()[1]);
    let ctx = x.ctx();
    if t == 0 {
        return Ok(Permuted {
            rows: AscendTensor::empty(ctx, vec![0, h], x.dtype)?,
            row_idx: AscendTensor::empty(ctx, vec![0], DataType::I32)?,
            group_sizes: zeros(ctx, vec![num_experts], DataType::I64)?,
        });
    }
    let ids = expert_idx(expert_ids, t, top_k)?;
    let r = cann_moe_init_routing(&contiguous(x)?, &ids, num_experts, None)?;
    Ok(Permuted {
        rows: r.expanded_x,
        row_idx: r.expanded_row_idx,
        group_sizes: cast(&r.expert_tokens, DataType::I64)?,
    })
}

/// `out [T, H]` with `out[t] = sum_k weights[t*K + k] * rows[row_idx[t*K + k]]`, summed in f32
/// and rounded once to the rows' dtype: one aclnnMoeTokenUnpermute, the weights taken in the
/// rows' dtype (ASSUMPTION, §4.5 leaves the pairing open: the stricter reading, one cast
/// where they differ).
pub fn moe_unpermute(
    rows: &AscendTensor,
    row_idx: &AscendTensor,
    weights: &AscendTensor,
    top_k: usize,
) -> AclResult<AscendTensor> {
    check_moe_unpermute(rows, row_idx, weights, top_k)?;
    let slots = row_idx.shape()[0];
    let t = slots / top_k;
    if t == 0 {
        return AscendTensor::empty(rows.ctx(), vec![0, rows.shape()[1]], rows.dtype);
    }
    let probs = reshape_view(&contiguous(&cast(weights, rows.dtype)?)?, vec![t, top_k])?;
    cann_moe_token_unpermute(&contiguous(rows)?, row_idx, Some(&probs))
}

/// Whether `t`'s CANN exports aclnnMoeFinalizeRoutingV2 (8.1.RC1 on, `ascend_acl::release`),
/// which [`moe_unpermute_add`] runs.
pub fn moe_finalize_available(t: &AscendTensor) -> bool {
    ascend_acl::aclnn_exported!(t.ctx().bind(), aclnnMoeFinalizeRoutingV2).is_ok()
}

/// [`moe_unpermute`] plus `add [T, H]` (a shared expert's output), in one
/// aclnnMoeFinalizeRoutingV2 (§4.7: `x1` the addend, the row-major row index InitRoutingV2
/// gives, dropPadMode 2, as vllm-ascend calls it): `out[t] = add[t] + sum_k weights[t*K + k] *
/// rows[row_idx[t*K + k]]`, in f32 and rounded once to the rows' dtype; the weights and the
/// addend taken in the rows' dtype (the operator's one float type: a cast where they differ).
/// Every slot's row must lie in `rows` (a dropless routing's).
pub fn moe_unpermute_add(
    rows: &AscendTensor,
    row_idx: &AscendTensor,
    weights: &AscendTensor,
    top_k: usize,
    add: &AscendTensor,
) -> AclResult<AscendTensor> {
    const OP: &str = "moe_unpermute";
    check_moe_unpermute(rows, row_idx, weights, top_k)?;
    let slots = row_idx.shape()[0];
    let (t, h) = (slots / top_k, rows.shape()[1]);
    if add.shape() != [t, h] {
        return Err(invalid_input(
            OP,
            format!(
                "the addend must be [{t}, {h}] (tokens, the rows' width), got {}",
                add.describe()
            ),
        ));
    }
    let out = AscendTensor::empty(rows.ctx(), vec![t, h], rows.dtype)?;
    if t == 0 {
        return Ok(out);
    }
    let scales = reshape_view(&contiguous(&cast(weights, rows.dtype)?)?, vec![t, top_k])?;
    let add = contiguous(&cast(add, rows.dtype)?)?;
    let (rows, row_idx) = (contiguous(rows)?, int32(OP, "row_idx", row_idx, 1)?);
    aclnn!(
        &**rows.ctx(),
        aclnnMoeFinalizeRoutingV2(
            rows.desc()?,
            row_idx.desc()?,
            add.desc()?,
            Absent,
            Absent,
            scales.desc()?,
            Absent,
            2,
            out.desc()?
        )
    )
    .map_err(|e| {
        e.with_context(|| {
            format!(
                "{OP}: aclnnMoeFinalizeRoutingV2 of {} by {} plus {}",
                rows.describe(),
                row_idx.describe(),
                add.describe()
            )
        })
    })?;
    Ok(out)
}
