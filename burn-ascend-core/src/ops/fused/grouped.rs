//! Grouped matrix products through aclnnGroupedMatmulV4 (Atlas A2): the MoE expert products
//! (groups along M) and their weight gradients (groups along K). V4 is the first version that
//! takes group sizes (rather than running totals) in a device tensor; torch_npu uses it from
//! CANN 8.1: on a CANN without it ([`grouped_matmul_available`]) the backend runs the ops'
//! composed defaults (one masked product per expert) instead. The group sizes stay on the
//! device, where the operator reads them; nothing here reads them back.

use super::{norm_type, Operand};
use crate::acl::aclnn;
use crate::acl::handles::{Absent, TensorListDesc};
use crate::acl::{AclResult, DataType};
use crate::ops::broadcast::invalid_input;
use crate::ops::copy::{cast, contiguous};
use crate::ops::creation::zeros;
use crate::ops::tensor::AscendTensor;

/// groupType: groups along M (rows of x) or along K (columns of x, rows of the weight).
pub(super) const SPLIT_M: i64 = 0;
const SPLIT_K: i64 = 2;
/// splitItem: x, weight and out are one tensor each.
const SINGLE_TENSOR: i64 = 3;
/// groupListType: the group list holds the size of each group.
pub(super) const GROUP_SIZES: i64 = 1;
/// actType: no fused activation.
pub(super) const NO_ACTIVATION: i64 = 0;

/// The group sizes as the operator takes them: `[groups]`, INT64, contiguous.
pub(super) fn group_list(sizes: &AscendTensor) -> AclResult<AscendTensor> {
    contiguous(&cast(sizes, DataType::I64)?)
}

/// Checks the group sizes: `[groups]` integers.
pub(super) fn check_group_sizes(op: &str, sizes: &impl Operand, groups: usize) -> AclResult<()> {
    let dtype = sizes.data_type();
    if sizes.dims() != [groups] || dtype.is_float() || dtype == DataType::Bool {
        return Err(invalid_input(
            op,
            format!(
                "group_sizes must be [{groups}] integers, got {}",
                sizes.describe()
            ),
        ));
    }
    Ok(())
}

/// Checks that the two matrix operands share one of the cube unit's float types.
fn same_float(op: &str, a: &impl Operand, b: &impl Operand) -> AclResult<()> {
    norm_type(op, a)?;
    if a.data_type() != b.data_type() {
        return Err(invalid_input(
            op,
            format!(
                "operands differ in type: {} and {}",
                a.describe(),
                b.describe()
            ),
        ));
    }
    Ok(())
}

/// Calls the operator on single-tensor lists; the operator leaves what the groups do not cover
/// untouched (a caller zero-fills `out` first where that may be some of it).
fn launch(
    op: &str,
    x: &AscendTensor,
    weight: &AscendTensor,
    group_list: &AscendTensor,
    group_type: i64,
    out: &AscendTensor,
) -> AclResult<()> {
    let ctx = x.ctx();
    let api = ctx.bind();
    let xs = TensorListDesc::new(api, vec![x.desc_owned()?])?;
    let weights = TensorListDesc::new(api, vec![weight.desc_owned()?])?;
    let outs = TensorListDesc::new(api, vec![out.desc_owned()?])?;
    let list = group_list.desc()?;
    aclnn!(
        &**ctx,
        aclnnGroupedMatmulV4(
            &xs,
            &weights,
            Absent,
            Absent,
            Absent,
            Absent,
            Absent,
            Absent,
            &list,
            Absent,
            Absent,
            Absent,
            SINGLE_TENSOR,
            group_type,
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
                weight.describe(),
                group_list.layout.numel()
            )
        })
    })
}

/// Whether `t`'s CANN exports aclnnGroupedMatmulV4 (8.1.RC1 on, `ascend_acl::release`).
pub fn grouped_matmul_available(t: &AscendTensor) -> bool {
    ascend_acl::aclnn_exported!(t.ctx().bind(), aclnnGroupedMatmulV4).is_ok()
}

/// The contract of [`grouped_matmul`]: float `x [R, K]`, `weights [E, K, N]` of x's type,
/// `group_sizes [E]` integers.
pub fn check_grouped_matmul<T: Operand>(x: &T, weights: &T, group_sizes: &T) -> AclResult<()> {
    const OP: &str = "grouped_matmul";
    same_float(OP, x, weights)?;
    let (xd, wd) = (x.dims(), weights.dims());
    if xd.len() != 2 || wd.len() != 3 || xd[1] != wd[1] {
        return Err(invalid_input(
            OP,
            format!(
                "needs x [R, K] and weights [E, K, N], got {} and {}",
                x.describe(),
                weights.describe()
            ),
        ));
    }
    check_group_sizes(OP, group_sizes, wd[0])
}

/// The contract of [`grouped_matmul_weight_grad`]: float `x [R, K]`, `dy [R, N]` of x's type,
/// `group_sizes [E]` integers.
pub fn check_grouped_matmul_weight_grad<T: Operand>(
    x: &T,
    dy: &T,
    group_sizes: &T,
) -> AclResult<()> {
    const OP: &str = "grouped_matmul_weight_grad";
    same_float(OP, x, dy)?;
    let (xd, dd) = (x.dims(), dy.dims());
    if xd.len() != 2 || dd.len() != 2 || xd[0] != dd[0] {
        return Err(invalid_input(
            OP,
            format!(
                "needs x [R, K] and dy [R, N], got {} and {}",
                x.describe(),
                dy.describe()
            ),
        ));
    }
    let groups = group_sizes.dims().first().copied().unwrap_or(0);
    check_group_sizes(OP, group_sizes, groups)
}

/// `out [R, N]` with `out[r] = x[r] @ weights[e]` for the rows `r` of group `e`: the rows of
/// `x [R, K]` are grouped contiguously, expert `e` owning the next `group_sizes[e]` rows, and
/// `weights` is `[E, K, N]` (a view with its last two dims swapped is used as it lies). Rows
/// past `sum(group_sizes)` are zero.
pub fn grouped_matmul(
    x: &AscendTensor,
    weights: &AscendTensor,
    group_sizes: &AscendTensor,
) -> AclResult<AscendTensor> {
    product("grouped_matmul", x, weights, group_sizes, true)
}

/// [`grouped_matmul`] of rows the groups cover exactly (`sum(group_sizes) = R`, the rows of a
/// dropless routing such as [`super::moe_permute`]'s): the output is not zero-filled first,
/// one launch fewer. A smaller total leaves the rows past it unwritten (whatever the memory
/// held): [`super::preflight::grouped_matmul_covered`] refuses one.
pub fn grouped_matmul_covered(
    x: &AscendTensor,
    weights: &AscendTensor,
    group_sizes: &AscendTensor,
) -> AclResult<AscendTensor> {
    product("grouped_matmul_covered", x, weights, group_sizes, false)
}

/// The grouped product, its output zero-filled first if `fill`.
fn product(
    op: &str,
    x: &AscendTensor,
    weights: &AscendTensor,
    group_sizes: &AscendTensor,
    fill: bool,
) -> AclResult<AscendTensor> {
    check_grouped_matmul(x, weights, group_sizes)?;
    let (rows, k) = (x.shape()[0], x.shape()[1]);
    let (groups, n) = (weights.shape()[0], weights.shape()[2]);
    let list = group_list(group_sizes)?;
    let empty = rows * n == 0 || k == 0 || groups == 0;
    let out = match fill || empty {
        true => zeros(x.ctx(), vec![rows, n], x.dtype)?,
        false => AscendTensor::empty(x.ctx(), vec![rows, n], x.dtype)?,
    };
    if empty {
        return Ok(out);
    }
    let weights =
        if weights.layout.is_contiguous() || weights.layout.swap_dims(1, 2).is_contiguous() {
            weights.clone()
        } else {
            contiguous(weights)?
        };
    launch(op, &contiguous(x)?, &weights, &list, SPLIT_M, &out)?;
    Ok(out)
}

/// The weight gradient of [`grouped_matmul`]: `[E, K, N]` with `dw[e] = x_e^T @ dy_e`, where
/// `x_e` and `dy_e` are the rows of `x [R, K]` and `dy [R, N]` in group `e` (zero for an empty
/// group). The operator groups along K here: it takes x transposed.
pub fn grouped_matmul_weight_grad(
    x: &AscendTensor,
    dy: &AscendTensor,
    group_sizes: &AscendTensor,
) -> AclResult<AscendTensor> {
    const OP: &str = "grouped_matmul_weight_grad";
    check_grouped_matmul_weight_grad(x, dy, group_sizes)?;
    let (rows, k, n) = (x.shape()[0], x.shape()[1], dy.shape()[1]);
    let groups = group_sizes.shape()[0];
    let list = group_list(group_sizes)?;
    let out = zeros(x.ctx(), vec![groups, k, n], x.dtype)?;
    if out.layout.numel() == 0 || rows == 0 {
        return Ok(out);
    }
    let x = contiguous(x)?;
    let x_t = x.with_layout(x.layout.swap_dims(0, 1));
    launch(OP, &x_t, &contiguous(dy)?, &list, SPLIT_K, &out)?;
    Ok(out)
}
