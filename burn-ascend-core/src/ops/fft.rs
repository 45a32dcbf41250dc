//! Real FFT and its inverse along one dim, as DFTs by matrix product with cos/sin bases built
//! on the host from the sizes.
//!
//! aclRfft1D takes F32 only and certain sizes, and CANN has no inverse real FFT, so both
//! directions are aclnnMatmul (cubeMathType 0) against `[len, bins]` bases; F16 and BF16 run
//! in F32 and are cast back (as Burn's reference does), F64 uses the exact composed matmul.
//! Sizes follow Burn: the transform size is `n` (or the signal length) rounded up to a power
//! of two; the signal is truncated or zero-padded to it (padding contributes nothing, so the
//! basis simply has fewer rows); rfft returns `size / 2 + 1` bins without normalisation; irfft
//! uses the first `size / 2 + 1` bins (missing bins count as 0, the imaginary parts of the DC
//! and Nyquist bins are ignored) and scales by `1 / size`.

use std::f64::consts::PI;

use super::arith::{binary, BinaryOp};
use super::constant;
use super::copy::{cast, contiguous, reshape};
use super::matmul::matmul;
use super::tensor::AscendTensor;
use crate::acl::{AclResult, DataType};

fn compute_type(dtype: DataType) -> DataType {
    match dtype {
        DataType::F16 | DataType::BF16 => DataType::F32,
        d => d,
    }
}

/// `x` with `dim` moved last and at least two dims, ready for a matmul on the right.
fn to_rows(x: &AscendTensor, dim: usize) -> AclResult<AscendTensor> {
    let rank = x.shape().len();
    let moved = x.with_layout(x.layout.swap_dims(dim, rank - 1));
    if rank == 1 {
        reshape(&moved, vec![1, x.shape()[0]])
    } else {
        Ok(moved)
    }
}

/// Undoes [`to_rows`] on a result whose last dim is the transformed one.
fn from_rows(y: &AscendTensor, dim: usize, rank: usize) -> AclResult<AscendTensor> {
    if rank == 1 {
        return reshape(y, vec![y.shape()[1]]);
    }
    contiguous(&y.with_layout(y.layout.swap_dims(dim, rank - 1)))
}

/// The first `len` elements of `x` along `dim`.
fn prefix(x: &AscendTensor, dim: usize, len: usize) -> AscendTensor {
    x.with_layout(x.layout.narrow(dim, 0, len, 1))
}

/// The real FFT of `x` along `dim`: `(re, im)` with `size / 2 + 1` bins.
pub fn rfft(
    x: &AscendTensor,
    dim: usize,
    n: Option<usize>,
) -> AclResult<(AscendTensor, AscendTensor)> {
    let rank = x.shape().len();
    let requested = n.unwrap_or(x.shape()[dim]);
    let size = requested.next_power_of_two();
    let len = x.shape()[dim].min(requested);
    let bins = size / 2 + 1;
    let dtype = compute_type(x.dtype);
    let mut cos = Vec::with_capacity(len * bins);
    let mut sin = Vec::with_capacity(len * bins);
    for t in 0..len {
        for k in 0..bins {
            let angle = 2.0 * PI * ((k * t) % size) as f64 / size as f64;
            cos.push(angle.cos());
            sin.push(-angle.sin());
        }
    }
    let cos = constant::floats(x.ctx(), vec![len, bins], &cos, dtype)?;
    let sin = constant::floats(x.ctx(), vec![len, bins], &sin, dtype)?;
    let rows = to_rows(&cast(&prefix(x, dim, len), dtype)?, dim)?;
    let re = from_rows(&matmul(&rows, &cos)?, dim, rank)?;
    let im = from_rows(&matmul(&rows, &sin)?, dim, rank)?;
    Ok((cast(&re, x.dtype)?, cast(&im, x.dtype)?))
}

/// The inverse real FFT of the spectrum `(re, im)` along `dim`.
pub fn irfft(
    re: &AscendTensor,
    im: &AscendTensor,
    dim: usize,
    n: Option<usize>,
) -> AclResult<AscendTensor> {
    let rank = re.shape().len();
    let bins_in = re.shape()[dim];
    let size = n
        .unwrap_or_else(|| 2 * bins_in.saturating_sub(1))
        .next_power_of_two();
    if size <= 1 {
        return contiguous(&prefix(re, dim, 1));
    }
    let half = size / 2;
    let used = bins_in.min(half + 1);
    let dtype = compute_type(re.dtype);
    let mut cos = Vec::with_capacity(used * size);
    let mut sin = Vec::with_capacity(used * size);
    for k in 0..used {
        let weight = if k == 0 || k == half { 1.0 } else { 2.0 } / size as f64;
        for t in 0..size {
            let angle = 2.0 * PI * ((k * t) % size) as f64 / size as f64;
            cos.push(weight * angle.cos());
            sin.push(-weight * angle.sin());
        }
    }
    let cos = constant::floats(re.ctx(), vec![used, size], &cos, dtype)?;
    let sin = constant::floats(re.ctx(), vec![used, size], &sin, dtype)?;
    let re_rows = to_rows(&cast(&prefix(re, dim, used), dtype)?, dim)?;
    let im_rows = to_rows(&cast(&prefix(im, dim, used), dtype)?, dim)?;
    let signal = binary(
        BinaryOp::Add,
        &matmul(&re_rows, &cos)?,
        &matmul(&im_rows, &sin)?,
    )?;
    cast(&from_rows(&signal, dim, rank)?, re.dtype)
}
