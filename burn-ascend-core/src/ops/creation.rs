//! Creating tensors on the device and moving their bytes between host and device.

use std::sync::Arc;

use super::tensor::AscendTensor;
use crate::acl::aclnn;
use crate::acl::handles::{HostScalar, ScalarDesc};
use crate::acl::{AclResult, DataType};
use crate::runtime::DeviceContext;

/// How host bytes reach the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upload {
    /// Through the page-locked staging ring, in stream order, without waiting.
    Staged,
    /// A blocking copy straight from the bytes (pageable memory), after the device's queued
    /// work: for bulk loads, where staging would copy every byte again on the host and the
    /// caller does not overlap the copy with its own work anyway.
    Blocking,
}

/// A tensor holding little-endian element `bytes` in row-major order.
pub fn from_bytes(
    ctx: &Arc<DeviceContext>,
    shape: Vec<usize>,
    dtype: DataType,
    bytes: &[u8],
) -> AclResult<AscendTensor> {
    from_bytes_by(ctx, shape, dtype, bytes, Upload::Staged)
}

/// [`from_bytes`], the bytes reaching the device as `upload` says.
pub fn from_bytes_by(
    ctx: &Arc<DeviceContext>,
    shape: Vec<usize>,
    dtype: DataType,
    bytes: &[u8],
    upload: Upload,
) -> AclResult<AscendTensor> {
    let out = AscendTensor::empty(ctx, shape, dtype)?;
    if bytes.len() != out.layout.numel() * dtype.size() {
        return Err(crate::acl::AclError::InvalidArgument(format!(
            "from_data: {} bytes do not make a {:?} {dtype} tensor",
            bytes.len(),
            out.shape()
        )));
    }
    match upload {
        Upload::Staged => ctx.upload(out.storage()?, bytes)?,
        Upload::Blocking => ctx.upload_blocking(out.storage()?, bytes)?,
    }
    Ok(out)
}

/// The tensor's elements in row-major order, as bytes (waits for queued work).
pub fn to_bytes(t: &AscendTensor) -> AclResult<Vec<u8>> {
    Ok(to_bytes_many(std::slice::from_ref(t))?.remove(0))
}

/// The elements of several tensors, with one synchronisation per device.
pub fn to_bytes_many(tensors: &[AscendTensor]) -> AclResult<Vec<Vec<u8>>> {
    let dense = tensors
        .iter()
        .map(super::copy::contiguous)
        .collect::<AclResult<Vec<_>>>()?;
    // A lazily dequantized tensor is materialised before the synchronisation its read waits
    // for.
    for t in &dense {
        t.storage()?;
    }
    let mut synced: Vec<crate::runtime::AscendDevice> = Vec::new();
    for t in &dense {
        if !synced.contains(&t.ctx().device()) {
            t.ctx().synchronize()?;
            synced.push(t.ctx().device());
        }
    }
    dense
        .iter()
        .map(|t| {
            let es = t.dtype.size();
            t.ctx()
                .read_synchronized(t.storage()?, t.layout.offset * es, t.layout.numel() * es)
        })
        .collect()
}

/// A fresh tensor, filled by `fill` unless it is empty.
fn filled(
    ctx: &Arc<DeviceContext>,
    shape: Vec<usize>,
    dtype: DataType,
    fill: impl FnOnce(&AscendTensor) -> AclResult<()>,
) -> AclResult<AscendTensor> {
    let out = AscendTensor::empty(ctx, shape, dtype)?;
    if out.layout.numel() > 0 {
        fill(&out)?;
    }
    Ok(out)
}

/// A tensor filled with zeros.
pub fn zeros(
    ctx: &Arc<DeviceContext>,
    shape: Vec<usize>,
    dtype: DataType,
) -> AclResult<AscendTensor> {
    filled(ctx, shape, dtype, |t| {
        aclnn!(&**ctx, aclnnInplaceZero(t.desc()?))
    })
}

/// A tensor filled with ones.
pub fn ones(
    ctx: &Arc<DeviceContext>,
    shape: Vec<usize>,
    dtype: DataType,
) -> AclResult<AscendTensor> {
    filled(ctx, shape, dtype, |t| {
        aclnn!(&**ctx, aclnnInplaceOne(t.desc()?))
    })
}

/// A tensor filled with `value`.
pub fn full(
    ctx: &Arc<DeviceContext>,
    shape: Vec<usize>,
    dtype: DataType,
    value: HostScalar,
) -> AclResult<AscendTensor> {
    filled(ctx, shape, dtype, |t| {
        let value = ScalarDesc::new(ctx.bind(), value)?;
        aclnn!(&**ctx, aclnnInplaceFillScalar(t.desc()?, &value))
    })
}
