//! Shared harness of the differential tests: the same Burn code runs on `Ascend` (the
//! emulated NPU) and on `burn-flex`, the reference, and the results are compared.
//!
//! Two ways to write a test:
//! - [`differential_test!`]: one body over every dtype and every input [`View`];
//! - [`ops!`]: a table of ops, one entry (name, dtypes, arity, generic body) per test; the
//!   arity decides which operand layouts ([`Operand`]) the entry runs on, see [`Arity`].
#![allow(dead_code)]

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

use burn::tensor::backend::Backend;
use burn::tensor::{s, BasicOps, Bool, DType, Int, Tensor, TensorData};

pub mod paged;

// ---------------------------------------------------------------------------------------------
// The device under test: one place chooses it for the whole suite.
// ---------------------------------------------------------------------------------------------

/// Environment variable: the device the suite runs on, `emulated`, `emulated:N`, `npu` or
/// `npu:N` (default `emulated:0`).
pub const ENV_TEST_DEVICE: &str = "BURN_ASCEND_TEST_DEVICE";

/// The device the suite runs on (see [`ENV_TEST_DEVICE`]).
pub fn device() -> AscendDevice {
    static DEVICE: std::sync::OnceLock<AscendDevice> = std::sync::OnceLock::new();
    *DEVICE.get_or_init(|| match std::env::var(ENV_TEST_DEVICE) {
        Err(_) => AscendDevice::Emulated(0),
        Ok(v) => AscendDevice::parse(&v).unwrap_or_else(|| {
            panic!(
                "{ENV_TEST_DEVICE}={v:?} is not a device: use emulated, emulated:N, npu or npu:N"
            )
        }),
    })
}

/// Another device of the same kind, for transfers between devices, or the same device when
/// the machine has only one.
pub fn second_device() -> AscendDevice {
    let device = device();
    let count = burn_ascend::runtime::device::device_count(&device.into()).unwrap_or(1);
    let other = (device.index() + 1) % count.max(1);
    match device {
        AscendDevice::Npu(_) => AscendDevice::Npu(other),
        AscendDevice::Emulated(_) => AscendDevice::Emulated(other),
    }
}

/// The device for tests that provoke device faults. A fault stops its whole device context
/// until the device is reset, so such tests run on [`second_device`] (other tests of their
/// file keep off it), one at a time (`#[serial(fault_device)]`), between two
/// [`reset_fault_device`] calls.
pub fn fault_device() -> AscendDevice {
    second_device()
}

/// Resets [`fault_device`], clearing a fault a test provoked.
pub fn reset_fault_device() {
    burn_ascend::reset_device(&fault_device()).expect("the fault device resets");
}

/// Launches a kernel that writes past its tensor on `device` (a descriptor claiming more
/// storage than was allocated), so the device faults when the stream reaches it.
pub fn provoke_fault(device: &AscendDevice) -> burn_ascend::AscendTensor {
    use burn_ascend::acl::{aclnn, handles::TensorDesc, DataType};
    let ctx = burn_ascend::runtime::DeviceContext::get(&device.into()).unwrap();
    let t = burn_ascend::ops::AscendTensor::empty(&ctx, vec![64], DataType::F32).unwrap();
    // SAFETY: deliberately larger than the allocation; the emulated device checks the access.
    let lie = unsafe {
        TensorDesc::new(
            ctx.bind(),
            &[4096],
            &[1],
            0,
            DataType::F32,
            4096,
            t.storage_ptr(),
        )
    }
    .unwrap();
    aclnn!(&*ctx, aclnnInplaceOne(&lie)).expect("the launch itself is queued");
    t.into()
}

/// For tests that read the emulation's internals (its launch log and work counters, its fault
/// injection, its operators' own checks): `true`, after saying so, when the suite runs on a
/// real NPU, where the test has nothing to read. `test` names the test.
pub fn skipped_on_npu(test: &str) -> bool {
    let npu = matches!(device(), AscendDevice::Npu(_));
    if npu {
        eprintln!(
            "{test}: skipped on {}: it reads the emulated NPU's internals",
            device()
        );
    }
    npu
}

// The fusion suite shadows `Ascend` with `Fusion<Ascend>`, leaving this one unused there.
#[allow(unused_imports)]
pub use burn_ascend::Ascend;
pub use burn_ascend::AscendDevice;
pub use burn_flex::Flex;

pub const FLOATS: [DType; 4] = [DType::F32, DType::F16, DType::BF16, DType::F64];
pub const INTS: [DType; 5] = [DType::I64, DType::I32, DType::I16, DType::I8, DType::U8];
pub const BOOL: DType = DType::Bool(burn::tensor::BoolStore::Native);
pub const BOOLS: [DType; 1] = [BOOL];
/// The logical shape of the inputs of most tests.
pub const SHAPE: [usize; 3] = [2, 3, 4];

/// How an input view is laid out in device memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// Dense row-major.
    Contiguous,
    /// A transposed view of a dense tensor.
    Permuted,
    /// Every other element of a larger tensor, with an offset.
    Sliced,
    /// A size-1 dimension broadcast with stride 0.
    Expanded,
    /// A dense tensor flipped along its first and last dimensions.
    Flipped,
}

pub const VIEWS: [View; 5] = [
    View::Contiguous,
    View::Permuted,
    View::Sliced,
    View::Expanded,
    View::Flipped,
];

/// What the input values are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A left operand: moderate values.
    Lhs,
    /// A right operand: never zero, smaller than `Lhs` for unsigned types.
    Rhs,
    /// A matmul operand: small enough that sums of products fit every integer type.
    Small,
    /// Strictly positive (log, sqrt, bases of powers).
    Positive,
    /// Inside (-1, 1) for floats (asin, acos, atanh, exponents); -1, 0, 1 for integers.
    Unit,
    /// At least 1 (acosh).
    AboveOne,
    /// Multiples of 0.5 in [-10, 10]: the ties of rounding.
    Halves,
    /// Four distinct values only, so that comparisons, arg-reductions and sorts meet ties.
    Ties,
    /// All values of a tensor of up to 97 elements differ (sorts whose indices are compared).
    Distinct,
    /// Magnitudes 0.5, 1 and 2 (1 and 2 for integers): products are exact in any order.
    Signs,
    /// Shift amounts and small exponents: 0 to 3.
    Shift,
    /// Floats: NaN, +-Inf, -0.0, 0.0 and ordinary values; integers: as `Lhs`.
    Special,
}

/// The float values of [`Role::Special`].
pub const SPECIAL: [f64; 8] = [
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    -0.0,
    0.0,
    1.5,
    -2.5,
    3.0,
];

/// Deterministic input value `i`: exact in every dtype, so both backends start equal.
pub fn value(dtype: DType, role: Role, i: usize) -> f64 {
    // 7919 is invertible modulo the prime 97: `h` takes 97 distinct values on 97 consecutive `i`.
    let h = (i * 7919 + 13) % 97;
    let unsigned = matches!(dtype, DType::U8 | DType::U16 | DType::U32 | DType::U64);
    let float = dtype.is_float();
    let signed = |v: f64, negative: bool| if negative { -v } else { v };
    match (dtype, role) {
        (DType::Bool(_), _) => (h % 2) as f64,
        (_, Role::Small) if unsigned => (h % 4) as f64,
        (_, Role::Small) => (h % 7) as f64 - 3.0,
        (d, Role::Lhs) if unsigned || d == DType::I8 => (h % 8 + 8) as f64,
        (_, Role::Lhs) if float => (h % 33) as f64 / 4.0 - 4.0,
        (_, Role::Lhs) => (h % 41) as f64 - 20.0,
        (d, Role::Rhs) if unsigned || d == DType::I8 => (h % 7 + 1) as f64,
        (_, Role::Rhs) if float => signed((h % 16) as f64 / 2.0 + 0.5, h.is_multiple_of(3)),
        (_, Role::Rhs) => signed((h % 9 + 1) as f64, h.is_multiple_of(2)),
        (_, Role::Positive) if float => (h % 32 + 1) as f64 / 8.0,
        (_, Role::Positive) => (h % 9 + 1) as f64,
        (_, Role::Unit) if float => (h % 31) as f64 / 16.0 - 0.9375,
        (_, Role::Unit) if unsigned => (h % 2) as f64,
        (_, Role::Unit) => (h % 3) as f64 - 1.0,
        (_, Role::AboveOne) if float => 1.0 + (h % 16) as f64 / 4.0,
        (_, Role::AboveOne) => (h % 5 + 1) as f64,
        (_, Role::Halves) if float => (h % 41) as f64 / 2.0 - 10.0,
        (_, Role::Halves) => value(dtype, Role::Lhs, i),
        (_, Role::Ties) if unsigned => (h % 4) as f64,
        (_, Role::Ties) => (h % 4) as f64 - 1.0,
        (_, Role::Distinct) if float => h as f64 / 4.0 - 12.0,
        (_, Role::Distinct) if unsigned => h as f64,
        (_, Role::Distinct) => h as f64 - 48.0,
        (_, Role::Signs) if float => signed([0.5, 1.0, 2.0][h % 3], h % 5 < 2),
        (_, Role::Signs) if unsigned => (h % 2 + 1) as f64,
        (_, Role::Signs) => signed((h % 2 + 1) as f64, h % 5 < 2),
        (_, Role::Shift) => (h % 4) as f64,
        (_, Role::Special) if float => SPECIAL[h % SPECIAL.len()],
        (_, Role::Special) => value(dtype, Role::Lhs, i),
    }
}

/// Dense data of `shape` made of `role` values, starting at value `seed`.
pub fn data(shape: Vec<usize>, dtype: DType, role: Role, seed: usize) -> TensorData {
    let n: usize = shape.iter().product();
    if matches!(dtype, DType::Bool(_)) {
        let v: Vec<bool> = (0..n)
            .map(|i| value(dtype, role, i + seed) != 0.0)
            .collect();
        return TensorData::new(v, shape);
    }
    let v: Vec<f64> = (0..n).map(|i| value(dtype, role, i + seed)).collect();
    TensorData::new(v, shape).convert_dtype(dtype)
}

/// A rank-3 tensor of logical `shape` laid out as `view` describes.
pub fn input<B: Backend, K: BasicOps<B>>(
    device: &B::Device,
    dtype: DType,
    shape: [usize; 3],
    view: View,
    role: Role,
    seed: usize,
) -> Tensor<B, 3, K> {
    let [a, b, c] = shape;
    let make = |dims: Vec<usize>| {
        Tensor::<B, 3, K>::from_data(data(dims, dtype, role, seed), (device, dtype))
    };
    match view {
        View::Contiguous => make(vec![a, b, c]),
        View::Permuted => make(vec![a, c, b]).swap_dims(1, 2),
        View::Sliced => make(vec![a + 1, b, 2 * c]).slice(s![1.., .., ..;2]),
        View::Expanded => make(vec![a, 1, c]).expand([a, b, c]),
        View::Flipped => make(vec![a, b, c]).flip([0, 2]),
    }
}

/// Whether `B` is the reference backend (for the few cases where it lacks a dtype).
pub fn is_reference<B: Backend>() -> bool {
    std::any::TypeId::of::<B>() == std::any::TypeId::of::<Flex>()
}

/// How far a float result may be from the reference, relative to `max(|reference|, 1)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    pub f64: f64,
    pub f32: f64,
    pub f16: f64,
    pub bf16: f64,
    /// Whether +0.0 and -0.0 must match too.
    pub signed_zeros: bool,
}

impl Tolerance {
    /// Arithmetic: exact in f64, rounding of one result in the narrower types.
    pub const DEFAULT: Self = Self {
        f64: 0.0,
        f32: 1e-5,
        f16: 1e-2,
        bf16: 1e-2,
        signed_zeros: false,
    };
    /// Transcendental functions and compositions of several rounded steps.
    pub const LOOSE: Self = Self {
        f64: 1e-9,
        f32: 1e-4,
        f16: 2e-2,
        bf16: 4e-2,
        signed_zeros: false,
    };
    /// Ops Atlas A2 has no F64 kernel for, which burn-ascend runs in F32 and casts back (tanh,
    /// sigmoid, log-sigmoid, GELU): F64 results carry F32 precision.
    pub const F32_IN_F64: Self = Self {
        f64: 1e-6,
        ..Self::LOOSE
    };
    /// Bit-exact, including the sign of zeros (edge values).
    pub const EXACT: Self = Self {
        f64: 0.0,
        f32: 0.0,
        f16: 0.0,
        bf16: 0.0,
        signed_zeros: true,
    };

    /// The same relative tolerance `tol` in every float type.
    pub const fn everywhere(tol: f64) -> Self {
        Self {
            f64: tol,
            f32: tol,
            f16: tol,
            bf16: tol,
            signed_zeros: false,
        }
    }

    fn of(&self, dtype: DType) -> f64 {
        match dtype {
            DType::F64 => self.f64,
            DType::F32 => self.f32,
            DType::F16 => self.f16,
            DType::BF16 => self.bf16,
            _ => 0.0,
        }
    }
}

/// Asserts that `got` (from Ascend) matches `want` (from the reference).
pub fn assert_same(what: &str, got: &TensorData, want: &TensorData) {
    assert_close(what, got, want, Tolerance::DEFAULT);
}

/// Asserts that `got` matches `want` in shape, dtype and values, within `tolerance`.
pub fn assert_close(what: &str, got: &TensorData, want: &TensorData, tolerance: Tolerance) {
    assert_eq!(got.shape, want.shape, "{what}: shape");
    assert_eq!(got.dtype, want.dtype, "{what}: dtype");
    let (g, w) = (values(got), values(want));
    let tol = tolerance.of(got.dtype);
    for (i, (x, y)) in g.iter().zip(&w).enumerate() {
        let zero_sign_differs = tolerance.signed_zeros
            && *x == 0.0
            && *y == 0.0
            && x.is_sign_negative() != y.is_sign_negative();
        let ok = !zero_sign_differs
            && ((x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= tol * y.abs().max(1.0));
        assert!(
            ok,
            "{what}: element {i} is {x:?}, the reference gives {y:?}\n got  {g:?}\n want {w:?}"
        );
    }
}

fn values(d: &TensorData) -> Vec<f64> {
    match d.dtype {
        DType::Bool(_) => d.iter::<bool>().map(|b| b as u8 as f64).collect(),
        _ => d.iter::<f64>().collect(),
    }
}

/// Defines a test that runs `$body` (generic over the backend `B`) on Ascend and on the
/// reference for every dtype in `$dtypes` and every input view, and compares the outputs.
#[macro_export]
macro_rules! differential_test {
    ($name:ident, $dtypes:expr, |$device:ident, $dtype:ident, $view:ident| $body:block) => {
        #[test]
        fn $name() {
            fn case<B: burn::tensor::backend::Backend>(
                $device: &B::Device,
                $dtype: burn::tensor::DType,
                $view: $crate::common::View,
            ) -> burn::tensor::TensorData
            $body
            for &dtype in $dtypes.iter() {
                for view in $crate::common::VIEWS {
                    let what = format!("{} ({dtype:?}, {view:?} input)", stringify!($name));
                    let got = case::<$crate::common::Ascend>(&$crate::common::device(), dtype, view);
                    let want = case::<$crate::common::Flex>(&Default::default(), dtype, view);
                    $crate::common::assert_same(&what, &got, &want);
                }
            }
        }
    };
}

// ---------------------------------------------------------------------------------------------
// The op table: `ops!` entries, the operand layouts of each arity, and the runner.
// ---------------------------------------------------------------------------------------------

/// One operand of an op under test: its logical shape and how it is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operand {
    pub shape: [usize; 3],
    pub view: View,
}

const fn operand(shape: [usize; 3], view: View) -> Operand {
    Operand { shape, view }
}

/// Which operand layouts a table entry runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arity {
    /// One operand: [`SHAPE`] in every view, a shape of size-1 dims and an empty shape.
    Unary,
    /// One operand as `Unary`, without the empty shape (reductions to a value, arg-reductions).
    NonEmpty,
    /// Two operands: the left one in every view, a strided right one, broadcasting both ways
    /// (`[2, 1, 4]` against `[3, 1]`, ranked up to `[1, 3, 1]`), size-1 and empty shapes.
    Binary,
    /// The body builds its own inputs; it runs once per view (`Case::view`).
    Custom,
    /// The body builds explicit values; it runs once per dtype.
    Values,
}

impl Arity {
    fn layouts(self) -> Vec<[Operand; 2]> {
        use View::*;
        let views = VIEWS.map(|v| [operand(SHAPE, v), operand(SHAPE, Contiguous)]);
        let size_one = [
            operand([1, 3, 1], Contiguous),
            operand([1, 1, 1], Contiguous),
        ];
        let empty = [
            operand([2, 0, 4], Contiguous),
            operand([2, 1, 4], Contiguous),
        ];
        let mut layouts = views.to_vec();
        match self {
            Arity::Unary => layouts.extend([size_one, empty]),
            Arity::NonEmpty => layouts.push(size_one),
            Arity::Binary => layouts.extend([
                [operand(SHAPE, Contiguous), operand(SHAPE, Permuted)],
                [
                    operand([2, 1, 4], Contiguous),
                    operand([1, 3, 1], Contiguous),
                ],
                [operand([1, 3, 1], Sliced), operand([2, 1, 4], Expanded)],
                size_one,
                empty,
            ]),
            Arity::Custom => {}
            Arity::Values => layouts.truncate(1),
        }
        layouts
    }
}

/// What an entry's body sees: the device, the dtype and the operand layouts under test.
pub struct Case<B: Backend> {
    pub device: B::Device,
    /// A second device of the same backend (the same one on the reference).
    pub other_device: B::Device,
    pub dtype: DType,
    pub operands: [Operand; 2],
}

impl<B: Backend> Case<B> {
    /// The view under test (of the first operand).
    pub fn view(&self) -> View {
        self.operands[0].view
    }

    /// Operand `index` (0 or 1) of the layout under test, made of `role` values.
    pub fn operand<K: BasicOps<B>>(&self, index: usize, role: Role) -> Tensor<B, 3, K> {
        let Operand { shape, view } = self.operands[index];
        input(&self.device, self.dtype, shape, view, role, 5 * index)
    }

    /// A rank-3 input of `shape` laid out in the view under test.
    pub fn input<K: BasicOps<B>>(
        &self,
        shape: [usize; 3],
        role: Role,
        seed: usize,
    ) -> Tensor<B, 3, K> {
        self.input_of(self.dtype, shape, role, seed)
    }

    /// A rank-3 input of `dtype` and `shape` laid out in the view under test.
    pub fn input_of<K: BasicOps<B>>(
        &self,
        dtype: DType,
        shape: [usize; 3],
        role: Role,
        seed: usize,
    ) -> Tensor<B, 3, K> {
        input(&self.device, dtype, shape, self.view(), role, seed)
    }

    /// A dense input of any rank in the dtype under test.
    pub fn dense<K: BasicOps<B>, const D: usize>(
        &self,
        shape: [usize; D],
        role: Role,
        seed: usize,
    ) -> Tensor<B, D, K> {
        self.dense_of(self.dtype, shape, role, seed)
    }

    /// A dense input of any rank in `dtype`.
    pub fn dense_of<K: BasicOps<B>, const D: usize>(
        &self,
        dtype: DType,
        shape: [usize; D],
        role: Role,
        seed: usize,
    ) -> Tensor<B, D, K> {
        let data = data(shape.to_vec(), dtype, role, seed);
        Tensor::from_data(data, (&self.device, dtype))
    }

    /// A dense tensor of the given values, converted to the dtype under test.
    pub fn tensor<K: BasicOps<B>, const D: usize>(
        &self,
        values: &[f64],
        shape: [usize; D],
    ) -> Tensor<B, D, K> {
        let data = TensorData::new(values.to_vec(), shape).convert_dtype(self.dtype);
        Tensor::from_data(data, (&self.device, self.dtype))
    }

    /// Indices in `0..bound`, in the backend's default int dtype.
    pub fn indices<const D: usize>(
        &self,
        shape: [usize; D],
        bound: usize,
        seed: usize,
    ) -> Tensor<B, D, Int> {
        let n: usize = shape.iter().product();
        let v: Vec<i64> = (0..n)
            .map(|i| ((i + seed) * 7919 % 97 % bound) as i64)
            .collect();
        Tensor::from_data(TensorData::new(v, shape), &self.device)
    }

    /// A dense tensor of the given integers, converted to the dtype under test.
    pub fn ints<K: BasicOps<B>, const D: usize>(
        &self,
        values: &[i64],
        shape: [usize; D],
    ) -> Tensor<B, D, K> {
        let data = TensorData::new(values.to_vec(), shape).convert_dtype(self.dtype);
        Tensor::from_data(data, (&self.device, self.dtype))
    }

    /// Explicit indices, in the backend's default int dtype.
    pub fn index_list<const D: usize>(
        &self,
        values: &[i64],
        shape: [usize; D],
    ) -> Tensor<B, D, Int> {
        Tensor::from_data(TensorData::new(values.to_vec(), shape), &self.device)
    }

    /// A dense boolean mask, about half true.
    pub fn mask<const D: usize>(&self, shape: [usize; D], seed: usize) -> Tensor<B, D, Bool> {
        self.dense_of(BOOL, shape, Role::Lhs, seed)
    }

    /// Whether this case runs on the reference backend.
    pub fn is_reference(&self) -> bool {
        is_reference::<B>()
    }
}

/// The results of an entry's body: tensors, tensor data, tuples and vectors of them.
pub trait Outputs {
    fn outputs(self) -> Vec<TensorData>;
}

impl<B: Backend, const D: usize, K: BasicOps<B>> Outputs for Tensor<B, D, K> {
    fn outputs(self) -> Vec<TensorData> {
        vec![self.into_data()]
    }
}

impl Outputs for TensorData {
    fn outputs(self) -> Vec<TensorData> {
        vec![self]
    }
}

impl<T: Outputs> Outputs for Vec<T> {
    fn outputs(self) -> Vec<TensorData> {
        self.into_iter().flat_map(Outputs::outputs).collect()
    }
}

impl<X: Outputs, Y: Outputs> Outputs for (X, Y) {
    fn outputs(self) -> Vec<TensorData> {
        let mut all = self.0.outputs();
        all.extend(self.1.outputs());
        all
    }
}

impl<X: Outputs, Y: Outputs, Z: Outputs> Outputs for (X, Y, Z) {
    fn outputs(self) -> Vec<TensorData> {
        let mut all = (self.0, self.1).outputs();
        all.extend(self.2.outputs());
        all
    }
}

/// An entry's body, instantiated for one backend.
pub type Body<B> = fn(&Case<B>) -> Vec<TensorData>;

/// A table entry the backend under test computes differently from the reference, by design or
/// upstream: its name, the reason, and the symptom (a piece of the failure's message), so that
/// any other failure of the entry is still a failure.
pub type Deviation = (&'static str, &'static str, &'static str);

/// The known deviations of the backend under test. `Ascend` has none; a test binary for
/// another backend under test shadows this list.
pub const KNOWN_DEVIATIONS: &[Deviation] = &[];

/// Runs an entry on every dtype in `dtypes` and every layout of `arity`, on Ascend and on the
/// reference, and compares every output within `tolerance`.
///
/// With `CONFORMANCE_SELF_CHECK=1` the reference also stands in for Ascend: this checks the
/// table itself (every reference path runs and is deterministic) without the device. An entry
/// in `known_deviations` must still differ from the reference, or the test fails.
pub fn run<A: Backend<Device = AscendDevice>>(
    name: &str,
    dtypes: &[DType],
    arity: Arity,
    tolerance: Tolerance,
    ascend: Body<A>,
    reference: Body<Flex>,
    known_deviations: &[Deviation],
) {
    if let Some((_, why, symptom)) = known_deviations.iter().find(|(n, _, _)| *n == name) {
        // The deviation must still show, as itself: when it no longer does, the entry leaves
        // the list; any other failure fails the test.
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            run(name, dtypes, arity, tolerance, ascend, reference, &[])
        }));
        match outcome {
            Ok(()) => {
                panic!("{name} now matches the reference: remove it from KNOWN_DEVIATIONS ({why})")
            }
            Err(e) => {
                let text = message(e.as_ref());
                assert!(
                    text.contains(symptom),
                    "{name}: the known deviation ({why}) shows as {symptom:?}, but the entry \
                     failed otherwise: {text}"
                );
            }
        }
        return;
    }
    let self_check = std::env::var_os("CONFORMANCE_SELF_CHECK").is_some_and(|v| v == "1");
    for &dtype in dtypes {
        for operands in arity.layouts() {
            let what = describe(name, dtype, arity, &operands);
            let flex_case = Case::<Flex> {
                device: Default::default(),
                other_device: Default::default(),
                dtype,
                operands,
            };
            let want = || reference(&flex_case);
            if self_check {
                compare(&what, tolerance, ("the reference (self-check)", want), want);
            } else {
                let case = Case::<A> {
                    device: device(),
                    other_device: second_device(),
                    dtype,
                    operands,
                };
                compare(&what, tolerance, ("Ascend", || ascend(&case)), want);
            }
        }
    }
}

/// Runs the `reference` and then the backend under test (`got`, with its name), and compares
/// every output within `tolerance`. A panic on either side names the case and the backend.
pub fn compare(
    what: &str,
    tolerance: Tolerance,
    (backend, got): (&str, impl FnOnce() -> Vec<TensorData>),
    reference: impl FnOnce() -> Vec<TensorData>,
) {
    let want = guarded(what, "the reference (burn-flex)", reference);
    let got = guarded(what, backend, got);
    assert_eq!(got.len(), want.len(), "{what}: number of outputs");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_close(&format!("{what}, output {i}"), g, w, tolerance);
    }
}

fn describe(name: &str, dtype: DType, arity: Arity, operands: &[Operand; 2]) -> String {
    let layout = |o: &Operand| format!("{:?} {:?}", o.shape, o.view);
    match arity {
        Arity::Values => format!("{name} ({dtype:?})"),
        Arity::Custom => format!("{name} ({dtype:?}, {:?} input)", operands[0].view),
        Arity::Unary | Arity::NonEmpty => format!("{name} ({dtype:?}, {})", layout(&operands[0])),
        Arity::Binary => format!(
            "{name} ({dtype:?}, {} with {})",
            layout(&operands[0]),
            layout(&operands[1])
        ),
    }
}

/// Runs `f`, turning a panic into one that says which case and which backend panicked.
fn guarded<T>(what: &str, backend: &str, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f))
        .unwrap_or_else(|e| panic!("{what}: {backend} panicked: {}", message(e.as_ref())))
}

/// The message of the panic `f` must raise (a test of a refused call).
pub fn panic_message<T>(f: impl FnOnce() -> T) -> String {
    let payload = catch_unwind(AssertUnwindSafe(f))
        .err()
        .expect("the call should fail");
    message(payload.as_ref()).to_string()
}

fn message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("(no message)")
}

/// A table of ops. Each entry becomes one `#[test]` that [`run`]s its generic body on Ascend
/// and on the reference:
///
/// ```text
/// unary  name(Kind, DTYPES, Role [, tolerance]) |x| body;       // x: Tensor<B, 3, Kind>
/// nonempty name(Kind, DTYPES, Role [, tolerance]) |x| body;     // the same, never empty
/// binary name(Kind, DTYPES, [RoleA, RoleB] [, tolerance]) |a, b| body;
/// custom name(DTYPES [, tolerance]) |c| body;                   // c: &Case<B>
/// values name(DTYPES [, tolerance]) |c| body;                   // the same, once per dtype
/// ```
///
/// A body returns anything [`Outputs`] accepts; the tolerance defaults to
/// [`Tolerance::DEFAULT`].
#[macro_export]
macro_rules! ops {
    ($(
        $(#[doc = $doc:literal])*
        $arity:ident $name:ident ($($spec:tt)*) |$($arg:ident),+| $body:expr;
    )*) => {
        $( $crate::op_entry!($(#[doc = $doc])* $arity $name ($($spec)*) |$($arg),+| $body); )*
    };
}

/// One entry of [`ops!`].
#[macro_export]
macro_rules! op_entry {
    (
        $(#[doc = $doc:literal])*
        unary $name:ident ($kind:ty, $dtypes:expr, $role:expr $(, $tol:expr)?)
        |$x:ident| $body:expr
    ) => {
        $crate::op_entry!(@one $(#[doc = $doc])* $name, Unary, $dtypes, $($tol)?, |c| {
            let $x = c.operand::<$kind>(0, $role);
            $body
        });
    };
    (
        $(#[doc = $doc:literal])*
        nonempty $name:ident ($kind:ty, $dtypes:expr, $role:expr $(, $tol:expr)?)
        |$x:ident| $body:expr
    ) => {
        $crate::op_entry!(@one $(#[doc = $doc])* $name, NonEmpty, $dtypes, $($tol)?, |c| {
            let $x = c.operand::<$kind>(0, $role);
            $body
        });
    };
    (
        $(#[doc = $doc:literal])*
        binary $name:ident ($kind:ty, $dtypes:expr, [$lhs:expr, $rhs:expr] $(, $tol:expr)?)
        |$a:ident, $b:ident| $body:expr
    ) => {
        $crate::op_entry!(@one $(#[doc = $doc])* $name, Binary, $dtypes, $($tol)?, |c| {
            let $a = c.operand::<$kind>(0, $lhs);
            let $b = c.operand::<$kind>(1, $rhs);
            $body
        });
    };
    (
        $(#[doc = $doc:literal])*
        custom $name:ident ($dtypes:expr $(, $tol:expr)?) |$c:ident| $body:expr
    ) => {
        $crate::op_entry!(@one $(#[doc = $doc])* $name, Custom, $dtypes, $($tol)?, |$c| $body);
    };
    (
        $(#[doc = $doc:literal])*
        values $name:ident ($dtypes:expr $(, $tol:expr)?) |$c:ident| $body:expr
    ) => {
        $crate::op_entry!(@one $(#[doc = $doc])* $name, Values, $dtypes, $($tol)?, |$c| $body);
    };
    (
        @one $(#[doc = $doc:literal])*
        $name:ident, $arity:ident, $dtypes:expr, $($tol:expr)?, |$c:ident| $body:expr
    ) => {
        $(#[doc = $doc])*
        #[test]
        fn $name() {
            fn case<B: burn::tensor::backend::Backend>(
                $c: &$crate::common::Case<B>,
            ) -> Vec<burn::tensor::TensorData> {
                $crate::common::Outputs::outputs($body)
            }
            $crate::common::run(
                stringify!($name),
                &$dtypes,
                $crate::common::Arity::$arity,
                $crate::op_entry!(@tol $($tol)?),
                case::<$crate::common::Ascend>,
                case::<$crate::common::Flex>,
                $crate::common::KNOWN_DEVIATIONS,
            );
        }
    };
    (@tol) => { $crate::common::Tolerance::DEFAULT };
    (@tol $tol:expr) => { $tol };
}

/// The reference of float `argtopk`, which burn-flex leaves unimplemented: the indices of the
/// `k` largest values along `dim`, equal values ordered by lowest index (Burn's contract).
/// Built from an argsort of the distinct keys `value * n - index`, so `values` must be
/// integers.
pub fn stable_argtopk<B: Backend>(values: Tensor<B, 3>, dim: usize, k: usize) -> Tensor<B, 3, Int> {
    let values = values.cast(DType::F64);
    let index = positions::<B>(&values.device(), values.dims()[dim], dim).float();
    let n = values.dims()[dim] as f64;
    (values * n - index.cast(DType::F64))
        .argsort_descending(dim)
        .narrow(dim, 0, k)
}

/// The reference of int `argtopk`, as [`stable_argtopk`], with exact I64 keys; the indices
/// come in the dtype of the reference's own int argsort.
pub fn stable_int_argtopk<B: Backend>(
    values: Tensor<B, 3, Int>,
    dim: usize,
    k: usize,
) -> Tensor<B, 3, Int> {
    let values = values.cast(DType::I64);
    let index = positions::<B>(&values.device(), values.dims()[dim], dim).cast(DType::I64);
    let n = values.dims()[dim] as i64;
    (values * n - index)
        .argsort_descending(dim)
        .narrow(dim, 0, k)
}

/// `0..n` laid along `dim` of a rank-3 tensor.
fn positions<B: Backend>(device: &B::Device, n: usize, dim: usize) -> Tensor<B, 3, Int> {
    let mut shape = [1; 3];
    shape[dim] = n;
    Tensor::<B, 1, Int>::arange(0..n as i64, device).reshape(shape)
}

/// `any_dim` counted from comparisons, the reference where a dim of `x` is empty: there
/// burn-flex's own `any_dim` and `all_dim` index out of bounds.
pub fn any_dim_by_count<B: Backend, K: BasicOps<B>>(
    x: Tensor<B, 3, K>,
    dim: usize,
) -> Tensor<B, 3, Bool> {
    x.not_equal_elem(0).int().sum_dim(dim).greater_elem(0)
}

/// `all_dim` counted from comparisons, see [`any_dim_by_count`].
pub fn all_dim_by_count<B: Backend, K: BasicOps<B>>(
    x: Tensor<B, 3, K>,
    dim: usize,
) -> Tensor<B, 3, Bool> {
    x.equal_elem(0).int().sum_dim(dim).equal_elem(0)
}
