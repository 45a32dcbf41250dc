//! Burn's attention on CANN's fused `aclnnFlashAttentionScore` (forward) and
//! `aclnnFlashAttentionScoreGrad` (backward), BNSD layout: the `[B, H, Sq, Sk]` score matrix
//! never exists in device memory, only the f32 softmax statistics (`[B, H, Sq, 8]`).
//!
//! The operators fit Burn's contract when there is no softcap (no aclnn attention has one) and
//! no additive bias (the operator adds its pse before scaling, Burn after; dividing the bias by
//! the scale first would not be exact): those calls keep the composed path
//! ([`super::attention`]). The operator takes sequences of 1 to 1M: a call without output
//! elements or without keys is answered without it (zeros, Burn's output for rows without an
//! unmasked key, and zero gradients). Masks map as:
//! - a boolean mask (true = masked, the operator's polarity) is the operator's attenMask with
//!   sparseMode 0, passed as the broadcast view it is where that is one of the documented
//!   shapes (`[Sq,Sk]`, `[1,1,Sq,Sk]`, `[B,1,Sq,Sk]`), else as `[B,H,Sq,Sk]`;
//! - `is_causal` alone is sparseMode 3 (rightDownCausal, Burn's bottom-right alignment) with
//!   the compressed `[2048, 2048]` upper-triangular mask;
//! - both are OR-ed into one attenMask (sparseMode 0).
//!
//! Fully masked rows: Burn gives 0 there, the operator fills masked scores with a very negative
//! finite value (doc implementation notes), so such a row is not 0. The rows are known on the
//! device (from the shapes for causal, by an `All` over the mask otherwise) and are zeroed
//! after the operator; the backward zeroes the same rows of `dy` first, which makes their
//! gradients 0, as Burn's are.
//!
//! Grouped-query attention: keys/values with fewer heads than the queries (a divisor) are
//! passed as they are, the operator's N1/N2 ratio.

use std::ffi::CStr;
use std::sync::Arc;

use super::attention::AttentionOptions;
use super::compare::{logical, mask_fill, Logical};
use super::constant;
use super::creation::zeros;
use super::reduce::{reduce, Reduce};
use super::tensor::AscendTensor;
use crate::acl::aclnn;
use crate::acl::handles::{Absent, HostScalar};
use crate::acl::{AclResult, DataType};
use crate::ops::broadcast::invalid_input;
use crate::runtime::DeviceContext;

/// The compressed mask's side for sparse modes 2 and 3 (operator doc, sparse_mode notes).
const COMPRESSED: usize = 2048;
/// rightDownCausal.
const RIGHT_DOWN_CAUSAL: i64 = 3;
/// The doc's default preTokens / nextTokens: no band.
const NO_BAND: i64 = 2_147_483_647;
/// The dtypes the operator takes on Atlas A2 (doc parameter table).
const FLOATS: &[DataType] = &[DataType::F16, DataType::BF16, DataType::F32];
const MAX_HEAD_DIM: usize = 768;
const MAX_HEADS: usize = 256;
const MAX_SEQ: usize = 1 << 20;

/// What the backward pass needs from the forward.
#[derive(Debug, Clone)]
pub struct FlashSaved {
    /// The operator's own output (before fully masked rows were zeroed): attentionIn.
    pub raw_out: AscendTensor,
    /// `[B, H, Sq, 8]` f32 row maxima.
    pub softmax_max: AscendTensor,
    /// `[B, H, Sq, 8]` f32 row sums.
    pub softmax_sum: AscendTensor,
}

/// The masking a call passes to the operators.
struct Masking {
    atten_mask: Option<AscendTensor>,
    sparse_mode: i64,
    /// `[B|1, H|1, Sq, 1]` true where a row has no unmasked key.
    dead_rows: Option<AscendTensor>,
}

/// Whether a call with these operands can run on the fused operator.
pub fn fits(
    q: &AscendTensor,
    k: &AscendTensor,
    v: &AscendTensor,
    has_bias: bool,
    softcap: Option<f64>,
) -> bool {
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    if has_bias || softcap.is_some() || qs.len() != 4 || ks.len() != 4 || vs.len() != 4 {
        return false;
    }
    let [b, h, sq, d] = [qs[0], qs[1], qs[2], qs[3]];
    let [kb, hk, sk, kd] = [ks[0], ks[1], ks[2], ks[3]];
    let same_type = k.dtype == q.dtype && v.dtype == q.dtype && FLOATS.contains(&q.dtype);
    same_type
        && kb == b
        && vs[..3] == ks[..3]
        && sq <= MAX_SEQ
        && sk <= MAX_SEQ
        && (1..=MAX_HEADS).contains(&h)
        && hk > 0
        && h % hk == 0
        && kd == d
        && (1..=MAX_HEAD_DIM).contains(&d)
        && vs[3] <= d
}

/// A call the operator is not given (it takes sequences of 1 to 1M): no output element, or
/// no key, where every row is without an unmasked key and Burn's output is 0.
fn empty(q: &AscendTensor, k: &AscendTensor, v: &AscendTensor) -> bool {
    q.shape()[0] * q.shape()[2] * k.shape()[2] * v.shape()[3] == 0
}

/// The mask as the operator takes it: a documented broadcast shape when the view is one.
fn mask_operand(mask: &AscendTensor) -> AscendTensor {
    let l = &mask.layout;
    let (b0, h0) = (
        l.strides[0] == 0 || l.shape[0] == 1,
        l.strides[1] == 0 || l.shape[1] == 1,
    );
    let shape = |b: usize, h: usize| vec![b, h, l.shape[2], l.shape[3]];
    let narrowed = match (b0, h0) {
        (true, true) => Some(shape(1, 1)),
        (false, true) => Some(shape(l.shape[0], 1)),
        _ => None,
    };
    match narrowed {
        Some(s) => {
            let mut view = l.clone();
            view.shape = s;
            mask.with_layout(view)
        }
        None => mask.clone(),
    }
}

/// The compressed causal mask of sparse modes 2 and 3 (aclnnFlashAttentionScore and
/// aclnnFusedInferAttentionScoreV3 alike): `[2048, 2048]` bool, true above the diagonal. A
/// device constant: uploaded on the first call, shared by every later one (the operators only
/// read it).
pub fn compressed_causal_mask(ctx: &Arc<DeviceContext>) -> AclResult<AscendTensor> {
    ctx.constant("compressed_causal_mask", || {
        let table: Vec<bool> = (0..COMPRESSED)
            .flat_map(|r| (0..COMPRESSED).map(move |c| c > r))
            .collect();
        constant::bools(ctx, vec![COMPRESSED, COMPRESSED], &table)
    })
}

/// Burn's causal mask (`col > row + Sk - Sq`) as a `[Sq, Sk]` bool tensor.
fn causal_table(ctx: &AscendTensor, sq: usize, sk: usize) -> AclResult<AscendTensor> {
    let offset = sk as i64 - sq as i64;
    let table: Vec<bool> = (0..sq as i64)
        .flat_map(|r| (0..sk as i64).map(move |c| c > r + offset))
        .collect();
    constant::bools(ctx.ctx(), vec![sq, sk], &table)
}

fn masking(
    q: &AscendTensor,
    k: &AscendTensor,
    mask: Option<&AscendTensor>,
    is_causal: bool,
) -> AclResult<Masking> {
    let (sq, sk) = (q.shape()[2], k.shape()[2]);
    let all_masked = |m: &AscendTensor| reduce(Reduce::All, m, Some(3));
    Ok(match (mask, is_causal) {
        (None, false) => Masking {
            atten_mask: None,
            sparse_mode: 0,
            dead_rows: None,
        },
        (None, true) => {
            let compressed = compressed_causal_mask(q.ctx())?;
            // Bottom-right alignment leaves the first Sq - Sk rows without a key.
            let dead = (0..sq).map(|r| r + sk < sq).collect::<Vec<_>>();
            let dead_rows = if sq > sk {
                Some(constant::bools(q.ctx(), vec![1, 1, sq, 1], &dead)?)
            } else {
                None
            };
            Masking {
                atten_mask: Some(compressed),
                sparse_mode: RIGHT_DOWN_CAUSAL,
                dead_rows,
            }
        }
        (Some(m), false) => {
            let m = mask_operand(m);
            Masking {
                dead_rows: Some(all_masked(&m)?),
                atten_mask: Some(m),
                sparse_mode: 0,
            }
        }
        (Some(m), true) => {
            let causal = causal_table(q, sq, sk)?;
            let m = logical(Logical::Or, &mask_operand(m), &causal)?;
            Masking {
                dead_rows: Some(all_masked(&m)?),
                atten_mask: Some(m),
                sparse_mode: 0,
            }
        }
    })
}

/// The layout the operators are called with: `[B, N, S, D]`, as Burn's attention takes them.
const LAYOUT: &CStr = c"BNSD";

/// Zeroes the rows of `t` (`[B, H, Sq, X]`) that `dead` marks.
fn zero_rows(t: AscendTensor, dead: Option<&AscendTensor>) -> AclResult<AscendTensor> {
    match dead {
        None => Ok(t),
        Some(d) => {
            let d = d.with_layout(
                d.layout
                    .expand(t.shape())
                    .expect("a [B|1, H|1, Sq, 1] row mask expands over the rows"),
            );
            mask_fill(&t, &d, HostScalar::Float(0.0))
        }
    }
}

fn scale_of(q: &AscendTensor, scale: Option<f64>) -> f64 {
    scale.unwrap_or_else(|| 1.0 / (q.shape()[3] as f64).sqrt())
}

/// `options.softcap` must be `None`: no aclnn attention has one.
fn check(
    op: &str,
    q: &AscendTensor,
    k: &AscendTensor,
    v: &AscendTensor,
    options: &AttentionOptions,
) -> AclResult<()> {
    if fits(q, k, v, false, options.softcap) {
        return Ok(());
    }
    Err(invalid_input(
        op,
        format!(
            "query {}, key {}, value {} with softcap {:?} do not fit aclnnFlashAttentionScore \
             (BNSD, one float dtype, S <= 1M, heads a multiple of the key heads, \
             qD == kD >= vD, D 1 to 768, no softcap)",
            q.describe(),
            k.describe(),
            v.describe(),
            options.softcap
        ),
    ))
}

/// Attention by aclnnFlashAttentionScore over `[B, H, Sq, D]` queries and `[B, Hk, Sk, D]` keys
/// and `[B, Hk, Sk, Dv]` values (`H` a multiple of `Hk`): the output `[B, H, Sq, Dv]` (0 on
/// rows without an unmasked key) and what [`flash_attention_backward`] needs.
pub fn flash_attention(
    q: &AscendTensor,
    k: &AscendTensor,
    v: &AscendTensor,
    mask: Option<&AscendTensor>,
    options: AttentionOptions,
) -> AclResult<(AscendTensor, FlashSaved)> {
    const OP: &str = "attention";
    check(OP, q, k, v, &options)?;
    let AttentionOptions {
        scale, is_causal, ..
    } = options;
    let ctx = q.ctx();
    let [b, h, sq, _] = [q.shape()[0], q.shape()[1], q.shape()[2], q.shape()[3]];
    let dv = v.shape()[3];
    if empty(q, k, v) {
        let raw_out = zeros(ctx, vec![b, h, sq, dv], q.dtype)?;
        let stat = zeros(ctx, vec![b, h, sq, 8], DataType::F32)?;
        let saved = FlashSaved {
            raw_out: raw_out.clone(),
            softmax_max: stat.clone(),
            softmax_sum: stat,
        };
        return Ok((raw_out, saved));
    }
    let masking = masking(q, k, mask, is_causal)?;
    let raw_out = AscendTensor::empty(ctx, vec![b, h, sq, dv], q.dtype)?;
    let softmax_max = AscendTensor::empty(ctx, vec![b, h, sq, 8], DataType::F32)?;
    let softmax_sum = AscendTensor::empty(ctx, vec![b, h, sq, 8], DataType::F32)?;
    let atten_mask = masking.atten_mask.as_ref().map(|m| m.desc()).transpose()?;
    aclnn!(
        &**ctx,
        aclnnFlashAttentionScore(
            q.desc()?,
            k.desc()?,
            v.desc()?,
            Absent,
            Absent,
            Absent,
            atten_mask,
            Absent,
            scale_of(q, scale),
            1.0,
            NO_BAND,
            NO_BAND,
            h as i64,
            LAYOUT,
            0i64,
            masking.sparse_mode,
            softmax_max.desc()?,
            softmax_sum.desc()?,
            Absent,
            raw_out.desc()?
        )
    )
    .map_err(|e| {
        e.with_context(|| {
            format!(
                "{OP}: aclnnFlashAttentionScore of query {}, key {}, value {}",
                q.describe(),
                k.describe(),
                v.describe()
            )
        })
    })?;
    let out = zero_rows(raw_out.clone(), masking.dead_rows.as_ref())?;
    Ok((
        out,
        FlashSaved {
            raw_out,
            softmax_max,
            softmax_sum,
        },
    ))
}

/// Gradients `(dq, dk, dv)` of [`flash_attention`] by aclnnFlashAttentionScoreGrad, from the
/// forward's saved statistics and output: no score matrix is recomputed whole.
pub fn flash_attention_backward(
    q: &AscendTensor,
    k: &AscendTensor,
    v: &AscendTensor,
    mask: Option<&AscendTensor>,
    options: AttentionOptions,
    saved: &FlashSaved,
    dy: &AscendTensor,
) -> AclResult<(AscendTensor, AscendTensor, AscendTensor)> {
    const OP: &str = "attention_backward";
    check(OP, q, k, v, &options)?;
    let AttentionOptions {
        scale, is_causal, ..
    } = options;
    if dy.shape() != saved.raw_out.shape() || dy.dtype != q.dtype {
        return Err(invalid_input(
            OP,
            format!(
                "dy {} must be the output's shape and dtype {}",
                dy.describe(),
                saved.raw_out.describe()
            ),
        ));
    }
    let ctx = q.ctx();
    let h = q.shape()[1];
    if empty(q, k, v) {
        // No output element depends on any input.
        let zeros_like = |t: &AscendTensor| zeros(ctx, t.shape().to_vec(), t.dtype);
        return Ok((zeros_like(q)?, zeros_like(k)?, zeros_like(v)?));
    }
    let masking = masking(q, k, mask, is_causal)?;
    // Rows Burn zeroed pass no gradient.
    let dy = zero_rows(dy.clone(), masking.dead_rows.as_ref())?;
    let dq = AscendTensor::empty(ctx, q.shape().to_vec(), q.dtype)?;
    let dk = AscendTensor::empty(ctx, k.shape().to_vec(), k.dtype)?;
    let dv = AscendTensor::empty(ctx, v.shape().to_vec(), v.dtype)?;
    let atten_mask = masking.atten_mask.as_ref().map(|m| m.desc()).transpose()?;
    aclnn!(
        &**ctx,
        aclnnFlashAttentionScoreGrad(
            q.desc()?,
            k.desc()?,
            v.desc()?,
            dy.desc()?,
            Absent,
            Absent,
            Absent,
            atten_mask,
            saved.softmax_max.desc()?,
            saved.softmax_sum.desc()?,
            Absent,
            saved.raw_out.desc()?,
            Absent,
            scale_of(q, scale),
            1.0,
            NO_BAND,
            NO_BAND,
            h as i64,
            LAYOUT,
            0i64,
            masking.sparse_mode,
            dq.desc()?,
            dk.desc()?,
            dv.desc()?,
            Absent
        )
    )
    .map_err(|e| {
        e.with_context(|| {
            format!(
                "{OP}: aclnnFlashAttentionScoreGrad of query {}, key {}, value {}",
                q.describe(),
                k.describe(),
                v.describe()
            )
        })
    })?;
    Ok((dq, dk, dv))
}
