//! Emulated `aclnnInplaceScatterUpdate` (CANN 8.1.RC1, Atlas A2;
//! `shared/ascend/aclnn-fused-decode-ops.md` §9.1, ops-nn `index/scatter/docs/
//! aclnnInplaceScatterUpdate.md`): the KV-cache write of a decode step in one launch. For each
//! batch row `i` of `updates`, `data[i][j][indices[i] + s][l] = updates[i][j][s][l]` (axis -2)
//! or `data[i][j][k][indices[i] + l] = updates[i][j][k][l]` (axis -1).
//!
//! What the emulation takes, the stricter of the sheet and the later doc where they differ:
//! - data and updates 4-D (the 8.1.RC1 header, §9.1; later docs take 2-8 dims), one dtype of
//!   F16, F32, INT8, BF16 (the header's list; later docs add UINT8, INT32); any strides;
//! - indices 1-D (the header; later docs also take 0-D and 2-D), INT32 or INT64, one per batch
//!   row of updates, `updates.shape[0] <= data.shape[0]`;
//! - axis -2 or -1 (or 2, 3: the same dims counted from the front). §9.1 documents only these
//!   two; the later doc's `(-rank, rank), not 0` would also allow axis 1, refused here;
//! - updates of data's shape except dim 0 and the axis, `updates.shape[axis] <=
//!   data.shape[axis]`; no empty tensor;
//! - the indices within the unified buffer (the doc's `indices bytes + 224 <= UB`).
//!
//! A negative index, or one whose rows run past data's axis (when `indices[i] +
//! updates.shape[axis]` exceeds `data.shape[axis]`), is an AI Core error naming it (the doc:
//! "index data cannot be out of bounds"). Elements are copied as they are (no conversion).
#![allow(
    missing_docs,
    non_snake_case,
    clippy::missing_safety_doc,
    clippy::too_many_arguments
)]

use std::sync::Arc;

use super::fault::{fault, Fault};
use super::meta::{tensor_arg, Kernel, TensorDesc};
use super::ops::{check_dtype_of, invalid, phase1, phase2_entry_points, Ex, Ws};
use super::rope::UB_BYTES;
use super::routing::{read_all, tiling};
use super::view::map;
use ascend_acl::dtype::DataType::{self, *};
use ascend_acl::types::status::*;
use ascend_acl::types::*;

/// data and updates on Atlas A2 (the 8.1.RC1 header, §9.1).
const SCATTER_UPDATE: &[DataType] = &[F16, F32, I8, BF16];
const INDICES: &[DataType] = &[I32, I64];
/// Unified-buffer bytes the op keeps besides its indices (op doc).
const UB_RESERVED: usize = 224;

phase2_entry_points!(aclnnInplaceScatterUpdate);

pub unsafe extern "C" fn aclnnInplaceScatterUpdateGetWorkspaceSize(
    data: *mut aclTensor,
    indices: *const aclTensor,
    updates: *const aclTensor,
    axis: i64,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnInplaceScatterUpdate";
    phase1(OP, ws, ex, || {
        let (data, indices, updates) = (
            tensor_arg(OP, "data", data)?,
            tensor_arg(OP, "indices", indices)?,
            tensor_arg(OP, "updates", updates)?,
        );
        check_dtype_of(OP, "data", &data, SCATTER_UPDATE)?;
        check_dtype_of(OP, "updates", &updates, SCATTER_UPDATE)?;
        check_dtype_of(OP, "indices", &indices, INDICES)?;
        let shapes = || {
            format!(
                "data {}, indices {}, updates {}, axis {axis}",
                data.describe(),
                indices.describe(),
                updates.describe()
            )
        };
        if updates.dtype != data.dtype {
            return Err(invalid(
                OP,
                format!("{}: updates must have data's dtype", shapes()),
            ));
        }
        if data.shape.len() != 4 || updates.shape.len() != 4 {
            return Err(invalid(
                OP,
                format!("{}: data and updates must be 4-D", shapes()),
            ));
        }
        if indices.shape.len() != 1 {
            return Err(invalid(
                OP,
                format!("{}: indices must be 1-D, one per batch row", shapes()),
            ));
        }
        if [&data, &indices, &updates].iter().any(|t| t.numel() == 0) {
            return Err(invalid(
                OP,
                format!("{}: empty tensors are not supported", shapes()),
            ));
        }
        let ax = match axis {
            -2 | 2 => 2,
            -1 | 3 => 3,
            _ => {
                return Err(invalid(
                    OP,
                    format!("{}: axis must be -2 or -1 (2 or 3)", shapes()),
                ))
            }
        };
        let rows = updates.shape[0];
        let other_dims_agree = (1..4).all(|i| i == ax || updates.shape[i] == data.shape[i]);
        if indices.shape[0] != rows
            || rows > data.shape[0]
            || !other_dims_agree
            || updates.shape[ax] > data.shape[ax]
        {
            return Err(invalid(
                OP,
                format!(
                    "{}: indices needs updates' dim 0, updates at most data's dim 0 and its axis, and data's other dims",
                    shapes()
                ),
            ));
        }
        let ub = indices.numel() * indices.dtype.size() + UB_RESERVED;
        if ub > UB_BYTES {
            // The doc: "not supported"; the status is UNCERTAIN (the tiling's, 561002, here).
            return Err(tiling(
                OP,
                format!(
                    "{}: the indices need {ub} bytes of unified buffer, more than {UB_BYTES}",
                    shapes()
                ),
            ));
        }
        Ok((
            0,
            Arc::new(move || scatter_update(OP, &data, &indices, &updates, ax)) as Kernel,
        ))
    })
}

fn scatter_update(
    op: &str,
    data: &TensorDesc,
    indices: &TensorDesc,
    updates: &TensorDesc,
    ax: usize,
) -> Result<(), Fault> {
    let span = updates.shape[ax];
    let limit = data.shape[ax];
    let starts = read_all::<i128>(op, "indices", indices)?;
    for (i, &p) in starts.iter().enumerate() {
        if p < 0 || p as usize + span > limit {
            return Err(fault(
                ACL_ERROR_RT_AICORE_EXCEPTION,
                format!(
                    "{op}: indices[{i}] = {p} writes {span} rows from it along axis {ax} of data {}, outside [0, {limit})",
                    data.describe()
                ),
            ));
        }
    }
    let md = map(op, "data", data)?;
    let mut mu = map(op, "updates", updates)?;
    mu.detach_from(&md, false);
    let (ds, us) = (&data.strides, &updates.strides);
    let [a, b, c, d] = [
        updates.shape[0],
        updates.shape[1],
        updates.shape[2],
        updates.shape[3],
    ];
    for (i, &start) in starts.iter().enumerate().take(a) {
        let start = start as usize;
        for j in 0..b {
            for k in 0..c {
                for l in 0..d {
                    let (dk, dl) = if ax == 2 {
                        (start + k, l)
                    } else {
                        (k, start + l)
                    };
                    let to = data.offset + i * ds[0] + j * ds[1] + dk * ds[2] + dl * ds[3];
                    let from = updates.offset + i * us[0] + j * us[1] + k * us[2] + l * us[3];
                    md.copy_from(to, &mu, from);
                }
            }
        }
    }
    Ok(())
}
