//! Elementwise fusion without a JIT: the fuser collects runs of element-wise ops of one shape
//! from the op stream, and the optimization runs each run as one launch of the precompiled
//! `elementwise_program` kernel, with the program lowered on the host (`lower.rs`).

/// Emits the `elementwise` module's items (see [`ascend_fusion!`](crate::ascend_fusion)).
#[doc(hidden)]
#[macro_export]
macro_rules! __ascend_fusion_elementwise {
    ($handle:ident) => {
        use burn_fusion::stream::{Context, OrderedExecution};
        use burn_fusion::{FuserProperties, FuserStatus, NumOperations, OperationFuser};
        use burn_ir::{OperationIr, ScalarIr, TensorIr};
        use serde::{Deserialize, Serialize};

        use super::super::run;
        use super::super::tensor::cores;
        use super::super::AscendTensor;
        use super::lower::Lowering;
        use super::{global, scalar, take_input, $handle, AscendFusionRuntime, AscendOptimization};
        use $crate::ops::fused::run_program;

        /// Collects element-wise ops while they lower onto one program.
        #[derive(Debug, Clone)]
        pub struct ElementwiseFuser {
            ops: Vec<OperationIr>,
            lowering: Lowering,
            status: FuserStatus,
        }

        impl Default for ElementwiseFuser {
            fn default() -> Self {
                Self {
                    ops: Vec::new(),
                    lowering: Lowering::default(),
                    status: FuserStatus::Open,
                }
            }
        }

        /// Scalars are not known while fusing (the op stream gives ids); what fuses never depends on
        /// their values.
        fn any_scalar(_: &ScalarIr) -> f32 {
            0.0
        }

        impl OperationFuser<AscendOptimization> for ElementwiseFuser {
            fn fuse(&mut self, operation: &OperationIr) {
                if self.status == FuserStatus::Closed {
                    return;
                }
                let mut next = self.lowering.clone();
                let fits = next.lower(operation, &any_scalar).is_some()
                    && next.program().compile().is_ok();
                if fits {
                    self.lowering = next;
                    self.ops.push(operation.clone());
                } else {
                    self.status = FuserStatus::Closed;
                }
            }

            fn finish(&mut self) -> AscendOptimization {
                AscendOptimization::Elementwise(ElementwiseOptimization {
                    ops: self.ops.clone(),
                })
            }

            fn reset(&mut self) {
                *self = Self::default();
            }

            fn status(&self) -> FuserStatus {
                self.status
            }

            fn properties(&self) -> FuserProperties {
                // One op gains nothing from a program launch; two or more save launches and traffic.
                let computing = self.lowering.computing as u64;
                FuserProperties {
                    score: computing,
                    ready: computing >= 2,
                }
            }

            fn len(&self) -> usize {
                self.ops.len()
            }

            fn clone_dyn(&self) -> Box<dyn OperationFuser<AscendOptimization>> {
                Box::new(self.clone())
            }
        }

        /// A run of element-wise ops executed as one `elementwise_program` launch. It holds the ops as
        /// the stream recorded them (relative ids); each execution lowers them again with that
        /// execution's scalars and tensors.
        #[derive(Debug, Clone, Serialize, Deserialize)]
        pub struct ElementwiseOptimization {
            ops: Vec<OperationIr>,
        }

        impl NumOperations for ElementwiseOptimization {
            fn len(&self) -> usize {
                self.ops.len()
            }

            fn name(&self) -> &'static str {
                "elementwise_program"
            }
        }

        impl ElementwiseOptimization {
            pub(super) fn execute(
                &mut self,
                context: &mut Context<$handle>,
                execution: &OrderedExecution<AscendFusionRuntime>,
            ) {
                let mut lowering = Lowering::default();
                for op in &self.ops {
                    lowering
                        .lower(op, &|s| scalar(context, s))
                        .expect("a recorded block lowers as it did when fused");
                }
                let outputs: Vec<TensorIr> = lowering
                    .outputs()
                    .iter()
                    .map(|t| global(context, t))
                    .collect();
                let Some(shape) = outputs.first().map(|t| t.shape.clone()) else {
                    // Nothing outlives the block: only the inputs it consumed need releasing.
                    for t in &lowering.inputs {
                        take_input(context, t);
                    }
                    return;
                };
                if shape.num_elements() > u32::MAX as usize {
                    // Larger than a program addresses: run the recorded ops one by one.
                    for i in 0..self.ops.len() {
                        execution
                            .operation_within_optimization(i)
                            .execute(&mut context.handles);
                    }
                    return;
                }
                let tensors: Vec<AscendTensor> = lowering
                    .inputs
                    .iter()
                    .map(|t| take_input(context, t))
                    .collect();
                let results = run(
                    "elementwise_program",
                    run_program(&lowering.program(), cores(&tensors), shape.as_slice()),
                );
                for (t, result) in outputs.iter().zip(results) {
                    context
                        .handles
                        .register_handle(t.id, $handle::Tensor(result));
                }
            }
        }
    };
}
