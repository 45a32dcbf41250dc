//! Instruction sequences for the interpreted `elementwise_program` kernel that stand in for
//! element-wise functions the vector API has no instruction for (or only an approximate one).

use burn_ascend_kernels::program::{Cmp, Op, Program, Value};

/// Abramowitz & Stegun 7.1.26: erf(x) = 1 - t(a1 + t(a2 + ...)) e^(-x^2), t = 1 / (1 + p|x|),
/// absolute error below 1.5e-7 (the vector API subset has no erf).
const ERF_P: f32 = 0.327_591_1;
const ERF_A: [f32; 5] = [
    0.254_829_6,
    -0.284_496_74,
    1.421_413_7,
    -1.453_152_1,
    1.061_405_4,
];

/// `a / s` exactly (the vector unit's Reciprocal is approximate).
pub fn div_scalar(p: &mut Program, a: Value, s: f32) -> Value {
    let b = p.push(Op::Dup(s));
    p.push(Op::Div(a, b))
}

/// `s / a` exactly.
pub fn div_scalar_rev(p: &mut Program, s: f32, a: Value) -> Value {
    let b = p.push(Op::Dup(s));
    p.push(Op::Div(b, a))
}

/// `1 / a` exactly.
pub fn recip(p: &mut Program, a: Value) -> Value {
    div_scalar_rev(p, 1.0, a)
}

/// tanh x = 1 - 2 / (e^(2x) + 1), which saturates to ±1 without overflow trouble.
pub fn tanh(p: &mut Program, x: Value) -> Value {
    let x2 = p.push(Op::MulS(x, 2.0));
    let e = p.push(Op::Exp(x2));
    let d = p.push(Op::AddS(e, 1.0));
    let q = div_scalar_rev(p, -2.0, d);
    p.push(Op::AddS(q, 1.0))
}

/// erf x by Abramowitz & Stegun 7.1.26, odd by a select on the sign.
pub fn erf(p: &mut Program, x: Value) -> Value {
    let ax = p.push(Op::Abs(x));
    let d = p.push(Op::MulS(ax, ERF_P));
    let d = p.push(Op::AddS(d, 1.0));
    let t = recip(p, d);
    let mut poly = p.push(Op::MulS(t, ERF_A[4]));
    for a in ERF_A[..4].iter().rev() {
        poly = p.push(Op::AddS(poly, *a));
        poly = p.push(Op::Mul(poly, t));
    }
    let sq = p.push(Op::Mul(x, x));
    let sq = p.push(Op::MulS(sq, -1.0));
    let e = p.push(Op::Exp(sq));
    let tail = p.push(Op::Mul(poly, e));
    let tail = p.push(Op::MulS(tail, -1.0));
    let y = p.push(Op::AddS(tail, 1.0));
    let neg = p.push(Op::MulS(y, -1.0));
    let below = p.push(Op::CmpS(x, Cmp::Lt, 0.0));
    p.push(Op::Select {
        cond: below,
        then: neg,
        otherwise: y,
    })
}

/// 1 - b for a 0/1 value.
pub fn bool_not(p: &mut Program, b: Value) -> Value {
    let neg = p.push(Op::MulS(b, -1.0));
    p.push(Op::AddS(neg, 1.0))
}
