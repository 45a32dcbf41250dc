//! Emulated RMS normalisation: `aclnnRmsNorm`, `aclnnAddRmsNorm` and `aclnnRmsNormGrad`
//! (prototypes: `aclnn-quant-attention-norm.md`; semantics, dtypes and shapes: the hicann/ops-nn
//! operator docs `norm/rms_norm/docs/aclnnRmsNorm.md`, `norm/add_rms_norm/docs/aclnnAddRmsNorm.md`,
//! `norm/rms_norm_grad/docs/aclnnRmsNormGrad.md`, Atlas A2 rows).
//!
//! `gamma` spans the trailing dims of `x` (`gamma_shape = x_shape[n:]`); each of the leading
//! positions is one row, normalised by `rstd = 1 / sqrt(mean(x^2) + epsilon)`, and `rstd` has
//! x's shape with the normalised dims set to 1 (the op docs' example `(2, 3, 4, 8)` with gamma
//! `(4, 8)` gives `(2, 3, 1, 1)`). The kernels compute in f32 and round each output once
//! (`numerics`); a row's sum of squares accumulates in the ReduceSum order. They stream a row at
//! a time, so the host holds a few rows and gamma.
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
//! - The docs' "an Inf input gives Inf" is not modelled: an infinite element makes the row's
//!   rstd 0, so it becomes NaN and the row's other outputs 0, as the formula gives.
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
use super::view::{map, put_f32, take_f32, Mapped, Walk};
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

/// The inputs of a kernel mapped, each made independent of every output it overlaps other
/// than at the very elements the kernel writes after reading them (`detach_from`), so the kernel
/// may stream row by row.
fn map_inputs(
    op: &str,
    inputs: &[(&str, &TensorDesc)],
    outputs: &[&Mapped],
) -> Result<Vec<Mapped>, Fault> {
    inputs
        .iter()
        .map(|&(name, t)| {
            let mut m = map(op, name, t)?;
            outputs.iter().for_each(|o| m.detach_from(o, true));
            Ok(m)
        })
        .collect()
}

/// A mapped view and its row-major walk, read or written a row at a time.
struct Rows<'a> {
    m: &'a Mapped,
    walk: Walk,
}

impl<'a> Rows<'a> {
    fn new(m: &'a Mapped) -> Self {
        Rows {
            m,
            walk: Walk::of(&m.desc),
        }
    }

    /// The next `len` elements as f32 (exact for F32/F16/BF16).
    fn take(&mut self, buf: &mut Vec<f32>, len: usize) {
        take_f32(buf, self.m, &mut self.walk, len);
    }

    /// Writes the next `v.len()` elements, rounded once to the view's dtype.
    fn put(&mut self, v: &[f32]) {
        put_f32(self.m, &mut self.walk, v);
    }
}

/// `1 / sqrt(mean(row^2) + epsilon)` in f32; NaN for a row of no elements (0 / 0).
fn rstd_of(row: &[f32], epsilon: f32, sum: &mut Blocked<f32, Arith>) -> f32 {
    row.iter().for_each(|&v| sum.push(v * v));
    let mean = sum.finish() / row.len() as f32;
    1.0 / (mean + epsilon).sqrt()
}

/// The forward operands: x (or x1 and x2), gamma and the outputs (xOut for AddRmsNorm).
struct Forward {
    op: &'static str,
    x: TensorDesc,
    x2: Option<TensorDesc>,
    gamma: TensorDesc,
    epsilon: f64,
    y: TensorDesc,
    rstd: TensorDesc,
    x_out: Option<TensorDesc>,
    cols: usize,
}

impl Forward {
    /// Row by row: `x = x1 + x2` (AddRmsNorm, rounded to x1's dtype as xOut stores it, and
    /// the norm reads it so), then `y = x * rstd * gamma`. The host holds one row at a time.
    fn run(&self) -> Result<(), Fault> {
        let op = self.op;
        let (my, mr) = (map(op, "yOut", &self.y)?, map(op, "rstdOut", &self.rstd)?);
        let mxo = self
            .x_out
            .as_ref()
            .map(|t| map(op, "xOut", t))
            .transpose()?;
        let mut outs = vec![&my, &mr];
        outs.extend(mxo.as_ref());
        let first = if self.x2.is_some() { "x1" } else { "x" };
        let mut named = vec![(first, &self.x), ("gamma", &self.gamma)];
        named.extend(self.x2.as_ref().map(|t| ("x2", t)));
        let ins = map_inputs(op, &named, &outs)?;
        let (cols, rows) = (self.cols, self.rstd.numel());
        let eps = self.epsilon as f32;
        let mut g = Vec::new();
        Rows::new(&ins[1]).take(&mut g, cols);
        let (mut x, mut x2, mut y) = (
            Rows::new(&ins[0]),
            ins.get(2).map(Rows::new),
            Rows::new(&my),
        );
        let (mut rstd, mut x_out) = (Rows::new(&mr), mxo.as_ref().map(Rows::new));
        let (mut row, mut other, mut out) = (Vec::new(), Vec::new(), vec![0f32; cols]);
        let mut sum = Blocked::new(Arith::Add);
        for _ in 0..rows {
            x.take(&mut row, cols);
            if let (Some(x2), Some(x_out)) = (&mut x2, &mut x_out) {
                x2.take(&mut other, cols);
                let dtype = self.x.dtype;
                for (a, &b) in row.iter_mut().zip(&other) {
                    *a = round_to(dtype, (*a + b) as f64) as f32;
                }
                x_out.put(&row);
            }
            let r = rstd_of(&row, eps, &mut sum);
            for ((o, &v), &g) in out.iter_mut().zip(&row).zip(&g) {
                *o = v * r * g;
            }
            y.put(&out);
            rstd.put(&[r]);
        }
        Ok(())
    }
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
        let f = Forward {
            op: OP,
            x,
            x2: None,
            gamma,
            epsilon,
            y,
            rstd,
            x_out: None,
            cols: row.cols,
        };
        Ok((SCRATCH_WORKSPACE, Arc::new(move || f.run()) as Kernel))
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
        let f = Forward {
            op: OP,
            x: x1,
            x2: Some(x2),
            gamma,
            epsilon,
            y,
            rstd,
            x_out: Some(x),
            cols: row.cols,
        };
        Ok((SCRATCH_WORKSPACE, Arc::new(move || f.run()) as Kernel))
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
            let (mdx, mdg) = (map(OP, "dxOut", &dx)?, map(OP, "dgammaOut", &dgamma)?);
            let named = [("dy", &dy), ("x", &x), ("rstd", &rstd), ("gamma", &gamma)];
            let ins = map_inputs(OP, &named, &[&mdx, &mdg])?;
            let mut g = Vec::new();
            Rows::new(&ins[3]).take(&mut g, cols);
            let (mut dyr, mut xr, mut rr) =
                (Rows::new(&ins[0]), Rows::new(&ins[1]), Rows::new(&ins[2]));
            let mut dxr = Rows::new(&mdx);
            let (mut d, mut xv, mut r) = (Vec::new(), Vec::new(), Vec::new());
            let (mut out, mut dg) = (vec![0f32; cols], vec![0f32; cols]);
            let mut sum = Blocked::new(Arith::Add);
            // With no columns there is nothing to differentiate: dx is empty, dgamma too.
            let rows = if cols == 0 { 0 } else { rstd.numel() };
            for _ in 0..rows {
                dyr.take(&mut d, cols);
                xr.take(&mut xv, cols);
                rr.take(&mut r, 1);
                let r = r[0];
                // mean(dy * gamma * x * rstd) over the row.
                for ((&x, &d), &g) in xv.iter().zip(&d).zip(&g) {
                    sum.push(d * g * x * r);
                }
                let mean = sum.finish() / cols as f32;
                for (i, ((&x, &d), o)) in xv.iter().zip(&d).zip(out.iter_mut()).enumerate() {
                    *o = (d * g[i] - r * x * mean) * r;
                    // dgamma accumulates row after row (a deterministic order).
                    dg[i] += r * x * d;
                }
                dxr.put(&out);
            }
            Rows::new(&mdg).put(&dg);
            Ok(())
        });
        Ok((SCRATCH_WORKSPACE, kernel))
    })
}
