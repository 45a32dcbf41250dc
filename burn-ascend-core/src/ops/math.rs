//! Elementwise math: Burn's unary float and integer ops, powers, remainder, atan2, clamps and
//! the cross product.
//!
//! Bridged gaps (Atlas A2): Cosh, Acos, Acosh, Asin, Asinh, Atanh and Erf have no BF16, and
//! Tanh has no F64: those run in F32 on the device and are cast back (F64 tanh is then only as
//! precise as F32). Trunc has no F64: `x < 0 ? ceil(x) : floor(x)`. Neg lacks I16/U8 and Sign
//! lacks I8/I16/U8: multiply by -1, or sign in I32. aclnnSign's result for NaN is undocumented,
//! so float sign keeps NaN explicitly (Burn's reference gives NaN). Integer remainder is
//! composed exactly (aclnn's is exact only within 2^24 for I32 and lacks I8/I16/U8).

use super::arith::{binary, binary_scalar, BinaryOp};
use super::compare::{compare_scalar, select, Compare};
use super::copy::cast;
use super::creation::full;
use super::tensor::AscendTensor;
use crate::acl::handles::{HostScalar, ScalarDesc};
use crate::acl::{AclResult, DataType};

/// A unary elementwise operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Unary {
    Neg,
    Recip,
    Exp,
    Log,
    Log1p,
    Sqrt,
    Abs,
    Cos,
    Sin,
    Tan,
    Cosh,
    Sinh,
    Tanh,
    Acos,
    Acosh,
    Asin,
    Asinh,
    Atan,
    Atanh,
    Round,
    Floor,
    Ceil,
    Trunc,
    Erf,
    Sign,
    BitwiseNot,
}

/// `op(x)`, with `x`'s dtype.
pub fn unary(op: Unary, x: &AscendTensor) -> AclResult<AscendTensor> {
    use DataType::*;
    use Unary::*;
    match (op, x.dtype) {
        (Cosh | Acos | Acosh | Asin | Asinh | Atanh | Erf, BF16) | (Tanh, F64) => {
            cast(&unary(op, &cast(x, F32)?)?, x.dtype)
        }
        (Trunc, F64) => {
            let negative = compare_scalar(Compare::Lt, x, HostScalar::Float(0.0))?;
            select(&negative, &unary(Ceil, x)?, &unary(Floor, x)?)
        }
        (Neg, I16 | U8) => binary_scalar(BinaryOp::Mul, x, HostScalar::Int(-1)),
        (Sign, I8 | I16 | U8) => cast(&unary(Sign, &cast(x, I32)?)?, x.dtype),
        (Sign, F64 | F32 | F16 | BF16) => {
            let nan = compare_scalar(Compare::IsNan, x, HostScalar::Float(0.0))?;
            select(&nan, x, &direct(Sign, x)?)
        }
        (Round | Floor | Ceil | Trunc, d) if !d.is_float() => Ok(x.clone()),
        _ => direct(op, x),
    }
}

/// One aclnn call, output of `x`'s dtype.
fn direct(op: Unary, x: &AscendTensor) -> AclResult<AscendTensor> {
    let out = AscendTensor::empty(x.ctx(), x.shape().to_vec(), x.dtype)?;
    if out.layout.numel() == 0 {
        return Ok(out);
    }
    let ctx = x.ctx();
    let (i, o) = (x.desc()?, out.desc()?);
    let (i, o) = (&i, &o);
    let what = x.describe();
    match op {
        Unary::Neg => run_op!(ctx, aclnnNeg(i, o), what),
        Unary::Recip => run_op!(ctx, aclnnReciprocal(i, o), what),
        Unary::Exp => run_op!(ctx, aclnnExp(i, o), what),
        Unary::Log => run_op!(ctx, aclnnLog(i, o), what),
        Unary::Log1p => run_op!(ctx, aclnnLog1p(i, o), what),
        Unary::Sqrt => run_op!(ctx, aclnnSqrt(i, o), what),
        Unary::Abs => run_op!(ctx, aclnnAbs(i, o), what),
        Unary::Cos => run_op!(ctx, aclnnCos(i, o), what),
        Unary::Sin => run_op!(ctx, aclnnSin(i, o), what),
        Unary::Tan => run_op!(ctx, aclnnTan(i, o), what),
        Unary::Cosh => run_op!(ctx, aclnnCosh(i, o), what),
        Unary::Sinh => run_op!(ctx, aclnnSinh(i, o), what),
        Unary::Tanh => run_op!(ctx, aclnnTanh(i, o), what),
        Unary::Acos => run_op!(ctx, aclnnAcos(i, o), what),
        Unary::Acosh => run_op!(ctx, aclnnAcosh(i, o), what),
        Unary::Asin => run_op!(ctx, aclnnAsin(i, o), what),
        Unary::Asinh => run_op!(ctx, aclnnAsinh(i, o), what),
        Unary::Atan => run_op!(ctx, aclnnAtan(i, o), what),
        Unary::Atanh => run_op!(ctx, aclnnAtanh(i, o), what),
        Unary::Round => run_op!(ctx, aclnnRound(i, o), what),
        Unary::Floor => run_op!(ctx, aclnnFloor(i, o), what),
        Unary::Ceil => run_op!(ctx, aclnnCeil(i, o), what),
        Unary::Trunc => run_op!(ctx, aclnnTrunc(i, o), what),
        Unary::Erf => run_op!(ctx, aclnnErf(i, o), what),
        Unary::Sign => run_op!(ctx, aclnnSign(i, o), what),
        Unary::BitwiseNot => run_op!(ctx, aclnnBitwiseNot(i, o), what),
    }?;
    Ok(out)
}

/// `a ^ b` elementwise (float or integer), broadcasting.
pub fn pow(a: &AscendTensor, b: &AscendTensor) -> AclResult<AscendTensor> {
    let b = cast(b, a.dtype)?;
    let shape = super::broadcast::broadcast_shape("aclnnPowTensorTensor", a, &b)?;
    let out = AscendTensor::empty(a.ctx(), shape, a.dtype)?;
    if out.layout.numel() > 0 {
        let what = format!("{} and {}", a.describe(), b.describe());
        run_op!(
            a.ctx(),
            aclnnPowTensorTensor(a.desc()?, b.desc()?, out.desc()?),
            what
        )?;
    }
    Ok(out)
}

/// `a ^ s` for a host scalar exponent.
pub fn pow_scalar(a: &AscendTensor, s: HostScalar) -> AclResult<AscendTensor> {
    let out = AscendTensor::empty(a.ctx(), a.shape().to_vec(), a.dtype)?;
    if out.layout.numel() > 0 {
        let e = ScalarDesc::new(a.ctx().bind(), s)?;
        run_op!(
            a.ctx(),
            aclnnPowTensorScalar(a.desc()?, &e, out.desc()?),
            a.describe()
        )?;
    }
    Ok(out)
}

/// `atan2(a, b)` elementwise.
pub fn atan2(a: &AscendTensor, b: &AscendTensor) -> AclResult<AscendTensor> {
    let b = cast(b, a.dtype)?;
    let shape = super::broadcast::broadcast_shape("aclnnAtan2", a, &b)?;
    let out = AscendTensor::empty(a.ctx(), shape, a.dtype)?;
    if out.layout.numel() > 0 {
        let what = format!("{} and {}", a.describe(), b.describe());
        run_op!(a.ctx(), aclnnAtan2(a.desc()?, b.desc()?, out.desc()?), what)?;
    }
    Ok(out)
}

/// Python-style remainder: the result has the sign of the divisor.
pub fn remainder(a: &AscendTensor, b: &AscendTensor) -> AclResult<AscendTensor> {
    let b = cast(b, a.dtype)?;
    if !a.dtype.is_float() {
        return int_remainder(a, &b);
    }
    let shape = super::broadcast::broadcast_shape("aclnnRemainderTensorTensor", a, &b)?;
    let out = AscendTensor::empty(a.ctx(), shape, a.dtype)?;
    if out.layout.numel() > 0 {
        let what = format!("{} and {}", a.describe(), b.describe());
        run_op!(
            a.ctx(),
            aclnnRemainderTensorTensor(a.desc()?, b.desc()?, out.desc()?),
            what
        )?;
    }
    Ok(out)
}

/// [`remainder`] by a host scalar.
pub fn remainder_scalar(a: &AscendTensor, s: HostScalar) -> AclResult<AscendTensor> {
    super::arith::check_int_divisor("aclnnRemainderTensorScalar", a, s)?;
    if !a.dtype.is_float() {
        return int_remainder(a, &full(a.ctx(), Vec::new(), a.dtype, s)?);
    }
    let out = AscendTensor::empty(a.ctx(), a.shape().to_vec(), a.dtype)?;
    if out.layout.numel() > 0 {
        let d = ScalarDesc::new(a.ctx().bind(), s)?;
        run_op!(
            a.ctx(),
            aclnnRemainderTensorScalar(a.desc()?, &d, out.desc()?),
            a.describe()
        )?;
    }
    Ok(out)
}

/// Exact integer remainder: `r = a - trunc(a / b) * b`, plus `b` where `r` and `b` differ in
/// sign.
fn int_remainder(a: &AscendTensor, b: &AscendTensor) -> AclResult<AscendTensor> {
    let q = binary(BinaryOp::Div, a, b)?;
    let r = binary(BinaryOp::Sub, a, &binary(BinaryOp::Mul, &q, b)?)?;
    let r_negative = compare_scalar(Compare::Lt, &r, HostScalar::Int(0))?;
    let b_negative = compare_scalar(Compare::Lt, b, HostScalar::Int(0))?;
    let signs_differ = super::compare::compare(Compare::Ne, &r_negative, &b_negative)?;
    let nonzero = compare_scalar(Compare::Ne, &r, HostScalar::Int(0))?;
    let fix = super::compare::logical(super::compare::Logical::And, &signs_differ, &nonzero)?;
    select(&fix, &binary(BinaryOp::Add, &r, b)?, &r)
}

/// Clamps to `[min, max]`; `None` leaves that side open.
pub fn clamp(
    x: &AscendTensor,
    min: Option<HostScalar>,
    max: Option<HostScalar>,
) -> AclResult<AscendTensor> {
    let out = AscendTensor::empty(x.ctx(), x.shape().to_vec(), x.dtype)?;
    if out.layout.numel() == 0 {
        return Ok(out);
    }
    let api = x.ctx().bind();
    let (xd, od) = (x.desc()?, out.desc()?);
    match (min, max) {
        (Some(lo), Some(hi)) => {
            let (lo, hi) = (ScalarDesc::new(api, lo)?, ScalarDesc::new(api, hi)?);
            run_op!(x.ctx(), aclnnClamp(&xd, &lo, &hi, &od), x.describe())
        }
        (Some(lo), None) => {
            let lo = ScalarDesc::new(api, lo)?;
            run_op!(x.ctx(), aclnnClampMin(&xd, &lo, &od), x.describe())
        }
        (None, Some(hi)) => {
            let hi = ScalarDesc::new(api, hi)?;
            run_op!(x.ctx(), aclnnClampMax(&xd, &hi, &od), x.describe())
        }
        (None, None) => super::copy::copy_into(&out, x),
    }?;
    Ok(out)
}

/// Elementwise maximum (`max`) or minimum of two tensors.
pub fn extreme(a: &AscendTensor, b: &AscendTensor, max: bool) -> AclResult<AscendTensor> {
    let b = cast(b, a.dtype)?;
    let shape = super::broadcast::broadcast_shape("aclnnMaximum", a, &b)?;
    let out = AscendTensor::empty(a.ctx(), shape, a.dtype)?;
    if out.layout.numel() > 0 {
        let what = format!("{} and {}", a.describe(), b.describe());
        let (ad, bd, od) = (a.desc()?, b.desc()?, out.desc()?);
        if max {
            run_op!(a.ctx(), aclnnMaximum(&ad, &bd, &od), what)?;
        } else {
            run_op!(a.ctx(), aclnnMinimum(&ad, &bd, &od), what)?;
        }
    }
    Ok(out)
}

/// The cross product along `dim` (of size 3).
pub fn cross(a: &AscendTensor, b: &AscendTensor, dim: usize) -> AclResult<AscendTensor> {
    let b = cast(b, a.dtype)?;
    let shape = super::broadcast::broadcast_shape("aclnnLinalgCross", a, &b)?;
    let out = AscendTensor::empty(a.ctx(), shape, a.dtype)?;
    if out.layout.numel() > 0 {
        let what = format!("{} and {} along dim {dim}", a.describe(), b.describe());
        run_op!(
            a.ctx(),
            aclnnLinalgCross(a.desc()?, b.desc()?, dim as i64, out.desc()?),
            what
        )?;
    }
    Ok(out)
}
