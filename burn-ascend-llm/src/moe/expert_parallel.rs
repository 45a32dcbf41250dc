//! Expert parallelism for serving: the experts of every MoE layer are split across NPUs in
//! contiguous ranges (with N NPUs and E experts, NPU r holds experts `r*E/N .. (r+1)*E/N`), and
//! every NPU holds a copy of the layer's router. The rest of the model runs where it is (the
//! server's device, rank 0 of the communicator).
//!
//! One layer over tokens held by some of the NPUs (the server's: rank 0):
//! 1. each NPU with tokens routes them and gathers their rows in expert order
//!    (`fused::moe_gather`): the rows bound for each NPU are then contiguous, in destination
//!    order, which is the layout HCCL's AlltoAllV sends;
//! 2. an all-gather of every NPU's rows per expert gives each NPU the whole count matrix, which
//!    is read back to the host (HCCL takes AlltoAllV's counts as host arrays, and they size the
//!    receiving buffers);
//! 3. AlltoAllV sends every row, and its expert id, to the NPU holding that expert;
//! 4. each NPU orders the rows it received by expert (a stable argsort, so the rows of one
//!    source keep their order), runs its experts (one grouped matmul per projection) and
//!    restores the received order;
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

use super::model::{swiglu_experts, Dims, Experts, Moe, MoeDecoder};
use super::parallel::Parallel;

/// Why a model cannot be split across NPUs.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("expert parallelism: {0}")]
pub struct ExpertParallelError(pub String);

type AllGatherInt<B> = fn(&Communicator, Vec<Tensor<B, 1, Int>>) -> Vec<Tensor<B, 1, Int>>;
type AllToAllV<B> = fn(&Communicator, Vec<Tensor<B, 2>>, &RowCounts) -> Vec<Tensor<B, 2>>;
type Shard<B> = fn(MoeDecoder<B>, &[AscendDevice]) -> Result<MoeDecoder<B>, ExpertParallelError>;

/// One MoE layer split across NPUs: for every rank, a layer holding the router and that rank's
/// experts, on the rank's device.
pub struct ExpertParallel<B: FusedOps> {
    comm: Arc<Communicator>,
    devices: Vec<AscendDevice>,
    layers: Vec<Moe<B>>,
    experts: Vec<Range<usize>>,
    // The collectives of `B` and `shard` itself, bound where `B: CollectiveOps` is known (the
    // layer's forward and the server only know `B: FusedOps`).
    all_gather_int: AllGatherInt<B>,
    all_to_all_v: AllToAllV<B>,
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
        let n = devices.len();
        let ranges: Vec<Range<usize>> = (0..n)
            .map(|r| r * experts / n..(r + 1) * experts / n)
            .collect();
        for block in &mut model.blocks {
            let moe = &block.moe;
            let float = moe.experts.float().expect("checked above: not quantized");
            let layers = devices
                .iter()
                .zip(&ranges)
                .map(|(device, range)| {
                    let part = |p: &Param<Tensor<B, 3>>| {
                        Param::from_tensor(
                            p.val()
                                .narrow(0, range.start, range.len())
                                .to_device(device),
                        )
                    };
                    Moe {
                        router: moe.router.clone().to_device(device),
                        experts: Experts::new(
                            part(&float.gate),
                            part(&float.up),
                            part(&float.down),
                        ),
                        parallel: Parallel::default(),
                    }
                })
                .collect();
            block.moe.parallel = Parallel::new(ExpertParallel {
                comm: comm.clone(),
                devices: devices.to_vec(),
                layers,
                experts: ranges.clone(),
                all_gather_int: |c, t| collective::all_gather_int(c, t),
                all_to_all_v: |c, t, r| collective::all_to_all_v(c, t, r),
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
        let k = dims.top_k;
        let e = dims.experts;
        let width = self.layers[0].experts.weights()[2].dims()[2];
        let devices: Vec<_> = self
            .layers
            .iter()
            .map(|l| l.router.weight.device())
            .collect();
        let routings: Vec<_> = xs
            .iter()
            .zip(&self.layers)
            .map(|(x, layer)| x.as_ref().map(|x| layer.route(x.clone(), dims)))
            .collect();
        // Rows in expert order, and each row's expert id (exact as a float).
        let (rows, ids): (Vec<_>, Vec<_>) = xs
            .into_iter()
            .zip(&routings)
            .zip(&devices)
            .map(|((x, routing), device)| match (x, routing) {
                (Some(x), Some(r)) => {
                    let rows = burn_ascend::fused::moe_gather(x, r.order.clone(), k);
                    let n = rows.dims()[0];
                    let ids = r
                        .ids
                        .clone()
                        .select(0, r.order.clone())
                        .float()
                        .reshape([n, 1]);
                    (rows, ids)
                }
                _ => (
                    Tensor::zeros([0, width], device),
                    Tensor::zeros([0, 1], device),
                ),
            })
            .unzip();
        let sizes = routings
            .iter()
            .zip(&devices)
            .map(|(r, device)| match r {
                Some(r) => r.group_sizes.clone(),
                None => Tensor::<B, 1, Int>::zeros([e], device).cast(DType::I32),
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
            .map(|(r, (rows, ids))| self.run_experts(r, rows, ids))
            .collect();
        let transposed: Vec<Vec<usize>> = (0..matrix.len())
            .map(|dst| matrix.iter().map(|from| from[dst]).collect())
            .collect();
        let returned = (self.all_to_all_v)(&self.comm, computed, &transposed);
        returned
            .into_iter()
            .zip(routings)
            .map(|(y, routing)| {
                routing.map(|r| {
                    let out = burn_ascend::fused::moe_scatter(
                        y,
                        r.order.clone(),
                        Some(r.weights.clone()),
                        k,
                    );
                    (out, Moe::aux_loss(&r, dims))
                })
            })
            .collect()
    }

    /// Rows from rank `src` to rank `dst`: `src`'s rows for the experts `dst` holds.
    fn row_counts(&self, per_expert: &[i64], experts: usize) -> Vec<Vec<usize>> {
        let n = self.layers.len();
        (0..n)
            .map(|src| {
                self.experts
                    .iter()
                    .map(|range| {
                        range
                            .clone()
                            .map(|j| per_expert[src * experts + j] as usize)
                            .sum()
                    })
                    .collect()
            })
            .collect()
    }

    /// Rank `r`'s experts over the rows it received (`ids [R, 1]` their experts), in the order
    /// received.
    fn run_experts(&self, r: usize, rows: Tensor<B, 2>, ids: Tensor<B, 2>) -> Tensor<B, 2> {
        let n = rows.dims()[0];
        if n == 0 {
            return rows;
        }
        let layer = &self.layers[r];
        let held = self.experts[r].len();
        let local = ids.reshape([n]).int() - self.experts[r].start as i64;
        let order = local.clone().argsort(0).cast(DType::I32);
        let sizes = if held == 1 {
            // Every row is for the one expert (Burn's one_hot needs two classes).
            Tensor::<B, 1, Int>::from_ints([n as i32], &rows.device()).cast(DType::I32)
        } else {
            local
                .one_hot::<2>(held)
                .float()
                .sum_dim(0)
                .reshape([held])
                .int()
                .cast(DType::I32)
        };
        let grouped = burn_ascend::fused::moe_gather(rows, order.clone(), 1);
        let [gate, up, down] = layer.experts.weights();
        let y = swiglu_experts(grouped, gate, up, down, sizes);
        burn_ascend::fused::moe_scatter(y, order, None, 1)
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
            .find(|&r| (r * experts / devices..(r + 1) * experts / devices).contains(&(e as usize)))
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
