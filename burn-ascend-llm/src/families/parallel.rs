//! A Hugging Face decoder split across NPUs, in one process or in one process per machine:
//! [`ParallelDecoder`], one [`Decoder`] shard per NPU, computed by the same step as a whole
//! decoder (`Decoder::step_ranks`, written once over shards), the shards meeting in
//! collectives ([`Group`]).
//!
//! How each part is split (N ranks; Megatron-LM's and vLLM's tensor parallelism, with the
//! experts split as vLLM's expert parallelism):
//! - attention by heads: each rank holds its query heads' columns of the q (and q_b) projections,
//!   the key/value heads they read (split when N divides the key/value heads, else each rank
//!   holds the one its query heads share: replicated, as vLLM does when N exceeds them), and its
//!   heads' rows of the output projection, whose partial outputs are summed (all-reduce). MLA
//!   splits by heads the same way: its latent projections and norms are replicated, and so is
//!   the cache row, the latent every head reads. Each rank's paged cache holds its heads;
//! - dense MLPs and shared experts: gate and up by columns, down by rows, the partial outputs
//!   summed;
//! - routed experts: contiguous ranges per rank ([`crate::moe::expert_parallel`]). The
//!   replicated tokens are split into N contiguous chunks; each rank routes its chunk, the rows
//!   go to the ranks holding their experts and back (AlltoAllV), and each rank places its
//!   chunk's output among zero rows, summed with the shared expert's part in the layer's one
//!   all-reduce;
//! - embedding and LM head by vocabulary, in chunks of `ceil(V / N)` rows (the last padded with
//!   zero rows): each rank looks up the tokens its rows hold (the others' rows are zero, and the
//!   sum restores every token's row exactly), and the logits' chunks are all-gathered.
//!
//! Norms and routers are replicated. A bias is added on the first rank only where the partial
//! outputs are summed. Every rank ends a layer with the same residual stream, so the logits are
//! those of one NPU up to the order of the summations.
//!
//! Each rank reads only its part of each tensor from the checkpoint's map
//! ([`super::weights::Cut`], expert ranges, vocabulary rows), uploaded to its own NPU.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use burn::module::Module;
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Int, Tensor, TensorData};
use burn_ascend::collective::{self, CollectiveOps, Communicator, Reduce};
use burn_ascend::{AscendDevice, FusedOps};

use super::blocks::attention::AttentionSpec;
use super::blocks::ffn::FfnSpec;
use super::weights::Source;
use super::{Decoder, DecoderSpec, LoadError, LoadOptions, LoadReport, ToServe};
use crate::engine::serve::{Reload, StepInputs};
use crate::engine::step::{CacheLayout, PagedAttention, StepModel};
use crate::hf::Checkpoint;
use crate::moe::expert_parallel::{experts_of, ExpertDispatch};

/// The part of a model one rank holds: rank `rank` of `ranks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// The rank, in the communicator.
    pub rank: usize,
    /// Ranks in the communicator.
    pub ranks: usize,
}

impl Part {
    /// The whole model (one rank).
    pub const WHOLE: Part = Part { rank: 0, ranks: 1 };

    /// This rank's share of `n` heads or features, which the ranks divide
    /// ([`DecoderSpec::check_split`] checked it).
    pub fn share(&self, n: usize) -> Range<usize> {
        let c = n / self.ranks;
        self.rank * c..(self.rank + 1) * c
    }

    /// This rank's rows of a vocabulary of `n`, and the chunk every rank holds
    /// (`ceil(n / ranks)` rows, the rows past `n` zero).
    pub fn vocab(&self, n: usize) -> (Range<usize>, usize) {
        let chunk = n.div_ceil(self.ranks);
        let start = (self.rank * chunk).min(n);
        (start..((self.rank + 1) * chunk).min(n), chunk)
    }

    /// The routed experts this rank holds, of `n`.
    pub fn experts(&self, n: usize) -> Range<usize> {
        experts_of(self.rank, self.ranks, n)
    }

    /// The first rank: where a bias is added to outputs the ranks sum.
    pub fn is_first(&self) -> bool {
        self.rank == 0
    }

    /// The key/value heads of grouped-query attention with `q_heads` query heads over
    /// `kv_heads` key/value heads that this rank's query heads read: its share when the ranks
    /// divide the key/value heads, else the one head its query heads share (checked by
    /// [`DecoderSpec::check_split`]).
    pub fn kv_heads(&self, kv_heads: usize) -> Range<usize> {
        if kv_heads.is_multiple_of(self.ranks) {
            self.share(kv_heads)
        } else {
            let h = self.rank / (self.ranks / kv_heads);
            h..h + 1
        }
    }

    /// Of `t` replicated tokens, the contiguous chunk this rank sends to the experts.
    pub fn tokens(&self, t: usize) -> Range<usize> {
        self.rank * t / self.ranks..(self.rank + 1) * t / self.ranks
    }
}

impl DecoderSpec {
    /// Refuses, naming the size, a split over `ranks` NPUs that does not divide what it splits:
    /// attention heads (key/value heads may also be fewer than the ranks, a divisor of them),
    /// dense MLP and shared-expert widths; and more ranks than routed experts.
    pub fn check_split(&self, ranks: usize) -> Result<(), LoadError> {
        let fail = |why: String| {
            Err(LoadError::Config {
                model_type: self.model_type.clone(),
                why: format!("cannot split over {ranks} NPUs: {why}"),
            })
        };
        if ranks == 0 {
            return fail("no NPU".into());
        }
        let divides = |n: usize| n.is_multiple_of(ranks);
        for (i, layer) in self.layers.iter().enumerate() {
            match &layer.attention {
                AttentionSpec::Gqa(s) => {
                    if !divides(s.q_heads) {
                        return fail(format!(
                            "layer {i}'s {} attention heads (num_attention_heads)",
                            s.q_heads
                        ));
                    }
                    if !divides(s.kv_heads) && !ranks.is_multiple_of(s.kv_heads) {
                        return fail(format!(
                            "layer {i}'s {} key/value heads (num_key_value_heads) neither \
                             split over the NPUs nor divide them",
                            s.kv_heads
                        ));
                    }
                }
                AttentionSpec::Mla(m) => {
                    if !divides(m.heads) {
                        return fail(format!(
                            "layer {i}'s {} attention heads (num_attention_heads)",
                            m.heads
                        ));
                    }
                }
            }
            match &layer.ffn {
                FfnSpec::Dense(inner) if !divides(*inner) => {
                    return fail(format!(
                        "layer {i}'s MLP of {inner} (intermediate_size) does not split"
                    ))
                }
                FfnSpec::Dense(_) => {}
                FfnSpec::Sparse(m) => {
                    let experts = m.router.experts();
                    if experts < ranks {
                        return fail(format!(
                            "layer {i} has {experts} routed experts: each NPU needs one at least"
                        ));
                    }
                    if let Some(s) = m.shared.as_ref().filter(|s| !divides(s.hidden)) {
                        return fail(format!(
                            "layer {i}'s shared expert of {} does not split",
                            s.hidden
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// The NPUs a model is split across: this process's `devices`, ranks `first_rank ..` of the
/// `ranks` of a communicator that holds them all in this process, or spans one process per
/// machine meeting at `rendezvous`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// This process's NPUs, in rank order.
    pub devices: Vec<AscendDevice>,
    /// The communicator's rank of the first of them.
    pub first_rank: usize,
    /// Ranks in the communicator, in every process.
    pub ranks: usize,
    /// Where the processes meet: `host:port` of the process that holds rank 0 (which listens
    /// there), when there are several processes.
    pub rendezvous: Option<String>,
}

impl Placement {
    /// Every rank in this process, on `devices`.
    pub fn local(devices: &[AscendDevice]) -> Self {
        Self {
            devices: devices.to_vec(),
            first_rank: 0,
            ranks: devices.len(),
            rendezvous: None,
        }
    }

    /// Process `node` of `nodes`, each with `devices` (the same count everywhere), meeting at
    /// `rendezvous`: ranks `node * devices.len() ..`.
    pub fn node(devices: &[AscendDevice], node: usize, nodes: usize, rendezvous: String) -> Self {
        Self {
            devices: devices.to_vec(),
            first_rank: node * devices.len(),
            ranks: nodes * devices.len(),
            rendezvous: Some(rendezvous),
        }
    }

    /// The part each of this process's NPUs holds.
    pub fn parts(&self) -> Vec<Part> {
        (0..self.devices.len())
            .map(|i| Part {
                rank: self.first_rank + i,
                ranks: self.ranks,
            })
            .collect()
    }

    /// Refuses a placement that cannot be a communicator, saying why.
    pub fn check(&self) -> Result<(), String> {
        let local = self.devices.len();
        if local == 0 || self.first_rank + local > self.ranks {
            return Err(format!(
                "{local} NPUs from rank {} are not ranks of {}",
                self.first_rank, self.ranks
            ));
        }
        if self.rendezvous.is_none() && local != self.ranks {
            return Err(format!(
                "{} ranks in other processes need a rendezvous address",
                self.ranks - local
            ));
        }
        Ok(())
    }

    /// The communicator of the placement: built here (`HcclCommInitAll`), or joined at the
    /// rendezvous with the other processes (blocks until every rank has joined).
    pub fn communicator(&self) -> Result<Arc<Communicator>, String> {
        self.check()?;
        let describe = |e: &dyn std::fmt::Display| {
            format!(
                "the communicator of {} ({} of {} ranks from rank {}): {e}",
                self.names(),
                self.devices.len(),
                self.ranks,
                self.first_rank
            )
        };
        match &self.rendezvous {
            None => Communicator::local(&self.devices).map_err(|e| describe(&e)),
            Some(address) => Communicator::rendezvous_ranks(
                &self.devices,
                self.first_rank as u32,
                self.ranks as u32,
                address,
            )
            .map_err(|e| describe(&e)),
        }
    }

    /// `emulated:0, emulated:1`.
    pub fn names(&self) -> String {
        self.devices
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

type AllReduce<B> = fn(&Communicator, Vec<Tensor<B, 2>>, Reduce) -> Vec<Tensor<B, 2>>;
type AllGather<B> = fn(&Communicator, Vec<Tensor<B, 2>>) -> Vec<Tensor<B, 2>>;
type AllGatherInt<B> = fn(&Communicator, Vec<Tensor<B, 1, Int>>) -> Vec<Tensor<B, 1, Int>>;

/// How the shards of a split decoder meet: the communicator's collectives and the expert
/// dispatch over it.
pub struct Group<B: FusedOps> {
    placement: Placement,
    dispatch: ExpertDispatch<B>,
    // The collectives of `B`, bound where `B: CollectiveOps` is known (the decoder's step is
    // written for any `B: FusedOps`).
    all_reduce: AllReduce<B>,
    all_gather: AllGather<B>,
    all_gather_int: AllGatherInt<B>,
}

impl<B: FusedOps> Clone for Group<B> {
    fn clone(&self) -> Self {
        Self {
            placement: self.placement.clone(),
            dispatch: self.dispatch.clone(),
            all_reduce: self.all_reduce,
            all_gather: self.all_gather,
            all_gather_int: self.all_gather_int,
        }
    }
}

impl<B: FusedOps> std::fmt::Debug for Group<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Group({:?})", self.placement)
    }
}

impl<B: FusedOps + CollectiveOps> Group<B> {
    /// The group of `placement`, its communicator built or joined.
    pub fn connect(placement: &Placement) -> Result<Self, String> {
        let comm = placement.communicator()?;
        Ok(Self {
            placement: placement.clone(),
            dispatch: ExpertDispatch::new(comm),
            all_reduce: |c, t, op| collective::all_reduce(c, t, op),
            all_gather: |c, t| collective::all_gather(c, t),
            all_gather_int: |c, t| collective::all_gather_int(c, t),
        })
    }
}

impl<B: FusedOps> Group<B> {
    /// The placement.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// The routed experts' dispatch.
    pub fn dispatch(&self) -> &ExpertDispatch<B> {
        &self.dispatch
    }

    /// The part of each local shard, in order.
    pub fn parts(&self) -> Vec<Part> {
        self.placement.parts()
    }

    /// Every shard's `[T, H]` part summed, on every shard (all-reduce).
    pub fn sum(&self, parts: Vec<Tensor<B, 2>>) -> Vec<Tensor<B, 2>> {
        (self.all_reduce)(self.dispatch.comm(), parts, Reduce::Sum)
    }

    /// Every rank's `[R, ..]` rows concatenated in rank order, on every shard (all-gather).
    pub fn gather(&self, rows: Vec<Tensor<B, 2>>) -> Vec<Tensor<B, 2>> {
        (self.all_gather)(self.dispatch.comm(), rows)
    }

    /// The smallest of `value` over every rank, in every process: what the processes must
    /// agree on (the cache's pages, which decide the schedule each process runs alike). Read
    /// back to the host, as a configuration, not a step's data.
    pub fn min(&self, value: usize, devices: &[B::Device]) -> usize {
        let mine = devices
            .iter()
            .map(|d| {
                Tensor::<B, 1, Int>::from_data(
                    TensorData::new(vec![value.min(i32::MAX as usize) as i32], [1]),
                    (d, DType::I32),
                )
            })
            .collect();
        (self.all_gather_int)(self.dispatch.comm(), mine)
            .swap_remove(0)
            .into_data()
            .convert::<i64>()
            .to_vec::<i64>()
            .expect("ints")
            .into_iter()
            .min()
            .map_or(value, |m| m as usize)
    }
}

/// A decoder split across NPUs: this process's shards, one per NPU of its placement, in rank
/// order (see the module doc).
#[derive(Module, Debug)]
pub struct ParallelDecoder<B: Backend> {
    /// The shards, `shards[i]` on the placement's `devices[i]`.
    pub shards: Vec<Decoder<B>>,
    #[module(skip)]
    group: crate::moe::parallel::Parallel,
    /// Bytes of tensor data the shards read from the files (their parts, each once).
    #[module(skip)]
    read_bytes: u64,
}

impl<B: FusedOps> ParallelDecoder<B> {
    /// How the shards meet.
    pub fn group(&self) -> &Group<B> {
        self.group
            .get::<Group<B>>()
            .expect("a parallel decoder holds its group")
    }

    /// What the decoder is (the whole model's spec).
    pub fn spec(&self) -> &DecoderSpec {
        self.shards[0].spec()
    }

    /// The dtype of its weights.
    pub fn dtype(&self) -> DType {
        self.shards[0].dtype()
    }

    fn shard_refs(&self) -> Vec<&Decoder<B>> {
        self.shards.iter().collect()
    }
}

impl<B: FusedOps + CollectiveOps> StepModel<B> for ParallelDecoder<B> {
    fn vocab(&self) -> usize {
        self.spec().vocab
    }

    fn cache_layout(&self) -> CacheLayout {
        self.shards[0].cache_layout()
    }

    fn step(&self, x: &[StepInputs<B>], attention: &mut [PagedAttention<'_, B>]) -> Tensor<B, 2> {
        Decoder::step_ranks(&self.shard_refs(), Some(self.group()), x, attention)
    }

    fn forward_logits(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        let tokens = self
            .group()
            .placement()
            .devices
            .iter()
            .map(|d| tokens.clone().to_device(d))
            .collect();
        Decoder::dense_ranks(&self.shard_refs(), Some(self.group()), tokens).0
    }

    fn capture_refusal(&self) -> Option<String> {
        // ASSUMPTION (stricter reading, hccl-abi.md §8, aclgraph-abi.md §6): A2 lists
        // collectives as capturable, but a graph holding them must be replayed by every rank
        // from one capture session, which the emulated HCCL does not model (it refuses a
        // collective on a capturing stream); and the experts' AlltoAllV takes its counts from
        // a read of the device inside the step. So a split decoder decodes eagerly.
        Some(format!(
            "captured decode of a model split across {} NPUs is refused: its step holds \
             collectives (and reads the experts' row counts back for AlltoAllV); the server \
             decodes eagerly",
            self.group().placement().ranks
        ))
    }

    fn step_devices(&self) -> Vec<AscendDevice> {
        self.group().placement().devices.clone()
    }

    fn other_devices(&self) -> Vec<AscendDevice> {
        self.step_devices()
    }

    fn after_reset(self) -> Self {
        let group = self.group();
        // A reset retired the communicator: restored from a host copy, the shards are joined
        // again (a reload from the files built a new group already).
        if group.dispatch().comm().retired().is_none() {
            return self;
        }
        let placement = group.placement().clone();
        let group = Group::<B>::connect(&placement).unwrap_or_else(|e| {
            panic!("joining the NPUs of a split decoder again after a failed step: {e}")
        });
        let shards = self
            .shards
            .into_iter()
            .zip(&placement.devices)
            .map(|(s, d)| s.to_device(d))
            .collect();
        Self {
            shards,
            group: crate::moe::parallel::Parallel::new(group),
            ..self
        }
    }

    fn agree(&self, pages: usize) -> usize {
        let devices = self.step_devices();
        self.group().min(pages, &devices)
    }
}

/// Loads the checkpoint split across the NPUs of `placement` (this process's part of the
/// model), each NPU reading only its part of the files (see the module doc). Everything is
/// checked before anything is allocated: the config, the tensors' names and shapes, that the
/// split divides what it splits, and that each NPU's part can fit its free memory.
pub fn load_parallel<B: FusedOps + CollectiveOps>(
    checkpoint: &Checkpoint,
    options: impl Into<LoadOptions>,
    placement: &Placement,
) -> Result<ParallelDecoder<B>, LoadError> {
    let options = options.into();
    let dtype = super::options_dtype(checkpoint, options)?;
    let checked = super::checked_spec(checkpoint)?;
    let spec = &checked.spec;
    spec.check_split(placement.ranks)?;
    placement.check().map_err(|why| LoadError::Config {
        model_type: spec.model_type.clone(),
        why,
    })?;
    for (device, part) in placement.devices.iter().zip(placement.parts()) {
        super::check_fits::<B>(checkpoint, &checked, dtype, options.quantize, device, part)?;
    }
    let group = Group::<B>::connect(placement).map_err(LoadError::Device)?;
    let mut read_bytes = 0;
    let mut shards = Vec::new();
    for (device, part) in placement.devices.iter().zip(placement.parts()) {
        let src = Source::<B>::new(checkpoint, dtype, device).with_plan(checked.plan.as_ref());
        shards.push(Decoder::load_source(spec, &src, options.quantize, part)?);
        read_bytes += src.read_bytes();
    }
    Ok(ParallelDecoder {
        shards,
        group: crate::moe::parallel::Parallel::new(group),
        read_bytes,
    })
}

/// [`load_parallel`] to serve: the decoder, how the server loads it again from the files after
/// a device fault (every NPU of the placement reset, the communicator joined again), and how
/// the load went (the bytes this process read: its parts of the tensors).
pub fn load_parallel_to_serve<B: FusedOps + CollectiveOps>(
    checkpoint: Arc<Checkpoint>,
    options: impl Into<LoadOptions>,
    placement: &Placement,
) -> Result<ToServe<B, ParallelDecoder<B>>, LoadError> {
    let options = options.into();
    let start = Instant::now();
    let model = load_parallel::<B>(&checkpoint, options, placement)?;
    for device in &placement.devices {
        B::sync(device).map_err(|e| LoadError::Device(format!("{device}: {e:?}")))?;
    }
    let report = LoadReport {
        dtype: model.dtype(),
        quantize: options.quantize,
        prequantized: model.shards[0].prequantized().map(str::to_string),
        read_bytes: model.read_bytes,
        secs: start.elapsed().as_secs_f64(),
    };
    let placement = placement.clone();
    let reload: Reload<B, ParallelDecoder<B>> = Box::new(move |_| {
        load_parallel(&checkpoint, options, &placement).map_err(|e| e.to_string())
    });
    Ok(ToServe {
        model,
        reload,
        report,
    })
}
