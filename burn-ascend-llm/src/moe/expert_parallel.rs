//! Expert parallelism: the routed experts of every MoE layer split across the ranks of a
//! communicator in contiguous ranges (with N ranks and E experts, rank r holds experts
//! `r*E/N .. (r+1)*E/N`), token rows dispatched to the rank holding their expert and combined
//! back. [`ExpertDispatch`] is the one implementation, used by the built-in decoder
//! ([`ExpertParallel`]: its experts split, the rest on the first NPU) and by every Hugging Face
//! family split across NPUs ([`crate::families::parallel`]).
//!
//! One layer over the tokens each rank holds (some ranks may hold none), already routed:
//! 1. each rank with tokens gathers their rows in expert order (`fused::moe_gather`): the rows
//!    bound for each rank are then contiguous, in destination order, which is the layout HCCL's
//!    AlltoAllV sends;
//! 2. an all-gather of every rank's rows per expert gives each rank the whole count matrix,
//!    which is read back to the host (HCCL takes AlltoAllV's counts as host arrays, and they
//!    size the receiving buffers): the one read of the step before its logits, and why a step
//!    with expert parallelism is not captured into a graph;
//! 3. AlltoAllV sends every row, and its expert id, to the rank holding that expert;
//! 4. each rank orders the rows it received by expert (a stable argsort, so the rows of one
//!    source keep their order), runs its experts (one grouped matmul per projection, float or
//!    int8: [`Experts::grouped`]) and restores the received order;
//! 5. AlltoAllV with the counts transposed sends every row back to its source, where
//!    `fused::moe_scatter` combines each token's k rows with their routing weights.
//!
//! Each row is computed by the same expert weights as on one device, so the layer's output is
//! the single-device output.

use std::ops::Range;
use std::sync::Arc;

use burn::module::{Module, Param};
use burn::tensor::{DType, Int, Tensor};
use burn_ascend::collective::{self, CollectiveOps, Communicator, RowCounts};
use burn_ascend::{AscendDevice, FusedOps};

use super::model::{Dims, Experts, Moe, MoeDecoder, Routing};
use super::parallel::Parallel;

/// Why a model cannot be split across NPUs.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("expert parallelism: {0}")]
pub struct ExpertParallelError(pub String);

type AllGatherInt<B> = fn(&Communicator, Vec<Tensor<B, 1, Int>>) -> Vec<Tensor<B, 1, Int>>;
type AllToAllV<B> = fn(&Communicator, Vec<Tensor<B, 2>>, &RowCounts) -> Vec<Tensor<B, 2>>;
type Shard<B> = fn(MoeDecoder<B>, &[AscendDevice]) -> Result<MoeDecoder<B>, ExpertParallelError>;

/// The experts rank `rank` of `ranks` holds, of `experts`.
pub fn experts_of(rank: usize, ranks: usize, experts: usize) -> Range<usize> {
    rank * experts / ranks..(rank + 1) * experts / ranks
}

/// Dispatch and combine of routed rows across the ranks of a communicator (see the module
/// doc); the expert weights are the caller's, one shard per local rank.
pub struct ExpertDispatch<B: FusedOps> {
    comm: Arc<Communicator>,
    /// The communicator's rank of each of this process's ranks, in `local_ranks` order.
    ranks: Vec<usize>,
    // The collectives of `B`, bound where `B: CollectiveOps` is known (the layers' forward and
    // the server only know `B: FusedOps`).
    all_gather_int: AllGatherInt<B>,
    all_to_all_v: AllToAllV<B>,
}

impl<B: FusedOps> Clone for ExpertDispatch<B> {
    fn clone(&self) -> Self {
        Self {
            comm: self.comm.clone(),
            ranks: self.ranks.clone(),
            all_gather_int: self.all_gather_int,
            all_to_all_v: self.all_to_all_v,
        }
    }
}

impl<B: FusedOps + CollectiveOps> ExpertDispatch<B> {
    /// Dispatch over `comm`, whose ranks in this process hold the expert shards the forward
    /// passes are given, in rank order.
    pub fn new(comm: Arc<Communicator>) -> Self {
        let ranks = comm.local_ranks().iter().map(|r| r.rank as usize).collect();
        Self {
            comm,
            ranks,
            all_gather_int: |c, t| collective::all_gather_int(c, t),
            all_to_all_v: |c, t, r| collective::all_to_all_v(c, t, r),
        }
    }
}

impl<B: FusedOps> ExpertDispatch<B> {
    /// The communicator.
    pub fn comm(&self) -> &Arc<Communicator> {
        &self.comm
    }

    /// Ranks in the communicator (in every process).
    pub fn size(&self) -> usize {
        self.comm.size()
    }

    /// The communicator's rank of each of this process's ranks.
    pub fn ranks(&self) -> &[usize] {
        &self.ranks
    }

    /// The layer's rows of every local rank through the experts, each row on the rank that
    /// holds its expert: `inputs[i]` are local rank i's tokens `x [T_i, H]` on its device and
    /// their routing (`top_k` experts per token, of `experts` in the layer), or `None` for a
    /// rank without tokens; `shards[i]` are the experts local rank i holds
    /// ([`experts_of`] its rank). Rows are `dtype`, `width` wide. Returns each local rank's
    /// combined output `[T_i, H]` (`None` where it had no tokens).
    ///
    /// Every rank of the communicator, in every process, must call this for the same layer.
    pub fn forward(
        &self,
        inputs: Vec<Option<(Tensor<B, 2>, &Routing<B>)>>,
        top_k: usize,
        experts: usize,
        shards: &[&Experts<B>],
        (dtype, width): (DType, usize),
    ) -> Vec<Option<Tensor<B, 2>>> {
        let (k, e) = (top_k, experts);
        assert_eq!(
            (inputs.len(), shards.len()),
            (self.ranks.len(), self.ranks.len()),
            "expert dispatch: one input and one expert shard per local rank"
        );
        let devices: Vec<B::Device> = shards.iter().map(|s| s.device()).collect();
        let orders: Vec<Option<Tensor<B, 1, Int>>> = inputs
            .iter()
            .map(|input| input.as_ref().map(|(_, r)| r.order()))
            .collect();
        // Rows in expert order, and each row's expert id (exact as an f32).
        let (rows, ids): (Vec<_>, Vec<_>) = inputs
            .iter()
            .zip(&orders)
            .zip(&devices)
            .map(|((input, order), device)| match (input, order) {
                (Some((x, r)), Some(order)) => {
                    let rows = burn_ascend::fused::moe_gather(x.clone(), order.clone(), k);
                    let n = rows.dims()[0];
                    let ids = r
                        .ids
                        .clone()
                        .select(0, order.clone())
                        .float()
                        .cast(DType::F32)
                        .reshape([n, 1]);
                    (rows, ids)
                }
                _ => (
                    Tensor::zeros([0, width], (device, dtype)),
                    Tensor::zeros([0, 1], (device, DType::F32)),
                ),
            })
            .unzip();
        let sizes = inputs
            .iter()
            .zip(&devices)
            .map(|(input, device)| match input {
                Some((_, r)) => r.group_sizes(),
                None => Tensor::<B, 1, Int>::zeros([e], (device, DType::I64)),
            })
            .collect();
        let counts = (self.all_gather_int)(&self.comm, sizes).swap_remove(0);
        let counts: Vec<i64> = counts
            .into_data()
            .convert::<i64>()
            .to_vec()
            .expect("row counts");
        let matrix = self.row_counts(&counts, e);
        let received = (self.all_to_all_v)(&self.comm, rows, &matrix);
        let received_ids = (self.all_to_all_v)(&self.comm, ids, &matrix);
        let computed = received
            .into_iter()
            .zip(received_ids)
            .enumerate()
            .map(|(i, (rows, ids))| self.run_experts(i, rows, ids, e, shards[i]))
            .collect();
        let transposed: Vec<Vec<usize>> = (0..matrix.len())
            .map(|dst| matrix.iter().map(|from| from[dst]).collect())
            .collect();
        let returned = (self.all_to_all_v)(&self.comm, computed, &transposed);
        returned
            .into_iter()
            .zip(inputs)
            .zip(orders)
            .map(|((y, input), order)| {
                let ((_, r), order) = (input?, order?);
                Some(burn_ascend::fused::moe_scatter(
                    y,
                    order,
                    Some(r.weights.clone()),
                    k,
                ))
            })
            .collect()
    }

    /// Rows from rank `src` to rank `dst`: `src`'s rows for the experts `dst` holds, from every
    /// rank's rows per expert (`per_expert[src * experts + j]`).
    fn row_counts(&self, per_expert: &[i64], experts: usize) -> Vec<Vec<usize>> {
        let n = self.size();
        (0..n)
            .map(|src| {
                (0..n)
                    .map(|dst| {
                        experts_of(dst, n, experts)
                            .map(|j| per_expert[src * experts + j] as usize)
                            .sum()
                    })
                    .collect()
            })
            .collect()
    }

    /// Local rank `i`'s experts `shard` over the rows it received (`ids [R, 1]` their experts,
    /// of `experts`), in the order received.
    fn run_experts(
        &self,
        i: usize,
        rows: Tensor<B, 2>,
        ids: Tensor<B, 2>,
        experts: usize,
        shard: &Experts<B>,
    ) -> Tensor<B, 2> {
        let n = rows.dims()[0];
        if n == 0 {
            return rows;
        }
        let held = experts_of(self.ranks[i], self.size(), experts);
        let local = ids.reshape([n]).int() - held.start as i64;
        let order = local.clone().argsort(0).cast(DType::I32);
        let sizes = super::model::rows_per_expert(local, held.len());
        let grouped = burn_ascend::fused::moe_gather(rows, order.clone(), 1);
        let y = shard.grouped(grouped, sizes);
        burn_ascend::fused::moe_scatter(y, order, None, 1)
    }
}

/// The built-in decoder's MoE layer split across NPUs: for every rank, a layer holding the
/// router and that rank's experts, on the rank's device; the rest of the model runs on the
/// first NPU.
pub struct ExpertParallel<B: FusedOps> {
    dispatch: ExpertDispatch<B>,
    devices: Vec<AscendDevice>,
    layers: Vec<Moe<B>>,
    // `shard` itself, bound where `B: CollectiveOps` is known.
    shard: Shard<B>,
}

impl<B: FusedOps + CollectiveOps> ExpertParallel<B> {
    /// `model` (on `devices[0]`) with the experts of every MoE layer split across `devices`;
    /// its other weights stay on `devices[0]`, where serving runs.
    pub fn shard(
        mut model: MoeDecoder<B>,
        devices: &[AscendDevice],
    ) -> Result<MoeDecoder<B>, ExpertParallelError> {
        let fail = |m: String| Err(ExpertParallelError(m));
        let experts = model.dims().experts;
        // The shards are cut from the float experts, which a quantized model no longer holds.
        if let Some(mode) = model.quantized() {
            return fail(format!(
                "the model is quantized ({mode}): a quantized model serves on one NPU"
            ));
        }
        if devices.is_empty() || devices.len() > experts {
            return fail(format!(
                "{} NPUs for {experts} experts: each NPU needs at least one expert",
                devices.len()
            ));
        }
        if let Some(d) = model.devices().into_iter().find(|d| *d != devices[0]) {
            return fail(format!(
                "the model must be on {} (the first NPU), but has weights on {d}",
                devices[0]
            ));
        }
        let comm = Communicator::local(devices).map_err(|e| ExpertParallelError(e.to_string()))?;
        let dispatch = ExpertDispatch::new(comm);
        let n = devices.len();
        for block in &mut model.blocks {
            let moe = &block.moe;
            let float = moe.experts.float().expect("checked above: not quantized");
            let layers = devices
                .iter()
                .enumerate()
                .map(|(r, device)| {
                    let range = experts_of(r, n, experts);
                    let part = |p: &Param<Tensor<B, 3>>| {
                        Param::from_tensor(
                            p.val()
                                .narrow(0, range.start, range.len())
                                .to_device(device),
                        )
                    };
                    Moe {
                        router: moe.router.clone().to_device(device),
                        experts: Experts::new(part(&float.gate_up), part(&float.down)),
                        parallel: Parallel::default(),
                    }
                })
                .collect();
            block.moe.parallel = Parallel::new(ExpertParallel {
                dispatch: dispatch.clone(),
                devices: devices.to_vec(),
                layers,
                shard: Self::shard,
            });
        }
        Ok(model)
    }
}

impl<B: FusedOps> ExpertParallel<B> {
    /// The expert-parallel state of `model`, if its experts are split across NPUs.
    pub fn of(model: &MoeDecoder<B>) -> Option<&Self> {
        model
            .blocks
            .iter()
            .find_map(|b| b.moe.parallel.get::<Self>())
    }

    /// The NPUs the experts are split across, in rank order (the first runs the model).
    pub fn devices(&self) -> &[AscendDevice] {
        &self.devices
    }

    /// How to split a model again as this one was: after a reset of the NPUs (which destroys
    /// the communicator and the experts' shards), `rebuild(model, devices)` splits the
    /// reloaded `model` over a new communicator.
    pub fn rebuilder(&self) -> (Vec<AscendDevice>, Shard<B>) {
        (self.devices.clone(), self.shard)
    }

    /// The layer over `x [T, H]` on the first NPU: its output and load-balancing loss there.
    pub(crate) fn forward(&self, x: Tensor<B, 2>, dims: &Dims) -> (Tensor<B, 2>, Tensor<B, 1>) {
        let mut xs: Vec<Option<Tensor<B, 2>>> = vec![None; self.layers.len()];
        xs[0] = Some(x);
        self.forward_ranks(xs, dims)
            .swap_remove(0)
            .expect("the first NPU holds tokens")
    }

    /// The layer over the tokens of each rank (`xs[r]` on rank r's device, `None` for a rank
    /// without tokens): each rank's output and load-balancing loss.
    pub fn forward_ranks(
        &self,
        xs: Vec<Option<Tensor<B, 2>>>,
        dims: &Dims,
    ) -> Vec<Option<(Tensor<B, 2>, Tensor<B, 1>)>> {
        // Every rank is in this process: with no tokens anywhere there is nothing to exchange.
        let Some([_, width]) = xs.iter().flatten().next().map(Tensor::dims) else {
            return vec![None; xs.len()];
        };
        let dtype = xs.iter().flatten().next().map(Tensor::dtype);
        let routings: Vec<_> = xs
            .iter()
            .zip(&self.layers)
            .map(|(x, layer)| x.as_ref().map(|x| layer.route(x.clone(), dims)))
            .collect();
        let inputs = xs
            .into_iter()
            .zip(&routings)
            .map(|(x, r)| x.zip(r.as_ref()))
            .collect();
        let shards: Vec<&Experts<B>> = self.layers.iter().map(|l| &l.experts).collect();
        let dtype = dtype.expect("a rank holds tokens");
        self.dispatch
            .forward(inputs, dims.top_k, dims.experts, &shards, (dtype, width))
            .into_iter()
            .zip(routings)
            .map(|(y, routing)| {
                y.zip(routing).map(|(y, r)| {
                    let fraction = r.fraction();
                    (y, Moe::aux_loss(r.probs.get(), fraction, dims))
                })
            })
            .collect()
    }
}

/// Rows a batch of routings sends to other NPUs and the fewest any dispatch must send, for
/// expert ids `ids` (`[T * k]`, token-major) of `experts` experts split over `devices` NPUs,
/// with every token on the first NPU: the all-to-all sends one row per (token, remote expert),
/// while a dispatch that sent each token once per remote NPU would send one per (token, remote
/// NPU).
pub fn dispatch_rows(ids: &[u32], top_k: usize, experts: usize, devices: usize) -> (usize, usize) {
    // The NPU whose range `r*E/N .. (r+1)*E/N` holds expert `e`.
    let owner = |e: u32| {
        (0..devices)
            .find(|&r| experts_of(r, devices, experts).contains(&(e as usize)))
            .unwrap_or(devices)
    };
    let mut sent = 0;
    let mut minimum = 0;
    for token in ids.chunks(top_k) {
        let mut remote: Vec<usize> = token
            .iter()
            .map(|&e| owner(e))
            .filter(|&r| r != 0)
            .collect();
        sent += remote.len();
        remote.sort_unstable();
        remote.dedup();
        minimum += remote.len();
    }
    (sent, minimum)
}
