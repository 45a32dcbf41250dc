//! Emulated rotary position embedding operators of a decode step (CANN 8.1.RC1, Atlas A2;
//! `shared/ascend/aclnn-fused-decode-ops.md` §2):
//!
//! - `aclnnApplyRotaryPosEmb` (§2.1, V1): q and k rotated in place in one launch, "rotate-half"
//!   (GPT-NeoX): `q = q*cos + cat(-q2, q1)*sin`. Only what V1 takes: layout 1 (BSND), 4-D
//!   q `(B,S,Nq,D)`, k `(B,S,Nk,D)`, cos/sin `(B,S,1,D)`, D = 128, all four of one dtype
//!   (F16, BF16, F32), any strides, no empty tensor, q and k heads within the unified buffer
//!   (the op doc's `ub_required` formula). Interleaved mode does not exist in V1.
//! - `aclnnRopeWithSinCosCache` (§2.2, declared under `aclnnop/level2/` only): cos and sin
//!   gathered by position from one cache, `cos, sin = cosSinCache[positions].chunk(2)`, q and k
//!   rotated out of place over the first `rotaryDim` columns of each head (the rest copied),
//!   NeoX (`isNeoxStyle`) or interleaved (GPT-J). The shape rules are UNCERTAIN in the fact
//!   sheet; the emulation takes those of ops-transformer's `aclnnRopeWithSinCosCache.md` (the
//!   stricter reading): q `(T, Nq*headSize)`, k `(T, Nk*headSize)`, cache
//!   `(maxSeqLen, rotaryDim)`, positions INT64 `(T)`; headSize and rotaryDim multiples of 32
//!   (F16/BF16) or 16 (F32), rotaryDim <= headSize; outputs dense. M-RoPE (`mropeSection`) is
//!   refused as not emulated. A position outside the cache is an AI Core error naming it.
//!
//! Numerics. ApplyRotaryPosEmb: the op doc's UB formula casts BF16 to f32 only (`cast = 1`,
//! `castSize = 4`) and keeps F16 and F32 in their own type (`castSize = DtypeSize`), so F32
//! and F16 are computed step by step in their dtype (`q*cos`, `rot*sin`, their sum, each
//! rounded) and BF16 in f32 with one rounding at the end. RopeWithSinCosCache: in f32, one
//! rounding per output (its precision is not documented: UNCERTAIN).
#![allow(
    missing_docs,
    non_snake_case,
    clippy::missing_safety_doc,
    clippy::too_many_arguments
)]

use std::sync::Arc;

use super::fault::{fault, Fault};
use super::meta::{tensor_arg, Kernel, TensorDesc};
use super::numerics::round_to;
use super::ops::{check_dtype_of, invalid, phase1, phase2_entry_points, Ex, Ws, SCRATCH_WORKSPACE};
use super::routing::{dense, tiling};
use super::view::map;
use ascend_acl::dtype::DataType::{self, *};
use ascend_acl::types::status::*;
use ascend_acl::types::*;

const ROPE: &[DataType] = &[F16, BF16, F32];
/// The only layout V1 takes: BSND (§2.1; 2 = SBND, 3 = BNSD, 4 = TND appear in later docs only).
const LAYOUT_BSND: i64 = 1;
/// The only head dim V1 takes (§2.1, op doc 约束说明).
const ROPE_HEAD_DIM: usize = 128;
/// Unified buffer of an Atlas A2 vector core (`hardware-atlas-a2.md`, `ub_size=196608`).
pub(crate) const UB_BYTES: usize = 196608;

phase2_entry_points!(aclnnApplyRotaryPosEmb, aclnnRopeWithSinCosCache);

/// The unified buffer ApplyRotaryPosEmb needs for `heads` q and k heads of 128 (the op doc's
/// `ub_required`): BF16 computes through f32 (`cast` 1, `castSize` 4), F16 and F32 in place.
fn apply_rope_ub_bytes(dtype: DataType, heads: usize) -> usize {
    let size = dtype.size();
    let (cast, cast_size) = if dtype == BF16 { (1, 4) } else { (0, size) };
    let d = ROPE_HEAD_DIM;
    heads * d * cast_size * 2
        + d * size * 4
        + heads * d * cast_size
        + heads * d * cast_size * 2
        + cast * (d * 4 * 2)
}

pub unsafe extern "C" fn aclnnApplyRotaryPosEmbGetWorkspaceSize(
    query_ref: *mut aclTensor,
    key_ref: *mut aclTensor,
    cos: *const aclTensor,
    sin: *const aclTensor,
    layout: i64,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnApplyRotaryPosEmb";
    phase1(OP, ws, ex, || {
        let (q, k, cos, sin) = (
            tensor_arg(OP, "queryRef", query_ref)?,
            tensor_arg(OP, "keyRef", key_ref)?,
            tensor_arg(OP, "cos", cos)?,
            tensor_arg(OP, "sin", sin)?,
        );
        let all = [
            ("queryRef", &q),
            ("keyRef", &k),
            ("cos", &cos),
            ("sin", &sin),
        ];
        for (name, t) in all {
            check_dtype_of(OP, name, t, ROPE)?;
        }
        if all.iter().any(|(_, t)| t.dtype != q.dtype) {
            return Err(invalid(
                OP,
                format!(
                    "queryRef {}, keyRef {}, cos {} and sin {} must share one dtype",
                    q.describe(),
                    k.describe(),
                    cos.describe(),
                    sin.describe()
                ),
            ));
        }
        if layout != LAYOUT_BSND {
            return Err(invalid(
                OP,
                format!(
                    "layout {layout} is not supported: only 1 (BSND) (queryRef {}, keyRef {})",
                    q.describe(),
                    k.describe()
                ),
            ));
        }
        let shapes = || {
            format!(
                "queryRef {}, keyRef {}, cos {}, sin {}",
                q.describe(),
                k.describe(),
                cos.describe(),
                sin.describe()
            )
        };
        if all.iter().any(|(_, t)| t.shape.len() != 4) {
            return Err(invalid(OP, format!("{}: all must be 4-D (BSND)", shapes())));
        }
        if all.iter().any(|(_, t)| t.numel() == 0) {
            return Err(invalid(
                OP,
                format!("{}: empty tensors are not supported", shapes()),
            ));
        }
        let (b, s, d) = (q.shape[0], q.shape[1], q.shape[3]);
        let same_bsd = all
            .iter()
            .all(|(_, t)| t.shape[0] == b && t.shape[1] == s && t.shape[3] == d);
        if !same_bsd || cos.shape[2] != 1 || sin.shape[2] != 1 {
            return Err(invalid(
                OP,
                format!(
                    "{}: q (B,S,Nq,D), k (B,S,Nk,D), cos and sin (B,S,1,D) must agree in B, S and D",
                    shapes()
                ),
            ));
        }
        if d != ROPE_HEAD_DIM {
            return Err(invalid(
                OP,
                format!("{}: the head dim must be {ROPE_HEAD_DIM}", shapes()),
            ));
        }
        let heads = q.shape[2] + k.shape[2];
        let need = apply_rope_ub_bytes(q.dtype, heads);
        if need > UB_BYTES {
            // The doc says only that the op is then "not supported"; the status is UNCERTAIN
            // (the tiling's, 561002, here).
            return Err(tiling(
                OP,
                format!(
                    "{}: {heads} q and k heads need {need} bytes of unified buffer, more than {UB_BYTES}",
                    shapes()
                ),
            ));
        }
        Ok((
            SCRATCH_WORKSPACE,
            Arc::new(move || {
                apply_rope(OP, "queryRef", &q, &cos, &sin)?;
                apply_rope(OP, "keyRef", &k, &cos, &sin)
            }) as Kernel,
        ))
    })
}

/// Rotates every `(b, s, n)` row of the BSND `x` in place with the row `(b, s)` of cos/sin.
fn apply_rope(
    op: &str,
    name: &str,
    x: &TensorDesc,
    cos: &TensorDesc,
    sin: &TensorDesc,
) -> Result<(), Fault> {
    let mx = map(op, name, x)?;
    let mut mc = map(op, "cos", cos)?;
    let mut ms = map(op, "sin", sin)?;
    mc.detach_from(&mx, false);
    ms.detach_from(&mx, false);
    let (get, set) = (mx.getter::<f64>(), mx.setter::<f64>());
    let (gc, gs) = (mc.getter::<f64>(), ms.getter::<f64>());
    let dtype = x.dtype;
    let [b, s, n, d] = [x.shape[0], x.shape[1], x.shape[2], x.shape[3]];
    let half = d / 2;
    // One rounding step of the compute type: F16 and F32 round every operation to their own
    // type, BF16 computes in f32 and rounds once when stored.
    let step = |v: f64| match dtype {
        F16 => round_to(F16, v),
        _ => v as f32 as f64,
    };
    let (xs, cs, ss) = (&x.strides, &cos.strides, &sin.strides);
    let mut row = vec![0f64; d];
    for bi in 0..b {
        for si in 0..s {
            let c0 = cos.offset + bi * cs[0] + si * cs[1];
            let s0 = sin.offset + bi * ss[0] + si * ss[1];
            for ni in 0..n {
                let x0 = x.offset + bi * xs[0] + si * xs[1] + ni * xs[2];
                for (j, v) in row.iter_mut().enumerate() {
                    *v = get(x0 + j * xs[3]);
                }
                for (j, &v) in row.iter().enumerate() {
                    let rotated = if j < half {
                        -row[j + half]
                    } else {
                        row[j - half]
                    };
                    let a = step(v * gc(c0 + j * cs[3]));
                    let r = step(rotated * gs(s0 + j * ss[3]));
                    set(x0 + j * xs[3], step(a + r));
                }
            }
        }
    }
    Ok(())
}

pub unsafe extern "C" fn aclnnRopeWithSinCosCacheGetWorkspaceSize(
    positions: *const aclTensor,
    query_in: *const aclTensor,
    key_in: *const aclTensor,
    cos_sin_cache: *const aclTensor,
    mrope_section: *const aclIntArray,
    head_size: i64,
    is_neox_style: bool,
    query_out: *mut aclTensor,
    key_out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnRopeWithSinCosCache";
    phase1(OP, ws, ex, || {
        let (pos, q, k, cache) = (
            tensor_arg(OP, "positions", positions)?,
            tensor_arg(OP, "queryIn", query_in)?,
            tensor_arg(OP, "keyIn", key_in)?,
            tensor_arg(OP, "cosSinCache", cos_sin_cache)?,
        );
        let (qo, ko) = (
            tensor_arg(OP, "queryOut", query_out)?,
            tensor_arg(OP, "keyOut", key_out)?,
        );
        check_dtype_of(OP, "positions", &pos, &[I64])?;
        for (name, t) in [
            ("queryIn", &q),
            ("keyIn", &k),
            ("cosSinCache", &cache),
            ("queryOut", &qo),
            ("keyOut", &ko),
        ] {
            check_dtype_of(OP, name, t, ROPE)?;
            if t.dtype != q.dtype {
                return Err(invalid(
                    OP,
                    format!(
                        "{name} {} must have queryIn {}'s dtype",
                        t.describe(),
                        q.describe()
                    ),
                ));
            }
        }
        if !mrope_section.is_null() {
            return Err(invalid(
                OP,
                format!(
                    "mropeSection (M-RoPE) is not emulated: pass NULL for plain RoPE (positions {}, queryIn {})",
                    pos.describe(),
                    q.describe()
                ),
            ));
        }
        dense(OP, "queryOut", &qo)?;
        dense(OP, "keyOut", &ko)?;
        let shapes = || {
            format!(
                "positions {}, queryIn {}, keyIn {}, cosSinCache {}, headSize {head_size}",
                pos.describe(),
                q.describe(),
                k.describe(),
                cache.describe()
            )
        };
        if [&pos, &q, &k, &cache].iter().any(|t| t.numel() == 0) {
            return Err(invalid(
                OP,
                format!("{}: empty tensors are not supported", shapes()),
            ));
        }
        if pos.shape.len() != 1
            || q.shape.len() != 2
            || k.shape.len() != 2
            || cache.shape.len() != 2
        {
            return Err(tiling(
                OP,
                format!(
                    "{}: positions must be (T), queryIn, keyIn and cosSinCache 2-D",
                    shapes()
                ),
            ));
        }
        let tokens = pos.shape[0];
        // headSize and rotaryDim: multiples of 32 for 2-byte dtypes, of 16 for FLOAT32.
        let align = if q.dtype == F32 { 16 } else { 32 };
        let rotary = cache.shape[1];
        let hs = head_size.max(0) as usize;
        let fits = head_size > 0
            && hs.is_multiple_of(align)
            && rotary.is_multiple_of(align)
            && rotary <= hs
            && q.shape[0] == tokens
            && k.shape[0] == tokens
            && q.shape[1].is_multiple_of(hs)
            && k.shape[1].is_multiple_of(hs);
        if !fits {
            return Err(tiling(
                OP,
                format!(
                    "{}: q (T, Nq*headSize) and k (T, Nk*headSize) with T = positions' length; headSize and rotaryDim {rotary} (cosSinCache's dim 1) multiples of {align}, rotaryDim <= headSize",
                    shapes()
                ),
            ));
        }
        for (name, o, i) in [("queryOut", &qo, &q), ("keyOut", &ko, &k)] {
            if o.shape != i.shape {
                return Err(tiling(
                    OP,
                    format!("{name} {} must be {:?}", o.describe(), i.shape),
                ));
            }
        }
        Ok((
            SCRATCH_WORKSPACE,
            Arc::new(move || {
                let positions = read_positions(OP, &pos, cache.shape[0])?;
                for (name, i, o) in [("query", &q, &qo), ("key", &k, &ko)] {
                    rope_cached(OP, name, i, o, &cache, &positions, hs, is_neox_style)?;
                }
                Ok(())
            }) as Kernel,
        ))
    })
}

/// The positions, each checked against the cache's rows (an AI Core error naming the first
/// outside it).
fn read_positions(op: &str, pos: &TensorDesc, rows: usize) -> Result<Vec<usize>, Fault> {
    let values = super::routing::read_all::<i128>(op, "positions", pos)?;
    values
        .into_iter()
        .enumerate()
        .map(|(t, p)| {
            if p < 0 || p as usize >= rows {
                Err(fault(
                    ACL_ERROR_RT_AICORE_EXCEPTION,
                    format!("{op}: positions[{t}] = {p} is outside cosSinCache's {rows} rows"),
                ))
            } else {
                Ok(p as usize)
            }
        })
        .collect()
}

/// Rotates the first `rotary` columns of every head of `input` into `out` (the rest copied),
/// with cos/sin from row `positions[t]` of the cache: f32, one rounding per output.
fn rope_cached(
    op: &str,
    name: &str,
    input: &TensorDesc,
    out: &TensorDesc,
    cache: &TensorDesc,
    positions: &[usize],
    head_size: usize,
    neox: bool,
) -> Result<(), Fault> {
    let mo = map(op, &format!("{name}Out"), out)?;
    let mut mi = map(op, &format!("{name}In"), input)?;
    let mut mc = map(op, "cosSinCache", cache)?;
    mi.detach_from(&mo, false);
    mc.detach_from(&mo, false);
    let (get, gc, set) = (mi.getter::<f32>(), mc.getter::<f32>(), mo.setter::<f32>());
    let rotary = cache.shape[1];
    let half = rotary / 2;
    let heads = input.shape[1] / head_size;
    let (is, cs) = (&input.strides, &cache.strides);
    let width = input.shape[1];
    let mut row = vec![0f32; head_size];
    let mut res = vec![0f32; head_size];
    for (t, &p) in positions.iter().enumerate() {
        let c0 = cache.offset + p * cs[0];
        let cos = |i: usize| gc(c0 + i * cs[1]);
        let sin = |i: usize| gc(c0 + (half + i) * cs[1]);
        for h in 0..heads {
            let i0 = input.offset + t * is[0] + h * head_size * is[1];
            for (j, v) in row.iter_mut().enumerate() {
                *v = get(i0 + j * is[1]);
            }
            res.copy_from_slice(&row);
            for i in 0..half {
                // NeoX: the halves of the rotary part; GPT-J: its even and odd columns.
                let (a, b) = if neox {
                    (i, half + i)
                } else {
                    (2 * i, 2 * i + 1)
                };
                let (x1, x2) = (row[a], row[b]);
                res[a] = x1 * cos(i) - x2 * sin(i);
                res[b] = x2 * cos(i) + x1 * sin(i);
            }
            let o0 = out.offset + t * width + h * head_size;
            for (j, &v) in res.iter().enumerate() {
                set(o0 + j, v);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unified_buffer_formula_bounds_the_heads_per_dtype() {
        // F16 keeps 2-byte values: 152 heads fit, 153 do not; F32 and BF16 (through f32): 76.
        assert!(apply_rope_ub_bytes(F16, 152) <= UB_BYTES);
        assert!(apply_rope_ub_bytes(F16, 153) > UB_BYTES);
        for dtype in [F32, BF16] {
            assert!(apply_rope_ub_bytes(dtype, 76) <= UB_BYTES, "{dtype}");
            assert!(apply_rope_ub_bytes(dtype, 77) > UB_BYTES, "{dtype}");
        }
    }
}
