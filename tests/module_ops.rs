//! Differential tests of the module ops (convolutions, deformable convolution, pooling,
//! interpolation, attention, FFT) against burn-flex, in F32, F16, BF16 and F64, with strided
//! inputs where the op takes them.

mod common;

use burn::tensor::backend::Backend;
use burn::tensor::module::{
    adaptive_avg_pool2d, attention, avg_pool1d, avg_pool2d, conv1d, conv2d, conv3d,
    conv_transpose1d, conv_transpose2d, conv_transpose3d, deform_conv2d, embedding, interpolate,
    linear, max_pool1d, max_pool2d, max_pool2d_with_indices, unfold4d,
};
use burn::tensor::ops::{
    AttentionModuleOptions, ConvOptions, ConvTransposeOptions, DeformConvOptions, InterpolateMode,
    InterpolateOptions, UnfoldOptions,
};
use burn::tensor::signal::{irfft, rfft};
use burn::tensor::{Bool, DType, Int, Tensor, TensorData, TensorPrimitive};
use common::*;

/// Every float dtype the reference implements these ops for.
const ALL: [DType; 4] = [DType::F32, DType::F16, DType::BF16, DType::F64];

/// Sums of products in the half types: one rounding of the result plus input rounding.
const MODULE: Tolerance = Tolerance {
    f64: 1e-9,
    f32: 1e-4,
    f16: 2e-2,
    bf16: 5e-2,
    signed_zeros: false,
};

/// Runs `$body` (generic over the backend `B`, with `$d` the device and `$dtype` the dtype) on
/// Ascend and on the reference for every dtype, and compares the outputs.
macro_rules! module_test {
    ($name:ident, $dtypes:expr, $tol:expr, |$d:ident, $dtype:ident| $body:block) => {
        #[test]
        fn $name() {
            fn case<B: Backend>($d: &B::Device, $dtype: DType) -> Vec<TensorData> {
                Outputs::outputs($body)
            }
            for &dtype in $dtypes.iter() {
                let what = format!("{} ({dtype:?})", stringify!($name));
                compare(
                    &what,
                    $tol,
                    ("Ascend", || case::<Ascend>(&device(), dtype)),
                    || case::<Flex>(&Default::default(), dtype),
                );
            }
        }
    };
}

/// A dense float tensor of `role` values.
fn t<B: Backend, const D: usize>(
    d: &B::Device,
    dtype: DType,
    shape: [usize; D],
    role: Role,
    seed: usize,
) -> Tensor<B, D> {
    Tensor::from_data(data(shape.to_vec(), dtype, role, seed), (d, dtype))
}

/// The same values as [`t`], laid out as the transpose of a dense tensor (a strided view).
fn strided<B: Backend>(
    d: &B::Device,
    dtype: DType,
    shape: [usize; 4],
    seed: usize,
) -> Tensor<B, 4> {
    let [a, b, c, e] = shape;
    t::<B, 4>(d, dtype, [a, b, e, c], Role::Lhs, seed).swap_dims(2, 3)
}

module_test!(conv1d_groups_stride_dilation, ALL, MODULE, |d, dtype| {
    let x = t::<B, 3>(d, dtype, [2, 4, 9], Role::Lhs, 0);
    let w = t::<B, 3>(d, dtype, [6, 2, 3], Role::Signs, 1);
    let b = t::<B, 1>(d, dtype, [6], Role::Lhs, 2);
    (
        conv1d(
            x.clone(),
            w.clone(),
            Some(b),
            ConvOptions::new([2], [1], [2], 2),
        ),
        conv1d(
            x,
            w.narrow(0, 0, 3).narrow(1, 0, 1).repeat_dim(1, 4),
            None,
            ConvOptions::new([1], [0], [1], 1),
        ),
    )
});

module_test!(
    conv2d_groups_padding_strided_input,
    ALL,
    MODULE,
    |d, dtype| {
        let x = strided::<B>(d, dtype, [2, 4, 7, 6], 0);
        let w = t::<B, 4>(d, dtype, [6, 2, 3, 2], Role::Signs, 1);
        let b = t::<B, 1>(d, dtype, [6], Role::Lhs, 2);
        (
            conv2d(
                x.clone(),
                w.clone(),
                Some(b),
                ConvOptions::new([2, 1], [1, 2], [1, 2], 2),
            ),
            conv2d(
                x,
                w.narrow(0, 0, 2),
                None,
                ConvOptions::new([1, 3], [0, 0], [2, 1], 2),
            ),
        )
    }
);

module_test!(conv3d_padding, ALL, MODULE, |d, dtype| {
    let x = t::<B, 5>(d, dtype, [1, 2, 4, 5, 4], Role::Lhs, 0);
    let w = t::<B, 5>(d, dtype, [3, 2, 2, 3, 2], Role::Signs, 1);
    let b = t::<B, 1>(d, dtype, [3], Role::Lhs, 2);
    conv3d(
        x,
        w,
        Some(b),
        ConvOptions::new([1, 2, 1], [1, 1, 0], [1, 1, 2], 1),
    )
});

module_test!(conv_transpose_1d_2d_3d, ALL, MODULE, |d, dtype| {
    let x1 = t::<B, 3>(d, dtype, [2, 4, 5], Role::Lhs, 0);
    let w1 = t::<B, 3>(d, dtype, [4, 3, 3], Role::Signs, 1);
    let b1 = t::<B, 1>(d, dtype, [6], Role::Lhs, 2);
    let x2 = strided::<B>(d, dtype, [1, 4, 3, 4], 3);
    let w2 = t::<B, 4>(d, dtype, [4, 1, 3, 2], Role::Signs, 4);
    let x3 = t::<B, 5>(d, dtype, [1, 2, 2, 3, 2], Role::Lhs, 5);
    let w3 = t::<B, 5>(d, dtype, [2, 2, 2, 2, 3], Role::Signs, 6);
    (
        conv_transpose1d(
            x1,
            w1,
            Some(b1),
            ConvTransposeOptions::new([2], [1], [1], [1], 2),
        ),
        conv_transpose2d(
            x2,
            w2,
            None,
            ConvTransposeOptions::new([2, 3], [1, 0], [1, 2], [1, 1], 4),
        ),
        conv_transpose3d(
            x3,
            w3,
            None,
            ConvTransposeOptions::new([1, 2, 1], [0, 1, 1], [0, 1, 0], [2, 1, 1], 1),
        ),
    )
});

module_test!(
    deform_conv2d_with_and_without_mask,
    [DType::F32, DType::F64],
    MODULE,
    |d, dtype| {
        let x = t::<B, 4>(d, dtype, [1, 4, 5, 6], Role::Lhs, 0);
        let w = t::<B, 4>(d, dtype, [4, 2, 3, 3], Role::Signs, 1);
        let b = t::<B, 1>(d, dtype, [4], Role::Lhs, 2);
        // Offsets with fractional parts that reach outside the input; out [1, 4, 3, 4].
        let offset = t::<B, 4>(d, dtype, [1, 2 * 2 * 9, 3, 4], Role::Unit, 3) * 1.7;
        let mask = t::<B, 4>(d, dtype, [1, 2 * 9, 3, 4], Role::Unit, 4);
        let options = DeformConvOptions::new([2, 1], [1, 0], [1, 1], 2, 2);
        (
            deform_conv2d(
                x.clone(),
                offset.clone(),
                w.clone(),
                Some(mask),
                Some(b),
                options.clone(),
            ),
            deform_conv2d(x, offset, w, None, None, options),
        )
    }
);

module_test!(
    avg_pool2d_padding_ceil_and_count,
    ALL,
    MODULE,
    |d, dtype| {
        let x = strided::<B>(d, dtype, [2, 3, 7, 6], 0);
        let mut out = Vec::new();
        for (k, s, p, include, ceil) in [
            ([3, 2], [2, 2], [1, 1], true, false),
            ([3, 2], [2, 2], [1, 1], false, false),
            ([3, 3], [2, 2], [1, 1], true, true),
            ([2, 3], [3, 2], [1, 1], false, true),
            ([2, 2], [2, 2], [0, 0], true, true),
        ] {
            out.push(avg_pool2d(x.clone(), k, s, p, include, ceil));
        }
        out
    }
);

module_test!(
    max_pool2d_dilation_ceil_and_indices,
    ALL,
    Tolerance::EXACT,
    |d, dtype| {
        // Distinct values so that the selected indices do not depend on tie rules.
        let x = t::<B, 4>(d, dtype, [2, 2, 7, 6], Role::Distinct, 0);
        let mut out: Vec<TensorData> = Vec::new();
        for (k, s, p, dil, ceil) in [
            ([3, 2], [2, 2], [1, 1], [1, 1], false),
            ([3, 3], [2, 2], [1, 1], [1, 1], true),
            ([2, 2], [1, 2], [1, 0], [2, 2], false),
            ([2, 3], [3, 2], [1, 1], [1, 2], true),
        ] {
            out.push(max_pool2d(x.clone(), k, s, p, dil, ceil).into_data());
            let (v, i) = max_pool2d_with_indices(x.clone(), k, s, p, dil, ceil);
            out.push(v.into_data());
            out.push(i.cast(DType::I64).into_data());
        }
        out
    }
);

module_test!(pool1d_through_2d, ALL, MODULE, |d, dtype| {
    let x = t::<B, 3>(d, dtype, [2, 3, 9], Role::Distinct, 0);
    (
        max_pool1d(x.clone(), 3, 2, 1, 1, true),
        avg_pool1d(x, 4, 2, 1, false, true),
    )
});

module_test!(adaptive_avg_pool2d_down_and_up, ALL, MODULE, |d, dtype| {
    let x = strided::<B>(d, dtype, [2, 3, 7, 5], 0);
    (
        adaptive_avg_pool2d(x.clone(), [3, 4]),
        adaptive_avg_pool2d(x.clone(), [9, 6]),
        adaptive_avg_pool2d(x, [1, 1]),
    )
});

module_test!(interpolate_modes_and_corners, ALL, MODULE, |d, dtype| {
    let x = strided::<B>(d, dtype, [1, 2, 5, 4], 0);
    let mut out = Vec::new();
    for mode in [
        InterpolateMode::Nearest,
        InterpolateMode::Bilinear,
        InterpolateMode::Bicubic,
        InterpolateMode::Lanczos3,
    ] {
        for align in [true, false] {
            let options = InterpolateOptions::new(mode.clone()).with_align_corners(align);
            out.push(interpolate(x.clone(), [8, 7], options.clone()));
            out.push(interpolate(x.clone(), [3, 2], options));
        }
    }
    out
});

/// F64 tanh runs in F32 on the device (aclnnTanh has no F64 on Atlas A2).
const SOFTCAP: Tolerance = Tolerance {
    f64: 1e-7,
    ..MODULE
};

module_test!(
    attention_masks_bias_causal_softcap,
    ALL,
    SOFTCAP,
    |d, dtype| {
        let q = t::<B, 4>(d, dtype, [2, 2, 3, 4], Role::Unit, 0);
        let k = t::<B, 4>(d, dtype, [2, 2, 5, 4], Role::Unit, 1);
        let v = t::<B, 4>(d, dtype, [2, 2, 5, 3], Role::Lhs, 2);
        let bias = t::<B, 4>(d, dtype, [2, 2, 3, 5], Role::Unit, 3);
        let mask: Tensor<B, 4, Bool> =
            Tensor::from_data(data(vec![2, 2, 3, 5], BOOL, Role::Lhs, 4), (d, BOOL));
        // Row 1 of every head fully masked: its output must be 0, not NaN.
        let full = Tensor::<B, 4, Int>::zeros([2, 2, 3, 5], d)
            .slice_fill(burn::tensor::s![.., .., 1..2, ..], 1)
            .bool();
        let plain = AttentionModuleOptions::default();
        let causal = AttentionModuleOptions {
            is_causal: true,
            ..plain
        };
        let capped = AttentionModuleOptions {
            scale: Some(0.7),
            softcap: Some(2.0),
            is_causal: false,
        };
        (
            vec![
                attention(q.clone(), k.clone(), v.clone(), None, None, plain),
                attention(
                    q.clone(),
                    k.clone(),
                    v.clone(),
                    Some(mask.clone()),
                    Some(bias.clone()),
                    plain,
                ),
                attention(q.clone(), k.clone(), v.clone(), None, Some(bias), causal),
            ],
            vec![
                attention(q.clone(), k.clone(), v.clone(), Some(mask), None, capped),
                attention(q, k, v, Some(full), None, causal),
            ],
        )
    }
);

/// The reference's F64 FFT twiddles are only as precise as f32 (errors up to about 5e-7,
/// where the device's F64 DFT is exact to f64 rounding).
const FFT: Tolerance = Tolerance {
    f64: 1e-6,
    ..MODULE
};

module_test!(rfft_and_irfft, ALL, FFT, |d, dtype| {
    let x = t::<B, 3>(d, dtype, [2, 8, 3], Role::Lhs, 0);
    let (re, im) = rfft(x.clone(), 1, None);
    let (re16, im16) = rfft(x.clone().swap_dims(0, 2), 2, Some(16));
    let (re4, im4) = rfft(x, 1, Some(4));
    let back = irfft(re.clone(), im.clone(), 1, None);
    let longer = irfft(re.clone(), im.clone(), 1, Some(16));
    let shorter = irfft(re.clone(), im.clone(), 1, Some(4));
    (
        vec![re, im, re16, im16],
        vec![re4, im4, back, longer, shorter],
    )
});

module_test!(unfold4d_and_embedding_defaults, ALL, MODULE, |d, dtype| {
    let x = t::<B, 4>(d, dtype, [1, 2, 5, 4], Role::Lhs, 0);
    let weights = t::<B, 2>(d, dtype, [6, 3], Role::Lhs, 1);
    let indices =
        Tensor::<B, 2, Int>::from_data(TensorData::new(vec![0i64, 5, 2, 2, 4, 1], [2, 3]), d);
    (
        unfold4d(
            x.clone(),
            [2, 3],
            UnfoldOptions::new([1, 1], [0, 0], [1, 1]),
        ),
        unfold4d(x, [2, 2], UnfoldOptions::new([2, 1], [1, 0], [1, 2])),
        embedding(weights, indices),
    )
});

// Atlas A2 takes at most 255 of padding: more is padded explicitly before the convolution.
module_test!(
    conv2d_padding_beyond_the_a2_limit,
    [DType::F32],
    MODULE,
    |d, dtype| {
        let x = t::<B, 4>(d, dtype, [1, 2, 3, 2], Role::Lhs, 0);
        let w = t::<B, 4>(d, dtype, [2, 2, 2, 2], Role::Signs, 1);
        conv2d(x, w, None, ConvOptions::new([97, 1], [260, 1], [1, 1], 1))
    }
);

// `ModuleOps::layer_norm` (the fused kernel on Ascend, f64 composed) against burn-flex's
// composition, on a strided input, with and without beta.
module_test!(
    layer_norm_strided_with_and_without_beta,
    ALL,
    MODULE,
    |d, dtype| {
        let x = strided::<B>(d, dtype, [2, 3, 5, 40], 0);
        let gamma = t::<B, 1>(d, dtype, [40], Role::Lhs, 1);
        let beta = t::<B, 1>(d, dtype, [40], Role::Lhs, 2);
        let norm = |beta: Option<Tensor<B, 1>>| {
            Tensor::<B, 4>::from_primitive(TensorPrimitive::Float(B::layer_norm(
                x.clone().into_primitive().tensor(),
                gamma.clone().into_primitive().tensor(),
                beta.map(|b| b.into_primitive().tensor()),
                1e-5,
            )))
        };
        (norm(Some(beta)), norm(None))
    }
);

// `linear` (one aclnnAddmm with a bias on Ascend; composed without, and in f64) on a strided
// input and a transposed weight, ranks 2 and 3.
module_test!(linear_with_and_without_bias, ALL, MODULE, |d, dtype| {
    let x3 = strided::<B>(d, dtype, [2, 3, 5, 12], 0)
        .narrow(0, 0, 1)
        .squeeze_dim::<3>(0);
    let x2 = t::<B, 2>(d, dtype, [7, 12], Role::Lhs, 1);
    let w = t::<B, 2>(d, dtype, [9, 12], Role::Signs, 2).transpose();
    let b = t::<B, 1>(d, dtype, [9], Role::Lhs, 3);
    (
        linear(x3.clone(), w.clone(), Some(b.clone())),
        linear(x2.clone(), w.clone(), Some(b)),
        linear(x2, w, None),
    )
});
