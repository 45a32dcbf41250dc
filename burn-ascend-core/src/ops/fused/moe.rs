//! The MoE routing kernels: `moe_gather`, `moe_scatter` and `token_rearrange`.
//!
//! What invalid indices get (checked by the kernels on the device, reported at the next
//! synchronisation or read as an AI Core error naming the kernel and the bad value):
//! - `moe_gather`: an index outside `[0, T*K)` faults; that the indices form a permutation is
//!   checked only with `BURN_ASCEND_VALIDATE=1` (every block reads them all), otherwise a
//!   repeated index simply gathers its row twice.
//! - `moe_scatter`: an index outside `[0, T*K)` faults, and so does any set of indices that is
//!   not a permutation (a repeated value leaves another slot without a source row): always, at
//!   no extra traffic.
//! - `token_rearrange`: an index outside `[0, S)` faults; repeats are a valid gather.

use burn_ascend_kernels::launch;
use burn_ascend_kernels::tiling;

use super::{check_index, data_ptr, device_props, norm_type, same_device, validation, Operand};
use crate::acl::handles::HostScalar;
use crate::acl::{AclResult, DataType};
use crate::ops::broadcast::invalid_input;
use crate::ops::copy::{cast, contiguous};
use crate::ops::tensor::AscendTensor;

#[allow(clippy::too_many_arguments)]
fn row_gather(
    op: &'static str,
    which: launch::RowGather,
    x: &AscendTensor,
    indices: &AscendTensor,
    out_rows: usize,
    divisor: usize,
    validate: bool,
) -> AclResult<AscendTensor> {
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
        validate,
        &device_props(x.ctx())?,
    );
    let (px, pi, po) = (data_ptr(&x), data_ptr(indices), data_ptr(&out));
    // SAFETY: as in `vector_add`; the kernel checks every index before it reads x.
    x.ctx()
        .launch_kernel(op, |kernels, stream| unsafe {
            kernels.row_gather(stream, which, plan, px, pi, po)
        })
        .map_err(|e| {
            e.with_context(|| format!("{op} of {} by {}", x.describe(), indices.describe()))
        })?;
    Ok(out)
}

/// The rows the gathering kernels move: 2-D, of a 2- or 4-byte type.
fn check_rows(op: &str, x: &impl Operand) -> AclResult<()> {
    if x.dims().len() != 2 || !matches!(x.data_type().size(), 2 | 4) {
        return Err(invalid_input(
            op,
            format!("x must be 2-D f32, f16 or bf16, got {}", x.describe()),
        ));
    }
    Ok(())
}

/// The contract of [`moe_gather`]: `x [T, H]`, `indices [T*K]` int32, `K >= 1`.
pub fn check_moe_gather(x: &impl Operand, indices: &impl Operand, top_k: usize) -> AclResult<()> {
    if top_k == 0 {
        return Err(invalid_input(
            "moe_gather",
            "top_k must be at least 1".into(),
        ));
    }
    check_rows("moe_gather", x)?;
    let tokens = x.dims()[0];
    check_index("moe_gather", "indices", indices, tokens * top_k, false)
}

/// The contract of [`token_rearrange`]: `x [S, H]`, `perm [S]` int32 or int64.
pub fn check_token_rearrange(x: &impl Operand, perm: &impl Operand) -> AclResult<()> {
    check_rows("token_rearrange", x)?;
    check_index("token_rearrange", "perm", perm, x.dims()[0], true)
}

/// The contract of [`moe_scatter`]: `y [T*K, H]` float, `indices [T*K]` int32, `weights [T*K]`.
pub fn check_moe_scatter<T: Operand>(
    y: &T,
    indices: &T,
    weights: Option<&T>,
    top_k: usize,
) -> AclResult<()> {
    norm_type("moe_scatter", y)?;
    let dims = y.dims();
    if dims.len() != 2 || top_k == 0 || !dims[0].is_multiple_of(top_k) {
        return Err(invalid_input(
            "moe_scatter",
            format!(
                "y must be [T*K, H] with K = {top_k} >= 1, got {}",
                y.describe()
            ),
        ));
    }
    let slots = dims[0];
    check_index("moe_scatter", "indices", indices, slots, false)?;
    match weights {
        Some(w) if w.dims() != [slots] => Err(invalid_input(
            "moe_scatter",
            format!("weights must be [{slots}], got {}", w.describe()),
        )),
        _ => Ok(()),
    }
}

/// `out[i] = x[indices[i] / top_k]` by the `moe_gather` kernel. An index outside `[0, T*K)`
/// is an AI Core error naming it; with `BURN_ASCEND_VALIDATE=1` so is a repeated index.
pub fn moe_gather(
    x: &AscendTensor,
    indices: &AscendTensor,
    top_k: usize,
) -> AclResult<AscendTensor> {
    same_device("moe_gather", &[Some(x), Some(indices)])?;
    check_moe_gather(x, indices, top_k)?;
    let tokens = x.shape()[0];
    let indices = contiguous(indices)?;
    row_gather(
        "moe_gather",
        launch::RowGather::MoeGather,
        x,
        &indices,
        tokens * top_k,
        top_k,
        validation("moe_gather")?,
    )
}

/// `out[i] = x[perm[i]]` by the `token_rearrange` kernel. An index outside `[0, S)` is an AI
/// Core error naming it.
pub fn token_rearrange(x: &AscendTensor, perm: &AscendTensor) -> AclResult<AscendTensor> {
    same_device("token_rearrange", &[Some(x), Some(perm)])?;
    check_token_rearrange(x, perm)?;
    let rows = x.shape()[0];
    let perm = contiguous(perm)?;
    row_gather(
        "token_rearrange",
        launch::RowGather::TokenRearrange,
        x,
        &perm,
        rows,
        1,
        false,
    )
}

/// `out[t] = sum_k w(t*K + k) * y[inv[t*K + k]]` by the `moe_scatter` kernel, where the inverse
/// permutation `inv` is first built on the device by `moe_scatter_inverse` into a tensor of -1.
/// An index outside `[0, T*K)`, or indices that are not a permutation of `0..T*K`, are an AI
/// Core error naming the bad index or the slot no index reaches.
pub fn moe_scatter(
    y: &AscendTensor,
    indices: &AscendTensor,
    weights: Option<&AscendTensor>,
    top_k: usize,
) -> AclResult<AscendTensor> {
    same_device("moe_scatter", &[Some(y), Some(indices), weights])?;
    check_moe_scatter(y, indices, weights, top_k)?;
    let kind = norm_type("moe_scatter", y)?;
    let (slots, cols) = (y.shape()[0], y.shape()[1]);
    let tokens = slots / top_k;
    let indices = contiguous(indices)?;
    let weights = weights
        .map(|w| contiguous(&cast(w, y.dtype)?))
        .transpose()?;
    let y = contiguous(y)?;
    let ctx = y.ctx();
    let out = AscendTensor::empty(ctx, vec![tokens, cols], y.dtype)?;
    if out.layout.numel() == 0 {
        return Ok(out);
    }
    // -1 marks a slot no index reaches, which moe_scatter reports.
    let inv = crate::ops::creation::full(ctx, vec![slots], DataType::I32, HostScalar::Int(-1))?;
    let props = device_props(ctx)?;
    let inverse = tiling::moe_scatter_inverse(slots as u64, &props);
    let plan = tiling::moe_scatter(
        tokens as u64,
        top_k as u64,
        cols as u64,
        kind,
        weights.is_some(),
        &props,
    );
    let buffers = launch::MoeScatterBuffers {
        indices: data_ptr(&indices),
        inv: data_ptr(&inv),
        y: data_ptr(&y),
        weights: weights.as_ref().map_or(std::ptr::null_mut(), data_ptr),
        out: data_ptr(&out),
    };
    // SAFETY: as in `vector_add`; both kernels check every index before they use it.
    ctx.launch_kernel("moe_scatter", |kernels, stream| unsafe {
        kernels.moe_scatter(stream, inverse, plan, buffers)
    })
    .map_err(|e| {
        e.with_context(|| format!("moe_scatter of {} by {}", y.describe(), indices.describe()))
    })?;
    Ok(out)
}
