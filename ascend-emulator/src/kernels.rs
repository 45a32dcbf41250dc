//! Emulated kernels: what each operator computes once its stream reaches it. Validation of
//! shapes happens here too, at phase one, so that bad launches fail with aclnn's status.

use super::fault::Fault;
use super::meta::Kernel;
use super::meta::{ScalarValue, TensorDesc, MAX_RANK};
use super::ops::invalid;
use super::reduce::normalize_dim;
use super::view::{broadcast_shape, map, round_to, Vals};
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

/// Copy with broadcast and dtype conversion (Cast, InplaceCopy).
pub(crate) fn copy(op: &'static str, src: TensorDesc, dst: TensorDesc) -> Kernel {
    Arc::new(move || {
        let (s, d) = (map(op, "src", &src)?, map(op, "dst", &dst)?);
        d.write(s.read(Some(&dst.shape))?)
    })
}

pub(crate) fn fill(op: &'static str, dst: TensorDesc, value: f64) -> Kernel {
    Arc::new(move || map(op, "selfRef", &dst)?.write(Vals::F(vec![value; dst.numel()])))
}

pub(crate) fn fill_scalar(op: &'static str, dst: TensorDesc, value: ScalarValue) -> Kernel {
    Arc::new(move || {
        let n = dst.numel();
        map(op, "selfRef", &dst)?.write(match value {
            ScalarValue::Float(v) => Vals::F(vec![round_to(dst.dtype, v); n]),
            ScalarValue::Int(v) => Vals::I(vec![v; n]),
        })
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

pub(crate) fn binary(
    op: &'static str,
    a: TensorDesc,
    b: Operand,
    out: TensorDesc,
    f: Binary,
) -> Kernel {
    Arc::new(move || {
        let (ma, mo) = (map(op, "self", &a)?, map(op, "out", &out)?);
        let shape = &out.shape;
        if out.dtype.is_float() {
            let x = ma.read(Some(shape))?.into_f64();
            let y = match &b {
                Operand::Tensor(t) => map(op, "other", t)?.read(Some(shape))?.into_f64(),
                Operand::Scalar(s) => vec![round_to(out.dtype, s.as_f64()); x.len()],
            };
            let r = x.iter().zip(&y).map(|(&x, &y)| match f {
                Binary::Add(alpha) => x + alpha * y,
                Binary::Mul => x * y,
                Binary::Div(0) => x / y,
                Binary::Div(1) => (x / y).trunc(),
                Binary::Div(_) => (x / y).floor(),
            });
            mo.write(Vals::F(r.collect()))
        } else {
            let x = ma.read(Some(shape))?.into_i64();
            let y = match &b {
                Operand::Tensor(t) => map(op, "other", t)?.read(Some(shape))?.into_i64(),
                Operand::Scalar(s) => vec![int_scalar(*s); x.len()],
            };
            let r = x.iter().zip(&y).map(|(&x, &y)| match f {
                Binary::Add(alpha) => x.wrapping_add((alpha as i64).wrapping_mul(y)),
                Binary::Mul => x.wrapping_mul(y),
                // Integer division by zero has no documented result; the emulation yields 0.
                _ if y == 0 => 0,
                Binary::Div(2) => {
                    let q = x.wrapping_div(y);
                    if (x % y != 0) && ((x < 0) != (y < 0)) {
                        q - 1
                    } else {
                        q
                    }
                }
                Binary::Div(_) => x.wrapping_div(y),
            });
            mo.write(Vals::I(r.collect()))
        }
    })
}

/// torch.matmul semantics for ranks 1 to 6, computed on f32 as the cube unit accumulates.
pub(crate) fn matmul(
    op: &'static str,
    a: TensorDesc,
    b: TensorDesc,
    out: TensorDesc,
    _cube: i8,
) -> Result<Kernel, Fault> {
    matmul_add(op, a, b, out, None)
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
    Ok(Arc::new(move || {
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
        let x: Vec<f32> = map(op, "self", &va)?
            .read(Some(&full_a))?
            .into_f64()
            .into_iter()
            .map(|v| v as f32)
            .collect();
        let y: Vec<f32> = map(op, "mat2", &vb)?
            .read(Some(&full_b))?
            .into_f64()
            .into_iter()
            .map(|v| v as f32)
            .collect();
        let mut z = vec![0f32; nb * m * n];
        for i in 0..nb {
            // SAFETY: the three buffers hold nb matrices of the given sizes, row-major.
            unsafe {
                gemm::gemm(
                    m,
                    n,
                    k,
                    z.as_mut_ptr().add(i * m * n),
                    1,
                    n as isize,
                    false,
                    x.as_ptr().add(i * m * k),
                    1,
                    k as isize,
                    y.as_ptr().add(i * k * n),
                    1,
                    n as isize,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
            }
        }
        if let Some(add) = &addend {
            let c = map(op, "self", &add.tensor)?
                .read(Some(&out.shape))?
                .into_f64();
            for (z, c) in z.iter_mut().zip(c) {
                *z = add.alpha * *z + add.beta * c as f32;
            }
        }
        map(op, "out", &out)?.write(Vals::F(z.into_iter().map(f64::from).collect()))
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
                let v = map(op, "tensors", t)?.read(None)?;
                map(op, "out", &part)?.write(v)?;
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
        let vals = map(op, "self", &x)?.read(None)?;
        let c = super::meta::contiguous_strides(&x.shape);
        // Source index of each output element: reversed dims walk their axis backwards.
        let mut start = 0isize;
        let strides: Vec<isize> = (0..rank)
            .map(|i| {
                if flipped[i] && x.shape[i] > 0 {
                    start += ((x.shape[i] - 1) * c[i]) as isize;
                    -(c[i] as isize)
                } else {
                    c[i] as isize
                }
            })
            .collect();
        let src: Vec<usize> = (0..x.numel())
            .map(|linear| {
                let mut rem = linear;
                let mut at = start;
                for i in 0..rank {
                    let idx = rem / c[i];
                    rem %= c[i];
                    at += idx as isize * strides[i];
                }
                at as usize
            })
            .collect();
        let out_vals = match vals {
            Vals::F(v) => Vals::F(src.iter().map(|&i| v[i]).collect()),
            Vals::I(v) => Vals::I(src.iter().map(|&i| v[i]).collect()),
        };
        map(op, "out", &out)?.write(out_vals)
    }))
}
