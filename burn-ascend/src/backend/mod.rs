//! The Burn layer: the [`Ascend`] backend type and Burn's op traits, each method one line onto
//! the op-mapping layer ([`crate::ops`]). This is the only module that names Burn types.
//!
//! Burn's op methods return tensors, not results, so a device error ends the op with a panic
//! whose message names the op, the shapes and dtypes and the runtime's explanation.

mod activation;
mod bool;
pub mod collective;
mod device;
#[cfg(feature = "distributed")]
mod distributed;
mod float;
pub mod fused;
pub mod fusion;
pub mod graph;
mod int;
mod module;
mod qtensor;
mod qtensor_ops;
mod tensor;
mod transaction;

use std::sync::Arc;

use burn_backend::ops::*;
use burn_backend::tensor::{
    BoolTensor, Device, FloatTensor, IndexingUpdateOp, IntTensor, QuantizedTensor,
};
use burn_backend::{
    Backend, BackendTypes, DType, DTypeUsage, DTypeUsageSet, Distribution, ExecutionError, Scalar,
    TensorData, TensorMetadata,
};
use burn_std::{BoolDType, BoolStore, FloatDType, IntDType, Shape, Slice};

use crate::acl::handles::HostScalar;
use crate::acl::{AclError, AclResult, DataType};
use crate::error::{raise, record, AscendError};
use crate::ops::activation::{self as act, Activation};
use crate::ops::arith::{self, BinaryOp};
use crate::ops::compare::{self, Compare, Logical};
use crate::ops::copy::{self, DimSlice};
use crate::ops::index::{self, NdUpdate, ScatterReduce};
use crate::ops::math::{self, Unary};
use crate::ops::random::Draw;
use crate::ops::reduce::{self, Reduce, Scan};
use crate::ops::AscendTensor as CoreTensor;
use crate::ops::{creation, matmul, sort, update};
use crate::runtime::DeviceContext;
use tensor::Lift;

pub use device::{reset_device, AscendDevice};
pub use qtensor::AscendQTensor;
use tensor::cores;
pub use tensor::AscendTensor;

/// The Ascend backend: Burn tensors on a Huawei Ascend NPU (through CANN) or on the emulated
/// NPU. Use it as `type B = Ascend;` or under `Autodiff<Ascend>`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ascend;

impl BackendTypes for Ascend {
    type Device = AscendDevice;
    type FloatTensorPrimitive = AscendTensor;
    type FloatElem = f32;
    type IntTensorPrimitive = AscendTensor;
    type IntElem = i32;
    type BoolTensorPrimitive = AscendTensor;
    type BoolElem = bool;
    type QuantizedTensorPrimitive = AscendQTensor;
}

impl Backend for Ascend {
    fn name(device: &Self::Device) -> String {
        match DeviceContext::get(&device.into()) {
            Ok(ctx) => ctx.describe(),
            Err(e) => format!("ascend({device}, unavailable: {e})"),
        }
    }

    fn seed(device: &Self::Device, seed: u64) {
        context(device).set_seed(seed);
    }

    fn sync(device: &Self::Device) -> Result<(), ExecutionError> {
        context(device)
            .synchronize()
            .map_err(|e| execution_error(&format!("sync of {device}"), &e))
    }

    fn memory_cleanup(device: &Self::Device) {
        run("memory_cleanup", context(device).release_cache());
    }

    fn dtype_usage(_device: &Self::Device, dtype: DType) -> DTypeUsageSet {
        match dtype {
            DType::F64 | DType::F32 | DType::Flex32 | DType::F16 | DType::BF16 => {
                DTypeUsage::Storage | DTypeUsage::Arithmetic
            }
            DType::I64 | DType::I32 | DType::I16 | DType::I8 | DType::U8 => {
                DTypeUsage::Storage | DTypeUsage::Arithmetic
            }
            // Many aclnn ops reject U16/U32/U64 on Atlas A2: storage and conversion only.
            DType::U64 | DType::U32 | DType::U16 => DTypeUsage::Storage.into(),
            DType::Bool(BoolStore::Native) => DTypeUsage::Storage | DTypeUsage::Arithmetic,
            _ => DTypeUsageSet::empty(),
        }
    }

    fn device_count(type_id: u16) -> usize {
        device::count(type_id)
    }
}

/// The `ExecutionError` Burn returns for a failed read or sync, its typed error recorded for
/// [`crate::try_run`] (Burn's `into_data` turns the `Err` into a panic).
fn execution_error(op: &str, e: &AclError) -> ExecutionError {
    let e = AscendError::from_acl(op, e);
    let reason = e.to_string();
    record(e);
    ExecutionError::WithContext { reason }
}

/// Ends a Burn op that Burn cannot let fail: a failure panics with a clear message and the
/// typed error [`crate::try_run`] returns. Core tensors in the result become the adapter's.
pub(crate) fn run<T: Lift>(op: &str, result: AclResult<T>) -> T::Out {
    match result {
        Ok(value) => value.lift(),
        Err(e) => raise(AscendError::from_acl(op, &e)),
    }
}

/// The context of `device`, or a clear panic if the device cannot be opened.
pub(crate) fn context(device: &AscendDevice) -> Arc<DeviceContext> {
    run("opening the device", DeviceContext::get(&device.into()))
}

fn burn_dtype(dtype: DataType) -> DType {
    match dtype {
        DataType::F64 => DType::F64,
        DataType::F32 => DType::F32,
        DataType::F16 => DType::F16,
        DataType::BF16 => DType::BF16,
        DataType::I64 => DType::I64,
        DataType::I32 => DType::I32,
        DataType::I16 => DType::I16,
        DataType::I8 => DType::I8,
        DataType::U64 => DType::U64,
        DataType::U32 => DType::U32,
        DataType::U16 => DType::U16,
        DataType::U8 => DType::U8,
        DataType::Bool => DType::Bool(BoolStore::Native),
    }
}

/// The device type of a Burn dtype.
fn data_type(dtype: DType) -> DataType {
    match dtype {
        DType::F64 => DataType::F64,
        DType::F32 | DType::Flex32 => DataType::F32,
        DType::F16 => DataType::F16,
        DType::BF16 => DataType::BF16,
        DType::I64 => DataType::I64,
        DType::I32 => DataType::I32,
        DType::I16 => DataType::I16,
        DType::I8 => DataType::I8,
        DType::U64 => DataType::U64,
        DType::U32 => DataType::U32,
        DType::U16 => DataType::U16,
        DType::U8 => DataType::U8,
        DType::Bool(BoolStore::Native) => DataType::Bool,
        other => raise(AscendError::invalid(
            "creating a tensor",
            format!("burn-ascend does not support tensors of dtype {other:?} (bools are stored natively, one byte each)"),
        )),
    }
}

fn float_type(dtype: FloatDType) -> DataType {
    data_type(dtype.into())
}

fn int_type(dtype: IntDType) -> DataType {
    data_type(dtype.into())
}

fn bool_type(dtype: BoolDType) -> DataType {
    data_type(DType::Bool(dtype))
}

/// Which kind of tensor a `from_data` call creates, to reject mismatched data clearly.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Float,
    Int,
    Bool,
}

fn from_data(data: TensorData, device: &AscendDevice, kind: Kind) -> AscendTensor {
    let dtype = data_type(data.dtype);
    let fits = match kind {
        Kind::Float => dtype.is_float(),
        Kind::Int => !dtype.is_float() && dtype != DataType::Bool,
        Kind::Bool => dtype == DataType::Bool,
    };
    if !fits {
        raise(AscendError::invalid(
            "from_data",
            format!(
                "a {kind:?} tensor cannot be created from {:?} data",
                data.dtype
            ),
        ));
    }
    run(
        "from_data",
        creation::from_bytes(
            &context(device),
            data.shape.to_vec(),
            dtype,
            data.as_bytes(),
        ),
    )
}

fn into_data(tensor: AscendTensor) -> Result<TensorData, ExecutionError> {
    let bytes = creation::to_bytes(&tensor)
        .map_err(|e| execution_error(&format!("reading {} back", tensor.describe()), &e))?;
    Ok(TensorData::from_bytes_vec(
        bytes,
        tensor.shape().to_vec(),
        burn_dtype(tensor.dtype()),
    ))
}

/// A Burn scalar as the aclnn scalar operand for a tensor of `dtype`.
fn host_scalar(value: Scalar, dtype: DataType) -> HostScalar {
    match (value, dtype.is_float()) {
        (Scalar::Bool(b), _) => HostScalar::Bool(b),
        (v, true) => HostScalar::Float(v.elem::<f64>()),
        (Scalar::Float(f), false) => HostScalar::Int(f as i64),
        (Scalar::UInt(u), false) => HostScalar::Int(u as i64),
        (Scalar::Int(i), false) => HostScalar::Int(i),
    }
}

// The hottest ops name themselves only when they fail (no formatting per call).
fn binary(op: BinaryOp, lhs: AscendTensor, rhs: AscendTensor) -> AscendTensor {
    arith::binary(op, &lhs, &rhs)
        .unwrap_or_else(|e| raise(AscendError::from_acl(&format!("{op:?}"), &e)))
        .into()
}

fn binary_scalar(op: BinaryOp, lhs: AscendTensor, rhs: Scalar) -> AscendTensor {
    let s = host_scalar(rhs, lhs.dtype());
    arith::binary_scalar(op, &lhs, s)
        .unwrap_or_else(|e| raise(AscendError::from_acl(&format!("{op:?} (scalar)"), &e)))
        .into()
}

/// Burn slices (possibly negative, possibly fewer than the rank) as device slices.
fn dim_slices(shape: &[usize], slices: &[Slice]) -> Vec<DimSlice> {
    shape
        .iter()
        .enumerate()
        .map(|(dim, &size)| match slices.get(dim) {
            Some(s) => {
                let range = s.to_range(size);
                DimSlice {
                    start: range.start,
                    end: range.end,
                    step: s.step,
                }
            }
            None => DimSlice {
                start: 0,
                end: size,
                step: 1,
            },
        })
        .collect()
}

/// A comparison result, checking that Burn asked for the bool type this backend stores.
fn bool_out(out_dtype: BoolDType, op: &str, result: AclResult<CoreTensor>) -> AscendTensor {
    bool_type(out_dtype);
    run(op, result)
}

/// The index part of a (values, indices) result, cast to `dtype`.
fn indices(op: &str, result: AclResult<(CoreTensor, CoreTensor)>, dtype: DataType) -> AscendTensor {
    let (_, order) = run(op, result);
    run(op, copy::cast(&order, dtype))
}

/// A 0-d device tensor holding a scalar operand of `like`'s dtype.
fn scalar_tensor(op: &str, like: &AscendTensor, value: Scalar) -> AscendTensor {
    let v = host_scalar(value, like.dtype());
    run(op, creation::full(like.ctx(), Vec::new(), like.dtype(), v))
}

fn nd_update(op: IndexingUpdateOp) -> NdUpdate {
    match op {
        IndexingUpdateOp::Assign => NdUpdate::Assign,
        IndexingUpdateOp::Add => NdUpdate::Add,
        IndexingUpdateOp::Mul => NdUpdate::Mul,
        IndexingUpdateOp::Min => NdUpdate::Min,
        IndexingUpdateOp::Max => NdUpdate::Max,
    }
}

fn random(
    shape: Shape,
    distribution: Distribution,
    device: &AscendDevice,
    dtype: DataType,
) -> AscendTensor {
    let draw = match distribution {
        Distribution::Default => Draw::Uniform(0.0, 1.0),
        Distribution::Uniform(lo, hi) => Draw::Uniform(lo, hi),
        Distribution::Normal(mean, std) => Draw::Normal(mean, std),
        Distribution::Bernoulli(p) => Draw::Bernoulli(p),
    };
    run(
        "random",
        crate::ops::random::random(&context(device), shape.to_vec(), dtype, draw),
    )
}

fn expand(tensor: AscendTensor, shape: Shape) -> AscendTensor {
    match tensor.layout().expand(&shape) {
        Some(layout) => tensor.with_layout(layout).into(),
        None => raise(AscendError::invalid(
            "expand",
            format!(
                "cannot expand {} to {:?}",
                tensor.describe(),
                shape.as_slice()
            ),
        )),
    }
}

impl Ascend {
    /// Statistics of `device`'s tensor allocator.
    pub fn memory_stats(device: &AscendDevice) -> crate::runtime::MemoryStats {
        context(device).memory_stats()
    }

    /// Starts `device`'s peak of bytes in use over from the bytes in use now.
    pub fn reset_peak_memory(device: &AscendDevice) {
        context(device).reset_peak_memory()
    }
}
