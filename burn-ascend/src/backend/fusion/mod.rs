//! `Ascend` as a `burn-fusion` backend, so that `Fusion<Ascend>` (and
//! `Autodiff<Fusion<Ascend>>`) records the op stream lazily and runs it on the device.
//!
//! Handles are the backend's own tensors: fusion hands them back to the `Ascend` ops unchanged.
//! Four fusers are registered: runs of element-wise ops become one launch of the interpreted
//! `elementwise_program` kernel (`elementwise.rs`, lowered by `lower.rs`); layer norm as Burn
//! composes it becomes one launch of the `layer_norm` kernel (`layer_norm.rs`); linear as Burn
//! composes it (matmul, then bias) becomes one aclnnAddmm (`linear.rs`); softmax and
//! log-softmax as Burn composes them become one aclnnSoftmax / aclnnLogSoftmax (`softmax.rs`).
//! Every other recorded op runs through its `Ascend` implementation.

mod elementwise;
mod layer_norm;
mod linear;
mod lower;
mod pattern;
mod softmax;

pub use elementwise::{ElementwiseFuser, ElementwiseOptimization};
pub use layer_norm::{LayerNormFuser, LayerNormOptimization, LayerNormPattern};
pub use linear::{LinearFuser, LinearOptimization, LinearPattern};
pub use pattern::{Pattern, PatternFuser};
pub use softmax::{SoftmaxFuser, SoftmaxOptimization, SoftmaxPattern};

use burn_backend::ops::{BoolTensorOps, FloatTensorOps, IntTensorOps};
use burn_backend::tensor::{BoolTensor, FloatTensor, IntTensor, QuantizedTensor};
use burn_backend::{DType, Shape, TensorMetadata};
use burn_fusion::stream::{Context, OrderedExecution, ScalarId};
use burn_fusion::{FusionBackend, FusionRuntime, NumOperations, OperationFuser, Optimization};
use burn_ir::{BackendIr, ScalarIr, TensorHandle, TensorIr};
use serde::{Deserialize, Serialize};

use super::{run, Ascend, AscendQTensor};
use crate::ops::copy;
use crate::{AscendDevice, AscendTensor};

/// A tensor of any kind as the fusion runtime holds it.
#[derive(Debug, Clone)]
pub enum AscendFusionHandle {
    /// A float, int or bool tensor.
    Tensor(AscendTensor),
    /// A quantized tensor (values and scales).
    Quantized(AscendQTensor),
}

impl AscendFusionHandle {
    fn tensor(self, kind: &str) -> AscendTensor {
        match self {
            Self::Tensor(t) => t,
            // Fusion keeps each handle with the kind it was registered as.
            Self::Quantized(_) => unreachable!("a quantized handle used as a {kind} tensor"),
        }
    }
}

/// The fusion runtime of [`Ascend`].
#[derive(Debug)]
pub struct AscendFusionRuntime;

/// The optimizations `Fusion<Ascend>` runs in place of recorded ops.
#[derive(Debug)]
pub enum AscendOptimization {
    /// A run of element-wise ops as one interpreted-kernel launch.
    Elementwise(ElementwiseOptimization),
    /// A composed layer norm as one `layer_norm` kernel launch.
    LayerNorm(LayerNormOptimization),
    /// A composed linear (matmul plus bias) as one aclnnAddmm.
    Linear(LinearOptimization),
    /// A composed softmax or log-softmax as one aclnn operator.
    Softmax(SoftmaxOptimization),
}

/// The serialized form of an [`AscendOptimization`].
#[derive(Debug, Serialize, Deserialize)]
pub enum AscendOptimizationState {
    /// See [`AscendOptimization::Elementwise`].
    Elementwise(ElementwiseOptimization),
    /// See [`AscendOptimization::LayerNorm`].
    LayerNorm(LayerNormOptimization),
    /// See [`AscendOptimization::Linear`].
    Linear(LinearOptimization),
    /// See [`AscendOptimization::Softmax`].
    Softmax(SoftmaxOptimization),
}

impl NumOperations for AscendOptimization {
    fn len(&self) -> usize {
        match self {
            Self::Elementwise(o) => o.len(),
            Self::LayerNorm(o) => o.len(),
            Self::Linear(o) => o.len(),
            Self::Softmax(o) => o.len(),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Self::Elementwise(o) => o.name(),
            Self::LayerNorm(o) => o.name(),
            Self::Linear(o) => o.name(),
            Self::Softmax(o) => o.name(),
        }
    }
}

impl Optimization<AscendFusionRuntime> for AscendOptimization {
    fn execute(
        &mut self,
        context: &mut Context<AscendFusionHandle>,
        execution: &OrderedExecution<AscendFusionRuntime>,
    ) {
        match self {
            Self::Elementwise(o) => o.execute(context, execution),
            Self::LayerNorm(o) => o.execute(context),
            Self::Linear(o) => o.execute(context),
            Self::Softmax(o) => o.execute(context),
        }
    }

    fn to_state(&self) -> AscendOptimizationState {
        match self {
            Self::Elementwise(o) => AscendOptimizationState::Elementwise(o.clone()),
            Self::LayerNorm(o) => AscendOptimizationState::LayerNorm(o.clone()),
            Self::Linear(o) => AscendOptimizationState::Linear(o.clone()),
            Self::Softmax(o) => AscendOptimizationState::Softmax(o.clone()),
        }
    }

    fn from_state(_device: &AscendDevice, state: AscendOptimizationState) -> Self {
        match state {
            AscendOptimizationState::Elementwise(o) => Self::Elementwise(o),
            AscendOptimizationState::LayerNorm(o) => Self::LayerNorm(o),
            AscendOptimizationState::Linear(o) => Self::Linear(o),
            AscendOptimizationState::Softmax(o) => Self::Softmax(o),
        }
    }
}

impl FusionRuntime for AscendFusionRuntime {
    type OptimizationState = AscendOptimizationState;
    type Optimization = AscendOptimization;
    type FusionHandle = AscendFusionHandle;
    type FusionDevice = AscendDevice;

    /// The kernel-backed fusers only where the device can run their kernel: elsewhere the
    /// recorded ops run unfused (see `DeviceContext::has_kernel`).
    ///
    /// burn-fusion builds a stream's fusers on the device's runner thread, which then runs every
    /// op of the stream: that thread defers device faults to the next read or sync, since an op
    /// that panics there breaks burn-fusion's stream for good (see
    /// `runtime::context::defer_device_faults`).
    fn fusers(device: AscendDevice) -> Vec<Box<dyn OperationFuser<AscendOptimization>>> {
        crate::runtime::context::defer_device_faults();
        let has_kernel = |kernel| {
            crate::runtime::DeviceContext::get(&device.into())
                .is_ok_and(|ctx| ctx.has_kernel(kernel))
        };
        let mut fusers: Vec<Box<dyn OperationFuser<AscendOptimization>>> = Vec::new();
        if has_kernel("elementwise_program") {
            fusers.push(Box::new(ElementwiseFuser::default()));
        }
        if has_kernel("layer_norm") {
            fusers.push(Box::new(LayerNormFuser::default()));
        }
        fusers.push(Box::new(LinearFuser::default()));
        fusers.push(Box::new(SoftmaxFuser::default()));
        fusers
    }
}

impl BackendIr for Ascend {
    type Handle = AscendFusionHandle;

    fn float_tensor(handle: TensorHandle<Self::Handle>) -> FloatTensor<Self> {
        shaped(handle, "float", Ascend::float_reshape)
    }

    fn int_tensor(handle: TensorHandle<Self::Handle>) -> IntTensor<Self> {
        shaped(handle, "int", Ascend::int_reshape)
    }

    fn bool_tensor(handle: TensorHandle<Self::Handle>) -> BoolTensor<Self> {
        shaped(handle, "bool", Ascend::bool_reshape)
    }

    fn quantized_tensor(handle: TensorHandle<Self::Handle>) -> QuantizedTensor<Self> {
        match handle.handle {
            AscendFusionHandle::Quantized(q) => q,
            AscendFusionHandle::Tensor(_) => {
                unreachable!("a float/int/bool handle used as a quantized tensor")
            }
        }
    }

    fn float_tensor_handle(tensor: FloatTensor<Self>) -> Self::Handle {
        AscendFusionHandle::Tensor(tensor)
    }

    fn int_tensor_handle(tensor: IntTensor<Self>) -> Self::Handle {
        AscendFusionHandle::Tensor(tensor)
    }

    fn bool_tensor_handle(tensor: BoolTensor<Self>) -> Self::Handle {
        AscendFusionHandle::Tensor(tensor)
    }

    fn quantized_tensor_handle(tensor: QuantizedTensor<Self>) -> Self::Handle {
        AscendFusionHandle::Quantized(tensor)
    }
}

/// The execution's tensor behind a block's recorded (relative) tensor.
fn global(context: &Context<AscendFusionHandle>, t: &TensorIr) -> TensorIr {
    context
        .tensors
        .get(&t.id)
        .expect("every tensor of an executed block is mapped")
        .clone()
}

/// Takes a block input as an `Ascend` float tensor of this execution's shape. `recorded` is the
/// input as the block's last op using it recorded it: its status says whether the block holds
/// the last reference (then the handle leaves the context). The context's own status is the
/// tensor's last use in the whole recorded stream, which may come after the block.
fn take_input(context: &mut Context<AscendFusionHandle>, recorded: &TensorIr) -> AscendTensor {
    let t = global(context, recorded);
    let handle = context.handles.get_handle(&t.id, &recorded.status);
    shaped(
        TensorHandle {
            handle,
            shape: t.shape.clone(),
        },
        "float",
        Ascend::float_reshape,
    )
}

/// A recorded scalar's value in this execution.
fn scalar_value(context: &Context<AscendFusionHandle>, s: &ScalarIr) -> ScalarIr {
    match s {
        ScalarIr::UInt(id) => *context
            .scalars
            .get(&ScalarId { value: *id })
            .expect("the op stream registered every scalar of the block"),
        other => *other,
    }
}

/// A recorded scalar's value in this execution, as the f32 the kernels compute with.
fn scalar(context: &Context<AscendFusionHandle>, s: &ScalarIr) -> f32 {
    lower::scalar_f32(&scalar_value(context, s))
}

/// The tensor of a handle with the shape the op stream recorded for it. The views agree while
/// no optimization rewrites handles; one that differed would be reshaped rather than trusted.
fn shaped(
    handle: TensorHandle<AscendFusionHandle>,
    kind: &str,
    reshape: fn(AscendTensor, Shape) -> AscendTensor,
) -> AscendTensor {
    let t = handle.handle.tensor(kind);
    if TensorMetadata::shape(&t) == handle.shape {
        t
    } else {
        reshape(t, handle.shape)
    }
}

impl FusionBackend for Ascend {
    type FusionRuntime = AscendFusionRuntime;
    type FullPrecisionBackend = Ascend;

    fn cast_float(tensor: FloatTensor<Self>, dtype: DType) -> Self::Handle {
        let target = super::float_type(dtype.into());
        AscendFusionHandle::Tensor(run("cast_float", copy::cast(&tensor, target)))
    }
}
