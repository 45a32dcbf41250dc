//! Quantized tensors on Ascend against burn-flex: quantize with given and dynamic scales per
//! tensor and per block (the integer values and scales must match exactly, so rounding ties go
//! away from zero), dequantize to every float dtype, loading and reading quantized data
//! (packed and native stores), the layout ops, and arithmetic through Burn's
//! dequantize-op-quantize defaults.

mod common;

use burn::tensor::backend::Backend;
use burn::tensor::ops::QuantizedTensor;
use burn::tensor::quantization::{
    QParams, QuantLevel, QuantScheme, QuantStore, QuantValue, QuantizationParameters,
    QuantizedBytes,
};
use burn::tensor::{s, DType, Int, Slice, Tensor, TensorData, TensorPrimitive};
use common::*;

/// The quantized values and scales of quantized data, and its dequantized values.
fn parts(data: TensorData) -> Vec<TensorData> {
    let DType::QFloat(scheme) = data.dtype else {
        panic!("expected quantized data, got {:?}", data.dtype);
    };
    let shape = data.shape.clone();
    let n = data.num_elements();
    let (values, QParams { scales }) = QuantizedBytes {
        bytes: data.into_bytes(),
        scheme,
        num_elements: n,
    }
    .into_vec_i8();
    let count = scales.len();
    vec![
        TensorData::new(values, shape),
        TensorData::new(scales, [count]),
    ]
}

/// A quantized result: its integer values, its scales and its dequantized F32 values.
fn q<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<TensorData> {
    let mut out = parts(t.clone().into_data());
    out.push(t.dequantize().into_data());
    out
}

fn scheme(value: QuantValue, level: QuantLevel) -> QuantScheme {
    QuantScheme::default()
        .with_value(value)
        .with_level(level)
        .with_store(QuantStore::Native)
}

const VALUES: [QuantValue; 6] = [
    QuantValue::Q8S,
    QuantValue::Q8F,
    QuantValue::Q4S,
    QuantValue::Q4F,
    QuantValue::Q2S,
    QuantValue::Q2F,
];

/// Runs `$body` (generic over the backend `B`, device `$d`) on Ascend and on the reference
/// and compares the outputs (exactly unless a tolerance is given).
macro_rules! quant_test {
    ($name:ident, |$d:ident| $body:block) => {
        quant_test!($name, Tolerance::EXACT, |$d| $body);
    };
    ($name:ident, $tol:expr, |$d:ident| $body:block) => {
        #[test]
        fn $name() {
            fn case<B: Backend>($d: &B::Device) -> Vec<TensorData> {
                Outputs::outputs($body)
            }
            compare(
                stringify!($name),
                $tol,
                ("Ascend", || case::<Ascend>(&device())),
                || case::<Flex>(&Default::default()),
            );
        }
    };
}

/// Values of [`Role::Halves`] (multiples of 0.5 in [-10, 10]) with a few beyond every range.
fn halves<B: Backend>(d: &B::Device, shape: [usize; 2]) -> Tensor<B, 2> {
    let x = Tensor::<B, 2>::from_data(data(shape.to_vec(), DType::F32, Role::Halves, 0), d);
    x.slice_fill(s![0..1, 0..2], 300.0)
}

quant_test!(quantize_with_given_scales_rounds_ties_away_from_zero, |d| {
    let x = halves::<B>(d, [4, 8]);
    let mut out = Vec::new();
    for value in VALUES {
        // Scale 1 puts every odd half on a tie; 0.5 and 2 move the ties around.
        for s in [1.0f32, 0.5, 2.0] {
            let scales = Tensor::<B, 1>::from_data(TensorData::new(vec![s], [1]), d);
            let qparams = QuantizationParameters { scales };
            out.push(q(x
                .clone()
                .quantize(&scheme(value, QuantLevel::Tensor), qparams)));
        }
        // One scale per block of 8, including a zero scale (replaced by the smallest normal).
        let scales =
            Tensor::<B, 1>::from_data(TensorData::new(vec![1.0f32, 0.0, 0.25, 3.0], [4]), d);
        let qparams = QuantizationParameters { scales };
        out.push(q(x
            .clone()
            .quantize(&scheme(value, QuantLevel::block([8])), qparams)));
    }
    out
});

quant_test!(quantize_dynamic_per_tensor_and_per_block, |d| {
    let x = Tensor::<B, 3>::from_data(data(vec![2, 3, 8], DType::F32, Role::Lhs, 0), d) * 0.37;
    let mut out = Vec::new();
    for value in [QuantValue::Q8S, QuantValue::Q8F, QuantValue::Q4S] {
        out.push(q(x
            .clone()
            .quantize_dynamic(&scheme(value, QuantLevel::Tensor))));
        out.push(q(x
            .clone()
            .quantize_dynamic(&scheme(value, QuantLevel::block([8])))));
        out.push(q(x
            .clone()
            .quantize_dynamic(&scheme(value, QuantLevel::block([12])))));
    }
    out
});

quant_test!(dequantize_to_every_float_dtype, |d| {
    let x = Tensor::<B, 2>::from_data(data(vec![3, 8], DType::F32, Role::Lhs, 1), d);
    let qt = x.quantize_dynamic(&scheme(QuantValue::Q8S, QuantLevel::block([4])));
    [DType::F32, DType::F16, DType::BF16, DType::F64]
        .map(|dtype| qt.clone().dequantize().cast(dtype).into_data())
        .to_vec()
});

quant_test!(data_round_trip_native_and_packed, |d| {
    let values: Vec<i8> = (0..24).map(|i| ((i * 37) % 255 - 127) as i8).collect();
    let native = scheme(QuantValue::Q8S, QuantLevel::Tensor);
    let packed = QuantScheme::default().with_value(QuantValue::Q8S);
    let blocks = scheme(QuantValue::Q8F, QuantLevel::block([6]));
    let mut out = Vec::new();
    for (scheme, scales) in [
        (native, vec![0.125f32]),
        (packed, vec![0.5f32]),
        (blocks, vec![0.1f32, 0.2, 0.3, 0.4]),
    ] {
        let data = TensorData::quantized(values.clone(), [4, 6], scheme, &scales);
        out.push(q(Tensor::<B, 2>::from_data(data, d)));
    }
    out
});

/// `op` on the quantized primitive of `t`.
fn on_primitive<B: Backend, const D: usize, const E: usize>(
    t: Tensor<B, D>,
    op: impl FnOnce(QuantizedTensor<B>) -> QuantizedTensor<B>,
) -> Tensor<B, E> {
    match t.into_primitive() {
        TensorPrimitive::QFloat(p) => Tensor::from_primitive(TensorPrimitive::QFloat(op(p))),
        TensorPrimitive::Float(_) => panic!("expected a quantized tensor"),
    }
}

quant_test!(layout_ops_keep_values_and_scales, |d| {
    let x = Tensor::<B, 3>::from_data(data(vec![2, 3, 4], DType::F32, Role::Lhs, 2), d);
    let idx = Tensor::<B, 1, Int>::from_data(TensorData::new(vec![2i64, 0, 2], [3]), d);
    let gather_idx =
        Tensor::<B, 3, Int>::from_data(data(vec![2, 3, 2], DType::I64, Role::Shift, 3), d);
    let mut out = Vec::new();
    for level in [QuantLevel::Tensor, QuantLevel::block([4])] {
        let t = x.clone().quantize_dynamic(&scheme(QuantValue::Q8S, level));
        out.push(q(t.clone().reshape([4, 6])));
        out.push(q(t.clone().swap_dims(0, 2)));
        out.push(q(t.clone().permute([2, 0, 1])));
        out.push(q(t.clone().flip([0, 2])));
        out.push(q(t.clone().select(1, idx.clone())));
        out.push(q(t.clone().slice(s![.., 1..3, 0..4;2])));
        out.push(q(t.clone().gather(2, gather_idx.clone())));
        // Burn's tensor API dequantizes for expand and negative-step slices, so the backend
        // methods are called directly.
        out.push(q(on_primitive::<B, 4, 4>(
            t.clone().reshape([1, 2, 3, 4]),
            |p| B::q_expand(p, [3, 2, 3, 4].into()),
        )));
        out.push(q(on_primitive::<B, 3, 3>(t.clone(), |p| {
            B::q_slice(
                p,
                &[
                    Slice::new(0, None, 1),
                    Slice::new(0, Some(3), -1),
                    Slice::new(0, None, -2),
                ],
            )
        })));
    }
    out
});

quant_test!(arithmetic_through_dequantization, Tolerance::DEFAULT, |d| {
    let a = Tensor::<B, 2>::from_data(data(vec![3, 4], DType::F32, Role::Lhs, 4), d);
    let b = Tensor::<B, 2>::from_data(data(vec![4, 3], DType::F32, Role::Rhs, 5), d);
    let s = scheme(QuantValue::Q8S, QuantLevel::Tensor);
    let (qa, qb) = (a.quantize_dynamic(&s), b.quantize_dynamic(&s));
    vec![
        (qa.clone() + qa.clone() * 2.0).into_data(),
        qa.clone().matmul(qb.clone()).into_data(),
        qa.clone().sum_dim(1).into_data(),
        qa.clone().argmax(1).into_data(),
        qb.clone().exp().into_data(),
    ]
});

#[test]
fn quantized_tensors_move_between_devices() {
    let x = Tensor::<Ascend, 2>::from_data(data(vec![3, 8], DType::F32, Role::Lhs, 6), &device());
    let qt = x.quantize_dynamic(&scheme(QuantValue::Q8S, QuantLevel::block([4])));
    let moved = qt.clone().to_device(&second_device());
    assert_eq!(moved.device(), second_device());
    assert_eq!(parts(moved.into_data()), parts(qt.into_data()));
}

/// Quantized data keeps its scheme, store included, through a device round trip: on `Ascend`
/// and on `Fusion<Ascend>` (whose default scheme packs int8 values in u32 words), the data read
/// back is the data loaded, byte for byte (it used to come back with a native store).
#[test]
fn quantized_data_keeps_its_store_through_a_round_trip() {
    let x = Tensor::<Flex, 2>::from_data(
        data(vec![4, 8], DType::F32, Role::Lhs, 7),
        &Default::default(),
    );
    let packed = QuantScheme::default().with_store(QuantStore::PackedU32(0));
    let mut loaded = Vec::new();
    for value in [QuantValue::Q8S, QuantValue::Q4S, QuantValue::Q2S] {
        for level in [QuantLevel::Tensor, QuantLevel::block([8])] {
            let scheme = packed.with_value(value).with_level(level);
            loaded.push(x.clone().quantize_dynamic(&scheme).into_data());
        }
    }
    // Fusion<B> reports Burn's default scheme (QTensorPrimitive's default): int8, packed.
    loaded.push(
        x.clone()
            .quantize_dynamic(&QuantScheme::default())
            .into_data(),
    );
    for data in loaded {
        let back_ascend = Tensor::<Ascend, 2>::from_data(data.clone(), &device()).into_data();
        let back_fusion =
            Tensor::<burn_fusion::Fusion<Ascend>, 2>::from_data(data.clone(), &device())
                .into_data();
        for (backend, back) in [("Ascend", back_ascend), ("Fusion<Ascend>", back_fusion)] {
            assert_eq!(back.dtype, data.dtype, "{backend}: the scheme changed");
            assert_eq!(back.shape, data.shape, "{backend}: shape");
            assert_eq!(
                back.as_bytes(),
                data.as_bytes(),
                "{backend}: the bytes of {:?} changed",
                data.dtype
            );
        }
    }
}
