//! Deformable 2-D convolution (v1 and v2 with a mask) and its gradients, composed on the
//! device.
//!
//! aclnnDeformableConv2d accepts only `modulated = true` and expects the offsets in planar
//! blocks whose order is not documented (Burn uses torchvision's interleaved `(dy, dx)` pairs
//! per tap), and its backward needs the forward's intermediate output. So the bilinear
//! sampling is composed instead: sample positions are `base + offset` (the base grid of each
//! tap is a host table from the shapes), the four corners are read with aclnnGather from the
//! input seen as `[N, offset groups, channels, H * W]`, weighted (corners outside the input
//! count 0, and samples at or beyond one pixel outside read nothing, as in torchvision),
//! multiplied by the mask, and the resulting columns
//! `[N, groups, C / groups * kh * kw, Ho * Wo]` are multiplied by the weight with aclnnMatmul.
//! The gradients reverse each step: the weight gradient is `grad @ columns^T`, the input
//! gradient scatters `weight^T @ grad` (times mask and corner weight) onto the corners with
//! aclnnScatterAdd, the offset gradient weighs the corner values by the derivatives of the
//! bilinear weights, and the mask gradient is the column gradient times the unmasked samples.
//! F16 and BF16 run in F32 and are cast back.

use super::arith::{binary, binary_scalar, BinaryOp};
use super::compare::{compare_scalar, logical, select, Compare, Logical};
use super::constant;
use super::copy::{cast, cat, contiguous, reshape};
use super::creation::zeros;
use super::index::{gather, scatter, ScatterReduce};
use super::math::{clamp, unary, Unary};
use super::matmul::matmul;
use super::reduce::{reduce, Reduce};
use super::tensor::AscendTensor;
use crate::acl::handles::HostScalar;
use crate::acl::{AclResult, DataType};

/// The geometry of a deformable convolution.
#[derive(Debug, Clone, Copy)]
pub struct DeformGeometry {
    /// Step between output positions.
    pub stride: [usize; 2],
    /// Zero padding on both sides.
    pub padding: [usize; 2],
    /// Spacing between kernel taps.
    pub dilation: [usize; 2],
    /// Channel groups of the weight.
    pub weight_groups: usize,
    /// Channel groups sharing one set of offsets.
    pub offset_groups: usize,
}

/// The gradients of [`deform_conv2d`].
#[derive(Debug)]
pub struct DeformGrads {
    /// With respect to the input.
    pub x: AscendTensor,
    /// With respect to the offsets.
    pub offset: AscendTensor,
    /// With respect to the weight.
    pub weight: AscendTensor,
    /// With respect to the mask, if there was one.
    pub mask: Option<AscendTensor>,
    /// With respect to the bias, if there was one.
    pub bias: Option<AscendTensor>,
}

/// Sizes shared by the forward and backward passes.
#[derive(Debug, Clone, Copy)]
struct Dims {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    c_out: usize,
    kh: usize,
    kw: usize,
    ho: usize,
    wo: usize,
    og: usize,
    wg: usize,
}

impl Dims {
    fn taps(&self) -> usize {
        self.kh * self.kw
    }
    /// Kernel taps times output positions.
    fn kp(&self) -> usize {
        self.taps() * self.ho * self.wo
    }
}

/// One bilinear corner of every sample: where it reads, with which weight, and the weight's
/// derivatives along y and x (all zero where the corner lies outside the input).
struct Corner {
    index: AscendTensor,
    weight: AscendTensor,
    d_y: AscendTensor,
    d_x: AscendTensor,
    value: AscendTensor,
}

/// The bilinear samples of `x` at every tap and output position.
struct Sampling {
    corners: Vec<Corner>,
    /// `[N, og, C / og, K * P]`, before the mask.
    sampled: AscendTensor,
}

fn float(v: f64) -> HostScalar {
    HostScalar::Float(v)
}

fn sample(
    x: &AscendTensor,
    offset: &AscendTensor,
    g: &DeformGeometry,
    d: &Dims,
) -> AclResult<Sampling> {
    let ctx = x.ctx();
    let dtype = x.dtype;
    let (taps, positions) = (d.taps(), d.ho * d.wo);
    // Base sample position of every (tap, output position), from the shapes.
    let mut base_y = Vec::with_capacity(taps * positions);
    let mut base_x = Vec::with_capacity(taps * positions);
    for i in 0..d.kh {
        for j in 0..d.kw {
            for oh in 0..d.ho {
                for ow in 0..d.wo {
                    base_y
                        .push((oh * g.stride[0] + i * g.dilation[0]) as f64 - g.padding[0] as f64);
                    base_x
                        .push((ow * g.stride[1] + j * g.dilation[1]) as f64 - g.padding[1] as f64);
                }
            }
        }
    }
    let base_y = constant::floats(ctx, vec![taps, positions], &base_y, dtype)?;
    let base_x = constant::floats(ctx, vec![taps, positions], &base_x, dtype)?;
    // Offsets [N, og * K * 2, Ho, Wo] hold (dy, dx) pairs per tap.
    let pairs = reshape(offset, vec![d.n, d.og, taps, 2, positions])?;
    let component = |k: usize| {
        let part = pairs.with_layout(pairs.layout.narrow(3, k, k + 1, 1));
        reshape(&part, vec![d.n, d.og, taps, positions])
    };
    let y = binary(BinaryOp::Add, &component(0)?, &base_y)?;
    let xs = binary(BinaryOp::Add, &component(1)?, &base_x)?;
    let (y0, x0) = (unary(Unary::Floor, &y)?, unary(Unary::Floor, &xs)?);
    let ly = binary(BinaryOp::Sub, &y, &y0)?;
    let lx = binary(BinaryOp::Sub, &xs, &x0)?;
    let one_minus = |t: &AscendTensor| {
        binary_scalar(
            BinaryOp::Add,
            &binary_scalar(BinaryOp::Mul, t, float(-1.0))?,
            float(1.0),
        )
    };
    let (hy, hx) = (one_minus(&ly)?, one_minus(&lx)?);
    // Samples at or beyond one pixel outside the input read nothing and pass no gradient
    // (torchvision's rule, which Burn follows), even where one corner would be inside.
    let open_range = |t: &AscendTensor, size: usize| -> AclResult<AscendTensor> {
        logical(
            Logical::And,
            &compare_scalar(Compare::Gt, t, float(-1.0))?,
            &compare_scalar(Compare::Lt, t, float(size as f64))?,
        )
    };
    let near = logical(Logical::And, &open_range(&y, d.h)?, &open_range(&xs, d.w)?)?;
    let zero = zeros(ctx, Vec::new(), dtype)?;
    let planes = reshape(x, vec![d.n, d.og, d.c / d.og, d.h * d.w])?;
    let expanded = [d.n, d.og, d.c / d.og, d.kp()];
    let mut corners = Vec::with_capacity(4);
    let mut sampled: Option<AscendTensor> = None;
    for (dy, dx) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        let yc = binary_scalar(BinaryOp::Add, &y0, float(dy as f64))?;
        let xc = binary_scalar(BinaryOp::Add, &x0, float(dx as f64))?;
        let inside = |t: &AscendTensor, size: usize| -> AclResult<AscendTensor> {
            logical(
                Logical::And,
                &compare_scalar(Compare::Ge, t, float(0.0))?,
                &compare_scalar(Compare::Le, t, float(size as f64 - 1.0))?,
            )
        };
        let valid = logical(
            Logical::And,
            &near,
            &logical(Logical::And, &inside(&yc, d.h)?, &inside(&xc, d.w)?)?,
        )?;
        let row = clamp(&yc, Some(float(0.0)), Some(float(d.h as f64 - 1.0)))?;
        let col = clamp(&xc, Some(float(0.0)), Some(float(d.w as f64 - 1.0)))?;
        let flat = binary(
            BinaryOp::Add,
            &binary_scalar(BinaryOp::Mul, &row, float(d.w as f64))?,
            &col,
        )?;
        let index = reshape(&cast(&flat, DataType::I64)?, vec![d.n, d.og, 1, d.kp()])?;
        let index = index.with_layout(index.layout.expand(&expanded).expect("broadcasts"));
        let (wy, wx) = (
            if dy == 1 { &ly } else { &hy },
            if dx == 1 { &lx } else { &hx },
        );
        let masked = |t: AscendTensor| -> AclResult<AscendTensor> {
            reshape(&select(&valid, &t, &zero)?, vec![d.n, d.og, 1, d.kp()])
        };
        let sign = |up: bool, t: &AscendTensor| {
            binary_scalar(BinaryOp::Mul, t, float(if up { 1.0 } else { -1.0 }))
        };
        let weight = masked(binary(BinaryOp::Mul, wy, wx)?)?;
        let d_y = masked(sign(dy == 1, wx)?)?;
        let d_x = masked(sign(dx == 1, wy)?)?;
        let value = gather(3, &planes, &index)?;
        let term = binary(BinaryOp::Mul, &value, &weight)?;
        sampled = Some(match sampled {
            Some(s) => binary(BinaryOp::Add, &s, &term)?,
            None => term,
        });
        corners.push(Corner {
            index,
            weight,
            d_y,
            d_x,
            value,
        });
    }
    Ok(Sampling {
        corners,
        sampled: sampled.expect("four corners"),
    })
}

fn dims(
    x: &AscendTensor,
    offset: &AscendTensor,
    weight: &AscendTensor,
    g: &DeformGeometry,
) -> Dims {
    let (xs, os, ws) = (x.shape(), offset.shape(), weight.shape());
    Dims {
        n: xs[0],
        c: xs[1],
        h: xs[2],
        w: xs[3],
        c_out: ws[0],
        kh: ws[2],
        kw: ws[3],
        ho: os[2],
        wo: os[3],
        og: g.offset_groups,
        wg: g.weight_groups,
    }
}

fn compute_type(dtype: DataType) -> DataType {
    match dtype {
        DataType::F16 | DataType::BF16 => DataType::F32,
        d => d,
    }
}

/// The mask as `[N, og, 1, K * P]`.
fn mask_rows(mask: &AscendTensor, d: &Dims, dtype: DataType) -> AclResult<AscendTensor> {
    reshape(&cast(mask, dtype)?, vec![d.n, d.og, 1, d.kp()])
}

/// The weight as `[wg, C_out / wg, C / wg * K]`.
fn weight_rows(weight: &AscendTensor, d: &Dims, dtype: DataType) -> AclResult<AscendTensor> {
    reshape(
        &cast(weight, dtype)?,
        vec![d.wg, d.c_out / d.wg, d.c / d.wg * d.taps()],
    )
}

/// Columns `[N, wg, C / wg * K, P]` from samples `[N, og, C / og, K * P]`.
fn columns(samples: &AscendTensor, d: &Dims) -> AclResult<AscendTensor> {
    reshape(samples, vec![d.n, d.wg, d.c / d.wg * d.taps(), d.ho * d.wo])
}

/// Deformable convolution of `x` `[N, C, H, W]` with `offset` `[N, og * kh * kw * 2, Ho, Wo]`,
/// `weight` `[C_out, C / wg, kh, kw]` and optional `mask` `[N, og * kh * kw, Ho, Wo]`.
pub fn deform_conv2d(
    x: &AscendTensor,
    offset: &AscendTensor,
    weight: &AscendTensor,
    mask: Option<&AscendTensor>,
    bias: Option<&AscendTensor>,
    g: &DeformGeometry,
) -> AclResult<AscendTensor> {
    let d = dims(x, offset, weight, g);
    let dtype = compute_type(x.dtype);
    let (xc, oc) = (cast(x, dtype)?, cast(offset, dtype)?);
    let s = sample(&xc, &oc, g, &d)?;
    let samples = match mask {
        Some(m) => binary(BinaryOp::Mul, &s.sampled, &mask_rows(m, &d, dtype)?)?,
        None => s.sampled,
    };
    let out = matmul(&weight_rows(weight, &d, dtype)?, &columns(&samples, &d)?)?;
    let mut out = reshape(&out, vec![d.n, d.c_out, d.ho, d.wo])?;
    if let Some(b) = bias {
        out = binary(
            BinaryOp::Add,
            &out,
            &reshape(&cast(b, dtype)?, vec![d.c_out, 1, 1])?,
        )?;
    }
    cast(&out, x.dtype)
}

/// The gradients of [`deform_conv2d`] for the output gradient `grad` `[N, C_out, Ho, Wo]`.
pub fn deform_conv2d_backward(
    x: &AscendTensor,
    offset: &AscendTensor,
    weight: &AscendTensor,
    mask: Option<&AscendTensor>,
    has_bias: bool,
    grad: &AscendTensor,
    g: &DeformGeometry,
) -> AclResult<DeformGrads> {
    let d = dims(x, offset, weight, g);
    let dtype = compute_type(x.dtype);
    let (xc, oc, gc) = (cast(x, dtype)?, cast(offset, dtype)?, cast(grad, dtype)?);
    let s = sample(&xc, &oc, g, &d)?;
    let mask_r = mask.map(|m| mask_rows(m, &d, dtype)).transpose()?;
    let samples = match &mask_r {
        Some(m) => binary(BinaryOp::Mul, &s.sampled, m)?,
        None => s.sampled.clone(),
    };
    let go = reshape(&gc, vec![d.n, d.wg, d.c_out / d.wg, d.ho * d.wo])?;
    // Weight: sum over the batch of grad @ columns^T.
    let cols = columns(&samples, &d)?;
    let cols_t = cols.with_layout(cols.layout.swap_dims(2, 3));
    let weight_grad = reduce(Reduce::Sum, &matmul(&go, &cols_t)?, Some(0))?;
    let weight_grad = reshape(&weight_grad, weight.shape().to_vec())?;
    let bias_grad = if has_bias {
        let per_channel = reduce(
            Reduce::Sum,
            &reshape(&gc, vec![d.n, d.c_out, d.ho * d.wo])?,
            Some(2),
        )?;
        Some(reshape(
            &reduce(Reduce::Sum, &per_channel, Some(0))?,
            vec![d.c_out],
        )?)
    } else {
        None
    };
    // Columns: weight^T @ grad, back to the samples' layout.
    let w = weight_rows(weight, &d, dtype)?;
    let w_t = w.with_layout(w.layout.swap_dims(1, 2));
    let col_grad = reshape(&matmul(&w_t, &go)?, vec![d.n, d.og, d.c / d.og, d.kp()])?;
    let mask_grad = match mask {
        Some(m) => {
            let per_tap = reduce(
                Reduce::Sum,
                &binary(BinaryOp::Mul, &col_grad, &s.sampled)?,
                Some(2),
            )?;
            Some(cast(&reshape(&per_tap, m.shape().to_vec())?, x.dtype)?)
        }
        None => None,
    };
    let sample_grad = match &mask_r {
        Some(m) => binary(BinaryOp::Mul, &col_grad, m)?,
        None => col_grad,
    };
    let mut x_grad = zeros(x.ctx(), vec![d.n, d.og, d.c / d.og, d.h * d.w], dtype)?;
    let mut grad_y: Option<AscendTensor> = None;
    let mut grad_x: Option<AscendTensor> = None;
    let accumulate = |acc: Option<AscendTensor>, t: AscendTensor| match acc {
        Some(a) => binary(BinaryOp::Add, &a, &t),
        None => Ok(t),
    };
    for corner in &s.corners {
        let spread = binary(BinaryOp::Mul, &sample_grad, &corner.weight)?;
        x_grad = scatter(
            3,
            &x_grad,
            &contiguous(&corner.index)?,
            &spread,
            ScatterReduce::Add,
        )?;
        let along = reduce(
            Reduce::Sum,
            &binary(BinaryOp::Mul, &sample_grad, &corner.value)?,
            Some(2),
        )?;
        grad_y = Some(accumulate(
            grad_y,
            binary(BinaryOp::Mul, &along, &corner.d_y)?,
        )?);
        grad_x = Some(accumulate(
            grad_x,
            binary(BinaryOp::Mul, &along, &corner.d_x)?,
        )?);
    }
    let pair_shape = vec![d.n, d.og, d.taps(), 1, d.ho * d.wo];
    let offset_grad = cat(
        &[
            reshape(&grad_y.expect("four corners"), pair_shape.clone())?,
            reshape(&grad_x.expect("four corners"), pair_shape)?,
        ],
        3,
    )?;
    Ok(DeformGrads {
        x: cast(&reshape(&x_grad, x.shape().to_vec())?, x.dtype)?,
        offset: cast(&reshape(&offset_grad, offset.shape().to_vec())?, x.dtype)?,
        weight: cast(&weight_grad, x.dtype)?,
        mask: mask_grad,
        bias: bias_grad.map(|b| cast(&b, x.dtype)).transpose()?,
    })
}
