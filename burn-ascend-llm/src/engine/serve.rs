//! Serving: a continuous-batching server over the paged KV cache.
//!
//! Requests are checked when they are submitted (a bad one, or one that could never fit the
//! cache, gets its error alone; so does one beyond the bounded waiting queue, which may come
//! back later), may be cancelled at any time (their pages return at once), then the
//! [`Scheduler`] chooses each step's work: one token for
//! each decoding request and chunks of the prompts being prefilled, in one batch. A step runs
//! through one function, [`Server::forward`], whose inputs are device tensors
//! ([`StepInputs`]): slots come from `fused::alloc_extend`; a prefill step's chunks attend to
//! their requests' pages through the block tables (`fused::extend_attention`), decode steps
//! attend each token to its listed cached positions through `fused::decode_attention`; only
//! the rows whose
//! next token is sampled reach the LM head. A step that fails (on the device, or a panic in its
//! work on the host) fails its own requests; the server then resets the device (its faults are
//! sticky; every NPU of an expert-parallel model, whose experts it then splits again), restores
//! its weights and cache and goes on with the others. A failure the recovery cannot fix (the
//! reset or the reload fails, or the scheduler's bookkeeping panics) leaves the server
//! unusable: [`Server::failure`] says why, every pending request fails and new ones are refused
//! with [`ServeError::Unrecoverable`], and its owner should restart it. The KV cache is written
//! in place on `Ascend`.
//! [`reference_logits`] is the dense path the paged one must agree with.
//!
//! With [`Server::enable_captured_decode`] (the `Ascend` backend), decode-only steps replay an
//! ACL graph of the step per batch-size bucket instead of issuing every op (see
//! [`super::decode_graph`]); the cache then stays at one address for the server's life.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use burn::module::{ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Int, Tensor, TensorData};
use burn_ascend::fused;
use burn_ascend::runtime::DeviceContext;
use burn_ascend::{graph, try_run, Ascend, AscendDevice, AscendError, FusedOps};

use super::cache::{ints, slot, LayerCache, PagePool};
use super::decode_graph::{Bucket, CapturedDecode, Packing};
use super::memory::{self, CacheSizing};

use super::sampler::{self, RowSampling};
use super::scheduler::{Entry, Plan, RequestId, Sampled, Scheduler};
use super::step::{PagedAttention, StepModel};
use super::workload::{percentiles, Arrival, ServingReport};

/// How the next token is chosen from the logits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampling {
    /// The most likely token.
    Greedy,
    /// A draw from the `top_k` most likely tokens at `temperature`, seeded: the n-th generated
    /// token of a request depends only on its seed and n, not on what it was batched with.
    Random {
        /// Softmax temperature: positive and finite.
        temperature: f64,
        /// Candidates kept: at least 1 (more than the vocabulary keeps them all).
        top_k: usize,
        /// Nucleus: of those, the most likely whose probabilities first reach this mass are
        /// kept, in (0, 1] (1 keeps them all).
        top_p: f64,
        /// Of those, the ones at least this fraction of the likeliest's probability are kept,
        /// in [0, 1] (0 keeps them all), as vLLM's `min_p`.
        min_p: f64,
        /// Seed of the draws.
        seed: u64,
    },
}

impl Sampling {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), ServeError> {
        match *self {
            Sampling::Greedy => Ok(()),
            Sampling::Random { temperature, .. }
                if !(temperature.is_finite() && temperature > 0.0) =>
            {
                Err(ServeError::Temperature(temperature))
            }
            Sampling::Random { top_k: 0, .. } => Err(ServeError::TopK),
            Sampling::Random { top_p, .. } if !(top_p > 0.0 && top_p <= 1.0) => {
                Err(ServeError::TopP(top_p))
            }
            Sampling::Random { min_p, .. } if !(0.0..=1.0).contains(&min_p) => {
                Err(ServeError::MinP(min_p))
            }
            Sampling::Random { .. } => Ok(()),
        }
    }
}

/// One request: a prompt, how many tokens to generate and how.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Token ids of the prompt.
    pub prompt: Vec<u32>,
    /// Tokens to generate at most (at least 1).
    pub new_tokens: usize,
    /// How they are chosen.
    pub sampling: Sampling,
    /// Tokens that end the generation when generated (a checkpoint's end-of-sequence ids): the
    /// stop token is the last one returned, as transformers' `generate` returns it.
    pub stop: Vec<u32>,
}

impl Request {
    /// A request decoded greedily, with no stop token.
    pub fn greedy(prompt: Vec<u32>, new_tokens: usize) -> Self {
        Self {
            prompt,
            new_tokens,
            sampling: Sampling::Greedy,
            stop: Vec::new(),
        }
    }

    /// The request ending at any of `stop` too.
    pub fn with_stop(mut self, stop: Vec<u32>) -> Self {
        self.stop = stop;
        self
    }
}

/// Why a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// It generated a stop token.
    Stop,
    /// It generated `new_tokens`.
    Length,
}

/// Why one request cannot be served (the others still are).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ServeError {
    /// The prompt has no token.
    #[error("the prompt is empty")]
    EmptyPrompt,
    /// Nothing to generate.
    #[error("new_tokens is 0: a request generates at least one token")]
    NoNewTokens,
    /// The prompt and its continuation do not fit the longest sequence the server accepts.
    #[error(
        "prompt of {prompt} tokens plus {new} new tokens exceeds the maximum sequence of {max}"
    )]
    TooLong {
        /// Prompt tokens.
        prompt: usize,
        /// Tokens to generate.
        new: usize,
        /// The limit.
        max: usize,
    },
    /// A token id outside the vocabulary.
    #[error("token {token} at position {position} is outside the vocabulary of {vocab}")]
    BadToken {
        /// The token.
        token: u32,
        /// Where it is in the prompt.
        position: usize,
        /// The vocabulary size.
        vocab: usize,
    },
    /// A sampling temperature that is not a positive finite number.
    #[error(
        "sampling temperature {0} must be positive and finite (Sampling::Greedy decodes greedily)"
    )]
    Temperature(f64),
    /// A sampling `top_k` of 0.
    #[error("sampling top_k is 0: at least one candidate must be kept")]
    TopK,
    /// A sampling `top_p` outside (0, 1].
    #[error("sampling top_p {0} is not in (0, 1]")]
    TopP(f64),
    /// A sampling `min_p` outside [0, 1].
    #[error("sampling min_p {0} is not in [0, 1]")]
    MinP(f64),
    /// The request needs more pages than the whole cache has, even alone.
    #[error(
        "prompt of {prompt} tokens plus {new} new tokens needs {needed} cache pages of \
         {page_size} slots, the whole cache has {pages}"
    )]
    NeverFits {
        /// Prompt tokens.
        prompt: usize,
        /// Tokens to generate.
        new: usize,
        /// Pages it needs at its longest.
        needed: usize,
        /// Slots per page.
        page_size: usize,
        /// Pages in the cache.
        pages: usize,
    },
    /// The waiting queue is full: the server is overloaded, submit again later.
    #[error(
        "the server is overloaded: {waiting} requests already wait (the limit, max_waiting, is \
         {limit}); submit again later"
    )]
    Overloaded {
        /// Requests waiting.
        waiting: usize,
        /// The limit.
        limit: usize,
    },
    /// The step computing this request failed on the device (for example
    /// [`AscendError::DeviceFault`] or [`AscendError::OutOfMemory`]).
    #[error("the device failed during the request's step: {0}")]
    Device(AscendError),
    /// The step computing this request panicked in its work on the host (a bug: the panic's
    /// message); the server recovered as from a device failure.
    #[error("the request's step failed: {0}")]
    Step(String),
    /// The server can no longer serve: a failure its recovery could not fix (why). Every
    /// pending request ends with it and new ones are refused with it; restart the server.
    #[error("the server cannot serve any more: {0}")]
    Unrecoverable(String),
}

/// What one request produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// The generated tokens.
    pub tokens: Vec<u32>,
    /// The logits each generated token was chosen from (`[vocab]` per token), if recorded.
    pub logits: Vec<Vec<f32>>,
    /// Times the request was preempted (its cache freed and recomputed later).
    pub preemptions: usize,
    /// Why it ended.
    pub finish: FinishReason,
}

impl From<Entry> for Generation {
    fn from(e: Entry) -> Self {
        Self {
            finish: if e.stopped() {
                FinishReason::Stop
            } else {
                FinishReason::Length
            },
            tokens: e.generated().to_vec(),
            logits: e.logits,
            preemptions: e.preemptions,
        }
    }
}

/// Server settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServeConfig {
    /// Pages in the cache.
    pub pages: usize,
    /// Slots per page.
    pub page_size: usize,
    /// Longest sequence a request may reach.
    pub max_seq: usize,
    /// Splits of each token's cached keys in decode attention, at most.
    pub max_kv_splits: usize,
    /// Tokens a step computes at most: decoded tokens and prefill chunks together.
    pub step_tokens: usize,
    /// Requests that may wait to be admitted; [`Server::submit`] refuses more
    /// ([`ServeError::Overloaded`]).
    pub max_waiting: usize,
    /// Keep every step's logits in the output (tests compare them).
    pub record_logits: bool,
}

/// Settings a server cannot run with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid serving configuration: {0}")]
pub struct ServeConfigError(pub String);

impl ServeConfig {
    /// Checks that every size is usable.
    pub fn validate(&self) -> Result<(), ServeConfigError> {
        let sizes = [
            ("pages", self.pages),
            ("page_size", self.page_size),
            ("max_seq", self.max_seq),
            ("max_kv_splits", self.max_kv_splits),
            ("step_tokens", self.step_tokens),
            ("max_waiting", self.max_waiting),
        ];
        if let Some((name, _)) = sizes.iter().find(|(_, v)| *v == 0) {
            return Err(ServeConfigError(format!("{name} must be at least 1")));
        }
        // Slots are int32 on the device.
        match self.pages.checked_mul(self.page_size) {
            Some(slots) if slots <= i32::MAX as usize => {}
            _ => {
                return Err(ServeConfigError(format!(
                    "{} pages of {} slots exceed the 2^31-1 slots a cache can index",
                    self.pages, self.page_size
                )))
            }
        }
        // A request as long as max_seq must fit the cache alone, or every such request would
        // be accepted and then fail.
        if self.max_seq > self.pages * self.page_size {
            return Err(ServeConfigError(format!(
                "max_seq {} exceeds the {} tokens the cache holds ({} pages of {} slots): lower \
                 max_seq or give the cache more pages",
                self.max_seq,
                self.pages * self.page_size,
                self.pages,
                self.page_size
            )));
        }
        // Each token at position p attends to p + 1 cached slots, all listed in the step's
        // kv_indices, whose offsets (kv_indptr) are int32.
        match self.step_keys() {
            Some(keys) if keys <= i32::MAX as usize => Ok(()),
            _ => Err(ServeConfigError(format!(
                "step_tokens {} x max_seq {} exceeds the 2^31-1 cached keys one step can list \
                 (kv_indptr is int32): lower step_tokens or max_seq",
                self.step_tokens, self.max_seq
            ))),
        }
    }

    /// The most cached keys one step attends to: every token of the step at the longest
    /// sequence (`None` on overflow).
    pub fn step_keys(&self) -> Option<usize> {
        self.step_tokens.checked_mul(self.max_seq)
    }

    /// Checks `request` against these settings and a vocabulary of `vocab` tokens: the
    /// admission test of [`Server::submit`].
    pub fn check(&self, request: &Request, vocab: usize) -> Result<(), ServeError> {
        let (prompt, new) = (request.prompt.len(), request.new_tokens);
        if prompt == 0 {
            return Err(ServeError::EmptyPrompt);
        }
        if new == 0 {
            return Err(ServeError::NoNewTokens);
        }
        request.sampling.validate()?;
        // Checked: a sum that wrapped would admit a request that never fits.
        if prompt
            .checked_add(new)
            .is_none_or(|total| total > self.max_seq)
        {
            return Err(ServeError::TooLong {
                prompt,
                new,
                max: self.max_seq,
            });
        }
        if let Some((position, &token)) = request
            .prompt
            .iter()
            .enumerate()
            .find(|(_, &t)| t as usize >= vocab)
        {
            return Err(ServeError::BadToken {
                token,
                position,
                vocab,
            });
        }
        // The last generated token is never fed back, so it needs no slot.
        let needed = (prompt + new - 1).div_ceil(self.page_size);
        if needed > self.pages {
            return Err(ServeError::NeverFits {
                prompt,
                new,
                needed,
                page_size: self.page_size,
                pages: self.pages,
            });
        }
        Ok(())
    }
}

/// What one step did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepReport {
    /// Requests that finished (or failed) in the step.
    pub finished: Vec<(RequestId, Result<Generation, ServeError>)>,
    /// Requests that received a token, and the token (streamed to clients as it comes).
    pub sampled: Vec<(RequestId, u32)>,
    /// Tokens computed.
    pub tokens: usize,
    /// Every request of the step decoded one token (no prefill chunk).
    pub decode_only: bool,
    /// Requests preempted to make room.
    pub preempted: usize,
    /// The step replayed a captured decode graph (of this bucket).
    pub captured: Option<usize>,
    /// Cached-key slots the step listed token by token for decode_attention (`kv_indices`); a
    /// prefill step (through the block tables, `fused::extend_attention`) lists none.
    pub listed_keys: usize,
    /// Host seconds to queue the step's device work (its inputs, then its ops or its replay),
    /// before anything is read back: the host time the device waits for when it is faster.
    pub issue_secs: f64,
    /// Wall time of the step, seconds.
    pub secs: f64,
}

/// The per-step inputs of [`Server::forward`], on the device. `T` tokens are computed (those of
/// every request of the step, request after request), of `R` requests; `S` of them sample.
#[derive(Debug, Clone)]
pub struct StepInputs<B: FusedOps> {
    /// `[T]` token ids.
    pub tokens: Tensor<B, 1, Int>,
    /// `[T]` their positions (float, for the rotary embedding).
    pub positions: Tensor<B, 1>,
    /// `[R]` tokens each request had cached before the step.
    pub prefix_lens: Tensor<B, 1, Int>,
    /// `[R]` tokens each request has cached after it.
    pub seq_lens: Tensor<B, 1, Int>,
    /// `[R]` the slot of each request's last cached token (0 when none).
    pub last_loc: Tensor<B, 1, Int>,
    /// `[P]` the free pages, in the order `alloc_extend` takes them.
    pub free_pages: Tensor<B, 1, Int>,
    /// `[T + 1]` where each token's cached positions start in `kv_indices` (`[1]` when the
    /// step takes the paged prefill, [`StepInputs::prefill`]).
    pub kv_indptr: Tensor<B, 1, Int>,
    /// The slots of positions `0..=p` of each token at position `p` (empty when the step takes
    /// the paged prefill).
    pub kv_indices: Tensor<B, 1, Int>,
    /// `[T]` decode attention's splits of each token's keys (empty when the step takes the
    /// paged prefill).
    pub kv_splits: Tensor<B, 1, Int>,
    /// `[S]` the rows of the step whose logits are sampled.
    pub sample_rows: Tensor<B, 1, Int>,
    /// A prefill step's requests through their block tables (`fused::extend_attention`); its
    /// `kv_indices` are then empty.
    pub prefill: Option<PrefillInputs<B>>,
}

/// The block tables and lengths of a prefill step's requests (see [`StepInputs::prefill`]).
#[derive(Debug, Clone)]
pub struct PrefillInputs<B: FusedOps> {
    /// `[R, W]` each request's pages, in position order (padded with page 0).
    pub block_table: Tensor<B, 2, Int>,
    /// `[R]` each request's tokens in the step.
    pub q_lens: Vec<usize>,
    /// `[R]` each request's cached tokens after the step.
    pub kv_lens: Vec<usize>,
    /// Slots per page.
    pub page_size: usize,
}

/// A model with its paged KV cache and the scheduler of its requests: any [`StepModel`].
pub struct Server<B: FusedOps, M: StepModel<B>> {
    model: M,
    /// Where the weights come back from after a device failure.
    weights: Weights<B, M>,
    /// The paged cache of each step device, in the model's order.
    caches: Vec<Vec<LayerCache<B>>>,
    /// The devices a step runs on ([`StepModel::step_devices`]), the server's first.
    devices: Vec<B::Device>,
    scheduler: Scheduler,
    cfg: ServeConfig,
    device: B::Device,
    next_id: u64,
    /// Test hooks: the next step faults on the device, panics, or the next recovery fails.
    fault_next_step: bool,
    panic_next_step: bool,
    fail_next_recovery: bool,
    /// Why the server can no longer serve, once a failure could not be recovered from.
    failure: Option<String>,
    /// Captured decode, when enabled.
    decode: Option<CapturedDecode<B>>,
}

type WeightRecorder = BinBytesRecorder<FullPrecisionSettings>;

/// Loads a model's weights again onto a device that was reset ([`Server::with_reload`]).
pub type Reload<B, M> =
    Box<dyn FnMut(&<B as burn::tensor::backend::BackendTypes>::Device) -> Result<M, String> + Send>;

/// Where a server's weights come back from after a device failure.
enum Weights<B: FusedOps, M> {
    /// A copy on the host, with each parameter's dtype, which the copy does not keep.
    Host(Vec<u8>, ParamDtypes),
    /// Loaded again from their source (a checkpoint's files, still mapped).
    Reload(Reload<B, M>),
}

/// Each parameter's dtype. Burn's records keep values at full precision, not their dtype, so
/// the model reloaded from the host copy is cast back to what it was (bf16 weights, int8
/// quantized experts and projections).
#[derive(Clone, Default)]
struct ParamDtypes(HashMap<ParamId, DType>);

impl<B: Backend> ModuleVisitor<B> for ParamDtypes {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.0.insert(param.id, param.val().dtype());
    }

    fn visit_int<const D: usize>(&mut self, param: &Param<Tensor<B, D, Int>>) {
        self.0.insert(param.id, param.val().dtype());
    }
}

impl<B: Backend> ModuleMapper<B> for ParamDtypes {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, t, mapper) = param.consume();
        let t = match self.0.get(&id) {
            Some(&dtype) if dtype != t.dtype() => t.cast(dtype),
            _ => t,
        };
        Param::from_mapped_value(id, t, mapper)
    }

    fn map_int<const D: usize>(
        &mut self,
        param: Param<Tensor<B, D, Int>>,
    ) -> Param<Tensor<B, D, Int>> {
        let (id, t, mapper) = param.consume();
        let t = match self.0.get(&id) {
            Some(&dtype) if dtype != t.dtype() => t.cast(dtype),
            _ => t,
        };
        Param::from_mapped_value(id, t, mapper)
    }
}

impl<B: FusedOps, M: StepModel<B>> Server<B, M> {
    /// A server with an empty cache. It keeps a copy of the weights on the host, to restore
    /// them after a device failure: for a model built in code or changed since it was loaded
    /// (a checkpoint's model as loaded is served by [`Server::with_reload`]).
    pub fn new(model: M, cfg: ServeConfig, device: &B::Device) -> Result<Self, ServeConfigError> {
        cfg.validate()?;
        check_memory(&cfg, &model, &step_devices(&model, device)?)?;
        let copy = WeightRecorder::default()
            .record(model.clone().into_record(), ())
            .map_err(|e| ServeConfigError(format!("cannot copy the weights to the host: {e}")))?;
        let mut dtypes = ParamDtypes::default();
        model.visit(&mut dtypes);
        Self::serving(model, Weights::<B, M>::Host(copy, dtypes), cfg, device)
    }

    /// A server with an empty cache that keeps no copy of the weights: after a device failure
    /// `reload` loads them again on the reset device (from a checkpoint's files, which stay
    /// mapped). For a model whose weights are still those of their source: a fine-tuned model
    /// would come back as it was loaded.
    pub fn with_reload(
        model: M,
        cfg: ServeConfig,
        device: &B::Device,
        reload: Reload<B, M>,
    ) -> Result<Self, ServeConfigError> {
        cfg.validate()?;
        check_memory(&cfg, &model, &step_devices(&model, device)?)?;
        Self::serving(model, Weights::Reload(reload), cfg, device)
    }

    fn serving(
        model: M,
        weights: Weights<B, M>,
        cfg: ServeConfig,
        device: &B::Device,
    ) -> Result<Self, ServeConfigError> {
        let pool = PagePool::new(cfg.pages, cfg.page_size);
        let mut server = Self {
            caches: Vec::new(),
            devices: step_devices(&model, device)?,
            model,
            weights,
            scheduler: Scheduler::new(pool, cfg.step_tokens),
            cfg,
            device: device.clone(),
            next_id: 0,
            fault_next_step: false,
            panic_next_step: false,
            fail_next_recovery: false,
            failure: None,
            decode: None,
        };
        server.caches = server.empty_caches();
        Ok(server)
    }

    /// Pages of the cache: the pool's, then scratch pages for the padding rows of captured
    /// decode batches (one per row of the largest bucket).
    fn cache_pages(&self) -> usize {
        self.cfg.pages + self.decode.as_ref().map_or(0, CapturedDecode::largest)
    }

    /// An empty cache on every step device.
    fn empty_caches(&self) -> Vec<Vec<LayerCache<B>>> {
        let layout = self.model.cache_layout();
        let slots = self.cache_pages() * self.cfg.page_size;
        self.devices
            .iter()
            .map(|device| {
                let empty = |dim| {
                    Tensor::<B, 3>::zeros([slots, layout.kv_heads, dim], (device, layout.dtype))
                };
                (0..layout.layers)
                    .map(|_| LayerCache {
                        keys: empty(layout.key_dim),
                        values: layout.value_dim.map(empty),
                    })
                    .collect()
            })
            .collect()
    }

    /// The page pool (pages return to it when requests finish or are preempted).
    pub fn pool(&self) -> &PagePool {
        self.scheduler.pool()
    }

    /// Preemptions since the server started.
    pub fn preemptions(&self) -> usize {
        self.scheduler.preemptions()
    }

    /// Requests waiting to be admitted (new or preempted).
    pub fn waiting(&self) -> usize {
        self.scheduler.waiting()
    }

    /// The devices a step runs on, each with its own cache (the server's first).
    pub fn devices(&self) -> &[B::Device] {
        &self.devices
    }

    /// The server's settings.
    pub fn config(&self) -> &ServeConfig {
        &self.cfg
    }

    /// The model's vocabulary: the token ids a prompt may hold.
    pub fn vocab(&self) -> usize {
        self.model.vocab()
    }

    /// Requests submitted and not finished (waiting or running).
    pub fn pending(&self) -> usize {
        self.scheduler.waiting() + self.scheduler.running().len()
    }

    /// No request waits or runs.
    pub fn is_idle(&self) -> bool {
        self.scheduler.is_idle()
    }

    /// Decode-only steps of up to the largest of `buckets` requests replay a captured graph of
    /// the step (batches padded to the next bucket) instead of issuing each op. Captures every
    /// bucket now; a bucket that cannot be captured runs eagerly and says why, once (as does a
    /// batch above the largest bucket). A decode step has at most `step_tokens` requests, so
    /// buckets past the first that holds that many would never run: they are not captured (and
    /// hold no memory), said once. Fails, saying why, on a backend other than `Ascend`, a device
    /// without ACL graphs, or a busy server. See [`Server::captured_buckets`].
    pub fn enable_captured_decode(&mut self, buckets: &[usize]) -> Result<(), String> {
        let why = if TypeId::of::<B>() != TypeId::of::<Ascend>() {
            Some(format!(
                "captured decode needs the Ascend backend, this server runs on {}: it decodes \
                 eagerly",
                std::any::type_name::<B>()
            ))
        } else if let Err(e) = graph::supported(self.ascend_device()) {
            Some(format!(
                "captured decode is not available, the server decodes eagerly: {e}"
            ))
        } else if let Some(why) = self.model.capture_refusal() {
            Some(why)
        } else if !self.is_idle() {
            Some("captured decode is enabled before any request is submitted".into())
        } else if buckets.is_empty() || buckets.contains(&0) {
            Some(format!(
                "decode buckets must be at least 1, got {buckets:?}"
            ))
        } else {
            None
        };
        if let Some(why) = why {
            eprintln!("burn-ascend-suite: {why}");
            return Err(why);
        }
        let reach = buckets
            .iter()
            .copied()
            .filter(|&b| b >= self.cfg.step_tokens)
            .min();
        let (used, unused): (Vec<usize>, Vec<usize>) =
            buckets.iter().partition(|&&b| reach.is_none_or(|r| b <= r));
        if let (Some(reach), false) = (reach, unused.is_empty()) {
            eprintln!(
                "burn-ascend-suite: decode buckets {unused:?} are not captured: a decode step of at \
                 most {} requests fits bucket {reach}",
                self.cfg.step_tokens
            );
        }
        self.decode = Some(CapturedDecode::new(used));
        // The cache grows by the scratch pages and keeps its address from now on. The old one
        // goes first: a cache sized to the device's memory cannot be held twice.
        self.caches = Vec::new();
        self.caches = self.empty_caches();
        self.capture_decode();
        Ok(())
    }

    /// Gives the KV cache `utilization` of the device's memory (as vLLM's
    /// `--gpu-memory-utilization`): that fraction of the device's total, less the memory in use
    /// now (the weights, other processes) and the largest step's workspace, which is measured
    /// by serving one request of `step_tokens` tokens through the cache the server was built
    /// with; the cache is then rebuilt with as many pages as that leaves. A model whose step
    /// spans several devices gets the pages the fullest of them leaves (each holds a cache of
    /// as many pages), agreed with the other processes serving it ([`StepModel::agree`]); the
    /// sizing returned is that device's. Refused, with the numbers, when they cannot hold one
    /// request of `max_seq` tokens; on a backend other than `Ascend` (no memory to read); and
    /// once a request was submitted or decode captured (size the cache first).
    pub fn fit_cache_to_memory(
        &mut self,
        utilization: f64,
    ) -> Result<CacheSizing, ServeConfigError> {
        let devices: Vec<AscendDevice> = self
            .devices
            .iter()
            .filter_map(|d| (d as &dyn Any).downcast_ref::<AscendDevice>().copied())
            .collect();
        if devices.len() != self.devices.len() {
            return Err(ServeConfigError(format!(
                "sizing the cache from device memory needs an NPU, this server runs on {}",
                std::any::type_name::<B>()
            )));
        }
        if !(utilization > 0.0 && utilization <= 1.0) {
            return Err(ServeConfigError(format!(
                "the memory utilization {utilization} is not in (0, 1]"
            )));
        }
        if !self.is_idle() || self.next_id > 0 || self.decode.is_some() {
            return Err(ServeConfigError(
                "the cache is sized from memory before any request and before captured decode"
                    .into(),
            ));
        }
        let contexts = devices
            .iter()
            .map(|d| {
                DeviceContext::get(&(*d).into())
                    .map_err(|e| ServeConfigError(format!("cannot open {d}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let release = || {
            contexts.iter().try_for_each(|ctx| {
                ctx.release_cache()
                    .map_err(|e| ServeConfigError(format!("{}: {e}", ctx.device())))
            })
        };
        let free = || {
            devices
                .iter()
                .map(memory::device_memory)
                .collect::<Result<Vec<_>, _>>()
        };
        // What a step takes: the device memory the probe left reserved (the allocators keep
        // the blocks it used, its tensors' and its operators' workspaces).
        release()?;
        let before = free()?;
        let probe = self.cfg.step_tokens.min(self.cfg.max_seq - 1).max(1);
        let out = self.generate(&[Request::greedy(vec![0; probe], 1)]);
        if let Err(e) = &out.results[0] {
            return Err(ServeConfigError(format!(
                "measuring a step of {probe} tokens on {}: {e}",
                devices[0]
            )));
        }
        for ctx in &contexts {
            ctx.synchronize()
                .map_err(|e| ServeConfigError(format!("{}: {e}", ctx.device())))?;
        }
        let after = free()?;
        release()?;
        let page_bytes = memory::page_bytes(&self.model.cache_layout(), self.cfg.page_size);
        let cache = self.cache_bytes();
        let now = free()?;
        let mut fewest: Option<CacheSizing> = None;
        for (i, device) in devices.iter().enumerate() {
            let workspace = before[i].0.saturating_sub(after[i].0);
            let (free, total) = now[i];
            let in_use = (total - free).saturating_sub(cache);
            let sizing = memory::pages_for(
                &self.cfg,
                page_bytes,
                (in_use, workspace, total),
                utilization,
                device,
            )?;
            if fewest.is_none_or(|f| sizing.pages < f.pages) {
                fewest = Some(sizing);
            }
        }
        let mut sizing = fewest.expect("a step device");
        sizing.pages = self.model.agree(sizing.pages);
        sizing.tokens = sizing.pages * self.cfg.page_size;
        self.cfg.pages = sizing.pages;
        self.cfg.validate()?;
        self.scheduler = Scheduler::new(
            PagePool::new(self.cfg.pages, self.cfg.page_size),
            self.cfg.step_tokens,
        );
        // The old cache goes before the new one is allocated.
        self.caches = Vec::new();
        self.caches = self.empty_caches();
        Ok(sizing)
    }

    /// Bytes of device memory the KV cache takes on each step device (its pages and captured
    /// decode's scratch pages, every layer).
    pub fn cache_bytes(&self) -> u64 {
        self.cache_pages() as u64
            * memory::page_bytes(&self.model.cache_layout(), self.cfg.page_size)
    }

    /// The decode buckets that run captured.
    pub fn captured_buckets(&self) -> Vec<usize> {
        self.decode
            .as_ref()
            .map_or_else(Vec::new, |d| d.buckets.iter().map(|b| b.size).collect())
    }

    /// The decode buckets asked for that run eagerly, and why.
    pub fn eager_buckets(&self) -> Vec<(usize, String)> {
        self.decode.as_ref().map_or_else(Vec::new, |d| {
            d.eager.iter().map(|(b, why)| (*b, why.clone())).collect()
        })
    }

    /// The server's device as an Ascend device (the caller checked that `B` is `Ascend`).
    fn ascend_device(&self) -> &AscendDevice {
        (&self.device as &dyn Any)
            .downcast_ref::<AscendDevice>()
            .expect("the Ascend backend's device")
    }

    /// Captures the decode step of every requested bucket (dropping the old graphs first).
    fn capture_decode(&mut self) {
        let Some(decode) = self.decode.as_mut() else {
            return;
        };
        decode.buckets.clear();
        decode.eager.clear();
        for b in decode.requested.clone() {
            let captured = self.capture_bucket(b);
            let decode = self.decode.as_mut().expect("captured decode is enabled");
            match captured {
                Ok(bucket) => decode.buckets.push(bucket),
                Err(why) => {
                    decode.notice(format!("decode bucket {b} runs eagerly: {why}"));
                    decode.eager.insert(b, why);
                }
            }
        }
    }

    fn capture_bucket(&mut self, b: usize) -> Result<Bucket<B>, String> {
        let packing = Packing {
            b,
            free: self.cache_pages(),
            kv: b * self.cfg.max_seq,
        };
        let packed = Tensor::<B, 1, Int>::zeros([packing.len()], (&self.device, DType::I32));
        let device = *self.ascend_device();
        let (graph, logits) = graph::capture(&device, || {
            let inputs = packed_inputs(&packed, packing);
            self.forward(std::slice::from_ref(&inputs))
        })
        .map_err(|e| e.to_string())?;
        Ok(Bucket {
            size: b,
            packing,
            packed,
            logits,
            graph,
        })
    }

    /// Queues `request`, or returns why it can never be served, or that the waiting queue is
    /// full ([`ServeError::Overloaded`]: it may be submitted again later).
    pub fn submit(&mut self, request: Request) -> Result<RequestId, ServeError> {
        if let Some(why) = &self.failure {
            return Err(ServeError::Unrecoverable(why.clone()));
        }
        self.cfg.check(&request, self.model.vocab())?;
        let waiting = self.scheduler.waiting();
        if waiting >= self.cfg.max_waiting {
            return Err(ServeError::Overloaded {
                waiting,
                limit: self.cfg.max_waiting,
            });
        }
        let id = RequestId(self.next_id);
        self.next_id += 1;
        let mut entry = Entry::new(id, request.prompt, request.new_tokens, request.sampling);
        entry.stop = request.stop;
        self.scheduler.push(entry);
        Ok(id)
    }

    /// Cancels request `id`, waiting or running: it leaves the server now and its cache pages
    /// return to the pool at once. Returns what it had generated, or `None` if no such request
    /// is pending (it finished, failed, or was never submitted).
    pub fn cancel(&mut self, id: RequestId) -> Option<Generation> {
        self.scheduler.cancel(id).map(Generation::from)
    }

    /// For tests of the recovery: the next step's decode attention is given a key slot past the
    /// end of the cache (a paged prefill step: a block-table page past it), so its kernel faults
    /// (an out-of-bounds global-memory read).
    pub fn inject_fault(&mut self) {
        self.fault_next_step = true;
    }

    /// For tests of the recovery: the next step panics while it prepares its device work, as a
    /// failed `expect` there would; it fails as a faulted step does ([`ServeError::Step`]).
    pub fn inject_panic(&mut self) {
        self.panic_next_step = true;
    }

    /// For tests of supervision: the next recovery from a failed step fails, as a device that
    /// cannot be reset would, so the server becomes unusable ([`Server::failure`]).
    pub fn fail_next_recovery(&mut self) {
        self.fail_next_recovery = true;
    }

    /// Why the server can no longer serve (a failure its recovery could not fix), or `None`
    /// while it serves. Once set it stays: every step fails the pending requests and `submit`
    /// refuses new ones, both with [`ServeError::Unrecoverable`]; restart the server.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// Runs one step: schedules it, computes it, samples, and reports what finished. A step
    /// that fails (on the device: [`ServeError::Device`]; a panic in its work on the host:
    /// [`ServeError::Step`]) fails its requests and requeues the other running ones; the server
    /// then resets the device and restores its weights and cache. When that recovery fails, or
    /// the scheduler's bookkeeping panics, the server is unusable ([`Server::failure`]) and
    /// every pending request ends in this report with [`ServeError::Unrecoverable`].
    pub fn step(&mut self) -> StepReport {
        if self.failure.is_none() {
            // The device work is guarded inside; a panic reaching here is the scheduler's, whose
            // state can no longer be trusted, and no reset repairs host state.
            match catch_unwind(AssertUnwindSafe(|| self.step_or_recover())) {
                Ok(report) => return report,
                Err(panic) => {
                    self.failure = Some(format!(
                        "a step panicked outside its device work: {}",
                        panic_message(panic.as_ref())
                    ))
                }
            }
        }
        StepReport {
            finished: self.fail_pending(),
            ..StepReport::default()
        }
    }

    fn step_or_recover(&mut self) -> StepReport {
        let start = Instant::now();
        let plan = self.scheduler.schedule();
        if plan.work.is_empty() {
            return StepReport::default();
        }
        let mut report = StepReport {
            tokens: plan.tokens(),
            decode_only: plan.work.iter().all(|w| w.to - w.from == 1 && w.samples),
            preempted: plan.preempted.len(),
            ..StepReport::default()
        };
        match self.run(&plan, report.decode_only) {
            Ok((sampled, captured, issue_secs, listed_keys)) => {
                report.captured = captured;
                report.listed_keys = listed_keys;
                report.issue_secs = issue_secs;
                report.sampled = plan
                    .work
                    .iter()
                    .filter(|w| w.samples)
                    .zip(&sampled)
                    .map(|(w, (token, _))| (self.scheduler.running()[w.index].id, *token))
                    .collect();
                for e in self.scheduler.complete(&plan, sampled) {
                    report.finished.push((e.id, Ok(e.into())));
                }
            }
            Err(error) => {
                for e in self.scheduler.fail(&plan) {
                    report.finished.push((e.id, Err(error.clone())));
                }
                if let Err(why) = self.recover() {
                    self.failure = Some(format!(
                        "the recovery from a failed step ({error}) failed: {why}"
                    ));
                    report.finished.extend(self.fail_pending());
                }
            }
        }
        report.secs = start.elapsed().as_secs_f64();
        report
    }

    /// Ends every pending request, waiting or running, with the server's failure.
    fn fail_pending(&mut self) -> Vec<(RequestId, Result<Generation, ServeError>)> {
        let why = self.failure.clone().unwrap_or_default();
        self.scheduler
            .drain()
            .into_iter()
            .map(|e| (e.id, Err(ServeError::Unrecoverable(why.clone()))))
            .collect()
    }

    /// The device part of a step, where every failure of the step is caught (a device error,
    /// typed, or a panic); the bucket whose graph the step replayed, if it did.
    fn run(
        &mut self,
        plan: &Plan,
        decode_only: bool,
    ) -> Result<(Vec<Sampled>, Option<usize>, f64, usize), ServeError> {
        let fault = std::mem::take(&mut self.fault_next_step);
        let panic = std::mem::take(&mut self.panic_next_step);
        guarded(|| {
            if panic {
                panic!("a panic injected by Server::inject_panic (a test hook)");
            }
            let start = Instant::now();
            let host = self.host_inputs(plan, fault, !decode_only);
            let listed_keys = host.indices.len();
            let replayed = if decode_only {
                self.replay_decode(&host, plan)?
            } else {
                None
            };
            let (logits, bucket) = match replayed {
                Some((logits, bucket)) => (logits, Some(bucket)),
                None => {
                    let inputs: Vec<StepInputs<B>> = self
                        .devices
                        .iter()
                        .map(|d| self.inputs(&host, plan, d))
                        .collect();
                    (self.forward(&inputs), None)
                }
            };
            let issue_secs = start.elapsed().as_secs_f64();
            Ok((self.sample(logits, plan), bucket, issue_secs, listed_keys))
        })
    }

    /// Resets the device and restores the weights and an empty cache after a failed step, or
    /// why it could not (a failure or a panic on the way).
    fn recover(&mut self) -> Result<(), String> {
        match guarded(|| Ok(self.restore_device_state())) {
            Ok(restored) => restored,
            Err(e) => Err(e.to_string()),
        }
    }

    /// A decode step by its bucket's graph: the logits `[n, V]` of its rows and the bucket, or
    /// `None` (said once) when it runs eagerly; or why writing its inputs or replaying failed.
    fn replay_decode(
        &mut self,
        host: &HostInputs,
        plan: &Plan,
    ) -> Result<Option<(Tensor<B, 2>, usize)>, AscendError> {
        let n = plan.work.len();
        let ps = self.cfg.page_size;
        let pages = self.cfg.pages;
        let Some(decode) = self.decode.as_mut() else {
            return Ok(None);
        };
        let Some(bucket) = decode.bucket_for(n) else {
            let why = decode.why_eager(n);
            decode.notice(why);
            return Ok(None);
        };
        let p = bucket.packing;
        let pad = p.b - n;
        let mut packed = vec![0i32; p.len()];
        let mut put =
            |at: usize, values: &[i32]| packed[at..at + values.len()].copy_from_slice(values);
        put(p.row(Packing::TOKENS), &host.tokens);
        put(p.row(Packing::POSITIONS), &host.positions);
        put(p.row(Packing::PREFIX), &host.prefix_lens);
        put(p.row(Packing::SEQ), &host.seq_lens);
        put(p.row(Packing::LAST_LOC), &host.last_loc);
        put(p.row(Packing::SPLITS), &host.splits);
        put(p.indptr(), &host.indptr);
        put(p.indices(), &host.indices);
        // Real rows that start a page take the first free pages; each padding row then takes
        // its scratch page and attends to that one slot.
        let taken = plan.work.iter().filter(|w| w.from % ps == 0).count();
        put(p.free_pages(), &plan.free_list[..taken]);
        let keys = host.indices.len();
        for j in 0..pad {
            let scratch = (pages + j) as i32;
            packed[p.free_pages() + taken + j] = scratch;
            packed[p.indices() + keys + j] = scratch * ps as i32;
            packed[p.indptr() + n + 1 + j] = (keys + j + 1) as i32;
            packed[p.row(Packing::SEQ) + n + j] = 1;
            packed[p.row(Packing::SPLITS) + n + j] = 1;
        }
        let sample_at = p.row(Packing::SAMPLE);
        for (r, v) in packed[sample_at..sample_at + p.b].iter_mut().enumerate() {
            *v = r as i32;
        }
        let static_input = (&bucket.packed as &dyn Any)
            .downcast_ref::<Tensor<Ascend, 1, Int>>()
            .expect("captured decode runs on Ascend");
        let len = packed.len();
        graph::write(static_input, TensorData::new(packed, [len]))
            .map_err(|e| AscendError::from_acl("graph::write (the decode inputs)", &e))?;
        let replay = format!("replaying decode bucket {}", bucket.size);
        bucket
            .graph
            .replay()
            .map_err(|e| AscendError::from_acl(&replay, &e))?;
        Ok(Some((bucket.logits.clone().narrow(0, 0, n), bucket.size)))
    }

    /// Resets the device (a fault is sticky: its context fails every later use until then),
    /// reloads the weights (from their source or the host copy) and empties the cache (no request holds a page
    /// after a failed step); or why it could not.
    fn restore_device_state(&mut self) -> Result<(), String> {
        // The graphs hold the old context's addresses: gone before the reset, captured again
        // after it.
        if let Some(decode) = self.decode.as_mut() {
            decode.buckets.clear();
        }
        if std::mem::take(&mut self.fail_next_recovery) {
            return Err(
                "the device reset failed (injected by Server::fail_next_recovery, a test hook)"
                    .into(),
            );
        }
        // A model split across NPUs (an expert-parallel one) may have faulted on any of them,
        // and a reset of one destroys their communicator (and the parts on the others with
        // their contexts), so every NPU it uses is reset and the model rebuilt on them.
        // Only Ascend devices have sticky faults; `B::Device` is `'static` as `B` is.
        if let Some(device) = (&self.device as &dyn Any).downcast_ref::<AscendDevice>() {
            let mut devices = vec![*device];
            let steps = self
                .devices
                .iter()
                .filter_map(|d| (d as &dyn Any).downcast_ref::<AscendDevice>().copied());
            for d in steps.chain(self.model.other_devices()) {
                if !devices.contains(&d) {
                    devices.push(d);
                }
            }
            for device in &devices {
                burn_ascend::reset_device(device)
                    .map_err(|e| format!("resetting {device} failed: {e}"))?;
            }
        }
        let model = match &mut self.weights {
            Weights::Host(copy, dtypes) => {
                let record = WeightRecorder::default()
                    .load(copy.clone(), &self.device)
                    .map_err(|e| {
                        format!("reloading the weights from their host copy failed: {e}")
                    })?;
                self.model.clone().load_record(record).map(dtypes)
            }
            Weights::Reload(reload) => reload(&self.device)
                .map_err(|e| format!("reloading the weights from their source failed: {e}"))?,
        };
        self.model = model.after_reset();
        self.caches = Vec::new();
        self.caches = self.empty_caches();
        self.capture_decode();
        Ok(())
    }

    /// The step's inputs on the host (see [`StepInputs`]);
    /// `paged`: a prefill step, whose requests attend through their block tables
    /// (`fused::extend_attention`): no per-token key lists. Decode steps keep decode_attention
    /// (and their captured graphs).
    fn host_inputs(&self, plan: &Plan, fault: bool, paged: bool) -> HostInputs {
        let ps = self.cfg.page_size;
        let running = self.scheduler.running();
        let mut table = HostPrefill::default();
        let (mut tokens, mut positions) = (Vec::new(), Vec::new());
        let (mut prefix_lens, mut seq_lens, mut last_loc) = (Vec::new(), Vec::new(), Vec::new());
        let (mut indptr, mut indices, mut splits) = (vec![0i32], Vec::new(), Vec::new());
        let mut sample_rows = Vec::new();
        for w in &plan.work {
            let e = &running[w.index];
            prefix_lens.push(w.from as i32);
            seq_lens.push(w.to as i32);
            last_loc.push(if w.from == 0 {
                0
            } else {
                slot(&e.pages, ps, w.from - 1)
            });
            for p in w.from..w.to {
                tokens.push(e.tokens[p] as i32);
                positions.push(p as i32);
                if !paged {
                    indices.extend((0..=p).map(|i| slot(&e.pages, ps, i)));
                    indptr.push(indices.len() as i32);
                    splits.push((p + 1).div_ceil(32).clamp(1, self.cfg.max_kv_splits) as i32);
                }
            }
            if paged {
                table.rows.push(e.pages[..w.to.div_ceil(ps)].to_vec());
                table.q_lens.push(w.to - w.from);
                table.kv_lens.push(w.to);
            }
            if w.samples {
                sample_rows.push(tokens.len() as i32 - 1);
            }
        }
        if fault {
            // Past the cache's last slot (scratch pages included).
            match table.rows.first_mut() {
                Some(row) => row[0] = self.cache_pages() as _,
                None => indices[0] = (self.cache_pages() * ps) as i32,
            }
        }
        HostInputs {
            tokens,
            positions,
            prefix_lens,
            seq_lens,
            last_loc,
            indptr,
            indices,
            splits,
            sample_rows,
            prefill: paged.then_some(table),
        }
    }

    /// Uploads the step's inputs to `d`.
    fn inputs(&self, host: &HostInputs, plan: &Plan, d: &B::Device) -> StepInputs<B> {
        StepInputs {
            tokens: ints(host.tokens.clone(), d),
            positions: ints::<B>(host.positions.clone(), d).float(),
            prefix_lens: ints(host.prefix_lens.clone(), d),
            seq_lens: ints(host.seq_lens.clone(), d),
            last_loc: ints(host.last_loc.clone(), d),
            free_pages: ints(plan.free_list.clone(), d),
            kv_indptr: ints(host.indptr.clone(), d),
            kv_indices: ints(host.indices.clone(), d),
            kv_splits: ints(host.splits.clone(), d),
            sample_rows: ints(host.sample_rows.clone(), d),
            prefill: host
                .prefill
                .as_ref()
                .map(|t| t.upload(self.cfg.page_size, d)),
        }
    }

    /// One step of the model over the paged cache: allocates the slots of the step's tokens
    /// (`fused::alloc_extend`), runs the model's step (each attention layer writes its rows
    /// there and attends every token to its cached positions) and returns the logits `[S, V]`
    /// of the sampled rows. `x` holds the step's inputs on each step device, in order (each
    /// device allocates the same slots in its own cache).
    pub fn forward(&mut self, x: &[StepInputs<B>]) -> Tensor<B, 2> {
        let max_kv_splits = self.cfg.max_kv_splits;
        let page_size = self.cfg.page_size;
        let mut attention: Vec<PagedAttention<'_, B>> = self
            .caches
            .iter_mut()
            .zip(x)
            .map(|(caches, x)| {
                let t = x.tokens.dims()[0];
                let slots = fused::alloc_extend(
                    x.prefix_lens.clone(),
                    x.seq_lens.clone(),
                    x.last_loc.clone(),
                    x.free_pages.clone(),
                    page_size,
                    t,
                )
                .slots;
                PagedAttention::new(caches, slots, x, max_kv_splits)
            })
            .collect();
        self.model.step(x, &mut attention)
    }

    /// The next token of each sampling share of `plan` from its row of `logits [S, V]`, chosen
    /// on the device ([`sampler::sample`]), and the row itself when recorded.
    fn sample(&self, logits: Tensor<B, 2>, plan: &Plan) -> Vec<Sampled> {
        let [_, v] = logits.dims();
        let running = self.scheduler.running();
        let rows: Vec<RowSampling> = plan
            .work
            .iter()
            .filter(|w| w.samples)
            .map(|w| {
                let e = &running[w.index];
                RowSampling {
                    sampling: e.sampling,
                    generated: e.generated().len() as u64,
                }
            })
            .collect();
        let recorded: Vec<Option<Vec<f32>>> = if self.cfg.record_logits {
            host_floats(logits.clone())
                .chunks(v)
                .map(|r| Some(r.to_vec()))
                .collect()
        } else {
            vec![None; rows.len()]
        };
        sampler::sample(logits, &rows)
            .into_iter()
            .zip(recorded)
            .collect()
    }

    /// Serves `arrivals` (sorted by their step) to the end and reports what happened;
    /// `modelled` returns the modelled device seconds of the work run since its last call
    /// (`None` where there is no model). Request `i` of the report is `arrivals[i]`.
    pub fn serve(
        &mut self,
        arrivals: &[Arrival],
        mut modelled: impl FnMut() -> Option<f64>,
    ) -> ServingReport {
        let n = arrivals.len();
        let mut results: Vec<Option<Result<Generation, ServeError>>> = vec![None; n];
        let mut index = HashMap::new();
        // Wall and modelled times at which each request received each token.
        let (mut wall_times, mut modelled_times) = (vec![Vec::new(); n], vec![Vec::new(); n]);
        // Wall time at which each request was submitted.
        let mut submitted = vec![0.0; n];
        let preempted_before = self.preemptions();
        let (mut step, mut next, mut steps) = (0usize, 0usize, 0usize);
        let (mut decode_tokens, mut decode_secs) = (0usize, 0f64);
        let mut modelled_total = modelled().map(|_| 0.0);
        let start = Instant::now();
        loop {
            // An idle server skips ahead to the next arrival.
            if self.is_idle() && next < n {
                step = step.max(arrivals[next].step);
            }
            while next < n && arrivals[next].step <= step {
                submitted[next] = start.elapsed().as_secs_f64();
                match self.submit(arrivals[next].request.clone()) {
                    Ok(id) => {
                        index.insert(id, next);
                    }
                    Err(e) => results[next] = Some(Err(e)),
                }
                next += 1;
            }
            if self.is_idle() {
                if next == n {
                    break;
                }
                continue;
            }
            let report = self.step();
            step += 1;
            steps += 1;
            let wall = start.elapsed().as_secs_f64();
            let device = modelled().map(|s| s + modelled_total.unwrap_or(0.0));
            modelled_total = device;
            if report.decode_only {
                decode_tokens += report.sampled.len();
                decode_secs += report.secs;
            }
            for (id, _) in &report.sampled {
                wall_times[index[id]].push(wall);
                modelled_times[index[id]].extend(device);
            }
            for (id, result) in report.finished {
                results[index[&id]] = Some(result);
            }
        }
        let wall_secs = start.elapsed().as_secs_f64();
        let results: Vec<Result<Generation, ServeError>> = results
            .into_iter()
            .map(|r| r.expect("every request ends"))
            .collect();
        let per_token = |times: &[Vec<f64>]| {
            let tpot = times
                .iter()
                .zip(&results)
                .filter(|(t, r)| r.is_ok() && t.len() > 1)
                .map(|(t, _)| (t[t.len() - 1] - t[0]) / (t.len() - 1) as f64);
            percentiles(tpot.collect())
        };
        ServingReport {
            completed: results.iter().filter(|r| r.is_ok()).count(),
            failed: results.iter().filter(|r| r.is_err()).count(),
            output_tokens: results.iter().flatten().map(|g| g.tokens.len()).sum(),
            preemptions: self.preemptions() - preempted_before,
            steps,
            wall_secs,
            modelled_secs: modelled_total,
            tpot_wall: per_token(&wall_times),
            ttft_wall: percentiles(
                wall_times
                    .iter()
                    .zip(&submitted)
                    .zip(&results)
                    .filter(|((t, _), r)| r.is_ok() && !t.is_empty())
                    .map(|((t, s), _)| t[0] - s)
                    .collect(),
            ),
            tpot_modelled: per_token(&modelled_times),
            decode_tokens,
            decode_secs,
            results,
        }
    }

    /// Serves `requests`, all arriving at once, to the end.
    pub fn generate(&mut self, requests: &[Request]) -> ServingReport {
        let arrivals: Vec<Arrival> = requests
            .iter()
            .map(|r| Arrival {
                step: 0,
                request: r.clone(),
            })
            .collect();
        self.serve(&arrivals, || None)
    }
}

/// [`memory::check_fits`] on each of `devices` that is an Ascend device, which reports its
/// memory.
fn check_memory<B: FusedOps, M: StepModel<B>>(
    cfg: &ServeConfig,
    model: &M,
    devices: &[B::Device],
) -> Result<(), ServeConfigError> {
    for device in devices {
        if let Some(device) = (device as &dyn Any).downcast_ref::<AscendDevice>() {
            memory::check_fits(cfg, &model.cache_layout(), device)?;
        }
    }
    Ok(())
}

/// The devices a step of `model` runs on when served on `device`: its step devices, which must
/// start with `device`, else `device` alone.
fn step_devices<B: FusedOps, M: StepModel<B>>(
    model: &M,
    device: &B::Device,
) -> Result<Vec<B::Device>, ServeConfigError> {
    let devices = model.step_devices();
    match devices.first() {
        None => Ok(vec![device.clone()]),
        Some(first) if first == device => Ok(devices),
        Some(first) => Err(ServeConfigError(format!(
            "the model's step runs on {devices:?} from {first:?}: serve it on {first:?}, not \
             {device:?}"
        ))),
    }
}

/// A step's inputs on the host, request after request (see [`StepInputs`]).
struct HostInputs {
    tokens: Vec<i32>,
    positions: Vec<i32>,
    prefix_lens: Vec<i32>,
    seq_lens: Vec<i32>,
    last_loc: Vec<i32>,
    indptr: Vec<i32>,
    indices: Vec<i32>,
    splits: Vec<i32>,
    sample_rows: Vec<i32>,
    prefill: Option<HostPrefill>,
}

/// A prefill step's block tables and lengths on the host (see [`PrefillInputs`]).
#[derive(Default)]
struct HostPrefill {
    rows: Vec<Vec<u32>>,
    q_lens: Vec<usize>,
    kv_lens: Vec<usize>,
}

impl HostPrefill {
    fn upload<B: FusedOps>(&self, page_size: usize, d: &B::Device) -> PrefillInputs<B> {
        let width = self.rows.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let mut table = vec![0i32; self.rows.len() * width];
        for (r, pages) in self.rows.iter().enumerate() {
            for (i, &page) in pages.iter().enumerate() {
                table[r * width + i] = page as i32;
            }
        }
        let rows = self.rows.len();
        PrefillInputs {
            block_table: ints::<B>(table, d).reshape([rows, width]),
            q_lens: self.q_lens.clone(),
            kv_lens: self.kv_lens.clone(),
            page_size,
        }
    }
}

/// The step inputs of a captured bucket: views of its packed buffer.
fn packed_inputs<B: FusedOps>(packed: &Tensor<B, 1, Int>, p: Packing) -> StepInputs<B> {
    let field = |at: usize, len: usize| packed.clone().narrow(0, at, len);
    let row = |f: usize| field(p.row(f), p.b);
    StepInputs {
        tokens: row(Packing::TOKENS),
        positions: row(Packing::POSITIONS).float(),
        prefix_lens: row(Packing::PREFIX),
        seq_lens: row(Packing::SEQ),
        last_loc: row(Packing::LAST_LOC),
        free_pages: field(p.free_pages(), p.free),
        kv_indptr: field(p.indptr(), p.b + 1),
        kv_indices: field(p.indices(), p.kv),
        kv_splits: row(Packing::SPLITS),
        sample_rows: row(Packing::SAMPLE),
        prefill: None,
    }
}

/// Runs `f` (a step's device work), turning a device failure (typed, by `try_run`) or any other
/// panic into the step's error.
fn guarded<T>(f: impl FnOnce() -> Result<T, AscendError>) -> Result<T, ServeError> {
    match catch_unwind(AssertUnwindSafe(|| try_run(f))) {
        Ok(Ok(done)) => done.map_err(ServeError::Device),
        Ok(Err(e)) => Err(ServeError::Device(e)),
        Err(panic) => Err(ServeError::Step(panic_message(panic.as_ref()))),
    }
}

/// A panic's message.
fn panic_message(panic: &(dyn Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(text), _) => text.to_string(),
        (_, Some(text)) => text.clone(),
        _ => "a panic without a message".into(),
    }
}

fn host_floats<B: FusedOps, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .expect("float data")
}

/// Logits of the last position of `tokens` by the dense causal path over the whole sequence (no
/// cache): the reference the paged path must agree with.
pub fn reference_logits<B: FusedOps, M: StepModel<B>>(
    model: &M,
    tokens: &[u32],
    device: &B::Device,
) -> Vec<f32> {
    let n = tokens.len();
    let tokens = ints::<B>(tokens.iter().map(|&t| t as i32).collect(), device);
    let logits = model.forward_logits(tokens.reshape([1, n]));
    let v = logits.dims()[2];
    host_floats(logits.narrow(1, n - 1, 1).reshape([v]))
}
