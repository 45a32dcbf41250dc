//! Constant tensors built on the host from shapes alone (interpolation and pooling weights,
//! window index tables, DFT bases, masks) and uploaded once. They never depend on tensor data,
//! so no computation on data happens on the host.

use std::sync::Arc;

use super::copy::cast;
use super::creation::from_bytes;
use super::tensor::AscendTensor;
use crate::acl::{AclResult, DataType};
use crate::runtime::DeviceContext;

/// A float tensor of `dtype` holding `values` (row-major over `shape`). F16 and BF16 are
/// uploaded as F32 and converted on the device.
pub fn floats(
    ctx: &Arc<DeviceContext>,
    shape: Vec<usize>,
    values: &[f64],
    dtype: DataType,
) -> AclResult<AscendTensor> {
    debug_assert_eq!(values.len(), shape.iter().product::<usize>());
    if dtype == DataType::F64 {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        return from_bytes(ctx, shape, DataType::F64, &bytes);
    }
    let bytes: Vec<u8> = values
        .iter()
        .flat_map(|&v| (v as f32).to_le_bytes())
        .collect();
    cast(&from_bytes(ctx, shape, DataType::F32, &bytes)?, dtype)
}

/// An I64 tensor holding `values`.
pub fn ints(
    ctx: &Arc<DeviceContext>,
    shape: Vec<usize>,
    values: &[i64],
) -> AclResult<AscendTensor> {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    from_bytes(ctx, shape, DataType::I64, &bytes)
}

/// A BOOL tensor holding `values`.
pub fn bools(
    ctx: &Arc<DeviceContext>,
    shape: Vec<usize>,
    values: &[bool],
) -> AclResult<AscendTensor> {
    let bytes: Vec<u8> = values.iter().map(|&b| b as u8).collect();
    from_bytes(ctx, shape, DataType::Bool, &bytes)
}
