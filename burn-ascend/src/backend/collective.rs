//! Collectives at the Burn level: [`CollectiveOps`], implemented by `Ascend` and
//! `Fusion<Ascend>`, and tensor functions over it. Each call takes one tensor per rank of a
//! [`Communicator`] that the process holds (on the rank's device) and returns one per rank; the
//! transfer is issued on every rank's stream and never waits on the host for the peers.
//!
//! These are the building blocks of data parallelism without Burn's `distributed` feature (all-
//! reducing gradients across replicas) and of expert parallelism (moving token rows to the NPU
//! that holds their expert and back). With the feature, `Ascend` also implements Burn's own
//! `DistributedBackend` on the same transfers (`distributed.rs`).
//!
//! On `Fusion<Ascend>` a collective is a boundary: the inputs are resolved (their device work
//! queued), the transfer issued, and each output recorded as a custom op of its device's
//! stream that hands over the transferred buffer.

use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionTensor};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, TensorIr, TensorStatus};
use burn_tensor::{Int, Tensor, TensorPrimitive};

use super::*;
use crate::backend::fusion::{AscendFusionHandle, AscendFusionRuntime};
use crate::ops::collective as ops;
pub use crate::ops::collective::{Reduce, RowCounts};
pub use crate::runtime::collective::{
    check_async_errors, exec_timeout, hccl_api, set_exec_timeout, DEFAULT_EXEC_TIMEOUT,
};
pub use crate::runtime::Communicator;

/// Collectives over ranks of a communicator this process holds: one tensor per rank, on the
/// rank's device (usually one for each local rank; every rank must take part in each
/// collective, in the same order, in this call or another).
pub trait CollectiveOps: Backend<Device = AscendDevice> {
    /// Every rank receives the elementwise reduction of all ranks' tensors.
    fn float_all_reduce(
        comm: &Communicator,
        tensors: Vec<FloatTensor<Self>>,
        op: Reduce,
    ) -> Vec<FloatTensor<Self>>;
    /// Every rank receives rank `root`'s tensor.
    fn float_broadcast(
        comm: &Communicator,
        tensors: Vec<FloatTensor<Self>>,
        root: usize,
    ) -> Vec<FloatTensor<Self>>;
    /// Every rank receives all ranks' tensors concatenated along dim 0.
    fn float_all_gather(
        comm: &Communicator,
        tensors: Vec<FloatTensor<Self>>,
    ) -> Vec<FloatTensor<Self>>;
    /// [`CollectiveOps::float_all_gather`] of int tensors.
    fn int_all_gather(comm: &Communicator, tensors: Vec<IntTensor<Self>>) -> Vec<IntTensor<Self>>;
    /// Rank r receives block r along dim 0 of the reduction of all ranks' tensors.
    fn float_reduce_scatter(
        comm: &Communicator,
        tensors: Vec<FloatTensor<Self>>,
        op: Reduce,
    ) -> Vec<FloatTensor<Self>>;
    /// All-to-all of rows grouped by destination rank (`rows[src][dst]` of them); each rank
    /// receives its rows grouped by source rank.
    fn float_all_to_all_v(
        comm: &Communicator,
        tensors: Vec<FloatTensor<Self>>,
        rows: &RowCounts,
    ) -> Vec<FloatTensor<Self>>;
}

fn done(op: &str, r: AclResult<Vec<CoreTensor>>) -> Vec<AscendTensor> {
    run(op, r)
}

impl CollectiveOps for Ascend {
    fn float_all_reduce(
        comm: &Communicator,
        tensors: Vec<AscendTensor>,
        op: Reduce,
    ) -> Vec<AscendTensor> {
        done("all_reduce", ops::all_reduce(comm, cores(&tensors), op))
    }

    fn float_broadcast(
        comm: &Communicator,
        tensors: Vec<AscendTensor>,
        root: usize,
    ) -> Vec<AscendTensor> {
        done("broadcast", ops::broadcast(comm, cores(&tensors), root))
    }

    fn float_all_gather(comm: &Communicator, tensors: Vec<AscendTensor>) -> Vec<AscendTensor> {
        done("all_gather", ops::all_gather(comm, cores(&tensors)))
    }

    fn int_all_gather(comm: &Communicator, tensors: Vec<AscendTensor>) -> Vec<AscendTensor> {
        done("all_gather", ops::all_gather(comm, cores(&tensors)))
    }

    fn float_reduce_scatter(
        comm: &Communicator,
        tensors: Vec<AscendTensor>,
        op: Reduce,
    ) -> Vec<AscendTensor> {
        done(
            "reduce_scatter",
            ops::reduce_scatter(comm, cores(&tensors), op),
        )
    }

    fn float_all_to_all_v(
        comm: &Communicator,
        tensors: Vec<AscendTensor>,
        rows: &RowCounts,
    ) -> Vec<AscendTensor> {
        done(
            "all_to_all_v",
            ops::all_to_all_v(comm, cores(&tensors), rows),
        )
    }
}

type Lazy = FusionTensor<AscendFusionRuntime>;

/// A transferred buffer waiting in a device's fusion stream to become a tensor's handle.
#[derive(Debug)]
struct Arrived {
    desc: CustomOpIr,
    tensor: std::sync::Mutex<Option<AscendTensor>>,
}

impl Operation<AscendFusionRuntime> for Arrived {
    fn execute(&self, handles: &mut HandleContainer<AscendFusionHandle>) {
        let t = self
            .tensor
            .lock()
            .unwrap()
            .take()
            .expect("a transferred buffer is handed over once");
        handles.register_float_tensor::<Ascend>(&self.desc.outputs[0].id, t);
    }
}

/// Resolves lazy tensors, runs `collective` on Ascend, and records each output on the stream
/// of the input it replaces. Float and int tensors are both `AscendTensor`s, so the float
/// accessors serve both kinds.
fn lazily(
    op: &'static str,
    tensors: Vec<Lazy>,
    collective: impl FnOnce(Vec<AscendTensor>) -> Vec<AscendTensor>,
) -> Vec<Lazy> {
    let clients: Vec<_> = tensors.iter().map(|t| t.client.clone()).collect();
    let resolved = tensors
        .into_iter()
        .map(|t| t.client.clone().resolve_tensor_float::<Ascend>(t))
        .collect();
    collective(resolved)
        .into_iter()
        .zip(clients)
        .map(|(out, client)| {
            let desc = CustomOpIr {
                id: op.to_owned(),
                inputs: Vec::new(),
                outputs: vec![TensorIr {
                    id: client.create_empty_handle(),
                    shape: out.shape().into(),
                    status: TensorStatus::NotInit,
                    dtype: TensorMetadata::dtype(&out),
                }],
            };
            let arrived = Arrived {
                desc: desc.clone(),
                tensor: std::sync::Mutex::new(Some(out)),
            };
            client
                .register(
                    OperationStreams::default(),
                    OperationIr::Custom(desc),
                    arrived,
                )
                .pop()
                .expect("one output")
        })
        .collect()
}

impl CollectiveOps for Fusion<Ascend> {
    fn float_all_reduce(comm: &Communicator, tensors: Vec<Lazy>, op: Reduce) -> Vec<Lazy> {
        lazily("all_reduce", tensors, |t| {
            Ascend::float_all_reduce(comm, t, op)
        })
    }

    fn float_broadcast(comm: &Communicator, tensors: Vec<Lazy>, root: usize) -> Vec<Lazy> {
        lazily("broadcast", tensors, |t| {
            Ascend::float_broadcast(comm, t, root)
        })
    }

    fn float_all_gather(comm: &Communicator, tensors: Vec<Lazy>) -> Vec<Lazy> {
        lazily("all_gather", tensors, |t| Ascend::float_all_gather(comm, t))
    }

    fn int_all_gather(comm: &Communicator, tensors: Vec<Lazy>) -> Vec<Lazy> {
        lazily("all_gather", tensors, |t| Ascend::int_all_gather(comm, t))
    }

    fn float_reduce_scatter(comm: &Communicator, tensors: Vec<Lazy>, op: Reduce) -> Vec<Lazy> {
        lazily("reduce_scatter", tensors, |t| {
            Ascend::float_reduce_scatter(comm, t, op)
        })
    }

    fn float_all_to_all_v(comm: &Communicator, tensors: Vec<Lazy>, rows: &RowCounts) -> Vec<Lazy> {
        lazily("all_to_all_v", tensors, |t| {
            Ascend::float_all_to_all_v(comm, t, rows)
        })
    }
}

fn floats<B: Backend, const D: usize>(tensors: Vec<Tensor<B, D>>) -> Vec<FloatTensor<B>> {
    tensors
        .into_iter()
        .map(|t| t.into_primitive().tensor())
        .collect()
}

fn tensors<B: Backend, const D: usize>(prims: Vec<FloatTensor<B>>) -> Vec<Tensor<B, D>> {
    prims
        .into_iter()
        .map(|p| Tensor::from_primitive(TensorPrimitive::Float(p)))
        .collect()
}

/// Every rank receives the elementwise reduction of all ranks' tensors (one per local rank).
pub fn all_reduce<B: CollectiveOps, const D: usize>(
    comm: &Communicator,
    tensors_per_rank: Vec<Tensor<B, D>>,
    op: Reduce,
) -> Vec<Tensor<B, D>> {
    tensors(B::float_all_reduce(comm, floats(tensors_per_rank), op))
}

/// Every rank receives rank `root`'s tensor.
pub fn broadcast<B: CollectiveOps, const D: usize>(
    comm: &Communicator,
    tensors_per_rank: Vec<Tensor<B, D>>,
    root: usize,
) -> Vec<Tensor<B, D>> {
    tensors(B::float_broadcast(comm, floats(tensors_per_rank), root))
}

/// Every rank receives all ranks' tensors concatenated along dim 0, in rank order.
pub fn all_gather<B: CollectiveOps, const D: usize>(
    comm: &Communicator,
    tensors_per_rank: Vec<Tensor<B, D>>,
) -> Vec<Tensor<B, D>> {
    tensors(B::float_all_gather(comm, floats(tensors_per_rank)))
}

/// [`all_gather`] of int tensors.
pub fn all_gather_int<B: CollectiveOps, const D: usize>(
    comm: &Communicator,
    tensors_per_rank: Vec<Tensor<B, D, Int>>,
) -> Vec<Tensor<B, D, Int>> {
    let prims = tensors_per_rank
        .into_iter()
        .map(Tensor::into_primitive)
        .collect();
    B::int_all_gather(comm, prims)
        .into_iter()
        .map(Tensor::from_primitive)
        .collect()
}

/// Rank r receives block r (of equal blocks along dim 0) of the reduction of all ranks' tensors.
pub fn reduce_scatter<B: CollectiveOps, const D: usize>(
    comm: &Communicator,
    tensors_per_rank: Vec<Tensor<B, D>>,
    op: Reduce,
) -> Vec<Tensor<B, D>> {
    tensors(B::float_reduce_scatter(comm, floats(tensors_per_rank), op))
}

/// All-to-all of rows: each rank's `[rows, ...]` tensor holds the rows it sends grouped by
/// destination rank (`rows[src][dst]` for each); each rank receives the rows sent to it grouped
/// by source rank.
pub fn all_to_all_v<B: CollectiveOps, const D: usize>(
    comm: &Communicator,
    tensors_per_rank: Vec<Tensor<B, D>>,
    rows: &RowCounts,
) -> Vec<Tensor<B, D>> {
    tensors(B::float_all_to_all_v(comm, floats(tensors_per_rank), rows))
}
