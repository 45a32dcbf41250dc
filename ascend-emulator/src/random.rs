//! Emulated random operators. Like the device's Philox generator, each element's value is a
//! pure function of (seed, offset + element index), so the caller owns reproducibility by
//! passing the same seed and advancing the offset.
#![allow(missing_docs, non_snake_case, clippy::missing_safety_doc)]

use super::meta::Kernel;
use super::meta::{scalar_arg, tensor_arg, TensorDesc};
use super::ops::{check_dtype, invalid, phase1, phase2_entry_points, Ex, Ws};
use super::view::{map, Walk};
use ascend_acl::dtype::DataType::{self, *};
use ascend_acl::types::*;
use std::sync::Arc;

const UNIFORM: &[DataType] = &[F32, I32, I64, BF16, F16, I16, I8, U8, F64];
const NORMAL: &[DataType] = &[F32, F16, BF16, F64];
const BERNOULLI: &[DataType] = &[F16, F32, F64, U8, I8, I16, I32, I64, Bool, BF16];

/// A 64-bit mix of (seed, counter) (SplitMix64 finaliser).
fn mix(seed: u64, counter: u64) -> u64 {
    let mut z = seed ^ counter.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform sample in [0, 1) for element `i`.
fn unit(seed: u64, offset: u64, i: u64, stream: u64) -> f64 {
    (mix(
        seed,
        offset.wrapping_add(i).wrapping_mul(2).wrapping_add(stream),
    ) >> 11) as f64
        / (1u64 << 53) as f64
}

fn fill(
    op: &'static str,
    dst: TensorDesc,
    f: impl Fn(u64) -> f64 + Send + Sync + 'static,
) -> Kernel {
    Arc::new(move || {
        let m = map(op, "selfRef", &dst)?;
        // Draws are made in f64 and rounded once to the dtype (integer dtypes take the floor).
        let (float, set) = (dst.dtype.is_float(), m.setter::<f64>());
        for (i, o) in Walk::of(&dst).enumerate() {
            let v = f(i as u64);
            set(o, if float { v } else { v.floor() });
        }
        Ok(())
    })
}

pub unsafe extern "C" fn aclnnInplaceUniformGetWorkspaceSize(
    self_ref: *const aclTensor,
    from: f64,
    to: f64,
    seed: u64,
    offset: u64,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnInplaceUniform";
    phase1(OP, ws, ex, || {
        let dst = tensor_arg(OP, "selfRef", self_ref)?;
        check_dtype(OP, "selfRef", &dst, UNIFORM)?;
        if from.is_nan() || to.is_nan() || from > to {
            return Err(invalid(OP, format!("from {from} must not exceed to {to}")));
        }
        Ok((
            0,
            fill(OP, dst, move |i| {
                from + (to - from) * unit(seed, offset, i, 0)
            }),
        ))
    })
}

pub unsafe extern "C" fn aclnnInplaceNormalGetWorkspaceSize(
    self_ref: *const aclTensor,
    mean: f32,
    std: f32,
    seed: i64,
    offset: i64,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnInplaceNormal";
    phase1(OP, ws, ex, || {
        let dst = tensor_arg(OP, "selfRef", self_ref)?;
        check_dtype(OP, "selfRef", &dst, NORMAL)?;
        if std < 0.0 {
            return Err(invalid(OP, format!("std {std} is negative")));
        }
        let (seed, offset) = (seed as u64, offset as u64);
        Ok((
            0,
            fill(OP, dst, move |i| {
                // Box-Muller on two independent uniforms.
                let u1 = 1.0 - unit(seed, offset, i, 0);
                let u2 = unit(seed, offset, i, 1);
                mean as f64
                    + std as f64 * (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
            }),
        ))
    })
}

pub unsafe extern "C" fn aclnnInplaceBernoulliGetWorkspaceSize(
    self_ref: *const aclTensor,
    prob: *const aclScalar,
    seed: i64,
    offset: i64,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnInplaceBernoulli";
    phase1(OP, ws, ex, || {
        let dst = tensor_arg(OP, "selfRef", self_ref)?;
        check_dtype(OP, "selfRef", &dst, BERNOULLI)?;
        let p = scalar_arg(OP, "prob", prob)?.as_f64();
        if !(0.0..=1.0).contains(&p) {
            return Err(invalid(OP, format!("prob {p} is outside [0, 1]")));
        }
        if offset % 4 != 0 {
            return Err(invalid(
                OP,
                format!("offset {offset} must be a multiple of 4"),
            ));
        }
        let (seed, offset) = (seed as u64, offset as u64);
        Ok((
            0,
            fill(OP, dst, move |i| {
                (unit(seed, offset, i, 0) < p) as u8 as f64
            }),
        ))
    })
}

phase2_entry_points!(
    aclnnInplaceUniform,
    aclnnInplaceNormal,
    aclnnInplaceBernoulli
);
