//! Scaled dot-product attention, composed: `softmax(mask(softcap(Q K^T * scale)) + bias) V`.
//!
//! The fused aclnnFlashAttentionScore does not fit Burn's contract in general: it has no
//! softcap, it scales the bias together with the scores (`scale * (pse + QK^T)`, Burn adds the
//! bias after scaling), and its output for fully masked rows is undocumented, while Burn
//! requires 0 there. So attention is composed from aclnnMatmul, Muls, Tanh,
//! InplaceMaskedFillScalar, Add, Amax, ClampMin, Sub, Exp, ReduceSum and Div, in Burn's order:
//! softcap before masking (so -inf stays -inf), the causal mask aligned bottom-right
//! (`col > row + Sk - Sq` is masked, a host table from the shapes), the bias after masking,
//! and a softmax whose row maximum is clamped to the dtype's lowest finite value and whose
//! sum is clamped to its smallest positive normal, which turns fully masked rows into 0.

use super::arith::{binary, binary_scalar, BinaryOp};
use super::compare::mask_fill;
use super::constant;
use super::creation::zeros;
use super::math::{clamp, unary, Unary};
use super::matmul::matmul;
use super::reduce::{reduce, Reduce};
use super::tensor::AscendTensor;
use crate::acl::handles::HostScalar;
use crate::acl::{AclResult, DataType};

/// Options of [`attention`].
#[derive(Debug, Clone, Copy, Default)]
pub struct AttentionOptions {
    /// Factor applied to `Q K^T`; `1 / sqrt(head_dim)` if `None`.
    pub scale: Option<f64>,
    /// `softcap * tanh(scores / softcap)` before masking.
    pub softcap: Option<f64>,
    /// Mask keys after each query's position (bottom-right aligned).
    pub is_causal: bool,
}

/// The lowest finite value and the smallest positive normal of a float type.
fn limits(dtype: DataType) -> (f64, f64) {
    match dtype {
        DataType::F64 => (f64::MIN, f64::MIN_POSITIVE),
        DataType::F16 => (half::f16::MIN.to_f64(), half::f16::MIN_POSITIVE.to_f64()),
        DataType::BF16 => (half::bf16::MIN.to_f64(), half::bf16::MIN_POSITIVE.to_f64()),
        _ => (f32::MIN as f64, f32::MIN_POSITIVE as f64),
    }
}

/// Attention over `[B, H, Sq, D]` queries, `[B, H, Sk, D]` keys and `[B, H, Sk, Dv]` values.
/// `mask` (true = masked) and `bias` broadcast to `[B, H, Sq, Sk]`.
pub fn attention(
    q: &AscendTensor,
    k: &AscendTensor,
    v: &AscendTensor,
    mask: Option<&AscendTensor>,
    bias: Option<&AscendTensor>,
    options: AttentionOptions,
) -> AclResult<AscendTensor> {
    let rank = q.shape().len();
    let head_dim = q.shape()[rank - 1];
    // No query row or no key: the reductions below refuse empty tensors, and Burn's output is
    // then empty or 0 (every row is without a key), whatever the softcap or bias.
    let rows = q.shape()[..rank - 1].iter().product::<usize>();
    if rows * k.shape()[rank - 2] == 0 {
        let mut shape = q.shape()[..rank - 1].to_vec();
        shape.push(v.shape()[rank - 1]);
        return zeros(q.ctx(), shape, q.dtype);
    }
    let scale = options
        .scale
        .unwrap_or_else(|| 1.0 / (head_dim as f64).sqrt());
    let k_t = k.with_layout(k.layout.swap_dims(rank - 2, rank - 1));
    let mut scores = binary_scalar(BinaryOp::Mul, &matmul(q, &k_t)?, HostScalar::Float(scale))?;
    if let Some(cap) = options.softcap {
        let squashed = unary(
            Unary::Tanh,
            &binary_scalar(BinaryOp::Div, &scores, HostScalar::Float(cap))?,
        )?;
        scores = binary_scalar(BinaryOp::Mul, &squashed, HostScalar::Float(cap))?;
    }
    let minus_inf = HostScalar::Float(f64::NEG_INFINITY);
    if let Some(m) = mask {
        scores = mask_fill(&scores, m, minus_inf)?;
    }
    if options.is_causal {
        let (sq, sk) = (scores.shape()[rank - 2], scores.shape()[rank - 1]);
        let offset = sk as i64 - sq as i64;
        let table: Vec<bool> = (0..sq as i64)
            .flat_map(|r| (0..sk as i64).map(move |c| c > r + offset))
            .collect();
        let causal = constant::bools(q.ctx(), vec![sq, sk], &table)?;
        let causal = causal.with_layout(
            causal
                .layout
                .expand(scores.shape())
                .expect("a [Sq, Sk] mask expands over batch and heads"),
        );
        scores = mask_fill(&scores, &causal, minus_inf)?;
    }
    if let Some(b) = bias {
        scores = binary(BinaryOp::Add, &scores, b)?;
    }
    let (lowest, tiny) = limits(scores.dtype);
    let last = rank - 1;
    let max = clamp(
        &reduce(Reduce::Max, &scores, Some(last))?,
        Some(HostScalar::Float(lowest)),
        None,
    )?;
    let numerator = unary(Unary::Exp, &binary(BinaryOp::Sub, &scores, &max)?)?;
    let sum = clamp(
        &reduce(Reduce::Sum, &numerator, Some(last))?,
        Some(HostScalar::Float(tiny)),
        None,
    )?;
    matmul(&binary(BinaryOp::Div, &numerator, &sum)?, v)
}
