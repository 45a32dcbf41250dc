//! RMS normalisation over the last dim through CANN's own operators: `aclnnRmsNorm`,
//! `aclnnAddRmsNorm` (the residual add fused in front) and `aclnnRmsNormGrad`
//! (`aclnn-quant-attention-norm.md`). The operators normalise over gamma's dims, the trailing
//! ones of x; here gamma is `[cols]` and x is given to them as `[rows, cols]` (a view of the
//! contiguous x, so any rank works, where the operators take at most 8 dims), their rstd as
//! `[rows, 1]` and returned as `[rows]` f32, as `layer_norm` returns its statistics.
//!
//! Gamma's dtype follows the operators' Atlas A2 tables: x's dtype, or f32 for an f16/bf16 x
//! (`rms_norm` and its backward); x1's dtype for `add_rms_norm`. A tensor without elements
//! never reaches an operator (what CANN does with one is not documented): its outputs are
//! empty, or, for rows without columns, rstd is NaN (the mean of no values, as the composed
//! default gives).

use super::{norm_rows, same_device, Operand};
use crate::acl::aclnn;
use crate::acl::handles::HostScalar;
use crate::acl::{AclResult, DataType};
use crate::ops::broadcast::invalid_input;
use crate::ops::copy::{contiguous, reshape};
use crate::ops::creation::{full, zeros};
use crate::ops::tensor::AscendTensor;

/// gamma must be `[cols]`, in x's dtype or (when `f32_ok`) f32.
fn check_gamma(
    op: &str,
    x: &impl Operand,
    gamma: &impl Operand,
    cols: usize,
    f32_ok: bool,
) -> AclResult<()> {
    let dtype = gamma.data_type();
    let ok_type = dtype == x.data_type() || (f32_ok && dtype == DataType::F32);
    if gamma.dims() != [cols] || !ok_type {
        let types = if f32_ok && x.data_type() != DataType::F32 {
            format!("{} or {}", x.data_type(), DataType::F32)
        } else {
            x.data_type().to_string()
        };
        return Err(invalid_input(
            op,
            format!(
                "gamma must be [{cols}] {types} for x {}, got {}",
                x.describe(),
                gamma.describe()
            ),
        ));
    }
    Ok(())
}

fn check_eps(op: &str, eps: f64) -> AclResult<()> {
    if eps.is_finite() && eps >= 0.0 {
        Ok(())
    } else {
        Err(invalid_input(
            op,
            format!("eps must be finite and >= 0, got {eps}"),
        ))
    }
}

/// `t` must have `x`'s shape and dtype.
fn check_like(op: &str, name: &str, t: &impl Operand, x: &impl Operand) -> AclResult<()> {
    if t.dims() != x.dims() || t.data_type() != x.data_type() {
        return Err(invalid_input(
            op,
            format!(
                "{name} must have x's shape and dtype {}, got {}",
                x.describe(),
                t.describe()
            ),
        ));
    }
    Ok(())
}

/// The contract of [`rms_norm`]: float `x`, gamma `[cols]` in x's dtype or f32, eps >= 0.
pub fn check_rms_norm<T: Operand>(x: &T, gamma: &T, eps: f64) -> AclResult<()> {
    const OP: &str = "rms_norm";
    let (_, cols) = norm_rows(OP, "x", x)?;
    check_gamma(OP, x, gamma, cols, true)?;
    check_eps(OP, eps)
}

/// The contract of [`add_rms_norm`]: float `x1`, `x2` of x1's shape and dtype, gamma `[cols]`
/// in x1's dtype, eps >= 0.
pub fn check_add_rms_norm<T: Operand>(x1: &T, x2: &T, gamma: &T, eps: f64) -> AclResult<()> {
    const OP: &str = "add_rms_norm";
    let (_, cols) = norm_rows(OP, "x1", x1)?;
    check_like(OP, "x2", x2, x1)?;
    check_gamma(OP, x1, gamma, cols, false)?;
    check_eps(OP, eps)
}

/// The contract of [`rms_norm_backward`]: float `x`, `dy` of x's shape and dtype, rstd
/// `[rows]` f32, gamma `[cols]` in x's dtype or f32.
pub fn check_rms_norm_backward<T: Operand>(dy: &T, x: &T, rstd: &T, gamma: &T) -> AclResult<()> {
    const OP: &str = "rms_norm_backward";
    let (rows, cols) = norm_rows(OP, "x", x)?;
    check_like(OP, "dy", dy, x)?;
    if rstd.dims() != [rows] || rstd.data_type() != DataType::F32 {
        return Err(invalid_input(
            OP,
            format!(
                "rstd must be [{rows}] {} for x {}, got {}",
                DataType::F32,
                x.describe(),
                rstd.describe()
            ),
        ));
    }
    check_gamma(OP, x, gamma, cols, true)
}

/// `t` as the operators see it: contiguous `[rows, cols]`.
fn as_rows(t: &AscendTensor, rows: usize, cols: usize) -> AclResult<AscendTensor> {
    reshape(&contiguous(t)?, vec![rows, cols])
}

/// The rstd of a call without elements: empty, or NaN for rows without columns.
fn empty_rstd(x: &AscendTensor, rows: usize) -> AclResult<AscendTensor> {
    full(
        x.ctx(),
        vec![rows],
        DataType::F32,
        HostScalar::Float(f64::NAN),
    )
}

/// RMS norm over the last dim of `x` by aclnnRmsNorm: `(y, rstd)` with `y = x * rstd * gamma`
/// (x's shape and dtype) and `rstd = 1 / sqrt(mean(x^2) + eps)` per row (`[rows]`, f32).
pub fn rms_norm(
    x: &AscendTensor,
    gamma: &AscendTensor,
    eps: f64,
) -> AclResult<(AscendTensor, AscendTensor)> {
    const OP: &str = "rms_norm";
    same_device(OP, &[Some(x), Some(gamma)])?;
    check_rms_norm(x, gamma, eps)?;
    let (rows, cols) = norm_rows(OP, "x", x)?;
    let ctx = x.ctx();
    let y = AscendTensor::empty(ctx, x.shape().to_vec(), x.dtype)?;
    if rows * cols == 0 {
        return Ok((y, empty_rstd(x, rows)?));
    }
    let rstd = AscendTensor::empty(ctx, vec![rows], DataType::F32)?;
    let (x2, gamma) = (as_rows(x, rows, cols)?, contiguous(gamma)?);
    let (y2, rstd2) = (
        reshape(&y, vec![rows, cols])?,
        reshape(&rstd, vec![rows, 1])?,
    );
    aclnn!(
        &**ctx,
        aclnnRmsNorm(x2.desc()?, gamma.desc()?, eps, y2.desc()?, rstd2.desc()?)
    )
    .map_err(|e| {
        e.with_context(|| {
            format!(
                "{OP}: aclnnRmsNorm of {} with gamma {}",
                x.describe(),
                gamma.describe()
            )
        })
    })?;
    Ok((y, rstd))
}

/// Residual add and RMS norm over the last dim by aclnnAddRmsNorm: `(y, rstd, x)` with
/// `x = x1 + x2` (x1's dtype), `y = x * rstd * gamma` and rstd per row (`[rows]`, f32).
pub fn add_rms_norm(
    x1: &AscendTensor,
    x2: &AscendTensor,
    gamma: &AscendTensor,
    eps: f64,
) -> AclResult<(AscendTensor, AscendTensor, AscendTensor)> {
    const OP: &str = "add_rms_norm";
    same_device(OP, &[Some(x1), Some(x2), Some(gamma)])?;
    check_add_rms_norm(x1, x2, gamma, eps)?;
    let (rows, cols) = norm_rows(OP, "x1", x1)?;
    let ctx = x1.ctx();
    let shape = x1.shape().to_vec();
    let y = AscendTensor::empty(ctx, shape.clone(), x1.dtype)?;
    let x = AscendTensor::empty(ctx, shape, x1.dtype)?;
    if rows * cols == 0 {
        return Ok((y, empty_rstd(x1, rows)?, x));
    }
    let rstd = AscendTensor::empty(ctx, vec![rows], DataType::F32)?;
    let (a, b) = (as_rows(x1, rows, cols)?, as_rows(x2, rows, cols)?);
    let gamma = contiguous(gamma)?;
    let (y2, x_2) = (
        reshape(&y, vec![rows, cols])?,
        reshape(&x, vec![rows, cols])?,
    );
    let rstd2 = reshape(&rstd, vec![rows, 1])?;
    aclnn!(
        &**ctx,
        aclnnAddRmsNorm(
            a.desc()?,
            b.desc()?,
            gamma.desc()?,
            eps,
            y2.desc()?,
            rstd2.desc()?,
            x_2.desc()?
        )
    )
    .map_err(|e| {
        e.with_context(|| {
            format!(
                "{OP}: aclnnAddRmsNorm of {} and {} with gamma {}",
                x1.describe(),
                x2.describe(),
                gamma.describe()
            )
        })
    })?;
    Ok((y, rstd, x))
}

/// Gradients of [`rms_norm`] by aclnnRmsNormGrad: `(dx, dgamma)` for the output gradient `dy`,
/// the input `x`, the forward's `rstd` (`[rows]`, f32) and gamma; dx in x's dtype, dgamma
/// `[cols]` f32 (summed over the rows).
pub fn rms_norm_backward(
    dy: &AscendTensor,
    x: &AscendTensor,
    rstd: &AscendTensor,
    gamma: &AscendTensor,
) -> AclResult<(AscendTensor, AscendTensor)> {
    const OP: &str = "rms_norm_backward";
    same_device(OP, &[Some(dy), Some(x), Some(rstd), Some(gamma)])?;
    check_rms_norm_backward(dy, x, rstd, gamma)?;
    let (rows, cols) = norm_rows(OP, "x", x)?;
    let ctx = x.ctx();
    let dx = AscendTensor::empty(ctx, x.shape().to_vec(), x.dtype)?;
    if rows * cols == 0 {
        // No element contributes to dgamma.
        return Ok((dx, zeros(ctx, vec![cols], DataType::F32)?));
    }
    let dgamma = AscendTensor::empty(ctx, vec![cols], DataType::F32)?;
    let (dy2, x2) = (as_rows(dy, rows, cols)?, as_rows(x, rows, cols)?);
    let rstd2 = reshape(&contiguous(rstd)?, vec![rows, 1])?;
    let gamma = contiguous(gamma)?;
    let dx2 = reshape(&dx, vec![rows, cols])?;
    aclnn!(
        &**ctx,
        aclnnRmsNormGrad(
            dy2.desc()?,
            x2.desc()?,
            rstd2.desc()?,
            gamma.desc()?,
            dx2.desc()?,
            dgamma.desc()?
        )
    )
    .map_err(|e| {
        e.with_context(|| {
            format!(
                "{OP}: aclnnRmsNormGrad of {} with gamma {}",
                x.describe(),
                gamma.describe()
            )
        })
    })?;
    Ok((dx, dgamma))
}
