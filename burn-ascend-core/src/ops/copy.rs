//! Data movement on the device: contiguous copies of views, casts, concatenation, flips and
//! slices (negative steps become a forward view plus a flip, since aclnn forbids negative
//! strides), and copies between devices.

use super::compare::{bitwise_scalar, Logical};
use super::layout::Layout;
use super::tensor::AscendTensor;
use crate::acl::aclnn;
use crate::acl::handles::{HostScalar, IntArrayDesc, TensorListDesc};
use crate::acl::{AclResult, DataType};
use crate::runtime::{AscendDevice, DeviceContext};

/// Writes `src` (broadcast and converted) into the view `dst` with aclnnInplaceCopy.
pub fn copy_into(dst: &AscendTensor, src: &AscendTensor) -> AclResult<()> {
    if dst.layout.numel() == 0 {
        return Ok(());
    }
    aclnn!(&**dst.ctx(), aclnnInplaceCopy(dst.desc()?, src.desc()?)).map_err(|e| {
        e.with_context(|| format!("copy of {} into {}", src.describe(), dst.describe()))
    })
}

/// `t` itself if it is dense row-major, else a contiguous copy.
pub fn contiguous(t: &AscendTensor) -> AclResult<AscendTensor> {
    if t.layout.is_contiguous() {
        return Ok(t.clone());
    }
    let out = AscendTensor::empty(t.ctx(), t.layout.shape.clone(), t.dtype)?;
    copy_into(&out, t)?;
    Ok(out)
}

/// The same shape as `t`, converted to `dtype` with Burn's rules (Rust's `as`): floats to
/// integers toward zero, saturating, NaN to 0 (aclnnCast does the same); integers to narrower
/// integers wrap.
pub fn cast(t: &AscendTensor, dtype: DataType) -> AclResult<AscendTensor> {
    if t.dtype == dtype {
        return Ok(t.clone());
    }
    let src = match (t.dtype, dtype) {
        // aclnnCast requires BOOL inputs to be contiguous.
        (DataType::Bool, _) => contiguous(t)?,
        // aclnnCast's int32 -> int8 is exact only for inputs in (-2048, 1920) (aclnnCast doc,
        // aclnn-ops.tsv); the low byte, which the wrap keeps, is in range and converts exactly.
        (DataType::I32, DataType::I8) => bitwise_scalar(Logical::And, t, HostScalar::Int(0xff))?,
        _ => t.clone(),
    };
    let out = AscendTensor::empty(t.ctx(), t.layout.shape.clone(), dtype)?;
    if out.layout.numel() > 0 {
        aclnn!(&**t.ctx(), aclnnCast(src.desc()?, dtype.acl(), out.desc()?))
            .map_err(|e| e.with_context(|| format!("cast of {} to {dtype}", t.describe())))?;
    }
    Ok(out)
}

/// A reshaped view, or a reshaped contiguous copy when the layout does not allow a view.
pub fn reshape(t: &AscendTensor, shape: Vec<usize>) -> AclResult<AscendTensor> {
    match t.layout.reshape(shape.clone()) {
        Some(layout) => Ok(t.with_layout(layout)),
        None => {
            let c = contiguous(t)?;
            Ok(c.with_layout(
                c.layout
                    .reshape(shape)
                    .expect("a contiguous layout reshapes"),
            ))
        }
    }
}

/// A reshape that stays a view wherever the strides allow ([`Layout::view`]), as Burn's
/// `reshape` is; [`reshape`] instead always returns contiguous data, which callers that hand
/// the result to an operator refusing strided views rely on.
pub fn reshape_view(t: &AscendTensor, shape: Vec<usize>) -> AclResult<AscendTensor> {
    match t.layout.view(shape.clone()) {
        Some(layout) => Ok(t.with_layout(layout)),
        None => reshape(t, shape),
    }
}

/// Dtypes aclnnCat does not take on Atlas A2; they are concatenated by strided copies.
const CAT_UNSUPPORTED: [DataType; 3] = [DataType::U16, DataType::U32, DataType::U64];

/// Concatenation along `dim`.
pub fn cat(tensors: &[AscendTensor], dim: usize) -> AclResult<AscendTensor> {
    let first = &tensors[0];
    let mut shape = first.layout.shape.clone();
    shape[dim] = tensors.iter().map(|t| t.layout.shape[dim]).sum();
    let out = AscendTensor::empty(first.ctx(), shape, first.dtype)?;
    if out.layout.numel() == 0 {
        return Ok(out);
    }
    let describe = || {
        let parts: Vec<String> = tensors.iter().map(AscendTensor::describe).collect();
        format!("aclnnCat of [{}] along dim {dim}", parts.join(", "))
    };
    if CAT_UNSUPPORTED.contains(&first.dtype) {
        let mut start = 0;
        for t in tensors {
            let len = t.layout.shape[dim];
            copy_into(
                &out.with_layout(out.layout.narrow(dim, start, start + len, 1)),
                t,
            )?;
            start += len;
        }
        return Ok(out);
    }
    let api = first.ctx().bind();
    let descs = tensors
        .iter()
        .map(AscendTensor::desc_owned)
        .collect::<AclResult<Vec<_>>>()?;
    let list = TensorListDesc::new(api, descs)?;
    aclnn!(&**first.ctx(), aclnnCat(&list, dim as i64, out.desc()?))
        .map_err(|e| e.with_context(describe))?;
    Ok(out)
}

/// Reverses the order of elements along `axes`.
pub fn flip(t: &AscendTensor, axes: &[usize]) -> AclResult<AscendTensor> {
    let out = AscendTensor::empty(t.ctx(), t.layout.shape.clone(), t.dtype)?;
    if out.layout.numel() == 0 || axes.is_empty() {
        copy_into(&out, t)?;
        return Ok(out);
    }
    let dims: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
    let dims = IntArrayDesc::new(t.ctx().bind(), &dims)?;
    aclnn!(&**t.ctx(), aclnnFlip(t.desc()?, &dims, out.desc()?))
        .map_err(|e| e.with_context(|| format!("aclnnFlip of {} along {axes:?}", t.describe())))?;
    Ok(out)
}

/// One dimension of a slice: `start..end` by `step` (negative: walk back from `end - 1`,
/// Burn's rule).
#[derive(Debug, Clone, Copy)]
pub struct DimSlice {
    /// First index of the range.
    pub start: usize,
    /// One past the last index of the range.
    pub end: usize,
    /// Step; never 0.
    pub step: isize,
}

/// The forward view selecting the same elements as `slices`, and the dims whose order must
/// then be reversed (those with negative steps).
fn forward_view(layout: &Layout, slices: &[DimSlice]) -> (Layout, Vec<usize>) {
    let mut layout = layout.clone();
    let mut reversed = Vec::new();
    for (dim, s) in slices.iter().enumerate() {
        let step = s.step.unsigned_abs();
        let end = s.end.max(s.start);
        let start = if s.step < 0 && end > s.start {
            // The first selected element is congruent to end - 1 modulo the step.
            s.start + (end - 1 - s.start) % step
        } else {
            s.start
        };
        layout = layout.narrow(dim, start, end, step);
        if s.step < 0 && layout.shape[dim] > 1 {
            reversed.push(dim);
        }
    }
    (layout, reversed)
}

/// The selected elements: a view, or a flipped copy for dims with negative steps.
pub fn slice(t: &AscendTensor, slices: &[DimSlice]) -> AclResult<AscendTensor> {
    let (layout, reversed) = forward_view(&t.layout, slices);
    let view = t.with_layout(layout);
    if reversed.is_empty() {
        Ok(view)
    } else {
        flip(&view, &reversed)
    }
}

/// A copy of `t` with `value` written into the slice (flipped back along negative steps).
pub fn slice_assign(
    t: &AscendTensor,
    slices: &[DimSlice],
    value: &AscendTensor,
) -> AclResult<AscendTensor> {
    let out = contiguous_copy(t)?;
    let (layout, reversed) = forward_view(&out.layout, slices);
    let value = if reversed.is_empty() {
        value.clone()
    } else {
        flip(value, &reversed)?
    };
    copy_into(&out.with_layout(layout), &value)?;
    Ok(out)
}

/// A fresh contiguous copy (never shares storage with `t`).
pub fn contiguous_copy(t: &AscendTensor) -> AclResult<AscendTensor> {
    let out = AscendTensor::empty(t.ctx(), t.layout.shape.clone(), t.dtype)?;
    copy_into(&out, t)?;
    Ok(out)
}

/// The tensor on another device (through host memory when the devices differ).
pub fn to_device(t: &AscendTensor, device: &AscendDevice) -> AclResult<AscendTensor> {
    if t.ctx().device() == *device {
        return Ok(t.clone());
    }
    let bytes = super::creation::to_bytes(t)?;
    let ctx = DeviceContext::get(device)?;
    super::creation::from_bytes(&ctx, t.layout.shape.clone(), t.dtype, &bytes)
}
