//! Emulated indexing operators: gather, scatter-add, index select and add, repeat, nonzero
//! and the cross product. Indices are checked when the kernel runs; an index out of range is an
//! AI Core fault, as on hardware.
#![allow(missing_docs, non_snake_case, clippy::missing_safety_doc)]

use super::elementwise::checked_index;
use super::fault::Fault;
use super::meta::Kernel;
use super::meta::{contiguous_strides, int_array_arg, scalar_arg, tensor_arg, TensorDesc};
use super::numerics::{Domain, Elem, Real, CHUNK};
use super::ops::{check_dtype, invalid, phase1, phase2_entry_points, Ex, Ws};
use super::reduce::normalize_dim;
use super::view::{broadcast_shape, broadcast_strides, copy_elements, map, Mapped, Walk};
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
/// aclnnInplaceIndexCopy on A2 (aclnn-ops.tsv; its complex dtypes are not emulated).
const INDEX_COPY: &[DataType] = &[F32, BF16, F16, I32, I64, I16, I8, U8, F64, Bool];

/// Row-major multi-index of position `p` in `shape`.
pub(crate) fn unravel(mut p: usize, shape: &[usize], out: &mut [usize]) {
    for d in (0..shape.len()).rev() {
        out[d] = p % shape[d].max(1);
        p /= shape[d].max(1);
    }
}

/// Storage offsets of `desc`'s elements at the positions of `shape` (row-major, each position
/// inside `desc`'s shape) with the coordinate along `dim` taken as 0: the indexed dim's
/// contribution is added per element.
fn bases(desc: &TensorDesc, shape: &[usize], dim: usize) -> Walk {
    let strides: Vec<isize> = desc
        .strides
        .iter()
        .enumerate()
        .map(|(k, &s)| if k == dim { 0 } else { s as isize })
        .collect();
    Walk::new(shape, &strides, desc.offset)
}

/// The checked indices of a 1-D index tensor, as element offsets along a dim of `size`
/// elements with `stride` (the index operand held whole, one machine word per index).
fn index_offsets(op: &str, idx: &Mapped, size: usize, stride: usize) -> Result<Vec<usize>, Fault> {
    let get = idx.getter::<i128>();
    Walk::of(&idx.desc)
        .map(|i| Ok(checked_index(op, as_index(get(i)), size)? * stride))
        .collect()
}

/// Reads `v` as the kernels of `op` read an index (checked when used).
fn as_index(v: i128) -> i64 {
    v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// Adds (or with `mul`, multiplies) `v` into element `o` of `out`, in the out's compute type;
/// F16/BF16 sums round at each step, as accumulating into global memory does.
fn accumulate_into(
    out: &Mapped,
    src: &Mapped,
    pairs: impl Iterator<Item = (usize, usize)>,
    alpha: f64,
    mul: bool,
) {
    match Domain::of(&[out.desc.dtype, src.desc.dtype]) {
        Domain::F32 => accumulate_float::<f32>(out, src, pairs, alpha, mul),
        Domain::F64 => accumulate_float::<f64>(out, src, pairs, alpha, mul),
        Domain::Int => {
            let (get_o, get_s, set) = (
                out.getter::<i128>(),
                src.getter::<i128>(),
                out.setter::<i128>(),
            );
            let alpha = alpha as i64 as i128;
            for (t, f) in pairs {
                let v = get_s(f);
                set(
                    t,
                    if mul {
                        get_o(t).wrapping_mul(v)
                    } else {
                        get_o(t).wrapping_add(alpha.wrapping_mul(v))
                    },
                );
            }
        }
    }
}

fn accumulate_float<T: Real>(
    out: &Mapped,
    src: &Mapped,
    pairs: impl Iterator<Item = (usize, usize)>,
    alpha: f64,
    mul: bool,
) {
    let (get_o, get_s, set) = (out.getter::<T>(), src.getter::<T>(), out.setter::<T>());
    let alpha = T::c(alpha);
    for (t, f) in pairs {
        let v = get_s(f);
        set(
            t,
            if mul {
                get_o(t) * v
            } else {
                get_o(t) + alpha * v
            },
        );
    }
}

/// `out` starts as a copy of `self` (nothing to do when they are the same view).
fn start_from(op: &str, x: &TensorDesc, out: &Mapped) -> Result<(), Fault> {
    let mut mx = map(op, "self", x)?;
    mx.detach_from(out, true);
    copy_elements(&mx, out)
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
                let mo = map(OP, "out", &out)?;
                let (mut mx, mut mi) = (map(OP, "self", &x)?, map(OP, "index", &idx)?);
                mx.detach_from(&mo, false);
                mi.detach_from(&mo, false);
                let get_i = mi.getter::<i128>();
                let steps = Walk::of(&out)
                    .zip(Walk::of(&idx))
                    .zip(bases(&x, &idx.shape, d));
                for ((o, i), b) in steps {
                    let k = checked_index(OP, as_index(get_i(i)), x.shape[d])?;
                    mo.copy_from(o, &mx, b + k * x.strides[d]);
                }
                Ok(())
            }) as Kernel,
        ))
    })
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
            Arc::new(move || scatter_run(OP, &x, d, &idx, &src, &out, 1)) as Kernel,
        ))
    })
}

/// Scatter of `src` into a copy of `self` along `d` at `index`: `reduce` 0 assigns (later
/// writes win), 1 adds, 2 multiplies (in index order, each step stored in the out's dtype).
fn scatter_run(
    op: &str,
    x: &TensorDesc,
    d: usize,
    idx: &TensorDesc,
    src: &TensorDesc,
    out: &TensorDesc,
    reduce: i64,
) -> Result<(), Fault> {
    let mo = map(op, "out", out)?;
    let (mut ms, mut mi) = (map(op, "src", src)?, map(op, "index", idx)?);
    ms.detach_from(&mo, false);
    mi.detach_from(&mo, false);
    start_from(op, x, &mo)?;
    let get_i = mi.getter::<i128>();
    let from = bases(src, &idx.shape, usize::MAX);
    let mut pairs = Vec::with_capacity(CHUNK);
    let mut steps = Walk::of(idx).zip(bases(out, &idx.shape, d)).zip(from);
    loop {
        // Indices are checked a chunk at a time, before that chunk's writes.
        pairs.clear();
        for ((i, t), f) in steps.by_ref().take(CHUNK) {
            let k = checked_index(op, as_index(get_i(i)), x.shape[d])?;
            pairs.push((t + k * out.strides[d], f));
        }
        if pairs.is_empty() {
            return Ok(());
        }
        match reduce {
            0 => pairs.iter().for_each(|&(t, f)| mo.copy_from(t, &ms, f)),
            _ => accumulate_into(&mo, &ms, pairs.iter().copied(), 1.0, reduce == 2),
        }
    }
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
            Arc::new(move || scatter_run(OP, &x, d, &idx, &src, &out, reduce)) as Kernel,
        ))
    })
}

/// `selfRef.index_copy_(dim, index, source)`: the slices of `source` written into `selfRef`'s
/// own buffer at `index` along `dim` (aclnn-ops.tsv, aclnnInplaceIndexCopy). Only the written
/// slices count as moved. Repeated indices: CANN does not say which write wins; the emulation
/// keeps the last (callers that need one answer pass distinct indices).
pub unsafe extern "C" fn aclnnInplaceIndexCopyGetWorkspaceSize(
    self_ref: *mut aclTensor,
    dim: i64,
    index: *const aclTensor,
    source: *const aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnInplaceIndexCopy";
    phase1(OP, ws, ex, || {
        let (x, idx, src) = (
            tensor_arg(OP, "selfRef", self_ref)?,
            tensor_arg(OP, "index", index)?,
            tensor_arg(OP, "source", source)?,
        );
        check_dtype(OP, "selfRef", &x, INDEX_COPY)?;
        check_dtype(OP, "index", &idx, INDEX)?;
        let d = normalize_dim(OP, dim, x.shape.len())?;
        let mut expect = x.shape.clone();
        if idx.shape.len() > 1 || expect.is_empty() {
            return Err(invalid(OP, "index must be 1-D and selfRef at least 1-D"));
        }
        expect[d] = idx.numel();
        if src.shape != expect || src.dtype != x.dtype {
            return Err(invalid(
                OP,
                format!(
                    "source {} should be {expect:?} of selfRef's dtype ({})",
                    src.describe(),
                    x.describe()
                ),
            ));
        }
        let mut written = x.clone();
        written.shape = src.shape.clone();
        super::counters::note_part(&x, &written);
        Ok((
            0,
            Arc::new(move || {
                let mo = map(OP, "selfRef", &x)?;
                let (mut ms, mut mi) = (map(OP, "source", &src)?, map(OP, "index", &idx)?);
                ms.detach_from(&mo, false);
                mi.detach_from(&mo, false);
                let along = index_offsets(OP, &mi, x.shape[d], x.strides[d])?;
                for (t, f) in selected(&x, &src.shape, d, &along).zip(Walk::of(&src)) {
                    mo.copy_from(t, &ms, f);
                }
                Ok(())
            }) as Kernel,
        ))
    })
}

/// For each position of `shape` (row-major), the offset in `desc` with the coordinate along
/// `d` replaced by `along[coordinate]` (an element offset along `d`).
fn selected<'a>(
    desc: &TensorDesc,
    shape: &[usize],
    d: usize,
    along: &'a [usize],
) -> impl Iterator<Item = usize> + 'a {
    let inner: usize = shape[d + 1..].iter().product();
    let len = shape[d];
    bases(desc, shape, d)
        .enumerate()
        .map(move |(p, b)| b + along[(p / inner.max(1)) % len.max(1)])
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
                let mo = map(OP, "out", &out)?;
                let (mut mx, mut mi) = (map(OP, "self", &x)?, map(OP, "index", &idx)?);
                mx.detach_from(&mo, false);
                mi.detach_from(&mo, false);
                let along = index_offsets(OP, &mi, x.shape[d], x.strides[d])?;
                for (o, f) in Walk::of(&out).zip(selected(&x, &out.shape, d, &along)) {
                    mo.copy_from(o, &mx, f);
                }
                Ok(())
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
                let mo = map(OP, "out", &out)?;
                let (mut ms, mut mi) = (map(OP, "source", &src)?, map(OP, "index", &idx)?);
                ms.detach_from(&mo, false);
                mi.detach_from(&mo, false);
                let along = index_offsets(OP, &mi, x.shape[d], out.strides[d])?;
                start_from(OP, &x, &mo)?;
                let pairs = selected(&out, &src.shape, d, &along).zip(Walk::of(&src));
                accumulate_into(&mo, &ms, pairs, alpha, false);
                Ok(())
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
                let mo = map(OP, "out", &out)?;
                let mut mx = map(OP, "self", &x)?;
                mx.detach_from(&mo, false);
                let mut xs = vec![0; lead];
                xs.extend(&x.strides);
                let mut pos = vec![0; expect.len()];
                for (p, o) in Walk::of(&out).enumerate() {
                    unravel(p, &expect, &mut pos);
                    let f: usize = (0..pos.len()).map(|k| pos[k] % padded[k] * xs[k]).sum();
                    mo.copy_from(o, &mx, x.offset + f);
                }
                Ok(())
            }) as Kernel,
        ))
    })
}

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
                let mut mx = map(OP, "self", &x)?;
                let full = map(OP, "out", &o)?;
                mx.detach_from(&full, false);
                drop(full);
                let nonzero = nonzero_flags(&mx);
                let count = Walk::of(&x).filter(|&i| nonzero(i)).count();
                let mut written = o.clone();
                written.shape = vec![count, rank];
                written.strides = contiguous_strides(&written.shape);
                {
                    let mw = map(OP, "out", &written)?;
                    let set = mw.setter::<i128>();
                    let mut slots = Walk::of(&written);
                    let mut pos = vec![0; rank];
                    for (p, i) in Walk::of(&x).enumerate() {
                        if nonzero(i) {
                            unravel(p, &x.shape, &mut pos);
                            for &c in &pos {
                                set(slots.next().expect("counted"), c as i128);
                            }
                        }
                    }
                }
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
            Arc::new(move || match Domain::of(&[a.dtype, b.dtype, out.dtype]) {
                Domain::F32 => cross_run::<f32>(&a, &b, &out, d, |p, q, r, t| p * q - r * t),
                Domain::F64 => cross_run::<f64>(&a, &b, &out, d, |p, q, r, t| p * q - r * t),
                Domain::Int => cross_run::<i128>(&a, &b, &out, d, |p, q, r, t| {
                    p.wrapping_mul(q).wrapping_sub(r.wrapping_mul(t))
                }),
            }) as Kernel,
        ))
    })
}

/// Which elements of a view are non-zero (NaN counts), read in its exact domain.
fn nonzero_flags(m: &Mapped) -> Box<dyn Fn(usize) -> bool + '_> {
    match Domain::exact(m.desc.dtype) {
        Domain::Int => {
            let get = m.getter::<i128>();
            Box::new(move |i| get(i) != 0)
        }
        _ => {
            let get = m.getter::<f64>();
            Box::new(move |i| get(i) != 0.0)
        }
    }
}

/// `out = self x other` along `d` (size 3), in `T`: `f(p, q, r, t) = p * q - r * t`.
fn cross_run<T: Elem>(
    a: &TensorDesc,
    b: &TensorDesc,
    out: &TensorDesc,
    d: usize,
    f: impl Fn(T, T, T, T) -> T,
) -> Result<(), Fault> {
    const OP: &str = "aclnnLinalgCross";
    let mo = map(OP, "out", out)?;
    let (mut ma, mut mb) = (map(OP, "self", a)?, map(OP, "other", b)?);
    ma.detach_from(&mo, false);
    mb.detach_from(&mo, false);
    let (get_a, get_b, set) = (ma.getter::<T>(), mb.getter::<T>(), mo.setter::<T>());
    let shape = &out.shape;
    let stride = |t: &TensorDesc| -> Result<(Walk, usize), Fault> {
        let s = broadcast_strides(&t.shape, &t.strides, shape)
            .ok_or_else(|| invalid(OP, "shapes do not broadcast"))?;
        let along = s[d];
        let mut zeroed = t.clone();
        zeroed.shape = shape.clone();
        zeroed.strides = s;
        Ok((bases(&zeroed, shape, d), along))
    };
    let ((wa, sa), (wb, sb)) = (stride(a)?, stride(b)?);
    let inner: usize = shape[d + 1..].iter().product();
    for (p, ((o, x), y)) in Walk::of(out).zip(wa).zip(wb).enumerate() {
        let k = (p / inner.max(1)) % 3;
        let (i, j) = ((k + 1) % 3, (k + 2) % 3);
        let v = f(
            get_a(x + i * sa),
            get_b(y + j * sb),
            get_a(x + j * sa),
            get_b(y + i * sb),
        );
        set(o, v);
    }
    Ok(())
}

phase2_entry_points!(
    aclnnGather,
    aclnnScatter,
    aclnnScatterAdd,
    aclnnIndexSelect,
    aclnnIndexAdd,
    aclnnInplaceIndexCopy,
    aclnnRepeat,
    aclnnNonzero,
    aclnnLinalgCross
);
