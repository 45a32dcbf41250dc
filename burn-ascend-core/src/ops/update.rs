//! Scatter and select-assign with every update rule (assign, add, multiply, min, max), as
//! Burn 0.22 asks for them.
//!
//! aclnnScatter reduces with none, add or multiply only (aclnn-ops.tsv: `reduce` 0/1/2), and
//! the min/max scatter operators (aclnnScatterMax/Min) are newer, F16/F32/I32/I8/U8 only and
//! of uncertain availability on CANN 8.0/8.1 (burn-to-aclnn.tsv, float_scatter_nd): taking the
//! strict reading, min and max are composed on the device. With the scatter axis moved last,
//! each target `j` takes the extreme of the values whose index is `j` along that axis: a mask
//! `index == j` over `[.., J, I]`, a masked reduction over `I`, combined with what is there
//! where any value landed. Chunks of `J` bound the temporary, as in `index::scatter_nd`.
//!
//! Select-assign (1-D indices along a dim) adds with aclnnIndexAdd, assigns with
//! aclnnInplaceIndexCopy on a copy, and otherwise scatters with the index broadcast over the
//! value's other dims.

use super::compare::{compare, select, Compare};
use super::constant;
use super::copy::{cast, contiguous_copy, copy_into};
use super::creation::full;
use super::index::{index_copy_in_place, int_range, scatter, select_add, NdUpdate, ScatterReduce};
use super::layout::Layout;
use super::math::extreme;
use super::reduce::{reduce, Reduce};
use super::tensor::AscendTensor;
use crate::acl::handles::HostScalar;
use crate::acl::{AclError, AclResult, DataType};

/// Temporary bound of the masked min/max scatter, in bytes.
const MASKED_CHUNK_BYTES: usize = 64 << 20;

/// A copy of `x` with `src` combined by `update` at `idx` along `dim` (`idx` and `src` of one
/// shape, equal to `x`'s except along `dim`).
pub fn scatter_update(
    dim: usize,
    x: &AscendTensor,
    idx: &AscendTensor,
    src: &AscendTensor,
    update: NdUpdate,
) -> AclResult<AscendTensor> {
    check_scatter(dim, x, idx, src)?;
    match update {
        NdUpdate::Assign => scatter(dim, x, idx, src, ScatterReduce::Assign),
        NdUpdate::Add => scatter(dim, x, idx, src, ScatterReduce::Add),
        NdUpdate::Mul => scatter(dim, x, idx, src, ScatterReduce::Mul),
        NdUpdate::Min => scatter_extreme(dim, x, idx, src, false),
        NdUpdate::Max => scatter_extreme(dim, x, idx, src, true),
    }
}

/// A copy of `x` with the slices of `value` combined by `update` at `idx` (1-D) along `dim`.
pub fn select_update(
    x: &AscendTensor,
    dim: usize,
    idx: &AscendTensor,
    value: &AscendTensor,
    update: NdUpdate,
) -> AclResult<AscendTensor> {
    let fits = idx.shape().len() == 1
        && value.shape().len() == x.shape().len()
        && dim < x.shape().len()
        && value.shape()[dim] == idx.shape()[0]
        && (0..x.shape().len()).all(|d| d == dim || value.shape()[d] == x.shape()[d]);
    if !fits {
        return Err(AclError::InvalidArgument(format!(
            "select_assign ({update:?}) along {dim}: indices {} and values {} do not fit {}",
            idx.describe(),
            value.describe(),
            x.describe()
        )));
    }
    match update {
        NdUpdate::Add => select_add(x, dim, idx, value),
        NdUpdate::Assign => {
            let out = contiguous_copy(x)?;
            index_copy_in_place(&out, dim, idx, value)?;
            Ok(out)
        }
        NdUpdate::Mul | NdUpdate::Min | NdUpdate::Max => {
            let stride = idx.layout().strides[0];
            let mut strides = vec![0; value.shape().len()];
            strides[dim] = stride;
            let spread = contiguous_copy(&idx.with_layout(Layout {
                shape: value.shape().to_vec(),
                strides,
                offset: idx.layout().offset,
            }))?;
            scatter_update(dim, x, &spread, value, update)
        }
    }
}

fn check_scatter(
    dim: usize,
    x: &AscendTensor,
    idx: &AscendTensor,
    src: &AscendTensor,
) -> AclResult<()> {
    let rank = x.shape().len();
    let fits = dim < rank
        && idx.shape() == src.shape()
        && idx.shape().len() == rank
        && (0..rank).all(|d| d == dim || idx.shape()[d] == x.shape()[d]);
    if fits {
        Ok(())
    } else {
        Err(AclError::InvalidArgument(format!(
            "scatter along {dim}: indices {} and values {} must have one shape, equal to {}'s \
             except along {dim}",
            idx.describe(),
            src.describe(),
            x.describe()
        )))
    }
}

/// [`scatter_update`] with min (`max` false) or max: see the module's comment.
fn scatter_extreme(
    dim: usize,
    x: &AscendTensor,
    idx: &AscendTensor,
    src: &AscendTensor,
    max: bool,
) -> AclResult<AscendTensor> {
    let rank = x.shape().len();
    let mut axes: Vec<usize> = (0..rank).filter(|&d| d != dim).collect();
    axes.push(dim);
    let mut back = vec![0; rank];
    for (at, &d) in axes.iter().enumerate() {
        back[d] = at;
    }
    let out = contiguous_copy(&x.with_layout(x.layout().permute(&axes)))?; // [O.., J]
    let (j_len, i_len) = (x.shape()[dim], idx.shape()[dim]);
    if out.layout().numel() == 0 || i_len == 0 {
        return contiguous_copy(&out.with_layout(out.layout().permute(&back)));
    }
    let src = cast(src, x.dtype())?;
    // Indices and values as [O.., 1, I]: one row of candidates for every target j.
    let row = |t: &AscendTensor| {
        let l = t.layout().permute(&axes);
        let (mut shape, mut strides) = (l.shape.clone(), l.strides.clone());
        shape.insert(rank - 1, 1);
        strides.insert(rank - 1, 0);
        t.with_layout(Layout {
            shape,
            strides,
            offset: l.offset,
        })
    };
    let (targets, values) = (row(idx), row(&src));
    let neutral = if x.dtype().is_float() {
        HostScalar::Float(if max {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        })
    } else {
        let (lo, hi) = int_range(x.dtype());
        HostScalar::Int(if max { lo } else { hi })
    };
    let fill = full(x.ctx(), Vec::new(), x.dtype(), neutral)?;
    let per_target = out.layout().numel() / j_len * i_len * x.dtype().size();
    let chunk = (MASKED_CHUNK_BYTES / per_target.max(1)).clamp(1, j_len);
    let mut start = 0;
    while start < j_len {
        let end = (start + chunk).min(j_len);
        let ids: Vec<i64> = (start as i64..end as i64).collect();
        let here = cast(
            &constant::ints(x.ctx(), vec![end - start, 1], &ids)?,
            idx.dtype(),
        )?;
        let hit = compare(Compare::Eq, &targets, &here)?; // [O.., c, I]
        let masked = select(&hit, &values, &fill)?;
        let op = if max { Reduce::Max } else { Reduce::Min };
        let best = reduce(op, &masked, Some(rank))?; // [O.., c, 1]
        let any = reduce(Reduce::Any, &hit, Some(rank))?;
        let part = out.with_layout(out.layout().narrow(rank - 1, start, end, 1));
        let (mut shape, mut strides) = (part.layout().shape.clone(), part.layout().strides.clone());
        shape.push(1);
        strides.push(0);
        let part = part.with_layout(Layout {
            shape,
            strides,
            offset: part.layout().offset,
        }); // [O.., c, 1]
        let combined = extreme(&part, &best, max)?;
        copy_into(&part, &select(&any, &combined, &part)?)?;
        start = end;
    }
    contiguous_copy(&out.with_layout(out.layout().permute(&back)))
}

/// A copy of the bool tensor `x` OR-ed with `value` at `idx` along `dim` (scatter indices).
/// aclnn has no OR-scatter, and ScatterAdd on BOOL saturates undocumentedly
/// (burn-to-aclnn.tsv, bool_scatter_or): the true values landing on each element are counted
/// in I32, then tested for > 0.
pub fn scatter_or(
    dim: usize,
    x: &AscendTensor,
    idx: &AscendTensor,
    value: &AscendTensor,
) -> AclResult<AscendTensor> {
    or_by_count(x, |counts| {
        scatter(
            dim,
            counts,
            idx,
            &cast(value, DataType::I32)?,
            ScatterReduce::Add,
        )
    })
}

/// [`scatter_or`] with 1-D indices selecting slices along `dim` (aclnnIndexAdd on the counts).
pub fn select_or(
    x: &AscendTensor,
    dim: usize,
    idx: &AscendTensor,
    value: &AscendTensor,
) -> AclResult<AscendTensor> {
    or_by_count(x, |counts| {
        select_add(counts, dim, idx, &cast(value, DataType::I32)?)
    })
}

fn or_by_count(
    x: &AscendTensor,
    add: impl FnOnce(&AscendTensor) -> AclResult<AscendTensor>,
) -> AclResult<AscendTensor> {
    let counts = add(&cast(x, DataType::I32)?)?;
    super::compare::compare_scalar(Compare::Gt, &counts, HostScalar::Int(0))
}
