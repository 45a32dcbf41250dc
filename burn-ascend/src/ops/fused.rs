//! The fused operations on the device, through the Ascend C kernels of
//! `burn-ascend-kernels`: shape and dtype checks before launch, tiling from the device's
//! properties, then the launch on the context's stream.

use std::ffi::c_void;
use std::sync::Arc;

use burn_ascend_kernels::launch;
use burn_ascend_kernels::tiling::{self, AddType, DeviceProps, NormType};

use super::broadcast::invalid_input;
use super::copy::{cast, contiguous};
use super::tensor::AscendTensor;
use crate::acl::{AclResult, DataType};
use crate::runtime::DeviceContext;

/// Unified buffer per vector core on Atlas A2 (CANN 8.x has no query for it; see the hardware
/// fact sheet).
const UB_BYTES: u32 = 192 << 10;

fn device_props(ctx: &Arc<DeviceContext>) -> AclResult<DeviceProps> {
    Ok(DeviceProps {
        vector_cores: ctx.vector_cores()?,
        ub_bytes: UB_BYTES,
    })
}

/// Device address of the first element of a contiguous tensor.
fn data_ptr(t: &AscendTensor) -> *mut c_void {
    debug_assert!(t.layout.is_contiguous());
    // SAFETY: the offset stays inside the storage (the layout's invariant).
    unsafe { (t.storage_ptr() as *mut u8).add(t.layout.offset * t.dtype.size()) as *mut c_void }
}

fn add_type(dtype: DataType) -> Option<AddType> {
    match dtype {
        DataType::F32 => Some(AddType::F32),
        DataType::F16 => Some(AddType::F16),
        DataType::BF16 => Some(AddType::BF16),
        DataType::I32 => Some(AddType::I32),
        DataType::I16 => Some(AddType::I16),
        _ => None,
    }
}

/// `x + y` for 1-D tensors of equal length and dtype, by the `vector_add` kernel. The vector
/// unit has no f64, i64, i8 or u8 addition; those go to aclnnAdd.
pub fn vector_add(x: &AscendTensor, y: &AscendTensor) -> AclResult<AscendTensor> {
    if x.shape().len() != 1 || x.shape() != y.shape() || x.dtype != y.dtype {
        return Err(invalid_input(
            "vector_add",
            format!(
                "needs two 1-D tensors of equal length and dtype, got {} and {}",
                x.describe(),
                y.describe()
            ),
        ));
    }
    let Some(kind) = add_type(x.dtype) else {
        return super::arith::binary(super::arith::BinaryOp::Add, x, y);
    };
    let (x, y) = (contiguous(x)?, contiguous(y)?);
    let out = AscendTensor::empty(x.ctx(), x.shape().to_vec(), x.dtype)?;
    let len = x.layout.numel() as u64;
    if len == 0 {
        return Ok(out);
    }
    let plan = tiling::vector_add(len, kind, &device_props(x.ctx())?);
    let (px, py, pz) = (data_ptr(&x), data_ptr(&y), data_ptr(&out));
    // SAFETY: the three buffers hold `len` elements of the tiling's type and stay alive in
    // stream order until the kernel has run.
    x.ctx()
        .launch_kernel("vector_add", |stream| unsafe {
            launch::vector_add(stream, plan, px, py, pz)
        })
        .map_err(|e| {
            e.with_context(|| format!("vector_add of {} and {}", x.describe(), y.describe()))
        })?;
    Ok(out)
}

fn norm_type(op: &str, t: &AscendTensor) -> AclResult<NormType> {
    match t.dtype {
        DataType::F32 => Ok(NormType::F32),
        DataType::F16 => Ok(NormType::F16),
        DataType::BF16 => Ok(NormType::BF16),
        _ => Err(invalid_input(
            op,
            format!("takes f32, f16 or bf16, got {}", t.describe()),
        )),
    }
}

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
    ctx.launch_kernel("layer_norm", |stream| unsafe {
        launch::layer_norm(stream, plan, buffers)
    })
    .map_err(|e| e.with_context(|| format!("layer_norm of {}", x.describe())))?;
    Ok((y, mean, rstd))
}

/// Checks an index tensor: 1-D, `len` entries, int32 (or int64 when allowed).
fn index_tensor(
    op: &str,
    name: &str,
    t: &AscendTensor,
    len: usize,
    int64_ok: bool,
) -> AclResult<AscendTensor> {
    let ok_type = t.dtype == DataType::I32 || (int64_ok && t.dtype == DataType::I64);
    if t.shape() != [len] || !ok_type {
        let types = if int64_ok { "int32 or int64" } else { "int32" };
        return Err(invalid_input(
            op,
            format!("{name} must be [{len}] {types}, got {}", t.describe()),
        ));
    }
    contiguous(t)
}

fn row_gather(
    op: &'static str,
    which: launch::RowGather,
    x: &AscendTensor,
    indices: &AscendTensor,
    out_rows: usize,
    divisor: usize,
) -> AclResult<AscendTensor> {
    if x.shape().len() != 2 || !matches!(x.dtype.size(), 2 | 4) {
        return Err(invalid_input(
            op,
            format!("x must be 2-D f32, f16 or bf16, got {}", x.describe()),
        ));
    }
    let (src_rows, cols) = (x.shape()[0], x.shape()[1]);
    let x = contiguous(x)?;
    let out = AscendTensor::empty(x.ctx(), vec![out_rows, cols], x.dtype)?;
    if out.layout.numel() == 0 {
        return Ok(out);
    }
    let plan = tiling::row_gather(
        out_rows as u64,
        src_rows as u64,
        cols as u64,
        x.dtype.size() as u64,
        indices.dtype.size() as u64,
        divisor as u64,
        &device_props(x.ctx())?,
    );
    let (px, pi, po) = (data_ptr(&x), data_ptr(indices), data_ptr(&out));
    // SAFETY: as in `vector_add`; indices out of range fault on the device, never read past x.
    x.ctx()
        .launch_kernel(op, |stream| unsafe {
            launch::row_gather(stream, which, plan, px, pi, po)
        })
        .map_err(|e| {
            e.with_context(|| format!("{op} of {} by {}", x.describe(), indices.describe()))
        })?;
    Ok(out)
}

/// `out[i] = x[indices[i] / top_k]` by the `moe_gather` kernel.
pub fn moe_gather(
    x: &AscendTensor,
    indices: &AscendTensor,
    top_k: usize,
) -> AclResult<AscendTensor> {
    let tokens = x.shape().first().copied().unwrap_or(0);
    if top_k == 0 {
        return Err(invalid_input(
            "moe_gather",
            "top_k must be at least 1".into(),
        ));
    }
    let indices = index_tensor("moe_gather", "indices", indices, tokens * top_k, false)?;
    row_gather(
        "moe_gather",
        launch::RowGather::MoeGather,
        x,
        &indices,
        tokens * top_k,
        top_k,
    )
}

/// `out[i] = x[perm[i]]` by the `token_rearrange` kernel.
pub fn token_rearrange(x: &AscendTensor, perm: &AscendTensor) -> AclResult<AscendTensor> {
    let rows = x.shape().first().copied().unwrap_or(0);
    let perm = index_tensor("token_rearrange", "perm", perm, rows, true)?;
    row_gather(
        "token_rearrange",
        launch::RowGather::TokenRearrange,
        x,
        &perm,
        rows,
        1,
    )
}

/// `out[t] = sum_k w(t*K + k) * y[inv[t*K + k]]` by the `moe_scatter` kernel, where the inverse
/// permutation `inv` is first built on the device (aclnnScatter of `0..T*K` at `indices`).
pub fn moe_scatter(
    y: &AscendTensor,
    indices: &AscendTensor,
    weights: Option<&AscendTensor>,
    top_k: usize,
) -> AclResult<AscendTensor> {
    let kind = norm_type("moe_scatter", y)?;
    if y.shape().len() != 2 || top_k == 0 || !y.shape()[0].is_multiple_of(top_k) {
        return Err(invalid_input(
            "moe_scatter",
            format!(
                "y must be [T*K, H] with K = {top_k} >= 1, got {}",
                y.describe()
            ),
        ));
    }
    let (slots, cols) = (y.shape()[0], y.shape()[1]);
    let tokens = slots / top_k;
    let indices = index_tensor("moe_scatter", "indices", indices, slots, false)?;
    let weights = weights
        .map(|w| {
            if w.shape() != [slots] {
                return Err(invalid_input(
                    "moe_scatter",
                    format!("weights must be [{slots}], got {}", w.describe()),
                ));
            }
            contiguous(&cast(w, y.dtype)?)
        })
        .transpose()?;
    let y = contiguous(y)?;
    let ctx = y.ctx();
    let out = AscendTensor::empty(ctx, vec![tokens, cols], y.dtype)?;
    if out.layout.numel() == 0 {
        return Ok(out);
    }
    let positions: Vec<u8> = (0..slots as i32).flat_map(|i| i.to_le_bytes()).collect();
    let positions = super::creation::from_bytes(ctx, vec![slots], DataType::I32, &positions)?;
    let zeros = super::creation::zeros(ctx, vec![slots], DataType::I32)?;
    let inv = super::index::scatter(
        0,
        &zeros,
        &indices,
        &positions,
        super::index::ScatterReduce::Assign,
    )?;
    let plan = tiling::moe_scatter(
        tokens as u64,
        top_k as u64,
        cols as u64,
        kind,
        weights.is_some(),
        &device_props(ctx)?,
    );
    let (py, pi, po) = (data_ptr(&y), data_ptr(&inv), data_ptr(&out));
    let pw = weights.as_ref().map_or(std::ptr::null_mut(), data_ptr);
    // SAFETY: as in `vector_add`.
    ctx.launch_kernel("moe_scatter", |stream| unsafe {
        launch::moe_scatter(stream, plan, py, pi, pw, po)
    })
    .map_err(|e| e.with_context(|| format!("moe_scatter of {}", y.describe())))?;
    Ok(out)
}
