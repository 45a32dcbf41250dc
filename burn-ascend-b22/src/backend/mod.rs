//! The [`Ascend`] backend type, Burn 0.22's `Backend` trait and the helpers the op traits share
//! (dtype maps, scalar operands, the panic that ends a failed op).
//!
//! Burn's op methods return tensors, not results, so a device error ends the op with a panic
//! whose message names the op, the shapes and dtypes and the runtime's explanation.

mod activation;
mod bool;
mod device;
mod distributed;
mod float;
pub mod fusion;
mod graph;
mod int;
mod ir;
mod module;
mod profile;
mod qtensor;
mod qtensor_ops;
mod signal;
mod tensor;
mod transaction;

use std::sync::Arc;

use burn_backend::ops::*;
use burn_backend::tensor::{
    BoolTensor, Device, FloatTensor, IndexingUpdateOp, IntTensor, QuantizedTensor,
};
use burn_backend::{
    Backend, BackendTypes, DType, DTypeUsage, DTypeUsageSet, Distribution, ExecutionError,
    MemoryPoolUsage, Scalar, TensorData, TensorMetadata,
};
use burn_std::{BoolDType, BoolStore, FloatDType, IntDType, Shape, Slice};

use crate::error::{raise, record, AscendError};
use burn_ascend_core::acl::handles::HostScalar;
use burn_ascend_core::acl::{AclError, AclResult, DataType};
use burn_ascend_core::ops::activation::{self as act, Activation};
use burn_ascend_core::ops::arith::{self, BinaryOp};
use burn_ascend_core::ops::compare::{self, Compare, Logical};
use burn_ascend_core::ops::copy::{self, DimSlice};
use burn_ascend_core::ops::index::{self, NdUpdate};
use burn_ascend_core::ops::math::{self, Unary};
use burn_ascend_core::ops::random::Draw;
use burn_ascend_core::ops::reduce::{self, Reduce, Scan};
use burn_ascend_core::ops::AscendTensor as CoreTensor;
use burn_ascend_core::ops::{creation, matmul, sort, update};
use burn_ascend_core::runtime::DeviceContext;
pub use device::{reset_device, AscendDevice};
pub use graph::AscendGraph;
pub use ir::AscendHandle;
pub use qtensor::AscendQTensor;
pub use tensor::AscendTensor;
use tensor::{cores, Lift};

/// The Ascend backend for Burn 0.22: tensors on a Huawei Ascend NPU (through CANN) or on the
/// emulated NPU. Burn 0.22 programs reach it through `burn-ascend-server` (Burn's remote
/// backend); in process it serves primitive-level code and `Autodiff<Ascend>`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ascend;

impl BackendTypes for Ascend {
    type Device = AscendDevice;
    type FloatTensorPrimitive = AscendTensor;
    type IntTensorPrimitive = AscendTensor;
    type BoolTensorPrimitive = AscendTensor;
    type QuantizedTensorPrimitive = AscendQTensor;
    type GraphPrimitive = AscendGraph;
}

impl Backend for Ascend {
    // The methods both adapters share (burn-ascend-core's adapter_methods); below, this
    // Burn version's own.
    burn_ascend_core::adapter_backend_methods!();

    /// Every op is queued on the device's stream as it is called: nothing waits on the host.
    fn flush(device: &Self::Device) -> Result<(), ExecutionError> {
        context(device)
            .check_alive()
            .map_err(|e| execution_error(&format!("flush of {device}"), &e))
    }

    /// Device time on ACL events, through the split windows (`profile.rs`): nothing is held
    /// while `func` runs.
    fn profile<O: Send + 'static>(
        device: &Self::Device,
        options: profile::ProfileOptions,
        func: impl FnOnce() -> O + Send,
    ) -> Result<(O, profile::ProfileDuration), ExecutionError> {
        burn_backend::profile_with_tokens::<Self, O>(device, options, func)
    }

    fn profile_start(
        device: &Self::Device,
    ) -> Result<Option<profile::ProfileToken>, ExecutionError> {
        profile::start(device)
    }

    fn profile_end(
        device: &Self::Device,
        token: profile::ProfileToken,
        options: profile::ProfileOptions,
    ) -> Result<profile::ProfileDuration, ExecutionError> {
        profile::end(device, token, options)
    }

    /// Destroys the window's start event without recording an end.
    fn profile_abandon(_device: &Self::Device, token: profile::ProfileToken) {
        profile::abandon(token)
    }

    fn graph_start_capture(device: &Self::Device) -> Result<(), ExecutionError> {
        graph::start(device)
    }

    fn graph_stop_capture(device: &Self::Device) -> Result<AscendGraph, ExecutionError> {
        graph::stop(device)
    }

    /// # Safety
    ///
    /// Burn's contract: every tensor the captured work reads or writes is still alive and not
    /// used concurrently elsewhere.
    unsafe fn graph_replay(
        device: &Self::Device,
        graph: &AscendGraph,
    ) -> Result<(), ExecutionError> {
        graph::replay(device, graph)
    }

    fn memory_pool_usage(device: &Self::Device) -> Option<MemoryPoolUsage> {
        let stats = context(device).memory_stats();
        // The allocator counts device blocks and size-class bytes, not tensors or their
        // padding: live blocks stand for the allocations, the padding is inside `bytes_in_use`.
        Some(MemoryPoolUsage {
            number_allocs: stats.device_allocations.saturating_sub(stats.device_frees) as u64,
            bytes_in_use: stats.bytes_in_use as u64,
            bytes_padding: 0,
            bytes_reserved: stats.bytes_reserved as u64,
        })
    }
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
    let dtype = data_type(data.dtype());
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
                data.dtype()
            ),
        ));
    }
    run(
        "from_data",
        creation::from_bytes(
            &context(device),
            data.shape().to_vec(),
            dtype,
            data.as_bytes(),
        ),
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
        burn_ascend_core::ops::random::random(&context(device), shape.to_vec(), dtype, draw),
    )
}

impl Ascend {
    /// Statistics of `device`'s tensor allocator.
    pub fn memory_stats(device: &AscendDevice) -> burn_ascend_core::runtime::MemoryStats {
        context(device).memory_stats()
    }
}
