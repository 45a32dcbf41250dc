//! Shared harness of the differential tests: the same Burn code runs on `Ascend` (the
//! emulated NPU) and on `burn-flex`, the reference, and the results are compared.
#![allow(dead_code)]

use burn::tensor::backend::Backend;
use burn::tensor::{s, BasicOps, DType, Tensor, TensorData};

pub use burn_ascend::{Ascend, AscendDevice};
pub use burn_flex::Flex;

pub const FLOATS: [DType; 4] = [DType::F32, DType::F16, DType::BF16, DType::F64];
pub const INTS: [DType; 5] = [DType::I64, DType::I32, DType::I16, DType::I8, DType::U8];
pub const BOOL: DType = DType::Bool(burn::tensor::BoolStore::Native);

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
}

pub const VIEWS: [View; 4] = [
    View::Contiguous,
    View::Permuted,
    View::Sliced,
    View::Expanded,
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
}

/// Deterministic input value `i`: exact in every dtype, so both backends start equal.
pub fn value(dtype: DType, role: Role, i: usize) -> f64 {
    let h = (i * 7919 + 13) % 97;
    let unsigned = matches!(dtype, DType::U8 | DType::U16 | DType::U32 | DType::U64);
    match (dtype, role) {
        (DType::Bool(_), _) => (h % 2) as f64,
        (_, Role::Small) if unsigned => (h % 4) as f64,
        (_, Role::Small) => (h % 7) as f64 - 3.0,
        (d, Role::Lhs) if unsigned || d == DType::I8 => (h % 8 + 8) as f64,
        (_, Role::Lhs) if dtype.is_float() => (h % 33) as f64 / 4.0 - 4.0,
        (_, Role::Lhs) => (h % 41) as f64 - 20.0,
        (d, Role::Rhs) if unsigned || d == DType::I8 => (h % 7 + 1) as f64,
        (_, Role::Rhs) if dtype.is_float() => {
            let v = (h % 16) as f64 / 2.0 + 0.5;
            if h.is_multiple_of(3) {
                -v
            } else {
                v
            }
        }
        (_, Role::Rhs) => {
            let v = (h % 9 + 1) as f64;
            if h.is_multiple_of(2) {
                -v
            } else {
                v
            }
        }
    }
}

fn data(shape: Vec<usize>, dtype: DType, role: Role, seed: usize) -> TensorData {
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
    }
}

/// Whether `B` is the reference backend (for the few cases where it lacks a dtype).
pub fn is_reference<B: Backend>() -> bool {
    std::any::TypeId::of::<B>() == std::any::TypeId::of::<Flex>()
}

/// Asserts that `got` (from Ascend) matches `want` (from the reference).
pub fn assert_same(what: &str, got: &TensorData, want: &TensorData) {
    assert_eq!(got.shape, want.shape, "{what}: shape");
    assert_eq!(got.dtype, want.dtype, "{what}: dtype");
    let (g, w) = (values(got), values(want));
    let tol = match got.dtype {
        DType::F16 | DType::BF16 => 1e-2,
        DType::F32 => 1e-5,
        _ => 0.0,
    };
    for (i, (x, y)) in g.iter().zip(&w).enumerate() {
        let ok = (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= tol * y.abs().max(1.0);
        assert!(
            ok,
            "{what}: element {i} is {x}, the reference gives {y}\n got  {g:?}\n want {w:?}"
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
                    let got = case::<$crate::common::Ascend>(&$crate::common::AscendDevice::Emulated(0), dtype, view);
                    let want = case::<$crate::common::Flex>(&Default::default(), dtype, view);
                    $crate::common::assert_same(&what, &got, &want);
                }
            }
        }
    };
}
