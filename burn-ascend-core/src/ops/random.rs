//! Random tensors on the device. The device generator is counter-based (Philox on CANN): the
//! context keeps a seed and an offset that advances past every draw, so a seeded program is
//! reproducible and successive draws differ.
//!
//! Bridged gaps: aclnnInplaceNormal is float-only; integer uniform draws are made in F64 and
//! floored (aclnn has no integer uniform with Burn's `[low, high)` contract).

use std::sync::Arc;

use super::copy::cast;
use super::math::{unary, Unary};
use super::tensor::AscendTensor;
use crate::acl::handles::{HostScalar, ScalarDesc};
use crate::acl::{AclResult, DataType};
use crate::runtime::DeviceContext;

/// A distribution to draw from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Draw {
    /// Uniform in `[low, high)`.
    Uniform(f64, f64),
    /// Normal with mean and standard deviation.
    Normal(f64, f64),
    /// 1 with probability `p`, else 0.
    Bernoulli(f64),
}

/// A tensor of `shape` and `dtype` drawn from `draw`.
pub fn random(
    ctx: &Arc<DeviceContext>,
    shape: Vec<usize>,
    dtype: DataType,
    draw: Draw,
) -> AclResult<AscendTensor> {
    if !dtype.is_float() && !matches!(draw, Draw::Bernoulli(_)) {
        let drawn = random(ctx, shape, DataType::F64, draw)?;
        return cast(&unary(Unary::Floor, &drawn)?, dtype);
    }
    let out = AscendTensor::empty(ctx, shape, dtype)?;
    let n = out.layout.numel();
    if n == 0 {
        return Ok(out);
    }
    // Bernoulli needs offsets that are multiples of 4.
    let (seed, offset) = ctx.next_random(n as u64);
    let what = out.describe();
    let od = out.desc()?;
    match draw {
        Draw::Uniform(lo, hi) => run_op!(ctx, aclnnInplaceUniform(&od, lo, hi, seed, offset), what),
        // aclnnInplaceNormal takes mean and std as C floats.
        Draw::Normal(mean, std) => run_op!(
            ctx,
            aclnnInplaceNormal(&od, mean as f32, std as f32, seed as i64, offset as i64),
            what
        ),
        Draw::Bernoulli(p) => {
            let p = ScalarDesc::new(ctx.bind(), HostScalar::Float(p))?;
            run_op!(
                ctx,
                aclnnInplaceBernoulli(&od, &p, seed as i64, offset as i64),
                what
            )
        }
    }?;
    Ok(out)
}
