//! Emulated router and sampling top-k operators of a decode step (CANN 8.1.RC1, Atlas A2;
//! `shared/ascend/aclnn-fused-decode-ops.md` §3, §9.2):
//!
//! - `aclnnMoeGatingTopKSoftmax` (§3.1): softmax over the experts of each row, then its top k:
//!   `yOut` (x's dtype), `expertIdxOut` INT32, `rowIdxOut` INT32 with `rowIdx[r][j] = j*rows + r`
//!   (the column-major row index MoeInitRouting takes).
//! - `aclnnMoeGatingTopKSoftmaxV2` (§3.2): `renorm` 0 is V1 without rowIdx, optionally with the
//!   whole softmax (`softmaxResultOutOptional`, F32, x's shape); `renorm` 1 takes the top k of
//!   the logits and the softmax of those k (Qwen3-MoE / Mixtral routing in one launch).
//! - `aclnnTopk` (§9.2, `aclnn-ops.tsv`): the k largest (or smallest) of each lane along `dim`,
//!   values in self's dtype and INT64 indices.
//!
//! Numerics: x is read exactly into f32 (F16/BF16 widen exactly), the softmax runs in f32 (max,
//! blocked sum of the shifted exponentials, one division per element) and each output is
//! rounded once to its dtype, as the other emulated softmaxes do (`reduce.rs`). Ties in a top-k
//! go to the lower index and NaN counts as the largest value (as aclnnSort's emulation); the
//! sheets do not document the order of equal values (UNCERTAIN).
#![allow(
    missing_docs,
    non_snake_case,
    clippy::missing_safety_doc,
    clippy::too_many_arguments
)]

use std::sync::Arc;

use super::fault::{fault, Fault};
use super::meta::{tensor_arg, Kernel, TensorDesc};
use super::numerics::{Arith, Blocked, Domain, Elem};
use super::ops::{check_dtype_of, invalid, phase1, phase2_entry_points, Ex, Ws, SCRATCH_WORKSPACE};
use super::reduce::{along, lanes, normalize_dim, order, value_index_lanes};
use super::routing::{optional_arg, output, tiling};
use super::view::map;
use ascend_acl::dtype::DataType::{self, *};
use ascend_acl::types::status::*;
use ascend_acl::types::*;

/// x, yOut of both gating operators on Atlas A2 (§3.1, §3.2).
const GATING: &[DataType] = &[F16, BF16, F32];
/// The largest k of the gating operators (§3.1: `k <= 1024`).
const MAX_GATING_K: usize = 1024;
/// aclnnTopk's self on Atlas A2 (§9.2 and `aclnn-ops.tsv`: BF16 included; the header comment
/// that omits it is older than the docs).
const TOPK: &[DataType] = &[I8, U8, I16, I32, I64, F16, F32, F64, BF16];

phase2_entry_points!(
    aclnnMoeGatingTopKSoftmax,
    aclnnMoeGatingTopKSoftmaxV2,
    aclnnTopk
);

/// The positions of the `k` best values of `lane` (largest first, or smallest first), ties to
/// the lower position, NaN the largest.
fn top_k<T: Elem>(lane: &[T], k: usize, largest: bool) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..lane.len()).collect();
    // A stable sort keeps equal values in position order.
    idx.sort_by(|&a, &b| {
        let c = order(lane[a], lane[b]);
        if largest {
            c.reverse()
        } else {
            c
        }
    });
    idx.truncate(k);
    idx
}

/// The checked gating call (both versions).
struct Gating {
    op: &'static str,
    x: TensorDesc,
    finished: Option<TensorDesc>,
    k: usize,
    /// Top k of the logits, then the softmax of those k (V2 renorm 1).
    renorm: bool,
    y: TensorDesc,
    expert_idx: TensorDesc,
    /// V1's rowIdxOut.
    row_idx: Option<TensorDesc>,
    /// V2's softmaxResultOutOptional, when asked for (renorm 0 with the flag).
    softmax: Option<TensorDesc>,
}

impl Gating {
    fn run(&self) -> Result<(), Fault> {
        let op = self.op;
        let experts = *self.x.shape.last().expect("x is 2-D or 3-D");
        let rows = self.x.numel() / experts.max(1);
        let k = self.k;
        let my = map(op, "yOut", &self.y)?;
        let mi = map(op, "expertIdxOut", &self.expert_idx)?;
        let mr = self
            .row_idx
            .as_ref()
            .map(|t| map(op, "rowIdxOut", t))
            .transpose()?;
        let ms = self
            .softmax
            .as_ref()
            .map(|t| map(op, "softmaxResultOutOptional", t))
            .transpose()?;
        let mut mx = map(op, "x", &self.x)?;
        for out in [Some(&my), Some(&mi), mr.as_ref(), ms.as_ref()]
            .into_iter()
            .flatten()
        {
            mx.detach_from(out, false);
        }
        let get = mx.getter::<f32>();
        let finished: Option<Vec<bool>> = match &self.finished {
            Some(f) => {
                let m = map(op, "finishedOptional", f)?;
                let g = m.getter::<i128>();
                Some(super::view::Walk::of(f).map(|o| g(o) != 0).collect())
            }
            None => None,
        };
        let (set_y, set_i) = (my.setter::<f32>(), mi.setter::<i128>());
        let lane_of =
            |desc: &TensorDesc| lanes(desc, &along(desc.shape.len(), desc.shape.len() - 1));
        let mut sum = Blocked::new(Arith::Add);
        let (mut logits, mut probs) = (Vec::with_capacity(experts), Vec::with_capacity(experts));
        for (row, lane) in lane_of(&self.x).enumerate() {
            logits.clear();
            logits.extend(lane.map(&get));
            let base = row * k;
            let (picked, values): (Vec<usize>, Vec<f32>) = if self.renorm {
                // Top k of the logits, then the softmax of those k values.
                let picked = top_k(&logits, k, true);
                let m = logits[picked[0]];
                picked.iter().for_each(|&e| sum.push((logits[e] - m).exp()));
                let z = sum.finish();
                let values = picked.iter().map(|&e| (logits[e] - m).exp() / z).collect();
                (picked, values)
            } else {
                let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                logits.iter().for_each(|&v| sum.push((v - m).exp()));
                let z = sum.finish();
                probs.clear();
                probs.extend(logits.iter().map(|&v| (v - m).exp() / z));
                if let (Some(ms), Some(t)) = (&ms, &self.softmax) {
                    let set = ms.setter::<f32>();
                    for (j, &p) in probs.iter().enumerate() {
                        set(t.offset + row * experts + j, p);
                    }
                }
                let picked = top_k(&probs, k, true);
                let values = picked.iter().map(|&e| probs[e]).collect();
                (picked, values)
            };
            // A finished row's experts are all E, the expert count (§3.1); its yOut is computed
            // as any other row's (the docs say nothing of it: UNCERTAIN).
            let done = finished.as_ref().is_some_and(|f| f[row]);
            for (j, (&e, &v)) in picked.iter().zip(&values).enumerate() {
                set_y(self.y.offset + base + j, v);
                let id = if done { experts } else { e };
                set_i(self.expert_idx.offset + base + j, id as i128);
            }
            if let (Some(mr), Some(t)) = (&mr, &self.row_idx) {
                let set = mr.setter::<i128>();
                for j in 0..k {
                    set(t.offset + base + j, (j * rows + row) as i128);
                }
            }
        }
        Ok(())
    }
}

/// Phase one shared by both gating versions: x, finished, k and the two main outputs. Errors
/// as the op docs list them: dtypes 161002, ranks/finished/k 561002 (tiling).
unsafe fn gating_common(
    op: &'static str,
    x: *const aclTensor,
    finished_optional: *const aclTensor,
    k: i64,
    y_out: *const aclTensor,
    expert_idx_out: *const aclTensor,
) -> Result<
    (
        TensorDesc,
        Option<TensorDesc>,
        usize,
        TensorDesc,
        TensorDesc,
    ),
    Fault,
> {
    let x = tensor_arg(op, "x", x)?;
    let finished = optional_arg(op, "finishedOptional", finished_optional)?;
    let (y, idx) = (
        tensor_arg(op, "yOut", y_out)?,
        tensor_arg(op, "expertIdxOut", expert_idx_out)?,
    );
    check_dtype_of(op, "x", &x, GATING)?;
    check_dtype_of(op, "yOut", &y, GATING)?;
    check_dtype_of(op, "expertIdxOut", &idx, &[I32])?;
    if let Some(f) = &finished {
        check_dtype_of(op, "finishedOptional", f, &[Bool])?;
    }
    if !(2..=3).contains(&x.shape.len()) {
        return Err(tiling(op, format!("x {} must be 2-D or 3-D", x.describe())));
    }
    let lead = &x.shape[..x.shape.len() - 1];
    let experts = x.shape[x.shape.len() - 1];
    if let Some(f) = &finished {
        if f.shape != lead {
            return Err(tiling(
                op,
                format!(
                    "finishedOptional {} must be x {}'s shape without its last dim, {lead:?}",
                    f.describe(),
                    x.describe()
                ),
            ));
        }
    }
    if k <= 0 || k as usize > experts || k as usize > MAX_GATING_K {
        return Err(tiling(
            op,
            format!(
                "k {k} must be in (0, {}] for x {} (at most the expert count and {MAX_GATING_K})",
                experts.min(MAX_GATING_K),
                x.describe()
            ),
        ));
    }
    let k = k as usize;
    let mut shape = lead.to_vec();
    shape.push(k);
    if y.dtype != x.dtype {
        return Err(invalid(
            op,
            format!("yOut {} must have x {}'s dtype", y.describe(), x.describe()),
        ));
    }
    output(op, "yOut", &y, &shape, x.dtype)?;
    output(op, "expertIdxOut", &idx, &shape, I32)?;
    Ok((x, finished, k, y, idx))
}

pub unsafe extern "C" fn aclnnMoeGatingTopKSoftmaxGetWorkspaceSize(
    x: *const aclTensor,
    finished_optional: *const aclTensor,
    k: i64,
    y_out: *const aclTensor,
    expert_idx_out: *const aclTensor,
    row_idx_out: *const aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnMoeGatingTopKSoftmax";
    phase1(OP, ws, ex, || {
        let (x, finished, k, y, expert_idx) =
            gating_common(OP, x, finished_optional, k, y_out, expert_idx_out)?;
        let row_idx = tensor_arg(OP, "rowIdxOut", row_idx_out)?;
        check_dtype_of(OP, "rowIdxOut", &row_idx, &[I32])?;
        output(OP, "rowIdxOut", &row_idx, &y.shape, I32)?;
        let call = Gating {
            op: OP,
            x,
            finished,
            k,
            renorm: false,
            y,
            expert_idx,
            row_idx: Some(row_idx),
            softmax: None,
        };
        Ok((SCRATCH_WORKSPACE, Arc::new(move || call.run()) as Kernel))
    })
}

pub unsafe extern "C" fn aclnnMoeGatingTopKSoftmaxV2GetWorkspaceSize(
    x: *const aclTensor,
    finished_optional: *const aclTensor,
    k: i64,
    renorm: i64,
    output_softmax_result_flag: bool,
    y_out: *const aclTensor,
    expert_idx_out: *const aclTensor,
    softmax_result_out_optional: *const aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnMoeGatingTopKSoftmaxV2";
    phase1(OP, ws, ex, || {
        let (x, finished, k, y, expert_idx) =
            gating_common(OP, x, finished_optional, k, y_out, expert_idx_out)?;
        if !(0..=1).contains(&renorm) {
            return Err(tiling(OP, format!("renorm {renorm} must be 0 or 1")));
        }
        // The softmax result is written with renorm 0 and the flag only; with renorm 1 the flag
        // has no effect (§3.2, op doc). Asked for, it must be there (NULL: 161001).
        let softmax = if renorm == 0 && output_softmax_result_flag {
            let t = optional_arg(OP, "softmaxResultOutOptional", softmax_result_out_optional)?
                .ok_or_else(|| {
                    fault(
                        ACLNN_ERR_PARAM_NULLPTR,
                        format!(
                            "{OP}: softmaxResultOutOptional is NULL but outputSoftmaxResultFlag asks for it"
                        ),
                    )
                })?;
            // The op doc reports softmaxOut's dtype from tiling (561002).
            if t.dtype != F32 {
                return Err(tiling(
                    OP,
                    format!("softmaxResultOutOptional {} must be FLOAT32", t.describe()),
                ));
            }
            output(OP, "softmaxResultOutOptional", &t, &x.shape, F32)?;
            Some(t)
        } else {
            None
        };
        let call = Gating {
            op: OP,
            x,
            finished,
            k,
            renorm: renorm == 1,
            y,
            expert_idx,
            row_idx: None,
            softmax,
        };
        Ok((SCRATCH_WORKSPACE, Arc::new(move || call.run()) as Kernel))
    })
}

pub unsafe extern "C" fn aclnnTopkGetWorkspaceSize(
    self_: *const aclTensor,
    k: i64,
    dim: i64,
    largest: bool,
    sorted: bool,
    values_out: *mut aclTensor,
    indices_out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnTopk";
    phase1(OP, ws, ex, || {
        let x = tensor_arg(OP, "self", self_)?;
        let (values, indices) = (
            tensor_arg(OP, "valuesOut", values_out)?,
            tensor_arg(OP, "indicesOut", indices_out)?,
        );
        check_dtype_of(OP, "self", &x, TOPK)?;
        check_dtype_of(OP, "valuesOut", &values, TOPK)?;
        check_dtype_of(OP, "indicesOut", &indices, &[I64])?;
        if !(1..=8).contains(&x.shape.len()) {
            return Err(invalid(
                OP,
                format!("self {} must have 1 to 8 dims", x.describe()),
            ));
        }
        // §9.2: "`sorted` must be true" (the doc); the unsorted order is not emulated.
        if !sorted {
            return Err(invalid(
                OP,
                format!("sorted must be true (self {})", x.describe()),
            ));
        }
        let d = normalize_dim(OP, dim, x.shape.len())?;
        let n = x.shape[d];
        if k < 0 || k as usize > n {
            return Err(invalid(
                OP,
                format!(
                    "k {k} is outside [0, {n}] for self {} along dim {dim}",
                    x.describe()
                ),
            ));
        }
        let k = k as usize;
        let mut shape = x.shape.clone();
        shape[d] = k;
        for (name, t, dtype) in [
            ("valuesOut", &values, x.dtype),
            ("indicesOut", &indices, I64),
        ] {
            if t.shape != shape || t.dtype != dtype {
                return Err(invalid(
                    OP,
                    format!(
                        "{name} {} should be {shape:?} {dtype} for self {}, k {k}, dim {dim}",
                        t.describe(),
                        x.describe()
                    ),
                ));
            }
        }
        Ok((
            SCRATCH_WORKSPACE,
            Arc::new(move || match Domain::of(&[x.dtype]) {
                Domain::F32 => topk_run::<f32>(&x, d, k, largest, &values, &indices),
                Domain::F64 => topk_run::<f64>(&x, d, k, largest, &values, &indices),
                Domain::Int => topk_run::<i128>(&x, d, k, largest, &values, &indices),
            }) as Kernel,
        ))
    })
}

/// Top k of each lane along `d`.
fn topk_run<T: Elem>(
    x: &TensorDesc,
    d: usize,
    k: usize,
    largest: bool,
    values: &TensorDesc,
    indices: &TensorDesc,
) -> Result<(), Fault> {
    if k == 0 {
        return Ok(());
    }
    value_index_lanes::<T>("aclnnTopk", x, d, values, indices, |lane, emit| {
        for e in top_k(lane, k, largest) {
            emit(lane[e], e as i128);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Ordering;

    #[test]
    fn top_k_breaks_ties_to_the_lower_position_and_ranks_nan_largest() {
        let lane = [1.0f32, 3.0, f32::NAN, 3.0, -1.0];
        assert_eq!(top_k(&lane, 3, true), vec![2, 1, 3]);
        assert_eq!(top_k(&lane, 2, false), vec![4, 0]);
        assert_eq!(order(1.0f32, 2.0), Ordering::Less);
    }
}
