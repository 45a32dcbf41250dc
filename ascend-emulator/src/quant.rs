//! Emulated quantized matmul operators of Atlas A2 (CANN 8.0.0 on; prototypes as
//! `../shared/ascend/aclnn-quant-attention-norm.md` declares them for 8.1.RC1):
//!
//! - `aclnnDynamicQuant`: per-token symmetric int8 quantization, `scale = rowmax|x| / 127`.
//! - `aclnnWeightQuantBatchMatmulV2` (W8A16): `y = x @ ((w + offset) * antiquantScale) + bias`
//!   with an int8 weight and f16/bf16 activations.
//! - `aclnnQuantMatmulV4` (W8A8): int8 x int8 with int32 accumulation, dequantized by a
//!   per-channel (or per-tensor) scale and an optional per-token scale.
//!
//! Integer parts are exact (int32 accumulation); dequantization is f32, and results are rounded
//! once to the output type. What the operator reference leaves open is marked ASSUMPTION; the
//! emulation takes the stricter reading there and refuses forms it does not emulate by name
//! rather than computing them.
#![allow(
    missing_docs,
    non_snake_case,
    clippy::missing_safety_doc,
    clippy::too_many_arguments
)]

use std::sync::Arc;

use super::fault::Fault;
use super::meta::{tensor_arg, Kernel, TensorDesc};
use super::ops::{check_dtype, invalid, phase1, phase2_entry_points, Ex, Ws, SCRATCH_WORKSPACE};
use super::view::{map, Walk};
use ascend_acl::dtype::DataType::{self, *};
use ascend_acl::types::*;

phase2_entry_points!(
    aclnnDynamicQuant,
    aclnnWeightQuantBatchMatmulV2,
    aclnnQuantMatmulV4
);

/// Activations of the quantized operators on Atlas A2 (op docs: FLOAT16, BFLOAT16).
const HALF: &[DataType] = &[F16, BF16];
const INT8: &[DataType] = &[I8];
const FLOAT32: &[DataType] = &[F32];
/// Largest int8 magnitude a symmetric quantization produces (op doc: dtypeMax of INT8).
const QMAX: f32 = 127.0;

/// A tensor argument that may be NULL.
unsafe fn optional(op: &str, name: &str, p: *const aclTensor) -> Result<Option<TensorDesc>, Fault> {
    if p.is_null() {
        Ok(None)
    } else {
        tensor_arg(op, name, p).map(Some)
    }
}

/// The values of a view in row-major order of its shape, as f64 (exact for every dtype these
/// operators take).
fn read(op: &str, name: &str, t: &TensorDesc) -> Result<Vec<f64>, Fault> {
    let m = map(op, name, t)?;
    let get = m.getter::<f64>();
    Ok(Walk::of(t).map(get).collect())
}

/// Writes `values` (row-major in `t`'s shape), each rounded once to `t`'s dtype; callers pass
/// values that are exact f32 (or integers), so no double rounding happens on the way.
fn write(op: &str, name: &str, t: &TensorDesc, values: &[f64]) -> Result<(), Fault> {
    let m = map(op, name, t)?;
    let set = m.setter::<f64>();
    for (o, &v) in Walk::of(t).zip(values) {
        set(o, v);
    }
    Ok(())
}

fn dense_out(op: &str, name: &str, t: &TensorDesc) -> Result<(), Fault> {
    if t.is_contiguous() {
        Ok(())
    } else {
        Err(invalid(
            op,
            format!("{name} {} must be contiguous", t.describe()),
        ))
    }
}

/// Whether a 2-D operand is dense (`false`) or the transpose of a dense matrix (`true`, strides
/// `[1, rows]`); other views are refused.
fn transposed(op: &str, name: &str, t: &TensorDesc) -> Result<bool, Fault> {
    if t.is_contiguous() {
        return Ok(false);
    }
    if t.shape.len() == 2 && t.strides == [1, t.shape[0]] {
        return Ok(true);
    }
    Err(invalid(
        op,
        format!(
            "{name} {} with strides {:?} is neither dense nor a transposed matrix",
            t.describe(),
            t.strides
        ),
    ))
}

/// One row quantised per token to symmetric int8 in f32 (the vector unit's compute type), the
/// formula of both operators' docs (aclnnDynamicQuant; aclnnMoeInitRoutingQuantV2, "动态quant"):
/// `scale = max|v| / 127`, `q = round(v / scale)`. Returns the scale.
///
/// ASSUMPTION (the docs name `round` only and leave a row of zeros open): to nearest, ties to
/// even (CAST_RINT), saturated to `[-127, 127]` (`|v / scale| <= 127` by construction); a row
/// of zeros gets scale 0 and values 0, the stricter reading: no NaN reaches the int8 output.
pub(crate) fn quantise_row(row: &[f32], q: &mut [i8]) -> f32 {
    let max = row.iter().fold(0f32, |m, v| m.max(v.abs()));
    let scale = max / QMAX;
    for (d, &v) in q.iter_mut().zip(row) {
        *d = if scale == 0.0 {
            0
        } else {
            (v / scale).round_ties_even().clamp(-QMAX, QMAX) as i8
        };
    }
    scale
}

/// [`quantise_row`] over rows of `k` values: the int8 values (as f32) and the scales.
pub(crate) fn per_token_int8(values: &[f32], k: usize) -> (Vec<f32>, Vec<f32>) {
    let k = k.max(1);
    let mut row_q = vec![0i8; k];
    let mut q = Vec::with_capacity(values.len());
    let mut scales = Vec::with_capacity(values.len() / k);
    for row in values.chunks(k) {
        scales.push(quantise_row(row, &mut row_q[..row.len()]));
        q.extend(row_q[..row.len()].iter().map(|&v| f32::from(v)));
    }
    (q, scales)
}

pub unsafe extern "C" fn aclnnDynamicQuantGetWorkspaceSize(
    x: *const aclTensor,
    smooth_scales_optional: *const aclTensor,
    y_out: *const aclTensor,
    scale_out: *const aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnDynamicQuant";
    phase1(OP, ws, ex, || {
        let (x, y, scale) = (
            tensor_arg(OP, "x", x)?,
            tensor_arg(OP, "yOut", y_out)?,
            tensor_arg(OP, "scaleOut", scale_out)?,
        );
        let smooth = optional(OP, "smoothScalesOptional", smooth_scales_optional)?;
        check_dtype(OP, "x", &x, HALF)?;
        check_dtype(OP, "yOut", &y, INT8)?;
        check_dtype(OP, "scaleOut", &scale, FLOAT32)?;
        let r = x.shape.len();
        // Op doc: x has 2 to 8 dims; yOut has x's shape, scaleOut x's without the last dim.
        if !(2..=8).contains(&r) {
            return Err(invalid(
                OP,
                format!("x {} must have 2 to 8 dims", x.describe()),
            ));
        }
        if y.shape != x.shape || scale.shape[..] != x.shape[..r - 1] {
            return Err(invalid(
                OP,
                format!(
                    "yOut {} must have x's shape and scaleOut {} x's shape without its last dim (x {})",
                    y.describe(),
                    scale.describe(),
                    x.describe()
                ),
            ));
        }
        let k = x.shape[r - 1];
        if let Some(s) = &smooth {
            if s.dtype != x.dtype || s.shape != [k] {
                return Err(invalid(
                    OP,
                    format!(
                        "smoothScalesOptional {} must be [{k}] of x's dtype {}",
                        s.describe(),
                        x.dtype
                    ),
                ));
            }
        }
        // Op doc (8.0.0): the outputs do not support non-contiguous views.
        dense_out(OP, "yOut", &y)?;
        dense_out(OP, "scaleOut", &scale)?;
        let kernel = move || {
            let mut v: Vec<f32> = read(OP, "x", &x)?.into_iter().map(|v| v as f32).collect();
            if let Some(s) = &smooth {
                let s = read(OP, "smoothScalesOptional", s)?;
                for row in v.chunks_mut(k.max(1)) {
                    row.iter_mut().zip(&s).for_each(|(a, &b)| *a *= b as f32);
                }
            }
            let (q, scales) = per_token_int8(&v, k);
            let widen = |v: Vec<f32>| v.into_iter().map(f64::from).collect::<Vec<_>>();
            write(OP, "yOut", &y, &widen(q))?;
            write(OP, "scaleOut", &scale, &widen(scales))
        };
        Ok((SCRATCH_WORKSPACE, Arc::new(kernel) as Kernel))
    })
}

/// antiquantGroupSize is 0 or a multiple of this in [32, k - 1] (op doc).
const GROUP_ALIGN: i64 = 32;

pub unsafe extern "C" fn aclnnWeightQuantBatchMatmulV2GetWorkspaceSize(
    x: *const aclTensor,
    weight: *const aclTensor,
    antiquant_scale: *const aclTensor,
    antiquant_offset_optional: *const aclTensor,
    quant_scale_optional: *const aclTensor,
    quant_offset_optional: *const aclTensor,
    bias_optional: *const aclTensor,
    antiquant_group_size: std::ffi::c_int,
    y: *const aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnWeightQuantBatchMatmulV2";
    phase1(OP, ws, ex, || {
        if !quant_scale_optional.is_null() || !quant_offset_optional.is_null() {
            return Err(invalid(
                OP,
                "quantScaleOptional/quantOffsetOptional are given: the int8-output form is not emulated",
            ));
        }
        let (x, w, scale, y) = (
            tensor_arg(OP, "x", x)?,
            tensor_arg(OP, "weight", weight)?,
            tensor_arg(OP, "antiquantScale", antiquant_scale)?,
            tensor_arg(OP, "y", y)?,
        );
        let offset = optional(OP, "antiquantOffsetOptional", antiquant_offset_optional)?;
        let bias = optional(OP, "biasOptional", bias_optional)?;
        check_dtype(OP, "x", &x, HALF)?;
        // The op also takes INT4 and INT32-packed INT4 weights; only int8 is emulated.
        check_dtype(OP, "weight", &w, INT8)?;
        // The op doc gives A2 x and weight two dims each: (m, k) and (k, n).
        if x.shape.len() != 2 || w.shape.len() != 2 || x.shape[1] != w.shape[0] {
            return Err(invalid(
                OP,
                format!(
                    "x [m, k] and weight [k, n] (2-D on Atlas A2) disagree: x {}, weight {}",
                    x.describe(),
                    w.describe()
                ),
            ));
        }
        let (m, k, n) = (x.shape[0], x.shape[1], w.shape[1]);
        if y.dtype != x.dtype || y.shape != [m, n] {
            return Err(invalid(
                OP,
                format!(
                    "y {} must be [{m}, {n}] of x's dtype {}",
                    y.describe(),
                    x.dtype
                ),
            ));
        }
        dense_out(OP, "y", &y)?;
        // x may be transposed too on A2 (m <= 65535 then); not needed by the backend, so
        // ASSUMPTION (stricter): x must be dense. The weight may be dense or transposed.
        if !x.is_contiguous() {
            return Err(invalid(
                OP,
                format!("x {} must be contiguous", x.describe()),
            ));
        }
        transposed(OP, "weight", &w)?;
        let g = antiquant_group_size as i64;
        if g != 0 && (g % GROUP_ALIGN != 0 || g < GROUP_ALIGN || g >= k as i64) {
            return Err(invalid(
                OP,
                format!(
                    "antiquantGroupSize {g} must be 0 or a multiple of 32 in [32, k - 1 = {}]",
                    k as i64 - 1
                ),
            ));
        }
        // Scale shapes (op doc): per tensor [1], per channel [n] or [1, n], per group
        // [ceil(k / g), n]; in x's dtype (the UINT64/INT64 forms go with quantScale).
        let groups = if g == 0 { 1 } else { k.div_ceil(g as usize) };
        let per_tensor = scale.shape == [1];
        let fits = if g == 0 {
            per_tensor || scale.shape == [n] || scale.shape == [1, n]
        } else {
            scale.shape == [groups, n]
        };
        if scale.dtype != x.dtype || !fits {
            return Err(invalid(
                OP,
                format!(
                    "antiquantScale {} must be of x's dtype {} and shaped {}",
                    scale.describe(),
                    x.dtype,
                    if g == 0 {
                        format!("[1], [{n}] or [1, {n}]")
                    } else {
                        format!("[{groups}, {n}] for groups of {g}")
                    }
                ),
            ));
        }
        if let Some(o) = &offset {
            if o.dtype != scale.dtype || o.shape != scale.shape {
                return Err(invalid(
                    OP,
                    format!(
                        "antiquantOffsetOptional {} must match antiquantScale {}",
                        o.describe(),
                        scale.describe()
                    ),
                ));
            }
        }
        // Bias dtype (op doc, A2): FLOAT16 with f16 x, FLOAT with bf16 x.
        let bias_dtype = if x.dtype == F16 { F16 } else { F32 };
        if let Some(b) = &bias {
            if b.dtype != bias_dtype || (b.shape != [n] && b.shape != [1, n]) {
                return Err(invalid(
                    OP,
                    format!(
                        "biasOptional {} must be [{n}] (or [1, {n}]) {bias_dtype} with {} x",
                        b.describe(),
                        x.dtype
                    ),
                ));
            }
        }
        let kernel = move || {
            super::counters::cube(m, n, k, super::counters::CubeOperands::Half);
            let xv = read(OP, "x", &x)?;
            let wv = read(OP, "weight", &w)?;
            let sv = read(OP, "antiquantScale", &scale)?;
            let ov = offset
                .as_ref()
                .map(|o| read(OP, "antiquantOffsetOptional", o))
                .transpose()?;
            let bv = bias
                .as_ref()
                .map(|b| read(OP, "biasOptional", b))
                .transpose()?;
            let dt = x.dtype;
            let at = |v: f64| super::numerics::round_to(dt, v);
            // The weight dequantized in x's dtype (the vector unit's antiquant before the cube):
            // (w + offset) rounded, times the scale rounded; int8 * f16/bf16 is exact in f64.
            let mut wd = vec![0f64; k * n];
            for r in 0..k {
                let grp = if g == 0 { 0 } else { r / g as usize };
                for c in 0..n {
                    let si = if per_tensor { 0 } else { grp * n + c };
                    let base = match &ov {
                        Some(o) => at(wv[r * n + c] + o[si]),
                        None => wv[r * n + c],
                    };
                    wd[r * n + c] = at(base * sv[si]);
                }
            }
            // The cube: f32 accumulation of products of f16/bf16 operands (exact in f32).
            let mut out = vec![0f64; m * n];
            for i in 0..m {
                let mut acc = vec![0f32; n];
                for (kk, &a) in xv[i * k..(i + 1) * k].iter().enumerate() {
                    let (a, row) = (a as f32, &wd[kk * n..(kk + 1) * n]);
                    acc.iter_mut()
                        .zip(row)
                        .for_each(|(s, &b)| *s += a * b as f32);
                }
                for (c, s) in acc.into_iter().enumerate() {
                    let s = match &bv {
                        Some(b) => s + b[c] as f32,
                        None => s,
                    };
                    out[i * n + c] = s as f64;
                }
            }
            write(OP, "y", &y, &out)
        };
        Ok((SCRATCH_WORKSPACE, Arc::new(kernel) as Kernel))
    })
}

pub unsafe extern "C" fn aclnnQuantMatmulV4GetWorkspaceSize(
    x1: *const aclTensor,
    x2: *const aclTensor,
    scale: *const aclTensor,
    offset: *const aclTensor,
    pertoken_scale_optional: *const aclTensor,
    bias: *const aclTensor,
    transpose_x1: bool,
    transpose_x2: bool,
    out: *const aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnQuantMatmulV4";
    phase1(OP, ws, ex, || {
        if !offset.is_null() {
            return Err(invalid(
                OP,
                "offset is given: it goes with int8 output, which is not emulated",
            ));
        }
        let (a, b, s, o) = (
            tensor_arg(OP, "x1", x1)?,
            tensor_arg(OP, "x2", x2)?,
            tensor_arg(OP, "scale", scale)?,
            tensor_arg(OP, "out", out)?,
        );
        let pertoken = optional(OP, "pertokenScaleOptional", pertoken_scale_optional)?;
        let bias = optional(OP, "bias", bias)?;
        check_dtype(OP, "x1", &a, INT8)?;
        check_dtype(OP, "x2", &b, INT8)?;
        // The op takes 2 to 6 dims with batch broadcasting; the emulation takes the 2-D form.
        if a.shape.len() != 2 || b.shape.len() != 2 {
            return Err(invalid(
                OP,
                format!(
                    "x1 {} and x2 {}: only 2-D operands are emulated",
                    a.describe(),
                    b.describe()
                ),
            ));
        }
        // transposeX1/X2 say the stored matrix is [k, m] / [n, k] (both dense).
        let (m, k) = if transpose_x1 {
            (a.shape[1], a.shape[0])
        } else {
            (a.shape[0], a.shape[1])
        };
        let (k2, n) = if transpose_x2 {
            (b.shape[1], b.shape[0])
        } else {
            (b.shape[0], b.shape[1])
        };
        if k != k2 {
            return Err(invalid(
                OP,
                format!(
                    "x1 {} (transposeX1 {transpose_x1}) and x2 {} (transposeX2 {transpose_x2}) disagree on k",
                    a.describe(),
                    b.describe()
                ),
            ));
        }
        for (name, t) in [("x1", &a), ("x2", &b)] {
            if !t.is_contiguous() {
                return Err(invalid(
                    OP,
                    format!(
                        "{name} {} must be contiguous (transposes go through transposeX1/X2)",
                        t.describe()
                    ),
                ));
            }
        }
        dense_out(OP, "out", &o)?;
        if o.shape != [m, n] {
            return Err(invalid(
                OP,
                format!("out {} must be [{m}, {n}]", o.describe()),
            ));
        }
        if s.shape != [1] && s.shape != [n] {
            return Err(invalid(
                OP,
                format!("scale {} must be [1] or [{n}]", s.describe()),
            ));
        }
        // Dtype combinations on A2 (op doc): with a per-token scale, out is FLOAT16 (scale
        // FLOAT) or BFLOAT16 (scale FLOAT or BFLOAT16). Without one, bf16 out takes a FLOAT or
        // BFLOAT16 scale; f16 out needs the INT64/UINT64 scale of aclnnTransQuantParamV2, and
        // int8/int32 outputs go with offset or no dequantization: ASSUMPTION (stricter), those
        // forms are refused as not emulated.
        match &pertoken {
            Some(p) => {
                check_dtype(OP, "pertokenScaleOptional", p, FLOAT32)?;
                if p.shape != [m] {
                    return Err(invalid(
                        OP,
                        format!("pertokenScaleOptional {} must be [{m}]", p.describe()),
                    ));
                }
                match o.dtype {
                    F16 => check_dtype(OP, "scale (with f16 out)", &s, FLOAT32)?,
                    BF16 => check_dtype(OP, "scale (with bf16 out)", &s, &[F32, BF16])?,
                    _ => check_dtype(OP, "out", &o, HALF)?,
                }
            }
            None => {
                check_dtype(OP, "out (without pertokenScaleOptional)", &o, &[BF16])?;
                check_dtype(OP, "scale", &s, &[F32, BF16])?;
            }
        }
        // Bias: INT32 (added to the accumulator) or, for bf16 out, BFLOAT16/FLOAT; with a
        // per-token scale also FLOAT16 for f16 out (added after dequantization).
        if let Some(bt) = &bias {
            let float_ok: &[DataType] = match (o.dtype, pertoken.is_some()) {
                (BF16, _) => &[BF16, F32],
                (F16, true) => &[F16, F32],
                _ => &[],
            };
            let ok_dtype = bt.dtype == I32 || float_ok.contains(&bt.dtype);
            if !ok_dtype || bt.shape != [n] {
                return Err(invalid(
                    OP,
                    format!(
                        "bias {} must be [{n}] INT32 or a float type the out dtype {} allows",
                        bt.describe(),
                        o.dtype
                    ),
                ));
            }
        }
        let kernel = move || {
            super::counters::cube(m, n, k, super::counters::CubeOperands::Int8);
            let av = read(OP, "x1", &a)?;
            let bv = read(OP, "x2", &b)?;
            let sv = read(OP, "scale", &s)?;
            let pv = pertoken
                .as_ref()
                .map(|p| read(OP, "pertokenScaleOptional", p))
                .transpose()?;
            let biasv = bias.as_ref().map(|t| read(OP, "bias", t)).transpose()?;
            let int_bias = bias.as_ref().is_some_and(|t| t.dtype == I32);
            let ai = |i: usize, kk: usize| {
                if transpose_x1 {
                    av[kk * m + i]
                } else {
                    av[i * k + kk]
                }
            };
            let bi = |kk: usize, j: usize| {
                if transpose_x2 {
                    bv[j * k + kk]
                } else {
                    bv[kk * n + j]
                }
            };
            let mut outv = vec![0f64; m * n];
            for i in 0..m {
                for j in 0..n {
                    // int32 accumulation: |sum| <= 127 * 128 * k fits i32 for any k the cube
                    // tiles (k < 2^17); wrapping_add keeps the int32 semantics regardless.
                    let mut acc: i32 = (0..k).fold(0i32, |acc, kk| {
                        acc.wrapping_add(ai(i, kk) as i32 * bi(kk, j) as i32)
                    });
                    if let (true, Some(bb)) = (int_bias, &biasv) {
                        acc = acc.wrapping_add(bb[j] as i32);
                    }
                    // f32 dequantization: acc * scale (* pertoken) (+ float bias).
                    let mut v = acc as f32 * sv[if sv.len() == 1 { 0 } else { j }] as f32;
                    if let Some(p) = &pv {
                        v *= p[i] as f32;
                    }
                    if let (false, Some(bb)) = (int_bias, &biasv) {
                        v += bb[j] as f32;
                    }
                    outv[i * n + j] = v as f64;
                }
            }
            write(OP, "out", &o, &outv)
        };
        Ok((SCRATCH_WORKSPACE, Arc::new(kernel) as Kernel))
    })
}
