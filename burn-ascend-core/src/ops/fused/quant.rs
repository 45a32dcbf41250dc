//! The quantised MoE expert path on Atlas A2 (issue 24): aclnnMoeInitRoutingQuantV2 gathers
//! each token to its expert rows and quantises them to int8 (a dynamic f32 scale per row) in
//! one pass, and aclnnGroupedMatmulV4 runs the experts on int8 weights, either with int8
//! activations (A8W8: int32 accumulation, dequantised by the weight's per-channel and the
//! rows' per-token scales) or with float activations (A16W8: the weight dequantised per
//! channel in the activations' type). The group sizes stay on the device.

use super::grouped::{check_group_sizes, group_list, GROUP_SIZES, NO_ACTIVATION, SPLIT_M};
use super::Operand;
use crate::acl::aclnn;
use crate::acl::handles::{Absent, TensorListDesc};
use crate::acl::{AclResult, DataType};
use crate::ops::broadcast::invalid_input;
use crate::ops::copy::{cast, contiguous};
use crate::ops::creation::zeros;
use crate::ops::tensor::AscendTensor;

/// splitItem: x, weight and out are one tensor each.
const SINGLE_TENSOR: i64 = 3;
/// quantMode of aclnnMoeInitRoutingQuantV2: a scale per row, computed by the kernel.
const DYNAMIC_QUANT: i64 = 1;
/// expertTokensCountOrCumsumFlag: count the rows of each expert.
const COUNTS: i64 = 2;

/// What [`moe_init_routing_quant`] produces.
#[derive(Debug, Clone)]
pub struct QuantRouting {
    /// `[T*K, H]` int8: the tokens in expert-major order (token order within an expert),
    /// each row quantised with its own scale.
    pub rows: AscendTensor,
    /// `[T*K]` f32: row `i` holds `rows[i] * scales[i]` (approximately).
    pub scales: AscendTensor,
    /// `[T*K]` int32: for each token-major slot `t*K + k`, its row in `rows` (the inverse of
    /// the sorting permutation `moe_gather` takes).
    pub row_idx: AscendTensor,
    /// `[E]` int32: the rows of each expert.
    pub group_sizes: AscendTensor,
}

/// The contract of [`moe_init_routing_quant`]: float `x [T, H]`, integer `expert_ids [T*K]`
/// (token-major) with `T*K` divisible into `top_k`, `num_experts > 0`.
pub fn check_moe_init_routing_quant<T: Operand>(
    x: &T,
    expert_ids: &T,
    top_k: usize,
    num_experts: usize,
) -> AclResult<()> {
    super::routing::check_expert_ids("moe_gather_quant", x, expert_ids, top_k, num_experts)
}

/// aclnnMoeInitRoutingQuantV2, dynamic and dropless: `x [T, H]` routed by the token-major
/// expert ids `expert_ids [T*K]` (values in `0..num_experts`). `rows[i]` is `x[s_i / K]` for
/// the slots `s_i` sorted stably by expert (the rows `moe_gather(x, argsort(ids), K)` gives),
/// quantised: `scales[i] = max|row| / 127`, `rows[i] = round_ties_even(row / scales[i])`.
pub fn moe_init_routing_quant(
    x: &AscendTensor,
    expert_ids: &AscendTensor,
    top_k: usize,
    num_experts: usize,
) -> AclResult<QuantRouting> {
    check_moe_init_routing_quant(x, expert_ids, top_k, num_experts)?;
    let (t, h) = (x.shape()[0], x.shape()[1]);
    let ids = super::routing::expert_idx(expert_ids, t, top_k)?;
    let ctx = x.ctx();
    let slots = t * top_k;
    let routing = QuantRouting {
        rows: AscendTensor::empty(ctx, vec![slots, h], DataType::I8)?,
        scales: AscendTensor::empty(ctx, vec![slots], DataType::F32)?,
        row_idx: AscendTensor::empty(ctx, vec![slots], DataType::I32)?,
        group_sizes: zeros(ctx, vec![num_experts], DataType::I32)?,
    };
    if slots == 0 {
        return Ok(routing);
    }
    aclnn!(
        &**ctx,
        aclnnMoeInitRoutingQuantV2(
            x.desc()?,
            ids.desc()?,
            Absent,
            Absent,
            0,
            0,
            num_experts as i64,
            0,
            COUNTS,
            false,
            DYNAMIC_QUANT,
            routing.rows.desc()?,
            routing.row_idx.desc()?,
            routing.group_sizes.desc()?,
            Absent,
            routing.scales.desc()?
        )
    )
    .map_err(|e| {
        e.with_context(|| {
            format!(
                "aclnnMoeInitRoutingQuantV2 of {} by {} over {num_experts} experts",
                x.describe(),
                expert_ids.describe()
            )
        })
    })?;
    Ok(routing)
}

/// The contract of [`grouped_matmul_quant`]: int8 `x [M, K]` and `weights [E, K, N]`,
/// `w_scale [E, N]` f32, `x_scale [M]` f32 if given, `group_sizes [E]` integers, out F16/BF16.
pub fn check_grouped_matmul_quant<T: Operand>(
    x: &T,
    weights: &T,
    w_scale: &T,
    x_scale: Option<&T>,
    group_sizes: &T,
    out: DataType,
) -> AclResult<()> {
    const OP: &str = "grouped_matmul_quant";
    let (xd, wd) = (x.dims(), weights.dims());
    let shapes = xd.len() == 2 && wd.len() == 3 && xd[1] == wd[1];
    let types = x.data_type() == DataType::I8 && weights.data_type() == DataType::I8;
    let scale_ok = shapes
        && matches!(w_scale.data_type(), DataType::F32 | DataType::BF16)
        && w_scale.dims() == [wd[0], wd[2]]
        && x_scale.is_none_or(|s| s.data_type() == DataType::F32 && s.dims() == [xd[0]]);
    if !(shapes && types && scale_ok && matches!(out, DataType::F16 | DataType::BF16)) {
        return Err(invalid_input(
            OP,
            format!(
                "needs int8 x [M, K] and weights [E, K, N], f32 or bf16 w_scale [E, N], f32 x_scale [M] (optional) and an F16 or BF16 out; got x {}, weights {}, w_scale {}, x_scale {}, out {out}",
                x.describe(),
                weights.describe(),
                w_scale.describe(),
                x_scale.map_or("none".into(), Operand::describe)
            ),
        ));
    }
    check_group_sizes(OP, group_sizes, wd[0])
}

/// The contract of [`grouped_matmul_antiquant`]: F16/BF16 `x [M, K]`, int8 `weights [E, K,
/// N]`, `w_scale [E, N]` (and `w_offset [E, N]` if given) in x's type, `group_sizes [E]`.
pub fn check_grouped_matmul_antiquant<T: Operand>(
    x: &T,
    weights: &T,
    w_scale: &T,
    w_offset: Option<&T>,
    group_sizes: &T,
) -> AclResult<()> {
    const OP: &str = "grouped_matmul_antiquant";
    let (xd, wd) = (x.dims(), weights.dims());
    let dt = x.data_type();
    let shapes = xd.len() == 2 && wd.len() == 3 && xd[1] == wd[1];
    let channel = |t: &T| shapes && t.data_type() == dt && t.dims() == [wd[0], wd[2]];
    let ok = matches!(dt, DataType::F16 | DataType::BF16)
        && weights.data_type() == DataType::I8
        && channel(w_scale)
        && w_offset.is_none_or(channel);
    if !ok {
        return Err(invalid_input(
            OP,
            format!(
                "needs F16/BF16 x [M, K], int8 weights [E, K, N], w_scale [E, N] and w_offset [E, N] (optional) in x's type; got x {}, weights {}, w_scale {}, w_offset {}",
                x.describe(),
                weights.describe(),
                w_scale.describe(),
                w_offset.map_or("none".into(), Operand::describe)
            ),
        ));
    }
    check_group_sizes(OP, group_sizes, wd[0])
}

/// One tensor as a single-tensor list.
fn list(t: &AscendTensor) -> AclResult<TensorListDesc<'static>> {
    TensorListDesc::new(t.ctx().bind(), vec![t.desc_owned()?])
}

/// Calls aclnnGroupedMatmulV4 along M with the quantisation parameters given
/// (`[scale, per_token, antiquant_scale, antiquant_offset]`) into the zero-filled `out`.
fn launch(
    op: &str,
    x: &AscendTensor,
    weights: &AscendTensor,
    params: [Option<&AscendTensor>; 4],
    group_sizes: &AscendTensor,
    out: &AscendTensor,
) -> AclResult<()> {
    let ctx = x.ctx();
    let (xs, ws, outs) = (list(x)?, list(weights)?, list(out)?);
    let lists: Vec<Option<TensorListDesc>> = params
        .iter()
        .map(|p| p.map(list).transpose())
        .collect::<AclResult<_>>()?;
    let group_list = group_list(group_sizes)?;
    let gl = group_list.desc()?;
    aclnn!(
        &**ctx,
        aclnnGroupedMatmulV4(
            &xs,
            &ws,
            Absent,
            &lists[0],
            Absent,
            &lists[2],
            &lists[3],
            &lists[1],
            &gl,
            Absent,
            Absent,
            Absent,
            SINGLE_TENSOR,
            SPLIT_M,
            GROUP_SIZES,
            NO_ACTIVATION,
            &outs,
            Absent,
            Absent
        )
    )
    .map_err(|e| {
        e.with_context(|| {
            format!(
                "{op}: aclnnGroupedMatmulV4 of {} and {} in {} groups",
                x.describe(),
                weights.describe(),
                group_sizes.layout.numel()
            )
        })
    })
}

/// A8W8 grouped matmul: `out[r] = (sum_k x[r, k] * w[e, k, n]) * w_scale[e, n] * x_scale[r]`
/// for the rows `r` of group `e` (grouped as in `grouped_matmul`), the sum exact in int32, the
/// scaling in f32, rounded once to `out` (F16 or BF16). For a BF16 out the operator takes a
/// BF16 weight scale (op doc, A8W8 table, ND weight): an f32 `w_scale` is rounded to bf16
/// first (a bf16 one is taken as is, no launch), and an F16 out takes it in f32.
/// Rows past `sum(group_sizes)` are zero.
pub fn grouped_matmul_quant(
    x: &AscendTensor,
    weights: &AscendTensor,
    w_scale: &AscendTensor,
    x_scale: Option<&AscendTensor>,
    group_sizes: &AscendTensor,
    out: DataType,
) -> AclResult<AscendTensor> {
    const OP: &str = "grouped_matmul_quant";
    check_grouped_matmul_quant(x, weights, w_scale, x_scale, group_sizes, out)?;
    let (rows, k, n) = (x.shape()[0], x.shape()[1], weights.shape()[2]);
    let y = zeros(x.ctx(), vec![rows, n], out)?;
    if y.layout.numel() == 0 || k == 0 {
        return Ok(y);
    }
    let scale_type = if out == DataType::BF16 {
        DataType::BF16
    } else {
        DataType::F32
    };
    let scale = contiguous(&cast(w_scale, scale_type)?)?;
    let x_scale = x_scale.map(contiguous).transpose()?;
    launch(
        OP,
        &contiguous(x)?,
        &contiguous(weights)?,
        [Some(&scale), x_scale.as_ref(), None, None],
        group_sizes,
        &y,
    )?;
    Ok(y)
}

/// A16W8 grouped matmul: `out[r] = x[r] @ ((w[e] + w_offset[e]) * w_scale[e])` for the rows `r`
/// of group `e`, the weight dequantised per output channel in x's type (each step rounded),
/// the product accumulated in f32 and rounded once to x's type. Rows past `sum(group_sizes)`
/// are zero.
pub fn grouped_matmul_antiquant(
    x: &AscendTensor,
    weights: &AscendTensor,
    w_scale: &AscendTensor,
    w_offset: Option<&AscendTensor>,
    group_sizes: &AscendTensor,
) -> AclResult<AscendTensor> {
    const OP: &str = "grouped_matmul_antiquant";
    check_grouped_matmul_antiquant(x, weights, w_scale, w_offset, group_sizes)?;
    let (rows, k, n) = (x.shape()[0], x.shape()[1], weights.shape()[2]);
    let y = zeros(x.ctx(), vec![rows, n], x.dtype)?;
    if y.layout.numel() == 0 || k == 0 {
        return Ok(y);
    }
    let scale = contiguous(w_scale)?;
    let offset = w_offset.map(contiguous).transpose()?;
    launch(
        OP,
        &contiguous(x)?,
        &contiguous(weights)?,
        [None, None, Some(&scale), offset.as_ref()],
        group_sizes,
        &y,
    )?;
    Ok(y)
}
