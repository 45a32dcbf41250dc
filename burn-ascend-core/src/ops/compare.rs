//! Comparisons, logical and bitwise ops, shifts, and selection (`where`, masked fill).
//!
//! Bridged gaps: there is no aclnnIsNan (x != x instead); aclnnLeftShift is not in CANN 8.x
//! (x * 2^s); aclnnRightShift is newer than 8.1.RC1 (floor division by 2^s where it is missing);
//! there is no scalar right shift (a 0-d device tensor holds the shift); aclnnInplaceMaskedFillScalar lacks F64, I16 and U8 on
//! Atlas A2 (a select against a 0-d tensor instead).

use super::broadcast::broadcast_shape;
use super::copy::{cast, contiguous_copy};
use super::creation::full;
use super::tensor::AscendTensor;
use crate::acl::handles::{HostScalar, ScalarDesc};
use crate::acl::shape::broadcast_dims;
use crate::acl::types::DIV_MODE_FLOOR;
use crate::acl::{AclResult, DataType};

/// A comparison; `IsNan` ignores its second operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Compare {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    IsNan,
}

/// A logical or bitwise binary operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Logical {
    And,
    Or,
    Xor,
}

/// `a op b` elementwise, broadcasting, as a bool tensor.
pub fn compare(op: Compare, a: &AscendTensor, b: &AscendTensor) -> AclResult<AscendTensor> {
    let b = if op == Compare::IsNan {
        a.clone()
    } else {
        cast(b, a.dtype)?
    };
    let shape = broadcast_shape("compare", a, &b)?;
    let out = AscendTensor::empty(a.ctx(), shape, DataType::Bool)?;
    if out.layout.numel() == 0 {
        return Ok(out);
    }
    let (x, y, o) = (a.desc()?, b.desc()?, out.desc()?);
    let (x, y, o) = (&x, &y, &o);
    let what = format!("{} and {}", a.describe(), b.describe());
    let ctx = a.ctx();
    match op {
        Compare::Eq => run_op!(ctx, aclnnEqTensor(x, y, o), what),
        Compare::Ne | Compare::IsNan => run_op!(ctx, aclnnNeTensor(x, y, o), what),
        Compare::Gt => run_op!(ctx, aclnnGtTensor(x, y, o), what),
        Compare::Ge => run_op!(ctx, aclnnGeTensor(x, y, o), what),
        Compare::Lt => run_op!(ctx, aclnnLtTensor(x, y, o), what),
        Compare::Le => run_op!(ctx, aclnnLeTensor(x, y, o), what),
    }?;
    Ok(out)
}

/// `a op s` for a host scalar, as a bool tensor.
pub fn compare_scalar(op: Compare, a: &AscendTensor, s: HostScalar) -> AclResult<AscendTensor> {
    if op == Compare::IsNan {
        return compare(op, a, a);
    }
    let out = AscendTensor::empty(a.ctx(), a.shape().to_vec(), DataType::Bool)?;
    if out.layout.numel() == 0 {
        return Ok(out);
    }
    let sd = ScalarDesc::new(a.ctx().bind(), s)?;
    let (x, o) = (a.desc()?, out.desc()?);
    let (x, v, o) = (&x, &sd, &o);
    let what = format!("{} and {s:?}", a.describe());
    let ctx = a.ctx();
    match op {
        Compare::Eq => run_op!(ctx, aclnnEqScalar(x, v, o), what),
        Compare::Ne | Compare::IsNan => run_op!(ctx, aclnnNeScalar(x, v, o), what),
        Compare::Gt => run_op!(ctx, aclnnGtScalar(x, v, o), what),
        Compare::Ge => run_op!(ctx, aclnnGeScalar(x, v, o), what),
        Compare::Lt => run_op!(ctx, aclnnLtScalar(x, v, o), what),
        Compare::Le => run_op!(ctx, aclnnLeScalar(x, v, o), what),
    }?;
    Ok(out)
}

/// Logical and/or/xor of the truth values of `a` and `b`, as a bool tensor.
pub fn logical(op: Logical, a: &AscendTensor, b: &AscendTensor) -> AclResult<AscendTensor> {
    let shape = broadcast_shape("logical", a, b)?;
    let out = AscendTensor::empty(a.ctx(), shape, DataType::Bool)?;
    if out.layout.numel() == 0 {
        return Ok(out);
    }
    let (x, y, o) = (a.desc()?, b.desc()?, out.desc()?);
    let (x, y, o) = (&x, &y, &o);
    let what = format!("{} and {}", a.describe(), b.describe());
    match op {
        Logical::And => run_op!(a.ctx(), aclnnLogicalAnd(x, y, o), what),
        Logical::Or => run_op!(a.ctx(), aclnnLogicalOr(x, y, o), what),
        Logical::Xor => run_op!(a.ctx(), aclnnLogicalXor(x, y, o), what),
    }?;
    Ok(out)
}

/// Logical not, as a bool tensor.
pub fn logical_not(a: &AscendTensor) -> AclResult<AscendTensor> {
    let out = AscendTensor::empty(a.ctx(), a.shape().to_vec(), DataType::Bool)?;
    if out.layout.numel() > 0 {
        run_op!(
            a.ctx(),
            aclnnLogicalNot(a.desc()?, out.desc()?),
            a.describe()
        )?;
    }
    Ok(out)
}

/// Bitwise and/or/xor of two integer tensors, broadcasting.
pub fn bitwise(op: Logical, a: &AscendTensor, b: &AscendTensor) -> AclResult<AscendTensor> {
    let b = cast(b, a.dtype)?;
    let shape = broadcast_shape("bitwise", a, &b)?;
    let out = AscendTensor::empty(a.ctx(), shape, a.dtype)?;
    if out.layout.numel() == 0 {
        return Ok(out);
    }
    let (x, y, o) = (a.desc()?, b.desc()?, out.desc()?);
    let (x, y, o) = (&x, &y, &o);
    let what = format!("{} and {}", a.describe(), b.describe());
    match op {
        Logical::And => run_op!(a.ctx(), aclnnBitwiseAndTensor(x, y, o), what),
        Logical::Or => run_op!(a.ctx(), aclnnBitwiseOrTensor(x, y, o), what),
        Logical::Xor => run_op!(a.ctx(), aclnnBitwiseXorTensor(x, y, o), what),
    }?;
    Ok(out)
}

/// Bitwise and/or/xor with a host scalar.
pub fn bitwise_scalar(op: Logical, a: &AscendTensor, s: HostScalar) -> AclResult<AscendTensor> {
    let out = AscendTensor::empty(a.ctx(), a.shape().to_vec(), a.dtype)?;
    if out.layout.numel() == 0 {
        return Ok(out);
    }
    let sd = ScalarDesc::new(a.ctx().bind(), s)?;
    let (x, o) = (a.desc()?, out.desc()?);
    let (x, v, o) = (&x, &sd, &o);
    match op {
        Logical::And => run_op!(a.ctx(), aclnnBitwiseAndScalar(x, v, o), a.describe()),
        Logical::Or => run_op!(a.ctx(), aclnnBitwiseOrScalar(x, v, o), a.describe()),
        Logical::Xor => run_op!(a.ctx(), aclnnBitwiseXorScalar(x, v, o), a.describe()),
    }?;
    Ok(out)
}

/// `a >> s` (arithmetic for signed types), elementwise, as Burn's reference backends compute it:
/// in 64 bits with the shift amount modulo 64, then wrapped to the dtype.
///
/// aclnnRightShift is newer than CANN 8.1.RC1 (`ascend_acl::release`): on a release without it
/// the shift is `floor(a / 2^s)` through aclnnDivMod's floor mode, in two steps so that no
/// divisor reaches `2^(w-1)` (negative in a signed dtype of `w` bits): first `2^min(s, w-2)`,
/// then `2^min(rest, 2)`, past which every quotient is already 0 or -1.
pub fn shift_right(a: &AscendTensor, s: &AscendTensor) -> AclResult<AscendTensor> {
    let s = shift_amounts(a, s)?;
    let what = format!("{} by {}", a.describe(), s.describe());
    if ascend_acl::aclnn_exported!(a.ctx().bind(), aclnnRightShift).is_err() {
        let width = 8 * a.dtype.size() as i64;
        let first = super::math::clamp(&s, None, Some(HostScalar::Int(width - 2)))?;
        let rest = super::arith::binary(super::arith::BinaryOp::Sub, &s, &first)?;
        let rest = super::math::clamp(&rest, None, Some(HostScalar::Int(2)))?;
        let halved = floor_divide(a, &powers_of_two(&first)?, &what)?;
        return floor_divide(&halved, &powers_of_two(&rest)?, &what);
    }
    let shape = broadcast_shape("aclnnRightShift", a, &s)?;
    let out = AscendTensor::empty(a.ctx(), shape, a.dtype)?;
    if out.layout.numel() > 0 {
        run_op!(
            a.ctx(),
            aclnnRightShift(a.desc()?, s.desc()?, out.desc()?),
            what
        )?;
    }
    Ok(out)
}

/// The shift amounts in `a`'s dtype, modulo 64.
fn shift_amounts(a: &AscendTensor, s: &AscendTensor) -> AclResult<AscendTensor> {
    bitwise_scalar(Logical::And, &cast(s, a.dtype)?, HostScalar::Int(63))
}

/// `2^s` elementwise, in `s`'s dtype.
fn powers_of_two(s: &AscendTensor) -> AclResult<AscendTensor> {
    let two = full(s.ctx(), Vec::new(), s.dtype, HostScalar::Int(2))?;
    let two = two.with_layout(two.layout.expand(s.shape()).expect("a 0-d tensor expands"));
    super::math::pow(&two, s)
}

/// `floor(a / d)` for integers (aclnnDivMod, floor mode), broadcasting.
fn floor_divide(a: &AscendTensor, d: &AscendTensor, what: &str) -> AclResult<AscendTensor> {
    let shape = broadcast_shape("aclnnDivMod", a, d)?;
    let out = AscendTensor::empty(a.ctx(), shape, a.dtype)?;
    if out.layout.numel() > 0 {
        run_op!(
            a.ctx(),
            aclnnDivMod(a.desc()?, d.desc()?, DIV_MODE_FLOOR, out.desc()?),
            what
        )?;
    }
    Ok(out)
}

/// `a << s` as `a * 2^s`, wrapping (aclnnLeftShift is not in CANN 8.x); shift amounts modulo 64
/// as in [`shift_right`].
pub fn shift_left(a: &AscendTensor, s: &AscendTensor) -> AclResult<AscendTensor> {
    let factor = powers_of_two(&shift_amounts(a, s)?)?;
    super::arith::binary(super::arith::BinaryOp::Mul, a, &factor)
}

/// `cond ? a : b` elementwise, broadcasting all three; the result has `a`'s dtype.
pub fn select(cond: &AscendTensor, a: &AscendTensor, b: &AscendTensor) -> AclResult<AscendTensor> {
    let b = cast(b, a.dtype)?;
    let shape = broadcast_dims(cond.shape(), a.shape())
        .and_then(|s| broadcast_dims(&s, b.shape()))
        .ok_or_else(|| {
            super::broadcast::invalid_input(
                "aclnnSWhere",
                format!(
                    "{}, {} and {} do not broadcast",
                    cond.describe(),
                    a.describe(),
                    b.describe()
                ),
            )
        })?;
    let out = AscendTensor::empty(a.ctx(), shape, a.dtype)?;
    if out.layout.numel() > 0 {
        let what = format!("{} ? {} : {}", cond.describe(), a.describe(), b.describe());
        run_op!(
            a.ctx(),
            aclnnSWhere(cond.desc()?, a.desc()?, b.desc()?, out.desc()?),
            what
        )?;
    }
    Ok(out)
}

/// Dtypes aclnnInplaceMaskedFillScalar takes on Atlas A2.
const MASKED_FILL: [DataType; 7] = [
    DataType::Bool,
    DataType::I8,
    DataType::I32,
    DataType::I64,
    DataType::F32,
    DataType::F16,
    DataType::BF16,
];

/// A copy of `x` with `value` where `mask` is true.
pub fn mask_fill(
    x: &AscendTensor,
    mask: &AscendTensor,
    value: HostScalar,
) -> AclResult<AscendTensor> {
    if !MASKED_FILL.contains(&x.dtype) {
        let v = full(x.ctx(), Vec::new(), x.dtype, value)?;
        return select(mask, &v, x);
    }
    let out = contiguous_copy(x)?;
    if out.layout.numel() > 0 {
        let v = ScalarDesc::new(x.ctx().bind(), value)?;
        let what = format!("{} under {}", x.describe(), mask.describe());
        run_op!(
            x.ctx(),
            aclnnInplaceMaskedFillScalar(out.desc()?, mask.desc()?, &v),
            what
        )?;
    }
    Ok(out)
}
