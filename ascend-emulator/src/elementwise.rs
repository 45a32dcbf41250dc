//! Emulated elementwise operators beyond the arithmetic family: unary math, powers,
//! comparisons, logical and bitwise ops, clamps, selection and the activations with their
//! backward passes. One table row per operator: allowed input dtypes (Atlas A2), the output
//! rule, and what it computes on floats (once, run in f32 or f64 as `numerics` says) and on
//! integers (exact, wrapped when stored).
#![allow(missing_docs, non_snake_case, clippy::missing_safety_doc)]

use super::fault::{fault, Fault};
use super::machine::for_ranges;
use super::meta::Kernel;
use super::meta::{scalar_arg, tensor_arg, ScalarValue, TensorDesc};
use super::numerics::{Domain, Elem, Real};
use super::ops::{check_dtype, invalid, phase1, phase2_entry_points, Ex, Ws};
use super::view::{broadcast_shape, gather, map, native_run, Walk, STREAM_CHUNK};
use ascend_acl::dtype::DataType::{self, *};
use ascend_acl::types::status::ACL_ERROR_RT_AICORE_EXCEPTION;
use ascend_acl::types::*;
use std::sync::Arc;

const FLOAT: &[DataType] = &[F32, F16, BF16, F64];
const FLOAT_A2: &[DataType] = &[F32, F16, BF16];
const FLOAT_NO_BF16: &[DataType] = &[F32, F16, F64];
const REAL: &[DataType] = &[F32, F16, BF16, F64, I64, I32, I16, I8, U8, Bool];
const ORDERED: &[DataType] = &[
    F64, F16, F32, BF16, I32, U32, I64, U64, I16, U16, I8, U8, Bool,
];
const EQ: &[DataType] = &[F64, F16, F32, BF16, I64, I32, I8, U8, Bool, I16];
const LOGICAL_OUT: &[DataType] = &[Bool, U8];
const BITWISE: &[DataType] = &[Bool, I8, I16, I32, I64, U8];
const SHIFT: &[DataType] = &[I8, I16, I32, I64, U8, U16, U32, U64];
const CLAMP: &[DataType] = &[F16, F32, F64, I8, U8, I16, I32, I64, BF16];
const MINMAX: &[DataType] = &[F32, F16, F64, I32, I64, I16, I8, U8, Bool, BF16];
const WHERE: &[DataType] = &[
    F32, I32, U64, I64, U32, F16, U16, I16, I8, U8, F64, Bool, BF16,
];
const MASKED_FILL: &[DataType] = &[Bool, I8, I32, I64, F32, F16, BF16];
const REMAINDER: &[DataType] = &[I32, I64, F16, F32, F64, BF16];
const POW: &[DataType] = &[F32, F16, F64, I16, Bool, I32, I64, I8, U8, BF16];

/// Which dtype the output may have.
#[derive(Clone, Copy)]
enum Out {
    /// The first input's dtype.
    Same,
    /// Any of these.
    Of(&'static [DataType]),
}

/// A float computation on up to three operands, in f32 (F32, F16, BF16) and in f64 (F64).
#[derive(Clone, Copy)]
struct Fl {
    f32: fn([f32; 3]) -> f32,
    f64: fn([f64; 3]) -> f64,
}

/// One expression as both kernels of an [`Fl`].
macro_rules! fl {
    (|$x:ident| $e:expr) => {
        Fl {
            f32: |$x: [f32; 3]| -> f32 { $e },
            f64: |$x: [f64; 3]| -> f64 { $e },
        }
    };
}

/// What an operator computes, per element, on up to three operands.
#[derive(Clone, Copy)]
struct Spec {
    inputs: &'static [DataType],
    out: Out,
    float: Fl,
    /// Exact integer arithmetic, wrapped to the out's width when stored.
    int: Option<fn([i128; 3]) -> i128>,
    /// Compute in a float type even for integer inputs (the result is a float).
    float_only: bool,
    /// The result is a truth value (0 or 1) whatever the domain.
    predicate: bool,
}

const fn math(inputs: &'static [DataType], out: Out, float: Fl) -> Spec {
    Spec {
        inputs,
        out,
        float,
        int: None,
        float_only: true,
        predicate: false,
    }
}

const fn both(inputs: &'static [DataType], float: Fl, int: fn([i128; 3]) -> i128) -> Spec {
    Spec {
        inputs,
        out: Out::Same,
        float,
        int: Some(int),
        float_only: false,
        predicate: false,
    }
}

const fn test(
    inputs: &'static [DataType],
    out: &'static [DataType],
    float: Fl,
    int: fn([i128; 3]) -> i128,
) -> Spec {
    Spec {
        inputs,
        out: Out::Of(out),
        float,
        int: Some(int),
        float_only: false,
        predicate: true,
    }
}

fn truth<T: Real>(b: bool) -> T {
    if b {
        T::one()
    } else {
        T::zero()
    }
}

/// An operand: a tensor, or a host scalar broadcast to every element.
enum Arg {
    T(TensorDesc),
    S(ScalarValue),
}

/// Validates and builds the kernel of an elementwise operator writing `out`.
fn elementwise(
    op: &'static str,
    args: Vec<(&'static str, Arg)>,
    out: TensorDesc,
    spec: Spec,
) -> Result<(u64, Kernel), Fault> {
    let mut shape: Vec<usize> = Vec::new();
    let mut first = None;
    for (name, arg) in &args {
        if let Arg::T(t) = arg {
            check_dtype(op, name, t, spec.inputs)?;
            first.get_or_insert(t.dtype);
            shape = broadcast_shape(&shape, &t.shape).ok_or_else(|| {
                invalid(
                    op,
                    format!(
                        "{name} shape {:?} does not broadcast with {shape:?}",
                        t.shape
                    ),
                )
            })?;
        }
    }
    let first = first.expect("every elementwise operator has a tensor operand");
    match spec.out {
        Out::Same if out.dtype != first => {
            return Err(invalid(
                op,
                format!("out dtype {} must equal the input dtype {first}", out.dtype),
            ))
        }
        Out::Of(list) => check_dtype(op, "out", &out, list)?,
        Out::Same => {}
    }
    if shape != out.shape {
        return Err(invalid(
            op,
            format!(
                "out shape {:?} should be the broadcast shape {shape:?}",
                out.shape
            ),
        ));
    }
    let float_domain = spec.float_only
        || args
            .iter()
            .any(|(_, a)| matches!(a, Arg::T(t) if t.dtype.is_float()))
        || (!spec.predicate && out.dtype.is_float());
    if !float_domain && spec.int.is_none() {
        return Err(invalid(op, format!("integer input {first} has no kernel")));
    }
    // The compute type: f64 when an operand (or a float out) is F64, else f32; integers exact.
    let mut dtypes: Vec<DataType> = args
        .iter()
        .filter_map(|(_, a)| match a {
            Arg::T(t) => Some(t.dtype),
            Arg::S(_) => None,
        })
        .collect();
    if out.dtype.is_float() {
        dtypes.push(out.dtype);
    }
    let domain = match Domain::of(&dtypes) {
        Domain::F64 => Domain::F64,
        _ if float_domain => Domain::F32,
        _ => Domain::Int,
    };
    Ok((
        0,
        Arc::new(move || match domain {
            Domain::F32 => run(op, &args, &out, first, spec.float.f32),
            Domain::F64 => run(op, &args, &out, first, spec.float.f64),
            Domain::Int => run(op, &args, &out, first, spec.int.expect("checked above")),
        }),
    ))
}

/// Streams `out = f(args)` element by element in the compute type `T`; scalars are rounded to
/// the first input's dtype, as the operators apply them.
fn run<T: Elem>(
    op: &str,
    args: &[(&'static str, Arg)],
    out: &TensorDesc,
    first: DataType,
    f: fn([T; 3]) -> T,
) -> Result<(), Fault> {
    let mo = map(op, "out", out)?;
    let set = mo.setter::<T>();
    let mut mapped = Vec::with_capacity(args.len());
    for (name, a) in args {
        mapped.push(match a {
            Arg::T(t) => {
                let mut m = map(op, name, t)?;
                m.detach_from(&mo, true);
                Ok((m, Walk::broadcast(t, &out.shape)?))
            }
            Arg::S(s) => Err(T::scalar(*s, first)),
        });
    }
    let walk_o = Walk::of(out);
    let dense: Option<Vec<Result<*mut T, T>>> = mapped
        .iter()
        .map(|a| match a {
            Ok((m, w)) => native_run::<T>(m, w).map(Ok),
            Err(v) => Some(Err(*v)),
        })
        .collect();
    if let (Some(po), Some(dense)) = (native_run::<T>(&mo, &walk_o), dense) {
        // Dense operands stored as the compute type: no per-element dispatch, in ranges over
        // the host threads (element i is read and written by one thread only).
        let po = po as usize;
        let dense: Vec<Result<usize, T>> = dense.iter().map(|s| s.map(|p| p as usize)).collect();
        for_ranges(out.numel(), |range| {
            let po = po as *mut T;
            // SAFETY: `native_run` checked that the elements from each pointer lie inside
            // their mapped views; unaligned accesses are allowed; the ranges are disjoint.
            unsafe {
                for i in range {
                    let mut x = [T::default(); 3];
                    for (slot, s) in x.iter_mut().zip(&dense) {
                        *slot = match s {
                            Ok(p) => (*p as *const T).add(i).read_unaligned(),
                            Err(v) => *v,
                        };
                    }
                    po.add(i).write_unaligned(f(x));
                }
            }
        });
        return Ok(());
    }
    // Broadcast or strided operands: in chunks, each operand gathered along its innermost dim
    // (inputs that overlap the out other than element for element were detached above).
    let mut walk_o = walk_o;
    let mut chunks: Vec<Vec<T>> = vec![Vec::with_capacity(STREAM_CHUNK); mapped.len()];
    while walk_o.len() > 0 {
        let n = walk_o.len().min(STREAM_CHUNK);
        for (chunk, a) in chunks.iter_mut().zip(mapped.iter_mut()) {
            match a {
                Ok((m, w)) => gather(m, w, n, chunk),
                Err(v) => {
                    chunk.clear();
                    chunk.resize(n, *v);
                }
            }
        }
        let mut k = 0;
        walk_o.take_each(n, |o| {
            let mut x = [T::default(); 3];
            for (slot, chunk) in x.iter_mut().zip(&chunks) {
                *slot = chunk[k];
            }
            set(o, f(x));
            k += 1;
        });
    }
    Ok(())
}

macro_rules! unary {
    ($($op:ident / $ws:ident = $spec:expr;)*) => {
        $(pub unsafe extern "C" fn $ws(self_: *const aclTensor, out: *mut aclTensor, ws: Ws, ex: Ex) -> aclnnStatus {
            const OP: &str = stringify!($op);
            phase1(OP, ws, ex, || {
                let args = vec![("self", Arg::T(tensor_arg(OP, "self", self_)?))];
                elementwise(OP, args, tensor_arg(OP, "out", out)?, $spec)
            })
        })*
        phase2_entry_points!($($op),*);
    };
}

macro_rules! binary {
    ($($op:ident / $ws:ident = $spec:expr;)*) => {
        $(pub unsafe extern "C" fn $ws(self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor, ws: Ws, ex: Ex) -> aclnnStatus {
            const OP: &str = stringify!($op);
            phase1(OP, ws, ex, || {
                let args = vec![("self", Arg::T(tensor_arg(OP, "self", self_)?)), ("other", Arg::T(tensor_arg(OP, "other", other)?))];
                elementwise(OP, args, tensor_arg(OP, "out", out)?, $spec)
            })
        })*
        phase2_entry_points!($($op),*);
    };
}

macro_rules! with_scalar {
    ($($op:ident / $ws:ident = $spec:expr;)*) => {
        $(pub unsafe extern "C" fn $ws(self_: *const aclTensor, other: *const aclScalar, out: *mut aclTensor, ws: Ws, ex: Ex) -> aclnnStatus {
            const OP: &str = stringify!($op);
            phase1(OP, ws, ex, || {
                let args = vec![("self", Arg::T(tensor_arg(OP, "self", self_)?)), ("other", Arg::S(scalar_arg(OP, "other", other)?))];
                elementwise(OP, args, tensor_arg(OP, "out", out)?, $spec)
            })
        })*
        phase2_entry_points!($($op),*);
    };
}

fn gelu<T: Real>(x: T) -> T {
    T::c(0.5) * x * (T::one() + (x / T::c(std::f64::consts::SQRT_2)).erf())
}

fn gelu_grad<T: Real>(x: T) -> T {
    let cdf = T::c(0.5) * (T::one() + (x / T::c(std::f64::consts::SQRT_2)).erf());
    let pdf = (T::c(-0.5) * x * x).exp() / T::c((2.0 * std::f64::consts::PI).sqrt());
    cdf + x * pdf
}

fn sigmoid<T: Real>(x: T) -> T {
    T::one() / (T::one() + (-x).exp())
}

/// torch.remainder: the result has the sign of the divisor.
fn floor_mod<T: Real>(x: T, y: T) -> T {
    let r = x % y;
    if r != T::zero() && ((r < T::zero()) != (y < T::zero())) {
        r + y
    } else {
        r
    }
}

fn int_floor_mod(x: i128, y: i128) -> i128 {
    if y == 0 {
        return 0;
    }
    let r = x % y;
    if r != 0 && ((r < 0) != (y < 0)) {
        r + y
    } else {
        r
    }
}

fn int_pow(b: i128, e: i128) -> i128 {
    match (b, e) {
        (_, e) if e >= 0 => b.wrapping_pow(e.min(u32::MAX as i128) as u32),
        (1, _) => 1,
        (-1, e) => {
            if e % 2 == 0 {
                1
            } else {
                -1
            }
        }
        _ => 0,
    }
}

/// Float maximum/minimum propagating NaN, as torch.maximum does.
fn nan_max<T: Real>(a: T, b: T) -> T {
    if a.is_nan() || b.is_nan() {
        T::nan()
    } else {
        a.max(b)
    }
}

fn nan_min<T: Real>(a: T, b: T) -> T {
    if a.is_nan() || b.is_nan() {
        T::nan()
    } else {
        a.min(b)
    }
}

/// Clamps that keep NaN.
fn clamp<T: Real>(x: T, lo: T, hi: T) -> T {
    if x.is_nan() {
        x
    } else {
        x.max(lo).min(hi)
    }
}

fn sign<T: Real>(x: T) -> T {
    if x > T::zero() {
        T::one()
    } else if x < T::zero() {
        -T::one()
    } else {
        T::zero()
    }
}

fn shift_right(x: i128, s: i128) -> i128 {
    x >> s.clamp(0, 127)
}

/// The float kernel of integer-only operators (bitwise, shifts): never run, since their
/// dtype tables hold no float type.
const NO_FLOAT: Fl = fl!(|x| x[0]);

unary! {
    aclnnNeg / aclnnNegGetWorkspaceSize = both(&[I8, I32, I64, F16, BF16, F32, F64], fl!(|x| -x[0]), |x| x[0].wrapping_neg());
    aclnnReciprocal / aclnnReciprocalGetWorkspaceSize = math(REAL, Out::Of(FLOAT), fl!(|x| 1.0 / x[0]));
    aclnnExp / aclnnExpGetWorkspaceSize = math(&[F32, F16, F64, Bool, I64, BF16], Out::Of(FLOAT), fl!(|x| x[0].exp()));
    aclnnLog / aclnnLogGetWorkspaceSize = math(REAL, Out::Of(FLOAT), fl!(|x| x[0].ln()));
    aclnnLog1p / aclnnLog1pGetWorkspaceSize = math(REAL, Out::Of(FLOAT), fl!(|x| x[0].ln_1p()));
    aclnnSqrt / aclnnSqrtGetWorkspaceSize = math(REAL, Out::Of(FLOAT), fl!(|x| x[0].sqrt()));
    aclnnAbs / aclnnAbsGetWorkspaceSize = both(REAL, fl!(|x| x[0].abs()), |x| x[0].wrapping_abs());
    aclnnCos / aclnnCosGetWorkspaceSize = math(REAL, Out::Of(FLOAT), fl!(|x| x[0].cos()));
    aclnnSin / aclnnSinGetWorkspaceSize = math(REAL, Out::Of(FLOAT), fl!(|x| x[0].sin()));
    aclnnTan / aclnnTanGetWorkspaceSize = math(REAL, Out::Of(FLOAT), fl!(|x| x[0].tan()));
    aclnnCosh / aclnnCoshGetWorkspaceSize = math(FLOAT_NO_BF16, Out::Same, fl!(|x| x[0].cosh()));
    aclnnSinh / aclnnSinhGetWorkspaceSize = math(REAL, Out::Of(FLOAT), fl!(|x| x[0].sinh()));
    aclnnTanh / aclnnTanhGetWorkspaceSize = math(&[F32, F16, Bool, U8, I8, I16, I32, I64, BF16], Out::Of(FLOAT_A2), fl!(|x| x[0].tanh()));
    aclnnAcos / aclnnAcosGetWorkspaceSize = math(FLOAT_NO_BF16, Out::Same, fl!(|x| x[0].acos()));
    aclnnAcosh / aclnnAcoshGetWorkspaceSize = math(FLOAT_NO_BF16, Out::Same, fl!(|x| x[0].acosh()));
    aclnnAsin / aclnnAsinGetWorkspaceSize = math(FLOAT_NO_BF16, Out::Same, fl!(|x| x[0].asin()));
    aclnnAsinh / aclnnAsinhGetWorkspaceSize = math(FLOAT_NO_BF16, Out::Same, fl!(|x| x[0].asinh()));
    aclnnAtan / aclnnAtanGetWorkspaceSize = math(REAL, Out::Of(FLOAT), fl!(|x| x[0].atan()));
    aclnnAtanh / aclnnAtanhGetWorkspaceSize = math(FLOAT_NO_BF16, Out::Same, fl!(|x| x[0].atanh()));
    aclnnRound / aclnnRoundGetWorkspaceSize = both(&[BF16, F16, F32, F64, I32, I64], fl!(|x| x[0].round_ties_even()), |x| x[0]);
    aclnnFloor / aclnnFloorGetWorkspaceSize = both(&[F64, F32, F16, BF16, I64, I32, I16, I8, U8], fl!(|x| x[0].floor()), |x| x[0]);
    aclnnCeil / aclnnCeilGetWorkspaceSize = math(FLOAT, Out::Same, fl!(|x| x[0].ceil()));
    aclnnTrunc / aclnnTruncGetWorkspaceSize = math(FLOAT_A2, Out::Same, fl!(|x| x[0].trunc()));
    aclnnErf / aclnnErfGetWorkspaceSize = math(FLOAT_NO_BF16, Out::Same, fl!(|x| Real::erf(x[0])));
    // NaN gives 0 here: aclnnSign's NaN result is not documented, so callers must not rely on it.
    aclnnSign / aclnnSignGetWorkspaceSize = both(&[F64, F32, F16, I32, I64, Bool, BF16], fl!(|x| sign(x[0])), |x| x[0].signum());
    aclnnRelu / aclnnReluGetWorkspaceSize = both(&[F32, F16, I8, I32, I64, BF16], fl!(|x| if x[0] < 0.0 { 0.0 } else { x[0] }), |x| x[0].max(0));
    aclnnSigmoid / aclnnSigmoidGetWorkspaceSize = math(FLOAT_A2, Out::Same, fl!(|x| sigmoid(x[0])));
    aclnnLogSigmoid / aclnnLogSigmoidGetWorkspaceSize = math(FLOAT_A2, Out::Same, fl!(|x| x[0].min(0.0) - (-x[0].abs()).exp().ln_1p()));
    aclnnGelu / aclnnGeluGetWorkspaceSize = math(FLOAT_A2, Out::Same, fl!(|x| gelu(x[0])));
    aclnnLogicalNot / aclnnLogicalNotGetWorkspaceSize = test(&[Bool, U8, I8, I16, I32, I64, F32, F16, F64, BF16], LOGICAL_OUT, fl!(|x| truth(x[0] == 0.0)), |x| (x[0] == 0) as i128);
    aclnnBitwiseNot / aclnnBitwiseNotGetWorkspaceSize = both(BITWISE, NO_FLOAT, |x| !x[0]);
}

binary! {
    aclnnPowTensorTensor / aclnnPowTensorTensorGetWorkspaceSize = both(POW, fl!(|x| x[0].powf(x[1])), |x| int_pow(x[0], x[1]));
    aclnnAtan2 / aclnnAtan2GetWorkspaceSize = math(REAL, Out::Of(FLOAT), fl!(|x| x[0].atan2(x[1])));
    aclnnRemainderTensorTensor / aclnnRemainderTensorTensorGetWorkspaceSize = both(REMAINDER, fl!(|x| floor_mod(x[0], x[1])), |x| int_floor_mod(x[0], x[1]));
    aclnnEqTensor / aclnnEqTensorGetWorkspaceSize = test(EQ, ORDERED, fl!(|x| truth(x[0] == x[1])), |x| (x[0] == x[1]) as i128);
    aclnnNeTensor / aclnnNeTensorGetWorkspaceSize = test(EQ, ORDERED, fl!(|x| truth(x[0] != x[1])), |x| (x[0] != x[1]) as i128);
    aclnnGtTensor / aclnnGtTensorGetWorkspaceSize = test(ORDERED, ORDERED, fl!(|x| truth(x[0] > x[1])), |x| (x[0] > x[1]) as i128);
    aclnnGeTensor / aclnnGeTensorGetWorkspaceSize = test(ORDERED, ORDERED, fl!(|x| truth(x[0] >= x[1])), |x| (x[0] >= x[1]) as i128);
    aclnnLtTensor / aclnnLtTensorGetWorkspaceSize = test(ORDERED, ORDERED, fl!(|x| truth(x[0] < x[1])), |x| (x[0] < x[1]) as i128);
    aclnnLeTensor / aclnnLeTensorGetWorkspaceSize = test(ORDERED, ORDERED, fl!(|x| truth(x[0] <= x[1])), |x| (x[0] <= x[1]) as i128);
    aclnnLogicalAnd / aclnnLogicalAndGetWorkspaceSize = test(REAL, LOGICAL_OUT, fl!(|x| truth(x[0] != 0.0 && x[1] != 0.0)), |x| (x[0] != 0 && x[1] != 0) as i128);
    aclnnLogicalOr / aclnnLogicalOrGetWorkspaceSize = test(REAL, LOGICAL_OUT, fl!(|x| truth(x[0] != 0.0 || x[1] != 0.0)), |x| (x[0] != 0 || x[1] != 0) as i128);
    aclnnLogicalXor / aclnnLogicalXorGetWorkspaceSize = test(REAL, LOGICAL_OUT, fl!(|x| truth((x[0] != 0.0) != (x[1] != 0.0))), |x| ((x[0] != 0) != (x[1] != 0)) as i128);
    aclnnBitwiseAndTensor / aclnnBitwiseAndTensorGetWorkspaceSize = both(BITWISE, NO_FLOAT, |x| x[0] & x[1]);
    aclnnBitwiseOrTensor / aclnnBitwiseOrTensorGetWorkspaceSize = both(BITWISE, NO_FLOAT, |x| x[0] | x[1]);
    aclnnBitwiseXorTensor / aclnnBitwiseXorTensorGetWorkspaceSize = both(BITWISE, NO_FLOAT, |x| x[0] ^ x[1]);
    // Signed types shift arithmetically (UNCERTAIN in the docs; torch_npu relies on it).
    aclnnRightShift / aclnnRightShiftGetWorkspaceSize = both(SHIFT, NO_FLOAT, |x| shift_right(x[0], x[1]));
    aclnnMaximum / aclnnMaximumGetWorkspaceSize = both(MINMAX, fl!(|x| nan_max(x[0], x[1])), |x| x[0].max(x[1]));
    aclnnMinimum / aclnnMinimumGetWorkspaceSize = both(MINMAX, fl!(|x| nan_min(x[0], x[1])), |x| x[0].min(x[1]));
}

with_scalar! {
    aclnnPowTensorScalar / aclnnPowTensorScalarGetWorkspaceSize = both(POW, fl!(|x| x[0].powf(x[1])), |x| int_pow(x[0], x[1]));
    aclnnRemainderTensorScalar / aclnnRemainderTensorScalarGetWorkspaceSize = both(REMAINDER, fl!(|x| floor_mod(x[0], x[1])), |x| int_floor_mod(x[0], x[1]));
    aclnnEqScalar / aclnnEqScalarGetWorkspaceSize = test(EQ, ORDERED, fl!(|x| truth(x[0] == x[1])), |x| (x[0] == x[1]) as i128);
    aclnnNeScalar / aclnnNeScalarGetWorkspaceSize = test(EQ, ORDERED, fl!(|x| truth(x[0] != x[1])), |x| (x[0] != x[1]) as i128);
    aclnnGtScalar / aclnnGtScalarGetWorkspaceSize = test(ORDERED, ORDERED, fl!(|x| truth(x[0] > x[1])), |x| (x[0] > x[1]) as i128);
    aclnnGeScalar / aclnnGeScalarGetWorkspaceSize = test(ORDERED, ORDERED, fl!(|x| truth(x[0] >= x[1])), |x| (x[0] >= x[1]) as i128);
    aclnnLtScalar / aclnnLtScalarGetWorkspaceSize = test(ORDERED, ORDERED, fl!(|x| truth(x[0] < x[1])), |x| (x[0] < x[1]) as i128);
    aclnnLeScalar / aclnnLeScalarGetWorkspaceSize = test(ORDERED, ORDERED, fl!(|x| truth(x[0] <= x[1])), |x| (x[0] <= x[1]) as i128);
    aclnnBitwiseAndScalar / aclnnBitwiseAndScalarGetWorkspaceSize = both(BITWISE, NO_FLOAT, |x| x[0] & x[1]);
    aclnnBitwiseOrScalar / aclnnBitwiseOrScalarGetWorkspaceSize = both(BITWISE, NO_FLOAT, |x| x[0] | x[1]);
    aclnnBitwiseXorScalar / aclnnBitwiseXorScalarGetWorkspaceSize = both(BITWISE, NO_FLOAT, |x| x[0] ^ x[1]);
    aclnnClampMin / aclnnClampMinGetWorkspaceSize = both(CLAMP, fl!(|x| clamp(x[0], x[1], Real::c(f64::INFINITY))), |x| x[0].max(x[1]));
    aclnnClampMax / aclnnClampMaxGetWorkspaceSize = both(CLAMP, fl!(|x| clamp(x[0], Real::c(f64::NEG_INFINITY), x[1])), |x| x[0].min(x[1]));
    aclnnLeakyRelu / aclnnLeakyReluGetWorkspaceSize = math(FLOAT_A2, Out::Same, fl!(|x| if x[0] > 0.0 { x[0] } else { x[0] * x[1] }));
}

pub unsafe extern "C" fn aclnnClampGetWorkspaceSize(
    self_: *const aclTensor,
    min: *const aclScalar,
    max: *const aclScalar,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnClamp";
    phase1(OP, ws, ex, || {
        if min.is_null() && max.is_null() {
            return Err(fault(
                ascend_acl::types::status::ACLNN_ERR_PARAM_NULLPTR,
                "aclnnClamp: both clipValueMin and clipValueMax are NULL",
            ));
        }
        let bound = |p: *const aclScalar, none: f64| {
            if p.is_null() {
                Ok(ScalarValue::Float(none))
            } else {
                scalar_arg(OP, "clipValue", p)
            }
        };
        let (lo, hi) = (bound(min, f64::NEG_INFINITY)?, bound(max, f64::INFINITY)?);
        let x = tensor_arg(OP, "self", self_)?;
        let ints = |s: ScalarValue, none: i64| match s {
            ScalarValue::Int(v) => ScalarValue::Int(v),
            ScalarValue::Float(v) if v.is_infinite() => ScalarValue::Int(none),
            ScalarValue::Float(v) => ScalarValue::Int(v as i64),
        };
        let (lo, hi) = if x.dtype.is_float() {
            (lo, hi)
        } else {
            (ints(lo, i64::MIN), ints(hi, i64::MAX))
        };
        let args = vec![
            ("self", Arg::T(x)),
            ("clipValueMin", Arg::S(lo)),
            ("clipValueMax", Arg::S(hi)),
        ];
        let spec = both(CLAMP, fl!(|x| clamp(x[0], x[1], x[2])), |x| {
            x[0].max(x[1]).min(x[2])
        });
        elementwise(OP, args, tensor_arg(OP, "out", out)?, spec)
    })
}

pub unsafe extern "C" fn aclnnSWhereGetWorkspaceSize(
    condition: *const aclTensor,
    self_: *const aclTensor,
    other: *const aclTensor,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnSWhere";
    phase1(OP, ws, ex, || {
        let cond = tensor_arg(OP, "condition", condition)?;
        check_dtype(OP, "condition", &cond, &[Bool, U8])?;
        let (a, b) = (
            tensor_arg(OP, "self", self_)?,
            tensor_arg(OP, "other", other)?,
        );
        let out = tensor_arg(OP, "out", out)?;
        for (n, t) in [("self", &a), ("other", &b), ("out", &out)] {
            check_dtype(OP, n, t, WHERE)?;
        }
        let shape =
            broadcast_shape(&cond.shape, &a.shape).and_then(|s| broadcast_shape(&s, &b.shape));
        if shape.as_ref() != Some(&out.shape) {
            return Err(invalid(
                OP,
                format!(
                    "condition {:?}, self {:?} and other {:?} do not broadcast to out {:?}",
                    cond.shape, a.shape, b.shape, out.shape
                ),
            ));
        }
        Ok((
            0,
            Arc::new(move || match Domain::of(&[out.dtype]) {
                Domain::F32 => select::<f32>(&cond, &a, &b, &out),
                Domain::F64 => select::<f64>(&cond, &a, &b, &out),
                Domain::Int => select::<i128>(&cond, &a, &b, &out),
            }) as Kernel,
        ))
    })
}

pub unsafe extern "C" fn aclnnInplaceMaskedFillScalarGetWorkspaceSize(
    self_ref: *mut aclTensor,
    mask: *const aclTensor,
    value: *const aclScalar,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnInplaceMaskedFillScalar";
    phase1(OP, ws, ex, || {
        let dst = tensor_arg(OP, "selfRef", self_ref)?;
        let mask = tensor_arg(OP, "mask", mask)?;
        let value = scalar_arg(OP, "value", value)?;
        check_dtype(OP, "selfRef", &dst, MASKED_FILL)?;
        check_dtype(OP, "mask", &mask, &[Bool])?;
        if broadcast_shape(&mask.shape, &dst.shape).as_ref() != Some(&dst.shape) {
            return Err(invalid(
                OP,
                format!(
                    "mask {:?} does not broadcast to selfRef {:?}",
                    mask.shape, dst.shape
                ),
            ));
        }
        Ok((
            0,
            Arc::new(move || match Domain::of(&[dst.dtype]) {
                Domain::F32 => masked_fill::<f32>(&dst, &mask, value),
                Domain::F64 => masked_fill::<f64>(&dst, &mask, value),
                Domain::Int => masked_fill::<i128>(&dst, &mask, value),
            }) as Kernel,
        ))
    })
}

pub unsafe extern "C" fn aclnnGeluBackwardGetWorkspaceSize(
    grad_output: *const aclTensor,
    self_: *const aclTensor,
    grad_input: *const aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnGeluBackward";
    phase1(OP, ws, ex, || {
        let args = vec![
            (
                "gradOutput",
                Arg::T(tensor_arg(OP, "gradOutput", grad_output)?),
            ),
            ("self", Arg::T(tensor_arg(OP, "self", self_)?)),
        ];
        elementwise(
            OP,
            args,
            tensor_arg(OP, "gradInput", grad_input)?,
            math(FLOAT_A2, Out::Same, fl!(|x| x[0] * gelu_grad(x[1]))),
        )
    })
}

pub unsafe extern "C" fn aclnnSigmoidBackwardGetWorkspaceSize(
    grad_output: *const aclTensor,
    output: *const aclTensor,
    grad_input: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnSigmoidBackward";
    phase1(OP, ws, ex, || {
        let args = vec![
            (
                "gradOutput",
                Arg::T(tensor_arg(OP, "gradOutput", grad_output)?),
            ),
            ("output", Arg::T(tensor_arg(OP, "output", output)?)),
        ];
        elementwise(
            OP,
            args,
            tensor_arg(OP, "gradInput", grad_input)?,
            math(FLOAT, Out::Same, fl!(|x| x[0] * x[1] * (1.0 - x[1]))),
        )
    })
}

pub unsafe extern "C" fn aclnnThresholdBackwardGetWorkspaceSize(
    grad_output: *const aclTensor,
    self_: *const aclTensor,
    threshold: *const aclScalar,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnThresholdBackward";
    phase1(OP, ws, ex, || {
        let args = vec![
            (
                "gradOutput",
                Arg::T(tensor_arg(OP, "gradOutput", grad_output)?),
            ),
            ("self", Arg::T(tensor_arg(OP, "self", self_)?)),
            ("threshold", Arg::S(scalar_arg(OP, "threshold", threshold)?)),
        ];
        let spec = both(
            &[F32, BF16, F16, I32, I8, U8],
            fl!(|x| if x[1] > x[2] { x[0] } else { 0.0 }),
            |x| if x[1] > x[2] { x[0] } else { 0 },
        );
        elementwise(OP, args, tensor_arg(OP, "out", out)?, spec)
    })
}

/// aclnnSWhere's kernel: each element of `out` from `self` where the condition holds, else
/// from `other`, converted to the out's dtype.
fn select<T: Elem>(
    cond: &TensorDesc,
    a: &TensorDesc,
    b: &TensorDesc,
    out: &TensorDesc,
) -> Result<(), Fault> {
    const OP: &str = "aclnnSWhere";
    let mo = map(OP, "out", out)?;
    let mut inputs = [
        map(OP, "condition", cond)?,
        map(OP, "self", a)?,
        map(OP, "other", b)?,
    ];
    inputs.iter_mut().for_each(|m| m.detach_from(&mo, true));
    let [mc, ma, mb] = &inputs;
    let (get_c, get_a, get_b) = (mc.getter::<i128>(), ma.getter::<T>(), mb.getter::<T>());
    let set = mo.setter::<T>();
    let walks = Walk::broadcast(cond, &out.shape)?
        .zip(Walk::broadcast(a, &out.shape)?)
        .zip(Walk::broadcast(b, &out.shape)?);
    for (o, ((c, x), y)) in Walk::of(out).zip(walks) {
        set(o, if get_c(c) != 0 { get_a(x) } else { get_b(y) });
    }
    Ok(())
}

/// aclnnInplaceMaskedFillScalar's kernel: `value` (rounded to the dtype) where the mask holds.
fn masked_fill<T: Elem>(
    dst: &TensorDesc,
    mask: &TensorDesc,
    value: ScalarValue,
) -> Result<(), Fault> {
    const OP: &str = "aclnnInplaceMaskedFillScalar";
    let md = map(OP, "selfRef", dst)?;
    let mut mm = map(OP, "mask", mask)?;
    mm.detach_from(&md, true);
    let (get_m, set) = (mm.getter::<i128>(), md.setter::<T>());
    let v = T::scalar(value, dst.dtype);
    for (o, m) in Walk::of(dst).zip(Walk::broadcast(mask, &dst.shape)?) {
        if get_m(m) != 0 {
            set(o, v);
        }
    }
    Ok(())
}

phase2_entry_points!(
    aclnnClamp,
    aclnnSWhere,
    aclnnInplaceMaskedFillScalar,
    aclnnGeluBackward,
    aclnnSigmoidBackward,
    aclnnThresholdBackward
);

/// An index read by a kernel, checked against the dimension it indexes (an AI Core fault on
/// hardware when out of range).
pub(crate) fn checked_index(op: &str, index: i64, size: usize) -> Result<usize, Fault> {
    if index >= 0 && (index as usize) < size {
        Ok(index as usize)
    } else {
        Err(fault(
            ACL_ERROR_RT_AICORE_EXCEPTION,
            format!("{op}: index {index} is out of range for a dimension of size {size}"),
        ))
    }
}
