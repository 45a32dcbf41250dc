//! Edge values, with Burn's behaviour as the reference gives it: NaN, +-Inf and -0.0 through
//! arithmetic, rounding, comparisons, casts and reductions; float division by zero; integer
//! overflow, which wraps; the signs of integer division and remainder; empty reductions.
//!
//! Not asserted, on purpose:
//! - NaN propagation of max/min/cummax/cummin/clamp/maximum: burn-flex propagates NaN, but
//!   Burn's own suite gates those tests to flex ("other backends follow IEEE 754 min/max and
//!   drop NaN"); `float_edge_extrema` uses infinities only.
//! - Integer division or remainder by zero, I64 overflow and overflowing cumulative sums: the
//!   reference panics (Rust arithmetic in a debug build), so it defines no result.

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Float, Int, Tensor, TensorData};

use crate::common::*;
use crate::ops;

const NAN: f64 = f64::NAN;
const INF: f64 = f64::INFINITY;
const ROUNDING: [f64; 14] = [
    0.5, 1.5, 2.5, 3.5, -0.5, -1.5, -2.5, -0.25, 0.25, 1.75, -0.0, INF, -INF, NAN,
];

/// The dtypes whose overflow the reference wraps (it computes them in i64, then truncates).
const NARROW_INTS: [DType; 4] = [DType::I32, DType::I16, DType::I8, DType::U8];
const SIGNED_INTS: [DType; 4] = [DType::I64, DType::I32, DType::I16, DType::I8];

/// The smallest and largest value of an int dtype.
fn bounds(dtype: DType) -> (i64, i64) {
    match dtype {
        DType::I64 => (i64::MIN, i64::MAX),
        DType::I32 => (i32::MIN.into(), i32::MAX.into()),
        DType::I16 => (i16::MIN.into(), i16::MAX.into()),
        DType::I8 => (i8::MIN.into(), i8::MAX.into()),
        DType::U8 => (0, u8::MAX.into()),
        other => unreachable!("not an int dtype: {other:?}"),
    }
}

ops! {
    /// Signed zeros, infinities, NaN and division by zero through the four operations.
    values float_edge_arithmetic(FLOATS, Tolerance::EXACT) |c| {
        let a = [NAN, INF, -INF, INF, -0.0, -0.0, 0.0, 1.0, -1.0, 0.0, 2.5];
        let b = [1.0, INF, INF, -INF, -0.0, 0.0, -0.0, 0.0, 0.0, 0.0, -0.0];
        let (a, b) = (c.tensor::<Float, 1>(&a, [11]), c.tensor::<Float, 1>(&b, [11]));
        vec![a.clone() + b.clone(), a.clone() - b.clone(), a.clone() * b.clone(), a / b]
    };
    values float_edge_unary_exact(FLOATS, Tolerance::EXACT) |c| {
        let x = c.tensor::<Float, 1>(&[NAN, INF, -INF, -0.0, 0.0, -0.5, 0.5, -1.0, 2.0], [9]);
        vec![x.clone().neg(), x.clone().abs(), x.clone().recip(), x * -1.0]
    };
    values float_edge_unary_loose(FLOATS, Tolerance::F32_IN_F64) |c| {
        let x = c.tensor::<Float, 1>(&[NAN, INF, -INF, -0.0, 0.0, -1.0, 1.0, -2.5], [8]);
        vec![
            x.clone().exp(),
            x.clone().log(),
            x.clone().log1p(),
            x.clone().sqrt(),
            x.clone().tanh(),
            x.clone().atan(),
            x.clone().erf(),
            burn::tensor::activation::sigmoid(x),
        ]
    };
    /// Round half to even. The sign of a zero result is not asserted: the reference gives
    /// +0.0 for round(-0.5) where IEEE 754's roundTiesToEven gives -0.0.
    values float_edge_round_half_even(FLOATS) |c| {
        let x = c.tensor::<Float, 1>(&ROUNDING, [ROUNDING.len()]);
        x.round()
    };
    /// -0.0 where the result is a negative zero.
    values float_edge_floor_ceil_trunc(FLOATS, Tolerance::EXACT) |c| {
        let x = c.tensor::<Float, 1>(&ROUNDING, [ROUNDING.len()]);
        vec![x.clone().floor(), x.clone().ceil(), x.trunc()]
    };
    /// NaN is unequal to everything, itself included; -0.0 equals 0.0.
    values float_edge_comparisons(FLOATS) |c| {
        let a = c.tensor::<Float, 1>(&[NAN, NAN, 1.0, INF, -0.0, -INF, INF], [7]);
        let b = c.tensor::<Float, 1>(&[NAN, 1.0, NAN, INF, 0.0, INF, -INF], [7]);
        vec![
            a.clone().equal(b.clone()),
            a.clone().not_equal(b.clone()),
            a.clone().greater(b.clone()),
            a.clone().greater_equal(b.clone()),
            a.clone().lower(b.clone()),
            a.clone().lower_equal(b),
            a.clone().equal_elem(NAN),
            a.not_equal_elem(NAN),
        ]
    };
    /// burn-flex keeps NaN (the default `float_sign` would give 0).
    values float_edge_sign(FLOATS) |c| {
        c.tensor::<Float, 1>(&[NAN, INF, -INF, -0.0, 0.0, -3.0, 2.0], [7]).sign()
    };
    /// The sign of the divisor; NaN for a zero divisor or an infinite dividend. (A finite
    /// dividend over an infinite divisor is left out: the reference's ((a % b) + b) % b gives
    /// NaN where Python gives the dividend.)
    values float_edge_remainder(FLOATS) |c| {
        let a = c.tensor::<Float, 1>(&[5.5, -5.5, 5.5, -5.5, 0.0, 3.0, INF], [7]);
        let b = c.tensor::<Float, 1>(&[2.0, 2.0, -2.0, -2.0, 3.0, 0.0, 2.0], [7]);
        (a.clone().remainder(b), a.remainder_scalar(-2.0))
    };
    values float_edge_powf(FLOATS, Tolerance::LOOSE) |c| {
        let base = c.tensor::<Float, 1>(&[0.0, 0.0, 2.0, -2.0, -8.0, INF, NAN, 4.0], [8]);
        let exponent = c.tensor::<Float, 1>(&[0.0, -1.0, 0.5, 3.0, 0.5, 0.0, 0.0, -0.5], [8]);
        (base.clone().powf(exponent), base.powf_scalar(0.5))
    };
    /// Infinities only: NaN propagation of the extrema is not asserted (see the module doc).
    values float_edge_extrema(FLOATS, Tolerance::EXACT) |c| {
        let x = c.tensor::<Float, 2>(&[-INF, 3.0, INF, -0.5, 2.0, -INF, 1.0, -2.0], [2, 4]);
        vec![
            x.clone().max_dim(1),
            x.clone().min_dim(1),
            x.clone().cummax(1),
            x.clone().cummin(1),
            x.clone().clamp(-1.0, 1.0),
            x.clone().max().reshape([1, 1]),
            x.min().reshape([1, 1]),
        ]
    };
    values float_edge_arg_extrema(FLOATS) |c| {
        let x = c.tensor::<Float, 2>(&[-INF, 3.0, INF, INF, 2.0, -INF, -INF, -2.0], [2, 4]);
        (x.clone().argmax(1), x.argmin(1))
    };
    /// Sums and products through infinities; reductions of nothing.
    values float_edge_reductions(FLOATS) |c| {
        let x = c.tensor::<Float, 2>(&[INF, 1.0, -2.0, INF, -INF, 0.0], [2, 3]);
        let empty = c.tensor::<Float, 2>(&[], [2, 0]);
        let along_dims = vec![
            x.clone().sum_dim(1),
            x.clone().prod_dim(1),
            x.clone().cumsum(1),
            empty.clone().sum_dim(1),
            empty.clone().prod_dim(1),
        ];
        (along_dims, vec![x.sum(), empty.clone().sum(), empty.prod()])
    };
    values float_edge_any_all_empty(FLOATS) |c| {
        let empty = c.tensor::<Float, 2>(&[], [2, 0]);
        (empty.clone().any(), empty.all())
    };
    /// Values beyond a narrower float type become infinities, tiny ones zeros.
    values float_edge_cast_overflow([DType::F32, DType::F64], Tolerance::EXACT) |c| {
        let x = c.tensor::<Float, 1>(&[70000.0, -70000.0, 1e-8, -1e-8, 3.0e38, INF, NAN], [7]);
        FLOATS.map(|to| x.clone().cast(to)).to_vec()
    };
    values float_edge_sort_special(FLOATS) |c| {
        let x = c.tensor::<Float, 2>(&[3.0, NAN, -INF, 1.0, -0.5, INF, -2.0, NAN], [2, 4]);
        (x.clone().sort(1), x.sort_descending(1))
    };
    /// One NaN per row, so the indices are defined too.
    values float_edge_sort_indices_special(FLOATS) |c| {
        let x = c.tensor::<Float, 2>(&[3.0, NAN, -INF, 1.0, -0.5, INF, -2.0, 4.0], [2, 4]);
        (x.clone().argsort(1), x.sort_with_indices(1))
    };

    /// Add, subtract and multiply across the bounds of the dtype.
    values int_edge_overflow_wraps(NARROW_INTS) |c| {
        let (a, b) = overflow_operands(c);
        vec![
            a.clone() + b.clone(),
            a.clone() - b.clone(),
            a.clone() * b,
            a.clone() + 1,
            a.clone() - 1,
            a * 2,
        ]
    };
    /// Sums across the bounds of the dtype (not cumsum: the reference's cumsum panics on
    /// overflow).
    values int_edge_sum_wraps(NARROW_INTS) |c| {
        let (a, b) = overflow_operands(c);
        let rows = Tensor::stack::<2>(vec![a.clone(), b.clone()], 0);
        (rows.sum_dim(1), Tensor::cat(vec![a, b], 0).sum())
    };
    /// The negation and absolute value of the smallest value wrap to itself.
    values int_edge_abs_neg_min([DType::I32, DType::I16, DType::I8]) |c| {
        let (min, _) = bounds(c.dtype);
        let x = c.ints::<Int, 1>(&[min, min + 1, -1, 0], [4]);
        (x.clone().abs(), -x)
    };
    /// Division truncates toward zero.
    values int_edge_division_truncates(SIGNED_INTS) |c| {
        let (a, b) = signed_operands(c);
        (a.clone() / b, a / -3)
    };
    /// The remainder has the sign of the divisor (Burn's test values).
    values int_edge_remainder_signs(SIGNED_INTS) |c| {
        let (a, b) = signed_operands(c);
        (a.clone().remainder(b), a.remainder_scalar(-3))
    };
    /// Arithmetic right shifts; left shifts into and beyond the sign bit wrap.
    values int_edge_shifts(SIGNED_INTS) |c| {
        let a = c.ints::<Int, 1>(&[-8, -1, 7, 64, -64], [5]);
        let amount = c.ints::<Int, 1>(&[1, 3, 1, 1, 1], [5]);
        (a.clone().bitwise_right_shift(amount.clone()), a.bitwise_left_shift(amount))
    };
    /// Shift amounts up to and past the width: Burn's reference shifts in 64 bits, the amount
    /// modulo 64, then wraps to the dtype (on the emulated CANN 8.1.RC1, without
    /// aclnnRightShift, the right shift is composed from floor divisions).
    values int_edge_shift_widths(SIGNED_INTS) |c| {
        let (min, max) = bounds(c.dtype);
        let w = 8 * c.dtype.size() as i64;
        let a = c.ints::<Int, 1>(&[min, max, -1, 5, -5, min + 1, max, -7, 3], [9]);
        let amount = c.ints::<Int, 1>(&[w - 1, w - 1, w - 1, w - 2, w, w - 2, 0, 63, 65], [9]);
        (a.clone().bitwise_right_shift(amount.clone()), a.bitwise_left_shift(amount))
    };
    /// Narrowing int casts keep the low bits.
    values int_edge_cast_wraps([DType::I64, DType::I32]) |c| {
        let x = c.ints::<Int, 1>(&[300, -1, 128, 65541, -129, 255], [6]);
        INTS.map(|to| x.clone().cast(to)).to_vec()
    };
    values int_edge_bitwise_extremes(NARROW_INTS) |c| {
        let (min, max) = bounds(c.dtype);
        let minus_one_or_one = if min < 0 { -1 } else { 1 };
        let a = c.ints::<Int, 1>(&[min, max, 0, minus_one_or_one], [4]);
        let b = c.ints::<Int, 1>(&[max, max, min, 1], [4]);
        (a.clone().bitwise_and(b.clone()), a.clone().bitwise_xor(b), a.bitwise_not())
    };

    /// No true value: a [0, 2] result and empty coordinate lists.
    values bool_edge_argwhere_none(BOOLS) |c| {
        let none = Tensor::<B, 2, burn::tensor::Bool>::from_data(
            TensorData::new(vec![false; 6], [2, 3]),
            &c.device,
        );
        (none.clone().argwhere(), none.nonzero())
    };
}

/// Burn's `test_sort_float_nan`: NaN sorts last in ascending order. Checked against the
/// expected values on both backends, not only against each other.
#[test]
fn float_sort_puts_nan_last() {
    fn sorted<B: burn::tensor::backend::Backend>(device: &B::Device, dtype: DType) -> TensorData {
        let data = TensorData::new(vec![2.0, NAN, -1.0, INF, NAN, -INF], [6]).convert_dtype(dtype);
        Tensor::<B, 1>::from_data(data, (device, dtype))
            .sort(0)
            .into_data()
    }
    let expected = [-INF, -1.0, 2.0, INF, NAN, NAN];
    for dtype in FLOATS {
        let want = TensorData::new(expected.to_vec(), [6]).convert_dtype(dtype);
        let reference = sorted::<Flex>(&Default::default(), dtype);
        assert_close(
            &format!("float_sort_puts_nan_last (reference, {dtype:?})"),
            &reference,
            &want,
            Tolerance::EXACT,
        );
        let got = sorted::<Ascend>(&device(), dtype);
        assert_close(
            &format!("float_sort_puts_nan_last ({dtype:?})"),
            &got,
            &want,
            Tolerance::EXACT,
        );
    }
}

/// Operands at and near the bounds of the dtype under test.
fn overflow_operands<B: Backend>(c: &Case<B>) -> (Tensor<B, 1, Int>, Tensor<B, 1, Int>) {
    let (min, max) = bounds(c.dtype);
    let a = c.ints::<Int, 1>(&[max, min, max, min, max / 2 + 1, 3], [6]);
    let b = c.ints::<Int, 1>(&[1, 1, max, max, 2, 5], [6]);
    (a, b)
}

/// Dividends and divisors of every sign, Burn's remainder test values first.
fn signed_operands<B: Backend>(c: &Case<B>) -> (Tensor<B, 1, Int>, Tensor<B, 1, Int>) {
    let a = c.ints::<Int, 1>(&[-3, -2, -1, 1, 2, 3, 7, -7, 7, -7], [10]);
    let b = c.ints::<Int, 1>(&[2, 3, 1, 2, 1, 3, 3, 3, -3, -3], [10]);
    (a, b)
}
