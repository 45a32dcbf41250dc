//! Emulated grouped matrix multiplication: `aclnnGroupedMatmulV4` (CANN 8.x, Atlas A2), the
//! non-quantised single-tensor path that MoE experts use. Groups run along M (`x [M, K]` rows
//! split over `weight [E, K, N]`, out `[M, N]`) or along K (the columns of `x [M, K]` and the
//! rows of `weight [K, N]` split, out `[E, M, N]`: the weight gradient of the M form). The group
//! list is a device tensor, read when the kernel runs.
//!
//! The emulation implements the float path only: multi-tensor lists, bias, quantisation and
//! fused activations are refused as not emulated rather than computed.
#![allow(
    missing_docs,
    non_snake_case,
    clippy::missing_safety_doc,
    clippy::too_many_arguments
)]

use std::ffi::c_void;
use std::sync::Arc;

use super::fault::{fault, Fault};
use super::meta::Kernel;
use super::meta::{tensor_arg, tensor_list_arg, TensorDesc};
use super::nn::gemm;
use super::ops::{check_dtype, invalid, phase1, phase2_entry_points, Ex, Ws, SCRATCH_WORKSPACE};
use super::view::{dense_f32, map, put_f32, take_f32, Mapped, Walk};
use ascend_acl::dtype::DataType::{self, *};
use ascend_acl::types::status::*;
use ascend_acl::types::*;
use std::borrow::Cow;

/// x, weight and out of the non-quantised path on Atlas A2 (all three of one type).
const GMM: &[DataType] = &[F16, BF16, F32];
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

/// The checked call: operands, grouped axis and matrix sizes (`[m, k] @ [k, n]` overall).
struct Plan {
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
            let per_group = (self.k * self.n * self.weight.dtype.size()) as u64;
            super::counters::ran(used as u64 * per_group);
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
        let optional: [(&str, *const c_void); 11] = [
            ("biasOptional", bias_optional.cast()),
            ("scaleOptional", scale_optional.cast()),
            ("offsetOptional", offset_optional.cast()),
            ("antiquantScaleOptional", antiquant_scale_optional.cast()),
            ("antiquantOffsetOptional", antiquant_offset_optional.cast()),
            ("perTokenScaleOptional", per_token_scale_optional.cast()),
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
                    format!("{name} is given: bias, quantisation and activation inputs are not emulated (float path only)"),
                ));
            }
        }
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
        for (name, t) in [("x", &x), ("weight", &w), ("out", &out)] {
            check_dtype(OP, name, t, GMM)?;
        }
        if x.dtype != w.dtype || x.dtype != out.dtype {
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
                    "groupListType {group_list_type}: float inputs take 0 (totals) or 1 (sizes)"
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
        if split == Split::M {
            // Which experts' weights the kernel reads depends on the group list (see `Plan::run`).
            super::counters::note_at_run(&w);
        }
        let plan = Plan {
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
