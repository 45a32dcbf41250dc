//! Convolutions (1-D to 3-D, plain and transposed, with groups and dilation) onto
//! aclnnConvolution, and their input/weight/bias gradients onto aclnnConvolutionBackward.
//!
//! Both run with cubeMathType 0 (KEEP_DTYPE): any other mode lets Atlas A2 compute F32 in
//! HF32 (about 1e-3 relative error). aclnn convolutions take F32, F16 and BF16 only, so F64
//! runs in F32 on the device and is cast back. The tensor formats (NCL, NCHW, NCDHW) follow
//! the rank, which the descriptors already do. Atlas A2 takes at most 255 of padding per
//! side: a plain convolution with more is padded explicitly with aclnnConstantPadNd first
//! (and its input gradient cropped back); transposed convolutions keep aclnn's limit.

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
