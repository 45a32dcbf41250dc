//! `ModuleOps` for [`Ascend`]: one line per method onto the op-mapping layer.
//!
//! Convolutions of every rank go straight to aclnnConvolution (Burn's defaults would route
//! 1-D through 2-D); their input and weight gradients go to aclnnConvolutionBackward, except
//! the input gradient of a transposed convolution, which is a plain convolution of the output
//! gradient by the same weight (Burn gives no input tensor there). Layer norm runs the fused
//! `layer_norm` kernel and linear with a bias one aclnnAddmm. Bias gradients, embedding,
//! unfold4d, CTC loss and the 1-D pools keep Burn's defaults, which run on the mapped tensor ops.

use crate::ops::attention::{self, AttentionOptions};
use crate::ops::conv::{self, ConvGrads, ConvParams};
use crate::ops::flash_attention;
use crate::ops::pool::{self, Pool2d};
use crate::ops::resample::{self, Resample};
use crate::ops::{deform, fused, pool3d};

use super::*;

// The helpers both adapters share (burn-ascend-core's adapter_methods).
burn_ascend_core::adapter_module_helpers!();

/// Whether Burn 0.22's `(begin, end)` padding differs between the two sides of some dim:
/// aclnnConvolution pads both sides alike, so such an input is padded explicitly first.
fn uneven<const N: usize>(o: &ConvOptions<N>) -> bool {
    o.padding.iter().any(|&(begin, end)| begin != end)
}

/// The convolution's geometry; with uneven padding, none (the input comes padded, see
/// [`padded`]).
fn conv_params<const N: usize>(o: &ConvOptions<N>) -> ConvParams {
    let padding = if uneven(o) {
        vec![0; N]
    } else {
        o.padding.iter().map(|&(begin, _)| begin).collect()
    };
    ConvParams {
        stride: o.stride.to_vec(),
        padding,
        dilation: o.dilation.to_vec(),
        output_padding: vec![0; N],
        groups: o.groups,
        transposed: false,
    }
}

/// `x` padded with zeros by the uneven padding of `o` (unchanged for even padding, which the
/// operator applies itself).
fn padded<const N: usize>(x: AscendTensor, o: &ConvOptions<N>) -> AscendTensor {
    if !uneven(o) {
        return x;
    }
    run("convolution padding", conv::pad(&x, &o.padding, 0.0))
}

fn conv_forward<const N: usize>(
    x: AscendTensor,
    weight: AscendTensor,
    bias: Option<AscendTensor>,
    o: &ConvOptions<N>,
) -> AscendTensor {
    convolve(padded(x, o), weight, bias, conv_params(o))
}

/// The input gradient; with uneven padding, that of the padded input, cropped back.
fn conv_input_grad<const N: usize>(
    x: AscendTensor,
    weight: AscendTensor,
    grad: AscendTensor,
    o: &ConvOptions<N>,
) -> AscendTensor {
    let shape = x.shape().to_vec();
    let g = conv_grad(padded(x, o), weight, grad, conv_params(o), INPUT);
    if !uneven(o) {
        return g;
    }
    let crop: Vec<DimSlice> = shape
        .iter()
        .enumerate()
        .map(|(d, &size)| {
            let start = if d < 2 { 0 } else { o.padding[d - 2].0 };
            DimSlice {
                start,
                end: start + size,
                step: 1,
            }
        })
        .collect();
    run("convolution backward", copy::slice(&g, &crop))
}

fn conv_weight_grad<const N: usize>(
    x: AscendTensor,
    weight: AscendTensor,
    grad: AscendTensor,
    o: &ConvOptions<N>,
) -> AscendTensor {
    conv_grad(padded(x, o), weight, grad, conv_params(o), WEIGHT)
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
        InterpolateMode::NearestExact => raise(AscendError::invalid(
            "interpolate",
            "nearest-exact interpolation is not supported (nearest, bilinear, bicubic, lanczos3)",
        )),
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
    /// cannot compute (and a device whose kernel library lacks the kernel), keeps Burn's
    /// composition (mean and variance over the last axis).
    fn layer_norm(
        tensor: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: Option<FloatTensor<Self>>,
        epsilon: f64,
    ) -> FloatTensor<Self> {
        if tensor.dtype() != DataType::F64 && tensor.ctx().has_kernel("layer_norm") {
            let (y, _, _) = run(
                "layer_norm",
                fused::layer_norm(&tensor, Some(&gamma), beta.as_deref(), epsilon),
            );
            return y;
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
        conv_forward(x, weight, bias, &options)
    }

    fn conv1d_x_backward(
        x: FloatTensor<Ascend>,
        weight: FloatTensor<Ascend>,
        output_grad: FloatTensor<Ascend>,
        options: ConvOptions<1>,
    ) -> FloatTensor<Ascend> {
        conv_input_grad(x, weight, output_grad, &options)
    }

    fn conv1d_weight_backward(
        x: FloatTensor<Ascend>,
        weight: FloatTensor<Ascend>,
        output_grad: FloatTensor<Ascend>,
        options: ConvOptions<1>,
    ) -> FloatTensor<Ascend> {
        conv_weight_grad(x, weight, output_grad, &options)
    }

    fn conv2d(
        x: FloatTensor<Ascend>,
        weight: FloatTensor<Ascend>,
        bias: Option<FloatTensor<Ascend>>,
        options: ConvOptions<2>,
    ) -> FloatTensor<Ascend> {
        conv_forward(x, weight, bias, &options)
    }

    fn conv2d_x_backward(
        x: FloatTensor<Ascend>,
        weight: FloatTensor<Ascend>,
        output_grad: FloatTensor<Ascend>,
        options: ConvOptions<2>,
    ) -> FloatTensor<Ascend> {
        conv_input_grad(x, weight, output_grad, &options)
    }

    fn conv2d_weight_backward(
        x: FloatTensor<Ascend>,
        weight: FloatTensor<Ascend>,
        output_grad: FloatTensor<Ascend>,
        options: ConvOptions<2>,
    ) -> FloatTensor<Ascend> {
        conv_weight_grad(x, weight, output_grad, &options)
    }

    fn conv3d(
        x: FloatTensor<Ascend>,
        weight: FloatTensor<Ascend>,
        bias: Option<FloatTensor<Ascend>>,
        options: ConvOptions<3>,
    ) -> FloatTensor<Ascend> {
        conv_forward(x, weight, bias, &options)
    }

    fn conv3d_x_backward(
        x: FloatTensor<Ascend>,
        weight: FloatTensor<Ascend>,
        output_grad: FloatTensor<Ascend>,
        options: ConvOptions<3>,
    ) -> FloatTensor<Ascend> {
        conv_input_grad(x, weight, output_grad, &options)
    }

    fn conv3d_weight_backward(
        x: FloatTensor<Ascend>,
        weight: FloatTensor<Ascend>,
        output_grad: FloatTensor<Ascend>,
        options: ConvOptions<3>,
    ) -> FloatTensor<Ascend> {
        conv_weight_grad(x, weight, output_grad, &options)
    }

    fn adaptive_avg_pool3d(x: FloatTensor<Ascend>, output_size: [usize; 3]) -> FloatTensor<Ascend> {
        run(
            "adaptive_avg_pool3d",
            pool3d::adaptive_avg_pool3d(&x, output_size),
        )
    }

    fn adaptive_avg_pool3d_backward(
        x: FloatTensor<Ascend>,
        grad: FloatTensor<Ascend>,
    ) -> FloatTensor<Ascend> {
        let input = [x.shape()[2], x.shape()[3], x.shape()[4]];
        run(
            "adaptive_avg_pool3d_backward",
            pool3d::adaptive_avg_pool3d_backward(&grad, input),
        )
    }

    fn max_pool2d_with_indices(
        x: FloatTensor<Ascend>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        ceil_mode: bool,
        indices_dtype: IntDType,
    ) -> MaxPool2dWithIndices<Ascend> {
        let p = pool2d(kernel_size, stride, padding, dilation, ceil_mode);
        let (output, indices) = run(
            "max_pool2d_with_indices",
            pool::max_pool2d_with_indices(&x, &p),
        );
        // The caller picks the index type (the composition gathers them as I64).
        let indices = run(
            "max_pool2d_with_indices",
            copy::cast(&indices, int_type(indices_dtype)),
        );
        MaxPool2dWithIndices::new(output, indices)
    }
}
