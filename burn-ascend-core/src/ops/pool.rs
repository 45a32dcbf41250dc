//! 2-D average and max pooling with Burn's output-size rule, and their gradients.
//!
//! Burn sizes a ceil-mode output as `ceil((in + 2p - reach) / s) + 1`, without torch's rule
//! that drops a last window starting inside the right padding, so aclnn's pooling operators
//! (which follow torch) can disagree on the size. aclnnAvgPool2d is also reported to fail on
//! 910B, and on Atlas A2 the max-pool operators give a bit-mask (WithMask) or need
//! dilation 1 and inputs without -inf (WithIndices) instead of Burn's flat indices. So both
//! pools are composed from operators whose semantics are settled:
//! - average: aclnnConstantPadNd (zeros, plus the ceil-mode overhang on the right), a window
//!   sum as a single-channel convolution with a ones kernel, then a division by the window
//!   sizes (a host table from the shapes: all positions inside `[-p, in + p)` with
//!   `count_include_pad`, else the positions inside the input). The gradient is the
//!   convolution's input gradient of `grad / counts`, cropped back.
//! - max: aclnnConstantPadNd with -inf, the overlapping window view copied dense, then
//!   aclnnAmax (values) or aclnnArgMax + aclnnGather (values and the tap) and a gather of the
//!   flat input index `ih * W + iw` from a host table of each tap. The gradient scatters
//!   `grad` back onto those indices with aclnnScatterAdd (exact for overlapping windows).
//!
//! As in Burn, a window lying wholly in the padding gives -inf and index -1. (A window whose
//! input values are all -inf may report a padding tap's index -1 where Burn reports the
//! first input position.)

use super::arith::{binary, BinaryOp};
use super::compare::{compare_scalar, select, Compare};
use super::constant;
use super::conv::{conv, conv_backward, pad, ConvGrads, ConvParams};
use super::copy::{contiguous, reshape};
use super::creation::{ones, zeros};
use super::index::{gather, scatter, ScatterReduce};
use super::layout::Layout;
use super::math::clamp;
use super::reduce::{arg, reduce, Reduce};
use super::tensor::AscendTensor;
use crate::acl::handles::HostScalar;
use crate::acl::{AclResult, DataType};

/// The window geometry of a 2-D pool.
#[derive(Debug, Clone, Copy)]
pub struct Pool2d {
    /// Window size.
    pub kernel: [usize; 2],
    /// Step between windows.
    pub stride: [usize; 2],
    /// Padding on both sides.
    pub padding: [usize; 2],
    /// Spacing between window taps (max pooling only).
    pub dilation: [usize; 2],
    /// Burn's ceil-mode output size.
    pub ceil_mode: bool,
}

impl Pool2d {
    fn reach(&self, d: usize) -> usize {
        self.dilation[d] * (self.kernel[d] - 1) + 1
    }

    /// Burn's output size along spatial dim `d` for an input of `size`.
    fn out_size(&self, d: usize, size: usize) -> usize {
        let (padded, reach, s) = (size + 2 * self.padding[d], self.reach(d), self.stride[d]);
        if padded < reach {
            return usize::from(self.ceil_mode);
        }
        if self.ceil_mode {
            (padded - reach).div_ceil(s) + 1
        } else {
            (padded - reach) / s + 1
        }
    }

    /// Output sizes and the `(before, after)` padding that makes exactly those windows fit.
    fn plan(&self, x: &AscendTensor) -> ([usize; 2], [(usize, usize); 2]) {
        let mut out = [0; 2];
        let mut pads = [(0, 0); 2];
        for d in 0..2 {
            let size = x.shape()[2 + d];
            out[d] = self.out_size(d, size);
            let need = out[d].saturating_sub(1) * self.stride[d] + self.reach(d);
            let p = self.padding[d];
            pads[d] = (p, p + need.saturating_sub(size + 2 * p));
        }
        (out, pads)
    }
}

/// Window sizes `[Ho, Wo]` of an average pool, as Burn divides by them.
fn window_counts(
    p: &Pool2d,
    input: [usize; 2],
    out: [usize; 2],
    count_include_pad: bool,
) -> Vec<f64> {
    let per_dim = |d: usize| -> Vec<usize> {
        let (size, pad) = (input[d] as i64, p.padding[d] as i64);
        let (lo, hi) = if count_include_pad {
            (-pad, size + pad)
        } else {
            (0, size)
        };
        (0..out[d])
            .map(|o| {
                (0..p.kernel[d])
                    .filter(|&k| {
                        let at = (o * p.stride[d] + k) as i64 - pad;
                        at >= lo && at < hi
                    })
                    .count()
            })
            .collect()
    };
    let (h, w) = (per_dim(0), per_dim(1));
    h.iter()
        .flat_map(|&a| w.iter().map(move |&b| (a * b).max(1) as f64))
        .collect()
}

fn sum_params(p: &Pool2d) -> ConvParams {
    ConvParams {
        stride: p.stride.to_vec(),
        padding: vec![0, 0],
        dilation: vec![1, 1],
        output_padding: vec![0, 0],
        groups: 1,
        transposed: false,
    }
}

/// The padded input seen as `[N * C, 1, Hp, Wp]` planes, and the ones kernel summing a window.
fn sum_operands(
    x: &AscendTensor,
    p: &Pool2d,
    pads: [(usize, usize); 2],
) -> AclResult<(AscendTensor, AscendTensor)> {
    let padded = pad(x, &pads, 0.0)?;
    let s = padded.shape().to_vec();
    let planes = reshape(&padded, vec![s[0] * s[1], 1, s[2], s[3]])?;
    let kernel = ones(x.ctx(), vec![1, 1, p.kernel[0], p.kernel[1]], x.dtype)?;
    Ok((planes, kernel))
}

/// Average pooling of `[N, C, H, W]`.
pub fn avg_pool2d(
    x: &AscendTensor,
    p: &Pool2d,
    count_include_pad: bool,
) -> AclResult<AscendTensor> {
    let (out, pads) = p.plan(x);
    let (n, c) = (x.shape()[0], x.shape()[1]);
    if out.contains(&0) || x.layout.numel() == 0 {
        return zeros(x.ctx(), vec![n, c, out[0], out[1]], x.dtype);
    }
    let (planes, kernel) = sum_operands(x, p, pads)?;
    let sums = conv(&planes, &kernel, None, &sum_params(p))?;
    let counts = window_counts(p, [x.shape()[2], x.shape()[3]], out, count_include_pad);
    let counts = constant::floats(x.ctx(), out.to_vec(), &counts, x.dtype)?;
    binary(
        BinaryOp::Div,
        &reshape(&sums, vec![n, c, out[0], out[1]])?,
        &counts,
    )
}

/// The gradient of [`avg_pool2d`] with respect to `x`.
pub fn avg_pool2d_backward(
    x: &AscendTensor,
    grad: &AscendTensor,
    p: &Pool2d,
    count_include_pad: bool,
) -> AclResult<AscendTensor> {
    let (out, pads) = p.plan(x);
    let [n, c, h, w] = [x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]];
    if out.contains(&0) || x.layout.numel() == 0 {
        return zeros(x.ctx(), x.shape().to_vec(), x.dtype);
    }
    let counts = window_counts(p, [h, w], out, count_include_pad);
    let counts = constant::floats(x.ctx(), out.to_vec(), &counts, x.dtype)?;
    let scaled = binary(BinaryOp::Div, grad, &counts)?;
    let scaled = reshape(&scaled, vec![n * c, 1, out[0], out[1]])?;
    let (planes, kernel) = sum_operands(x, p, pads)?;
    let want = ConvGrads {
        input: true,
        weight: false,
        bias: false,
    };
    let [gi, _, _] = conv_backward(&planes, &kernel, &scaled, &sum_params(p), want)?;
    let gi = gi.expect("the input gradient was requested");
    let (top, left) = (pads[0].0, pads[1].0);
    let cropped = gi.with_layout(
        gi.layout
            .narrow(2, top, top + h, 1)
            .narrow(3, left, left + w, 1),
    );
    reshape(&contiguous(&cropped)?, vec![n, c, h, w])
}

/// The windows of a max pool, dense: `[N, C, Ho, Wo, kh * kw]` (padding holds -inf).
fn windows(x: &AscendTensor, p: &Pool2d) -> AclResult<(AscendTensor, [usize; 2])> {
    let (out, pads) = p.plan(x);
    let padded = pad(x, &pads, f64::NEG_INFINITY)?;
    let s = padded.shape().to_vec();
    let (plane, row) = (s[2] * s[3], s[3]);
    let view = Layout {
        shape: vec![s[0], s[1], out[0], out[1], p.kernel[0], p.kernel[1]],
        strides: vec![
            s[1] * plane,
            plane,
            p.stride[0] * row,
            p.stride[1],
            p.dilation[0] * row,
            p.dilation[1],
        ],
        offset: padded.layout.offset,
    };
    let dense = contiguous(&padded.with_layout(view))?;
    let k = p.kernel[0] * p.kernel[1];
    Ok((reshape(&dense, vec![s[0], s[1], out[0], out[1], k])?, out))
}

/// Max pooling of `[N, C, H, W]`.
pub fn max_pool2d(x: &AscendTensor, p: &Pool2d) -> AclResult<AscendTensor> {
    let (n, c) = (x.shape()[0], x.shape()[1]);
    let (win, out) = windows(x, p)?;
    if win.layout.numel() == 0 {
        return zeros(x.ctx(), vec![n, c, out[0], out[1]], x.dtype);
    }
    reshape(
        &reduce(Reduce::Max, &win, Some(4))?,
        vec![n, c, out[0], out[1]],
    )
}

/// Max pooling of `[N, C, H, W]` with the flat index `ih * W + iw` of each maximum (I64).
pub fn max_pool2d_with_indices(
    x: &AscendTensor,
    p: &Pool2d,
) -> AclResult<(AscendTensor, AscendTensor)> {
    let [n, c, h, w] = [x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]];
    let (win, out) = windows(x, p)?;
    let shape = vec![n, c, out[0], out[1]];
    if win.layout.numel() == 0 {
        return Ok((
            zeros(x.ctx(), shape.clone(), x.dtype)?,
            zeros(x.ctx(), shape, DataType::I64)?,
        ));
    }
    let tap = arg(&win, 4, true, DataType::I64)?;
    let values = gather(4, &win, &tap)?;
    // Flat input index of every tap of every window, from the shapes alone.
    let k = p.kernel[0] * p.kernel[1];
    let mut table = Vec::with_capacity(out[0] * out[1] * k);
    let source = |d: usize, o: usize, t: usize, size: usize| {
        let at = (o * p.stride[d] + t * p.dilation[d]) as i64 - p.padding[d] as i64;
        (0..size as i64).contains(&at).then_some(at)
    };
    for oh in 0..out[0] {
        for ow in 0..out[1] {
            for th in 0..p.kernel[0] {
                for tw in 0..p.kernel[1] {
                    table.push(match (source(0, oh, th, h), source(1, ow, tw, w)) {
                        (Some(ih), Some(iw)) => ih * w as i64 + iw,
                        _ => -1,
                    });
                }
            }
        }
    }
    let table = constant::ints(x.ctx(), vec![out[0], out[1], k], &table)?;
    let table = table.with_layout(
        table
            .layout
            .expand(&[n, c, out[0], out[1], k])
            .expect("a [Ho, Wo, K] table expands over batch and channels"),
    );
    let indices = gather(4, &table, &tap)?;
    Ok((reshape(&values, shape.clone())?, reshape(&indices, shape)?))
}

/// The gradient of max pooling: `grad` added onto the input positions in `indices`.
pub fn max_pool2d_backward(
    x: &AscendTensor,
    grad: &AscendTensor,
    indices: &AscendTensor,
) -> AclResult<AscendTensor> {
    let [n, c, h, w] = [x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]];
    let positions = grad.shape()[2] * grad.shape()[3];
    let base = zeros(x.ctx(), vec![n, c, h * w], grad.dtype)?;
    if positions == 0 || base.layout.numel() == 0 {
        return reshape(&base, x.shape().to_vec());
    }
    // Windows lying wholly in the padding report index -1 and receive no gradient.
    let indices = reshape(indices, vec![n, c, positions])?;
    let outside = compare_scalar(Compare::Lt, &indices, HostScalar::Int(0))?;
    let grad = select(
        &outside,
        &zeros(x.ctx(), Vec::new(), grad.dtype)?,
        &reshape(grad, vec![n, c, positions])?,
    )?;
    let indices = clamp(&indices, Some(HostScalar::Int(0)), None)?;
    let summed = scatter(2, &base, &indices, &grad, ScatterReduce::Add)?;
    reshape(&summed, x.shape().to_vec())
}
