//! Symmetric quantization to 8-bit (or narrower) integers, per tensor or per block, and back.
//!
//! A quantized tensor is its I8 values plus F32 scales on the device: one scale per tensor, or
//! one per block of `block` consecutive elements of the row-major flattened tensor (Burn's
//! layout). Burn quantizes as `clamp(round(x * (1 / s)), a, b)` in f32 with rounding half away
//! from zero, after replacing scales that are zero, subnormal or not finite by the smallest
//! positive normal f32. aclnnAscendQuant rounds half to even and aclnnQuantize divides by the
//! scale, so neither matches bit for bit; the composition below does: Reciprocal, Mul, then
//! Round (half to even) corrected on exact ties with Trunc + Sign, Clamp, and a Cast to I8.
//! Dequantization is Cast to F32, Mul by the scales, Cast to the float type.

use super::arith::{binary, binary_scalar, BinaryOp};
use super::compare::{compare_scalar, logical, select, Compare, Logical};
use super::copy::{cast, reshape};
use super::creation::full;
use super::math::{clamp, unary, Unary};
use super::reduce::{reduce, Reduce};
use super::tensor::AscendTensor;
use crate::acl::handles::HostScalar;
use crate::acl::{AclResult, DataType};

/// How scales are shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granularity {
    /// One scale for the whole tensor.
    Tensor,
    /// One scale per block of this many consecutive (row-major) elements.
    Block(usize),
}

/// `t` flattened to `[blocks, block]` (or `[numel]` per tensor), and the scales shaped to
/// broadcast over it.
fn blocked(
    t: &AscendTensor,
    scales: &AscendTensor,
    g: Granularity,
) -> AclResult<(AscendTensor, AscendTensor)> {
    let numel = t.layout.numel();
    match g {
        Granularity::Tensor => Ok((reshape(t, vec![numel])?, reshape(scales, vec![1])?)),
        Granularity::Block(size) => {
            let blocks = numel / size.max(1);
            Ok((
                reshape(t, vec![blocks, size])?,
                reshape(scales, vec![blocks, 1])?,
            ))
        }
    }
}

/// The scales Burn actually uses: `s` where it is a finite normal number, else the smallest
/// positive normal f32.
pub fn validated_scales(scales: &AscendTensor) -> AclResult<AscendTensor> {
    let s = cast(scales, DataType::F32)?;
    let magnitude = unary(Unary::Abs, &s)?;
    let normal = logical(
        Logical::And,
        &compare_scalar(
            Compare::Ge,
            &magnitude,
            HostScalar::Float(f32::MIN_POSITIVE as f64),
        )?,
        &compare_scalar(Compare::Lt, &magnitude, HostScalar::Float(f64::INFINITY))?,
    )?;
    let fallback = full(
        s.ctx(),
        Vec::new(),
        DataType::F32,
        HostScalar::Float(f32::MIN_POSITIVE as f64),
    )?;
    select(&normal, &s, &fallback)
}

/// The scales of dynamic quantization: `2 * max|x| / (hi - lo)` over the whole tensor or over
/// each block of consecutive elements, validated.
pub fn dynamic_scales(
    x: &AscendTensor,
    g: Granularity,
    (lo, hi): (f64, f64),
) -> AclResult<AscendTensor> {
    let numel = x.layout.numel();
    let rows = match g {
        Granularity::Tensor => vec![1, numel],
        Granularity::Block(size) => vec![numel / size.max(1), size],
    };
    let magnitude = unary(Unary::Abs, &reshape(&cast(x, DataType::F32)?, rows)?)?;
    let alpha = reduce(Reduce::Max, &magnitude, Some(1))?;
    let doubled = binary_scalar(BinaryOp::Mul, &alpha, HostScalar::Float(2.0))?;
    let scales = binary_scalar(BinaryOp::Div, &doubled, HostScalar::Float(hi - lo))?;
    let count = scales.layout.numel();
    validated_scales(&reshape(&scales, vec![count])?)
}

/// Rounds to the nearest integer, ties away from zero (f32::round).
fn round_half_away(y: &AscendTensor) -> AclResult<AscendTensor> {
    let whole = unary(Unary::Trunc, y)?;
    let frac = unary(Unary::Abs, &binary(BinaryOp::Sub, y, &whole)?)?;
    let tie = compare_scalar(Compare::Eq, &frac, HostScalar::Float(0.5))?;
    let away = binary(BinaryOp::Add, &whole, &unary(Unary::Sign, y)?)?;
    select(&tie, &away, &unary(Unary::Round, y)?)
}

/// `x` quantized with `scales` (already validated) to integers in `[lo, hi]`, as I8 of `x`'s
/// shape.
pub fn quantize(
    x: &AscendTensor,
    scales: &AscendTensor,
    g: Granularity,
    (lo, hi): (f64, f64),
) -> AclResult<AscendTensor> {
    let (flat, s) = blocked(&cast(x, DataType::F32)?, scales, g)?;
    let scaled = binary(BinaryOp::Mul, &flat, &unary(Unary::Recip, &s)?)?;
    let rounded = round_half_away(&scaled)?;
    let limited = clamp(
        &rounded,
        Some(HostScalar::Float(lo)),
        Some(HostScalar::Float(hi)),
    )?;
    reshape(&cast(&limited, DataType::I8)?, x.shape().to_vec())
}

/// The float values `q * scale` of I8 values `q`, as `dtype`.
pub fn dequantize(
    values: &AscendTensor,
    scales: &AscendTensor,
    g: Granularity,
    dtype: DataType,
) -> AclResult<AscendTensor> {
    let (flat, s) = blocked(&cast(values, DataType::F32)?, scales, g)?;
    let out = binary(BinaryOp::Mul, &flat, &s)?;
    cast(&reshape(&out, values.shape().to_vec())?, dtype)
}
