//! `ModuleOps` for [`Ascend`]: one line per method onto the op-mapping layer.
//!
//! Convolutions of every rank go straight to aclnnConvolution (Burn's defaults would route
//! 1-D through 2-D); their input and weight gradients go to aclnnConvolutionBackward, except
//! the input gradient of a transposed convolution, which is a plain convolution of the output
//! gradient by the same weight (Burn gives no input tensor there). Layer norm runs the fused
//! `layer_norm` kernel and linear with a bias one aclnnAddmm (with a lazily dequantized int8
//! weight, one aclnnWeightQuantBatchMatmulV2). Bias gradients, embedding,
//! unfold4d, CTC loss and the 1-D pools keep Burn's defaults, which run on the mapped tensor ops.

use crate::ops::attention::{self, AttentionOptions};
use crate::ops::conv::{self, ConvGrads, ConvParams};
use crate::ops::flash_attention;
use crate::ops::pool::{self, Pool2d};
use crate::ops::resample::{self, Resample};
use crate::ops::{deform, fft};

use super::*;

// The helpers both adapters share (burn-ascend-core's adapter_methods).
burn_ascend_core::adapter_module_helpers!();

fn conv_params<const N: usize>(o: &ConvOptions<N>) -> ConvParams {
    ConvParams {
        stride: o.stride.to_vec(),
        padding: o.padding.to_vec(),
        dilation: o.dilation.to_vec(),
        output_padding: vec![0; N],
        groups: o.groups,
        transposed: false,
    }
}

const INPUT: ConvGrads = ConvGrads {
    input: true,
    weight: false,
    bias: false,
};
const WEIGHT: ConvGrads = ConvGrads {
    input: false,
    weight: true,
    bias: false,
};

fn resample_mode(mode: &InterpolateMode) -> Resample {
    match mode {
        InterpolateMode::Nearest => Resample::Nearest,
        InterpolateMode::Bilinear => Resample::Bilinear,
        InterpolateMode::Bicubic => Resample::Bicubic,
        InterpolateMode::Lanczos3 => Resample::Lanczos3,
    }
}

impl ModuleOps<Ascend> for Ascend {
    // The methods both adapters share (burn-ascend-core's adapter_methods); below, this
    // Burn version's own.
    burn_ascend_core::adapter_module_ops!();

    /// `x @ weight + bias` as one aclnnAddmm for the cube float types; otherwise (no bias, or
    /// f64) Burn's composition: a matmul against the weight unsqueezed to x's rank, then the
    /// add.
    fn linear(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        // A lazily dequantized int8 weight (a Quantizer-quantized `nn::Linear`): one
        // aclnnWeightQuantBatchMatmulV2 with the bias, on the int8 values.
        if let Some(y) = super::qtensor_ops::lazy_weight_matmul(&x, &weight, bias.as_deref()) {
            return run("linear", y);
        }
        if let Some(b) = &bias {
            if x.dtype() != DataType::F64 && x.dtype() == weight.dtype() && x.dtype() == b.dtype() {
                return run("linear", crate::ops::matmul::linear(&x, &weight, b));
            }
        }
        let rank = x.shape().len();
        let out = Self::float_matmul(x, leading_ones(weight, rank));
        match bias {
            Some(b) => Self::float_add(out, leading_ones(b, rank)),
            None => out,
        }
    }

    /// One launch of the `layer_norm` kernel for f32, f16 and bf16. f64, which the vector unit
    /// cannot compute, keeps Burn's composition in f64 (mean and variance over the last axis).
    fn layer_norm(
        tensor: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: Option<FloatTensor<Self>>,
        epsilon: f64,
    ) -> FloatTensor<Self> {
        if tensor.dtype() != DataType::F64 {
            return <Self as crate::FusedOps>::layer_norm(tensor, Some(gamma), beta, epsilon).y;
        }
        let rank = tensor.shape().len();
        let mean = Self::float_mean_dim(tensor.clone(), rank - 1);
        let centered = Self::float_sub(tensor, mean);
        let sq = Self::float_mul(centered.clone(), centered.clone());
        let var = Self::float_mean_dim(sq, rank - 1);
        let denom = Self::float_sqrt(Self::float_add_scalar(var, epsilon.into()));
        let normalized = Self::float_div(centered, denom);
        let scaled = Self::float_mul(normalized, leading_ones(gamma, rank));
        match beta {
            Some(b) => Self::float_add(scaled, leading_ones(b, rank)),
            None => scaled,
        }
    }

    fn conv1d(
        x: FloatTensor<Ascend>,
        weight: FloatTensor<Ascend>,
        bias: Option<FloatTensor<Ascend>>,
        options: ConvOptions<1>,
    ) -> FloatTensor<Ascend> {
        convolve(x, weight, bias, conv_params(&options))
    }

    fn conv1d_x_backward(
        x: FloatTensor<Ascend>,
        weight: FloatTensor<Ascend>,
        output_grad: FloatTensor<Ascend>,
        options: ConvOptions<1>,
    ) -> FloatTensor<Ascend> {
        conv_grad(x, weight, output_grad, conv_params(&options), INPUT)
    }

    fn conv1d_weight_backward(
        x: FloatTensor<Ascend>,
        weight: FloatTensor<Ascend>,
        output_grad: FloatTensor<Ascend>,
        options: ConvOptions<1>,
    ) -> FloatTensor<Ascend> {
        conv_grad(x, weight, output_grad, conv_params(&options), WEIGHT)
    }

    fn conv2d(
        x: FloatTensor<Ascend>,
        weight: FloatTensor<Ascend>,
        bias: Option<FloatTensor<Ascend>>,
        options: ConvOptions<2>,
    ) -> FloatTensor<Ascend> {
        convolve(x, weight, bias, conv_params(&options))
    }

    fn conv2d_x_backward(
        x: FloatTensor<Ascend>,
        weight: FloatTensor<Ascend>,
        output_grad: FloatTensor<Ascend>,
        options: ConvOptions<2>,
    ) -> FloatTensor<Ascend> {
        conv_grad(x, weight, output_grad, conv_params(&options), INPUT)
    }

    fn conv2d_weight_backward(
        x: FloatTensor<Ascend>,
        weight: FloatTensor<Ascend>,
        output_grad: FloatTensor<Ascend>,
        options: ConvOptions<2>,
    ) -> FloatTensor<Ascend> {
        conv_grad(x, weight, output_grad, conv_params(&options), WEIGHT)
    }

    fn conv3d(
        x: FloatTensor<Ascend>,
        weight: FloatTensor<Ascend>,
        bias: Option<FloatTensor<Ascend>>,
        options: ConvOptions<3>,
    ) -> FloatTensor<Ascend> {
        convolve(x, weight, bias, conv_params(&options))
    }

    fn conv3d_x_backward(
        x: FloatTensor<Ascend>,
        weight: FloatTensor<Ascend>,
        output_grad: FloatTensor<Ascend>,
        options: ConvOptions<3>,
    ) -> FloatTensor<Ascend> {
        conv_grad(x, weight, output_grad, conv_params(&options), INPUT)
    }

    fn conv3d_weight_backward(
        x: FloatTensor<Ascend>,
        weight: FloatTensor<Ascend>,
        output_grad: FloatTensor<Ascend>,
        options: ConvOptions<3>,
    ) -> FloatTensor<Ascend> {
        conv_grad(x, weight, output_grad, conv_params(&options), WEIGHT)
    }

    fn max_pool2d_with_indices(
        x: FloatTensor<Ascend>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        ceil_mode: bool,
    ) -> MaxPool2dWithIndices<Ascend> {
        let p = pool2d(kernel_size, stride, padding, dilation, ceil_mode);
        let (output, indices) = run(
            "max_pool2d_with_indices",
            pool::max_pool2d_with_indices(&x, &p),
        );
        let indices = run(
            "max_pool2d_with_indices",
            copy::cast(&indices, DataType::I32),
        );
        MaxPool2dWithIndices::new(output, indices)
    }

    fn rfft(
        signal: FloatTensor<Ascend>,
        dim: usize,
        n: Option<usize>,
    ) -> (FloatTensor<Ascend>, FloatTensor<Ascend>) {
        run("rfft", fft::rfft(&signal, dim, n))
    }

    fn irfft(
        spectrum_re: FloatTensor<Ascend>,
        spectrum_im: FloatTensor<Ascend>,
        dim: usize,
        n: Option<usize>,
    ) -> FloatTensor<Ascend> {
        run("irfft", fft::irfft(&spectrum_re, &spectrum_im, dim, n))
    }
}
