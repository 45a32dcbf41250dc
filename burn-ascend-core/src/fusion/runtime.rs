//! The top-level macro: the fusion runtime, its optimizations and the helpers the fusers share.

/// `Ascend` as a `burn-fusion` backend: `FusionBackend for Ascend`, its runtime
/// (`AscendFusionRuntime`), the optimizations (`AscendOptimization` and its serialized
/// `AscendOptimizationState`) and the four fusers, expanded in an adapter's scope so that
/// `Fusion<Ascend>` (and `Autodiff<Fusion<Ascend>>`) records the op stream lazily and runs it on
/// the device.
///
/// Expand it once, in a child module (`fusion`) of the adapter's backend module, as
/// `burn_ascend_core::ascend_fusion!(Handle);` where `Handle` (in scope there) is the adapter's
/// `BackendIr::Handle` of `Ascend`, an enum with a `Tensor(AscendTensor)` variant. The expansion
/// names, in that parent module: `Ascend`, `AscendTensor`, `AscendDevice`, `run`, `float_type`
/// and `tensor::cores`; and the crates `burn_backend`, `burn_fusion`, `burn_ir`, `burn_std` and
/// `serde`. Handles are the backend's own tensors: fusion hands them back to the `Ascend` ops
/// unchanged.
#[macro_export]
macro_rules! ascend_fusion {
    ($handle:ident) => {
        /// Runs of element-wise ops as one `elementwise_program` launch.
        mod elementwise {
            $crate::__ascend_fusion_elementwise!($handle);
        }
        /// Layer norm as Burn composes it, as one `layer_norm` launch.
        mod layer_norm {
            $crate::__ascend_fusion_layer_norm!($handle);
        }
        /// Linear as Burn composes it, as one aclnnAddmm.
        mod linear {
            $crate::__ascend_fusion_linear!($handle);
        }
        /// Lowering of recorded element-wise ops onto the interpreted kernel's instructions.
        mod lower {
            $crate::__ascend_fusion_lower!();
        }
        /// Fusers of fixed op sequences.
        mod pattern {
            $crate::__ascend_fusion_pattern!();
        }
        /// Softmax and log-softmax as Burn composes them, as one aclnn operator.
        mod softmax {
            $crate::__ascend_fusion_softmax!($handle);
        }

        pub use elementwise::{ElementwiseFuser, ElementwiseOptimization};
        pub use layer_norm::{LayerNormFuser, LayerNormOptimization, LayerNormPattern};
        pub use linear::{LinearFuser, LinearOptimization, LinearPattern};
        pub use pattern::{Pattern, PatternFuser};
        pub use softmax::{SoftmaxFuser, SoftmaxOptimization, SoftmaxPattern};

        /// The fusion runtime of `Ascend`.
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
        #[derive(Debug, serde::Serialize, serde::Deserialize)]
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

        impl burn_fusion::NumOperations for AscendOptimization {
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

        impl burn_fusion::Optimization<AscendFusionRuntime> for AscendOptimization {
            fn execute(
                &mut self,
                context: &mut burn_fusion::stream::Context<$handle>,
                execution: &burn_fusion::stream::OrderedExecution<AscendFusionRuntime>,
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

            fn from_state(_device: &super::AscendDevice, state: AscendOptimizationState) -> Self {
                match state {
                    AscendOptimizationState::Elementwise(o) => Self::Elementwise(o),
                    AscendOptimizationState::LayerNorm(o) => Self::LayerNorm(o),
                    AscendOptimizationState::Linear(o) => Self::Linear(o),
                    AscendOptimizationState::Softmax(o) => Self::Softmax(o),
                }
            }
        }

        impl burn_fusion::FusionRuntime for AscendFusionRuntime {
            type OptimizationState = AscendOptimizationState;
            type Optimization = AscendOptimization;
            type FusionHandle = $handle;
            type FusionDevice = super::AscendDevice;

            /// The kernel-backed fusers only where the device can run their kernel: elsewhere
            /// the recorded ops run unfused (see `DeviceContext::has_kernel`).
            ///
            /// burn-fusion builds a stream's fusers on the device's runner thread, which then
            /// runs every op of the stream: that thread defers device faults to the next read or
            /// sync, since an op that panics there breaks burn-fusion 0.21's stream for good
            /// (0.22 catches it, and a deferred fault still surfaces at the read; see
            /// `runtime::context::defer_device_faults`).
            fn fusers(
                device: super::AscendDevice,
            ) -> Vec<Box<dyn burn_fusion::OperationFuser<AscendOptimization>>> {
                $crate::runtime::context::defer_device_faults();
                let has_kernel = |kernel| {
                    $crate::runtime::DeviceContext::get(&device.into())
                        .is_ok_and(|ctx| ctx.has_kernel(kernel))
                };
                let mut fusers: Vec<Box<dyn burn_fusion::OperationFuser<AscendOptimization>>> =
                    Vec::new();
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

        impl burn_fusion::FusionBackend for super::Ascend {
            type FusionRuntime = AscendFusionRuntime;
            type FullPrecisionBackend = super::Ascend;

            fn cast_float(
                tensor: burn_backend::tensor::FloatTensor<Self>,
                dtype: burn_backend::DType,
            ) -> Self::Handle {
                let target = super::float_type(dtype.into());
                $handle::Tensor(super::run(
                    "cast_float",
                    $crate::ops::copy::cast(&tensor, target),
                ))
            }
        }

        /// The execution's tensor behind a block's recorded (relative) tensor.
        fn global(
            context: &burn_fusion::stream::Context<$handle>,
            t: &burn_ir::TensorIr,
        ) -> burn_ir::TensorIr {
            context
                .tensors
                .get(&t.id)
                .expect("every tensor of an executed block is mapped")
                .clone()
        }

        /// Takes a block input as an `Ascend` float tensor of this execution's shape. `recorded`
        /// is the input as the block's last op using it recorded it: its status says whether the
        /// block holds the last reference (then the handle leaves the context). The context's
        /// own status is the tensor's last use in the whole recorded stream, which may come after
        /// the block.
        fn take_input(
            context: &mut burn_fusion::stream::Context<$handle>,
            recorded: &burn_ir::TensorIr,
        ) -> super::AscendTensor {
            let t = global(context, recorded);
            let handle = context.handles.get_handle(&t.id, &recorded.status);
            <super::Ascend as burn_ir::BackendIr>::float_tensor(burn_ir::TensorHandle {
                handle,
                shape: t.shape.clone(),
            })
        }

        /// A recorded scalar's value in this execution.
        fn scalar_value(
            context: &burn_fusion::stream::Context<$handle>,
            s: &burn_ir::ScalarIr,
        ) -> burn_ir::ScalarIr {
            match s {
                burn_ir::ScalarIr::UInt(id) => *context
                    .scalars
                    .get(&burn_fusion::stream::ScalarId { value: *id })
                    .expect("the op stream registered every scalar of the block"),
                other => *other,
            }
        }

        /// A recorded scalar's value in this execution, as the f32 the kernels compute with.
        fn scalar(context: &burn_fusion::stream::Context<$handle>, s: &burn_ir::ScalarIr) -> f32 {
            lower::scalar_f32(&scalar_value(context, s))
        }
    };
}
