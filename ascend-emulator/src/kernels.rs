//! Emulated kernels: what each operator computes once its stream reaches it, streaming over
//! its views with the numerics of `numerics`. Validation of shapes happens here too, at phase
//! one, so that bad launches fail with aclnn's status.

use super::counters::CubeOperands;
use super::fault::{fault, Fault};
use super::machine::for_ranges;
use super::meta::Kernel;
use super::meta::{ScalarValue, TensorDesc, MAX_RANK};
use super::numerics::{cube_operands, element, int32_to_int8, round_to, Domain, Elem, Real};
use super::ops::invalid;
use super::reduce::normalize_dim;
use super::view::{
    broadcast_shape, copy_elements, gather, map, native_run, put_f32, take_f32, Walk, STREAM_CHUNK,
};
use ascend_acl::dtype::DataType;
use ascend_acl::types::status::ACL_ERROR_RT_AICORE_EXCEPTION;
use std::sync::Arc;

pub(crate) fn same_shape(op: &str, a: &TensorDesc, out: &TensorDesc) -> Result<(), Fault> {
    if a.shape == out.shape {
        Ok(())
    } else {
        Err(invalid(
            op,
            format!(
                "self shape {:?} differs from out shape {:?}",
                a.shape, out.shape
            ),
        ))
    }
}

/// Copy with broadcast and dtype conversion (Cast, InplaceCopy), element by element with
/// aclnnCast's rules (`numerics`): floats go through f64 (exact for every float dtype), integers
/// through i128 (exact for every integer dtype, U64 included).
pub(crate) fn copy(op: &'static str, src: TensorDesc, dst: TensorDesc) -> Kernel {
    Arc::new(move || {
        let d = map(op, "dst", &dst)?;
        let mut s = map(op, "src", &src)?;
        s.detach_from(&d, true);
        if src.dtype == dst.dtype {
            return copy_elements(&s, &d);
        }
        let from = Walk::broadcast(&src, &dst.shape)?;
        let to = Walk::of(&dst);
        match (src.dtype, dst.dtype) {
            (DataType::I32, DataType::I8) => {
                let (get, set) = (s.getter::<i128>(), d.setter::<i128>());
                from.zip(to)
                    .for_each(|(f, t)| set(t, int32_to_int8(get(f) as i32) as i128));
            }
            (x, _) if x.is_float() => {
                let (get, set) = (s.getter::<f64>(), d.setter::<f64>());
                from.zip(to).for_each(|(f, t)| set(t, get(f)));
            }
            _ => {
                let (get, set) = (s.getter::<i128>(), d.setter::<i128>());
                from.zip(to).for_each(|(f, t)| set(t, get(f)));
            }
        }
        Ok(())
    })
}

pub(crate) fn fill(op: &'static str, dst: TensorDesc, value: f64) -> Kernel {
    fill_scalar(op, dst, ScalarValue::Float(value))
}

/// Writes one value everywhere: floats rounded to the dtype (converted as aclnnCast does for
/// integer dtypes), integers wrapped to its width.
pub(crate) fn fill_scalar(op: &'static str, dst: TensorDesc, value: ScalarValue) -> Kernel {
    Arc::new(move || {
        let bytes = match value {
            ScalarValue::Float(v) => element(dst.dtype, round_to(dst.dtype, v)),
            ScalarValue::Int(v) => element(dst.dtype, v as i128),
        };
        map(op, "selfRef", &dst)?.fill_bytes(&bytes);
        Ok(())
    })
}

/// The elementwise arithmetic family.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Binary {
    /// `self + alpha * other` (Sub is Add with `-alpha`).
    Add(f64),
    Mul,
    /// Division with aclnnDivMod's mode: 0 true, 1 trunc, 2 floor.
    Div(i32),
}

pub(crate) enum Operand {
    Tensor(TensorDesc),
    Scalar(ScalarValue),
}

pub(crate) fn check_binary(
    op: &str,
    a: &TensorDesc,
    b: &TensorDesc,
    out: &TensorDesc,
    f: Binary,
) -> Result<(), Fault> {
    let shape = broadcast_shape(&a.shape, &b.shape).ok_or_else(|| {
        invalid(
            op,
            format!("shapes {:?} and {:?} do not broadcast", a.shape, b.shape),
        )
    })?;
    if shape != out.shape {
        return Err(invalid(
            op,
            format!(
                "out shape {:?} is not the broadcast shape {shape:?}",
                out.shape
            ),
        ));
    }
    let float_in = a.dtype.is_float() || b.dtype.is_float();
    if !out.dtype.is_float() && (float_in || matches!(f, Binary::Div(0))) {
        return Err(invalid(
            op,
            format!(
                "the result is a float type and cannot be written to a {} out",
                out.dtype
            ),
        ));
    }
    Ok(())
}

/// Integer scalars of Adds/Subs/Muls/DivMods pass through f32 inside the operator (aclnn docs:
/// precision is lost beyond 2^24), so callers needing exact integers must use tensor operands.
fn int_scalar(s: ScalarValue) -> i64 {
    match s {
        ScalarValue::Int(v) => v as f32 as i64,
        ScalarValue::Float(v) => v as f32 as i64,
    }
}

/// `binary_run::<T>` with the float arithmetic of `f`, each step rounded to `T` (f32 for
/// F32/F16/BF16): one closure per operation, so each element loop is compiled for it alone.
macro_rules! float_binary_run {
    ($t:ty, $f:expr, $($arg:expr),+) => {
        match $f {
            Binary::Add(alpha) => {
                let alpha = <$t>::c(alpha);
                binary_run::<$t>($($arg),+, move |x, y| x + alpha * y)
            }
            Binary::Mul => binary_run::<$t>($($arg),+, |x, y| x * y),
            Binary::Div(0) => binary_run::<$t>($($arg),+, |x, y| x / y),
            Binary::Div(1) => binary_run::<$t>($($arg),+, |x: $t, y: $t| (x / y).trunc()),
            Binary::Div(_) => binary_run::<$t>($($arg),+, |x: $t, y: $t| (x / y).floor()),
        }
    };
}

pub(crate) fn binary(
    op: &'static str,
    a: TensorDesc,
    b: Operand,
    out: TensorDesc,
    f: Binary,
) -> Kernel {
    Arc::new(move || {
        let mut dtypes = vec![a.dtype, out.dtype];
        if let Operand::Tensor(t) = &b {
            dtypes.push(t.dtype);
        }
        if !out.dtype.is_float() && matches!(f, Binary::Div(_)) {
            no_zero_divisor(op, &b)?;
        }
        // check_binary made a float input imply a float out.
        match (out.dtype.is_float(), Domain::of(&dtypes)) {
            (true, Domain::F64) => float_binary_run!(f64, f, op, &a, &b, &out),
            (true, _) => float_binary_run!(f32, f, op, &a, &b, &out),
            (false, _) => binary_run::<i128>(op, &a, &b, &out, int_binary(f)),
        }
    })
}

/// Integer division by zero has no documented result on Atlas A2 (`aclnn-ops.tsv`, the
/// aclnnDivMod row, says nothing of it). STRICTER ASSUMPTION: the emulated NPU stops with an AI
/// Core error naming the element, so no result can rely on a value the hardware does not
/// promise; the backend rejects a zero scalar divisor before launch.
fn no_zero_divisor(op: &str, b: &Operand) -> Result<(), Fault> {
    let zero_at = match b {
        Operand::Scalar(s) => (int_scalar(*s) == 0).then(Vec::new),
        Operand::Tensor(t) => {
            let mb = map(op, "other", t)?;
            let get = mb.getter::<i128>();
            let mut pos = vec![0; t.shape.len()];
            Walk::of(t)
                .enumerate()
                .find(|&(_, i)| get(i) == 0)
                .map(|(p, _)| {
                    super::index::unravel(p, &t.shape, &mut pos);
                    pos.clone()
                })
        }
    };
    match zero_at {
        None => Ok(()),
        Some(at) => Err(fault(
            ACL_ERROR_RT_AICORE_EXCEPTION,
            format!("{op} kernel: integer division by zero (other{at:?} = 0)"),
        )),
    }
}

/// The integer arithmetic of the family, wrapping (stored in the out's width).
fn int_binary(f: Binary) -> impl Fn(i128, i128) -> i128 {
    move |x, y| match f {
        Binary::Add(alpha) => x.wrapping_add((alpha as i64 as i128).wrapping_mul(y)),
        Binary::Mul => x.wrapping_mul(y),
        // Unreachable for a zero divisor: `no_zero_divisor` faulted first.
        _ if y == 0 => 0,
        Binary::Div(2) => {
            let q = x / y;
            if x % y != 0 && ((x < 0) != (y < 0)) {
                q - 1
            } else {
                q
            }
        }
        Binary::Div(_) => x / y,
    }
}

/// Streams `out = f(self, other)` element by element in the compute type `T`.
fn binary_run<T: Elem>(
    op: &str,
    a: &TensorDesc,
    b: &Operand,
    out: &TensorDesc,
    f: impl Fn(T, T) -> T + Sync,
) -> Result<(), Fault> {
    let mo = map(op, "out", out)?;
    let mut ma = map(op, "self", a)?;
    ma.detach_from(&mo, true);
    let (walk_a, walk_o) = (Walk::broadcast(a, &out.shape)?, Walk::of(out));
    let other = match b {
        Operand::Tensor(t) => {
            let mut mb = map(op, "other", t)?;
            mb.detach_from(&mo, true);
            let walk = Walk::broadcast(t, &out.shape)?;
            Ok((mb, walk))
        }
        Operand::Scalar(s) => Err(if out.dtype.is_float() {
            T::scalar(*s, out.dtype)
        } else {
            T::scalar(ScalarValue::Int(int_scalar(*s)), out.dtype)
        }),
    };
    let dense = (
        native_run::<T>(&ma, &walk_a),
        native_run::<T>(&mo, &walk_o),
        match &other {
            Ok((mb, walk)) => native_run::<T>(mb, walk).map(Ok),
            Err(y) => Some(Err(*y)),
        },
    );
    if let (Some(pa), Some(po), Some(pb)) = dense {
        // Dense operands stored as the compute type: the same arithmetic without per-element
        // dispatch (addresses, not slices, since out may be self), in ranges over the host
        // threads; element i is read and written by one thread only.
        let (pa, po, pb) = (pa as usize, po as usize, pb.map(|p| p as usize));
        for_ranges(out.numel(), |range| {
            let (pa, po) = (pa as *const T, po as *mut T);
            // SAFETY: `native_run` checked that the elements from each pointer lie inside
            // their mapped views; unaligned accesses are allowed; the ranges are disjoint.
            unsafe {
                match pb {
                    Ok(pb) => {
                        let pb = pb as *const T;
                        for i in range {
                            let (x, y) = (pa.add(i).read_unaligned(), pb.add(i).read_unaligned());
                            po.add(i).write_unaligned(f(x, y));
                        }
                    }
                    Err(y) => {
                        for i in range {
                            po.add(i).write_unaligned(f(pa.add(i).read_unaligned(), y));
                        }
                    }
                }
            }
        });
        return Ok(());
    }
    // Broadcast or strided operands: in chunks, each operand gathered along its innermost dim
    // (inputs that overlap the out other than element for element were detached above).
    let set = mo.setter::<T>();
    let (mut walk_a, mut walk_o) = (walk_a, walk_o);
    let mut other = other;
    let (mut xs, mut ys) = (
        Vec::with_capacity(STREAM_CHUNK),
        Vec::with_capacity(STREAM_CHUNK),
    );
    while walk_o.len() > 0 {
        let n = walk_o.len().min(STREAM_CHUNK);
        gather(&ma, &mut walk_a, n, &mut xs);
        match &mut other {
            Ok((mb, wb)) => gather(mb, wb, n, &mut ys),
            Err(y) => {
                ys.clear();
                ys.resize(n, *y);
            }
        }
        let mut k = 0;
        walk_o.take_each(n, |o| {
            set(o, f(xs[k], ys[k]));
            k += 1;
        });
    }
    Ok(())
}

/// Values of a transposed mat2 read per band when the emulated matmul lays it out (64 KB of f32).
const TRANSPOSE_BAND: usize = 16 << 10;

/// torch.matmul semantics for ranks 1 to 6, computed on f32 as the cube unit accumulates.
pub(crate) fn matmul(
    op: &'static str,
    a: TensorDesc,
    b: TensorDesc,
    out: TensorDesc,
    cube: i8,
) -> Result<Kernel, Fault> {
    matmul_add(op, a, b, out, None, cube)
}

/// The `beta * self` term of aclnnAddmm, and the `alpha` that scales the product.
pub(crate) struct Addend {
    pub tensor: TensorDesc,
    pub beta: f32,
    pub alpha: f32,
}

/// [`matmul`], plus `beta * self` broadcast onto the product (scaled by `alpha`) before the
/// one rounding to the output type, as aclnnAddmm's epilogue does.
pub(crate) fn matmul_add(
    op: &'static str,
    a: TensorDesc,
    b: TensorDesc,
    out: TensorDesc,
    addend: Option<Addend>,
    cube: i8,
) -> Result<Kernel, Fault> {
    let (ra, rb) = (a.shape.len(), b.shape.len());
    if !(1..=6).contains(&ra) || !(1..=6).contains(&rb) {
        return Err(invalid(
            op,
            format!("ranks {ra} and {rb} are outside 1..=6"),
        ));
    }
    let mut sa = a.shape.clone();
    let mut sb = b.shape.clone();
    if ra == 1 {
        sa.insert(0, 1);
    }
    if rb == 1 {
        sb.push(1);
    }
    let (m, k) = (sa[sa.len() - 2], sa[sa.len() - 1]);
    let (k2, n) = (sb[sb.len() - 2], sb[sb.len() - 1]);
    if k != k2 {
        return Err(invalid(
            op,
            format!(
                "self {:?} and mat2 {:?} disagree on the inner dimension",
                a.shape, b.shape
            ),
        ));
    }
    let batch = broadcast_shape(&sa[..sa.len() - 2], &sb[..sb.len() - 2]).ok_or_else(|| {
        invalid(
            op,
            format!(
                "batch dims of {:?} and {:?} do not broadcast",
                a.shape, b.shape
            ),
        )
    })?;
    let mut expect = batch.clone();
    if ra > 1 {
        expect.push(m);
    }
    if rb > 1 {
        expect.push(n);
    }
    if out.shape != expect {
        return Err(invalid(
            op,
            format!("out shape {:?} should be {expect:?}", out.shape),
        ));
    }
    if let Some(add) = &addend {
        let fits = add.tensor.shape.len() <= expect.len()
            && add
                .tensor
                .shape
                .iter()
                .rev()
                .zip(expect.iter().rev())
                .all(|(&s, &e)| s == e || s == 1);
        if !fits {
            return Err(invalid(
                op,
                format!(
                    "self {:?} does not broadcast to {expect:?}",
                    add.tensor.shape
                ),
            ));
        }
    }
    let nb: usize = batch.iter().product();
    // f32 operands run at the f32 rate unless cubeMathType rounds them to HF32/f16.
    let operands = if a.dtype == DataType::F32 && cube == 0 {
        CubeOperands::F32
    } else {
        CubeOperands::Half
    };
    Ok(Arc::new(move || {
        super::counters::cube(nb * m, n, k, operands);
        let mut full_a = batch.clone();
        full_a.extend([m, k]);
        let mut full_b = batch.clone();
        full_b.extend([k, n]);
        let mut va = a.clone();
        va.shape = sa.clone();
        va.strides = if ra == 1 {
            vec![0, a.strides[0]]
        } else {
            a.strides.clone()
        };
        let mut vb = b.clone();
        vb.shape = sb.clone();
        vb.strides = if rb == 1 {
            vec![b.strides[0], 0]
        } else {
            b.strides.clone()
        };
        let mo = map(op, "out", &out)?;
        let mut ma = map(op, "self", &va)?;
        let mut mb = map(op, "mat2", &vb)?;
        ma.detach_from(&mo, false);
        mb.detach_from(&mo, false);
        let mc = match &addend {
            Some(add) => {
                let mut mc = map(op, "self", &add.tensor)?;
                mc.detach_from(&mo, false);
                Some((mc, Walk::broadcast(&add.tensor, &out.shape)?, add))
            }
            None => None,
        };
        // A transposed mat2 (a weight kept `[n, k]` in memory) is read in its memory order, a
        // band of rows at a time, and laid out `[k, n]` here: the same values, without an
        // element-at-a-time strided gather, and the same product as a contiguous mat2 (gemm
        // sees one layout, so its summation order cannot depend on the operand's).
        let rb = vb.shape.len();
        let b_transposed = k > 1 && n > 1 && vb.strides[rb - 2] == 1 && vb.strides[rb - 1] == k;
        let (vb, full_b) = if b_transposed {
            let (mut vt, mut ft) = (vb.clone(), full_b.clone());
            vt.shape.swap(rb - 2, rb - 1);
            vt.strides.swap(rb - 2, rb - 1);
            let r = ft.len();
            ft.swap(r - 2, r - 1);
            (vt, ft)
        } else {
            (vb, full_b)
        };
        let mut band = Vec::new();
        // One batch matrix at a time: the walks list every batch's elements in turn.
        let (mut wa, mut wb) = (
            Walk::broadcast(&va, &full_a)?,
            Walk::broadcast(&vb, &full_b)?,
        );
        let mut wo = Walk::of(&out);
        let (mut x, mut y, mut z) = (
            Vec::with_capacity(m * k),
            Vec::with_capacity(k * n),
            vec![0f32; m * n],
        );
        let mut mc = mc;
        for _ in 0..nb {
            take_f32(&mut x, &ma, &mut wa, m * k);
            if b_transposed {
                y.clear();
                y.resize(k * n, 0.0);
                // Rows of the memory-order `[n, k]` matrix, a band that stays in cache.
                let rows = (TRANSPOSE_BAND / k).max(1);
                for r0 in (0..n).step_by(rows) {
                    let rows = rows.min(n - r0);
                    take_f32(&mut band, &mb, &mut wb, rows * k);
                    for c in 0..k {
                        for r in 0..rows {
                            y[c * n + r0 + r] = band[r * k + c];
                        }
                    }
                }
            } else {
                take_f32(&mut y, &mb, &mut wb, k * n);
            }
            cube_operands(&mut x, a.dtype, cube);
            cube_operands(&mut y, b.dtype, cube);
            super::nn::gemm(m, n, k, &mut z, (&x, k, 1), (&y, n, 1), false);
            if let Some((mc, wc, add)) = &mut mc {
                let get_c = mc.getter::<f32>();
                for (z, c) in z.iter_mut().zip(wc.by_ref()) {
                    *z = add.alpha * *z + add.beta * get_c(c);
                }
            }
            put_f32(&mo, &mut wo, &z);
        }
        Ok(())
    }))
}

pub(crate) fn cat(
    op: &'static str,
    inputs: Vec<TensorDesc>,
    dim: i64,
    out: TensorDesc,
) -> Result<Kernel, Fault> {
    let rank = out.shape.len();
    let d = normalize_dim(op, dim, rank)?;
    let mut total = 0;
    for (i, t) in inputs.iter().enumerate() {
        let same_rest =
            t.shape.len() == rank && (0..rank).all(|j| j == d || t.shape[j] == out.shape[j]);
        if !same_rest {
            return Err(invalid(
                op,
                format!(
                    "tensors[{i}] shape {:?} does not fit out {:?} along dim {d}",
                    t.shape, out.shape
                ),
            ));
        }
        if t.dtype != out.dtype {
            return Err(invalid(
                op,
                format!(
                    "tensors[{i}] dtype {} differs from out dtype {}",
                    t.dtype, out.dtype
                ),
            ));
        }
        total += t.shape[d];
    }
    if rank > MAX_RANK || total != out.shape.get(d).copied().unwrap_or(0) {
        return Err(invalid(
            op,
            format!(
                "inputs sum to {total} along dim {d}, out has {:?}",
                out.shape
            ),
        ));
    }
    Ok(Arc::new(move || {
        let mut start = 0;
        for t in &inputs {
            let mut part = out.clone();
            part.shape[d] = t.shape[d];
            part.offset += start * out.strides[d];
            start += t.shape[d];
            if part.numel() > 0 {
                let dst = map(op, "out", &part)?;
                let mut src = map(op, "tensors", t)?;
                src.detach_from(&dst, false);
                copy_elements(&src, &dst)?;
            }
        }
        Ok(())
    }))
}

pub(crate) fn flip(
    op: &'static str,
    x: TensorDesc,
    dims: &[i64],
    out: TensorDesc,
) -> Result<Kernel, Fault> {
    same_shape(op, &x, &out)?;
    if x.dtype != out.dtype {
        return Err(invalid(
            op,
            format!(
                "out dtype {} differs from self dtype {}",
                out.dtype, x.dtype
            ),
        ));
    }
    let rank = x.shape.len();
    let mut flipped = vec![false; rank];
    for &d in dims {
        flipped[normalize_dim(op, d, rank)?] = true;
    }
    Ok(Arc::new(move || {
        let dst = map(op, "out", &out)?;
        let mut src = map(op, "self", &x)?;
        src.detach_from(&dst, false);
        // The source walked backwards along the reversed dims.
        let mut offset = x.offset as isize;
        let strides: Vec<isize> = (0..rank)
            .map(|i| {
                let s = x.strides[i] as isize;
                if flipped[i] && x.shape[i] > 0 {
                    offset += (x.shape[i] as isize - 1) * s;
                    -s
                } else {
                    s
                }
            })
            .collect();
        let from = Walk::new(&x.shape, &strides, offset as usize);
        for (f, t) in from.zip(Walk::of(&out)) {
            dst.copy_from(t, &src, f);
        }
        Ok(())
    }))
}
