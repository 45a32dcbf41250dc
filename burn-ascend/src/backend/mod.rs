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
    // The methods both adapters share (burn-ascend-core's adapter_methods); below, this
    // Burn version's own.
    burn_ascend_core::adapter_backend_methods!();
}

// The helpers both adapters share (burn-ascend-core's adapter_methods).
burn_ascend_core::adapter_backend_helpers!();

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
    from_bytes(
        data.as_bytes(),
        data.shape.to_vec(),
        data.dtype,
        device,
        kind,
    )
}

/// A tensor of `shape` and `dtype` holding `bytes` (row-major, the host's byte order).
fn from_bytes(
    bytes: &[u8],
    shape: Vec<usize>,
    dtype: DType,
    device: &AscendDevice,
    kind: Kind,
) -> AscendTensor {
    from_bytes_with(bytes, shape, dtype, device, kind, creation::Upload::Staged)
}

/// [`from_bytes`], uploading as `upload` says.
fn from_bytes_with(
    bytes: &[u8],
    shape: Vec<usize>,
    dtype: DType,
    device: &AscendDevice,
    kind: Kind,
    upload: creation::Upload,
) -> AscendTensor {
    let data_type = data_type(dtype);
    let fits = match kind {
        Kind::Float => data_type.is_float(),
        Kind::Int => !data_type.is_float() && data_type != DataType::Bool,
        Kind::Bool => data_type == DataType::Bool,
    };
    if !fits {
        raise(AscendError::invalid(
            "from_data",
            format!("a {kind:?} tensor cannot be created from {dtype:?} data"),
        ));
    }
    run(
        "from_data",
        creation::from_bytes_by(&context(device), shape, data_type, bytes, upload),
    )
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

impl Ascend {
    /// A float tensor of `shape` and `dtype` holding `bytes` (row-major, little-endian),
    /// uploaded from wherever they are (a memory-mapped file, a reused buffer) without the
    /// owned copy `Tensor::from_data` takes, and with a blocking copy after the device's queued
    /// work rather than through the page-locked staging `from_data` uses: a loader streaming
    /// gigabytes of weights wants no host copy it can avoid. A size that does not match is an
    /// error naming both, as from_data's.
    pub fn float_from_bytes<const D: usize>(
        bytes: &[u8],
        shape: [usize; D],
        dtype: DType,
        device: &AscendDevice,
    ) -> burn_tensor::Tensor<Ascend, D> {
        let t = from_bytes_with(
            bytes,
            shape.to_vec(),
            dtype,
            device,
            Kind::Float,
            creation::Upload::Blocking,
        );
        burn_tensor::Tensor::from_primitive(burn_tensor::TensorPrimitive::Float(t))
    }

    /// Statistics of `device`'s tensor allocator.
    pub fn memory_stats(device: &AscendDevice) -> crate::runtime::MemoryStats {
        context(device).memory_stats()
    }

    /// Starts `device`'s peak of bytes in use over from the bytes in use now.
    pub fn reset_peak_memory(device: &AscendDevice) {
        context(device).reset_peak_memory()
    }
}
