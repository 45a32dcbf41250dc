//! The index checks of the fused kernels (and of grouped matmul's group sizes), run on the
//! device before the launch, for callers whose index tensors come from someone else
//! (burn-ascend-server's clients).
//!
//! The kernels check every index they read, and a bad one faults the device: a fault stops
//! every tensor and every caller of the device until it is reset. Here the same conditions are
//! computed on the device (aclnn comparisons and reductions: nothing is computed on the host),
//! their verdicts read back (one synchronisation, which waits for the work queued before), and
//! a failed one refuses the call before anything launches, naming the op, the condition and
//! the operands' shapes and dtypes. The cost is that wait, before each checked launch; callers
//! whose indices are their own (the serving engine) launch without it.
//!
//! Each function first checks the op's contract (shapes, dtypes), as the op itself does, and
//! passes when the op would launch no kernel.

use super::{
    check_decode_attention, check_grouped_matmul, check_moe_gather, check_moe_scatter, same_device,
    validation, DecodeAttentionOptions,
};
use crate::acl::handles::HostScalar;
use crate::acl::{AclResult, DataType};
use crate::ops::arith::{binary_scalar, BinaryOp};
use crate::ops::broadcast::invalid_input;
use crate::ops::compare::{compare, compare_scalar, logical, logical_not, Compare, Logical};
use crate::ops::copy::{cast, cat, slice, DimSlice};
use crate::ops::creation::{ones, to_bytes};
use crate::ops::reduce::{reduce, scan, Reduce, Scan};
use crate::ops::sort::sort;
use crate::ops::tensor::AscendTensor;

/// What [`super::moe_gather`]'s kernel checks of `indices`: every index within `[0, T*K)`
/// (and, under `BURN_ASCEND_VALIDATE=1`, a permutation of `0..T*K`).
pub fn moe_gather(x: &AscendTensor, indices: &AscendTensor, top_k: usize) -> AclResult<()> {
    const OP: &str = "moe_gather";
    same_device(OP, &[Some(x), Some(indices)])?;
    check_moe_gather(x, indices, top_k)?;
    let slots = x.shape()[0] * top_k;
    if slots * x.shape()[1] == 0 {
        return Ok(());
    }
    let operands = || format!("x {}, indices {}", x.describe(), indices.describe());
    let condition = if validation(OP)? {
        Condition::new(
            is_permutation(indices)?,
            format!("indices must be a permutation of 0..{slots} (BURN_ASCEND_VALIDATE=1)"),
        )
    } else {
        Condition::new(
            within(indices, 0, slots as i64)?,
            format!("every index must be within [0, {slots}) (T*K)"),
        )
    };
    require(OP, operands, vec![condition])
}

/// What [`super::moe_scatter`]'s kernels check of `indices`: a permutation of `0..T*K` (a
/// repeated index leaves another slot without a source row).
pub fn moe_scatter(
    y: &AscendTensor,
    indices: &AscendTensor,
    weights: Option<&AscendTensor>,
    top_k: usize,
) -> AclResult<()> {
    same_device("moe_scatter", &[Some(y), Some(indices), weights])?;
    check_moe_scatter(y, indices, weights, top_k)?;
    let (slots, cols) = (y.shape()[0], y.shape()[1]);
    if slots * cols == 0 {
        return Ok(());
    }
    let operands = || format!("y {}, indices {}", y.describe(), indices.describe());
    let condition = Condition::new(
        is_permutation(indices)?,
        format!("indices must be a permutation of 0..{slots} (T*K)"),
    );
    require("moe_scatter", operands, vec![condition])
}

/// What [`super::decode_attention`]'s kernels check of the index operands: `kv_indptr` within
/// the entries of `kv_indices` and strictly increasing (every request has a key), each
/// `num_kv_splits` within `1..=max_kv_splits`, and every entry of `kv_indices` a request reads
/// (those from `kv_indptr[0]` to `kv_indptr[B]`) a row of the caches.
pub fn decode_attention(
    q: &AscendTensor,
    k_cache: &AscendTensor,
    v_cache: Option<&AscendTensor>,
    kv_indptr: &AscendTensor,
    kv_indices: &AscendTensor,
    num_kv_splits: &AscendTensor,
    options: &DecodeAttentionOptions,
) -> AclResult<()> {
    same_device(
        "decode_attention",
        &[
            Some(q),
            Some(k_cache),
            v_cache,
            Some(kv_indptr),
            Some(kv_indices),
            Some(num_kv_splits),
        ],
    )?;
    let dims = check_decode_attention(
        q,
        k_cache,
        v_cache,
        kv_indptr,
        kv_indices,
        num_kv_splits,
        options,
    )?;
    if dims.batch == 0 || dims.q_heads == 0 {
        return Ok(());
    }
    let (batch, keys, slots) = (dims.batch, dims.keys, dims.slots);
    let operands = || {
        format!(
            "kv_indptr {}, kv_indices {}, num_kv_splits {}, k_cache {}",
            kv_indptr.describe(),
            kv_indices.describe(),
            num_kv_splits.describe(),
            k_cache.describe()
        )
    };
    let part = |from: usize, to: usize| {
        slice(
            kv_indptr,
            &[DimSlice {
                start: from,
                end: to,
                step: 1,
            }],
        )
    };
    let mut conditions = vec![
        Condition::new(
            within(kv_indptr, 0, keys as i64 + 1)?,
            format!("every kv_indptr entry must be within [0, {keys}] (the entries of kv_indices)"),
        ),
        Condition::new(
            all(&compare(
                Compare::Gt,
                &part(1, batch + 1)?,
                &part(0, batch)?,
            )?)?,
            "kv_indptr must increase strictly (every request attends to at least one key)".into(),
        ),
        Condition::new(
            within(num_kv_splits, 1, options.max_kv_splits as i64 + 1)?,
            format!(
                "every num_kv_splits entry must be within [1, {}] (max_kv_splits)",
                options.max_kv_splits
            ),
        ),
    ];
    if keys > 0 {
        let at = positions(kv_indices)?;
        let read = logical(
            Logical::And,
            &compare(Compare::Ge, &at, &part(0, 1)?)?,
            &compare(Compare::Lt, &at, &part(batch, batch + 1)?)?,
        )?;
        let slot = each_within(kv_indices, 0, slots as i64)?;
        conditions.push(Condition::new(
            all(&logical(Logical::Or, &logical_not(&read)?, &slot)?)?,
            format!(
                "every kv_indices entry a request reads must be a cache slot within [0, {slots})"
            ),
        ));
    }
    require("decode_attention", operands, conditions)
}

/// What [`super::grouped_matmul`]'s operator checks of `group_sizes`: no size below 0, and
/// all of them together at most the rows of `x`.
pub fn grouped_matmul(
    x: &AscendTensor,
    weights: &AscendTensor,
    group_sizes: &AscendTensor,
) -> AclResult<()> {
    group_conditions("grouped_matmul", x, weights, group_sizes, false)
}

/// What [`super::grouped_matmul_covered`] relies on: [`grouped_matmul`]'s conditions, and the
/// sizes adding up to exactly the rows of `x` (a smaller total would leave rows unwritten).
pub fn grouped_matmul_covered(
    x: &AscendTensor,
    weights: &AscendTensor,
    group_sizes: &AscendTensor,
) -> AclResult<()> {
    group_conditions("grouped_matmul_covered", x, weights, group_sizes, true)
}

/// The conditions of the grouped matmuls' group sizes, the total `exact` or at most R.
fn group_conditions(
    op: &str,
    x: &AscendTensor,
    weights: &AscendTensor,
    group_sizes: &AscendTensor,
    exact: bool,
) -> AclResult<()> {
    same_device(op, &[Some(x), Some(weights), Some(group_sizes)])?;
    check_grouped_matmul(x, weights, group_sizes)?;
    let (rows, k) = (x.shape()[0], x.shape()[1]);
    let (groups, n) = (weights.shape()[0], weights.shape()[2]);
    if rows * n == 0 || k == 0 || groups == 0 {
        return Ok(());
    }
    let operands = || {
        format!(
            "x {}, weights {}, group_sizes {}",
            x.describe(),
            weights.describe(),
            group_sizes.describe()
        )
    };
    // In int64, as the operator reads them; no size above R keeps the sum from overflowing.
    let sizes = cast(group_sizes, DataType::I64)?;
    let rows = rows as i64;
    let (total, bound) = match exact {
        true => (Compare::Eq, "exactly"),
        false => (Compare::Le, "at most"),
    };
    let conditions = vec![
        Condition::new(
            all(&logical(
                Logical::And,
                &compare_scalar(Compare::Ge, &sizes, HostScalar::Int(0))?,
                &compare_scalar(Compare::Le, &sizes, HostScalar::Int(rows))?,
            )?)?,
            format!("every group size must be within [0, {rows}] (the rows of x)"),
        ),
        Condition::new(
            compare_scalar(
                total,
                &reduce(Reduce::Sum, &sizes, None)?,
                HostScalar::Int(rows),
            )?,
            format!("the group sizes must add up to {bound} {rows} (the rows of x)"),
        ),
    ];
    require(op, operands, conditions)
}

/// A condition on index values: its verdict on the device (`[1]` bool) and what it demands.
struct Condition {
    verdict: AscendTensor,
    demands: String,
}

impl Condition {
    fn new(verdict: AscendTensor, demands: String) -> Self {
        Self { verdict, demands }
    }
}

/// Reads the verdicts (one synchronisation) and refuses `op`'s call, naming every condition
/// that failed. A fault the read finds (earlier work's) is reported as the context reports it
/// ([`crate::runtime::DeviceContext::recover`]).
fn require(op: &str, operands: impl Fn() -> String, conditions: Vec<Condition>) -> AclResult<()> {
    let verdicts: Vec<AscendTensor> = conditions.iter().map(|c| c.verdict.clone()).collect();
    let ctx = verdicts[0].ctx().clone();
    let read = cat(&verdicts, 0)
        .and_then(|v| to_bytes(&v))
        .map_err(|e| ctx.recover(e))?;
    let failed: Vec<&str> = conditions
        .iter()
        .zip(read)
        .filter(|&(_, verdict)| verdict == 0)
        .map(|(c, _)| c.demands.as_str())
        .collect();
    if failed.is_empty() {
        return Ok(());
    }
    Err(invalid_input(
        op,
        format!(
            "{} (checked on the device before launch: nothing ran); got {}",
            failed.join("; "),
            operands()
        ),
    ))
}

/// Whether every element of `t` is true, as a `[1]` bool.
fn all(t: &AscendTensor) -> AclResult<AscendTensor> {
    reduce(Reduce::All, t, None)
}

/// Whether every value of `t` lies in `[low, high)`.
fn within(t: &AscendTensor, low: i64, high: i64) -> AclResult<AscendTensor> {
    all(&each_within(t, low, high)?)
}

/// Whether each value of `t` (int32, as every index operand is) lies in `[low, high)`, with
/// `high > low`: compared as `<= high - 1`, which an int32 scalar holds whatever `high` is.
fn each_within(t: &AscendTensor, low: i64, high: i64) -> AclResult<AscendTensor> {
    let last = (high - 1).min(i32::MAX as i64);
    logical(
        Logical::And,
        &compare_scalar(Compare::Ge, t, HostScalar::Int(low))?,
        &compare_scalar(Compare::Le, t, HostScalar::Int(last))?,
    )
}

/// Whether `t [n]` holds a permutation of `0..n`: sorted, it is `0, 1, .., n - 1`.
fn is_permutation(t: &AscendTensor) -> AclResult<AscendTensor> {
    let (sorted, _) = sort(t, 0, false)?;
    all(&compare(Compare::Eq, &sorted, &positions(t)?)?)
}

/// `0, 1, .., n - 1` for `t [n]`, in `t`'s dtype (a running sum of ones).
fn positions(t: &AscendTensor) -> AclResult<AscendTensor> {
    let counts = scan(Scan::Sum, &ones(t.ctx(), t.shape().to_vec(), t.dtype)?, 0)?;
    binary_scalar(BinaryOp::Sub, &counts, HostScalar::Int(1))
}
