//! Indexing: gather, scatter, select, repeat, unfold, argwhere and the n-dimensional gather
//! and scatter.
//!
//! Bridged gaps: aclnnScatterAdd needs contiguous `src` and `out`; argwhere's size is known
//! only after the device has counted (aclnnNonzero, a stream synchronisation, then
//! aclGetViewShape on the same descriptor); gather_nd/scatter_nd turn N-d indices into linear
//! row indices of the data seen as `[rows, slice]`, then use IndexSelect, Scatter (assign, add,
//! multiply), or, for min/max, which aclnn has no scatter for in CANN 8.x, a masked reduction
//! over the updates of each row, in row chunks that bound the temporary.

use super::arith::{binary, BinaryOp};
use super::compare::{compare, select, Compare};
use super::copy::{cast, contiguous, contiguous_copy};
use super::creation::{from_bytes, full};
use super::layout::Layout;
use super::reduce::{reduce, Reduce};
use super::tensor::AscendTensor;
use crate::acl::handles::{HostScalar, IntArrayDesc, ScalarDesc};
use crate::acl::{AclResult, DataType};

/// `out[.., i, ..] = x[.., idx[.., i, ..], ..]` along `dim`.
pub fn gather(dim: usize, x: &AscendTensor, idx: &AscendTensor) -> AclResult<AscendTensor> {
    let out = AscendTensor::empty(x.ctx(), idx.shape().to_vec(), x.dtype)?;
    if out.layout.numel() > 0 {
        let what = format!("{} by {} along {dim}", x.describe(), idx.describe());
        run_op!(
            x.ctx(),
            aclnnGather(x.desc()?, dim as i64, idx.desc()?, out.desc()?),
            what
        )?;
    }
    Ok(out)
}

/// How [`scatter`] combines a value with what is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum ScatterReduce {
    Assign,
    Add,
    Mul,
}

/// A copy of `x` with `src` values combined at `idx` along `dim`.
pub fn scatter(
    dim: usize,
    x: &AscendTensor,
    idx: &AscendTensor,
    src: &AscendTensor,
    reduce: ScatterReduce,
) -> AclResult<AscendTensor> {
    let src = contiguous(&cast(src, x.dtype)?)?;
    let out = AscendTensor::empty(x.ctx(), x.shape().to_vec(), x.dtype)?;
    if out.layout.numel() == 0 {
        return Ok(out);
    }
    if idx.layout.numel() == 0 {
        super::copy::copy_into(&out, x)?;
        return Ok(out);
    }
    let what = format!(
        "{} by {} from {} along {dim}",
        x.describe(),
        idx.describe(),
        src.describe()
    );
    let (xd, id, sd, od) = (x.desc()?, idx.desc()?, src.desc()?, out.desc()?);
    match reduce {
        ScatterReduce::Add => run_op!(
            x.ctx(),
            aclnnScatterAdd(&xd, dim as i64, &id, &sd, &od),
            what
        ),
        ScatterReduce::Assign => run_op!(
            x.ctx(),
            aclnnScatter(&xd, dim as i64, &id, &sd, 0, &od),
            what
        ),
        ScatterReduce::Mul => run_op!(
            x.ctx(),
            aclnnScatter(&xd, dim as i64, &id, &sd, 2, &od),
            what
        ),
    }?;
    Ok(out)
}

/// The slices of `x` at `idx` (1-D) along `dim`.
pub fn select_index(x: &AscendTensor, dim: usize, idx: &AscendTensor) -> AclResult<AscendTensor> {
    let mut shape = x.shape().to_vec();
    shape[dim] = idx.layout.numel();
    let out = AscendTensor::empty(x.ctx(), shape, x.dtype)?;
    if out.layout.numel() > 0 {
        let what = format!("{} by {} along {dim}", x.describe(), idx.describe());
        run_op!(
            x.ctx(),
            aclnnIndexSelect(x.desc()?, dim as i64, idx.desc()?, out.desc()?),
            what
        )?;
    }
    Ok(out)
}

/// A copy of `x` with the slices of `value` added at `idx` (1-D) along `dim`.
pub fn select_add(
    x: &AscendTensor,
    dim: usize,
    idx: &AscendTensor,
    value: &AscendTensor,
) -> AclResult<AscendTensor> {
    let value = cast(value, x.dtype)?;
    let out = AscendTensor::empty(x.ctx(), x.shape().to_vec(), x.dtype)?;
    if out.layout.numel() == 0 {
        return Ok(out);
    }
    if idx.layout.numel() == 0 {
        super::copy::copy_into(&out, x)?;
        return Ok(out);
    }
    let one = ScalarDesc::new(x.ctx().bind(), HostScalar::Int(1))?;
    let what = format!("{} at {} along {dim}", x.describe(), idx.describe());
    run_op!(
        x.ctx(),
        aclnnIndexAdd(
            x.desc()?,
            dim as i64,
            idx.desc()?,
            value.desc()?,
            &one,
            out.desc()?
        ),
        what
    )?;
    Ok(out)
}

/// Writes the slices of `source` into `dst`'s own buffer at `idx` (1-D, distinct) along `dim`
/// (aclnnInplaceIndexCopy): only the slices written move, not the whole of `dst`.
pub fn index_copy_in_place(
    dst: &AscendTensor,
    dim: usize,
    idx: &AscendTensor,
    source: &AscendTensor,
) -> AclResult<()> {
    if idx.layout.numel() == 0 {
        return Ok(());
    }
    let source = cast(source, dst.dtype)?;
    let what = format!(
        "{} at {} along {dim} into {}",
        source.describe(),
        idx.describe(),
        dst.describe()
    );
    run_op!(
        dst.ctx(),
        aclnnInplaceIndexCopy(dst.desc()?, dim as i64, idx.desc()?, source.desc()?),
        what
    )
}

/// `x` tiled `times` times along `dim`.
pub fn repeat_dim(x: &AscendTensor, dim: usize, times: usize) -> AclResult<AscendTensor> {
    let mut shape = x.shape().to_vec();
    shape[dim] *= times;
    let out = AscendTensor::empty(x.ctx(), shape, x.dtype)?;
    if out.layout.numel() > 0 {
        let mut reps = vec![1i64; x.shape().len()];
        reps[dim] = times as i64;
        let reps = IntArrayDesc::new(x.ctx().bind(), &reps)?;
        run_op!(
            x.ctx(),
            aclnnRepeat(x.desc()?, &reps, out.desc()?),
            x.describe()
        )?;
    }
    Ok(out)
}

/// Sliding windows of `size` every `step` along `dim`, the window as a new last dim.
pub fn unfold(x: &AscendTensor, dim: usize, size: usize, step: usize) -> AclResult<AscendTensor> {
    let len = x.shape()[dim];
    let windows = if len >= size {
        (len - size) / step + 1
    } else {
        0
    };
    let mut layout: Layout = x.layout.clone();
    let stride = layout.strides[dim];
    layout.shape[dim] = windows;
    layout.strides[dim] = stride * step;
    layout.shape.push(size);
    layout.strides.push(stride);
    contiguous_copy(&x.with_layout(layout))
}

/// Coordinates `[count, rank]` (I64) of the true elements, in row-major order.
pub fn argwhere(x: &AscendTensor) -> AclResult<AscendTensor> {
    let rank = x.shape().len();
    let n = x.layout.numel();
    let out = AscendTensor::empty(x.ctx(), vec![n, rank], DataType::I64)?;
    if n == 0 {
        return Ok(out);
    }
    // Nonzero rewrites the descriptor's view shape, so it is not one the cache could reuse.
    let od = out.desc_owned()?;
    run_op!(x.ctx(), aclnnNonzero(x.desc()?, &od), x.describe())?;
    x.ctx().synchronize()?;
    Ok(out.with_layout(Layout::contiguous(od.view_shape()?)))
}

/// Linear row indices `[n]` (I64) of `indices[.., k]` into the first `k` dims of `shape`.
fn linear_rows(indices: &AscendTensor, shape: &[usize]) -> AclResult<(AscendTensor, usize)> {
    let k = *indices
        .shape()
        .last()
        .expect("indices have at least one dim");
    let n = indices.layout.numel() / k.max(1);
    let mut strides = vec![1i64; k];
    for j in (0..k.saturating_sub(1)).rev() {
        strides[j] = strides[j + 1] * shape[j + 1] as i64;
    }
    let bytes: Vec<u8> = strides.iter().flat_map(|s| s.to_le_bytes()).collect();
    let strides = from_bytes(indices.ctx(), vec![k], DataType::I64, &bytes)?;
    let idx = super::copy::reshape(&cast(indices, DataType::I64)?, vec![n, k])?;
    let rows = reduce(
        Reduce::Sum,
        &binary(BinaryOp::Mul, &idx, &strides)?,
        Some(1),
    )?;
    Ok((super::copy::reshape(&rows, vec![n])?, k))
}

/// `data[indices[.., :]]`: the slices of `data` addressed by the last dim of `indices`.
pub fn gather_nd(data: &AscendTensor, indices: &AscendTensor) -> AclResult<AscendTensor> {
    let (rows, k) = linear_rows(indices, data.shape())?;
    let row_count: usize = data.shape()[..k].iter().product();
    let slice: Vec<usize> = data.shape()[k..].to_vec();
    let mut flat = vec![row_count];
    flat.extend(&slice);
    let picked = select_index(&super::copy::reshape(data, flat)?, 0, &rows)?;
    let mut shape = indices.shape()[..indices.shape().len() - 1].to_vec();
    shape.extend(slice);
    super::copy::reshape(&picked, shape)
}

/// How [`scatter_nd`] combines updates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum NdUpdate {
    Assign,
    Add,
    Mul,
    Min,
    Max,
}

/// Temporary bound of the masked min/max scatter, in bytes.
const MASKED_CHUNK_BYTES: usize = 64 << 20;

/// A copy of `data` with `values` combined into the slices addressed by `indices`.
pub fn scatter_nd(
    data: &AscendTensor,
    indices: &AscendTensor,
    values: &AscendTensor,
    update: NdUpdate,
) -> AclResult<AscendTensor> {
    let (rows, k) = linear_rows(indices, data.shape())?;
    let n = rows.layout.numel();
    let row_count: usize = data.shape()[..k].iter().product();
    let width: usize = data.shape()[k..].iter().product();
    let data2 = super::copy::reshape(data, vec![row_count, width])?;
    let values2 = super::copy::reshape(&cast(values, data.dtype)?, vec![n, width])?;
    let out2 = match update {
        NdUpdate::Assign | NdUpdate::Add | NdUpdate::Mul => {
            let reduce = match update {
                NdUpdate::Assign => ScatterReduce::Assign,
                NdUpdate::Add => ScatterReduce::Add,
                _ => ScatterReduce::Mul,
            };
            let idx = contiguous_copy(&rows.with_layout(Layout {
                shape: vec![n, width],
                strides: vec![1, 0],
                offset: rows.layout.offset,
            }))?;
            scatter(0, &data2, &idx, &values2, reduce)?
        }
        NdUpdate::Min | NdUpdate::Max => {
            masked_extreme(&data2, &rows, &values2, update == NdUpdate::Max)?
        }
    };
    super::copy::reshape(&out2, data.shape().to_vec())
}

/// For each row r of `data [R, W]`: combine with the max (or min) of the `values [N, W]` rows
/// whose target `rows[i]` is r, by a masked reduction over N, chunked over R.
fn masked_extreme(
    data: &AscendTensor,
    rows: &AscendTensor,
    values: &AscendTensor,
    max: bool,
) -> AclResult<AscendTensor> {
    let (r, w) = (data.shape()[0], data.shape()[1]);
    let n = rows.layout.numel();
    let out = contiguous_copy(data)?;
    if n == 0 || r == 0 || w == 0 {
        return Ok(out);
    }
    let neutral = if data.dtype.is_float() {
        HostScalar::Float(if max {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        })
    } else {
        let (lo, hi) = int_range(data.dtype);
        HostScalar::Int(if max { lo } else { hi })
    };
    let chunk = (MASKED_CHUNK_BYTES / (n * w * data.dtype.size()).max(1)).clamp(1, r);
    let targets = rows.with_layout(Layout {
        shape: vec![1, n, 1],
        strides: vec![0, 1, 0],
        offset: rows.layout.offset,
    });
    let vals = values.with_layout(Layout {
        shape: vec![1, n, w],
        strides: vec![0, values.layout.strides[0], values.layout.strides[1]],
        offset: values.layout.offset,
    });
    let mut start = 0;
    while start < r {
        let end = (start + chunk).min(r);
        let ids: Vec<u8> = (start as i64..end as i64)
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let here = from_bytes(data.ctx(), vec![end - start, 1, 1], DataType::I64, &ids)?;
        let hit = compare(Compare::Eq, &targets, &here)?; // [c, n, 1]
        let fill = full(data.ctx(), Vec::new(), data.dtype, neutral)?;
        let masked = select(&hit, &vals, &fill)?; // [c, n, w]
        let best = reduce(
            if max { Reduce::Max } else { Reduce::Min },
            &masked,
            Some(1),
        )?; // [c, 1, w]
        let any = reduce(Reduce::Any, &hit, Some(1))?; // [c, 1, 1]
        let part = out.with_layout(out.layout.narrow(0, start, end, 1));
        let part3 = part.with_layout(Layout {
            shape: vec![end - start, 1, w],
            strides: vec![part.layout.strides[0], 0, part.layout.strides[1]],
            offset: part.layout.offset,
        });
        let combined = super::math::extreme(&part3, &best, max)?;
        super::copy::copy_into(&part3, &select(&any, &combined, &part3)?)?;
        start = end;
    }
    Ok(out)
}

/// The smallest and largest values of an integer type.
pub(super) fn int_range(dtype: DataType) -> (i64, i64) {
    match dtype {
        DataType::I8 => (i8::MIN as i64, i8::MAX as i64),
        DataType::I16 => (i16::MIN as i64, i16::MAX as i64),
        DataType::I32 => (i32::MIN as i64, i32::MAX as i64),
        DataType::U8 => (0, u8::MAX as i64),
        DataType::U16 => (0, u16::MAX as i64),
        DataType::U32 => (0, u32::MAX as i64),
        _ => (i64::MIN, i64::MAX),
    }
}
