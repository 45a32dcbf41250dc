//! Separable 2-D resampling: interpolation (nearest, bilinear, bicubic, Lanczos3) and adaptive
//! average pooling, as `out = Wh @ X @ Ww^T` with weight matrices built on the host from the
//! sizes alone, and gradients `Wh^T @ G @ Ww`.
//!
//! Every mode Burn defines is separable, so this is exact, and it sidesteps the aclnn gaps:
//! there is no Lanczos operator, aclnnUpsampleBilinear2dBackward has no BF16 on Atlas A2, the
//! upsample operators' `scales` handling is undocumented, and aclnnAdaptiveAvgPool2d is
//! reported to leave cubeMathType state behind on 910B. The matrices follow Burn's reference
//! coordinate rules: nearest takes `floor(o * in / out)` (align_corners is ignored);
//! bilinear, bicubic (Keys, A = -0.75, edge-clamped taps) and Lanczos3 (six taps, taps
//! outside the input dropped and the rest renormalised) map `o` to `o * (in - 1) / (out - 1)`
//! with align_corners, else `(o + 0.5) * in / out - 0.5` (bilinear clamps it at 0); adaptive
//! pooling averages `[floor(o * in / out), ceil((o + 1) * in / out))`.
//! F16 and BF16 run in F32 and are cast back, as Burn's reference does.

use super::constant;
use super::copy::cast;
use super::matmul::matmul;
use super::tensor::AscendTensor;
use crate::acl::{AclResult, DataType};

/// How output samples are made from input samples along one axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resample {
    /// Nearest neighbour (`floor(o * in / out)`).
    Nearest,
    /// Linear interpolation.
    Bilinear,
    /// Keys cubic interpolation with A = -0.75.
    Bicubic,
    /// Lanczos with three lobes.
    Lanczos3,
    /// Adaptive average pooling windows.
    AdaptiveAverage,
}

fn source_coord(o: usize, input: usize, output: usize, align_corners: bool) -> f64 {
    if align_corners {
        o as f64 * (input as f64 - 1.0) / (output.max(1) - 1).max(1) as f64
    } else {
        (o as f64 + 0.5) * input as f64 / output as f64 - 0.5
    }
}

fn cubic(t: f64) -> f64 {
    const A: f64 = -0.75;
    let t = t.abs();
    if t < 1.0 {
        ((A + 2.0) * t - (A + 3.0)) * t * t + 1.0
    } else if t < 2.0 {
        ((A * t - 5.0 * A) * t + 8.0 * A) * t - 4.0 * A
    } else {
        0.0
    }
}

fn lanczos3(x: f64) -> f64 {
    if x == 0.0 {
        return 1.0;
    }
    if x.abs() >= 3.0 {
        return 0.0;
    }
    let px = std::f64::consts::PI * x;
    (px.sin() * (px / 3.0).sin()) / (px * px / 3.0)
}

/// The `[output, input]` weights of `mode` along one axis.
pub fn weights(mode: Resample, input: usize, output: usize, align_corners: bool) -> Vec<f64> {
    let mut m = vec![0.0; output * input];
    let last = input as i64 - 1;
    for o in 0..output {
        let row = &mut m[o * input..(o + 1) * input];
        match mode {
            Resample::Nearest => {
                let src = (o as f64 * input as f64 / output as f64).floor() as usize;
                row[src.min(input - 1)] = 1.0;
            }
            Resample::Bilinear => {
                let x = source_coord(o, input, output, align_corners);
                let low = x.max(0.0).floor() as usize;
                let high = (low + 1).min(input - 1);
                let frac = (x - low as f64).max(0.0);
                row[low] += 1.0 - frac;
                row[high] += frac;
            }
            Resample::Bicubic => {
                let x = source_coord(o, input, output, align_corners);
                let x0 = x.floor();
                for d in -1..=2i64 {
                    let at = (x0 as i64 + d).clamp(0, last) as usize;
                    row[at] += cubic(x - x0 - d as f64);
                }
            }
            Resample::Lanczos3 => {
                let x = source_coord(o, input, output, align_corners);
                let x0 = x.floor();
                for d in -2..=3i64 {
                    let at = x0 as i64 + d;
                    if (0..=last).contains(&at) {
                        row[at as usize] += lanczos3(x - (x0 + d as f64));
                    }
                }
                let total: f64 = row.iter().sum();
                if total != 0.0 {
                    row.iter_mut().for_each(|v| *v /= total);
                }
            }
            Resample::AdaptiveAverage => {
                let start = o * input / output;
                let end = ((o + 1) * input).div_ceil(output);
                let share = 1.0 / (end - start) as f64;
                row[start..end].iter_mut().for_each(|v| *v = share);
            }
        }
    }
    m
}

/// The two axis matrices on the device: `Wh` `[Ho, H]` and `Ww^T` `[W, Wo]`.
fn matrices(
    x: &AscendTensor,
    dtype: DataType,
    mode: Resample,
    input: [usize; 2],
    output: [usize; 2],
    align_corners: bool,
) -> AclResult<(AscendTensor, AscendTensor)> {
    let wh = weights(mode, input[0], output[0], align_corners);
    let ww = weights(mode, input[1], output[1], align_corners);
    let mut ww_t = vec![0.0; ww.len()];
    for o in 0..output[1] {
        for i in 0..input[1] {
            ww_t[i * output[1] + o] = ww[o * input[1] + i];
        }
    }
    Ok((
        constant::floats(x.ctx(), vec![output[0], input[0]], &wh, dtype)?,
        constant::floats(x.ctx(), vec![input[1], output[1]], &ww_t, dtype)?,
    ))
}

pub(super) fn compute_type(dtype: DataType) -> DataType {
    match dtype {
        DataType::F16 | DataType::BF16 => DataType::F32,
        d => d,
    }
}

/// `x` `[N, C, H, W]` resampled to `[N, C, Ho, Wo]`.
pub fn resample(
    x: &AscendTensor,
    output: [usize; 2],
    mode: Resample,
    align_corners: bool,
) -> AclResult<AscendTensor> {
    let dtype = compute_type(x.dtype);
    let input = [x.shape()[2], x.shape()[3]];
    let (wh, ww_t) = matrices(x, dtype, mode, input, output, align_corners)?;
    let xc = cast(x, dtype)?;
    let out = matmul(&wh, &matmul(&xc, &ww_t)?)?;
    cast(&out, x.dtype)
}

/// The gradient of [`resample`] with respect to `x` (of shape `input`) for `grad`
/// `[N, C, Ho, Wo]`.
pub fn resample_backward(
    grad: &AscendTensor,
    input: [usize; 2],
    mode: Resample,
    align_corners: bool,
) -> AclResult<AscendTensor> {
    let dtype = compute_type(grad.dtype);
    let output = [grad.shape()[2], grad.shape()[3]];
    let (wh, ww_t) = matrices(grad, dtype, mode, input, output, align_corners)?;
    let wh_t = wh.with_layout(wh.layout.swap_dims(0, 1));
    let ww = ww_t.with_layout(ww_t.layout.swap_dims(0, 1));
    let g = cast(grad, dtype)?;
    let out = matmul(&wh_t, &matmul(&g, &ww)?)?;
    cast(&out, grad.dtype)
}
