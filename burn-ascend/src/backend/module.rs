//! `ModuleOps` for [`Ascend`]: one line per method onto the op-mapping layer.

use super::*;

impl ModuleOps<Ascend> for Ascend {
    fn conv2d(
        _x: FloatTensor<Ascend>,
        _weight: FloatTensor<Ascend>,
        _bias: Option<FloatTensor<Ascend>>,
        _options: ConvOptions<2>,
    ) -> FloatTensor<Ascend> {
        unsupported("conv2d")
    }

    fn deform_conv2d(
        _x: FloatTensor<Ascend>,
        _offset: FloatTensor<Ascend>,
        _weight: FloatTensor<Ascend>,
        _mask: Option<FloatTensor<Ascend>>,
        _bias: Option<FloatTensor<Ascend>>,
        _options: DeformConvOptions<2>,
    ) -> FloatTensor<Ascend> {
        unsupported("deform_conv2d")
    }

    fn deform_conv2d_backward(
        _x: FloatTensor<Ascend>,
        _offset: FloatTensor<Ascend>,
        _weight: FloatTensor<Ascend>,
        _mask: Option<FloatTensor<Ascend>>,
        _bias: Option<FloatTensor<Ascend>>,
        _output_grad: FloatTensor<Ascend>,
        _options: DeformConvOptions<2>,
    ) -> DeformConv2dBackward<Ascend> {
        unsupported("deform_conv2d_backward")
    }

    fn conv3d(
        _x: FloatTensor<Ascend>,
        _weight: FloatTensor<Ascend>,
        _bias: Option<FloatTensor<Ascend>>,
        _options: ConvOptions<3>,
    ) -> FloatTensor<Ascend> {
        unsupported("conv3d")
    }

    fn conv_transpose2d(
        _x: FloatTensor<Ascend>,
        _weight: FloatTensor<Ascend>,
        _bias: Option<FloatTensor<Ascend>>,
        _options: ConvTransposeOptions<2>,
    ) -> FloatTensor<Ascend> {
        unsupported("conv_transpose2d")
    }

    fn conv_transpose3d(
        _x: FloatTensor<Ascend>,
        _weight: FloatTensor<Ascend>,
        _bias: Option<FloatTensor<Ascend>>,
        _options: ConvTransposeOptions<3>,
    ) -> FloatTensor<Ascend> {
        unsupported("conv_transpose3d")
    }

    fn avg_pool2d(
        _x: FloatTensor<Ascend>,
        _kernel_size: [usize; 2],
        _stride: [usize; 2],
        _padding: [usize; 2],
        _count_include_pad: bool,
        _ceil_mode: bool,
    ) -> FloatTensor<Ascend> {
        unsupported("avg_pool2d")
    }

    fn avg_pool2d_backward(
        _x: FloatTensor<Ascend>,
        _grad: FloatTensor<Ascend>,
        _kernel_size: [usize; 2],
        _stride: [usize; 2],
        _padding: [usize; 2],
        _count_include_pad: bool,
        _ceil_mode: bool,
    ) -> FloatTensor<Ascend> {
        unsupported("avg_pool2d_backward")
    }

    fn adaptive_avg_pool2d(
        _x: FloatTensor<Ascend>,
        _output_size: [usize; 2],
    ) -> FloatTensor<Ascend> {
        unsupported("adaptive_avg_pool2d")
    }

    fn adaptive_avg_pool2d_backward(
        _x: FloatTensor<Ascend>,
        _grad: FloatTensor<Ascend>,
    ) -> FloatTensor<Ascend> {
        unsupported("adaptive_avg_pool2d_backward")
    }

    fn max_pool2d(
        _x: FloatTensor<Ascend>,
        _kernel_size: [usize; 2],
        _stride: [usize; 2],
        _padding: [usize; 2],
        _dilation: [usize; 2],
        _ceil_mode: bool,
    ) -> FloatTensor<Ascend> {
        unsupported("max_pool2d")
    }

    fn max_pool2d_with_indices(
        _x: FloatTensor<Ascend>,
        _kernel_size: [usize; 2],
        _stride: [usize; 2],
        _padding: [usize; 2],
        _dilation: [usize; 2],
        _ceil_mode: bool,
    ) -> MaxPool2dWithIndices<Ascend> {
        unsupported("max_pool2d_with_indices")
    }

    fn max_pool2d_with_indices_backward(
        _x: FloatTensor<Ascend>,
        _kernel_size: [usize; 2],
        _stride: [usize; 2],
        _padding: [usize; 2],
        _dilation: [usize; 2],
        _ceil_mode: bool,
        _output_grad: FloatTensor<Ascend>,
        _indices: IntTensor<Ascend>,
    ) -> MaxPool2dBackward<Ascend> {
        unsupported("max_pool2d_with_indices_backward")
    }

    fn interpolate(
        _x: FloatTensor<Ascend>,
        _output_size: [usize; 2],
        _options: InterpolateOptions,
    ) -> FloatTensor<Ascend> {
        unsupported("interpolate")
    }

    fn interpolate_backward(
        _x: FloatTensor<Ascend>,
        _grad: FloatTensor<Ascend>,
        _output_size: [usize; 2],
        _options: InterpolateOptions,
    ) -> FloatTensor<Ascend> {
        unsupported("interpolate_backward")
    }

    fn attention(
        _query: FloatTensor<Ascend>,
        _key: FloatTensor<Ascend>,
        _value: FloatTensor<Ascend>,
        _mask: Option<BoolTensor<Ascend>>,
        _attn_bias: Option<FloatTensor<Ascend>>,
        _options: AttentionModuleOptions,
    ) -> FloatTensor<Ascend> {
        unsupported("attention")
    }

    fn rfft(
        _signal: FloatTensor<Ascend>,
        _dim: usize,
        _n: Option<usize>,
    ) -> (FloatTensor<Ascend>, FloatTensor<Ascend>) {
        unsupported("rfft")
    }

    fn irfft(
        _spectrum_re: FloatTensor<Ascend>,
        _spectrum_im: FloatTensor<Ascend>,
        _dim: usize,
        _n: Option<usize>,
    ) -> FloatTensor<Ascend> {
        unsupported("irfft")
    }
}
