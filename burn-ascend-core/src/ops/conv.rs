//! Convolutions (1-D to 3-D, plain and transposed, with groups and dilation) onto
//! aclnnConvolution, and their input/weight/bias gradients onto aclnnConvolutionBackward.
//!
//! Both run with cubeMathType 0 (KEEP_DTYPE): any other mode lets Atlas A2 compute F32 in
//! HF32 (about 1e-3 relative error). aclnn convolutions take F32, F16 and BF16 only, so F64
//! runs in F32 on the device and is cast back. The tensor formats (NCL, NCHW, NCDHW) follow
//! the rank, which the descriptors already do. Atlas A2 takes at most 255 of padding per
//! side: a plain convolution with more is padded explicitly with aclnnConstantPadNd first
//! (and its input gradient cropped back); transposed convolutions keep aclnn's limit.
//!
//! A transposed convolution whose output padding is not smaller than its stride or its dilation
//! is refused by aclnn (ACLNN_ERR_PARAM_INVALID), while Burn allows it: the output then grows by
//! the output padding on the far side, through positions the padding would otherwise crop and,
//! past the full result, zeros (plus the bias). It runs as the full result (no padding, no
//! output padding), cropped and zero-padded to the asked size, plus the bias; its gradients
//! take the output gradient back onto the full result first.

use super::copy::cast;
use super::tensor::AscendTensor;
use crate::acl::handles::{BoolArrayDesc, HostScalar, IntArrayDesc, ScalarDesc};
use crate::acl::types::CUBE_MATH_KEEP_DTYPE;
use crate::acl::{AclResult, DataType};

/// The geometry of a convolution: per spatial dim stride, padding, dilation and (transposed
/// only) output padding, plus the group count.
#[derive(Debug, Clone)]
pub struct ConvParams {
    /// Step between windows.
    pub stride: Vec<usize>,
    /// Zero padding on both sides.
    pub padding: Vec<usize>,
    /// Spacing between kernel taps.
    pub dilation: Vec<usize>,
    /// Extra size on one side of a transposed convolution's output.
    pub output_padding: Vec<usize>,
    /// Channel groups.
    pub groups: usize,
    /// Whether this is a transposed convolution.
    pub transposed: bool,
}

impl ConvParams {
    fn arrays<'a>(&self, x: &'a AscendTensor) -> AclResult<[IntArrayDesc<'a>; 4]> {
        let api = x.ctx().bind();
        let arr = |v: &[usize]| {
            let v: Vec<i64> = v.iter().map(|&d| d as i64).collect();
            IntArrayDesc::new(api, &v)
        };
        Ok([
            arr(&self.stride)?,
            arr(&self.padding)?,
            arr(&self.dilation)?,
            arr(&self.output_padding)?,
        ])
    }

    /// The output shape for input `x` and `weight` (aclnn checks the same rule).
    fn output_shape(&self, x: &[usize], weight: &[usize]) -> Vec<usize> {
        let c_out = if self.transposed {
            weight[1] * self.groups
        } else {
            weight[0]
        };
        let mut shape = vec![x[0], c_out];
        for i in 0..x.len() - 2 {
            let reach = self.dilation[i] * (weight[i + 2] - 1) + 1;
            shape.push(if self.transposed {
                ((x[i + 2] as i64 - 1) * self.stride[i] as i64 - 2 * self.padding[i] as i64
                    + reach as i64
                    + self.output_padding[i] as i64)
                    .max(0) as usize
            } else {
                (x[i + 2] + 2 * self.padding[i]).saturating_sub(reach) / self.stride[i] + 1
            });
        }
        shape
    }

    fn describe(&self, x: &AscendTensor, w: &AscendTensor) -> String {
        format!("{} with weight {} ({:?})", x.describe(), w.describe(), self)
    }
}

/// Largest padding per side aclnnConvolution takes on Atlas A2.
const PAD_LIMIT: usize = 255;

/// `x` with `value` around its spatial dims (all dims after the first two): `pads[i]` is
/// (before, after) for spatial dim `i`.
pub fn pad(x: &AscendTensor, pads: &[(usize, usize)], value: f64) -> AclResult<AscendTensor> {
    let mut shape = x.shape().to_vec();
    for (i, &(before, after)) in pads.iter().enumerate() {
        shape[2 + i] += before + after;
    }
    let out = AscendTensor::empty(x.ctx(), shape, x.dtype)?;
    if out.layout.numel() > 0 {
        let api = x.ctx().bind();
        // aclnn takes (before, after) pairs starting from the last dim, as torch's F.pad.
        let amounts: Vec<i64> = pads
            .iter()
            .rev()
            .flat_map(|&(b, a)| [b as i64, a as i64])
            .collect();
        let pad = IntArrayDesc::new(api, &amounts)?;
        let v = ScalarDesc::new(api, HostScalar::Float(value))?;
        run_op!(
            x.ctx(),
            aclnnConstantPadNd(x.desc()?, &pad, &v, out.desc()?),
            format!("{} by {amounts:?}", x.describe())
        )?;
    }
    Ok(out)
}

/// For a plain convolution whose padding exceeds aclnn's limit: the input padded explicitly
/// and the parameters without padding.
fn explicit_padding(
    x: &AscendTensor,
    params: &ConvParams,
) -> AclResult<Option<(AscendTensor, ConvParams)>> {
    if params.transposed || params.padding.iter().all(|&p| p <= PAD_LIMIT) {
        return Ok(None);
    }
    let pads: Vec<(usize, usize)> = params.padding.iter().map(|&p| (p, p)).collect();
    let mut unpadded = params.clone();
    unpadded.padding.iter_mut().for_each(|p| *p = 0);
    Ok(Some((pad(x, &pads, 0.0)?, unpadded)))
}

/// The dtype the device computes a convolution of `dtype` in.
fn compute_type(dtype: DataType) -> DataType {
    if dtype == DataType::F64 {
        DataType::F32
    } else {
        dtype
    }
}

/// For a transposed convolution whose output padding aclnn refuses (not smaller than the
/// stride or the dilation): the parameters of its full result (no padding, no output padding).
fn wide_output_padding(params: &ConvParams) -> Option<ConvParams> {
    let refused = params.transposed
        && params
            .output_padding
            .iter()
            .zip(params.stride.iter().zip(&params.dilation))
            .any(|(&p, (&s, &d))| p >= s.max(d));
    refused.then(|| {
        let mut full = params.clone();
        full.padding.iter_mut().for_each(|p| *p = 0);
        full.output_padding.iter_mut().for_each(|p| *p = 0);
        full
    })
}

/// Each spatial dim `i` of `t` (sized `from[i]`) taken from `start[i]` for `to[i]` elements:
/// positions past `t` are zeros.
fn crop_or_pad(
    t: &AscendTensor,
    start: &[usize],
    before: &[usize],
    to: &[usize],
) -> AclResult<AscendTensor> {
    let mut layout = t.layout.clone();
    let mut pads = Vec::with_capacity(to.len());
    for i in 0..to.len() {
        let have = t.shape()[2 + i].saturating_sub(start[i]);
        let take = have.min(to[i] - before[i]);
        layout = layout.narrow(2 + i, start[i], start[i] + take, 1);
        pads.push((before[i], to[i] - before[i] - take));
    }
    pad(&t.with_layout(layout), &pads, 0.0)
}

/// A transposed convolution with an output padding aclnn refuses: its full result, cropped
/// by the padding and zero-padded on the far side to the asked size, plus the bias.
fn conv_transpose_wide(
    x: &AscendTensor,
    weight: &AscendTensor,
    bias: Option<&AscendTensor>,
    params: &ConvParams,
    full: &ConvParams,
) -> AclResult<AscendTensor> {
    let whole = conv(x, weight, None, full)?;
    let shape = params.output_shape(x.shape(), weight.shape());
    let spatial = shape.len() - 2;
    let out = crop_or_pad(&whole, &params.padding, &vec![0; spatial], &shape[2..])?;
    match bias {
        None => Ok(out),
        Some(b) => {
            let mut per_channel = vec![1; shape.len()];
            per_channel[1] = shape[1];
            let b = super::copy::reshape(&super::copy::contiguous(b)?, per_channel)?;
            super::arith::binary(super::arith::BinaryOp::Add, &out, &b)
        }
    }
}

/// The output gradient of a wide transposed convolution taken back onto its full result:
/// the positions the padding cropped get zeros, the zero-padded positions drop out.
fn wide_grad(
    grad: &AscendTensor,
    params: &ConvParams,
    full: &ConvParams,
    x_shape: &[usize],
    weight: &[usize],
) -> AclResult<AscendTensor> {
    let full_shape = full.output_shape(x_shape, weight);
    crop_or_pad(
        grad,
        &vec![0; params.padding.len()],
        &params.padding,
        &full_shape[2..],
    )
}

/// The sum of `t [N, C, ...]` over every dim but the channels: `[C]`.
fn channel_sums(t: &AscendTensor) -> AclResult<AscendTensor> {
    use super::reduce::{reduce, Reduce};
    let rank = t.shape().len();
    let mut axes: Vec<usize> = (0..rank).collect();
    axes.swap(0, 1);
    let by_channel = super::copy::contiguous(&t.with_layout(t.layout.permute(&axes)))?;
    let c = t.shape()[1];
    let rows = super::copy::reshape(&by_channel, vec![c, t.layout.numel() / c.max(1)])?;
    super::copy::reshape(&reduce(Reduce::Sum, &rows, Some(1))?, vec![c])
}

/// The input size of a transposed convolution whose output gradient is `grad` (the shape the
/// input gradient takes).
pub fn transposed_input_shape(grad: &[usize], weight: &[usize], params: &ConvParams) -> Vec<usize> {
    let mut shape = vec![grad[0], weight[0]];
    for i in 0..grad.len() - 2 {
        let reach = params.dilation[i] * (weight[i + 2] - 1) + 1;
        let stretched = grad[i + 2] + 2 * params.padding[i];
        shape.push(
            stretched.saturating_sub(reach + params.output_padding[i]) / params.stride[i] + 1,
        );
    }
    shape
}

/// The input gradient of a transposed convolution: the plain convolution of `grad` by `weight`
/// with the same geometry (for a wide output padding, of the gradient taken back onto the full
/// result, without padding).
pub fn transposed_input_grad(
    weight: &AscendTensor,
    grad: &AscendTensor,
    params: &ConvParams,
) -> AclResult<AscendTensor> {
    let (grad, mut plain) = match wide_output_padding(params) {
        Some(full) => {
            let x_shape = transposed_input_shape(grad.shape(), weight.shape(), params);
            (
                wide_grad(grad, params, &full, &x_shape, weight.shape())?,
                full,
            )
        }
        None => (grad.clone(), params.clone()),
    };
    plain.transposed = false;
    plain.output_padding.iter_mut().for_each(|p| *p = 0);
    conv(&grad, weight, None, &plain)
}

/// A convolution (or transposed convolution) of `x` by `weight`, plus `bias`.
pub fn conv(
    x: &AscendTensor,
    weight: &AscendTensor,
    bias: Option<&AscendTensor>,
    params: &ConvParams,
) -> AclResult<AscendTensor> {
    if let Some((padded, unpadded)) = explicit_padding(x, params)? {
        return conv(&padded, weight, bias, &unpadded);
    }
    if let Some(full) = wide_output_padding(params) {
        return conv_transpose_wide(x, weight, bias, params, &full);
    }
    let dtype = compute_type(x.dtype);
    let (xc, wc) = (cast(x, dtype)?, cast(weight, dtype)?);
    let bc = bias.map(|b| cast(b, dtype)).transpose()?;
    let out = AscendTensor::empty(
        x.ctx(),
        params.output_shape(x.shape(), weight.shape()),
        dtype,
    )?;
    if out.layout.numel() > 0 {
        let [stride, padding, dilation, output_padding] = params.arrays(x)?;
        let bias_desc = bc.as_ref().map(AscendTensor::desc).transpose()?;
        run_op!(
            x.ctx(),
            aclnnConvolution(
                xc.desc()?,
                wc.desc()?,
                &bias_desc,
                &stride,
                &padding,
                &dilation,
                params.transposed,
                &output_padding,
                params.groups as i64,
                out.desc()?,
                CUBE_MATH_KEEP_DTYPE
            ),
            params.describe(x, weight)
        )?;
    }
    cast(&out, x.dtype)
}

/// Which gradients [`conv_backward`] computes.
#[derive(Debug, Clone, Copy)]
pub struct ConvGrads {
    /// The gradient with respect to the input.
    pub input: bool,
    /// The gradient with respect to the weight.
    pub weight: bool,
    /// The gradient with respect to the bias.
    pub bias: bool,
}

/// The selected gradients of [`conv`] for the output gradient `grad`: (input, weight, bias).
pub fn conv_backward(
    x: &AscendTensor,
    weight: &AscendTensor,
    grad: &AscendTensor,
    params: &ConvParams,
    want: ConvGrads,
) -> AclResult<[Option<AscendTensor>; 3]> {
    if let Some((padded, unpadded)) = explicit_padding(x, params)? {
        let [gi, gw, gb] = conv_backward(&padded, weight, grad, &unpadded, want)?;
        let crop = |g: AscendTensor| {
            let mut layout = g.layout.clone();
            for (i, &p) in params.padding.iter().enumerate() {
                layout = layout.narrow(2 + i, p, p + x.shape()[2 + i], 1);
            }
            super::copy::contiguous(&g.with_layout(layout))
        };
        return Ok([gi.map(crop).transpose()?, gw, gb]);
    }
    if let Some(full) = wide_output_padding(params) {
        // The bias gradient sums every output position, the zero-padded ones included.
        let [gi, gw, _] = conv_backward(
            x,
            weight,
            &wide_grad(grad, params, &full, x.shape(), weight.shape())?,
            &full,
            ConvGrads {
                bias: false,
                ..want
            },
        )?;
        let gb = want.bias.then(|| channel_sums(grad)).transpose()?;
        return Ok([gi, gw, gb]);
    }
    let dtype = compute_type(x.dtype);
    let (xc, wc, gc) = (cast(x, dtype)?, cast(weight, dtype)?, cast(grad, dtype)?);
    let c_out = grad.shape()[1];
    let fresh = |on: bool, shape: &[usize]| {
        on.then(|| AscendTensor::empty(x.ctx(), shape.to_vec(), dtype))
            .transpose()
    };
    let gi = fresh(want.input, x.shape())?;
    let gw = fresh(want.weight, weight.shape())?;
    let gb = fresh(want.bias, &[c_out])?;
    let nothing = [&gi, &gw, &gb]
        .iter()
        .all(|t| t.as_ref().is_none_or(|t| t.layout.numel() == 0));
    if !nothing && grad.layout.numel() > 0 {
        let api = x.ctx().bind();
        let [stride, padding, dilation, output_padding] = params.arrays(x)?;
        let bias_sizes = IntArrayDesc::new(api, &[c_out as i64])?;
        let mask = BoolArrayDesc::new(api, &[want.input, want.weight, want.bias])?;
        let desc = |t: &Option<AscendTensor>| t.as_ref().map(AscendTensor::desc).transpose();
        let (gid, gwd, gbd) = (desc(&gi)?, desc(&gw)?, desc(&gb)?);
        run_op!(
            x.ctx(),
            aclnnConvolutionBackward(
                gc.desc()?,
                xc.desc()?,
                wc.desc()?,
                &bias_sizes,
                &stride,
                &padding,
                &dilation,
                params.transposed,
                &output_padding,
                params.groups as std::ffi::c_int,
                &mask,
                CUBE_MATH_KEEP_DTYPE,
                &gid,
                &gwd,
                &gbd
            ),
            format!(
                "the gradient {} of {}",
                grad.describe(),
                params.describe(x, weight)
            )
        )?;
    } else {
        // Empty operands: every gradient is zero (aclnn's behaviour on empty inputs is not
        // documented).
        for t in [&gi, &gw, &gb].into_iter().flatten() {
            super::copy::copy_into(t, &super::creation::zeros(x.ctx(), Vec::new(), dtype)?)?;
        }
    }
    let back = |t: Option<AscendTensor>| t.map(|t| cast(&t, x.dtype)).transpose();
    Ok([back(gi)?, back(gw)?, back(gb)?])
}
