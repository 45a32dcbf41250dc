//! The numerics of the emulated Atlas A2: which type each operator computes in, how elements
//! convert between their dtype and that type, and in which order sums accumulate.
//!
//! Sources: `hardware-atlas-a2.md` (vector unit: 256-byte repeats), `ascendc-api.md` §5.2 (the
//! vector ops' dtypes: half and float, no bf16 arithmetic, "Cast(bf16->float) -> compute in
//! float -> Cast(float->bf16, CAST_RINT)"), §5.3 (Cast rounding modes, float->int saturates),
//! §5.5 (ReduceSum order), and the `aclnn-ops.tsv` rows (each op's dtypes; aclnnCast: float to
//! int maps NaN to 0, int32 to int8 exact only in (-2048, 1920)).
//!
//! - **F32** computes in f32. **F16 and BF16** are widened to f32, computed in f32 and rounded
//!   once, to nearest even, when stored. (The vector unit has native half arithmetic too; for
//!   one correctly rounded operation, f32 then rounding to half gives the same result, since
//!   f32 carries more than twice half's precision plus two bits. No aclnn op used here is
//!   documented to keep half intermediates, so none is modelled that way.)
//! - **F64** computes in f64, only in ops whose A2 dtype table lists DOUBLE.
//! - **Integers** compute exactly (in i128, which holds every value of every integer dtype,
//!   U64 included) and wrap to their own width when stored: the wrapping ring operations
//!   (add, sub, mul, neg, pow) commute with the final truncation, so the stored result is the
//!   one computed in the dtype's own width.
//! - **Reductions** accumulate float inputs in f32 (F64 in f64) in the order of the count form
//!   of the vector ReduceSum (ascendc-api.md §5.5): a binary tree of adjacent pairs inside each
//!   256-byte repeat (64 f32 or 32 f64 elements), the repeats' partial sums added one after
//!   another. UNCERTAIN: that aclnnReduceSum and friends keep this order across cores and
//!   tiles is not documented; the emulation models one core walking the reduced elements in
//!   row-major order. Integer reductions accumulate in the output's integer type (wrapping).
//! - **The cube unit** (matmul, convolution, grouped matmul) reads f16/bf16 (and f32 under
//!   cubeMathType) operands and accumulates in f32: see `kernels::matmul` and `nn`.

use ascend_acl::dtype::DataType::{self, *};
use half::{bf16, f16};
use num_traits::Float;

use super::meta::ScalarValue;

/// The most values a kernel buffers at a time where it batches work (scatter's checked indices,
/// the convolution's patch columns), so its host memory does not grow with the tensors.
pub(crate) const CHUNK: usize = 1 << 16;

/// The type an operator computes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Domain {
    F32,
    F64,
    Int,
}

impl Domain {
    /// The compute type of an operator over these dtypes (its operands and output): f64 if one
    /// is F64, else f32 if one is a float, else the integer domain.
    pub fn of(dtypes: &[DataType]) -> Domain {
        if dtypes.contains(&F64) {
            Domain::F64
        } else if dtypes.iter().any(|d| d.is_float()) {
            Domain::F32
        } else {
            Domain::Int
        }
    }

    /// The exact domain of one dtype's values: f64 for floats (every f16, bf16 and f32 value is
    /// an f64), i128 for integers and bools.
    pub fn exact(dtype: DataType) -> Domain {
        if dtype.is_float() {
            Domain::F64
        } else {
            Domain::Int
        }
    }
}

/// Reads one element of a dtype from host memory, converted to a compute type.
pub(crate) type Load<T> = unsafe fn(*const u8) -> T;
/// Writes one compute-type value to host memory as an element of a dtype.
pub(crate) type Store<T> = unsafe fn(*mut u8, T);

unsafe fn rd<T: Copy>(p: *const u8) -> T {
    (p as *const T).read_unaligned()
}

unsafe fn wr<T>(p: *mut u8, v: T) {
    (p as *mut T).write_unaligned(v)
}

/// A compute type: f32, f64 or the integer domain (i128).
pub(crate) trait Elem:
    Copy + Default + PartialEq + PartialOrd + Send + Sync + 'static
{
    /// How an element of `dtype` becomes this type: exact for narrower types; floats into the
    /// integer domain truncate toward zero (NaN to 0), integers into a float domain round to
    /// nearest.
    fn loader(dtype: DataType) -> Load<Self>;
    /// How a value is stored as an element of `dtype`: floats round to nearest even (F16, BF16,
    /// F32) or convert as aclnnCast does to integers (toward zero, saturating, NaN to 0);
    /// integers wrap to the dtype's width.
    fn storer(dtype: DataType) -> Store<Self>;
    /// A host scalar as an operator applies it to tensors of `dtype`: floats rounded to
    /// `dtype` first (when it is a float type), integers as they are.
    fn scalar(s: ScalarValue, dtype: DataType) -> Self;
    /// Whether elements of `dtype` are stored as this very type (no conversion).
    fn is_native(dtype: DataType) -> bool;
}

macro_rules! float_elem {
    ($t:ty, $from_f16:expr, $from_bf16:expr, $to_f16:expr, $to_bf16:expr) => {
        impl Elem for $t {
            fn loader(dtype: DataType) -> Load<Self> {
                match dtype {
                    F64 => |p| unsafe { rd::<f64>(p) as $t },
                    F32 => |p| unsafe { rd::<f32>(p) as $t },
                    F16 => |p| $from_f16(f16::from_bits(unsafe { rd::<u16>(p) })),
                    BF16 => |p| $from_bf16(bf16::from_bits(unsafe { rd::<u16>(p) })),
                    I64 => |p| unsafe { rd::<i64>(p) as $t },
                    I32 => |p| unsafe { rd::<i32>(p) as $t },
                    I16 => |p| unsafe { rd::<i16>(p) as $t },
                    I8 => |p| unsafe { rd::<i8>(p) as $t },
                    U64 => |p| unsafe { rd::<u64>(p) as $t },
                    U32 => |p| unsafe { rd::<u32>(p) as $t },
                    U16 => |p| unsafe { rd::<u16>(p) as $t },
                    U8 => |p| unsafe { rd::<u8>(p) as $t },
                    Bool => |p| (unsafe { rd::<u8>(p) } != 0) as u8 as $t,
                }
            }

            fn storer(dtype: DataType) -> Store<Self> {
                // Rust's float-to-integer `as` is aclnnCast's rule: toward zero, saturating,
                // NaN to 0.
                match dtype {
                    F64 => |p, v| unsafe { wr(p, v as f64) },
                    F32 => |p, v| unsafe { wr(p, v as f32) },
                    F16 => |p, v| unsafe { wr(p, $to_f16(v).to_bits()) },
                    BF16 => |p, v| unsafe { wr(p, $to_bf16(v).to_bits()) },
                    I64 => |p, v| unsafe { wr(p, v as i64) },
                    I32 => |p, v| unsafe { wr(p, v as i32) },
                    I16 => |p, v| unsafe { wr(p, v as i16) },
                    I8 => |p, v| unsafe { wr(p, v as i8) },
                    U64 => |p, v| unsafe { wr(p, v as u64) },
                    U32 => |p, v| unsafe { wr(p, v as u32) },
                    U16 => |p, v| unsafe { wr(p, v as u16) },
                    U8 => |p, v| unsafe { wr(p, v as u8) },
                    Bool => |p, v| unsafe { wr(p, (v != 0.0) as u8) },
                }
            }

            fn scalar(s: ScalarValue, dtype: DataType) -> Self {
                round_to(dtype, s.as_f64()) as $t
            }

            fn is_native(dtype: DataType) -> bool {
                dtype.size() == std::mem::size_of::<$t>() && dtype.is_float()
            }
        }
    };
}

float_elem!(
    f32,
    f16::to_f32,
    bf16::to_f32,
    f16::from_f32,
    bf16::from_f32
);
float_elem!(
    f64,
    f16::to_f64,
    bf16::to_f64,
    f16::from_f64,
    bf16::from_f64
);

impl Elem for i128 {
    fn loader(dtype: DataType) -> Load<Self> {
        match dtype {
            F64 => |p| unsafe { rd::<f64>(p) as i128 },
            F32 => |p| unsafe { rd::<f32>(p) as i128 },
            F16 => |p| f16::from_bits(unsafe { rd::<u16>(p) }).to_f32() as i128,
            BF16 => |p| bf16::from_bits(unsafe { rd::<u16>(p) }).to_f32() as i128,
            I64 => |p| unsafe { rd::<i64>(p) as i128 },
            I32 => |p| unsafe { rd::<i32>(p) as i128 },
            I16 => |p| unsafe { rd::<i16>(p) as i128 },
            I8 => |p| unsafe { rd::<i8>(p) as i128 },
            U64 => |p| unsafe { rd::<u64>(p) as i128 },
            U32 => |p| unsafe { rd::<u32>(p) as i128 },
            U16 => |p| unsafe { rd::<u16>(p) as i128 },
            U8 => |p| unsafe { rd::<u8>(p) as i128 },
            Bool => |p| (unsafe { rd::<u8>(p) } != 0) as i128,
        }
    }

    fn storer(dtype: DataType) -> Store<Self> {
        // Integers to F16/BF16 go through f32, as the AI Core's Cast does (int -> float ->
        // half/bf16; ascendc-api.md §5.3 has no direct int32 -> bf16 path).
        match dtype {
            F64 => |p, v| unsafe { wr(p, v as f64) },
            F32 => |p, v| unsafe { wr(p, v as f32) },
            F16 => |p, v| unsafe { wr(p, f16::from_f32(v as f32).to_bits()) },
            BF16 => |p, v| unsafe { wr(p, bf16::from_f32(v as f32).to_bits()) },
            I64 => |p, v| unsafe { wr(p, v as i64) },
            I32 => |p, v| unsafe { wr(p, v as i32) },
            I16 => |p, v| unsafe { wr(p, v as i16) },
            I8 => |p, v| unsafe { wr(p, v as i8) },
            U64 => |p, v| unsafe { wr(p, v as u64) },
            U32 => |p, v| unsafe { wr(p, v as u32) },
            U16 => |p, v| unsafe { wr(p, v as u16) },
            U8 => |p, v| unsafe { wr(p, v as u8) },
            Bool => |p, v| unsafe { wr(p, (v != 0) as u8) },
        }
    }

    fn scalar(s: ScalarValue, _dtype: DataType) -> Self {
        match s {
            ScalarValue::Int(v) => v as i128,
            ScalarValue::Float(v) => v as i64 as i128,
        }
    }

    fn is_native(_dtype: DataType) -> bool {
        false
    }
}

/// One element of `dtype` holding `v` (stored with the dtype's rounding or wrapping), as raw
/// bytes: the first `dtype.size()` of them.
pub(crate) fn element<T: Elem>(dtype: DataType, v: T) -> [u8; 8] {
    let mut bytes = [0u8; 8];
    // SAFETY: every dtype is at most 8 bytes wide.
    unsafe { T::storer(dtype)(bytes.as_mut_ptr(), v) };
    bytes
}

/// aclnnCast's int32 -> int8 on Atlas A2: exact (two's complement wrap, as torch) only for
/// inputs in (-2048, 1920) (aclnnCast doc, TSV row). ASSUMPTION, UNCERTAIN: outside that range
/// the emulation passes the value through f16 (round to nearest even, as the AI Core path
/// int32 -> half -> int8 would; beyond half's range it saturates) before wrapping, so that a
/// result relying on the exact wrap out there differs from it, as it may on hardware.
pub(crate) fn int32_to_int8(v: i32) -> i8 {
    if -2048 < v && v < 1920 {
        return v as i8;
    }
    let h = f16::from_f32(v as f32);
    if h.is_infinite() {
        return if v < 0 { i8::MIN } else { i8::MAX };
    }
    (h.to_f32() as i32) as i8
}

/// Operands as the cube unit reads them: f16/bf16 exactly; f32 as `cubeMathType` selects
/// (0 keeps f32; 1 and 3 round to HF32, which keeps 10 mantissa bits like TF32; 2 rounds to
/// f16). The cube then accumulates in f32.
pub(crate) fn cube_operands(values: &mut [f32], dtype: DataType, cube: i8) {
    match (dtype, cube) {
        (F32, 1 | 3) => values
            .iter_mut()
            .for_each(|x| *x = f32::from_bits(x.to_bits().wrapping_add(0x1000) & 0xffff_e000)),
        (F32, 2) => values
            .iter_mut()
            .for_each(|x| *x = f16::from_f32(*x).to_f32()),
        _ => {}
    }
}

/// Rounds `v` to the precision of a float type (identity for integer types).
pub(crate) fn round_to(dtype: DataType, v: f64) -> f64 {
    match dtype {
        F32 => v as f32 as f64,
        F16 => f16::from_f64(v).to_f64(),
        BF16 => bf16::from_f64(v).to_f64(),
        _ => v,
    }
}

/// A float compute type (f32 or f64) with what the emulated kernels need beyond
/// `num_traits::Float`.
pub(crate) trait Real: Elem + Float + std::iter::Sum {
    /// A constant, rounded to this type.
    fn c(v: f64) -> Self;
    fn erf(self) -> Self;
    /// Round half to even.
    fn round_even(self) -> Self;
}

impl Real for f32 {
    fn c(v: f64) -> Self {
        v as f32
    }
    fn erf(self) -> Self {
        libm::erff(self)
    }
    fn round_even(self) -> Self {
        self.round_ties_even()
    }
}

impl Real for f64 {
    fn c(v: f64) -> Self {
        v
    }
    fn erf(self) -> Self {
        libm::erf(self)
    }
    fn round_even(self) -> Self {
        self.round_ties_even()
    }
}

/// An associative fold of a compute type (sum, product) with its identity.
pub(crate) trait Fold<T>: Copy {
    fn identity(self) -> T;
    fn apply(self, a: T, b: T) -> T;
}

/// Float addition or multiplication.
#[derive(Clone, Copy)]
pub(crate) enum Arith {
    Add,
    Mul,
}

impl<T: Real> Fold<T> for Arith {
    fn identity(self) -> T {
        match self {
            Arith::Add => T::zero(),
            Arith::Mul => T::one(),
        }
    }
    fn apply(self, a: T, b: T) -> T {
        match self {
            Arith::Add => a + b,
            Arith::Mul => a * b,
        }
    }
}

/// Accumulates a float sequence in the order of the vector unit's ReduceSum count form: a
/// binary tree of adjacent pairs inside each 256-byte repeat, repeats accumulated in turn (see
/// the module documentation, UNCERTAIN for whole aclnn reductions).
pub(crate) struct Blocked<T, F> {
    fold: F,
    repeat: Vec<T>,
    total: T,
}

impl<T: Real, F: Fold<T>> Blocked<T, F> {
    pub fn new(fold: F) -> Self {
        let per_repeat = 256 / std::mem::size_of::<T>();
        Blocked {
            fold,
            repeat: Vec::with_capacity(per_repeat),
            total: fold.identity(),
        }
    }

    pub fn push(&mut self, x: T) {
        self.repeat.push(x);
        if self.repeat.len() == self.repeat.capacity() {
            self.flush();
        }
    }

    fn flush(&mut self) {
        let mut len = self.repeat.len();
        if len == 0 {
            return;
        }
        while len > 1 {
            let half = len / 2;
            for i in 0..half {
                self.repeat[i] = self.fold.apply(self.repeat[2 * i], self.repeat[2 * i + 1]);
            }
            if len % 2 == 1 {
                self.repeat[half] = self.repeat[len - 1];
            }
            len = len.div_ceil(2);
        }
        self.total = self.fold.apply(self.total, self.repeat[0]);
        self.repeat.clear();
    }

    /// The accumulated value; the accumulator starts again empty.
    pub fn finish(&mut self) -> T {
        self.flush();
        std::mem::replace(&mut self.total, self.fold.identity())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int32_to_int8_is_exact_inside_the_documented_range_only() {
        for v in [-2047, -129, -128, -1, 0, 127, 128, 255, 1919] {
            assert_eq!(int32_to_int8(v), v as i8, "{v}");
        }
        // 2049 rounds to 2048 in half, which wraps to 0 (the exact wrap is 1).
        assert_eq!(int32_to_int8(2049), 0);
        assert_eq!(int32_to_int8(i32::MAX), i8::MAX);
        assert_eq!(int32_to_int8(i32::MIN), i8::MIN);
    }

    #[test]
    fn blocked_sums_pair_inside_a_repeat_and_chain_repeats() {
        // Inside one repeat the ones pair up before meeting 2^24: the sum is exact.
        let mut acc = Blocked::<f32, _>::new(Arith::Add);
        acc.push(16_777_216.0);
        (0..63).for_each(|_| acc.push(1.0));
        // Level one adds 2^24 + 1 (rounds to 2^24) and pairs of ones; the tree then meets
        // 2^24 with 62 (exact).
        assert_eq!(acc.finish(), 16_777_216.0 + 62.0);
        // Across repeats the partial sums chain: each repeat [1, 0, ..] adds a lone 1 to
        // 2^24, which rounds back to 2^24 (f64 would give 2^24 + 4).
        let mut acc = Blocked::<f32, _>::new(Arith::Add);
        for first in [16_777_216.0, 1.0, 1.0, 1.0, 1.0] {
            acc.push(first);
            (0..63).for_each(|_| acc.push(0.0));
        }
        assert_eq!(acc.finish(), 16_777_216.0);
    }
}
