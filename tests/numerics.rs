//! Numerics as Atlas A2 computes them (the emulator's `numerics` model, from the fact sheets):
//! F32 in f32 and F16/BF16 widened to f32 and rounded once on store, F64 in f64, integers in
//! their own width with wrap-around, float reductions accumulated in f32 in the vector unit's
//! blocked order; aclnnCast's rules (NaN to 0, int32 to int8 exact only in (-2048, 1920)) and
//! the bridge to Burn's casts; U64 values of 2^63 and above. Expected values are closed-form
//! (or burn-flex for the casts Burn defines).

mod common;

use std::sync::Arc;

use burn::tensor::backend::Backend;
use burn::tensor::f16;
use burn::tensor::{DType, Int, Tensor, TensorData};
use burn_ascend::acl::aclnn;
use burn_ascend::acl::handles::{HostScalar, ScalarDesc};
use burn_ascend::acl::DataType;
use burn_ascend::ops::creation::{from_bytes, to_bytes};
use burn_ascend::ops::AscendTensor;
use burn_ascend::runtime::DeviceContext;
use burn_ascend::Ascend;
use common::Flex;

fn ctx() -> Arc<DeviceContext> {
    DeviceContext::get(&common::device().into()).expect("the device opens")
}

/// A 1-D tensor of f64 `values` converted on the host to `dtype` (exactly, for the values the
/// tests use) and uploaded.
fn tensor(ctx: &Arc<DeviceContext>, values: &[f64], dtype: DataType) -> AscendTensor {
    let bytes: Vec<u8> = values
        .iter()
        .flat_map(|&v| match dtype {
            DataType::F64 => v.to_le_bytes().to_vec(),
            DataType::F32 => (v as f32).to_le_bytes().to_vec(),
            DataType::F16 => f16::from_f64(v).to_le_bytes().to_vec(),
            DataType::I32 => (v as i32).to_le_bytes().to_vec(),
            other => panic!("no test input of {other}"),
        })
        .collect();
    from_bytes(ctx, vec![values.len()], dtype, &bytes).unwrap()
}

/// The elements of a float or integer tensor as f64 (exact for the dtypes read here).
fn values(t: &AscendTensor) -> Vec<f64> {
    let bytes = to_bytes(t).unwrap();
    match t.dtype() {
        DataType::F64 => bytes
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        DataType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
            .collect(),
        DataType::F16 => bytes
            .chunks_exact(2)
            .map(|c| f16::from_le_bytes(c.try_into().unwrap()).to_f64())
            .collect(),
        DataType::I8 => bytes.iter().map(|&b| b as i8 as f64).collect(),
        other => panic!("no reader for {other}"),
    }
}

/// `self + alpha * other` through aclnnAdd.
fn add_alpha(x: &AscendTensor, y: &AscendTensor, alpha: f64) -> AscendTensor {
    let out = AscendTensor::empty(x.ctx(), x.shape().to_vec(), x.dtype()).unwrap();
    let a = ScalarDesc::new(x.ctx().bind(), HostScalar::Float(alpha)).unwrap();
    aclnn!(
        &**x.ctx(),
        aclnnAdd(
            &x.desc().unwrap(),
            &y.desc().unwrap(),
            &a,
            &out.desc().unwrap()
        )
    )
    .unwrap();
    out
}

const EPS32: f64 = f32::EPSILON as f64;

#[test]
fn f32_operators_round_every_step_to_f32() {
    let ctx = ctx();
    // alpha * other = 1 + 3 * 2^-23 + 2^-45 rounds to 1 + 3 * 2^-23 in f32 before the add; in
    // f64 the 2^-45 would survive into the (representable) result.
    let (x, y) = (
        tensor(&ctx, &[-1.0], DataType::F32),
        tensor(&ctx, &[1.0 + EPS32], DataType::F32),
    );
    let got = values(&add_alpha(&x, &y, 1.0 + 2.0 * EPS32));
    assert_eq!(got, [3.0 * EPS32], "the product is rounded to f32 first");

    // Floor division: 1 / f32(1/3) = 2.99999994.. rounds to 3 in f32 before the floor (f64
    // would floor it to 2).
    let third = tensor(&ctx, &[(1.0f32 / 3.0) as f64], DataType::F32);
    let one = tensor(&ctx, &[1.0], DataType::F32);
    let out = AscendTensor::empty(&ctx, vec![1], DataType::F32).unwrap();
    aclnn!(
        &*ctx,
        aclnnDivMod(
            &one.desc().unwrap(),
            &third.desc().unwrap(),
            2,
            &out.desc().unwrap()
        )
    )
    .unwrap();
    assert_eq!(values(&out), [3.0]);
}

#[test]
fn f16_operators_compute_in_f32_and_round_once_on_store() {
    let ctx = ctx();
    // alpha * other = 1 + 2^-8 + 2^-10 + 2^-18 is exact in f32; 1 + that rounds once to
    // 2.005859375 in f16. Native half arithmetic would round the product first (dropping
    // 2^-18) and then tie down to 2.00390625.
    let (x, y) = (
        tensor(&ctx, &[1.0], DataType::F16),
        tensor(&ctx, &[1.0 + 2f64.powi(-10)], DataType::F16),
    );
    let got = values(&add_alpha(&x, &y, 1.0 + 2f64.powi(-8)));
    assert_eq!(got, [2.005859375]);
}

#[test]
fn f64_operators_compute_in_f64() {
    let device = common::device();
    let x = Tensor::<Ascend, 1>::from_data(
        TensorData::new(vec![1.0f64, 2f64.powi(53)], [2]),
        (&device, DType::F64),
    );
    let y = x.clone() + 2f64.powi(-40);
    let got = y.into_data().convert::<f64>().to_vec::<f64>().unwrap();
    assert_eq!(got, [1.0 + 2f64.powi(-40), 2f64.powi(53)]);
}

#[test]
fn float_reductions_accumulate_in_f32_repeat_by_repeat() {
    let device = common::device();
    // Five 256-byte repeats of f32: [2^24, 0..], then four [1, 0..]. Each repeat's partial sum
    // is added to the running total in f32, where 2^24 + 1 rounds back to 2^24 (in f64 the sum
    // would be 2^24 + 4, representable in f32).
    let mut v = vec![0f32; 5 * 64];
    v[0] = 16_777_216.0;
    (1..5).for_each(|r| v[r * 64] = 1.0);
    let x = Tensor::<Ascend, 1>::from_data(TensorData::new(v, [320]), (&device, DType::F32));
    let sum = x.clone().sum().into_data().to_vec::<f32>().unwrap();
    assert_eq!(sum, [16_777_216.0]);
    let mean = x.mean().into_data().to_vec::<f32>().unwrap();
    assert_eq!(mean, [16_777_216.0 / 320.0]);

    // Half inputs accumulate in f32 too: 2048 + 1 + 1 is 2050, where a half accumulator would
    // stall at 2048 (2049 ties to 2048).
    let h = Tensor::<Ascend, 1>::from_data(
        TensorData::new(vec![2048.0f32, 1.0, 1.0], [3]),
        (&device, DType::F16),
    );
    let sum = h
        .sum()
        .into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(sum, [2050.0]);
}

#[test]
fn integers_wrap_in_their_own_width() {
    let device = common::device();
    let ints = |v: Vec<i64>, dtype: DType| {
        let n = v.len();
        Tensor::<Ascend, 1, Int>::from_data(
            TensorData::new(v, [n]).convert_dtype(dtype),
            (&device, dtype),
        )
    };
    let read = |t: Tensor<Ascend, 1, Int>| t.into_data().convert::<i64>().to_vec::<i64>().unwrap();
    assert_eq!(
        read(ints(vec![i32::MAX as i64], DType::I32) + 1),
        [i32::MIN as i64]
    );
    assert_eq!(read(ints(vec![100, -100], DType::I8) * 3), [44, -44]);
    assert_eq!(read(ints(vec![0], DType::U8) - 1), [255]);
    assert_eq!(read(ints(vec![i64::MAX], DType::I64) + 1), [i64::MIN]);
    let sum = ints(vec![i32::MAX as i64, 1, 1], DType::I32).sum();
    assert_eq!(read(sum), [i32::MIN as i64 + 1]);
    let cumsum = ints(vec![i16::MAX as i64, 1], DType::I16).cumsum(0);
    assert_eq!(read(cumsum), [i16::MAX as i64, i16::MIN as i64]);
}

/// Float to I32 and to U8 (Burn's `into_int` with the int dtype set on the float tensor's
/// conversion).
fn float_to_ints<B: Backend>(device: &B::Device) -> (TensorData, TensorData) {
    let values = [f32::NAN, -2.7, 2.7, 1e10, -1e10, f32::INFINITY, -0.5, 300.0];
    let x: Tensor<B, 1> =
        Tensor::from_data(TensorData::new(values.to_vec(), [8]), (device, DType::F32));
    let to = |dtype: DType| {
        let int: Tensor<B, 1, Int> = Tensor::from_primitive(B::float_into_int(
            x.clone().into_primitive().tensor(),
            dtype.into(),
        ));
        int.into_data().convert::<i64>()
    };
    (to(DType::I32), to(DType::U8))
}

#[test]
fn float_to_int_casts_truncate_saturate_and_map_nan_to_zero() {
    let (i32s, u8s) = float_to_ints::<Ascend>(&common::device());
    assert_eq!(
        i32s.to_vec::<i64>().unwrap(),
        [
            0,
            -2,
            2,
            i32::MAX as i64,
            i32::MIN as i64,
            i32::MAX as i64,
            0,
            300
        ]
    );
    assert_eq!(u8s.to_vec::<i64>().unwrap(), [0, 0, 2, 255, 0, 255, 0, 255]);
    let (ri32, ru8) = float_to_ints::<Flex>(&Default::default());
    common::assert_same("float to I32", &i32s, &ri32);
    common::assert_same("float to U8", &u8s, &ru8);
}

/// What the hardware does: aclnnCast int32 -> int8 wraps exactly only inside (-2048, 1920).
#[test]
fn aclnncast_int32_to_int8_is_exact_only_inside_its_documented_range() {
    if common::skipped_on_npu("aclnncast_int32_to_int8_is_exact_only_inside_its_documented_range") {
        // Outside the range the result on hardware is not documented.
        return;
    }
    let ctx = ctx();
    let x = tensor(
        &ctx,
        &[-2047.0, -129.0, 200.0, 1919.0, 2049.0, 1e5],
        DataType::I32,
    );
    let out = AscendTensor::empty(&ctx, vec![6], DataType::I8).unwrap();
    aclnn!(
        &*ctx,
        aclnnCast(&x.desc().unwrap(), DataType::I8.acl(), &out.desc().unwrap())
    )
    .unwrap();
    // Inside: the two's-complement wrap. Outside: the emulation's model (through f16, so
    // 2049 becomes 2048 and wraps to 0, not 1; 1e5 saturates).
    assert_eq!(values(&out), [1.0, 127.0, -56.0, 127.0, 0.0, 127.0]);
}

fn int32_cast<B: Backend>(device: &B::Device, to: DType) -> TensorData {
    let v: Vec<i64> = vec![
        2049,
        100_000,
        -70_000,
        i32::MAX as i64,
        i32::MIN as i64,
        200,
        -3,
    ];
    let x: Tensor<B, 1, Int> = Tensor::from_data(
        TensorData::new(v, [7]).convert_dtype(DType::I32),
        (device, DType::I32),
    );
    x.cast(to).into_data().convert::<i64>()
}

/// Burn's int casts wrap (Rust's `as`); the backend bridges aclnnCast's int32 -> int8 range.
#[test]
fn burn_int_casts_wrap_as_burn_flex_does() {
    for to in [DType::I8, DType::U8, DType::I16] {
        let got = int32_cast::<Ascend>(&common::device(), to);
        assert_eq!(
            got.to_vec::<i64>().unwrap()[0],
            match to {
                DType::I8 | DType::U8 => 1,
                _ => 2049,
            },
            "2049 to {to:?}"
        );
        let want = int32_cast::<Flex>(&Default::default(), to);
        common::assert_same(&format!("I32 to {to:?}"), &got, &want);
    }
}

const U64S: [u64; 4] = [1 << 63, u64::MAX, 5, (1 << 63) + 4096];

/// U64 values read back, as F64, as I64 and compared with 5.
fn u64_reads<B: Backend>(device: &B::Device) -> [TensorData; 4] {
    let x: Tensor<B, 1, Int> =
        Tensor::from_data(TensorData::new(U64S.to_vec(), [4]), (device, DType::U64));
    let float: Tensor<B, 1> = Tensor::from_primitive(burn::tensor::TensorPrimitive::Float(
        B::int_into_float(x.clone().into_primitive(), burn::tensor::FloatDType::F64),
    ));
    [
        x.clone().into_data(),
        float.into_data(),
        x.clone().cast(DType::I64).into_data(),
        x.greater_elem(5).into_data(),
    ]
}

#[test]
fn u64_values_at_and_above_2_pow_63_read_correctly() {
    let v = U64S.to_vec();
    let [bytes, floats, ints, greater] = u64_reads::<Ascend>(&common::device());
    assert_eq!(bytes.to_vec::<u64>().unwrap(), v);
    assert_eq!(
        floats.to_vec::<f64>().unwrap(),
        [2f64.powi(63), 2f64.powi(64), 5.0, 2f64.powi(63) + 4096.0]
    );
    assert_eq!(greater.to_vec::<bool>().unwrap(), [true, true, false, true]);
    let [rb, rf, ri, rg] = u64_reads::<Flex>(&Default::default());
    common::assert_same("U64 round trip", &bytes, &rb);
    common::assert_same("U64 to F64", &floats, &rf);
    common::assert_same("U64 to I64", &ints, &ri);
    common::assert_same("U64 > 5", &greater, &rg);
}
