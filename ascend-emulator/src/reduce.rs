//! Emulated reductions, scans, softmax and sort. Reductions over a list of dims share one
//! kernel (`reduce_dims`); per-lane operators (arg-reductions, scans, softmax, sort) walk the
//! lanes of one dim. Every kernel reads its lanes straight from device memory, one output at a
//! time, accumulating as `numerics` says (f32 for float inputs, in the vector unit's blocked
//! order; exact and wrapped for integers).
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
use super::meta::{int_array_arg, scalar_arg, tensor_arg, ScalarValue, TensorDesc};
use super::numerics::{Arith, Blocked, Domain, Elem, Real};
use super::ops::{check_dtype, invalid, phase1, phase2_entry_points, Ex, Ws, SCRATCH_WORKSPACE};
use super::view::{gather, map, Walk};
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
    Ok(Arc::new(move || match fold {
        Fold::Any | Fold::All => {
            let all = matches!(fold, Fold::All);
            match Domain::of(&[x.dtype]) {
                Domain::F32 => reduce_run::<f32, i128>(op, &x, &out, &reduced, |l| truth(l, all)),
                Domain::F64 => reduce_run::<f64, i128>(op, &x, &out, &reduced, |l| truth(l, all)),
                Domain::Int => reduce_run::<i128, i128>(op, &x, &out, &reduced, |l| truth(l, all)),
            }
        }
        _ => match Domain::of(&[x.dtype, out.dtype]) {
            Domain::F32 => {
                reduce_run::<f32, f32>(op, &x, &out, &reduced, |l| fold_float(fold, l, count))
            }
            Domain::F64 => {
                reduce_run::<f64, f64>(op, &x, &out, &reduced, |l| fold_float(fold, l, count))
            }
            Domain::Int => reduce_run::<i128, i128>(op, &x, &out, &reduced, |l| fold_int(fold, l)),
        },
    }))
}

/// The lanes of a view: for each position of the dims not marked in `along` (row-major), a
/// walk over the marked dims (row-major).
pub(crate) struct Lanes {
    bases: Walk,
    shape: Vec<usize>,
    strides: Vec<isize>,
}

impl Iterator for Lanes {
    type Item = Walk;
    fn next(&mut self) -> Option<Walk> {
        let base = self.bases.next()?;
        Some(Walk::new(&self.shape, &self.strides, base))
    }
}

pub(crate) fn lanes(desc: &TensorDesc, along: &[bool]) -> Lanes {
    let (mut outer, mut outer_strides) = (Vec::new(), Vec::new());
    let (mut shape, mut strides) = (Vec::new(), Vec::new());
    for ((&n, &st), &a) in desc.shape.iter().zip(&desc.strides).zip(along) {
        if a {
            shape.push(n);
            strides.push(st as isize);
        } else {
            outer.push(n);
            outer_strides.push(st as isize);
        }
    }
    Lanes {
        bases: Walk::new(&outer, &outer_strides, desc.offset),
        shape,
        strides,
    }
}

/// Reduces each lane of `x` over the `reduced` dims with `f` (reading in `T`, writing `U`),
/// one output element at a time in the out's row-major order.
fn reduce_run<T: Elem, U: Elem>(
    op: &str,
    x: &TensorDesc,
    out: &TensorDesc,
    reduced: &[bool],
    mut f: impl FnMut(&mut dyn Iterator<Item = T>) -> U,
) -> Result<(), Fault> {
    let mo = map(op, "out", out)?;
    let mut mx = map(op, "self", x)?;
    mx.detach_from(&mo, false);
    let set = mo.setter::<U>();
    // Each lane is gathered along its innermost dim first (a tight loop), then folded.
    let mut values = Vec::new();
    for (mut lane, o) in lanes(x, reduced).zip(Walk::of(out)) {
        let n = lane.len();
        gather(&mx, &mut lane, n, &mut values);
        set(o, f(&mut values.iter().copied()));
    }
    Ok(())
}

/// Any (`all` false) or All of a lane: 1 or 0. NaN counts as true.
fn truth<T: Elem>(mut lane: &mut dyn Iterator<Item = T>, all: bool) -> i128 {
    let zero = T::default();
    let r = if all {
        Iterator::all(&mut lane, |v| v != zero)
    } else {
        Iterator::any(&mut lane, |v| v != zero)
    };
    r as i128
}

/// A float reduction: sums and products in the vector unit's blocked order (`numerics`),
/// extremes propagating NaN.
fn fold_float<T: Real>(fold: Fold, lane: &mut dyn Iterator<Item = T>, count: usize) -> T {
    match fold {
        Fold::Sum | Fold::Mean | Fold::Prod => {
            let op = if matches!(fold, Fold::Prod) {
                Arith::Mul
            } else {
                Arith::Add
            };
            let mut acc = Blocked::new(op);
            lane.for_each(|v| acc.push(v));
            let total = acc.finish();
            if matches!(fold, Fold::Mean) {
                total / T::c(count as f64)
            } else {
                total
            }
        }
        Fold::Max | Fold::Min => {
            let max = matches!(fold, Fold::Max);
            let mut best = if max {
                T::neg_infinity()
            } else {
                T::infinity()
            };
            for v in lane {
                if v.is_nan() {
                    return v;
                }
                best = if max { best.max(v) } else { best.min(v) };
            }
            best
        }
        Fold::Any | Fold::All => unreachable!("truth reductions are folded by `truth`"),
    }
}

/// An integer reduction, exact and wrapped to the out's width when stored.
fn fold_int(fold: Fold, lane: &mut dyn Iterator<Item = i128>) -> i128 {
    match fold {
        Fold::Sum | Fold::Mean => lane.fold(0, i128::wrapping_add),
        Fold::Prod => lane.fold(1, i128::wrapping_mul),
        Fold::Max => lane.max().unwrap_or(i128::MIN),
        Fold::Min => lane.min().unwrap_or(i128::MAX),
        Fold::Any | Fold::All => unreachable!("truth reductions are folded by `truth`"),
    }
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

/// NaN-aware total order: NaN is the largest value (as torch sorts and arg-reduces); integers
/// never compare as NaN (`x != x` is false for them).
#[allow(clippy::eq_op)]
pub(crate) fn order<T: Elem>(a: T, b: T) -> Ordering {
    match (a != a, b != b) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// Index of the first maximum (`max`) or minimum of a lane; a NaN wins at its first place.
#[allow(clippy::eq_op)]
fn arg_best<T: Elem>(lane: impl Iterator<Item = T>, max: bool) -> i128 {
    let mut best: Option<(usize, T)> = None;
    for (k, x) in lane.enumerate() {
        if x != x {
            return k as i128;
        }
        let better = match best {
            None => true,
            Some((_, b)) => {
                let c = order(x, b);
                (max && c == Ordering::Greater) || (!max && c == Ordering::Less)
            }
        };
        if better {
            best = Some((k, x));
        }
    }
    best.map_or(0, |(k, _)| k as i128)
}

/// The dims of a view of rank `rank` marked when they are `dim` (a rank-0 view has none).
pub(crate) fn along(rank: usize, dim: usize) -> Vec<bool> {
    (0..rank).map(|i| i == dim).collect()
}

/// The frame of the operators that give values and their indices along `d` (aclnnSort,
/// aclnnTopk, the running extremes): each lane of `x` read as `T` into `lane` (the one host
/// copy the kernel holds), then `fill(lane, emit)`, where `emit(value, index)` writes the
/// matching lanes of `values` (x's dtype) and `indices` (integers) position by position.
pub(crate) fn value_index_lanes<T: Elem>(
    op: &str,
    x: &TensorDesc,
    d: usize,
    values: &TensorDesc,
    indices: &TensorDesc,
    mut fill: impl FnMut(&[T], &mut dyn FnMut(T, i128)),
) -> Result<(), Fault> {
    let (mv, mi) = (
        map(op, "valuesOut", values)?,
        map(op, "indicesOut", indices)?,
    );
    let mut mx = map(op, "self", x)?;
    mx.detach_from(&mv, false);
    mx.detach_from(&mi, false);
    let (get, set_v, set_i) = (mx.getter::<T>(), mv.setter::<T>(), mi.setter::<i128>());
    let marked = along(x.shape.len(), d);
    let lanes = lanes(x, &marked)
        .zip(lanes(values, &marked))
        .zip(lanes(indices, &marked));
    let mut lane: Vec<T> = Vec::new();
    for ((lx, mut lv), mut li) in lanes {
        lane.clear();
        lane.extend(lx.map(&get));
        fill(&lane, &mut |v, k| {
            if let (Some(o), Some(p)) = (lv.next(), li.next()) {
                set_v(o, v);
                set_i(p, k);
            }
        });
    }
    Ok(())
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
                let marked = along(x.shape.len(), d);
                match Domain::of(&[x.dtype]) {
                    Domain::F32 => {
                        reduce_run::<f32, i128>(op, &x, &out, &marked, |l| arg_best(l, max))
                    }
                    Domain::F64 => {
                        reduce_run::<f64, i128>(op, &x, &out, &marked, |l| arg_best(l, max))
                    }
                    Domain::Int => {
                        reduce_run::<i128, i128>(op, &x, &out, &marked, |l| arg_best(l, max))
                    }
                }
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

/// Running sum or product along a lane, accumulated in the compute type (f32 for F16/BF16,
/// each running value rounded once when stored).
fn scan(op: &'static str, x: TensorDesc, d: usize, out: TensorDesc, product: bool) -> Kernel {
    Arc::new(move || match Domain::of(&[x.dtype, out.dtype]) {
        Domain::F32 => scan_run::<f32>(op, &x, d, &out, float_step(product)),
        Domain::F64 => scan_run::<f64>(op, &x, d, &out, float_step(product)),
        Domain::Int => scan_run::<i128>(op, &x, d, &out, |acc, v| match acc {
            None => v,
            Some(a) if product => a.wrapping_mul(v),
            Some(a) => a.wrapping_add(v),
        }),
    })
}

fn float_step<T: Real>(product: bool) -> impl Fn(Option<T>, T) -> T {
    move |acc, v| match acc {
        None => v,
        Some(a) if product => a * v,
        Some(a) => a + v,
    }
}

fn scan_run<T: Elem>(
    op: &str,
    x: &TensorDesc,
    d: usize,
    out: &TensorDesc,
    step: impl Fn(Option<T>, T) -> T,
) -> Result<(), Fault> {
    let mo = map(op, "out", out)?;
    let mut mx = map(op, "self", x)?;
    mx.detach_from(&mo, false);
    let (get, set) = (mx.getter::<T>(), mo.setter::<T>());
    let marked = along(x.shape.len(), d);
    for (lx, lo) in lanes(x, &marked).zip(lanes(out, &marked)) {
        let mut acc = None;
        for (i, o) in lx.zip(lo) {
            let v = step(acc, get(i));
            acc = Some(v);
            set(o, v);
        }
    }
    Ok(())
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
            Arc::new(move || match Domain::of(&[x.dtype]) {
                Domain::F32 => running_run::<f32>(op, &x, d, &vo, &io, max),
                Domain::F64 => running_run::<f64>(op, &x, d, &vo, &io, max),
                Domain::Int => running_run::<i128>(op, &x, d, &vo, &io, max),
            }) as Kernel,
        ))
    })
}

#[allow(clippy::eq_op)]
fn running_run<T: Elem>(
    op: &str,
    x: &TensorDesc,
    d: usize,
    values: &TensorDesc,
    indices: &TensorDesc,
    max: bool,
) -> Result<(), Fault> {
    value_index_lanes::<T>(op, x, d, values, indices, |lane, emit| {
        let mut best: Option<(T, i128)> = None;
        for (k, &a) in lane.iter().enumerate() {
            let take = match best {
                None => true,
                // NaN wins and stays; ties move to the latest index.
                Some((b, _)) => a != a || (b == b && if max { a >= b } else { a <= b }),
            };
            if take {
                best = Some((a, k as i128));
            }
            let (bv, bk) = best.expect("set on the first element");
            emit(bv, bk);
        }
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
            Arc::new(move || match Domain::of(&[x.dtype, out.dtype]) {
                Domain::F64 => softmax_run::<f64>(op, &x, d, &out, log),
                _ => softmax_run::<f32>(op, &x, d, &out, log),
            }) as Kernel,
        ))
    })
}

/// Softmax (or log-softmax) of each lane in `T`: the maximum, the blocked sum of the shifted
/// exponentials, then each output.
fn softmax_run<T: Real>(
    op: &str,
    x: &TensorDesc,
    d: usize,
    out: &TensorDesc,
    log: bool,
) -> Result<(), Fault> {
    let mo = map(op, "out", out)?;
    let mut mx = map(op, "self", x)?;
    mx.detach_from(&mo, false);
    let (get, set) = (mx.getter::<T>(), mo.setter::<T>());
    let marked = along(x.shape.len(), d);
    let mut sum = Blocked::new(Arith::Add);
    for (lx, lo) in lanes(x, &marked).zip(lanes(out, &marked)) {
        let m = lx.clone().map(&get).fold(T::neg_infinity(), T::max);
        lx.clone().for_each(|i| sum.push((get(i) - m).exp()));
        let z = sum.finish();
        for (i, o) in lx.zip(lo) {
            let v = get(i) - m;
            set(o, if log { v - z.ln() } else { v.exp() / z });
        }
    }
    Ok(())
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
            Arc::new(move || match Domain::of(&[x.dtype]) {
                Domain::F32 => sort_run::<f32>(&x, d, descending, &vo, &io),
                Domain::F64 => sort_run::<f64>(&x, d, descending, &vo, &io),
                Domain::Int => sort_run::<i128>(&x, d, descending, &vo, &io),
            }) as Kernel,
        ))
    })
}

/// Sorts each lane stably.
fn sort_run<T: Elem>(
    x: &TensorDesc,
    d: usize,
    descending: bool,
    values: &TensorDesc,
    indices: &TensorDesc,
) -> Result<(), Fault> {
    let mut keyed: Vec<(T, i128)> = Vec::new();
    value_index_lanes::<T>("aclnnSort", x, d, values, indices, |lane, emit| {
        keyed.clear();
        keyed.extend(lane.iter().enumerate().map(|(k, &v)| (v, k as i128)));
        keyed.sort_by(|a, b| {
            let c = order(a.0, b.0);
            if descending {
                c.reverse()
            } else {
                c
            }
        });
        for &(v, k) in &keyed {
            emit(v, k);
        }
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
