//! Emulated grouped matrix multiplication: `aclnnGroupedMatmulV4` (CANN 8.x, Atlas A2), the
//! non-quantised single-tensor path that MoE experts use. Groups run along M (`x [M, K]` rows
//! split over `weight [E, K, N]`, out `[M, N]`) or along K (the columns of `x [M, K]` and the
//! rows of `weight [K, N]` split, out `[E, M, N]`: the weight gradient of the M form). The group
//! list is a device tensor, read when the kernel runs.
//!
//! Besides the float path it emulates the two quantised single-tensor forms MoE serving uses on
//! A2, grouped along M only (prototype: `aclnn-quant-attention-norm.md`; semantics: the op doc,
//! ops-transformer `gmm/grouped_matmul/docs/aclnnGroupedMatmulV4.md`, "A8W8场景约束" and
//! "A16W8场景约束"):
//! - A8W8: int8 x and weight, int32 accumulation, `out = acc * scale[e, n] * perTokenScale[m]`
//!   in f32, rounded once to out (bf16 with a bf16 scale, f16 with an f32 scale);
//! - A16W8 (antiquant): f16/bf16 x, int8 weight dequantised in x's type, `(w + offset) * scale`
//!   per channel, then the float product.
//!
//! Multi-tensor lists, bias, static offsets, int8/int32 outputs, per-group antiquant and fused
//! activations are refused as not emulated rather than computed.
#![allow(
    missing_docs,
    non_snake_case,
    clippy::missing_safety_doc,
    clippy::too_many_arguments
)]

use std::ffi::c_void;
use std::sync::Arc;

use super::counters::CubeOperands;
use super::fault::{fault, Fault};
use super::meta::Kernel;
use super::meta::{tensor_arg, tensor_list_arg, TensorDesc};
use super::nn::gemm;
use super::numerics::round_to;
use super::ops::{check_dtype, invalid, phase1, phase2_entry_points, Ex, Ws, SCRATCH_WORKSPACE};
use super::view::{dense_f32, map, put_f32, take_f32, Mapped, Walk};
use ascend_acl::dtype::DataType::{self, *};
use ascend_acl::types::status::*;
use ascend_acl::types::*;
use std::borrow::Cow;

/// x, weight and out of the non-quantised path on Atlas A2 (all three of one type).
const GMM: &[DataType] = &[F16, BF16, F32];
/// x, weight and out of the quantised forms emulated (op doc, A2 scenario table; INT4 and the
/// int8/int32 outs are not emulated).
const QUANT: &[DataType] = &[F16, BF16, I8];
const GROUP_LIST: &[DataType] = &[I64];
/// Most groups a group-list tensor may describe (op doc).
const MAX_GROUPS: usize = 1024;
/// Largest storage-inner dim of x and weight on Atlas A2 (op doc: "less than 65536").
const MAX_INNER: usize = 65535;

/// groupType values.
const SPLIT_M: i64 = 0;
const SPLIT_N: i64 = 1;
const SPLIT_K: i64 = 2;
/// groupListType values: running totals or sizes.
const CUMSUM: i64 = 0;
const COUNTS: i64 = 1;

phase2_entry_points!(aclnnGroupedMatmulV4);

/// Along which axis the groups run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Split {
    M,
    K,
}

/// Whether a 2-D or 3-D operand is dense (`false`) or dense with its last two dims swapped, the
/// op's "transposed" (`true`). Other views are refused. As in the op, the strides decide
/// (`[.., a, b]` with strides `[.., 1, a]` is transposed), except that a view whose last two
/// dims hold one element is never transposed.
fn transposed(op: &str, name: &str, t: &TensorDesc) -> Result<bool, Fault> {
    let r = t.shape.len();
    let (rows, cols) = (t.shape[r - 2], t.shape[r - 1]);
    let batch_dense = r == 2 || t.shape[0] <= 1 || t.strides[0] == rows * cols;
    if rows * cols != 1 && t.strides[r - 2] == 1 && t.strides[r - 1] == rows && batch_dense {
        return Ok(true);
    }
    if t.is_contiguous() {
        return Ok(false);
    }
    Err(invalid(
        op,
        format!(
            "{name} {} with strides {:?} is neither dense nor a transpose of its last two dims",
            t.describe(),
            t.strides
        ),
    ))
}

/// The dim that is contiguous in memory: the last one, or the one before it when transposed.
fn inner_dim(t: &TensorDesc, transposed: bool) -> usize {
    let r = t.shape.len();
    t.shape[if transposed { r - 2 } else { r - 1 }]
}

fn check_inner(op: &str, name: &str, t: &TensorDesc, transposed: bool) -> Result<(), Fault> {
    let inner = inner_dim(t, transposed);
    if inner > MAX_INNER {
        return Err(invalid(
            op,
            format!(
                "{name} {}: its inner dim {inner} exceeds {MAX_INNER}",
                t.describe()
            ),
        ));
    }
    Ok(())
}

fn dense_out(op: &str, out: &TensorDesc) -> Result<(), Fault> {
    if out.is_contiguous() {
        Ok(())
    } else {
        Err(invalid(
            op,
            format!("out {} must be contiguous", out.describe()),
        ))
    }
}

/// Sizes of the groups from the group list (running totals or sizes), checked as the kernel
/// depends on them: non-negative, and together within the `extent` of the grouped axis (a larger
/// total would read past x).
fn group_sizes(op: &str, list: &[i64], cumsum: bool, extent: usize) -> Result<Vec<usize>, Fault> {
    let mut sizes = Vec::with_capacity(list.len());
    let (mut previous, mut total) = (0i64, 0i64);
    for (e, &v) in list.iter().enumerate() {
        let size = if cumsum { v - previous } else { v };
        if size < 0 {
            return Err(fault(
                ACL_ERROR_RT_AICORE_EXCEPTION,
                format!("{op}: group {e} has size {size}; group lists must hold non-negative sizes or non-decreasing totals"),
            ));
        }
        previous = v;
        total += size;
        sizes.push(size as usize);
    }
    if total as usize > extent {
        return Err(fault(
            ACL_ERROR_RT_AICORE_EXCEPTION,
            format!("{op}: the groups cover {total} rows of a grouped axis of {extent}"),
        ));
    }
    Ok(sizes)
}

/// An operand as f32 in row-major order of its shape (exact for F16/BF16/F32, as the cube unit
/// reads them): the one host copy the kernel holds of each operand.
/// An operand's values as f32: its own memory when it is dense f32 apart from `out`, else a
/// converted copy.
fn read_f32<'a>(m: &'a Mapped, out: &Mapped) -> Cow<'a, [f32]> {
    if let Some(values) = dense_f32(m, out) {
        return Cow::Borrowed(values);
    }
    let mut values = Vec::with_capacity(m.desc.numel());
    take_f32(&mut values, m, &mut Walk::of(&m.desc), m.desc.numel());
    Cow::Owned(values)
}

/// The quantised form of a call, with its checked parameters.
enum Quant {
    /// Float x, weight and out.
    Float,
    /// int8 x and weight: `scale [E, N]` per output channel, `per_token [M]` f32 if given.
    A8W8 {
        scale: TensorDesc,
        per_token: Option<TensorDesc>,
    },
    /// Float x, int8 weight: `scale [E, N]` and `offset [E, N]` (if given) in x's type.
    A16W8 {
        scale: TensorDesc,
        offset: Option<TensorDesc>,
    },
}

impl Quant {
    /// The `[E, N]` per-channel parameters: like the weights, read only for the experts that
    /// get rows.
    fn per_expert(&self) -> impl Iterator<Item = &TensorDesc> {
        let (scale, offset) = match self {
            Quant::Float => (None, None),
            Quant::A8W8 { scale, .. } => (Some(scale), None),
            Quant::A16W8 { scale, offset } => (Some(scale), offset.as_ref()),
        };
        scale.into_iter().chain(offset)
    }
}

/// The checked call: operands, grouped axis and matrix sizes (`[m, k] @ [k, n]` overall).
struct Plan {
    quant: Quant,
    x: TensorDesc,
    weight: TensorDesc,
    out: TensorDesc,
    group_list: TensorDesc,
    split: Split,
    cumsum: bool,
    m: usize,
    k: usize,
    n: usize,
}

impl Plan {
    /// Each non-empty group computed on f32 (the cube unit's accumulator) and written to its
    /// part of out in out's type; empty groups and rows past the last group are not written
    /// (op doc: parts the group list does not cover are not updated).
    fn run(&self, op: &str) -> Result<(), Fault> {
        let list: Vec<i64> = {
            let m = map(op, "groupListOptional", &self.group_list)?;
            let get = m.getter::<i128>();
            Walk::of(&self.group_list).map(|o| get(o) as i64).collect()
        };
        let extent = match self.split {
            Split::M => self.m,
            Split::K => self.k,
        };
        let sizes = group_sizes(op, &list, self.cumsum, extent)?;
        if self.split == Split::M {
            // Only the experts that own rows have their weights read (the work counters' model).
            let used = sizes.iter().filter(|&&s| s > 0).count();
            let params: usize = self
                .quant
                .per_expert()
                .map(|t| self.n * t.dtype.size())
                .sum();
            let per_group = (self.k * self.n * self.weight.dtype.size() + params) as u64;
            super::counters::ran(used as u64 * per_group);
        }
        // The cube's work, group by group: int8 operands at the int8 fractal, f16/bf16 (and
        // the antiquant form, whose weight is dequantised to x's type) at the half rate.
        let operands = match (&self.quant, self.x.dtype) {
            (Quant::A8W8 { .. }, _) => CubeOperands::Int8,
            (Quant::Float, F32) => CubeOperands::F32,
            _ => CubeOperands::Half,
        };
        for &size in sizes.iter().filter(|&&s| s > 0) {
            match self.split {
                Split::M => super::counters::cube(size, self.n, self.k, operands),
                Split::K => super::counters::cube(self.m, self.n, size, operands),
            }
        }
        match &self.quant {
            Quant::Float => {}
            Quant::A8W8 { scale, per_token } => {
                return self.run_a8w8(op, &sizes, scale, per_token.as_ref())
            }
            Quant::A16W8 { scale, offset } => {
                return self.run_a16w8(op, &sizes, scale, offset.as_ref())
            }
        }
        let (mx, mw, mo) = (
            map(op, "x", &self.x)?,
            map(op, "weight", &self.weight)?,
            map(op, "out", &self.out)?,
        );
        let (x, w) = (read_f32(&mx, &mo), read_f32(&mw, &mo));
        let (m, k, n) = (self.m, self.k, self.n);
        let mut start = 0;
        for (e, &size) in sizes.iter().enumerate() {
            if size == 0 {
                continue;
            }
            let mut part = self.out.clone();
            let dst = match self.split {
                Split::M => {
                    let mut dst = vec![0f32; size * n];
                    gemm(
                        size,
                        n,
                        k,
                        &mut dst,
                        (&x[start * k..], k, 1),
                        (&w[e * k * n..], n, 1),
                        false,
                    );
                    part.shape = vec![size, n];
                    part.offset += start * n;
                    dst
                }
                Split::K => {
                    let mut dst = vec![0f32; m * n];
                    gemm(
                        m,
                        n,
                        size,
                        &mut dst,
                        (&x[start..], k, 1),
                        (&w[start * n..], n, 1),
                        false,
                    );
                    part.shape = vec![m, n];
                    part.strides = vec![n, 1];
                    part.offset += e * m * n;
                    dst
                }
            };
            let m = map(op, "out", &part)?;
            put_f32(&m, &mut Walk::of(&part), &dst);
            start += size;
        }
        Ok(())
    }
}

impl Plan {
    /// A8W8: each group's int8 product accumulated exactly in int32 (the cube's int8 path; with
    /// K < 65536 the sum of products of magnitude at most 2^14 cannot overflow), dequantised in
    /// f32 as `(acc * scale) * perTokenScale` and rounded once to out's type. ASSUMPTION (op doc
    /// gives the formula, not the order of the two products): scale first, as written.
    fn run_a8w8(
        &self,
        op: &str,
        sizes: &[usize],
        scale: &TensorDesc,
        per_token: Option<&TensorDesc>,
    ) -> Result<(), Fault> {
        // The operands' host copies stay int8 (the host-memory bound of the kernels).
        let (x, w) = (int8s(op, "x", &self.x)?, int8s(op, "weight", &self.weight)?);
        let scale = floats(op, "scaleOptional", scale)?;
        let per_token = per_token
            .map(|t| floats(op, "perTokenScaleOptional", t))
            .transpose()?;
        let (k, n) = (self.k, self.n);
        let mut start = 0;
        for (e, &size) in sizes.iter().enumerate() {
            let mut dst = vec![0f32; size * n];
            for r in 0..size {
                let row = &x[(start + r) * k..(start + r + 1) * k];
                let mut acc = vec![0i32; n];
                for (kk, &xv) in row.iter().enumerate() {
                    let wrow = &w[(e * k + kk) * n..(e * k + kk + 1) * n];
                    for (a, &wv) in acc.iter_mut().zip(wrow) {
                        *a += xv as i32 * wv as i32;
                    }
                }
                let t = per_token.as_ref().map_or(1.0, |p| p[start + r]);
                for (j, &a) in acc.iter().enumerate() {
                    let v = a as f32 * scale[e * n + j];
                    dst[r * n + j] = if per_token.is_some() { v * t } else { v };
                }
            }
            self.write_rows(op, start, size, &dst)?;
            start += size;
        }
        Ok(())
    }

    /// A16W8: the weight dequantised per output channel in x's type (`w + offset` rounded, then
    /// `* scale` rounded, as the vector unit computes in half precision before the cube reads
    /// it); then the float product with f32 accumulation, rounded once to out. ASSUMPTION
    /// (op doc gives `x @ ((w + offset) * scale)` only): each step rounds to x's type.
    fn run_a16w8(
        &self,
        op: &str,
        sizes: &[usize],
        scale: &TensorDesc,
        offset: Option<&TensorDesc>,
    ) -> Result<(), Fault> {
        let dt = self.x.dtype;
        let round = |v: f32| round_to(dt, v as f64) as f32;
        let x = floats(op, "x", &self.x)?;
        let w = int8s(op, "weight", &self.weight)?;
        let scale = floats(op, "antiquantScaleOptional", scale)?;
        let offset = offset
            .map(|t| floats(op, "antiquantOffsetOptional", t))
            .transpose()?;
        let (k, n) = (self.k, self.n);
        let mut start = 0;
        let mut dequantised = vec![0f32; k * n];
        for (e, &size) in sizes.iter().enumerate() {
            if size > 0 {
                // One expert's weight dequantised at a time (the host-memory bound).
                for (i, d) in dequantised.iter_mut().enumerate() {
                    let (v, c) = (w[e * k * n + i] as f32, e * n + i % n);
                    let shifted = offset.as_ref().map_or(v, |o| round(v + o[c]));
                    *d = round(shifted * scale[c]);
                }
                let mut dst = vec![0f32; size * n];
                gemm(
                    size,
                    n,
                    k,
                    &mut dst,
                    (&x[start * k..], k, 1),
                    (&dequantised, n, 1),
                    false,
                );
                self.write_rows(op, start, size, &dst)?;
            }
            start += size;
        }
        Ok(())
    }

    /// Writes `rows` rows of out from `start`, rounding once to out's type.
    fn write_rows(&self, op: &str, start: usize, rows: usize, dst: &[f32]) -> Result<(), Fault> {
        if rows == 0 {
            return Ok(());
        }
        let mut part = self.out.clone();
        part.shape = vec![rows, self.n];
        part.offset += start * self.n;
        let m = map(op, "out", &part)?;
        put_f32(&m, &mut Walk::of(&part), dst);
        Ok(())
    }
}

/// An int8 operand's values in row-major order of its shape.
fn int8s(op: &str, name: &str, t: &TensorDesc) -> Result<Vec<i8>, Fault> {
    let m = map(op, name, t)?;
    let get = m.getter::<i128>();
    Ok(Walk::of(t).map(|o| get(o) as i8).collect())
}

/// A small operand's values as f32 in row-major order of its shape (exact for its types).
fn floats(op: &str, name: &str, t: &TensorDesc) -> Result<Vec<f32>, Fault> {
    let m = map(op, name, t)?;
    let get = m.getter::<f32>();
    Ok(Walk::of(t).map(get).collect())
}

/// One tensor from an optional single-tensor list (`None` when the list pointer is NULL).
unsafe fn single(
    op: &str,
    name: &str,
    list: *const aclTensorList,
) -> Result<Option<TensorDesc>, Fault> {
    if list.is_null() {
        return Ok(None);
    }
    let ts = tensor_list_arg(op, name, list)?;
    if ts.len() != 1 {
        return Err(invalid(
            op,
            format!(
                "{name} holds {} tensors: the single-tensor form takes one",
                ts.len()
            ),
        ));
    }
    Ok(Some(ts[0].clone()))
}

/// A per-channel parameter: `[groups, n]` of `dtype`.
fn per_channel(
    op: &str,
    name: &str,
    t: &TensorDesc,
    groups: usize,
    n: usize,
    dtype: DataType,
) -> Result<(), Fault> {
    if t.dtype != dtype || t.shape != [groups, n] {
        return Err(invalid(
            op,
            format!(
                "{name} {} should be [{groups}, {n}] {dtype} (per output channel of each group)",
                t.describe()
            ),
        ));
    }
    Ok(())
}

/// The quantised form the operands ask for, checked against the A2 dtype tables (op doc,
/// "A8W8场景约束" and "A16W8场景约束"): x int8 takes the A8W8 form, an int8 weight under float
/// x the A16W8 form; other parameter combinations are refused.
fn quant_form(
    op: &str,
    x: &TensorDesc,
    w: &TensorDesc,
    out: &TensorDesc,
    params: [Option<TensorDesc>; 4],
) -> Result<Quant, Fault> {
    let [scale, per_token, aq_scale, aq_offset] = params;
    let given = |t: &Option<TensorDesc>| t.is_some();
    match (x.dtype, w.dtype) {
        (I8, I8) => {
            if given(&aq_scale) || given(&aq_offset) {
                return Err(invalid(
                    op,
                    "antiquant parameters are for a float x with an int8 weight, not int8 x",
                ));
            }
            // With an ND weight the A2 table pairs a bf16 out with a bf16 scale and an f16 out
            // with an f32 scale (an f32 scale for bf16 out needs the FRACTAL_NZ weight, which
            // the emulation does not take); int8/int32 outs are not emulated.
            let scale_type = match out.dtype {
                BF16 => BF16,
                F16 => F32,
                other => {
                    return Err(invalid(
                        op,
                        format!("A8W8 out {other}: only BF16 and F16 outs are emulated"),
                    ))
                }
            };
            let scale = scale.ok_or_else(|| {
                invalid(op, "A8W8 with a float out needs scaleOptional")
            })?;
            let groups = w.shape[0];
            per_channel(op, "scaleOptional", &scale, groups, w.shape[2], scale_type)?;
            if let Some(t) = &per_token {
                if t.dtype != F32 || t.shape != [x.shape[0]] {
                    return Err(invalid(
                        op,
                        format!(
                            "perTokenScaleOptional {} should be [{}] F32 (one per row of x)",
                            t.describe(),
                            x.shape[0]
                        ),
                    ));
                }
            }
            Ok(Quant::A8W8 { scale, per_token })
        }
        (F16 | BF16, I8) => {
            if given(&scale) || given(&per_token) {
                return Err(invalid(
                    op,
                    "scaleOptional and perTokenScaleOptional are for int8 x (A8W8); the A16W8 form takes antiquant parameters",
                ));
            }
            if out.dtype != x.dtype {
                return Err(invalid(
                    op,
                    format!("A16W8 out {} must be x's type {}", out.dtype, x.dtype),
                ));
            }
            let scale = aq_scale.ok_or_else(|| {
                invalid(op, "A16W8 (int8 weight, float x) needs antiquantScaleOptional")
            })?;
            let (groups, n) = (w.shape[0], w.shape[2]);
            per_channel(op, "antiquantScaleOptional", &scale, groups, n, x.dtype)?;
            if let Some(t) = &aq_offset {
                per_channel(op, "antiquantOffsetOptional", t, groups, n, x.dtype)?;
            }
            Ok(Quant::A16W8 {
                scale,
                offset: aq_offset,
            })
        }
        (xt, wt) => Err(invalid(
            op,
            format!("x {xt} with weight {wt}: A2 quantised forms are int8 x with int8 weight (A8W8) or F16/BF16 x with int8 weight (A16W8)"),
        )),
    }
}

pub unsafe extern "C" fn aclnnGroupedMatmulV4GetWorkspaceSize(
    x: *const aclTensorList,
    weight: *const aclTensorList,
    bias_optional: *const aclTensorList,
    scale_optional: *const aclTensorList,
    offset_optional: *const aclTensorList,
    antiquant_scale_optional: *const aclTensorList,
    antiquant_offset_optional: *const aclTensorList,
    per_token_scale_optional: *const aclTensorList,
    group_list_optional: *const aclTensor,
    activation_input_optional: *const aclTensorList,
    activation_quant_scale_optional: *const aclTensorList,
    activation_quant_offset_optional: *const aclTensorList,
    split_item: i64,
    group_type: i64,
    group_list_type: i64,
    act_type: i64,
    out: *mut aclTensorList,
    activation_feature_out_optional: *mut aclTensorList,
    dyn_quant_scale_out_optional: *mut aclTensorList,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnGroupedMatmulV4";
    phase1(OP, ws, ex, || {
        let optional: [(&str, *const c_void); 7] = [
            ("biasOptional", bias_optional.cast()),
            ("offsetOptional", offset_optional.cast()),
            ("activationInputOptional", activation_input_optional.cast()),
            (
                "activationQuantScaleOptional",
                activation_quant_scale_optional.cast(),
            ),
            (
                "activationQuantOffsetOptional",
                activation_quant_offset_optional.cast(),
            ),
            (
                "activationFeatureOutOptional",
                activation_feature_out_optional.cast(),
            ),
            (
                "dynQuantScaleOutOptional",
                dyn_quant_scale_out_optional.cast(),
            ),
        ];
        for (name, p) in optional {
            if !p.is_null() {
                return Err(invalid(
                    OP,
                    format!("{name} is given: bias, static offsets and activation inputs are not emulated"),
                ));
            }
        }
        let params = [
            single(OP, "scaleOptional", scale_optional)?,
            single(OP, "perTokenScaleOptional", per_token_scale_optional)?,
            single(OP, "antiquantScaleOptional", antiquant_scale_optional)?,
            single(OP, "antiquantOffsetOptional", antiquant_offset_optional)?,
        ];
        let (xs, weights, outs) = (
            tensor_list_arg(OP, "x", x)?,
            tensor_list_arg(OP, "weight", weight)?,
            tensor_list_arg(OP, "out", out)?,
        );
        if !(2..=3).contains(&split_item) || xs.len() != 1 || weights.len() != 1 || outs.len() != 1
        {
            return Err(invalid(
                OP,
                format!(
                    "splitItem {split_item} with lists of {}, {} and {} tensors: only the single-tensor form (splitItem 2 or 3, one tensor per list) is emulated",
                    xs.len(),
                    weights.len(),
                    outs.len()
                ),
            ));
        }
        let (x, w, out) = (xs[0].clone(), weights[0].clone(), outs[0].clone());
        let quantised = x.dtype == I8 || w.dtype == I8 || params.iter().any(Option::is_some);
        for (name, t) in [("x", &x), ("weight", &w), ("out", &out)] {
            check_dtype(OP, name, t, if quantised { QUANT } else { GMM })?;
        }
        if !quantised && (x.dtype != w.dtype || x.dtype != out.dtype) {
            return Err(invalid(
                OP,
                format!(
                    "x {}, weight {} and out {} must share a float type",
                    x.dtype, w.dtype, out.dtype
                ),
            ));
        }
        if act_type != 0 {
            return Err(invalid(
                OP,
                format!("actType {act_type}: activations are fused only in quantised scenarios"),
            ));
        }
        if group_list_type != CUMSUM && group_list_type != COUNTS {
            return Err(invalid(
                OP,
                format!(
                    "groupListType {group_list_type}: 0 (totals) or 1 (sizes) are emulated (2, the int8 [E, 2] pairs, is not)"
                ),
            ));
        }
        if group_list_optional.is_null() {
            return Err(fault(
                ACLNN_ERR_PARAM_NULLPTR,
                format!(
                    "{OP}: groupListOptional is required when x, weight and out are single tensors"
                ),
            ));
        }
        let group_list = tensor_arg(OP, "groupListOptional", group_list_optional)?;
        check_dtype(OP, "groupListOptional", &group_list, GROUP_LIST)?;
        let groups = group_list.numel();
        if group_list.shape.len() != 1 || groups > MAX_GROUPS {
            return Err(invalid(
                OP,
                format!(
                    "groupListOptional {} must be 1-D with at most {MAX_GROUPS} groups",
                    group_list.describe()
                ),
            ));
        }
        dense_out(OP, &out)?;
        let (x_t, w_t) = (
            x.shape.len() == 2 && transposed(OP, "x", &x)?,
            matches!(w.shape.len(), 2 | 3) && transposed(OP, "weight", &w)?,
        );
        let (split, m, k, n) = match group_type {
            SPLIT_M => {
                let fits = x.shape.len() == 2
                    && w.shape.len() == 3
                    && w.shape[0] == groups
                    && w.shape[1] == x.shape[1]
                    && out.shape == [x.shape[0], w.shape[2]];
                if !fits {
                    return Err(invalid(
                        OP,
                        format!(
                            "grouping along M takes x [M, K], weight [{groups}, K, N] and out [M, N]; got x {}, weight {}, out {}",
                            x.describe(),
                            w.describe(),
                            out.describe()
                        ),
                    ));
                }
                if x_t {
                    return Err(invalid(OP, "x cannot be transposed when grouping along M"));
                }
                (Split::M, x.shape[0], x.shape[1], w.shape[2])
            }
            SPLIT_K => {
                let fits = x.shape.len() == 2
                    && w.shape.len() == 2
                    && w.shape[0] == x.shape[1]
                    && out.shape == [groups, x.shape[0], w.shape[1]];
                if !fits {
                    return Err(invalid(
                        OP,
                        format!(
                            "grouping along K takes x [M, K], weight [K, N] and out [{groups}, M, N]; got x {}, weight {}, out {}",
                            x.describe(),
                            w.describe(),
                            out.describe()
                        ),
                    ));
                }
                // A one-element x reads the same either way; the op accepts it as transposed.
                if !(x_t || x.numel() == 1) || w_t {
                    return Err(invalid(
                        OP,
                        "grouping along K needs x transposed and weight not transposed",
                    ));
                }
                (Split::K, x.shape[0], x.shape[1], w.shape[1])
            }
            SPLIT_N => return Err(invalid(OP, "groupType 1 (N) is not supported on Atlas A2")),
            _ => {
                return Err(invalid(
                    OP,
                    format!("groupType {group_type}: single tensors group along M (0) or K (2)"),
                ))
            }
        };
        check_inner(OP, "x", &x, x_t)?;
        check_inner(OP, "weight", &w, w_t)?;
        let quant = if quantised {
            if split != Split::M {
                return Err(invalid(
                    OP,
                    format!("groupType {group_type}: the quantised forms group along M (0) only"),
                ));
            }
            quant_form(OP, &x, &w, &out, params)?
        } else {
            Quant::Float
        };
        if split == Split::M {
            // Which experts' weights (and their per-channel parameters) the kernel reads depends
            // on the group list (see `Plan::run`).
            super::counters::note_at_run(&w);
            quant.per_expert().for_each(super::counters::note_at_run);
        }
        let plan = Plan {
            quant,
            x,
            weight: w,
            out,
            group_list,
            split,
            cumsum: group_list_type == CUMSUM,
            m,
            k,
            n,
        };
        Ok((SCRATCH_WORKSPACE, Arc::new(move || plan.run(OP)) as Kernel))
    })
}
