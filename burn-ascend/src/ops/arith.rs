//! Elementwise arithmetic: Burn's binary ops onto aclnnAdd/Sub/Mul/Div and their scalar forms.
//!
//! Bridged semantics: integer division truncates in Burn, while aclnnDiv is true division, so
//! integer division uses aclnnDivMod in trunc mode. Integer scalars pass through f32 inside
//! aclnn's scalar ops, so integer scalars beyond 2^24 go through a 0-d device tensor instead.

use super::broadcast::broadcast_shape;
use super::creation::full;
use super::tensor::AscendTensor;
use crate::acl::handles::{HostScalar, ScalarDesc};
use crate::acl::types::DIV_MODE_TRUNC;
use crate::acl::AclResult;
use crate::aclnn;

/// An elementwise binary operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b`
    Mul,
    /// `a / b`; truncating for integer types.
    Div,
}

/// Largest integer magnitude an aclnn scalar operand carries exactly (it passes through f32).
const EXACT_SCALAR_INT: i64 = 1 << 24;

/// `a op b`, broadcasting; the result has `a`'s dtype.
pub fn binary(op: BinaryOp, a: &AscendTensor, b: &AscendTensor) -> AclResult<AscendTensor> {
    let shape = broadcast_shape(op_name(op, false), a, b)?;
    let b = super::copy::cast(b, a.dtype)?;
    let out = AscendTensor::empty(a.ctx(), shape, a.dtype)?;
    if out.layout.numel() == 0 {
        return Ok(out);
    }
    let ctx = &**a.ctx();
    let (da, db, dout) = (a.desc()?, b.desc()?, out.desc()?);
    let one = || ScalarDesc::new(ctx.bind(), HostScalar::Int(1));
    let result = match op {
        BinaryOp::Add => aclnn!(
            ctx,
            aclnnAdd(da.as_ptr(), db.as_ptr(), one()?.as_ptr(), dout.as_ptr())
        ),
        BinaryOp::Sub => aclnn!(
            ctx,
            aclnnSub(da.as_ptr(), db.as_ptr(), one()?.as_ptr(), dout.as_ptr())
        ),
        BinaryOp::Mul => aclnn!(ctx, aclnnMul(da.as_ptr(), db.as_ptr(), dout.as_ptr())),
        BinaryOp::Div if a.dtype.is_float() => {
            aclnn!(ctx, aclnnDiv(da.as_ptr(), db.as_ptr(), dout.as_ptr()))
        }
        BinaryOp::Div => aclnn!(
            ctx,
            aclnnDivMod(da.as_ptr(), db.as_ptr(), DIV_MODE_TRUNC, dout.as_ptr())
        ),
    };
    result.map_err(|e| {
        e.with_context(|| {
            format!(
                "{} of {} and {}",
                op_name(op, false),
                a.describe(),
                b.describe()
            )
        })
    })?;
    Ok(out)
}

/// `a op s` for a host scalar `s`.
pub fn binary_scalar(op: BinaryOp, a: &AscendTensor, s: HostScalar) -> AclResult<AscendTensor> {
    if let HostScalar::Int(v) = s {
        if !a.dtype.is_float() && v.unsigned_abs() > EXACT_SCALAR_INT as u64 {
            let rhs = full(a.ctx(), Vec::new(), a.dtype, s)?;
            return binary(op, a, &rhs);
        }
    }
    let out = AscendTensor::empty(a.ctx(), a.layout.shape.clone(), a.dtype)?;
    if out.layout.numel() == 0 {
        return Ok(out);
    }
    let ctx = &**a.ctx();
    let api = ctx.bind();
    let (da, dout) = (a.desc()?, out.desc()?);
    let other = ScalarDesc::new(api, s)?;
    let one = || ScalarDesc::new(api, HostScalar::Int(1));
    let result = match op {
        BinaryOp::Add => aclnn!(
            ctx,
            aclnnAdds(da.as_ptr(), other.as_ptr(), one()?.as_ptr(), dout.as_ptr())
        ),
        BinaryOp::Sub => aclnn!(
            ctx,
            aclnnSubs(da.as_ptr(), other.as_ptr(), one()?.as_ptr(), dout.as_ptr())
        ),
        BinaryOp::Mul => aclnn!(ctx, aclnnMuls(da.as_ptr(), other.as_ptr(), dout.as_ptr())),
        BinaryOp::Div if a.dtype.is_float() => {
            aclnn!(ctx, aclnnDivs(da.as_ptr(), other.as_ptr(), dout.as_ptr()))
        }
        BinaryOp::Div => aclnn!(
            ctx,
            aclnnDivMods(da.as_ptr(), other.as_ptr(), DIV_MODE_TRUNC, dout.as_ptr())
        ),
    };
    result.map_err(|e| {
        e.with_context(|| format!("{} of {} and {s:?}", op_name(op, true), a.describe()))
    })?;
    Ok(out)
}

fn op_name(op: BinaryOp, scalar: bool) -> &'static str {
    match (op, scalar) {
        (BinaryOp::Add, false) => "aclnnAdd",
        (BinaryOp::Add, true) => "aclnnAdds",
        (BinaryOp::Sub, false) => "aclnnSub",
        (BinaryOp::Sub, true) => "aclnnSubs",
        (BinaryOp::Mul, false) => "aclnnMul",
        (BinaryOp::Mul, true) => "aclnnMuls",
        (BinaryOp::Div, false) => "aclnnDiv",
        (BinaryOp::Div, true) => "aclnnDivs",
    }
}
