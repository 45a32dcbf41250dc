//! `Autodiff<Ascend>` computes the same gradients as `Autodiff<Flex>`: a table of ops, each
//! reduced to a scalar loss with fixed weights, differentiated with respect to every input,
//! and compared gradient by gradient. The module ops' backward passes (convolution input and
//! weight gradients through aclnnConvolutionBackward, pooling, interpolation, deformable
//! convolution) are exercised here, as are the tensor ops autodiff composes.

mod common;

use burn::tensor::activation::{gelu, log_softmax, relu, sigmoid, softmax, tanh};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::module::{
    adaptive_avg_pool2d, attention, avg_pool2d, conv1d, conv2d, conv3d, conv_transpose1d,
    conv_transpose2d, conv_transpose3d, deform_conv2d, embedding, interpolate, max_pool2d,
};
use burn::tensor::ops::{
    AttentionModuleOptions, ConvOptions, ConvTransposeOptions, DeformConvOptions, InterpolateMode,
    InterpolateOptions,
};
use burn::tensor::{Bool, DType, Int, Tensor, TensorData};
use burn_autodiff::Autodiff;
use common::*;

const GRADS: Tolerance = Tolerance {
    f64: 1e-9,
    f32: 2e-4,
    f16: 3e-2,
    bf16: 6e-2,
    signed_zeros: false,
};

const F32: [DType; 1] = [DType::F32];
const HALF_TOO: [DType; 2] = [DType::F32, DType::F16];

/// Runs `$body` (generic over an autodiff backend `B`) on `Autodiff<Ascend>` and on
/// `Autodiff<Flex>` for every dtype, and compares the returned values and gradients.
macro_rules! grad_test {
    ($name:ident, $dtypes:expr, $tol:expr, |$d:ident, $dtype:ident| $body:block) => {
        #[test]
        fn $name() {
            fn case<B: AutodiffBackend>($d: &B::Device, $dtype: DType) -> Vec<TensorData> {
                $body
            }
            for &dtype in $dtypes.iter() {
                let what = format!("{} ({dtype:?})", stringify!($name));
                compare(
                    &what,
                    $tol,
                    ("Autodiff<Ascend>", || {
                        case::<Autodiff<Ascend>>(&device(), dtype)
                    }),
                    || case::<Autodiff<Flex>>(&Default::default(), dtype),
                );
            }
        }
    };
}

/// A tracked input of `role` values.
fn param<B: AutodiffBackend, const D: usize>(
    d: &B::Device,
    dtype: DType,
    shape: [usize; D],
    role: Role,
    seed: usize,
) -> Tensor<B, D> {
    Tensor::<B, D>::from_data(data(shape.to_vec(), dtype, role, seed), (d, dtype)).require_grad()
}

/// `sum(out * w)` for fixed weights `w` of mixed signs, so every output position carries a
/// distinct gradient.
fn loss<B: Backend, const D: usize>(out: Tensor<B, D>) -> Tensor<B, 1> {
    let dtype = out.dtype();
    let w = Tensor::<B, D>::from_data(
        data(out.dims().to_vec(), dtype, Role::Signs, 11),
        (&out.device(), dtype),
    );
    (out * w).sum()
}

/// The gradient of `x` as data.
fn grad<B: AutodiffBackend, const D: usize>(x: &Tensor<B, D>, grads: &B::Gradients) -> TensorData {
    x.grad(grads)
        .expect("the input takes part in the loss")
        .into_data()
}

/// The loss value and the gradient of each listed input.
macro_rules! backprop {
    ($loss:expr; $($x:expr),+) => {{
        let loss = $loss;
        let value = loss.clone().into_data();
        let grads = loss.backward();
        vec![value, $(grad(&$x, &grads)),+]
    }};
}

grad_test!(elementwise_chain, HALF_TOO, GRADS, |d, dtype| {
    let a = param::<B, 3>(d, dtype, [2, 3, 4], Role::Positive, 0);
    let b = param::<B, 3>(d, dtype, [2, 3, 4], Role::Rhs, 1);
    let out = (a.clone().log() * b.clone()).exp() / (b.clone().abs() + 1.0)
        + a.clone().sqrt().sin()
        + tanh(b.clone() * 0.3)
        + a.clone().powf_scalar(1.5)
        - sigmoid(b.clone()) * relu(a.clone() - 2.0)
        + gelu(b.clone());
    backprop!(loss(out); a, b)
});

grad_test!(broadcast_matmul, HALF_TOO, GRADS, |d, dtype| {
    let a = param::<B, 3>(d, dtype, [2, 3, 4], Role::Lhs, 0);
    let b = param::<B, 2>(d, dtype, [4, 5], Role::Unit, 1);
    let bias = param::<B, 1>(d, dtype, [5], Role::Lhs, 2);
    let out = a.clone().matmul(b.clone().unsqueeze()) + bias.clone().unsqueeze();
    backprop!(loss(out); a, b, bias)
});

grad_test!(reductions, F32, GRADS, |d, dtype| {
    let x = param::<B, 3>(d, dtype, [2, 3, 4], Role::Distinct, 0);
    let out = x.clone().sum_dim(1) * 0.5
        + x.clone().mean_dim(1)
        + x.clone().max_dim(1)
        + x.clone().min_dim(1) * 2.0
        + x.clone().prod_dim(1) * 1e-4;
    backprop!(loss(out) + x.clone().mean() + x.clone().max(); x)
});

grad_test!(softmax_and_cross_entropy, HALF_TOO, GRADS, |d, dtype| {
    let logits = param::<B, 2>(d, dtype, [4, 5], Role::Lhs, 0);
    let targets = Tensor::<B, 1, Int>::from_data(TensorData::new(vec![1i64, 4, 0, 2], [4]), d);
    let probs = softmax(logits.clone(), 1);
    let nll = log_softmax(logits.clone(), 1)
        .gather(1, targets.unsqueeze_dim(1))
        .mean()
        .neg();
    backprop!(loss(probs) + nll; logits)
});

grad_test!(layer_norm_embedding_linear, F32, GRADS, |d, dtype| {
    let table = param::<B, 2>(d, dtype, [6, 4], Role::Lhs, 0);
    let idx = Tensor::<B, 2, Int>::from_data(TensorData::new(vec![0i64, 5, 2, 2, 4, 1], [2, 3]), d);
    let gamma = param::<B, 1>(d, dtype, [4], Role::Positive, 1);
    let w = param::<B, 2>(d, dtype, [4, 3], Role::Unit, 2);
    let e = embedding(table.clone(), idx);
    let mean = e.clone().mean_dim(2);
    let centred = e - mean;
    let var = centred.clone().powi_scalar(2).mean_dim(2);
    let normed = centred / (var + 1e-5).sqrt() * gamma.clone().unsqueeze();
    let out = normed.matmul(w.clone().unsqueeze());
    backprop!(loss(out); table, gamma, w)
});

grad_test!(conv1d_2d_3d_groups, HALF_TOO, GRADS, |d, dtype| {
    let x1 = param::<B, 3>(d, dtype, [2, 4, 9], Role::Lhs, 0);
    let w1 = param::<B, 3>(d, dtype, [6, 2, 3], Role::Signs, 1);
    let b1 = param::<B, 1>(d, dtype, [6], Role::Lhs, 2);
    let x2 = param::<B, 4>(d, dtype, [2, 4, 6, 5], Role::Lhs, 3);
    let w2 = param::<B, 4>(d, dtype, [4, 2, 3, 2], Role::Signs, 4);
    let x3 = param::<B, 5>(d, dtype, [1, 2, 3, 4, 3], Role::Lhs, 5);
    let w3 = param::<B, 5>(d, dtype, [2, 2, 2, 2, 2], Role::Signs, 6);
    let y1 = conv1d(
        x1.clone(),
        w1.clone(),
        Some(b1.clone()),
        ConvOptions::new([2], [1], [2], 2),
    );
    let y2 = conv2d(
        x2.clone(),
        w2.clone(),
        None,
        ConvOptions::new([2, 1], [1, 1], [1, 2], 2),
    );
    let y3 = conv3d(
        x3.clone(),
        w3.clone(),
        None,
        ConvOptions::new([1, 2, 1], [1, 0, 1], [1, 1, 2], 1),
    );
    backprop!(loss(y1) + loss(y2) + loss(y3); x1, w1, b1, x2, w2, x3, w3)
});

grad_test!(
    conv2d_padding_beyond_the_a2_limit,
    F32,
    GRADS,
    |d, dtype| {
        let x = param::<B, 4>(d, dtype, [1, 2, 3, 2], Role::Lhs, 0);
        let w = param::<B, 4>(d, dtype, [2, 2, 2, 2], Role::Signs, 1);
        let y = conv2d(
            x.clone(),
            w.clone(),
            None,
            ConvOptions::new([97, 1], [260, 1], [1, 1], 1),
        );
        backprop!(loss(y); x, w)
    }
);

grad_test!(conv_transpose_2d_3d, HALF_TOO, GRADS, |d, dtype| {
    let x2 = param::<B, 4>(d, dtype, [2, 4, 3, 4], Role::Lhs, 0);
    let w2 = param::<B, 4>(d, dtype, [4, 3, 3, 2], Role::Signs, 1);
    let b2 = param::<B, 1>(d, dtype, [6], Role::Lhs, 2);
    let x3 = param::<B, 5>(d, dtype, [1, 2, 2, 3, 2], Role::Lhs, 3);
    let w3 = param::<B, 5>(d, dtype, [2, 2, 2, 2, 3], Role::Signs, 4);
    let y2 = conv_transpose2d(
        x2.clone(),
        w2.clone(),
        Some(b2.clone()),
        ConvTransposeOptions::new([2, 3], [1, 0], [1, 2], [1, 1], 2),
    );
    let y3 = conv_transpose3d(
        x3.clone(),
        w3.clone(),
        None,
        ConvTransposeOptions::new([1, 2, 1], [0, 1, 1], [0, 1, 0], [2, 1, 1], 1),
    );
    backprop!(loss(y2) + loss(y3); x2, w2, b2, x3, w3)
});

// An output padding not smaller than the stride or the dilation: aclnn refuses it, Burn grows
// the output on the far side (cropped positions, then zeros plus the bias); bridged, forward
// and backward.
grad_test!(
    conv_transpose_with_a_wide_output_padding,
    HALF_TOO,
    GRADS,
    |d, dtype| {
        let x1 = param::<B, 3>(d, dtype, [2, 3, 5], Role::Lhs, 0);
        let w1 = param::<B, 3>(d, dtype, [3, 2, 3], Role::Signs, 1);
        let b1 = param::<B, 1>(d, dtype, [2], Role::Lhs, 2);
        let x2 = param::<B, 4>(d, dtype, [1, 2, 3, 4], Role::Lhs, 3);
        let w2 = param::<B, 4>(d, dtype, [2, 2, 2, 3], Role::Signs, 4);
        let b2 = param::<B, 1>(d, dtype, [4], Role::Lhs, 5);
        // 1-D, stride 1, output padding 1 (past the full result) and then 3 (padding 1 crops one).
        let y1 = conv_transpose1d(
            x1.clone(),
            w1.clone(),
            Some(b1.clone()),
            ConvTransposeOptions::new([1], [0], [1], [1], 1),
        );
        let y1b = conv_transpose1d(
            x1.clone(),
            w1.clone(),
            Some(b1.clone()),
            ConvTransposeOptions::new([1], [1], [3], [1], 1),
        );
        // 2-D, stride 2 with output padding 2 on one dim, dilation 2 on the other.
        let y2 = conv_transpose2d(
            x2.clone(),
            w2.clone(),
            Some(b2.clone()),
            ConvTransposeOptions::new([2, 1], [1, 0], [2, 1], [1, 1], 2),
        );
        let mut out = backprop!(
            loss(y1.clone()) + loss(y1b.clone()) + loss(y2.clone());
            x1, w1, b1, x2, w2, b2
        );
        out.extend([y1.into_data(), y1b.into_data(), y2.into_data()]);
        out
    }
);

/// The reference computes the F64 deformable-convolution backward pass in F32.
const DEFORM: Tolerance = Tolerance { f64: 1e-5, ..GRADS };

grad_test!(
    deform_conv2d_all_inputs,
    [DType::F32, DType::F64],
    DEFORM,
    |d, dtype| {
        let x = param::<B, 4>(d, dtype, [1, 4, 5, 6], Role::Lhs, 0);
        let w = param::<B, 4>(d, dtype, [4, 2, 3, 3], Role::Signs, 1);
        let b = param::<B, 1>(d, dtype, [4], Role::Lhs, 2);
        let offset = param::<B, 4>(d, dtype, [1, 36, 3, 4], Role::Unit, 3);
        let mask = param::<B, 4>(d, dtype, [1, 18, 3, 4], Role::Unit, 4);
        let options = DeformConvOptions::new([2, 1], [1, 0], [1, 1], 2, 2);
        let with_mask = deform_conv2d(
            x.clone(),
            offset.clone() * 1.7,
            w.clone(),
            Some(mask.clone()),
            Some(b.clone()),
            options.clone(),
        );
        let without = deform_conv2d(
            x.clone(),
            offset.clone() * 0.6,
            w.clone(),
            None,
            None,
            options,
        );
        backprop!(loss(with_mask) + loss(without); x, w, b, offset, mask)
    }
);

grad_test!(pooling, HALF_TOO, GRADS, |d, dtype| {
    let x = param::<B, 4>(d, dtype, [2, 2, 7, 6], Role::Distinct, 0);
    let out = loss(avg_pool2d(x.clone(), [3, 2], [2, 2], [1, 1], true, true))
        + loss(avg_pool2d(x.clone(), [2, 3], [2, 1], [1, 1], false, false))
        + loss(max_pool2d(x.clone(), [3, 3], [2, 2], [1, 1], [1, 1], true))
        + loss(max_pool2d(x.clone(), [2, 2], [1, 2], [1, 0], [2, 2], false))
        + loss(adaptive_avg_pool2d(x.clone(), [3, 4]))
        + loss(adaptive_avg_pool2d(x.clone(), [9, 8]));
    backprop!(out; x)
});

grad_test!(interpolation, HALF_TOO, GRADS, |d, dtype| {
    let x = param::<B, 4>(d, dtype, [1, 2, 5, 4], Role::Lhs, 0);
    let mut total: Option<Tensor<B, 1>> = None;
    for mode in [
        InterpolateMode::Nearest,
        InterpolateMode::Bilinear,
        InterpolateMode::Bicubic,
    ] {
        for align in [true, false] {
            for size in [[8, 7], [3, 2]] {
                let options = InterpolateOptions::new(mode.clone()).with_align_corners(align);
                let l = loss(interpolate(x.clone(), size, options));
                total = Some(match total {
                    Some(t) => t + l,
                    None => l,
                });
            }
        }
    }
    backprop!(total.expect("terms"); x)
});

grad_test!(
    attention_with_mask_bias_and_causal,
    HALF_TOO,
    GRADS,
    |d, dtype| {
        let q = param::<B, 4>(d, dtype, [1, 2, 3, 4], Role::Unit, 0);
        let k = param::<B, 4>(d, dtype, [1, 2, 5, 4], Role::Unit, 1);
        let v = param::<B, 4>(d, dtype, [1, 2, 5, 3], Role::Lhs, 2);
        let bias = param::<B, 4>(d, dtype, [1, 2, 3, 5], Role::Unit, 3);
        let mask: Tensor<B, 4, Bool> =
            Tensor::from_data(data(vec![1, 2, 3, 5], BOOL, Role::Lhs, 4), (d, BOOL));
        let causal = AttentionModuleOptions {
            is_causal: true,
            ..Default::default()
        };
        let out = loss(attention(
            q.clone(),
            k.clone(),
            v.clone(),
            Some(mask),
            Some(bias.clone()),
            Default::default(),
        )) + loss(attention(
            q.clone(),
            k.clone(),
            v.clone(),
            None,
            None,
            causal,
        ));
        backprop!(out; q, k, v, bias)
    }
);
