//! Emulated RMS normalisation: `aclnnRmsNorm`, `aclnnAddRmsNorm` and `aclnnRmsNormGrad`
//! (prototypes: `aclnn-quant-attention-norm.md`; semantics, dtypes and shapes: the ops-nn
//! operator docs `norm/rms_norm/docs/aclnnRmsNorm.md`, `norm/add_rms_norm/docs/aclnnAddRmsNorm.md`,
//! `norm/rms_norm_grad/docs/aclnnRmsNormGrad.md`, Atlas A2 rows).
//!
//! `gamma` spans the trailing dims of `x` (`gamma_shape = x_shape[n:]`); each of the leading
//! positions is one row, normalised by `rstd = 1 / sqrt(mean(x^2) + epsilon)`, and `rstd` has
//! x's shape with the normalised dims set to 1 (the op docs' example `(2, 3, 4, 8)` with gamma
//! `(4, 8)` gives `(2, 3, 1, 1)`). The kernels compute in f32 and round each output once
//! (`numerics`); a row's sum of squares accumulates in the ReduceSum order.
//!
//! Stricter readings taken where the docs leave room (UNCERTAIN):
//! - aclnnRmsNormGrad's doc gives `rstd_shape = x_shape[0:n]` while its sample passes `[2]` for
//!   x `[2, 1, 16]`; the emulation takes only the shape the forward ops produce (the keepdim
//!   form above), which is what torch_npu passes back.
//! - aclnnAddRmsNorm with a null `rstdOut` or `xOut` (the `[1, last]` gamma rows of its table)
//!   is not emulated: both outputs are required.
//! - `epsilon` must be finite and non-negative: documented for aclnnAddRmsNorm, taken for all
//!   three.
//! - aclnnAddRmsNorm normalises `x1 + x2` as stored in `xOut` (rounded to x1's dtype), so `y`
//!   is aclnnRmsNorm of `xOut`.
//! - The docs' "an Inf input gives Inf" is not modelled: an infinite element gives a NaN row,
//!   as the formula does.
#![allow(
    missing_docs,
    non_snake_case,
    clippy::missing_safety_doc,
    clippy::too_many_arguments
)]

use std::sync::Arc;

use super::fault::Fault;
use super::meta::{tensor_arg, Kernel, TensorDesc};
use super::numerics::{round_to, Arith, Blocked};
use super::ops::{check_dtype, invalid, phase1, phase2_entry_points, Ex, Ws, SCRATCH_WORKSPACE};
use super::view::{map, put_f32, take_f32, Walk};
use ascend_acl::dtype::DataType::{self, *};
use ascend_acl::types::*;

phase2_entry_points!(aclnnRmsNorm, aclnnAddRmsNorm, aclnnRmsNormGrad);

const FLOATS: &[DataType] = &[F32, F16, BF16];
/// The statistic's dtype (rstd in and out, dgamma).
const STAT: &[DataType] = &[F32];
/// Ranks every tensor of these ops may have (op docs: 1-8).
const MAX_RANK: usize = 8;

/// The A2 (x, gamma) pairs of aclnnRmsNorm and aclnnRmsNormGrad: gamma in x's dtype, or F32
/// for an F16/BF16 x.
fn check_pair(op: &str, x: &TensorDesc, gamma: &TensorDesc) -> Result<(), Fault> {
    if gamma.dtype == x.dtype || gamma.dtype == F32 {
        return Ok(());
    }
    Err(invalid(
        op,
        format!(
            "x {} with gamma {} is not a dtype pair Atlas A2 supports (gamma in x's dtype, or \
             FLOAT for a FLOAT16/BFLOAT16 x)",
            x.describe(),
            gamma.describe()
        ),
    ))
}

fn check_rank(op: &str, name: &str, t: &TensorDesc) -> Result<(), Fault> {
    if (1..=MAX_RANK).contains(&t.shape.len()) {
        Ok(())
    } else {
        Err(invalid(
            op,
            format!("{name} {} must have 1 to {MAX_RANK} dims", t.describe()),
        ))
    }
}

fn check_epsilon(op: &str, epsilon: f64) -> Result<(), Fault> {
    if epsilon.is_finite() && epsilon >= 0.0 {
        Ok(())
    } else {
        Err(invalid(
            op,
            format!("epsilon {epsilon} must be finite and >= 0"),
        ))
    }
}

fn check_shape(op: &str, name: &str, t: &TensorDesc, want: &[usize]) -> Result<(), Fault> {
    if t.shape == want {
        Ok(())
    } else {
        Err(invalid(
            op,
            format!("{name} {} must have shape {want:?}", t.describe()),
        ))
    }
}

/// The geometry of a call: the row length and the shape rstd must have. gamma must be x's
/// trailing dims, no more dims than x.
fn rows_of(op: &str, x: &TensorDesc, gamma: &TensorDesc) -> Result<Row, Fault> {
    check_rank(op, "x", x)?;
    check_rank(op, "gamma", gamma)?;
    let (rank, g) = (x.shape.len(), gamma.shape.len());
    if g > rank || x.shape[rank - g..] != gamma.shape[..] {
        return Err(invalid(
            op,
            format!(
                "gamma {} must be the trailing dims of x {}",
                gamma.describe(),
                x.describe()
            ),
        ));
    }
    let rstd = x.shape[..rank - g]
        .iter()
        .copied()
        .chain(std::iter::repeat_n(1, g))
        .collect();
    Ok(Row {
        cols: gamma.numel(),
        rstd,
    })
}

struct Row {
    /// Elements per row (gamma's).
    cols: usize,
    /// rstd's shape.
    rstd: Vec<usize>,
}

/// All of `t` as f32 in row-major order of its shape (exact for F32/F16/BF16).
fn read(op: &str, name: &str, t: &TensorDesc) -> Result<Vec<f32>, Fault> {
    if t.numel() == 0 {
        return Ok(Vec::new());
    }
    let m = map(op, name, t)?;
    let mut v = Vec::with_capacity(t.numel());
    take_f32(&mut v, &m, &mut Walk::of(t), t.numel());
    Ok(v)
}

/// Writes row-major f32 values to `t`, rounded once to its dtype.
fn write(op: &str, name: &str, t: &TensorDesc, v: &[f32]) -> Result<(), Fault> {
    if t.numel() == 0 {
        return Ok(());
    }
    let m = map(op, name, t)?;
    put_f32(&m, &mut Walk::of(t), v);
    Ok(())
}

/// `1 / sqrt(mean(row^2) + epsilon)` in f32; NaN for a row of no elements (0 / 0).
fn rstd_of(row: &[f32], epsilon: f32, sum: &mut Blocked<f32, Arith>) -> f32 {
    row.iter().for_each(|&v| sum.push(v * v));
    let mean = sum.finish() / row.len() as f32;
    1.0 / (mean + epsilon).sqrt()
}

/// The forward kernel: `y = x * rstd * gamma` per row; also writes `x` to `x_out` (AddRmsNorm).
fn forward(
    op: &'static str,
    inputs: Vec<TensorDesc>,
    gamma: TensorDesc,
    epsilon: f64,
    y: TensorDesc,
    rstd: TensorDesc,
    x_out: Option<TensorDesc>,
    cols: usize,
) -> Kernel {
    Arc::new(move || {
        let mut x = read(op, "x", &inputs[0])?;
        if let Some(x2) = inputs.get(1) {
            // The sum as xOut stores it (x1's dtype), which the norm then reads.
            let dtype = inputs[0].dtype;
            for (a, b) in x.iter_mut().zip(read(op, "x2", x2)?) {
                *a = round_to(dtype, (*a + b) as f64) as f32;
            }
        }
        let g = read(op, "gamma", &gamma)?;
        let eps = epsilon as f32;
        let mut sum = Blocked::new(Arith::Add);
        let mut stats = Vec::with_capacity(rstd.numel());
        let mut out = vec![0f32; x.len()];
        if cols == 0 {
            stats.resize(rstd.numel(), rstd_of(&[], eps, &mut sum));
        }
        // With no columns x is empty and there are no rows to walk.
        for (row, o) in x.chunks(cols.max(1)).zip(out.chunks_mut(cols.max(1))) {
            let r = rstd_of(row, eps, &mut sum);
            for ((o, &v), &g) in o.iter_mut().zip(row).zip(&g) {
                *o = v * r * g;
            }
            stats.push(r);
        }
        if let Some(x_out) = &x_out {
            write(op, "xOut", x_out, &x)?;
        }
        write(op, "rstdOut", &rstd, &stats)?;
        write(op, "yOut", &y, &out)
    })
}

pub unsafe extern "C" fn aclnnRmsNormGetWorkspaceSize(
    x: *const aclTensor,
    gamma: *const aclTensor,
    epsilon: f64,
    y_out: *const aclTensor,
    rstd_out: *const aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnRmsNorm";
    phase1(OP, ws, ex, || {
        let (x, gamma) = (tensor_arg(OP, "x", x)?, tensor_arg(OP, "gamma", gamma)?);
        let (y, rstd) = (
            tensor_arg(OP, "yOut", y_out)?,
            tensor_arg(OP, "rstdOut", rstd_out)?,
        );
        check_dtype(OP, "x", &x, FLOATS)?;
        check_dtype(OP, "gamma", &gamma, FLOATS)?;
        check_dtype(OP, "rstdOut", &rstd, STAT)?;
        check_pair(OP, &x, &gamma)?;
        check_epsilon(OP, epsilon)?;
        let row = rows_of(OP, &x, &gamma)?;
        check_shape(OP, "yOut", &y, &x.shape)?;
        check_shape(OP, "rstdOut", &rstd, &row.rstd)?;
        if y.dtype != x.dtype {
            return Err(invalid(
                OP,
                format!("yOut {} must have x's dtype {}", y.describe(), x.dtype),
            ));
        }
        Ok((
            SCRATCH_WORKSPACE,
            forward(OP, vec![x], gamma, epsilon, y, rstd, None, row.cols),
        ))
    })
}

pub unsafe extern "C" fn aclnnAddRmsNormGetWorkspaceSize(
    x1: *const aclTensor,
    x2: *const aclTensor,
    gamma: *const aclTensor,
    epsilon: f64,
    y_out: *const aclTensor,
    rstd_out: *const aclTensor,
    x_out: *const aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnAddRmsNorm";
    phase1(OP, ws, ex, || {
        let (x1, x2) = (tensor_arg(OP, "x1", x1)?, tensor_arg(OP, "x2", x2)?);
        let gamma = tensor_arg(OP, "gamma", gamma)?;
        let (y, rstd, x) = (
            tensor_arg(OP, "yOut", y_out)?,
            tensor_arg(OP, "rstdOut", rstd_out)?,
            tensor_arg(OP, "xOut", x_out)?,
        );
        check_dtype(OP, "x1", &x1, FLOATS)?;
        check_dtype(OP, "rstdOut", &rstd, STAT)?;
        // x2, gamma, yOut and xOut all take x1's dtype on A2.
        for (name, t) in [("x2", &x2), ("gamma", &gamma), ("yOut", &y), ("xOut", &x)] {
            if t.dtype != x1.dtype {
                return Err(invalid(
                    OP,
                    format!(
                        "{name} {} must have x1's dtype {} on Atlas A2",
                        t.describe(),
                        x1.dtype
                    ),
                ));
            }
        }
        check_epsilon(OP, epsilon)?;
        let row = rows_of(OP, &x1, &gamma)?;
        for (name, t) in [("x2", &x2), ("yOut", &y), ("xOut", &x)] {
            check_shape(OP, name, t, &x1.shape)?;
        }
        check_shape(OP, "rstdOut", &rstd, &row.rstd)?;
        Ok((
            SCRATCH_WORKSPACE,
            forward(OP, vec![x1, x2], gamma, epsilon, y, rstd, Some(x), row.cols),
        ))
    })
}

pub unsafe extern "C" fn aclnnRmsNormGradGetWorkspaceSize(
    dy: *const aclTensor,
    x: *const aclTensor,
    rstd: *const aclTensor,
    gamma: *const aclTensor,
    dx_out: *const aclTensor,
    dgamma_out: *const aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnRmsNormGrad";
    phase1(OP, ws, ex, || {
        let (dy, x) = (tensor_arg(OP, "dy", dy)?, tensor_arg(OP, "x", x)?);
        let (rstd, gamma) = (
            tensor_arg(OP, "rstd", rstd)?,
            tensor_arg(OP, "gamma", gamma)?,
        );
        let (dx, dgamma) = (
            tensor_arg(OP, "dxOut", dx_out)?,
            tensor_arg(OP, "dgammaOut", dgamma_out)?,
        );
        check_dtype(OP, "x", &x, FLOATS)?;
        check_dtype(OP, "gamma", &gamma, FLOATS)?;
        check_dtype(OP, "rstd", &rstd, STAT)?;
        check_dtype(OP, "dgammaOut", &dgamma, STAT)?;
        check_pair(OP, &x, &gamma)?;
        for (name, t) in [("dy", &dy), ("dxOut", &dx)] {
            if t.dtype != x.dtype {
                return Err(invalid(
                    OP,
                    format!("{name} {} must have x's dtype {}", t.describe(), x.dtype),
                ));
            }
        }
        let row = rows_of(OP, &x, &gamma)?;
        check_shape(OP, "dy", &dy, &x.shape)?;
        check_shape(OP, "dxOut", &dx, &x.shape)?;
        check_shape(OP, "rstd", &rstd, &row.rstd)?;
        check_shape(OP, "dgammaOut", &dgamma, &gamma.shape)?;
        let cols = row.cols;
        let kernel: Kernel = Arc::new(move || {
            let (dyv, xv) = (read(OP, "dy", &dy)?, read(OP, "x", &x)?);
            let (r, g) = (read(OP, "rstd", &rstd)?, read(OP, "gamma", &gamma)?);
            let mut dxv = vec![0f32; xv.len()];
            let mut dg = vec![0f32; cols];
            let mut sum = Blocked::new(Arith::Add);
            if cols > 0 {
                let rows = xv
                    .chunks(cols)
                    .zip(dyv.chunks(cols))
                    .zip(dxv.chunks_mut(cols));
                for (((xr, dyr), dxr), &r) in rows.zip(&r) {
                    // mean(dy * gamma * x * rstd) over the row.
                    for ((&x, &d), &g) in xr.iter().zip(dyr).zip(&g) {
                        sum.push(d * g * x * r);
                    }
                    let mean = sum.finish() / cols as f32;
                    for (i, ((&x, &d), o)) in xr.iter().zip(dyr).zip(dxr.iter_mut()).enumerate() {
                        *o = (d * g[i] - r * x * mean) * r;
                        // dgamma accumulates row after row (the deterministic order).
                        dg[i] += r * x * d;
                    }
                }
            }
            write(OP, "dgammaOut", &dgamma, &dg)?;
            write(OP, "dxOut", &dx, &dxv)
        });
        Ok((SCRATCH_WORKSPACE, kernel))
    })
}
