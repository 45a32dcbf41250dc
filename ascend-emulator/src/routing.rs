//! Emulated MoE routing operators of CANN's transformer library on Atlas A2:
//! `aclnnMoeInitRoutingV2` sorts the flattened top-k expert ids (stably, by expert), expands the
//! tokens in that expert-major order and counts tokens per expert (dropless, active or drop/pad
//! mode); `aclnnMoeTokenUnpermute` gathers expert outputs back into token order, weights them by
//! the routing probabilities and sums each token's top-k; `aclnnMoeFinalizeRoutingV2` does the
//! same and adds up to two residuals and a per-expert bias (`aclnn-fused-decode-ops.md` §4.7).
//!
//! `aclnnMoeInitRoutingQuantV2` routes as InitRoutingV2 does and quantises each expanded row to
//! int8 in the same pass (dynamic mode: a scale per row, `max|x| / 127`; prototype:
//! `aclnn-quant-attention-norm.md`; semantics: ops-transformer
//! `moe/moe_init_routing_quant_v2/docs/aclnnMoeInitRoutingQuantV2.md`, 计算公式 5-6).
//!
//! Index semantics, from the ops' kernels: the row index InitRoutingV2 writes, and Unpermute
//! reads, maps each token-major slot `t*K + k` to its row in the expanded tensor (the inverse
//! of the sorting permutation).
#![allow(
    missing_docs,
    non_snake_case,
    clippy::missing_safety_doc,
    clippy::too_many_arguments
)]

use super::fault::{fault, Fault};
use super::meta::Kernel;
use super::meta::{tensor_arg, TensorDesc};
use super::numerics::Elem;
use super::ops::{check_dtype, invalid, phase1, phase2_entry_points, Ex, Ws, SCRATCH_WORKSPACE};
use super::quant::quantise_row;
use super::view::{map, put_f32, Mapped, Walk};
use ascend_acl::dtype::DataType::{self, *};
use ascend_acl::types::status::*;
use ascend_acl::types::*;
use std::sync::Arc;

const TOKENS: &[DataType] = &[F16, BF16, F32];
const INDEX: &[DataType] = &[I32];
/// Largest top-k aclnnMoeTokenUnpermute takes on Atlas A2 (op doc).
const MAX_UNPERMUTE_TOP_K: usize = 512;

phase2_entry_points!(
    aclnnMoeInitRoutingV2,
    aclnnMoeInitRoutingQuantV2,
    aclnnMoeTokenUnpermute,
    aclnnMoeFinalizeRoutingV2
);

/// InitRoutingV2 reports its attribute and shape checks from tiling (op doc).
pub(crate) fn tiling(op: &str, message: impl std::fmt::Display) -> Fault {
    fault(ACLNN_ERR_INNER_TILING_ERROR, format!("{op}: {message}"))
}

pub(crate) fn dense(op: &str, name: &str, t: &TensorDesc) -> Result<(), Fault> {
    if t.is_contiguous() {
        Ok(())
    } else {
        Err(invalid(
            op,
            format!("{name} {} must be contiguous", t.describe()),
        ))
    }
}

/// An output of `shape` and `dtype`, contiguous.
pub(crate) fn output(
    op: &str,
    name: &str,
    t: &TensorDesc,
    shape: &[usize],
    dtype: DataType,
) -> Result<(), Fault> {
    if t.shape != shape || t.dtype != dtype {
        return Err(invalid(
            op,
            format!("{name} {} should be {shape:?} {dtype}", t.describe()),
        ));
    }
    dense(op, name, t)
}

/// Writes rows of the 2-D `src` into the dense `[from.len(), h]` `dst`, row `r` of `dst` from
/// row `from[r]` of `src` (`None` gives a zero row); elements are copied as they are.
fn pick_rows(src: &Mapped, dst: &Mapped, from: &[Option<usize>]) {
    let (s, d) = (&src.desc, &dst.desc);
    let h = s.shape[1];
    let zero = [0u8; 8];
    for (r, f) in from.iter().enumerate() {
        for j in 0..h {
            let to = d.offset + r * h + j;
            match f {
                Some(row) => {
                    dst.copy_from(to, src, s.offset + row * s.strides[0] + j * s.strides[1])
                }
                None => dst.put_bytes(to, &zero),
            }
        }
    }
}

/// The elements of a small operand (indices, probabilities), read whole in `T`.
pub(crate) fn read_all<T: Elem>(op: &str, name: &str, t: &TensorDesc) -> Result<Vec<T>, Fault> {
    let m = map(op, name, t)?;
    let get = m.getter::<T>();
    Ok(Walk::of(t).map(get).collect())
}

/// How InitRoutingV2 lays out its expanded tokens.
#[derive(Debug, Clone, Copy)]
enum Layout {
    /// `[rows, h]`: the first `rows` slots in expert-major order (all of them when dropless).
    Dropless { rows: usize },
    /// `[experts, capacity, h]`: each expert's first `capacity` slots, zero padded.
    Capacity { capacity: usize },
}

/// The checked InitRoutingV2 call.
struct InitRouting {
    x: TensorDesc,
    expert_idx: TensorDesc,
    expanded_x: TensorDesc,
    expanded_row_idx: TensorDesc,
    /// Per-expert counts, with `true` for running totals.
    counts: Option<(TensorDesc, bool)>,
    top_k: usize,
    experts: usize,
    layout: Layout,
    /// Dynamic quantisation (InitRoutingQuantV2): the per-row scale output.
    quant_scale: Option<TensorDesc>,
}

impl InitRouting {
    fn run(&self, op: &str) -> Result<(), Fault> {
        let ids: Vec<i64> = read_all::<i128>(op, "expertIdx", &self.expert_idx)?
            .into_iter()
            .map(|v| v as i64)
            .collect();
        // Expert ids index the per-expert counts and slots whenever those are produced.
        let bounded = self.counts.is_some() || matches!(self.layout, Layout::Capacity { .. });
        for (slot, &id) in ids.iter().enumerate() {
            let why = if id < 0 {
                "negative".to_string()
            } else if bounded && id as usize >= self.experts {
                format!("not below expertNum {}", self.experts)
            } else {
                continue;
            };
            return Err(fault(
                ACL_ERROR_RT_AICORE_EXCEPTION,
                format!("{op}: expertIdx[{slot}] = {id} is {why}"),
            ));
        }
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by_key(|&slot| ids[slot]);
        let mut histogram = vec![0i64; self.experts];
        if bounded {
            for &id in &ids {
                histogram[id as usize] += 1;
            }
        }
        let mut row_idx = vec![-1i64; ids.len()];
        let picked: Vec<Option<usize>> = match self.layout {
            Layout::Dropless { rows } => {
                for (i, &slot) in order.iter().enumerate() {
                    row_idx[slot] = i as i64;
                }
                order[..rows]
                    .iter()
                    .map(|&slot| Some(slot / self.top_k))
                    .collect()
            }
            Layout::Capacity { capacity } => {
                // Slots past an expert's capacity are dropped; their row index stays -1 (the
                // value the kernel initialises it with).
                let mut picked = vec![None; self.experts * capacity];
                let mut start = 0;
                for (e, &count) in histogram.iter().enumerate() {
                    let count = count as usize;
                    for (rank, &slot) in order[start..start + count].iter().enumerate() {
                        if rank < capacity {
                            picked[e * capacity + rank] = Some(slot / self.top_k);
                            row_idx[slot] = (e * capacity + rank) as i64;
                        }
                    }
                    start += count;
                }
                picked
            }
        };
        let dst = map(op, "expandedXOut", &self.expanded_x)?;
        let mut tokens = map(op, "x", &self.x)?;
        tokens.detach_from(&dst, false);
        match &self.quant_scale {
            None => pick_rows(&tokens, &dst, &picked),
            Some(scale_out) => {
                // Each token is read once (as f32, exact) and written to each of its rows.
                let (s, h) = (&tokens.desc, self.x.shape[1]);
                let get = tokens.getter::<f32>();
                let put = dst.setter::<i128>();
                let (mut row, mut q) = (vec![0f32; h], vec![0i8; h]);
                let mut scales = Vec::with_capacity(picked.len());
                for (r, from) in picked.iter().enumerate() {
                    let t = from.expect("the quantised form is dropless: every row has a token");
                    for (j, v) in row.iter_mut().enumerate() {
                        *v = get(s.offset + t * s.strides[0] + j * s.strides[1]);
                    }
                    scales.push(quantise_row(&row, &mut q));
                    let base = self.expanded_x.offset + r * h;
                    for (j, &v) in q.iter().enumerate() {
                        put(base + j, v as i128);
                    }
                }
                let m = map(op, "dynamicQuantScaleOut", scale_out)?;
                put_f32(&m, &mut Walk::of(scale_out), &scales);
            }
        }
        write_all(op, "expandedRowIdxOut", &self.expanded_row_idx, row_idx)?;
        if let Some((out, cumsum)) = &self.counts {
            let values = if *cumsum {
                histogram
                    .iter()
                    .scan(0, |total, &c| {
                        *total += c;
                        Some(*total)
                    })
                    .collect()
            } else {
                histogram
            };
            write_all(op, "expert token counts", out, values)?;
        }
        Ok(())
    }
}

/// Writes integers (row-major) to a small output.
fn write_all(op: &str, name: &str, t: &TensorDesc, values: Vec<i64>) -> Result<(), Fault> {
    let m = map(op, name, t)?;
    let set = m.setter::<i128>();
    Walk::of(t).zip(values).for_each(|(o, v)| set(o, v as i128));
    Ok(())
}

/// An optional output: `None` when the pointer is NULL.
pub(crate) unsafe fn optional_arg(
    op: &str,
    name: &str,
    p: *const aclTensor,
) -> Result<Option<TensorDesc>, Fault> {
    if p.is_null() {
        Ok(None)
    } else {
        tensor_arg(op, name, p).map(Some)
    }
}

/// A required optional output: present because a flag asks for it.
fn required(op: &str, name: &str, t: Option<TensorDesc>) -> Result<TensorDesc, Fault> {
    t.ok_or_else(|| {
        fault(
            ACLNN_ERR_PARAM_NULLPTR,
            format!("{op}: {name} is NULL but its flag asks for it"),
        )
    })
}

pub unsafe extern "C" fn aclnnMoeInitRoutingV2GetWorkspaceSize(
    x: *const aclTensor,
    expert_idx: *const aclTensor,
    active_num: i64,
    expert_capacity: i64,
    expert_num: i64,
    drop_pad_mode: i64,
    expert_tokens_count_or_cumsum_flag: i64,
    expert_tokens_before_capacity_flag: bool,
    expanded_x_out: *const aclTensor,
    expanded_row_idx_out: *const aclTensor,
    expert_tokens_count_or_cumsum_out: *const aclTensor,
    expert_tokens_before_capacity_out: *const aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnMoeInitRoutingV2";
    phase1(OP, ws, ex, || {
        let (x, idx) = (
            tensor_arg(OP, "x", x)?,
            tensor_arg(OP, "expertIdx", expert_idx)?,
        );
        let (expanded_x, expanded_row_idx) = (
            tensor_arg(OP, "expandedXOut", expanded_x_out)?,
            tensor_arg(OP, "expandedRowIdxOut", expanded_row_idx_out)?,
        );
        let count_out = optional_arg(
            OP,
            "expertTokensCountOrCumsumOut",
            expert_tokens_count_or_cumsum_out,
        )?;
        let before_out = optional_arg(
            OP,
            "expertTokensBeforeCapacityOut",
            expert_tokens_before_capacity_out,
        )?;
        check_dtype(OP, "x", &x, TOKENS)?;
        check_dtype(OP, "expertIdx", &idx, INDEX)?;
        if x.shape.len() != 2 || idx.shape.len() != 2 || x.shape[0] != idx.shape[0] {
            return Err(tiling(
                OP,
                format!(
                    "x {} and expertIdx {} must be [numRows, h] and [numRows, k] (A2 takes 2-D expertIdx)",
                    x.describe(),
                    idx.describe()
                ),
            ));
        }
        if active_num < 0 || expert_capacity < 0 || expert_num < 0 {
            return Err(tiling(
                OP,
                format!("activeNum {active_num}, expertCapacity {expert_capacity} and expertNum {expert_num} must be >= 0"),
            ));
        }
        if !(0..=1).contains(&drop_pad_mode)
            || !(0..=2).contains(&expert_tokens_count_or_cumsum_flag)
        {
            return Err(tiling(
                OP,
                format!("dropPadMode {drop_pad_mode} (0 or 1) or expertTokensCountOrCumsumFlag {expert_tokens_count_or_cumsum_flag} (0, 1 or 2) is not supported"),
            ));
        }
        let (rows, h, top_k) = (x.shape[0], x.shape[1], idx.shape[1]);
        let slots = rows * top_k;
        let experts = expert_num as usize;
        let counted = expert_tokens_count_or_cumsum_flag > 0;
        let (layout, counts) = if drop_pad_mode == 1 {
            let capacity = expert_capacity as usize;
            if experts == 0 || capacity == 0 || capacity > rows {
                return Err(tiling(
                    OP,
                    format!("drop/pad mode needs expertNum > 0 and expertCapacity in (0, {rows}], got {experts} and {capacity}"),
                ));
            }
            if counted {
                return Err(tiling(
                    OP,
                    "expertTokensCountOrCumsumOut is produced only without drop/pad",
                ));
            }
            output(
                OP,
                "expandedXOut",
                &expanded_x,
                &[experts, capacity, h],
                x.dtype,
            )?;
            let counts = if expert_tokens_before_capacity_flag {
                let out = required(OP, "expertTokensBeforeCapacityOut", before_out)?;
                output(OP, "expertTokensBeforeCapacityOut", &out, &[experts], I32)?;
                Some((out, false))
            } else {
                None
            };
            (Layout::Capacity { capacity }, counts)
        } else {
            if expert_tokens_before_capacity_flag {
                return Err(tiling(
                    OP,
                    "expertTokensBeforeCapacityOut is produced only in drop/pad mode",
                ));
            }
            let rows = if active_num == 0 {
                slots
            } else {
                slots.min(active_num as usize)
            };
            output(OP, "expandedXOut", &expanded_x, &[rows, h], x.dtype)?;
            let counts = if counted {
                if experts == 0 {
                    return Err(tiling(
                        OP,
                        "expertNum must be > 0 to count tokens per expert",
                    ));
                }
                let out = required(OP, "expertTokensCountOrCumsumOut", count_out)?;
                output(OP, "expertTokensCountOrCumsumOut", &out, &[experts], I32)?;
                Some((out, expert_tokens_count_or_cumsum_flag == 1))
            } else {
                None
            };
            (Layout::Dropless { rows }, counts)
        };
        output(OP, "expandedRowIdxOut", &expanded_row_idx, &[slots], I32)?;
        let call = InitRouting {
            x,
            expert_idx: idx,
            expanded_x,
            expanded_row_idx,
            counts,
            top_k,
            experts,
            layout,
            quant_scale: None,
        };
        Ok((SCRATCH_WORKSPACE, Arc::new(move || call.run(OP)) as Kernel))
    })
}

/// quantMode: dynamic (a scale per row, computed by the kernel).
const DYNAMIC_QUANT: i64 = 1;

pub unsafe extern "C" fn aclnnMoeInitRoutingQuantV2GetWorkspaceSize(
    x: *const aclTensor,
    expert_idx: *const aclTensor,
    scale_optional: *const aclTensor,
    offset_optional: *const aclTensor,
    active_num: i64,
    expert_capacity: i64,
    expert_num: i64,
    drop_pad_mode: i64,
    expert_tokens_count_or_cumsum_flag: i64,
    expert_tokens_before_capacity_flag: bool,
    quant_mode: i64,
    expanded_x_out: *const aclTensor,
    expanded_row_idx_out: *const aclTensor,
    expert_tokens_count_or_cumsum_out_optional: *const aclTensor,
    expert_tokens_before_capacity_out_optional: *const aclTensor,
    dynamic_quant_scale_out_optional: *const aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnMoeInitRoutingQuantV2";
    phase1(OP, ws, ex, || {
        let (x, idx) = (
            tensor_arg(OP, "x", x)?,
            tensor_arg(OP, "expertIdx", expert_idx)?,
        );
        let (expanded_x, expanded_row_idx) = (
            tensor_arg(OP, "expandedXOut", expanded_x_out)?,
            tensor_arg(OP, "expandedRowIdxOut", expanded_row_idx_out)?,
        );
        let count_out = optional_arg(
            OP,
            "expertTokensCountOrCumsumOutOptional",
            expert_tokens_count_or_cumsum_out_optional,
        )?;
        let scale_out = optional_arg(
            OP,
            "dynamicQuantScaleOutOptional",
            dynamic_quant_scale_out_optional,
        )?;
        check_dtype(OP, "x", &x, TOKENS)?;
        check_dtype(OP, "expertIdx", &idx, INDEX)?;
        check_dtype(OP, "expandedXOut", &expanded_x, &[I8])?;
        if x.shape.len() != 2 || idx.shape.len() != 2 || x.shape[0] != idx.shape[0] {
            return Err(tiling(
                OP,
                format!(
                    "x {} and expertIdx {} must be [numRows, h] and [numRows, k]",
                    x.describe(),
                    idx.describe()
                ),
            ));
        }
        if active_num < 0 || expert_capacity < 0 || expert_num < 0 {
            return Err(tiling(
                OP,
                format!("activeNum {active_num}, expertCapacity {expert_capacity} and expertNum {expert_num} must be >= 0"),
            ));
        }
        if !(0..=1).contains(&drop_pad_mode)
            || !(0..=2).contains(&expert_tokens_count_or_cumsum_flag)
            || !(0..=1).contains(&quant_mode)
        {
            return Err(tiling(
                OP,
                format!("dropPadMode {drop_pad_mode} (0 or 1), expertTokensCountOrCumsumFlag {expert_tokens_count_or_cumsum_flag} (0, 1 or 2) or quantMode {quant_mode} (0 or 1) is not supported"),
            ));
        }
        // The emulated subset: what the quantised MoE path calls (dynamic, dropless or active,
        // no smooth scale); the op's other modes are refused rather than computed.
        if quant_mode != DYNAMIC_QUANT
            || drop_pad_mode != 0
            || expert_tokens_before_capacity_flag
            || !scale_optional.is_null()
            || !offset_optional.is_null()
            || !expert_tokens_before_capacity_out_optional.is_null()
        {
            return Err(invalid(
                OP,
                format!("quantMode {quant_mode}, dropPadMode {drop_pad_mode}: only dynamic quantisation (1) without drop/pad (0), scaleOptional, offsetOptional or before-capacity counts is emulated"),
            ));
        }
        let (rows, h, top_k) = (x.shape[0], x.shape[1], idx.shape[1]);
        let slots = rows * top_k;
        let experts = expert_num as usize;
        let expanded = if active_num == 0 {
            slots
        } else {
            slots.min(active_num as usize)
        };
        output(OP, "expandedXOut", &expanded_x, &[expanded, h], I8)?;
        output(OP, "expandedRowIdxOut", &expanded_row_idx, &[slots], I32)?;
        let scale_out = scale_out.ok_or_else(|| {
            fault(
                ACLNN_ERR_PARAM_NULLPTR,
                format!("{OP}: dynamicQuantScaleOutOptional is NULL in dynamic quantMode"),
            )
        })?;
        output(
            OP,
            "dynamicQuantScaleOutOptional",
            &scale_out,
            &[expanded],
            F32,
        )?;
        let counts = if expert_tokens_count_or_cumsum_flag > 0 {
            if experts == 0 {
                return Err(tiling(
                    OP,
                    "expertNum must be > 0 to count tokens per expert",
                ));
            }
            let out = required(OP, "expertTokensCountOrCumsumOutOptional", count_out)?;
            output(
                OP,
                "expertTokensCountOrCumsumOutOptional",
                &out,
                &[experts],
                I32,
            )?;
            Some((out, expert_tokens_count_or_cumsum_flag == 1))
        } else {
            None
        };
        let call = InitRouting {
            x,
            expert_idx: idx,
            expanded_x,
            expanded_row_idx,
            counts,
            top_k,
            experts,
            layout: Layout::Dropless { rows: expanded },
            quant_scale: Some(scale_out),
        };
        Ok((SCRATCH_WORKSPACE, Arc::new(move || call.run(OP)) as Kernel))
    })
}

pub unsafe extern "C" fn aclnnMoeTokenUnpermuteGetWorkspaceSize(
    permuted_tokens: *const aclTensor,
    sorted_indices: *const aclTensor,
    probs_optional: *const aclTensor,
    padded_mode: bool,
    restore_shape_optional: *const aclIntArray,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnMoeTokenUnpermute";
    phase1(OP, ws, ex, || {
        let (tokens, indices, out) = (
            tensor_arg(OP, "permutedTokens", permuted_tokens)?,
            tensor_arg(OP, "sortedIndices", sorted_indices)?,
            tensor_arg(OP, "out", out)?,
        );
        let probs = optional_arg(OP, "probsOptional", probs_optional)?;
        if padded_mode || !restore_shape_optional.is_null() {
            return Err(invalid(
                OP,
                "only paddedMode false without restoreShapeOptional is supported",
            ));
        }
        check_dtype(OP, "permutedTokens", &tokens, TOKENS)?;
        check_dtype(OP, "sortedIndices", &indices, INDEX)?;
        if tokens.shape.len() != 2 || indices.shape.len() != 1 {
            return Err(invalid(
                OP,
                format!(
                    "permutedTokens {} must be 2-D and sortedIndices {} 1-D",
                    tokens.describe(),
                    indices.describe()
                ),
            ));
        }
        let slots = indices.numel();
        let (count, top_k) = match &probs {
            Some(p) => {
                check_dtype(OP, "probsOptional", p, TOKENS)?;
                if p.shape.len() != 2 || p.numel() != slots {
                    return Err(invalid(
                        OP,
                        format!(
                            "probsOptional {} must be [tokens, topK] with tokens * topK = {slots}",
                            p.describe()
                        ),
                    ));
                }
                (p.shape[0], p.shape[1])
            }
            None => (slots, 1),
        };
        if top_k > MAX_UNPERMUTE_TOP_K {
            return Err(invalid(
                OP,
                format!("topK {top_k} exceeds {MAX_UNPERMUTE_TOP_K}"),
            ));
        }
        let h = tokens.shape[1];
        output(OP, "out", &out, &[count, h], tokens.dtype)?;
        let rows = tokens.shape[0];
        Ok((
            SCRATCH_WORKSPACE,
            Arc::new(move || {
                let mo = map(OP, "out", &out)?;
                let mut mt = map(OP, "permutedTokens", &tokens)?;
                mt.detach_from(&mo, false);
                let value = mt.getter::<f32>();
                let (t0, ts) = (tokens.offset, &tokens.strides);
                let rows_of = read_all::<i128>(OP, "sortedIndices", &indices)?;
                let weights = probs
                    .as_ref()
                    .map(|p| read_all::<f32>(OP, "probsOptional", p))
                    .transpose()?;
                // Per token, in f32 as the vector unit does: the first kept slot's row times
                // its probability, plus each further one; slots whose row lies past
                // permutedTokens (dropped) or whose probability is 0 are skipped.
                let mut acc = vec![0f32; count * h];
                for (slot, &row) in rows_of.iter().enumerate() {
                    let row = row as i64;
                    if row < 0 {
                        return Err(fault(
                            ACL_ERROR_RT_AICORE_EXCEPTION,
                            format!("{OP}: sortedIndices[{slot}] = {row} is negative"),
                        ));
                    }
                    let p = weights.as_ref().map_or(1.0, |w| w[slot]);
                    if row as usize >= rows || p == 0.0 {
                        continue;
                    }
                    let (row, t) = (row as usize, slot / top_k);
                    for (j, a) in acc[t * h..(t + 1) * h].iter_mut().enumerate() {
                        *a += value(t0 + row * ts[0] + j * ts[1]) * p;
                    }
                }
                let set = mo.setter::<f32>();
                Walk::of(&out).zip(acc).for_each(|(o, v)| set(o, v));
                Ok(())
            }) as Kernel,
        ))
    })
}

/// `out[i] = x1[i] + x2[i] + sum_k scales[i, k] * (expandedX[expandedRowIdx[slot(i, k)]] +
/// bias[expertIdx[i, k]])` (§4.7), every operand optional but expandedX, expandedRowIdx and
/// out; in f32, rounded once to the tokens' type (ASSUMPTION: the kernel accumulates 16-bit
/// types in f32, as TokenUnpermute does). `dropPadMode` 0 reads the row index column-major
/// (`i + k*N`, after InitRouting V1), 2 row-major (`i*K + k`, after InitRoutingV2). Stricter than
/// CANN: the drop/pad modes 1 and 3 (expandedX `[E, C, H]`) are refused, as nothing here
/// produces that layout; a row index outside `[0, N*K)` is an AI Core error, as no dropless
/// routing writes one.
pub unsafe extern "C" fn aclnnMoeFinalizeRoutingV2GetWorkspaceSize(
    expanded_x: *const aclTensor,
    expanded_row_idx: *const aclTensor,
    x1_optional: *const aclTensor,
    x2_optional: *const aclTensor,
    bias_optional: *const aclTensor,
    scales_optional: *const aclTensor,
    expert_idx_optional: *const aclTensor,
    drop_pad_mode: i64,
    out: *const aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnMoeFinalizeRoutingV2";
    phase1(OP, ws, ex, || {
        let (expanded, row_idx, out) = (
            tensor_arg(OP, "expandedX", expanded_x)?,
            tensor_arg(OP, "expandedRowIdx", expanded_row_idx)?,
            tensor_arg(OP, "out", out)?,
        );
        let x1 = optional_arg(OP, "x1Optional", x1_optional)?;
        let x2 = optional_arg(OP, "x2Optional", x2_optional)?;
        let bias = optional_arg(OP, "biasOptional", bias_optional)?;
        let scales = optional_arg(OP, "scalesOptional", scales_optional)?;
        let expert_idx = optional_arg(OP, "expertIdxOptional", expert_idx_optional)?;
        let column_major = match drop_pad_mode {
            0 => true,
            2 => false,
            1 | 3 => {
                return Err(invalid(
                    OP,
                    format!(
                        "dropPadMode {drop_pad_mode} (drop/pad, expandedX [E, C, H]) is not \
                         emulated: only the dropless modes 0 and 2"
                    ),
                ))
            }
            m => return Err(invalid(OP, format!("dropPadMode {m} is not 0, 1, 2 or 3"))),
        };
        check_dtype(OP, "expandedX", &expanded, TOKENS)?;
        check_dtype(OP, "expandedRowIdx", &row_idx, INDEX)?;
        if expanded.shape.len() != 2 || row_idx.shape.len() != 1 {
            return Err(invalid(
                OP,
                format!(
                    "expandedX {} must be 2-D and expandedRowIdx {} 1-D",
                    expanded.describe(),
                    row_idx.describe()
                ),
            ));
        }
        let slots = row_idx.numel();
        let (n, k) = match &scales {
            Some(sc) => (
                sc.shape.first().copied().unwrap_or(0),
                sc.shape.get(1).copied().unwrap_or(0),
            ),
            None => (slots, 1),
        };
        let h = expanded.shape[1];
        let same = |name: &str, t: &TensorDesc, shape: &[usize]| -> Result<(), Fault> {
            check_dtype(OP, name, t, &[expanded.dtype])?;
            if t.shape != shape {
                return Err(invalid(
                    OP,
                    format!("{name} {} should be {shape:?}", t.describe()),
                ));
            }
            Ok(())
        };
        if let Some(sc) = &scales {
            same("scalesOptional", sc, &[n, k])?;
        }
        if n * k != slots || expanded.shape[0] != slots {
            return Err(invalid(
                OP,
                format!(
                    "expandedX {} and expandedRowIdx {} must hold N*K = {} rows",
                    expanded.describe(),
                    row_idx.describe(),
                    n * k
                ),
            ));
        }
        if x2.is_some() && x1.is_none() {
            return Err(invalid(OP, "x2Optional needs x1Optional"));
        }
        for (name, x) in [("x1Optional", &x1), ("x2Optional", &x2)] {
            if let Some(x) = x {
                same(name, x, &[n, h])?;
            }
        }
        let experts = match (&bias, &expert_idx) {
            (Some(b), Some(e)) => {
                check_dtype(OP, "biasOptional", b, &[expanded.dtype])?;
                check_dtype(OP, "expertIdxOptional", e, INDEX)?;
                if b.shape.len() != 2 || b.shape[1] != h || e.shape != [n, k] {
                    return Err(invalid(
                        OP,
                        format!(
                            "biasOptional {} must be [E, {h}] and expertIdxOptional {} [{n}, {k}]",
                            b.describe(),
                            e.describe()
                        ),
                    ));
                }
                b.shape[0]
            }
            (Some(_), None) => return Err(invalid(OP, "biasOptional needs expertIdxOptional")),
            _ => 0,
        };
        output(OP, "out", &out, &[n, h], expanded.dtype)?;
        Ok((
            SCRATCH_WORKSPACE,
            Arc::new(move || {
                let mo = map(OP, "out", &out)?;
                let mut mx = map(OP, "expandedX", &expanded)?;
                mx.detach_from(&mo, false);
                let value = mx.getter::<f32>();
                let (x0, xs) = (expanded.offset, &expanded.strides);
                let rows_of = read_all::<i128>(OP, "expandedRowIdx", &row_idx)?;
                let small = |name: &str, t: &Option<TensorDesc>| {
                    t.as_ref().map(|t| read_all::<f32>(OP, name, t)).transpose()
                };
                let (x1, x2) = (small("x1Optional", &x1)?, small("x2Optional", &x2)?);
                let (bias, scales) = (
                    small("biasOptional", &bias)?,
                    small("scalesOptional", &scales)?,
                );
                let ids = expert_idx
                    .as_ref()
                    .filter(|_| bias.is_some())
                    .map(|e| read_all::<i128>(OP, "expertIdxOptional", e))
                    .transpose()?;
                let mut acc = vec![0f32; n * h];
                for residual in [x1, x2].into_iter().flatten() {
                    acc.iter_mut().zip(&residual).for_each(|(a, r)| *a += r);
                }
                for i in 0..n {
                    for kk in 0..k {
                        let slot = if column_major { i + kk * n } else { i * k + kk };
                        let row = rows_of[slot];
                        if row < 0 || row as usize >= slots {
                            return Err(fault(
                                ACL_ERROR_RT_AICORE_EXCEPTION,
                                format!(
                                    "{OP}: expandedRowIdx[{slot}] = {row} is outside [0, {slots})"
                                ),
                            ));
                        }
                        let p = scales.as_ref().map_or(1.0, |s| s[i * k + kk]);
                        let expert = match &ids {
                            Some(ids) => {
                                let e = ids[i * k + kk];
                                if e < 0 || e as usize >= experts {
                                    return Err(fault(
                                        ACL_ERROR_RT_AICORE_EXCEPTION,
                                        format!("{OP}: expertIdxOptional[{i}, {kk}] = {e} is outside [0, {experts})"),
                                    ));
                                }
                                Some(e as usize)
                            }
                            None => None,
                        };
                        let row = row as usize;
                        for (j, a) in acc[i * h..(i + 1) * h].iter_mut().enumerate() {
                            let b = match (&bias, expert) {
                                (Some(b), Some(e)) => b[e * h + j],
                                _ => 0.0,
                            };
                            *a += (value(x0 + row * xs[0] + j * xs[1]) + b) * p;
                        }
                    }
                }
                let set = mo.setter::<f32>();
                Walk::of(&out).zip(acc).for_each(|(o, v)| set(o, v));
                Ok(())
            }) as Kernel,
        ))
    })
}
