//! `layer_norm` and its backward through their kernels.

use burn_ascend_kernels::launch;
use burn_ascend_kernels::tiling;

use super::{data_ptr, device_props, norm_type};
use crate::acl::{AclResult, DataType};
use crate::ops::broadcast::invalid_input;
use crate::ops::copy::{cast, contiguous};
use crate::ops::creation::zeros;
use crate::ops::tensor::AscendTensor;

/// Checks an optional per-column parameter and makes it contiguous in x's dtype.
fn column_param(
    op: &str,
    name: &str,
    p: Option<&AscendTensor>,
    cols: usize,
    dtype: DataType,
) -> AclResult<Option<AscendTensor>> {
    p.map(|p| {
        if p.shape() != [cols] {
            return Err(invalid_input(
                op,
                format!("{name} must be [{cols}], got {}", p.describe()),
            ));
        }
        contiguous(&cast(p, dtype)?)
    })
    .transpose()
}

/// Layer norm over the last dim of `x` by the `layer_norm` kernel: `(y, mean, rstd)`.
pub fn layer_norm(
    x: &AscendTensor,
    gamma: Option<&AscendTensor>,
    beta: Option<&AscendTensor>,
    eps: f64,
) -> AclResult<(AscendTensor, AscendTensor, AscendTensor)> {
    super::same_device("layer_norm", &[Some(x), gamma, beta])?;
    let kind = norm_type("layer_norm", x)?;
    let cols = *x
        .shape()
        .last()
        .ok_or_else(|| invalid_input("layer_norm", "x must have at least one dim".into()))?;
    let rows = x.layout.numel() / cols.max(1);
    let gamma = column_param("layer_norm", "gamma", gamma, cols, x.dtype)?;
    let beta = column_param("layer_norm", "beta", beta, cols, x.dtype)?;
    let x = contiguous(x)?;
    let ctx = x.ctx();
    let y = AscendTensor::empty(ctx, x.shape().to_vec(), x.dtype)?;
    let mean = AscendTensor::empty(ctx, vec![rows], DataType::F32)?;
    let rstd = AscendTensor::empty(ctx, vec![rows], DataType::F32)?;
    if rows == 0 || cols == 0 {
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
    let kind = norm_type(OP, x)?;
    let cols = *x
        .shape()
        .last()
        .ok_or_else(|| invalid_input(OP, "x must have at least one dim".into()))?;
    let rows = x.layout.numel() / cols.max(1);
    let stat = |name: &str, t: &AscendTensor| {
        if t.shape() != [rows] {
            return Err(invalid_input(
                OP,
                format!("{name} must be [{rows}], got {}", t.describe()),
            ));
        }
        contiguous(&cast(t, DataType::F32)?)
    };
    let (mean, rstd) = (stat("mean", mean)?, stat("rstd", rstd)?);
    if dy.shape() != x.shape() {
        return Err(invalid_input(
            OP,
            format!("dy {} must have x's shape {}", dy.describe(), x.describe()),
        ));
    }
    let gamma = column_param(OP, "gamma", gamma, cols, x.dtype)?;
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
