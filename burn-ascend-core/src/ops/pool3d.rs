//! 3-D adaptive average pooling and its gradient, separable like the 2-D one
//! ([`super::resample`]): the 2-D pool over each `[H, W]` plane, then the depth axis as one
//! matrix product with the `[Do, D]` window weights. aclnnAdaptiveAvgPool3d exists
//! (aclnn-ops.tsv) but its gradient is non-deterministic by default, and the 2-D operator
//! is the one reported to leave cubeMathType state behind on 910B (burn-to-aclnn.tsv,
//! adaptive_avg_pool2d); the composition is exact and deterministic, and shares the window
//! rule `[floor(o * in / out), ceil((o + 1) * in / out))` with the 2-D pool.

use super::constant;
use super::copy::{cast, reshape};
use super::matmul::matmul;
use super::resample::{compute_type, resample, resample_backward, weights, Resample};
use super::tensor::AscendTensor;
use crate::acl::{AclError, AclResult};

/// The `[N, C, D, H, W]` dims of `x`, or an error naming the op.
fn dims5(op: &str, x: &AscendTensor) -> AclResult<[usize; 5]> {
    <[usize; 5]>::try_from(x.shape()).map_err(|_| {
        AclError::InvalidArgument(format!(
            "{op}: expects a [N, C, D, H, W] tensor, got {}",
            x.describe()
        ))
    })
}

fn check_sizes(op: &str, input: [usize; 3], output: [usize; 3]) -> AclResult<()> {
    if input.contains(&0) || output.contains(&0) {
        return Err(AclError::InvalidArgument(format!(
            "{op}: input {input:?} and output {output:?} sizes must be positive"
        )));
    }
    Ok(())
}

/// `x` `[N, C, D, H, W]` averaged over adaptive windows to `[N, C, Do, Ho, Wo]`.
pub fn adaptive_avg_pool3d(x: &AscendTensor, output: [usize; 3]) -> AclResult<AscendTensor> {
    let op = "adaptive_avg_pool3d";
    let [n, c, d, h, w] = dims5(op, x)?;
    check_sizes(op, [d, h, w], output)?;
    let [od, oh, ow] = output;
    let dtype = compute_type(x.dtype());
    let planes = reshape(&cast(x, dtype)?, vec![n, c * d, h, w])?;
    let pooled = resample(&planes, [oh, ow], Resample::AdaptiveAverage, false)?;
    let pooled = reshape(&pooled, vec![n * c, d, oh * ow])?;
    let wd = weights(Resample::AdaptiveAverage, d, od, false);
    let wd = constant::floats(x.ctx(), vec![od, d], &wd, dtype)?;
    let out = reshape(&matmul(&wd, &pooled)?, vec![n, c, od, oh, ow])?;
    cast(&out, x.dtype())
}

/// The gradient of [`adaptive_avg_pool3d`] with respect to its input (of spatial sizes
/// `input`) for `grad` `[N, C, Do, Ho, Wo]`.
pub fn adaptive_avg_pool3d_backward(
    grad: &AscendTensor,
    input: [usize; 3],
) -> AclResult<AscendTensor> {
    let op = "adaptive_avg_pool3d_backward";
    let [n, c, od, oh, ow] = dims5(op, grad)?;
    check_sizes(op, input, [od, oh, ow])?;
    let [d, h, w] = input;
    let dtype = compute_type(grad.dtype());
    let g = reshape(&cast(grad, dtype)?, vec![n * c, od, oh * ow])?;
    let wd = weights(Resample::AdaptiveAverage, d, od, false);
    let wd = constant::floats(grad.ctx(), vec![od, d], &wd, dtype)?;
    let wd_t = wd.with_layout(wd.layout().swap_dims(0, 1));
    let depth = reshape(&matmul(&wd_t, &g)?, vec![n, c * d, oh, ow])?;
    let planes = resample_backward(&depth, [h, w], Resample::AdaptiveAverage, false)?;
    cast(&reshape(&planes, vec![n, c, d, h, w])?, grad.dtype())
}
