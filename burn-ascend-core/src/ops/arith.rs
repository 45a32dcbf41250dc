//! Elementwise arithmetic: Burn's binary ops onto aclnnAdd/Sub/Mul/Div and their scalar forms.
//!
//! Bridged semantics: integer division truncates in Burn, while aclnnDiv is true division, so
//! integer division uses aclnnDivMod in trunc mode. Integer scalars pass through f32 inside
//! aclnn's scalar ops, so integer scalars beyond 2^24 go through a 0-d device tensor instead.
//!
//! These are the hottest tiny ops, so they go through the executor cache (`aclnn_cached!`).

use super::broadcast::broadcast_shape;
use super::creation::full;
use super::tensor::AscendTensor;
use crate::acl::aclnn_cached;
use crate::acl::cache::{In, Out};
use crate::acl::handles::HostScalar;
use crate::acl::types::DIV_MODE_TRUNC;
use crate::acl::AclResult;

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
    let (x, y, o) = (In(a.view()), In(b.view()), Out(out.view()));
    let one = HostScalar::Int(1);
    let result = match op {
        BinaryOp::Add => aclnn_cached!(ctx, aclnnAdd(x, y, one, o)),
        BinaryOp::Sub => aclnn_cached!(ctx, aclnnSub(x, y, one, o)),
        BinaryOp::Mul => aclnn_cached!(ctx, aclnnMul(x, y, o)),
        BinaryOp::Div if a.dtype.is_float() => aclnn_cached!(ctx, aclnnDiv(x, y, o)),
        BinaryOp::Div => aclnn_cached!(ctx, aclnnDivMod(x, y, DIV_MODE_TRUNC, o)),
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

/// Integer division (and remainder) by a zero scalar: an error at the call, as in burn-flex
/// (which panics); CANN leaves the result undefined. A zero inside a divisor tensor is only
/// seen on the device: the emulated NPU reports it as an AI Core error (see its `kernels.rs`).
pub(crate) fn check_int_divisor(op: &str, a: &AscendTensor, s: HostScalar) -> AclResult<()> {
    if !a.dtype.is_float() && matches!(s, HostScalar::Int(0)) {
        return Err(super::broadcast::invalid_input(
            op,
            format!("integer division of {} by zero", a.describe()),
        ));
    }
    Ok(())
}

/// `a op s` for a host scalar `s`.
pub fn binary_scalar(op: BinaryOp, a: &AscendTensor, s: HostScalar) -> AclResult<AscendTensor> {
    if op == BinaryOp::Div {
        check_int_divisor(op_name(op, true), a, s)?;
    }
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
    let (x, o) = (In(a.view()), Out(out.view()));
    let one = HostScalar::Int(1);
    let result = match op {
        BinaryOp::Add => aclnn_cached!(ctx, aclnnAdds(x, s, one, o)),
        BinaryOp::Sub => aclnn_cached!(ctx, aclnnSubs(x, s, one, o)),
        BinaryOp::Mul => aclnn_cached!(ctx, aclnnMuls(x, s, o)),
        BinaryOp::Div if a.dtype.is_float() => aclnn_cached!(ctx, aclnnDivs(x, s, o)),
        BinaryOp::Div => aclnn_cached!(ctx, aclnnDivMods(x, s, DIV_MODE_TRUNC, o)),
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
