//! Property-based shapes and strides (`proptest`): random rank-3 shapes with size-1 and empty
//! dims, each operand stored permuted, with an offset, a step and flips, random broadcasting.
//! Each property runs on Ascend and on the reference, which must agree. Few cases per
//! property keep the suite fast.

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Slice, Tensor, TensorData};
use proptest::prelude::*;

use crate::common::*;

/// How one operand is stored: its logical shape is a strided, possibly flipped window of a
/// dense source whose dims are stored in the order `perm`.
#[derive(Debug, Clone)]
struct Strided {
    shape: [usize; 3],
    perm: [usize; 3],
    offset: [usize; 3],
    step: [usize; 3],
    flip: [bool; 3],
}

impl Strided {
    fn tensor<B: Backend>(
        &self,
        device: &B::Device,
        dtype: DType,
        role: Role,
        seed: usize,
    ) -> Tensor<B, 3> {
        let empty = self.shape.contains(&0);
        let source: [usize; 3] = std::array::from_fn(|d| {
            if empty {
                self.shape[d]
            } else {
                self.offset[d] + self.step[d] * self.shape[d]
            }
        });
        let stored = self.perm.map(|d| source[d]);
        let mut inverse = [0; 3];
        for (i, &d) in self.perm.iter().enumerate() {
            inverse[d] = i;
        }
        let dense =
            Tensor::<B, 3>::from_data(data(stored.to_vec(), dtype, role, seed), (device, dtype));
        let window: [Slice; 3] = std::array::from_fn(|d| {
            let (start, step) = (self.offset[d], self.step[d]);
            Slice::new(start as isize, Some(source[d] as isize), step as isize)
        });
        let mut t = dense.permute(inverse);
        // Burn's `Tensor::slice` returns an empty result in the default dtype, not the input's:
        // an empty operand is its dense source.
        if !empty {
            t = t.slice(window);
        }
        for d in 0..3 {
            if self.flip[d] {
                t = t.flip([d as isize]);
            }
        }
        t
    }
}

fn dims(max: usize) -> impl Strategy<Value = [usize; 3]> {
    // Mostly non-empty; one case in eight has an empty dim.
    let dim = prop_oneof![7 => 1..=max, 1 => Just(0)];
    [dim.clone(), dim.clone(), dim]
}

fn strided(shape: impl Strategy<Value = [usize; 3]>) -> impl Strategy<Value = Strided> {
    let perm = Just([0, 1, 2]).prop_shuffle();
    (
        shape,
        perm,
        [0..2usize, 0..2, 0..2],
        [1..3usize, 1..3, 1..3],
        any::<[bool; 3]>(),
    )
        .prop_map(|(shape, perm, offset, step, flip)| Strided {
            shape,
            perm,
            offset,
            step,
            flip,
        })
}

/// Two operands whose shapes broadcast: the right one has some dims of the left set to 1.
fn broadcast_pair() -> impl Strategy<Value = (Strided, Strided)> {
    (dims(4), any::<[bool; 3]>(), any::<bool>()).prop_flat_map(|(shape, ones, swap)| {
        let reduced: [usize; 3] = std::array::from_fn(|d| if ones[d] { 1 } else { shape[d] });
        let (lhs, rhs) = if swap {
            (reduced, shape)
        } else {
            (shape, reduced)
        };
        (strided(Just(lhs)), strided(Just(rhs)))
    })
}

fn float_dtype() -> impl Strategy<Value = DType> {
    proptest::sample::select(FLOATS.to_vec())
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 24,
        max_shrink_iters: 32,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Runs one property case on Ascend and on the reference and compares the results.
fn both(what: &str, ascend: impl FnOnce() -> TensorData, reference: impl FnOnce() -> TensorData) {
    both_within(what, Tolerance::DEFAULT, ascend, reference)
}

fn both_within(
    what: &str,
    tolerance: Tolerance,
    ascend: impl FnOnce() -> TensorData,
    reference: impl FnOnce() -> TensorData,
) {
    compare(what, tolerance, ("Ascend", || vec![ascend()]), || {
        vec![reference()]
    });
}

fn ascend() -> AscendDevice {
    device()
}

fn round_trip<B: Backend>(device: &B::Device, dtype: DType, x: &Strided) -> TensorData {
    x.tensor::<B>(device, dtype, Role::Lhs, 0).into_data()
}

fn add_mul<B: Backend>(
    device: &B::Device,
    dtype: DType,
    (l, r): &(Strided, Strided),
) -> TensorData {
    let a = l.tensor::<B>(device, dtype, Role::Lhs, 0);
    let b = r.tensor::<B>(device, dtype, Role::Rhs, 3);
    (a.clone() + b.clone() * a).into_data()
}

/// A chain of element-wise ops over broadcast strided operands (one fused program on
/// `Fusion<Ascend>`): GELU of an affine map, sigmoid times tanh, a comparison mask, a clamp.
fn fused_chain<B: Backend>(
    device: &B::Device,
    dtype: DType,
    (l, r): &(Strided, Strided),
) -> TensorData {
    use burn::tensor::activation::{gelu, sigmoid};
    let a = l.tensor::<B>(device, dtype, Role::Lhs, 0);
    let b = r.tensor::<B>(device, dtype, Role::Rhs, 3);
    let g = gelu(a.clone() * 0.5 + b.clone());
    let s = sigmoid(b.clone()) * a.clone().tanh();
    let mask = a.clone().greater(b.clone());
    (g + s)
        .mask_where(mask, a.clamp(-1.0, 1.0) - b.abs())
        .into_data()
}

fn sum_dim<B: Backend>(device: &B::Device, dtype: DType, x: &Strided, dim: usize) -> TensorData {
    x.tensor::<B>(device, dtype, Role::Lhs, 0)
        .sum_dim(dim)
        .into_data()
}

/// The reference of [`sum_dim`]: the same sum over a dense copy of the view. burn-flex 0.21's
/// `sum_dim` over a size-1 dim of some strided views (permuted, then sliced with a step)
/// returns the wrong elements, for example `[2, 3, 4, 5, 6]` where the view holds `[2, 4, 6,
/// 8, 10]`; reading the view back is right, so the reference sums a dense copy.
fn sum_dim_dense<B: Backend>(
    device: &B::Device,
    dtype: DType,
    x: &Strided,
    dim: usize,
) -> TensorData {
    let view = x.tensor::<B>(device, dtype, Role::Lhs, 0).into_data();
    Tensor::<B, 3>::from_data(view, (device, dtype))
        .sum_dim(dim)
        .into_data()
}

fn cat<B: Backend>(
    device: &B::Device,
    dtype: DType,
    (a, b): &(Strided, Strided),
    dim: usize,
) -> TensorData {
    let a = a.tensor::<B>(device, dtype, Role::Lhs, 0);
    let b = b.tensor::<B>(device, dtype, Role::Rhs, 1);
    Tensor::cat(vec![a, b], dim).into_data()
}

fn matmul<B: Backend>(device: &B::Device, dtype: DType, (a, b): &(Strided, Strided)) -> TensorData {
    let a = a.tensor::<B>(device, dtype, Role::Small, 0);
    let b = b.tensor::<B>(device, dtype, Role::Small, 1);
    a.matmul(b).into_data()
}

/// Two operands that concatenate along `dim`: equal shapes but for that dim.
fn cat_pair() -> impl Strategy<Value = ((Strided, Strided), usize)> {
    (dims(4), 0..3usize, 0..4usize).prop_flat_map(|(shape, dim, other)| {
        let mut second = shape;
        second[dim] = other;
        ((strided(Just(shape)), strided(Just(second))), Just(dim))
    })
}

/// Batched matmul operands [b1, m, k] x [b2, k, n], batches 1 or 2 (so they broadcast).
fn matmul_pair() -> impl Strategy<Value = (Strided, Strided)> {
    (1..3usize, 1..3usize, 0..5usize, 0..5usize, 0..5usize).prop_flat_map(|(b1, b2, m, k, n)| {
        let b2 = if b1 == b2 { b2 } else { 1 };
        (strided(Just([b1, m, k])), strided(Just([b2, k, n])))
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn prop_strided_round_trip(x in strided(dims(5)), dtype in float_dtype()) {
        both(&format!("round trip {dtype:?} {x:?}"),
            || round_trip::<Ascend>(&ascend(), dtype, &x),
            || round_trip::<Flex>(&Default::default(), dtype, &x));
    }

    #[test]
    fn prop_broadcast_add_mul(pair in broadcast_pair(), dtype in float_dtype()) {
        both(&format!("a + b * a {dtype:?} {pair:?}"),
            || add_mul::<Ascend>(&ascend(), dtype, &pair),
            || add_mul::<Flex>(&Default::default(), dtype, &pair));
    }

    #[test]
    fn prop_fused_chain(pair in broadcast_pair(), dtype in float_dtype()) {
        both_within(&format!("element-wise chain {dtype:?} {pair:?}"), Tolerance::F32_IN_F64,
            || fused_chain::<Ascend>(&ascend(), dtype, &pair),
            || fused_chain::<Flex>(&Default::default(), dtype, &pair));
    }

    #[test]
    fn prop_sum_dim(x in strided(dims(5)), dim in 0..3usize, dtype in float_dtype()) {
        both(&format!("sum_dim({dim}) {dtype:?} {x:?}"),
            || sum_dim::<Ascend>(&ascend(), dtype, &x, dim),
            || sum_dim_dense::<Flex>(&Default::default(), dtype, &x, dim));
    }

    #[test]
    fn prop_cat((pair, dim) in cat_pair(), dtype in float_dtype()) {
        both(&format!("cat(dim {dim}) {dtype:?} {pair:?}"),
            || cat::<Ascend>(&ascend(), dtype, &pair, dim),
            || cat::<Flex>(&Default::default(), dtype, &pair, dim));
    }

    #[test]
    fn prop_matmul(pair in matmul_pair(), dtype in float_dtype()) {
        both(&format!("matmul {dtype:?} {pair:?}"),
            || matmul::<Ascend>(&ascend(), dtype, &pair),
            || matmul::<Flex>(&Default::default(), dtype, &pair));
    }
}
