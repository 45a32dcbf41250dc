//! Rotary position embedding of q and k in one launch: aclnnRopeWithSinCosCache
//! (`aclnn-fused-decode-ops.md` §2.2), where a composition takes about a dozen per tensor (the
//! halves, the negation, two products, a sum, and the cos/sin rows broadcast to the heads).

use crate::acl::aclnn;
use crate::acl::handles::Absent;
use crate::acl::{AclResult, DataType};
use crate::ops::broadcast::invalid_input;
use crate::ops::copy::reshape_view;
use crate::ops::tensor::AscendTensor;

/// Whether `t`'s CANN exports aclnnRopeWithSinCosCache (8.1.RC1 on, `ascend_acl::release`).
pub fn rope_available(t: &AscendTensor) -> bool {
    ascend_acl::aclnn_exported!(t.ctx().bind(), aclnnRopeWithSinCosCache).is_ok()
}

/// The contract of [`rotary_embedding`]: float `q [T, Nq, D]` and `k [T, Nk, D]` of one dtype
/// and an even D, `cos_sin [P, D]` of their dtype, integer `rows [T]`.
pub fn check_rotary_embedding(
    q: &AscendTensor,
    k: &AscendTensor,
    cos_sin: &AscendTensor,
    rows: &AscendTensor,
) -> AclResult<()> {
    let (qs, ks, cs) = (q.shape(), k.shape(), cos_sin.shape());
    let fits = qs.len() == 3
        && ks.len() == 3
        && cs.len() == 2
        && rows.shape().len() == 1
        && qs[0] == ks[0]
        && qs[0] == rows.shape()[0]
        && qs[2] == ks[2]
        && qs[2] == cs[1]
        && qs[2] % 2 == 0
        && q.dtype.is_float()
        && k.dtype == q.dtype
        && cos_sin.dtype == q.dtype
        && matches!(rows.dtype, DataType::I32 | DataType::I64);
    if fits {
        return Ok(());
    }
    Err(invalid_input(
        "rotary_embedding",
        format!(
            "needs q [T, Nq, D] and k [T, Nk, D] of one float dtype (D even), cos_sin [P, D] of \
             their dtype and integer rows [T], got q {}, k {}, cos_sin {}, rows {}",
            q.describe(),
            k.describe(),
            cos_sin.describe(),
            rows.describe()
        ),
    ))
}

/// Whether the operator takes these operands (§2.2 and the op doc the emulation follows):
/// F16, BF16 or F32; the head dim a multiple of 32 (2-byte types) or 16 (F32); no empty input.
pub fn rope_fits(q: &AscendTensor, k: &AscendTensor) -> bool {
    let d = q.shape().last().copied().unwrap_or(0);
    let align = if q.dtype == DataType::F32 { 16 } else { 32 };
    matches!(q.dtype, DataType::F16 | DataType::BF16 | DataType::F32)
        && d % align == 0
        && q.layout.numel() > 0
        && k.layout.numel() > 0
}

/// `q` and `k` turned by rotary embedding: token `t` by the row `rows[t]` of `cos_sin`, which
/// holds the cosines of the `D / 2` angles then their sines. Rotate-half (GPT-NeoX) pairs dims
/// `(i, i + D/2)` (`x * [cos, cos] + [-x2, x1] * [sin, sin]`); `interleaved` (GPT-J) pairs
/// `(2i, 2i + 1)`, turned by angle `i`. One aclnnRopeWithSinCosCache (`isNeoxStyle` false for
/// GPT-J); the outputs are new contiguous tensors of q's and k's shapes.
pub fn rotary_embedding(
    q: &AscendTensor,
    k: &AscendTensor,
    cos_sin: &AscendTensor,
    rows: &AscendTensor,
    interleaved: bool,
) -> AclResult<(AscendTensor, AscendTensor)> {
    const OP: &str = "rotary_embedding";
    check_rotary_embedding(q, k, cos_sin, rows)?;
    let ([t, nq, d], nk) = ([q.shape()[0], q.shape()[1], q.shape()[2]], k.shape()[1]);
    let ctx = q.ctx();
    let rows = crate::ops::copy::cast(rows, DataType::I64)?;
    let (q2, k2) = (
        reshape_view(q, vec![t, nq * d])?,
        reshape_view(k, vec![t, nk * d])?,
    );
    let (qo, ko) = (
        AscendTensor::empty(ctx, vec![t, nq * d], q.dtype)?,
        AscendTensor::empty(ctx, vec![t, nk * d], q.dtype)?,
    );
    aclnn!(
        &**ctx,
        aclnnRopeWithSinCosCache(
            rows.desc()?,
            q2.desc()?,
            k2.desc()?,
            cos_sin.desc()?,
            Absent,
            d as i64,
            !interleaved,
            qo.desc()?,
            ko.desc()?
        )
    )
    .map_err(|e| {
        e.with_context(|| {
            format!(
                "{OP}: aclnnRopeWithSinCosCache of q {}, k {}, cos_sin {}",
                q.describe(),
                k.describe(),
                cos_sin.describe()
            )
        })
    })?;
    Ok((
        reshape_view(&qo, vec![t, nq, d])?,
        reshape_view(&ko, vec![t, nk, d])?,
    ))
}
