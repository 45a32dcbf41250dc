//! Emulated elementwise operators beyond the arithmetic family: unary math, powers,
//! comparisons, logical and bitwise ops, clamps, selection and the activations with their
//! backward passes. One table row per operator: allowed input dtypes (Atlas A2), the output
//! rule, and what it computes on f64 (float domain) or i64 (integer domain).
#![allow(missing_docs, non_snake_case, clippy::missing_safety_doc)]

use super::fault::{fault, Fault};
use super::meta::Kernel;
use super::meta::{scalar_arg, tensor_arg, ScalarValue, TensorDesc};
use super::ops::{check_dtype, invalid, phase1, phase2_entry_points, Ex, Ws};
use super::view::{broadcast_shape, map, round_to, Vals};
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

/// What an operator computes, per element, on up to three operands.
#[derive(Clone, Copy)]
struct Spec {
    inputs: &'static [DataType],
    out: Out,
    float: fn([f64; 3]) -> f64,
    int: Option<fn([i64; 3]) -> i64>,
    /// Compute in f64 even for integer inputs (the result is a float).
    float_only: bool,
    /// The result is a truth value (0 or 1) whatever the domain.
    predicate: bool,
}

const fn math(inputs: &'static [DataType], out: Out, float: fn([f64; 3]) -> f64) -> Spec {
    Spec {
        inputs,
        out,
        float,
        int: None,
        float_only: true,
        predicate: false,
    }
}

const fn both(
    inputs: &'static [DataType],
    float: fn([f64; 3]) -> f64,
    int: fn([i64; 3]) -> i64,
) -> Spec {
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
    float: fn([f64; 3]) -> f64,
    int: fn([i64; 3]) -> i64,
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

fn truth(b: bool) -> f64 {
    b as u8 as f64
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
    Ok((
        0,
        Arc::new(move || {
            let n = out.numel();
            let mo = map(op, "out", &out)?;
            if float_domain {
                let cols = args
                    .iter()
                    .map(|(name, a)| match a {
                        Arg::T(t) => Ok(map(op, name, t)?.read(Some(&out.shape))?.into_f64()),
                        Arg::S(s) => Ok(vec![round_to(first, s.as_f64()); n]),
                    })
                    .collect::<Result<Vec<_>, Fault>>()?;
                let at = |c: usize, i: usize| cols.get(c).map_or(0.0, |v| v[i]);
                let r = (0..n)
                    .map(|i| (spec.float)([at(0, i), at(1, i), at(2, i)]))
                    .collect();
                mo.write(Vals::F(r))
            } else {
                let cols = args
                    .iter()
                    .map(|(name, a)| match a {
                        Arg::T(t) => Ok(map(op, name, t)?.read(Some(&out.shape))?.into_i64()),
                        Arg::S(ScalarValue::Int(v)) => Ok(vec![*v; n]),
                        Arg::S(ScalarValue::Float(v)) => Ok(vec![*v as i64; n]),
                    })
                    .collect::<Result<Vec<_>, Fault>>()?;
                let f = spec.int.expect("checked at phase one");
                let at = |c: usize, i: usize| cols.get(c).map_or(0, |v| v[i]);
                let r = (0..n).map(|i| f([at(0, i), at(1, i), at(2, i)])).collect();
                mo.write(Vals::I(r))
            }
        }),
    ))
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

fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))
}

fn gelu_grad(x: f64) -> f64 {
    let cdf = 0.5 * (1.0 + libm::erf(x / std::f64::consts::SQRT_2));
    let pdf = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
    cdf + x * pdf
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// torch.remainder: the result has the sign of the divisor.
fn floor_mod(x: f64, y: f64) -> f64 {
    let r = x % y;
    if r != 0.0 && ((r < 0.0) != (y < 0.0)) {
        r + y
    } else {
        r
    }
}

fn int_floor_mod(x: i64, y: i64) -> i64 {
    if y == 0 {
        return 0;
    }
    let r = x.wrapping_rem(y);
    if r != 0 && ((r < 0) != (y < 0)) {
        r + y
    } else {
        r
    }
}

fn int_pow(b: i64, e: i64) -> i64 {
    match (b, e) {
        (_, e) if e >= 0 => b.wrapping_pow(e.min(u32::MAX as i64) as u32),
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
fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

fn nan_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

fn shift_right(x: i64, s: i64) -> i64 {
    x >> s.clamp(0, 63)
}

unary! {
    aclnnNeg / aclnnNegGetWorkspaceSize = both(&[I8, I32, I64, F16, BF16, F32, F64], |x| -x[0], |x| x[0].wrapping_neg());
    aclnnReciprocal / aclnnReciprocalGetWorkspaceSize = math(REAL, Out::Of(FLOAT), |x| 1.0 / x[0]);
    aclnnExp / aclnnExpGetWorkspaceSize = math(&[F32, F16, F64, Bool, I64, BF16], Out::Of(FLOAT), |x| x[0].exp());
    aclnnLog / aclnnLogGetWorkspaceSize = math(REAL, Out::Of(FLOAT), |x| x[0].ln());
    aclnnLog1p / aclnnLog1pGetWorkspaceSize = math(REAL, Out::Of(FLOAT), |x| x[0].ln_1p());
    aclnnSqrt / aclnnSqrtGetWorkspaceSize = math(REAL, Out::Of(FLOAT), |x| x[0].sqrt());
    aclnnAbs / aclnnAbsGetWorkspaceSize = both(REAL, |x| x[0].abs(), |x| x[0].wrapping_abs());
    aclnnCos / aclnnCosGetWorkspaceSize = math(REAL, Out::Of(FLOAT), |x| x[0].cos());
    aclnnSin / aclnnSinGetWorkspaceSize = math(REAL, Out::Of(FLOAT), |x| x[0].sin());
    aclnnTan / aclnnTanGetWorkspaceSize = math(REAL, Out::Of(FLOAT), |x| x[0].tan());
    aclnnCosh / aclnnCoshGetWorkspaceSize = math(FLOAT_NO_BF16, Out::Same, |x| x[0].cosh());
    aclnnSinh / aclnnSinhGetWorkspaceSize = math(REAL, Out::Of(FLOAT), |x| x[0].sinh());
    aclnnTanh / aclnnTanhGetWorkspaceSize = math(&[F32, F16, Bool, U8, I8, I16, I32, I64, BF16], Out::Of(FLOAT_A2), |x| x[0].tanh());
    aclnnAcos / aclnnAcosGetWorkspaceSize = math(FLOAT_NO_BF16, Out::Same, |x| x[0].acos());
    aclnnAcosh / aclnnAcoshGetWorkspaceSize = math(FLOAT_NO_BF16, Out::Same, |x| x[0].acosh());
    aclnnAsin / aclnnAsinGetWorkspaceSize = math(FLOAT_NO_BF16, Out::Same, |x| x[0].asin());
    aclnnAsinh / aclnnAsinhGetWorkspaceSize = math(FLOAT_NO_BF16, Out::Same, |x| x[0].asinh());
    aclnnAtan / aclnnAtanGetWorkspaceSize = math(REAL, Out::Of(FLOAT), |x| x[0].atan());
    aclnnAtanh / aclnnAtanhGetWorkspaceSize = math(FLOAT_NO_BF16, Out::Same, |x| x[0].atanh());
    aclnnRound / aclnnRoundGetWorkspaceSize = both(&[BF16, F16, F32, F64, I32, I64], |x| x[0].round_ties_even(), |x| x[0]);
    aclnnFloor / aclnnFloorGetWorkspaceSize = both(&[F64, F32, F16, BF16, I64, I32, I16, I8, U8], |x| x[0].floor(), |x| x[0]);
    aclnnCeil / aclnnCeilGetWorkspaceSize = math(FLOAT, Out::Same, |x| x[0].ceil());
    aclnnTrunc / aclnnTruncGetWorkspaceSize = math(FLOAT_A2, Out::Same, |x| x[0].trunc());
    aclnnErf / aclnnErfGetWorkspaceSize = math(FLOAT_NO_BF16, Out::Same, |x| libm::erf(x[0]));
    // NaN gives 0 here: aclnnSign's NaN result is not documented, so callers must not rely on it.
    aclnnSign / aclnnSignGetWorkspaceSize = both(&[F64, F32, F16, I32, I64, Bool, BF16], |x| if x[0] > 0.0 { 1.0 } else if x[0] < 0.0 { -1.0 } else { 0.0 }, |x| x[0].signum());
    aclnnRelu / aclnnReluGetWorkspaceSize = both(&[F32, F16, I8, I32, I64, BF16], |x| if x[0] < 0.0 { 0.0 } else { x[0] }, |x| x[0].max(0));
    aclnnSigmoid / aclnnSigmoidGetWorkspaceSize = math(FLOAT_A2, Out::Same, |x| sigmoid(x[0]));
    aclnnLogSigmoid / aclnnLogSigmoidGetWorkspaceSize = math(FLOAT_A2, Out::Same, |x| x[0].min(0.0) - (-x[0].abs()).exp().ln_1p());
    aclnnGelu / aclnnGeluGetWorkspaceSize = math(FLOAT_A2, Out::Same, |x| gelu(x[0]));
    aclnnLogicalNot / aclnnLogicalNotGetWorkspaceSize = test(&[Bool, U8, I8, I16, I32, I64, F32, F16, F64, BF16], LOGICAL_OUT, |x| truth(x[0] == 0.0), |x| (x[0] == 0) as i64);
    aclnnBitwiseNot / aclnnBitwiseNotGetWorkspaceSize = both(BITWISE, |x| x[0], |x| !x[0]);
}

binary! {
    aclnnPowTensorTensor / aclnnPowTensorTensorGetWorkspaceSize = both(POW, |x| x[0].powf(x[1]), |x| int_pow(x[0], x[1]));
    aclnnAtan2 / aclnnAtan2GetWorkspaceSize = math(REAL, Out::Of(FLOAT), |x| x[0].atan2(x[1]));
    aclnnRemainderTensorTensor / aclnnRemainderTensorTensorGetWorkspaceSize = both(REMAINDER, |x| floor_mod(x[0], x[1]), |x| int_floor_mod(x[0], x[1]));
    aclnnEqTensor / aclnnEqTensorGetWorkspaceSize = test(EQ, ORDERED, |x| truth(x[0] == x[1]), |x| (x[0] == x[1]) as i64);
    aclnnNeTensor / aclnnNeTensorGetWorkspaceSize = test(EQ, ORDERED, |x| truth(x[0] != x[1]), |x| (x[0] != x[1]) as i64);
    aclnnGtTensor / aclnnGtTensorGetWorkspaceSize = test(ORDERED, ORDERED, |x| truth(x[0] > x[1]), |x| (x[0] > x[1]) as i64);
    aclnnGeTensor / aclnnGeTensorGetWorkspaceSize = test(ORDERED, ORDERED, |x| truth(x[0] >= x[1]), |x| (x[0] >= x[1]) as i64);
    aclnnLtTensor / aclnnLtTensorGetWorkspaceSize = test(ORDERED, ORDERED, |x| truth(x[0] < x[1]), |x| (x[0] < x[1]) as i64);
    aclnnLeTensor / aclnnLeTensorGetWorkspaceSize = test(ORDERED, ORDERED, |x| truth(x[0] <= x[1]), |x| (x[0] <= x[1]) as i64);
    aclnnLogicalAnd / aclnnLogicalAndGetWorkspaceSize = test(REAL, LOGICAL_OUT, |x| truth(x[0] != 0.0 && x[1] != 0.0), |x| (x[0] != 0 && x[1] != 0) as i64);
    aclnnLogicalOr / aclnnLogicalOrGetWorkspaceSize = test(REAL, LOGICAL_OUT, |x| truth(x[0] != 0.0 || x[1] != 0.0), |x| (x[0] != 0 || x[1] != 0) as i64);
    aclnnLogicalXor / aclnnLogicalXorGetWorkspaceSize = test(REAL, LOGICAL_OUT, |x| truth((x[0] != 0.0) != (x[1] != 0.0)), |x| ((x[0] != 0) != (x[1] != 0)) as i64);
    aclnnBitwiseAndTensor / aclnnBitwiseAndTensorGetWorkspaceSize = both(BITWISE, |x| x[0], |x| x[0] & x[1]);
    aclnnBitwiseOrTensor / aclnnBitwiseOrTensorGetWorkspaceSize = both(BITWISE, |x| x[0], |x| x[0] | x[1]);
    aclnnBitwiseXorTensor / aclnnBitwiseXorTensorGetWorkspaceSize = both(BITWISE, |x| x[0], |x| x[0] ^ x[1]);
    // Signed types shift arithmetically (UNCERTAIN in the docs; torch_npu relies on it).
    aclnnRightShift / aclnnRightShiftGetWorkspaceSize = both(SHIFT, |x| x[0], |x| shift_right(x[0], x[1]));
    aclnnMaximum / aclnnMaximumGetWorkspaceSize = both(MINMAX, |x| nan_max(x[0], x[1]), |x| x[0].max(x[1]));
    aclnnMinimum / aclnnMinimumGetWorkspaceSize = both(MINMAX, |x| nan_min(x[0], x[1]), |x| x[0].min(x[1]));
}

with_scalar! {
    aclnnPowTensorScalar / aclnnPowTensorScalarGetWorkspaceSize = both(POW, |x| x[0].powf(x[1]), |x| int_pow(x[0], x[1]));
    aclnnRemainderTensorScalar / aclnnRemainderTensorScalarGetWorkspaceSize = both(REMAINDER, |x| floor_mod(x[0], x[1]), |x| int_floor_mod(x[0], x[1]));
    aclnnEqScalar / aclnnEqScalarGetWorkspaceSize = test(EQ, ORDERED, |x| truth(x[0] == x[1]), |x| (x[0] == x[1]) as i64);
    aclnnNeScalar / aclnnNeScalarGetWorkspaceSize = test(EQ, ORDERED, |x| truth(x[0] != x[1]), |x| (x[0] != x[1]) as i64);
    aclnnGtScalar / aclnnGtScalarGetWorkspaceSize = test(ORDERED, ORDERED, |x| truth(x[0] > x[1]), |x| (x[0] > x[1]) as i64);
    aclnnGeScalar / aclnnGeScalarGetWorkspaceSize = test(ORDERED, ORDERED, |x| truth(x[0] >= x[1]), |x| (x[0] >= x[1]) as i64);
    aclnnLtScalar / aclnnLtScalarGetWorkspaceSize = test(ORDERED, ORDERED, |x| truth(x[0] < x[1]), |x| (x[0] < x[1]) as i64);
    aclnnLeScalar / aclnnLeScalarGetWorkspaceSize = test(ORDERED, ORDERED, |x| truth(x[0] <= x[1]), |x| (x[0] <= x[1]) as i64);
    aclnnBitwiseAndScalar / aclnnBitwiseAndScalarGetWorkspaceSize = both(BITWISE, |x| x[0], |x| x[0] & x[1]);
    aclnnBitwiseOrScalar / aclnnBitwiseOrScalarGetWorkspaceSize = both(BITWISE, |x| x[0], |x| x[0] | x[1]);
    aclnnBitwiseXorScalar / aclnnBitwiseXorScalarGetWorkspaceSize = both(BITWISE, |x| x[0], |x| x[0] ^ x[1]);
    aclnnClampMin / aclnnClampMinGetWorkspaceSize = both(CLAMP, |x| if x[0].is_nan() { x[0] } else { x[0].max(x[1]) }, |x| x[0].max(x[1]));
    aclnnClampMax / aclnnClampMaxGetWorkspaceSize = both(CLAMP, |x| if x[0].is_nan() { x[0] } else { x[0].min(x[1]) }, |x| x[0].min(x[1]));
    aclnnLeakyRelu / aclnnLeakyReluGetWorkspaceSize = math(FLOAT_A2, Out::Same, |x| if x[0] > 0.0 { x[0] } else { x[0] * x[1] });
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
        let spec = both(
            CLAMP,
            |x| {
                if x[0].is_nan() {
                    x[0]
                } else {
                    x[0].max(x[1]).min(x[2])
                }
            },
            |x| x[0].max(x[1]).min(x[2]),
        );
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
            Arc::new(move || {
                let c = map(OP, "condition", &cond)?
                    .read(Some(&out.shape))?
                    .into_i64();
                let x = map(OP, "self", &a)?.read(Some(&out.shape))?;
                let y = map(OP, "other", &b)?.read(Some(&out.shape))?;
                let vals = if out.dtype.is_float() {
                    let (x, y) = (x.into_f64(), y.into_f64());
                    Vals::F(
                        c.iter()
                            .enumerate()
                            .map(|(i, &c)| if c != 0 { x[i] } else { y[i] })
                            .collect(),
                    )
                } else {
                    let (x, y) = (x.into_i64(), y.into_i64());
                    Vals::I(
                        c.iter()
                            .enumerate()
                            .map(|(i, &c)| if c != 0 { x[i] } else { y[i] })
                            .collect(),
                    )
                };
                map(OP, "out", &out)?.write(vals)
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
            Arc::new(move || {
                let m = map(OP, "mask", &mask)?.read(Some(&dst.shape))?.into_i64();
                let md = map(OP, "selfRef", &dst)?;
                let vals = match (md.read(None)?, value) {
                    (Vals::F(x), v) => {
                        let v = round_to(dst.dtype, v.as_f64());
                        Vals::F(
                            x.into_iter()
                                .zip(&m)
                                .map(|(x, &m)| if m != 0 { v } else { x })
                                .collect(),
                        )
                    }
                    (Vals::I(x), v) => {
                        let v = match v {
                            ScalarValue::Int(v) => v,
                            ScalarValue::Float(f) => f as i64,
                        };
                        Vals::I(
                            x.into_iter()
                                .zip(&m)
                                .map(|(x, &m)| if m != 0 { v } else { x })
                                .collect(),
                        )
                    }
                };
                md.write(vals)
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
            math(FLOAT_A2, Out::Same, |x| x[0] * gelu_grad(x[1])),
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
            math(FLOAT, Out::Same, |x| x[0] * x[1] * (1.0 - x[1])),
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
            |x| if x[1] > x[2] { x[0] } else { 0.0 },
            |x| if x[1] > x[2] { x[0] } else { 0 },
        );
        elementwise(OP, args, tensor_arg(OP, "out", out)?, spec)
    })
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
