//! `layer_norm` and its backward through their kernels.

use burn_ascend_kernels::launch;
use burn_ascend_kernels::tiling;

use super::{data_ptr, device_props, norm_rows, norm_type, Operand};
use crate::acl::handles::HostScalar;
use crate::acl::{AclResult, DataType};
use crate::ops::broadcast::invalid_input;
use crate::ops::copy::{cast, contiguous};
use crate::ops::creation::{full, zeros};
use crate::ops::tensor::AscendTensor;

/// An optional per-column parameter, contiguous in x's dtype.
fn column_param(p: Option<&AscendTensor>, dtype: DataType) -> AclResult<Option<AscendTensor>> {
    p.map(|p| contiguous(&cast(p, dtype)?)).transpose()
}

/// Checks that `t` is `[len]` (a per-column parameter or a per-row statistic).
fn check_vector(op: &str, name: &str, t: Option<&impl Operand>, len: usize) -> AclResult<()> {
    match t {
        Some(t) if t.dims() != [len] => Err(invalid_input(
            op,
            format!("{name} must be [{len}], got {}", t.describe()),
        )),
        _ => Ok(()),
    }
}

/// The contract of [`layer_norm`]: float `x`, gamma and beta `[cols]`.
pub fn check_layer_norm<T: Operand>(x: &T, gamma: Option<&T>, beta: Option<&T>) -> AclResult<()> {
    let (_, cols) = norm_rows("layer_norm", "x", x)?;
    check_vector("layer_norm", "gamma", gamma, cols)?;
    check_vector("layer_norm", "beta", beta, cols)
}

/// The contract of [`layer_norm_backward`]: float `x`, `dy` of x's shape, mean and rstd
/// `[rows]`, gamma `[cols]`.
pub fn check_layer_norm_backward<T: Operand>(
    dy: &T,
    x: &T,
    mean: &T,
    rstd: &T,
    gamma: Option<&T>,
) -> AclResult<()> {
    const OP: &str = "layer_norm_backward";
    let (rows, cols) = norm_rows(OP, "x", x)?;
    check_vector(OP, "mean", Some(mean), rows)?;
    check_vector(OP, "rstd", Some(rstd), rows)?;
    if dy.dims() != x.dims() {
        return Err(invalid_input(
            OP,
            format!("dy {} must have x's shape {}", dy.describe(), x.describe()),
        ));
    }
    check_vector(OP, "gamma", gamma, cols)
}

/// Layer norm over the last dim of `x` by the `layer_norm` kernel: `(y, mean, rstd)`.
pub fn layer_norm(
    x: &AscendTensor,
    gamma: Option<&AscendTensor>,
    beta: Option<&AscendTensor>,
    eps: f64,
) -> AclResult<(AscendTensor, AscendTensor, AscendTensor)> {
    super::same_device("layer_norm", &[Some(x), gamma, beta])?;
    check_layer_norm(x, gamma, beta)?;
    let kind = norm_type("layer_norm", x)?;
    let (rows, cols) = norm_rows("layer_norm", "x", x)?;
    let gamma = column_param(gamma, x.dtype)?;
    let beta = column_param(beta, x.dtype)?;
    let x = contiguous(x)?;
    let ctx = x.ctx();
    let y = AscendTensor::empty(ctx, x.shape().to_vec(), x.dtype)?;
    if cols == 0 {
        // The mean and variance of no values: NaN, as the composed default and a mean
        // reduction give.
        let nan = || full(ctx, vec![rows], DataType::F32, HostScalar::Float(f64::NAN));
        return Ok((y, nan()?, nan()?));
    }
    let mean = AscendTensor::empty(ctx, vec![rows], DataType::F32)?;
    let rstd = AscendTensor::empty(ctx, vec![rows], DataType::F32)?;
    if rows == 0 {
        return Ok((y, mean, rstd));
    }
    let plan = tiling::layer_norm(
        rows as u64,
        cols as u64,
        kind,
        gamma.is_some(),
        beta.is_some(),
        eps as f32,
        &device_props(ctx)?,
    );
    let buffers = launch::LayerNormBuffers {
        x: data_ptr(&x),
        gamma: gamma.as_ref().map_or(std::ptr::null_mut(), data_ptr),
        beta: beta.as_ref().map_or(std::ptr::null_mut(), data_ptr),
        y: data_ptr(&y),
        mean: data_ptr(&mean),
        rstd: data_ptr(&rstd),
    };
    // SAFETY: every buffer holds what the tiling describes and outlives the kernel in stream order.
    ctx.launch_kernel("layer_norm", |kernels, stream| unsafe {
        kernels.layer_norm(stream, plan, buffers)
    })
    .map_err(|e| e.with_context(|| format!("layer_norm of {}", x.describe())))?;
    Ok((y, mean, rstd))
}

/// Gradients of [`layer_norm`] by the `layer_norm_backward` kernel: `(dx, dgamma, dbeta)` for
/// the output gradient `dy`, the input `x`, the forward's row statistics `mean` and `rstd`
/// (`[rows]`) and gamma if the forward had one. dgamma and dbeta are summed in f32 by every
/// block into zeroed buffers, then given x's type.
pub fn layer_norm_backward(
    dy: &AscendTensor,
    x: &AscendTensor,
    mean: &AscendTensor,
    rstd: &AscendTensor,
    gamma: Option<&AscendTensor>,
) -> AclResult<(AscendTensor, AscendTensor, AscendTensor)> {
    const OP: &str = "layer_norm_backward";
    super::same_device(OP, &[Some(dy), Some(x), Some(mean), Some(rstd), gamma])?;
    check_layer_norm_backward(dy, x, mean, rstd, gamma)?;
    let kind = norm_type(OP, x)?;
    let (rows, cols) = norm_rows(OP, "x", x)?;
    let stat = |t: &AscendTensor| contiguous(&cast(t, DataType::F32)?);
    let (mean, rstd) = (stat(mean)?, stat(rstd)?);
    let gamma = column_param(gamma, x.dtype)?;
    let (dy, x) = (contiguous(&cast(dy, x.dtype)?)?, contiguous(x)?);
    let ctx = x.ctx();
    let dx = AscendTensor::empty(ctx, x.shape().to_vec(), x.dtype)?;
    let dgamma = zeros(ctx, vec![cols], DataType::F32)?;
    let dbeta = zeros(ctx, vec![cols], DataType::F32)?;
    if rows > 0 && cols > 0 {
        let plan = tiling::layer_norm_backward(
            rows as u64,
            cols as u64,
            kind,
            gamma.is_some(),
            &device_props(ctx)?,
        );
        let buffers = launch::LayerNormBackwardBuffers {
            dy: data_ptr(&dy),
            x: data_ptr(&x),
            mean: data_ptr(&mean),
            rstd: data_ptr(&rstd),
            gamma: gamma.as_ref().map_or(std::ptr::null_mut(), data_ptr),
            dx: data_ptr(&dx),
            dgamma: data_ptr(&dgamma),
            dbeta: data_ptr(&dbeta),
        };
        // SAFETY: every buffer holds what the tiling describes and outlives the kernel in
        // stream order; dgamma and dbeta were zeroed before it on the same stream.
        ctx.launch_kernel(OP, |kernels, stream| unsafe {
            kernels.layer_norm_backward(stream, plan, buffers)
        })
        .map_err(|e| e.with_context(|| format!("{OP} of {}", x.describe())))?;
    }
    Ok((dx, cast(&dgamma, x.dtype)?, cast(&dbeta, x.dtype)?))
}
