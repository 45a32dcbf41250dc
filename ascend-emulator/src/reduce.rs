//! Emulated reductions, scans, softmax and sort. Reductions over a list of dims share one
//! kernel (`reduce_dims`); per-lane operators (arg-reductions, scans, softmax, sort) walk the
//! lanes of one dim.
// The helpers take an operator's C arguments plus its workspace and executor out-pointers.
#![allow(
    missing_docs,
    non_snake_case,
    clippy::missing_safety_doc,
    clippy::too_many_arguments
)]

use std::cmp::Ordering;
use std::sync::Arc;

use super::fault::Fault;
use super::meta::Kernel;
use super::meta::{
    contiguous_strides, int_array_arg, scalar_arg, tensor_arg, ScalarValue, TensorDesc,
};
use super::ops::{check_dtype, invalid, phase1, phase2_entry_points, Ex, Ws, SCRATCH_WORKSPACE};
use super::view::{map, offsets, Vals};
use ascend_acl::dtype::DataType::{self, *};
use ascend_acl::types::*;

const REDUCE: &[DataType] = &[F16, F32, F64, I8, U8, I16, I32, I64, Bool, BF16];
const MEAN: &[DataType] = &[F32, F16, BF16, F64];
const ARG: &[DataType] = &[F32, F16, BF16, F64, I8, I16, I32, I64, U8];
const INDEX_OUT: &[DataType] = &[I32, I64];
const CUMSUM: &[DataType] = &[F32, F16, I32, F64, U8, I8, I16, I64, BF16];
const CUMPROD: &[DataType] = &[F32, F16, BF16, F64, I8, I16, I32, I64, U8];
const CUMMAX: &[DataType] = &[F16, F32, F64, U8, I8, I16, I32, I64, Bool, BF16];
const SOFTMAX: &[DataType] = &[F16, F32, F64, BF16];
const SORT: &[DataType] = &[BF16, F16, F32, I8, I16, I32, I64, U8, Bool];

/// How a reduction folds its elements.
#[derive(Clone, Copy)]
pub(crate) enum Fold {
    Sum,
    Prod,
    Mean,
    Max,
    Min,
    Any,
    All,
}

impl Fold {
    fn float(self, acc: f64, x: f64) -> f64 {
        match self {
            Fold::Sum | Fold::Mean => acc + x,
            Fold::Prod => acc * x,
            Fold::Max if acc.is_nan() || x.is_nan() => f64::NAN,
            Fold::Min if acc.is_nan() || x.is_nan() => f64::NAN,
            Fold::Max => acc.max(x),
            Fold::Min => acc.min(x),
            Fold::Any => (acc != 0.0 || x != 0.0) as u8 as f64,
            Fold::All => (acc != 0.0 && x != 0.0) as u8 as f64,
        }
    }

    fn int(self, acc: i64, x: i64) -> i64 {
        match self {
            Fold::Sum | Fold::Mean => acc.wrapping_add(x),
            Fold::Prod => acc.wrapping_mul(x),
            Fold::Max => acc.max(x),
            Fold::Min => acc.min(x),
            Fold::Any => (acc != 0 || x != 0) as i64,
            Fold::All => (acc != 0 && x != 0) as i64,
        }
    }

    fn init(self) -> (f64, i64) {
        match self {
            Fold::Sum | Fold::Mean | Fold::Any => (0.0, 0),
            Fold::Prod | Fold::All => (1.0, 1),
            Fold::Max => (f64::NEG_INFINITY, i64::MIN),
            Fold::Min => (f64::INFINITY, i64::MAX),
        }
    }
}

pub(crate) fn normalize_dim(op: &str, dim: i64, rank: usize) -> Result<usize, Fault> {
    let r = rank.max(1) as i64;
    let d = if dim < 0 { dim + r } else { dim };
    if (0..r).contains(&d) {
        Ok(d as usize)
    } else {
        Err(invalid(
            op,
            format!("dim {dim} is out of range for rank {rank}"),
        ))
    }
}

/// Reduction of `x` over `dims` into `out` (kept as size-1 dims when `keep`).
pub(crate) fn reduce_dims(
    op: &'static str,
    x: TensorDesc,
    dims: &[i64],
    keep: bool,
    out: TensorDesc,
    fold: Fold,
) -> Result<Kernel, Fault> {
    let rank = x.shape.len();
    let mut reduced = vec![false; rank];
    for &d in dims {
        let d = normalize_dim(op, d, rank)?;
        if rank > 0 && std::mem::replace(&mut reduced[d], true) {
            return Err(invalid(op, format!("dim {d} appears twice in {dims:?}")));
        }
    }
    let expect: Vec<usize> = x
        .shape
        .iter()
        .zip(&reduced)
        .filter_map(|(&s, &r)| match (r, keep) {
            (true, true) => Some(1),
            (true, false) => None,
            (false, _) => Some(s),
        })
        .collect();
    if out.shape != expect {
        return Err(invalid(
            op,
            format!("out shape {:?} should be {expect:?}", out.shape),
        ));
    }
    let count: usize = x
        .shape
        .iter()
        .zip(&reduced)
        .filter(|(_, &r)| r)
        .map(|(&s, _)| s)
        .product();
    if count == 0 && out.numel() > 0 && matches!(fold, Fold::Max | Fold::Min) {
        return Err(invalid(
            op,
            "cannot take the max or min of an empty dimension",
        ));
    }
    Ok(Arc::new(move || {
        // Accumulator slot of every input element: kept dims get the out strides, reduced 0.
        let kept: Vec<usize> = x
            .shape
            .iter()
            .zip(&reduced)
            .map(|(&s, &r)| if r { 1 } else { s })
            .collect();
        let kept_strides = contiguous_strides(&kept);
        let strides: Vec<usize> = kept_strides
            .iter()
            .zip(&reduced)
            .map(|(&s, &r)| if r { 0 } else { s })
            .collect();
        let slot = offsets(&x.shape, &strides, 0);
        let n_out = out.numel();
        let (fi, ii) = fold.init();
        let vals = match map(op, "self", &x)?.read(None)? {
            Vals::F(v) => {
                let mut acc = vec![fi; n_out];
                slot.iter()
                    .zip(v)
                    .for_each(|(&s, v)| acc[s] = fold.float(acc[s], v));
                if matches!(fold, Fold::Mean) {
                    acc.iter_mut().for_each(|a| *a /= count as f64);
                }
                Vals::F(acc)
            }
            Vals::I(v) => {
                let mut acc = vec![ii; n_out];
                slot.iter()
                    .zip(v)
                    .for_each(|(&s, v)| acc[s] = fold.int(acc[s], v));
                Vals::I(acc)
            }
        };
        map(op, "out", &out)?.write(vals)
    }))
}

unsafe fn dims_reduction(
    op: &'static str,
    self_: *const aclTensor,
    dims: Option<*const aclIntArray>,
    keep: bool,
    out: *mut aclTensor,
    fold: Fold,
    inputs: &[DataType],
    outputs: &[DataType],
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    phase1(op, ws, ex, || {
        let x = tensor_arg(op, "self", self_)?;
        let out = tensor_arg(op, "out", out)?;
        check_dtype(op, "self", &x, inputs)?;
        check_dtype(op, "out", &out, outputs)?;
        let dims = match dims {
            Some(d) => int_array_arg(op, "dim", d)?,
            None => (0..x.shape.len() as i64).collect(),
        };
        let dims = if dims.is_empty() && x.shape.is_empty() {
            vec![0]
        } else {
            dims
        };
        Ok((
            SCRATCH_WORKSPACE,
            reduce_dims(op, x, &dims, keep, out, fold)?,
        ))
    })
}

fn check_out_dtype(op: &str, out: &TensorDesc, dtype: i32) -> Result<(), Fault> {
    if out.dtype.acl() == dtype {
        Ok(())
    } else {
        Err(invalid(
            op,
            format!("dtype {dtype} differs from out dtype {}", out.dtype),
        ))
    }
}

pub unsafe extern "C" fn aclnnProdGetWorkspaceSize(
    self_: *const aclTensor,
    dtype: i32,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    match tensor_arg("aclnnProd", "out", out).and_then(|o| check_out_dtype("aclnnProd", &o, dtype))
    {
        Ok(()) => dims_reduction(
            "aclnnProd",
            self_,
            None,
            false,
            out,
            Fold::Prod,
            REDUCE,
            REDUCE,
            ws,
            ex,
        ),
        Err(f) => super::fault::report(f),
    }
}

pub unsafe extern "C" fn aclnnProdDimGetWorkspaceSize(
    self_: *const aclTensor,
    dim: i64,
    keep_dim: bool,
    dtype: i32,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnProdDim";
    phase1(OP, ws, ex, || {
        let (x, out) = (tensor_arg(OP, "self", self_)?, tensor_arg(OP, "out", out)?);
        check_dtype(OP, "self", &x, REDUCE)?;
        check_out_dtype(OP, &out, dtype)?;
        Ok((
            SCRATCH_WORKSPACE,
            reduce_dims(OP, x, &[dim], keep_dim, out, Fold::Prod)?,
        ))
    })
}

pub unsafe extern "C" fn aclnnMeanGetWorkspaceSize(
    self_: *const aclTensor,
    dim: *const aclIntArray,
    keep_dim: bool,
    dtype: i32,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    match tensor_arg("aclnnMean", "out", out).and_then(|o| check_out_dtype("aclnnMean", &o, dtype))
    {
        Ok(()) => dims_reduction(
            "aclnnMean",
            self_,
            Some(dim),
            keep_dim,
            out,
            Fold::Mean,
            MEAN,
            MEAN,
            ws,
            ex,
        ),
        Err(f) => super::fault::report(f),
    }
}

pub unsafe extern "C" fn aclnnAmaxGetWorkspaceSize(
    self_: *const aclTensor,
    dim: *const aclIntArray,
    keep_dim: bool,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    dims_reduction(
        "aclnnAmax",
        self_,
        Some(dim),
        keep_dim,
        out,
        Fold::Max,
        REDUCE,
        REDUCE,
        ws,
        ex,
    )
}

pub unsafe extern "C" fn aclnnAminGetWorkspaceSize(
    self_: *const aclTensor,
    dim: *const aclIntArray,
    keep_dim: bool,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    dims_reduction(
        "aclnnAmin",
        self_,
        Some(dim),
        keep_dim,
        out,
        Fold::Min,
        REDUCE,
        REDUCE,
        ws,
        ex,
    )
}

pub unsafe extern "C" fn aclnnMaxGetWorkspaceSize(
    self_: *const aclTensor,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    dims_reduction(
        "aclnnMax",
        self_,
        None,
        false,
        out,
        Fold::Max,
        REDUCE,
        REDUCE,
        ws,
        ex,
    )
}

pub unsafe extern "C" fn aclnnMinGetWorkspaceSize(
    self_: *const aclTensor,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    dims_reduction(
        "aclnnMin",
        self_,
        None,
        false,
        out,
        Fold::Min,
        REDUCE,
        REDUCE,
        ws,
        ex,
    )
}

pub unsafe extern "C" fn aclnnAnyGetWorkspaceSize(
    self_: *const aclTensor,
    dim: *const aclIntArray,
    keepdim: bool,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    dims_reduction(
        "aclnnAny",
        self_,
        Some(dim),
        keepdim,
        out,
        Fold::Any,
        REDUCE,
        &[Bool],
        ws,
        ex,
    )
}

pub unsafe extern "C" fn aclnnAllGetWorkspaceSize(
    self_: *const aclTensor,
    dim: *const aclIntArray,
    keepdim: bool,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    dims_reduction(
        "aclnnAll",
        self_,
        Some(dim),
        keepdim,
        out,
        Fold::All,
        REDUCE,
        &[Bool, U8],
        ws,
        ex,
    )
}

/// Positions (row-major) of every lane along `dim`, lane by lane in row-major order of the
/// other dims.
fn lanes(shape: &[usize], dim: usize) -> Vec<Vec<usize>> {
    if shape.is_empty() {
        return vec![vec![0]];
    }
    let outer: usize = shape[..dim].iter().product();
    let inner: usize = shape[dim + 1..].iter().product();
    let size = shape[dim];
    let mut out = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            out.push(
                (0..size)
                    .map(|k| o * size * inner + k * inner + i)
                    .collect(),
            );
        }
    }
    out
}

/// Maps every lane of `data` (shape `shape`) through `f` into a same-shaped result.
fn per_lane<T: Copy, R: Copy + Default>(
    data: &[T],
    shape: &[usize],
    dim: usize,
    mut f: impl FnMut(&[T]) -> Vec<R>,
) -> Vec<R> {
    let mut out = vec![R::default(); data.len()];
    let mut lane = Vec::new();
    for idx in lanes(shape, dim) {
        lane.clear();
        lane.extend(idx.iter().map(|&i| data[i]));
        for (&i, r) in idx.iter().zip(f(&lane)) {
            out[i] = r;
        }
    }
    out
}

/// NaN-aware total order: NaN is the largest value (as torch sorts and arg-reduces).
fn order(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// Index of the first maximum (`max`) or minimum of a lane; a NaN wins at its first place.
fn arg_best<T: Copy>(
    lane: &[T],
    max: bool,
    cmp: impl Fn(T, T) -> Ordering,
    is_nan: impl Fn(T) -> bool,
) -> i64 {
    if let Some(k) = lane.iter().position(|&x| is_nan(x)) {
        return k as i64;
    }
    let mut best = 0;
    for (k, &x) in lane.iter().enumerate().skip(1) {
        let c = cmp(x, lane[best]);
        if (max && c == Ordering::Greater) || (!max && c == Ordering::Less) {
            best = k;
        }
    }
    best as i64
}

unsafe fn arg_reduction(
    op: &'static str,
    self_: *const aclTensor,
    dim: i64,
    keepdim: bool,
    out: *mut aclTensor,
    max: bool,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    phase1(op, ws, ex, || {
        let (x, out) = (tensor_arg(op, "self", self_)?, tensor_arg(op, "out", out)?);
        check_dtype(op, "self", &x, ARG)?;
        check_dtype(op, "out", &out, INDEX_OUT)?;
        let d = normalize_dim(op, dim, x.shape.len())?;
        let mut expect = x.shape.clone();
        if !expect.is_empty() {
            if keepdim {
                expect[d] = 1;
            } else {
                expect.remove(d);
            }
        }
        if out.shape != expect {
            return Err(invalid(
                op,
                format!("out shape {:?} should be {expect:?}", out.shape),
            ));
        }
        if x.shape.get(d) == Some(&0) && out.numel() > 0 {
            return Err(invalid(op, "cannot reduce an empty dimension"));
        }
        Ok((
            0,
            Arc::new(move || {
                let r: Vec<i64> = match map(op, "self", &x)?.read(None)? {
                    Vals::F(v) => lanes(&x.shape, d)
                        .iter()
                        .map(|l| {
                            let lane: Vec<f64> = l.iter().map(|&i| v[i]).collect();
                            arg_best(&lane, max, order, f64::is_nan)
                        })
                        .collect(),
                    Vals::I(v) => lanes(&x.shape, d)
                        .iter()
                        .map(|l| {
                            let lane: Vec<i64> = l.iter().map(|&i| v[i]).collect();
                            arg_best(&lane, max, |a: i64, b: i64| a.cmp(&b), |_| false)
                        })
                        .collect(),
                };
                map(op, "out", &out)?.write(Vals::I(r))
            }) as Kernel,
        ))
    })
}

pub unsafe extern "C" fn aclnnArgMaxGetWorkspaceSize(
    self_: *const aclTensor,
    dim: i64,
    keepdim: bool,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    arg_reduction("aclnnArgMax", self_, dim, keepdim, out, true, ws, ex)
}

pub unsafe extern "C" fn aclnnArgMinGetWorkspaceSize(
    self_: *const aclTensor,
    dim: i64,
    keepdim: bool,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    arg_reduction("aclnnArgMin", self_, dim, keepdim, out, false, ws, ex)
}

/// Validation shared by operators whose outputs have the input's shape.
fn same_shape_lane_op(
    op: &str,
    x: &TensorDesc,
    dim: i64,
    outs: &[(&str, &TensorDesc)],
    inputs: &[DataType],
) -> Result<usize, Fault> {
    check_dtype(op, "self", x, inputs)?;
    let d = normalize_dim(op, dim, x.shape.len())?;
    for (name, o) in outs {
        if o.shape != x.shape {
            return Err(invalid(
                op,
                format!(
                    "{name} shape {:?} differs from self shape {:?}",
                    o.shape, x.shape
                ),
            ));
        }
    }
    Ok(d)
}

/// Running sum or product along a lane.
fn scan(op: &'static str, x: TensorDesc, d: usize, out: TensorDesc, product: bool) -> Kernel {
    Arc::new(move || {
        let vals = match map(op, "self", &x)?.read(None)? {
            Vals::F(v) => Vals::F(per_lane(&v, &x.shape, d, |l| {
                let mut acc = if product { 1.0 } else { 0.0 };
                l.iter()
                    .map(|&v| {
                        acc = if product { acc * v } else { acc + v };
                        acc
                    })
                    .collect()
            })),
            Vals::I(v) => Vals::I(per_lane(&v, &x.shape, d, |l| {
                let mut acc: i64 = product as i64;
                l.iter()
                    .map(|&v| {
                        acc = if product {
                            acc.wrapping_mul(v)
                        } else {
                            acc.wrapping_add(v)
                        };
                        acc
                    })
                    .collect()
            })),
        };
        map(op, "out", &out)?.write(vals)
    })
}

pub unsafe extern "C" fn aclnnCumsumGetWorkspaceSize(
    self_: *const aclTensor,
    dim: i64,
    dtype: i32,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnCumsum";
    phase1(OP, ws, ex, || {
        let (x, out) = (tensor_arg(OP, "self", self_)?, tensor_arg(OP, "out", out)?);
        check_out_dtype(OP, &out, dtype)?;
        let d = same_shape_lane_op(OP, &x, dim, &[("out", &out)], CUMSUM)?;
        Ok((0, scan(OP, x, d, out, false)))
    })
}

pub unsafe extern "C" fn aclnnCumprodGetWorkspaceSize(
    input: *const aclTensor,
    dim: *const aclScalar,
    dtype: i32,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnCumprod";
    phase1(OP, ws, ex, || {
        let (x, out) = (tensor_arg(OP, "input", input)?, tensor_arg(OP, "out", out)?);
        let dim = match scalar_arg(OP, "dim", dim)? {
            ScalarValue::Int(d) => d,
            ScalarValue::Float(_) => return Err(invalid(OP, "dim must be an integer scalar")),
        };
        check_out_dtype(OP, &out, dtype)?;
        let d = same_shape_lane_op(OP, &x, dim, &[("out", &out)], CUMPROD)?;
        Ok((0, scan(OP, x, d, out, true)))
    })
}

/// Running max or min with the index where it was reached (the latest index on ties, as
/// torch's cummax does).
unsafe fn running_extreme(
    op: &'static str,
    self_: *const aclTensor,
    dim: i64,
    values: *mut aclTensor,
    indices: *mut aclTensor,
    max: bool,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    phase1(op, ws, ex, || {
        let x = tensor_arg(op, "self", self_)?;
        let (vo, io) = (
            tensor_arg(op, "valuesOut", values)?,
            tensor_arg(op, "indicesOut", indices)?,
        );
        check_dtype(op, "indicesOut", &io, INDEX_OUT)?;
        let d = same_shape_lane_op(
            op,
            &x,
            dim,
            &[("valuesOut", &vo), ("indicesOut", &io)],
            CUMMAX,
        )?;
        Ok((
            0,
            Arc::new(move || {
                fn run<T: Copy + Default>(
                    lane: &[T],
                    better_or_equal: impl Fn(T, T) -> bool,
                ) -> Vec<(T, i64)> {
                    let mut best = (T::default(), -1i64);
                    lane.iter()
                        .enumerate()
                        .map(|(k, &v)| {
                            if best.1 < 0 || better_or_equal(v, best.0) {
                                best = (v, k as i64);
                            }
                            best
                        })
                        .collect()
                }
                let pairs_to = |p: Vec<(f64, i64)>| {
                    (
                        Vals::F(p.iter().map(|x| x.0).collect()),
                        p.iter().map(|x| x.1).collect::<Vec<_>>(),
                    )
                };
                let (vals, idx) = match map(op, "self", &x)?.read(None)? {
                    Vals::F(v) => pairs_to(per_lane(&v, &x.shape, d, |l| {
                        run(l, |a: f64, b: f64| {
                            a.is_nan() || (!b.is_nan() && if max { a >= b } else { a <= b })
                        })
                    })),
                    Vals::I(v) => {
                        let p = per_lane(&v, &x.shape, d, |l| {
                            run(l, |a: i64, b: i64| if max { a >= b } else { a <= b })
                        });
                        (
                            Vals::I(p.iter().map(|x| x.0).collect()),
                            p.iter().map(|x| x.1).collect(),
                        )
                    }
                };
                map(op, "valuesOut", &vo)?.write(vals)?;
                map(op, "indicesOut", &io)?.write(Vals::I(idx))
            }) as Kernel,
        ))
    })
}

pub unsafe extern "C" fn aclnnCummaxGetWorkspaceSize(
    self_: *const aclTensor,
    dim: i64,
    values_out: *mut aclTensor,
    indices_out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    running_extreme(
        "aclnnCummax",
        self_,
        dim,
        values_out,
        indices_out,
        true,
        ws,
        ex,
    )
}

pub unsafe extern "C" fn aclnnCumminGetWorkspaceSize(
    self_: *const aclTensor,
    dim: i64,
    values_out: *mut aclTensor,
    indices_out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    running_extreme(
        "aclnnCummin",
        self_,
        dim,
        values_out,
        indices_out,
        false,
        ws,
        ex,
    )
}

unsafe fn softmax(
    op: &'static str,
    self_: *const aclTensor,
    dim: i64,
    out: *mut aclTensor,
    log: bool,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    phase1(op, ws, ex, || {
        let (x, out) = (tensor_arg(op, "self", self_)?, tensor_arg(op, "out", out)?);
        check_dtype(op, "out", &out, SOFTMAX)?;
        let d = same_shape_lane_op(op, &x, dim, &[("out", &out)], SOFTMAX)?;
        Ok((
            SCRATCH_WORKSPACE,
            Arc::new(move || {
                let v = map(op, "self", &x)?.read(None)?.into_f64();
                let r = per_lane(&v, &x.shape, d, |l| {
                    let m = l.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let z: f64 = l.iter().map(|&v| (v - m).exp()).sum();
                    l.iter()
                        .map(|&v| {
                            if log {
                                v - m - z.ln()
                            } else {
                                (v - m).exp() / z
                            }
                        })
                        .collect()
                });
                map(op, "out", &out)?.write(Vals::F(r))
            }) as Kernel,
        ))
    })
}

pub unsafe extern "C" fn aclnnSoftmaxGetWorkspaceSize(
    self_: *const aclTensor,
    dim: i64,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    softmax("aclnnSoftmax", self_, dim, out, false, ws, ex)
}

pub unsafe extern "C" fn aclnnLogSoftmaxGetWorkspaceSize(
    self_: *const aclTensor,
    dim: i64,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    softmax("aclnnLogSoftmax", self_, dim, out, true, ws, ex)
}

/// Sorts every lane; NaN counts as the largest value; `stable` keeps equal elements in order
/// (the unstable variant is modelled as stable, one of its allowed behaviours).
pub unsafe extern "C" fn aclnnSortGetWorkspaceSize(
    self_: *const aclTensor,
    _stable: bool,
    dim: i64,
    descending: bool,
    values_out: *mut aclTensor,
    indices_out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnSort";
    phase1(OP, ws, ex, || {
        let x = tensor_arg(OP, "self", self_)?;
        let (vo, io) = (
            tensor_arg(OP, "valuesOut", values_out)?,
            tensor_arg(OP, "indicesOut", indices_out)?,
        );
        check_dtype(OP, "indicesOut", &io, &[I64])?;
        let d = same_shape_lane_op(
            OP,
            &x,
            dim,
            &[("valuesOut", &vo), ("indicesOut", &io)],
            SORT,
        )?;
        Ok((
            SCRATCH_WORKSPACE,
            Arc::new(move || {
                fn sorted<T: Copy + Default>(
                    lane: &[T],
                    cmp: impl Fn(T, T) -> Ordering,
                    descending: bool,
                ) -> Vec<(T, i64)> {
                    let mut idx: Vec<usize> = (0..lane.len()).collect();
                    idx.sort_by(|&a, &b| {
                        let c = cmp(lane[a], lane[b]);
                        if descending {
                            c.reverse()
                        } else {
                            c
                        }
                    });
                    idx.into_iter().map(|i| (lane[i], i as i64)).collect()
                }
                let (vals, idx) = match map(OP, "self", &x)?.read(None)? {
                    Vals::F(v) => {
                        let p = per_lane(&v, &x.shape, d, |l| sorted(l, order, descending));
                        (
                            Vals::F(p.iter().map(|x| x.0).collect()),
                            p.iter().map(|x| x.1).collect::<Vec<_>>(),
                        )
                    }
                    Vals::I(v) => {
                        let p = per_lane(&v, &x.shape, d, |l| {
                            sorted(l, |a: i64, b: i64| a.cmp(&b), descending)
                        });
                        (
                            Vals::I(p.iter().map(|x| x.0).collect()),
                            p.iter().map(|x| x.1).collect(),
                        )
                    }
                };
                map(OP, "valuesOut", &vo)?.write(vals)?;
                map(OP, "indicesOut", &io)?.write(Vals::I(idx))
            }) as Kernel,
        ))
    })
}

phase2_entry_points!(
    aclnnProd,
    aclnnProdDim,
    aclnnMean,
    aclnnAmax,
    aclnnAmin,
    aclnnMax,
    aclnnMin,
    aclnnAny,
    aclnnAll,
    aclnnArgMax,
    aclnnArgMin,
    aclnnCumsum,
    aclnnCumprod,
    aclnnCummax,
    aclnnCummin,
    aclnnSoftmax,
    aclnnLogSoftmax,
    aclnnSort,
);
