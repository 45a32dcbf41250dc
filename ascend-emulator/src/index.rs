//! Emulated indexing operators: gather, scatter-add, index select and add, repeat, nonzero
//! and the cross product. Indices are checked when the kernel runs; an index out of range is an
//! AI Core fault, as on hardware.
#![allow(missing_docs, non_snake_case, clippy::missing_safety_doc)]

use super::elementwise::checked_index;
use super::fault::Fault;
use super::meta::Kernel;
use super::meta::{contiguous_strides, int_array_arg, scalar_arg, tensor_arg, TensorDesc};
use super::ops::{check_dtype, invalid, phase1, phase2_entry_points, Ex, Ws};
use super::reduce::normalize_dim;
use super::view::{broadcast_shape, map, Vals};
use ascend_acl::dtype::DataType::{self, *};
use ascend_acl::types::*;
use std::sync::Arc;

const GATHER: &[DataType] = &[
    F64, F16, BF16, F32, I32, U32, I64, U64, I16, U16, I8, U8, Bool,
];
const SCATTER_ADD: &[DataType] = &[BF16, F16, F32, F64, I64, I32, I16, I8, U8, Bool];
const INDEX_SELECT: &[DataType] = &[
    F32, F16, BF16, I64, I32, I16, I8, U8, U16, U32, U64, Bool, F64,
];
const INDEX_ADD: &[DataType] = &[F32, F16, I32, I16, I8, U8, F64, I64, Bool, BF16];
const REPEAT: &[DataType] = &[
    F32, F64, F16, U8, I8, I16, I32, I64, U16, U32, U64, Bool, BF16,
];
const NONZERO: &[DataType] = &[F32, F16, F64, I32, I64, I16, I8, U8, Bool, BF16];
const CROSS: &[DataType] = &[I8, I16, I32, I64, U8, F16, BF16, F32, F64];
const INDEX: &[DataType] = &[I32, I64];

/// Row-major multi-index of position `p` in `shape`.
fn unravel(mut p: usize, shape: &[usize], out: &mut [usize]) {
    for d in (0..shape.len()).rev() {
        out[d] = p % shape[d].max(1);
        p /= shape[d].max(1);
    }
}

fn ravel(idx: &[usize], strides: &[usize]) -> usize {
    idx.iter().zip(strides).map(|(i, s)| i * s).sum()
}

/// Reads a view as f64 or i64 values, whichever its dtype needs.
fn read(op: &str, name: &str, t: &TensorDesc) -> Result<Vals, Fault> {
    map(op, name, t)?.read(None)
}

pub unsafe extern "C" fn aclnnGatherGetWorkspaceSize(
    self_: *const aclTensor,
    dim: i64,
    index: *const aclTensor,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnGather";
    phase1(OP, ws, ex, || {
        let (x, idx, out) = (
            tensor_arg(OP, "self", self_)?,
            tensor_arg(OP, "index", index)?,
            tensor_arg(OP, "out", out)?,
        );
        check_dtype(OP, "self", &x, GATHER)?;
        check_dtype(OP, "index", &idx, INDEX)?;
        let d = normalize_dim(OP, dim, x.shape.len())?;
        let fits = idx.shape.len() == x.shape.len()
            && (0..x.shape.len()).all(|k| k == d || idx.shape[k] <= x.shape[k]);
        if !fits || out.shape != idx.shape || out.dtype != x.dtype {
            return Err(invalid(
                OP,
                format!(
                    "self {}, index {}, out {} do not fit along dim {d}",
                    x.describe(),
                    idx.describe(),
                    out.describe()
                ),
            ));
        }
        Ok((
            0,
            Arc::new(move || {
                let src = read(OP, "self", &x)?;
                let ix = read(OP, "index", &idx)?.into_i64();
                let xs = contiguous_strides(&x.shape);
                let mut pos = vec![0; idx.shape.len()];
                let mut from = Vec::with_capacity(ix.len());
                for (p, &i) in ix.iter().enumerate() {
                    unravel(p, &idx.shape, &mut pos);
                    pos[d] = checked_index(OP, i, x.shape[d])?;
                    from.push(ravel(&pos, &xs));
                }
                map(OP, "out", &out)?.write(pick(&src, &from))
            }) as Kernel,
        ))
    })
}

fn pick(src: &Vals, from: &[usize]) -> Vals {
    match src {
        Vals::F(v) => Vals::F(from.iter().map(|&i| v[i]).collect()),
        Vals::I(v) => Vals::I(from.iter().map(|&i| v[i]).collect()),
    }
}

/// Adds `src` values into a copy of `dst` at positions `to` (with weight `alpha`).
fn accumulate(dst: Vals, src: Vals, to: &[usize], alpha: f64) -> Vals {
    match (dst, src) {
        (Vals::F(mut d), s) => {
            for (&t, v) in to.iter().zip(s.into_f64()) {
                d[t] += alpha * v;
            }
            Vals::F(d)
        }
        (Vals::I(mut d), s) => {
            for (&t, v) in to.iter().zip(s.into_i64()) {
                d[t] = d[t].wrapping_add((alpha as i64).wrapping_mul(v));
            }
            Vals::I(d)
        }
    }
}

pub unsafe extern "C" fn aclnnScatterAddGetWorkspaceSize(
    self_: *const aclTensor,
    dim: i64,
    index: *const aclTensor,
    src: *const aclTensor,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnScatterAdd";
    phase1(OP, ws, ex, || {
        let (x, idx) = (
            tensor_arg(OP, "self", self_)?,
            tensor_arg(OP, "index", index)?,
        );
        let (src, out) = (tensor_arg(OP, "src", src)?, tensor_arg(OP, "out", out)?);
        check_dtype(OP, "self", &x, SCATTER_ADD)?;
        check_dtype(OP, "index", &idx, INDEX)?;
        for (name, t) in [("src", &src), ("out", &out)] {
            if !t.is_contiguous() {
                return Err(invalid(OP, format!("{name} must be contiguous")));
            }
        }
        let d = normalize_dim(OP, dim, x.shape.len())?;
        let fits = idx.shape.len() == x.shape.len()
            && src.shape.len() == x.shape.len()
            && (0..x.shape.len())
                .all(|k| idx.shape[k] <= src.shape[k] && (k == d || idx.shape[k] <= x.shape[k]));
        if !fits || out.shape != x.shape || out.dtype != x.dtype {
            return Err(invalid(
                OP,
                format!(
                    "self {}, index {}, src {}, out {} do not fit along dim {d}",
                    x.describe(),
                    idx.describe(),
                    src.describe(),
                    out.describe()
                ),
            ));
        }
        Ok((
            0,
            Arc::new(move || {
                let base = read(OP, "self", &x)?;
                let ix = read(OP, "index", &idx)?.into_i64();
                let sv = read(OP, "src", &src)?;
                let (xs, ss) = (contiguous_strides(&x.shape), contiguous_strides(&src.shape));
                let mut pos = vec![0; idx.shape.len()];
                let (mut to, mut from) = (Vec::new(), Vec::new());
                for (p, &i) in ix.iter().enumerate() {
                    unravel(p, &idx.shape, &mut pos);
                    from.push(ravel(&pos, &ss));
                    pos[d] = checked_index(OP, i, x.shape[d])?;
                    to.push(ravel(&pos, &xs));
                }
                map(OP, "out", &out)?.write(accumulate(base, pick(&sv, &from), &to, 1.0))
            }) as Kernel,
        ))
    })
}

/// torch.scatter with `reduce` 0 (assign, later writes win), 1 (add) or 2 (multiply).
pub unsafe extern "C" fn aclnnScatterGetWorkspaceSize(
    self_: *const aclTensor,
    dim: i64,
    index: *const aclTensor,
    src: *const aclTensor,
    reduce: i64,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnScatter";
    phase1(OP, ws, ex, || {
        let (x, idx) = (
            tensor_arg(OP, "self", self_)?,
            tensor_arg(OP, "index", index)?,
        );
        let (src, out) = (tensor_arg(OP, "src", src)?, tensor_arg(OP, "out", out)?);
        check_dtype(OP, "self", &x, SCATTER_ADD)?;
        check_dtype(OP, "index", &idx, INDEX)?;
        if !(0..=2).contains(&reduce) {
            return Err(invalid(
                OP,
                format!("reduce {reduce} is not 0 (none), 1 (add) or 2 (multiply)"),
            ));
        }
        let d = normalize_dim(OP, dim, x.shape.len())?;
        let fits = idx.shape.len() == x.shape.len()
            && src.shape.len() == x.shape.len()
            && (0..x.shape.len())
                .all(|k| idx.shape[k] <= src.shape[k] && (k == d || idx.shape[k] <= x.shape[k]));
        if !fits || out.shape != x.shape || out.dtype != x.dtype || src.dtype != x.dtype {
            return Err(invalid(
                OP,
                format!(
                    "self {}, index {}, src {}, out {} do not fit along dim {d}",
                    x.describe(),
                    idx.describe(),
                    src.describe(),
                    out.describe()
                ),
            ));
        }
        Ok((
            0,
            Arc::new(move || {
                let base = read(OP, "self", &x)?;
                let ix = read(OP, "index", &idx)?.into_i64();
                let sv = read(OP, "src", &src)?;
                let (xs, ss) = (contiguous_strides(&x.shape), contiguous_strides(&src.shape));
                let mut pos = vec![0; idx.shape.len()];
                let mut pairs = Vec::with_capacity(ix.len());
                for (p, &i) in ix.iter().enumerate() {
                    unravel(p, &idx.shape, &mut pos);
                    let from = ravel(&pos, &ss);
                    pos[d] = checked_index(OP, i, x.shape[d])?;
                    pairs.push((ravel(&pos, &xs), from));
                }
                let vals = match (base, sv) {
                    (Vals::F(mut b), Vals::F(s)) => {
                        for (t, f) in pairs {
                            b[t] = match reduce {
                                0 => s[f],
                                1 => b[t] + s[f],
                                _ => b[t] * s[f],
                            };
                        }
                        Vals::F(b)
                    }
                    (Vals::I(mut b), Vals::I(s)) => {
                        for (t, f) in pairs {
                            b[t] = match reduce {
                                0 => s[f],
                                1 => b[t].wrapping_add(s[f]),
                                _ => b[t].wrapping_mul(s[f]),
                            };
                        }
                        Vals::I(b)
                    }
                    _ => unreachable!("self and src share a dtype"),
                };
                map(OP, "out", &out)?.write(vals)
            }) as Kernel,
        ))
    })
}

/// Positions of `x` (row-major) selected by `index` along `d`, and the shape they form.
fn select_positions(
    op: &str,
    shape: &[usize],
    d: usize,
    index: &[i64],
) -> Result<(Vec<usize>, Vec<usize>), Fault> {
    let mut out_shape = shape.to_vec();
    out_shape[d] = index.len();
    let xs = contiguous_strides(shape);
    let mut pos = vec![0; shape.len()];
    let n: usize = out_shape.iter().product();
    let mut from = Vec::with_capacity(n);
    for p in 0..n {
        unravel(p, &out_shape, &mut pos);
        pos[d] = checked_index(op, index[pos[d]], shape[d])?;
        from.push(ravel(&pos, &xs));
    }
    Ok((from, out_shape))
}

pub unsafe extern "C" fn aclnnIndexSelectGetWorkspaceSize(
    self_: *const aclTensor,
    dim: i64,
    index: *const aclTensor,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnIndexSelect";
    phase1(OP, ws, ex, || {
        let (x, idx, out) = (
            tensor_arg(OP, "self", self_)?,
            tensor_arg(OP, "index", index)?,
            tensor_arg(OP, "out", out)?,
        );
        check_dtype(OP, "self", &x, INDEX_SELECT)?;
        check_dtype(OP, "index", &idx, INDEX)?;
        let d = normalize_dim(OP, dim, x.shape.len())?;
        let mut expect = x.shape.clone();
        if idx.shape.len() > 1 || expect.is_empty() {
            return Err(invalid(
                OP,
                format!(
                    "index must be 1-D and self at least 1-D: {} and {}",
                    idx.describe(),
                    x.describe()
                ),
            ));
        }
        expect[d] = idx.numel();
        if out.shape != expect || out.dtype != x.dtype {
            return Err(invalid(
                OP,
                format!("out {} should be {expect:?} {}", out.describe(), x.dtype),
            ));
        }
        Ok((
            0,
            Arc::new(move || {
                let src = read(OP, "self", &x)?;
                let ix = read(OP, "index", &idx)?.into_i64();
                let (from, _) = select_positions(OP, &x.shape, d, &ix)?;
                map(OP, "out", &out)?.write(pick(&src, &from))
            }) as Kernel,
        ))
    })
}

pub unsafe extern "C" fn aclnnIndexAddGetWorkspaceSize(
    self_: *const aclTensor,
    dim: i64,
    index: *const aclTensor,
    source: *const aclTensor,
    alpha: *const aclScalar,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnIndexAdd";
    phase1(OP, ws, ex, || {
        let (x, idx) = (
            tensor_arg(OP, "self", self_)?,
            tensor_arg(OP, "index", index)?,
        );
        let (src, out) = (
            tensor_arg(OP, "source", source)?,
            tensor_arg(OP, "out", out)?,
        );
        let alpha = scalar_arg(OP, "alpha", alpha)?.as_f64();
        check_dtype(OP, "self", &x, INDEX_ADD)?;
        check_dtype(OP, "index", &idx, INDEX)?;
        let d = normalize_dim(OP, dim, x.shape.len())?;
        let mut expect = x.shape.clone();
        if idx.shape.len() > 1 || expect.is_empty() {
            return Err(invalid(OP, "index must be 1-D and self at least 1-D"));
        }
        expect[d] = idx.numel();
        if src.shape != expect || out.shape != x.shape || out.dtype != x.dtype {
            return Err(invalid(
                OP,
                format!(
                    "source {} should be {expect:?}; out {} should match self {}",
                    src.describe(),
                    out.describe(),
                    x.describe()
                ),
            ));
        }
        Ok((
            0,
            Arc::new(move || {
                let base = read(OP, "self", &x)?;
                let ix = read(OP, "index", &idx)?.into_i64();
                let (to, _) = select_positions(OP, &x.shape, d, &ix)?;
                let sv = read(OP, "source", &src)?;
                map(OP, "out", &out)?.write(accumulate(base, sv, &to, alpha))
            }) as Kernel,
        ))
    })
}

pub unsafe extern "C" fn aclnnRepeatGetWorkspaceSize(
    self_: *const aclTensor,
    repeats: *const aclIntArray,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnRepeat";
    phase1(OP, ws, ex, || {
        let (x, out) = (tensor_arg(OP, "self", self_)?, tensor_arg(OP, "out", out)?);
        let reps = int_array_arg(OP, "repeats", repeats)?;
        check_dtype(OP, "self", &x, REPEAT)?;
        if reps.len() < x.shape.len() || reps.iter().any(|&r| r < 0) {
            return Err(invalid(
                OP,
                format!(
                    "repeats {reps:?} must be non-negative and at least as long as the rank of {}",
                    x.describe()
                ),
            ));
        }
        let lead = reps.len() - x.shape.len();
        let padded: Vec<usize> = std::iter::repeat_n(1, lead)
            .chain(x.shape.iter().copied())
            .collect();
        let expect: Vec<usize> = padded
            .iter()
            .zip(&reps)
            .map(|(&s, &r)| s * r as usize)
            .collect();
        if out.shape != expect || out.dtype != x.dtype {
            return Err(invalid(
                OP,
                format!("out {} should be {expect:?}", out.describe()),
            ));
        }
        Ok((
            0,
            Arc::new(move || {
                let src = read(OP, "self", &x)?;
                let xs = contiguous_strides(&padded);
                let mut pos = vec![0; expect.len()];
                let from: Vec<usize> = (0..out.numel())
                    .map(|p| {
                        unravel(p, &expect, &mut pos);
                        pos.iter_mut().zip(&padded).for_each(|(i, &s)| *i %= s);
                        ravel(&pos, &xs)
                    })
                    .collect();
                map(OP, "out", &out)?.write(pick(&src, &from))
            }) as Kernel,
        ))
    })
}

/// A pointer to the caller's `out` descriptor, whose view shape the kernel rewrites.
/// Coordinates of the non-zero elements, `[count, rank]` in row-major order; the kernel
/// shrinks the out descriptor's view shape to the count (read it with `aclGetViewShape`).
pub unsafe extern "C" fn aclnnNonzeroGetWorkspaceSize(
    self_: *const aclTensor,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnNonzero";
    phase1(OP, ws, ex, || {
        let (x, o) = (tensor_arg(OP, "self", self_)?, tensor_arg(OP, "out", out)?);
        check_dtype(OP, "self", &x, NONZERO)?;
        check_dtype(OP, "out", &o, &[I64])?;
        let rank = x.shape.len();
        if o.shape != [x.numel(), rank] || !o.is_contiguous() {
            return Err(invalid(
                OP,
                format!(
                    "out must be a contiguous [{}, {rank}] tensor, got {}",
                    x.numel(),
                    o.describe()
                ),
            ));
        }
        // The out descriptor must stay alive until the stream is synchronised and its shape
        // read (acl-abi.md section 7, trap 4): the kernel rewrites it through its handle.
        let target = out as usize;
        Ok((
            0,
            Arc::new(move || {
                let v = read(OP, "self", &x)?;
                let nz: Vec<usize> = match v {
                    Vals::F(v) => v
                        .iter()
                        .enumerate()
                        .filter(|(_, &x)| x != 0.0)
                        .map(|(i, _)| i)
                        .collect(),
                    Vals::I(v) => v
                        .iter()
                        .enumerate()
                        .filter(|(_, &x)| x != 0)
                        .map(|(i, _)| i)
                        .collect(),
                };
                let mut pos = vec![0; rank];
                let mut coords = Vec::with_capacity(nz.len() * rank);
                for &p in &nz {
                    unravel(p, &x.shape, &mut pos);
                    coords.extend(pos.iter().map(|&c| c as i64));
                }
                let mut written = o.clone();
                written.shape = vec![nz.len(), rank];
                written.strides = contiguous_strides(&written.shape);
                map(OP, "out", &written)?.write(Vals::I(coords))?;
                let shape = written.shape;
                let strides = written.strides;
                super::objects::read(
                    "aclnnNonzero: out (rewritten when the kernel runs)",
                    "aclTensor",
                    target,
                    |o| match o {
                        super::objects::Object::Tensor(t) => {
                            t.shape = shape;
                            t.strides = strides;
                            Some(())
                        }
                        _ => None,
                    },
                )
            }) as Kernel,
        ))
    })
}

pub unsafe extern "C" fn aclnnLinalgCrossGetWorkspaceSize(
    self_: *const aclTensor,
    other: *const aclTensor,
    dim: i64,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnLinalgCross";
    phase1(OP, ws, ex, || {
        let (a, b, out) = (
            tensor_arg(OP, "self", self_)?,
            tensor_arg(OP, "other", other)?,
            tensor_arg(OP, "out", out)?,
        );
        for (n, t) in [("self", &a), ("other", &b), ("out", &out)] {
            check_dtype(OP, n, t, CROSS)?;
        }
        let shape = broadcast_shape(&a.shape, &b.shape)
            .ok_or_else(|| invalid(OP, "shapes do not broadcast"))?;
        let d = normalize_dim(OP, dim, shape.len())?;
        if shape.get(d) != Some(&3) || out.shape != shape {
            return Err(invalid(
                OP,
                format!("dim {d} must have size 3 and out must be {shape:?}"),
            ));
        }
        Ok((
            0,
            Arc::new(move || {
                let x = map(OP, "self", &a)?.read(Some(&shape))?.into_f64();
                let y = map(OP, "other", &b)?.read(Some(&shape))?.into_f64();
                let st = contiguous_strides(&shape)[d];
                let mut r = vec![0.0; x.len()];
                let mut pos = vec![0; shape.len()];
                for (p, slot) in r.iter_mut().enumerate() {
                    unravel(p, &shape, &mut pos);
                    let base = p - pos[d] * st;
                    let (i, j) = ((pos[d] + 1) % 3, (pos[d] + 2) % 3);
                    *slot =
                        x[base + i * st] * y[base + j * st] - x[base + j * st] * y[base + i * st];
                }
                let vals = if out.dtype.is_float() {
                    Vals::F(r)
                } else {
                    Vals::I(r.into_iter().map(|v| v as i64).collect())
                };
                map(OP, "out", &out)?.write(vals)
            }) as Kernel,
        ))
    })
}

phase2_entry_points!(
    aclnnGather,
    aclnnScatter,
    aclnnScatterAdd,
    aclnnIndexSelect,
    aclnnIndexAdd,
    aclnnRepeat,
    aclnnNonzero,
    aclnnLinalgCross
);
