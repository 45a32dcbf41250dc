//! Hugging Face model families on one decoder skeleton.
//!
//! Every family is the same [`Decoder`] (token embedding, pre-norm layers of an attention
//! block and a feed-forward block, final RMS norm, LM head) built from the blocks of
//! [`blocks`]; a family module only reads its `config.json` into a [`DecoderSpec`] (refusing,
//! by name, every option it does not support) and names its tensors:
//!
//! - [`mixtral`]: Mixtral (`model_type` `mixtral`).
//! - [`qwen_moe`]: Qwen2-MoE and Qwen3-MoE (`qwen2_moe`, `qwen3_moe`).
//! - [`deepseek`]: DeepSeek-V2 and DeepSeek-V3 (`deepseek_v2`, `deepseek_v3`).
//!
//! The decoder is a [`StepModel`]: the engine ([`crate::engine::serve::Server`]) serves it
//! through the paged cache, with chunked prefill and captured decode. Split across NPUs
//! ([`parallel`]), each NPU holds a shard: a [`Decoder`] of its part of every tensor, and the
//! shards run the one step the whole decoder runs (`Decoder::step_ranks`).

pub mod blocks;
pub mod config;
pub mod deepseek;
pub mod mixtral;
pub mod parallel;
pub mod prequant;
pub mod qwen_moe;
pub mod weights;

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use burn::module::Module;
use burn::nn::{Embedding, Linear};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, Int, Tensor, TensorData};
use burn_ascend::{AscendDevice, FusedOps};

use crate::engine::serve::{Reload, StepInputs};
use crate::engine::step::{CacheLayout, PagedAttention, StepModel};
use crate::hf::{Checkpoint, CheckpointError};
use crate::moe::train::TrainModel;
use blocks::attention::{Attention, AttentionSpec};
use blocks::ffn::{Ffn, FfnSpec, RouterStats};
use blocks::norm::RmsNorm;
use blocks::quant::Quantize;
use parallel::{Group, Part};
use prequant::CheckedTensors;
use weights::{Cut, Expected, Sink, Source, Tensors};

/// A checkpoint that cannot be loaded (or saved), and why.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// `config.json`'s `model_type` is none of the supported families.
    #[error(
        "config.json: model_type {0:?} is not supported (supported: {list})",
        list = SUPPORTED.join(", ")
    )]
    UnknownModelType(String),
    /// A config option (or value of one) the family's decoder does not implement.
    #[error("{model_type}: config.json option {option} is not supported: {why}")]
    Unsupported {
        /// The family.
        model_type: String,
        /// The option, as config.json names it.
        option: String,
        /// What is not supported about its value.
        why: String,
    },
    /// A config.json that does not describe a model (a field missing or of the wrong type,
    /// sizes that do not fit together).
    #[error("{model_type}: config.json is not valid: {why}")]
    Config {
        /// The family.
        model_type: String,
        /// What is wrong.
        why: String,
    },
    /// The checkpoint's files: unreadable, a tensor missing, unexpected or of another shape.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// A model dtype other than F32, F16 and BF16.
    #[error("model dtype {0:?} is not supported (F32, F16 and BF16 are)")]
    Dtype(DType),
    /// A pre-quantized checkpoint stores a tensor in a way this loader has no exact path for
    /// (or its description does not say how): the tensor (or file) and why.
    #[error("{tensor}: {why}")]
    Quantized {
        /// The tensor, or the file describing the format.
        tensor: String,
        /// What is not read, and why.
        why: String,
    },
    /// `--quantize` asked of a checkpoint already stored int8.
    #[error(
        "quantizing {model} ({asked}) is refused: it is already quantized ({format}); serve it \
         as stored, without quantizing"
    )]
    AlreadyQuantized {
        /// The checkpoint.
        model: String,
        /// Its format.
        format: String,
        /// The quantization asked for.
        asked: Quantize,
    },
    /// The device failed while the weights were uploaded.
    #[error("the device failed while the weights were uploaded: {0}")]
    Device(String),
    /// The weights cannot fit the device's free memory: refused before anything is allocated.
    #[error(
        "the weights of {model} need at least {needed} bytes on {device} ({what}), which has \
         {free} of {total} bytes free"
    )]
    DoesNotFit {
        /// The checkpoint.
        model: String,
        /// The device.
        device: String,
        /// What the bytes are (dtype, quantization).
        what: String,
        /// Bytes the weights take at least.
        needed: u64,
        /// The device's free bytes.
        free: u64,
        /// The device's bytes.
        total: u64,
    },
}

/// The `model_type`s [`load`] knows.
pub const SUPPORTED: &[&str] = &[
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "deepseek_v2",
    "deepseek_v3",
];

/// One decoder layer (config side).
#[derive(Debug, Clone, PartialEq)]
pub struct LayerSpec {
    /// Its attention block.
    pub attention: AttentionSpec,
    /// Its feed-forward block.
    pub ffn: FfnSpec,
}

/// A whole decoder, as a family's config.json describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct DecoderSpec {
    /// config.json's `model_type`.
    pub model_type: String,
    /// Vocabulary.
    pub vocab: usize,
    /// Hidden size.
    pub hidden: usize,
    /// Every RMS norm's epsilon (`rms_norm_eps`).
    pub eps: f64,
    /// The layers, in order.
    pub layers: Vec<LayerSpec>,
    /// The weight of the load-balancing loss in fine-tuning (`router_aux_loss_coef`; 0 when
    /// the family has none).
    pub aux_loss_coef: f64,
}

impl DecoderSpec {
    /// The spec with its experts in the fused layout transformers 5.x can write (see
    /// [`blocks::ffn::MoeNames::fused`]).
    pub fn with_fused_experts(mut self) -> Self {
        for layer in &mut self.layers {
            if let FfnSpec::Sparse(moe) = &mut layer.ffn {
                moe.names.block = "mlp".into();
                moe.names.fused = true;
            }
        }
        self
    }

    /// The tensors of the model, `(name, shape)` as the checkpoint stores them, in order.
    pub fn expected(&self) -> Expected {
        let mut out = Expected::default();
        let h = self.hidden;
        out.tensor("model.embed_tokens.weight".into(), vec![self.vocab, h]);
        for (i, layer) in self.layers.iter().enumerate() {
            let p = format!("model.layers.{i}");
            out.tensor(format!("{p}.input_layernorm.weight"), vec![h]);
            layer.attention.expected(&p, h, &mut out);
            out.tensor(format!("{p}.post_attention_layernorm.weight"), vec![h]);
            layer.ffn.expected(&p, h, &mut out);
        }
        out.tensor("model.norm.weight".into(), vec![h]);
        out.float_linear("lm_head", h, self.vocab, false);
        out
    }
}

/// A pre-norm decoder layer: `x += attention(norm(x))`, then `x += ffn(norm(x))`.
#[derive(Module, Debug)]
pub struct Layer<B: Backend> {
    input_norm: RmsNorm<B>,
    /// The attention block.
    pub attention: Attention<B>,
    post_norm: RmsNorm<B>,
    /// The feed-forward block.
    pub ffn: Ffn<B>,
}

impl<B: FusedOps> Layer<B> {
    /// The layer with its projections and experts quantized (see [`Decoder::quantize`]).
    fn quantize(self, mode: Quantize) -> Self {
        Layer {
            attention: self.attention.quantize(mode, &self.input_norm),
            ffn: self.ffn.quantize(mode),
            ..self
        }
    }
}

/// The decoder every family is: the whole model, or one NPU's shard of a model split across
/// NPUs ([`parallel`]).
#[derive(Module, Debug)]
pub struct Decoder<B: Backend> {
    embed: Embedding<B>,
    /// The layers, in order.
    pub layers: Vec<Layer<B>>,
    norm: RmsNorm<B>,
    head: Linear<B>,
    #[module(skip)]
    spec: DecoderSpec,
    /// How the decoder was quantized for inference, if it was ([`Decoder::quantize`]), or
    /// the int8 mode its pre-quantized checkpoint's layers run in.
    #[module(skip)]
    quantized: Option<Quantize>,
    /// The pre-quantized checkpoint's format and layers, if it was one ([`prequant`]).
    #[module(skip)]
    prequantized: Option<String>,
    /// The part of the model it holds ([`Part::WHOLE`] unless split across NPUs).
    #[module(skip)]
    part: Part,
}

impl<B: FusedOps> Decoder<B> {
    /// The decoder `spec` describes, its weights read from `tensors` (named as
    /// [`DecoderSpec::expected`] names them) and uploaded to `device` in `dtype` one by one; with
    /// `quantize`, each layer is quantized as soon as it is on the device (see
    /// [`Decoder::quantize`]), so the float model is never on the device whole.
    pub fn load(
        spec: &DecoderSpec,
        tensors: &dyn Tensors,
        dtype: DType,
        quantize: Option<Quantize>,
        device: &B::Device,
    ) -> Result<Self, LoadError> {
        Self::load_part(spec, tensors, dtype, quantize, device, Part::WHOLE)
    }

    /// [`Decoder::load`] of a pre-quantized checkpoint whose layers `plan` says how are
    /// stored ([`prequant::plan`]): int8 layers go to the int8 operators as stored, FP8 ones are
    /// dequantized on the device.
    pub fn load_planned(
        spec: &DecoderSpec,
        tensors: &dyn Tensors,
        plan: Option<&prequant::Plan>,
        dtype: DType,
        quantize: Option<Quantize>,
        device: &B::Device,
    ) -> Result<Self, LoadError> {
        let src = Source::<B>::new(tensors, dtype, device).with_plan(plan);
        Self::load_source(spec, &src, quantize, Part::WHOLE)
    }

    /// [`Decoder::load`] of the shard `part` of a model split across NPUs: only the part's
    /// elements of each tensor are read and uploaded (see [`parallel`]).
    pub fn load_part(
        spec: &DecoderSpec,
        tensors: &dyn Tensors,
        dtype: DType,
        quantize: Option<Quantize>,
        device: &B::Device,
        part: Part,
    ) -> Result<Self, LoadError> {
        Self::load_source(
            spec,
            &Source::<B>::new(tensors, dtype, device),
            quantize,
            part,
        )
    }

    /// [`Decoder::load_part`] from `src` (which counts what it reads).
    pub(crate) fn load_source(
        spec: &DecoderSpec,
        src: &Source<B>,
        quantize: Option<Quantize>,
        part: Part,
    ) -> Result<Self, LoadError> {
        let dtype = src.dtype();
        if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
            return Err(LoadError::Dtype(dtype));
        }
        let norm = |name: &str| -> Result<RmsNorm<B>, LoadError> {
            Ok(RmsNorm::new(src.tensor(name)?, spec.eps))
        };
        let layers = spec
            .layers
            .iter()
            .enumerate()
            .map(|(i, layer)| {
                let p = format!("model.layers.{i}");
                let layer = Layer {
                    input_norm: norm(&format!("{p}.input_layernorm.weight"))?,
                    attention: layer.attention.load(&p, src, part)?,
                    post_norm: norm(&format!("{p}.post_attention_layernorm.weight"))?,
                    ffn: layer.ffn.load(&p, src, part)?,
                };
                Ok(match quantize {
                    Some(mode) => layer.quantize(mode),
                    None => layer,
                })
            })
            .collect::<Result<_, LoadError>>()?;
        let (rows, chunk) = part.vocab(spec.vocab);
        let decoder = Self {
            embed: Embedding {
                weight: src.tensor_rows("model.embed_tokens.weight", rows.clone(), chunk)?,
            },
            layers,
            norm: norm("model.norm.weight")?,
            head: src.linear_part(
                "lm_head",
                false,
                Cut::Out {
                    range: rows,
                    width: chunk,
                },
            )?,
            spec: spec.clone(),
            quantized: quantize.or(src.plan().and_then(prequant::Plan::int8_mode)),
            prequantized: src.plan().map(ToString::to_string),
            part,
        };
        src.check_zero_offsets()?;
        Ok(decoder)
    }

    /// The decoder for inference with int8 weights: every layer's attention projections
    /// (GQA's q/k/v/o; MLA's but `kv_b_proj`, which decode absorbs as matrices), dense MLPs,
    /// shared experts and routed experts quantized per output channel on the device. The
    /// embedding, routers, norms and LM head stay float, as vLLM's W8A8 schemes keep them.
    /// Quantized activations need an F16/BF16 model to reach the int8 operators (an f32 model
    /// runs the same arithmetic composed). Training it is refused ([`crate::moe::train::TrainError::Quantized`]).
    pub fn quantize(self, mode: Quantize) -> Self {
        Self {
            layers: self.layers.into_iter().map(|l| l.quantize(mode)).collect(),
            quantized: Some(mode),
            ..self
        }
    }

    /// How it was quantized, if it was (its checkpoint's int8 mode, if it was stored so).
    pub fn quantized(&self) -> Option<Quantize> {
        self.quantized
    }

    /// The pre-quantized checkpoint's format and its layers' storage, if it was one.
    pub fn prequantized(&self) -> Option<&str> {
        self.prequantized.as_deref()
    }

    /// What the decoder is (the whole model's spec, also for a shard).
    pub fn spec(&self) -> &DecoderSpec {
        &self.spec
    }

    /// The part of the model it holds.
    pub fn part(&self) -> Part {
        self.part
    }

    /// The dtype of its weights (and of its cache rows).
    pub fn dtype(&self) -> DType {
        self.head.weight.val().dtype()
    }

    /// Its weights, named and laid out as the checkpoint stores them, in the model's dtype.
    pub fn tensors(&self) -> Vec<(String, TensorData)> {
        let mut out = Sink::default();
        out.tensor("model.embed_tokens.weight".into(), &self.embed.weight);
        for (i, layer) in self.layers.iter().enumerate() {
            let p = format!("model.layers.{i}");
            out.tensor(
                format!("{p}.input_layernorm.weight"),
                &layer.input_norm.weight,
            );
            layer.attention.save(&p, &mut out);
            out.tensor(
                format!("{p}.post_attention_layernorm.weight"),
                &layer.post_norm.weight,
            );
            layer.ffn.save(&p, &mut out);
        }
        out.tensor("model.norm.weight".into(), &self.norm.weight);
        out.linear("lm_head", &self.head);
        out.0
    }

    /// Causal forward pass over whole sequences `tokens [B, S]`: logits `[B, S, V]` and the
    /// load-balancing loss of transformers' `load_balancing_loss_func` (without its
    /// coefficient), over the tokens of every MoE layer together.
    pub fn forward(&self, tokens: Tensor<B, 2, Int>) -> (Tensor<B, 3>, Tensor<B, 1>) {
        let device = tokens.device();
        let (logits, stats) = Self::dense_ranks(&[self], None, vec![tokens]);
        (logits, load_balancing_loss(stats, &device))
    }

    /// The router probabilities `[B * S, E]` of the tokens `[B, S]` in each MoE layer, in
    /// order: what the load-balancing loss averages.
    pub fn router_probs(&self, tokens: Tensor<B, 2, Int>) -> Vec<Tensor<B, 2>> {
        Self::dense_ranks(&[self], None, vec![tokens])
            .1
            .into_iter()
            .map(|s| s.probs())
            .collect()
    }

    /// Causal forward pass of the shards `shards` (one whole decoder with no group) over whole
    /// sequences, `tokens[i] [B, S]` on shard i's device: logits `[B, S, V]` on the first
    /// shard's, and the routing statistics of every MoE layer (a whole decoder's only).
    pub(crate) fn dense_ranks(
        shards: &[&Self],
        group: Option<&Group<B>>,
        tokens: Vec<Tensor<B, 2, Int>>,
    ) -> (Tensor<B, 3>, Vec<RouterStats<B>>) {
        let [b, s] = tokens[0].dims();
        let hidden = shards[0].spec.hidden;
        // f32 whatever the model's dtype: see `crate::moe::model::rope`.
        let positions: Vec<Tensor<B, 1>> = tokens
            .iter()
            .map(|t| {
                Tensor::<B, 1>::from_data(
                    TensorData::new((0..s).map(|p| p as f32).collect::<Vec<_>>(), [s]),
                    (&t.device(), DType::F32),
                )
            })
            .collect();
        let flat = tokens.into_iter().map(|t| t.reshape([b * s])).collect();
        let h = Self::embed_ranks(shards, group, flat);
        let mut stats = Vec::new();
        let mut attend = |_: usize, r: usize, block: &Attention<B>, x: Tensor<B, 2>| {
            block
                .dense(x.reshape([b, s, hidden]), positions[r].clone())
                .reshape([b * s, hidden])
        };
        let (h, ffn) = Self::layers_ranks(shards, group, h, &mut attend, &mut stats);
        let v = shards[0].spec.vocab;
        (
            Self::logits_ranks(shards, group, Self::final_norm(shards, h, ffn)).reshape([b, s, v]),
            stats,
        )
    }

    /// One serving step of the shards (one whole decoder with no group): `x[i]` and
    /// `attention[i]` are shard i's copy of the step's inputs and its paged cache. The logits
    /// `[S, V]` of the sampled rows, on the first shard's device.
    pub(crate) fn step_ranks(
        shards: &[&Self],
        group: Option<&Group<B>>,
        x: &[StepInputs<B>],
        attention: &mut [PagedAttention<'_, B>],
    ) -> Tensor<B, 2> {
        let h = Self::embed_ranks(shards, group, x.iter().map(|x| x.tokens.clone()).collect());
        let mut attend = |layer: usize, r: usize, block: &Attention<B>, normed: Tensor<B, 2>| {
            block.paged(normed, x[r].positions.clone(), layer, &mut attention[r])
        };
        let (h, ffn) = Self::layers_ranks(shards, group, h, &mut attend, &mut Vec::new());
        // Every row normed (one launch with the last residual add), the sampled ones kept.
        let sampled = Self::final_norm(shards, h, ffn)
            .into_iter()
            .zip(x)
            .map(|(h, x)| h.select(0, x.sample_rows.clone()))
            .collect();
        Self::logits_ranks(shards, group, sampled)
    }

    /// The rows `[T, H]` of the tokens `[T]` on each shard. Split by vocabulary, each shard
    /// looks up the tokens its rows hold and gives zero rows for the others; the sum over the
    /// shards is every token's row (one term non-zero: exact).
    fn embed_ranks(
        shards: &[&Self],
        group: Option<&Group<B>>,
        tokens: Vec<Tensor<B, 1, Int>>,
    ) -> Vec<Tensor<B, 2>> {
        let hidden = shards[0].spec.hidden;
        let rows = shards
            .iter()
            .zip(tokens)
            .map(|(shard, tokens)| {
                let t = tokens.dims()[0];
                if shard.part == Part::WHOLE {
                    return shard
                        .embed
                        .forward(tokens.reshape([1, t]))
                        .reshape([t, hidden]);
                }
                let (rows, chunk) = shard.part.vocab(shard.spec.vocab);
                let local = tokens - rows.start as i64;
                let outside = local
                    .clone()
                    .lower_elem(0)
                    .bool_or(local.clone().greater_equal_elem(chunk as i64));
                let ids = local.mask_fill(outside.clone(), 0);
                shard
                    .embed
                    .forward(ids.reshape([1, t]))
                    .reshape([t, hidden])
                    .mask_fill(outside.reshape([t, 1]).expand([t, hidden]), 0.0)
            })
            .collect();
        match group {
            Some(g) => g.sum(rows),
            None => rows,
        }
    }

    /// The layers over each shard's residual stream `h[i] [T, H]` (the same on every shard):
    /// each attention block through `attend(layer, shard, block, normed input)`, which gives
    /// the shard's part of the block's output; the shards' parts summed. The routing statistics
    /// of every MoE layer are added to `stats` when the decoder is whole. Returns the residual
    /// stream before the last layer's feed-forward output and that output (none without
    /// layers): each feed-forward's residual add runs fused with the norm after it, the next
    /// layer's input norm or the final one (one aclnnAddRmsNorm, as vLLM passes the residual).
    fn layers_ranks(
        shards: &[&Self],
        group: Option<&Group<B>>,
        mut h: Vec<Tensor<B, 2>>,
        attend: &mut Attend<'_, B>,
        stats: &mut Vec<RouterStats<B>>,
    ) -> (Vec<Tensor<B, 2>>, Option<Vec<Tensor<B, 2>>>) {
        let sum = |parts: Vec<Tensor<B, 2>>| match group {
            Some(g) => g.sum(parts),
            None => parts,
        };
        let mut ffn_out: Option<Vec<Tensor<B, 2>>> = None;
        for i in 0..shards[0].layers.len() {
            let (inputs, stream): (Vec<_>, Vec<_>) = match ffn_out.take() {
                Some(ys) => h
                    .into_iter()
                    .zip(ys)
                    .zip(shards)
                    .map(|((h, y), shard)| shard.layers[i].input_norm.add_forward(h, y))
                    .unzip(),
                None => h
                    .into_iter()
                    .zip(shards)
                    .map(|(h, shard)| (shard.layers[i].input_norm.forward(h.clone()), h))
                    .unzip(),
            };
            let attended = shards
                .iter()
                .zip(inputs)
                .enumerate()
                .map(|(r, (shard, x))| attend(i, r, &shard.layers[i].attention, x))
                .collect();
            let (normed, residual): (Vec<_>, Vec<_>) = stream
                .into_iter()
                .zip(sum(attended))
                .zip(shards)
                .map(|((h, a), shard)| shard.layers[i].post_norm.add_forward(h, a))
                .unzip();
            let ffn = match group {
                None => {
                    let x = normed.into_iter().next().expect("one shard");
                    let (y, st) = shards[0].layers[i].ffn.forward(x);
                    stats.extend(st);
                    vec![y]
                }
                Some(g) => {
                    let blocks: Vec<&Ffn<B>> = shards.iter().map(|s| &s.layers[i].ffn).collect();
                    g.sum(Ffn::forward_ranks(&blocks, normed, g))
                }
            };
            h = residual;
            ffn_out = Some(ffn);
        }
        (h, ffn_out)
    }

    /// Each shard's final hidden states `h[i] + ffn[i]` (`h[i]` alone without `ffn`) through
    /// the final norm.
    fn final_norm(
        shards: &[&Self],
        h: Vec<Tensor<B, 2>>,
        ffn: Option<Vec<Tensor<B, 2>>>,
    ) -> Vec<Tensor<B, 2>> {
        match ffn {
            Some(ys) => h
                .into_iter()
                .zip(ys)
                .zip(shards)
                .map(|((h, y), shard)| shard.norm.add_forward(h, y).0)
                .collect(),
            None => h
                .into_iter()
                .zip(shards)
                .map(|(h, shard)| shard.norm.forward(h))
                .collect(),
        }
    }

    /// The logits `[R, V]` of each shard's normed final hidden states `[R, H]`, on the first
    /// shard: split by vocabulary, each shard's chunk of columns, all-gathered.
    fn logits_ranks(
        shards: &[&Self],
        group: Option<&Group<B>>,
        normed: Vec<Tensor<B, 2>>,
    ) -> Tensor<B, 2> {
        let mut logits: Vec<Tensor<B, 2>> = shards
            .iter()
            .zip(normed)
            .map(|(shard, x)| shard.head.forward(x))
            .collect();
        match group {
            None => logits.pop().expect("one shard"),
            Some(g) => {
                // Gathered along dim 0: each chunk as `[chunk, R]`, then back.
                let columns = logits.into_iter().map(|l| l.swap_dims(0, 1)).collect();
                let v = shards[0].spec.vocab;
                g.gather(columns)
                    .swap_remove(0)
                    .narrow(0, 0, v)
                    .swap_dims(0, 1)
            }
        }
    }
}

/// A layer's attention on one shard: `(layer, shard, block, normed input [T, H])` to the
/// shard's part of the block's output `[T, H]`.
type Attend<'a, B> = dyn FnMut(usize, usize, &Attention<B>, Tensor<B, 2>) -> Tensor<B, 2> + 'a;

/// transformers' `load_balancing_loss_func`: experts times the sum over experts of the
/// fraction of (token, choice) pairs routed to each and its mean router probability, both
/// over the tokens of all MoE layers together.
fn load_balancing_loss<B: Backend>(stats: Vec<RouterStats<B>>, device: &B::Device) -> Tensor<B, 1> {
    let Some(experts) = stats.first().map(|s| s.routing.experts) else {
        return Tensor::zeros([1], device);
    };
    let stats: Vec<_> = stats.into_iter().map(|s| (s.counts(), s.probs())).collect();
    let tokens: usize = stats.iter().map(|(_, p)| p.dims()[0]).sum();
    let (counts, probs) = stats
        .into_iter()
        .map(|(c, p)| (c, p.sum_dim(0).reshape([experts])))
        .reduce(|(c, p), (c2, p2)| (c + c2, p + p2))
        .expect("one MoE layer at least");
    let n = tokens as f64;
    let counts = counts.float().cast(probs.dtype());
    ((counts / n) * (probs / n)).sum() * experts as f64
}

impl<B: FusedOps> StepModel<B> for Decoder<B> {
    fn vocab(&self) -> usize {
        self.spec.vocab
    }

    fn cache_layout(&self) -> CacheLayout {
        let rows = self.layers[0].attention.cache_rows();
        CacheLayout {
            layers: self.layers.len(),
            query_heads: rows.query_heads,
            kv_heads: rows.kv_heads,
            key_dim: rows.key_dim,
            value_dim: rows.value_dim,
            dtype: self.dtype(),
        }
    }

    fn step(&self, x: &[StepInputs<B>], attention: &mut [PagedAttention<'_, B>]) -> Tensor<B, 2> {
        Self::step_ranks(&[self], None, x, attention)
    }

    fn forward_logits(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        self.forward(tokens).0
    }
}

/// The longest sequence to serve `checkpoint` with: `requested`, which may not exceed the
/// positions it was trained for (`max_position_embeddings`: positions past them are refused,
/// not extrapolated), else those positions capped at `default` (the server's captured decode
/// buffers and a step's key list grow with it).
pub fn serving_max_seq(
    checkpoint: &Checkpoint,
    requested: Option<usize>,
    default: usize,
) -> Result<usize, String> {
    let trained = checkpoint
        .config()
        .get("max_position_embeddings")
        .and_then(|m| m.as_u64())
        .map(|m| m as usize);
    match (requested, trained) {
        (Some(m), Some(t)) if m > t => Err(format!(
            "--max-seq {m} exceeds the {t} positions of {} (max_position_embeddings)",
            checkpoint.dir().display()
        )),
        (Some(m), _) => Ok(m),
        (None, t) => Ok(t.map_or(default, |t| t.min(default))),
    }
}

/// The decoder a config.json describes, by its `model_type`. Sizes past those of
/// [`config`] (`MAX_LAYERS`, `MAX_SIZE`...) are refused by field before anything is built from
/// them.
pub fn spec_of(config: &serde_json::Value) -> Result<DecoderSpec, LoadError> {
    let model_type = config
        .get("model_type")
        .and_then(|t| t.as_str())
        .ok_or_else(|| LoadError::Config {
            model_type: "(unknown)".into(),
            why: "config.json has no model_type string".into(),
        })?;
    let spec = match model_type {
        "mixtral" => mixtral::spec(config),
        "qwen2_moe" => qwen_moe::spec(config, false),
        "qwen3_moe" => qwen_moe::spec(config, true),
        "deepseek_v2" => deepseek::spec(config, false),
        "deepseek_v3" => deepseek::spec(config, true),
        other => Err(LoadError::UnknownModelType(other.into())),
    }?;
    // Each routed expert names tensors: their list is built before any is read.
    let routed: usize = spec
        .layers
        .iter()
        .map(|l| match &l.ffn {
            FfnSpec::Sparse(m) => m.router.experts(),
            FfnSpec::Dense(_) => 0,
        })
        .sum();
    if routed > config::MAX_ROUTED_EXPERTS {
        return Err(LoadError::Config {
            model_type: spec.model_type,
            why: format!(
                "{} layers of routed experts make {routed} experts, more than {}, past any \
                 published model",
                spec.layers.len(),
                config::MAX_ROUTED_EXPERTS
            ),
        });
    }
    Ok(spec)
}

impl<B: AutodiffBackend + FusedOps> TrainModel<B> for Decoder<B> {
    fn forward_train(&self, tokens: Tensor<B, 2, Int>) -> (Tensor<B, 3>, Tensor<B, 1>) {
        self.forward(tokens)
    }

    fn quantized(&self) -> Option<Quantize> {
        self.quantized
    }
}

/// A checkpoint loaded: the decoder, and the checkpoint it came from (its config.json, its
/// tokenizer files, what [`save`] writes beside the weights).
pub struct LoadedModel<B: Backend> {
    /// The decoder.
    pub model: Decoder<B>,
    /// The checkpoint.
    pub checkpoint: Checkpoint,
}

/// How a checkpoint is loaded. A bare [`DType`] converts into the options that serve in it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// The dtype the weights are served in (F32, F16 or BF16); `None`: the checkpoint's own
    /// ([`serving_dtype`]).
    pub dtype: Option<DType>,
    /// Quantize each layer as it is loaded (see [`Decoder::load`]).
    pub quantize: Option<Quantize>,
}

impl From<DType> for LoadOptions {
    fn from(dtype: DType) -> Self {
        Self {
            dtype: Some(dtype),
            quantize: None,
        }
    }
}

/// The dtype a checkpoint is served in when none is asked for: the one its `config.json`
/// names (as vLLM's `--dtype auto`), else its first float tensor's, else F32.
pub fn serving_dtype(checkpoint: &Checkpoint) -> Result<DType, LoadError> {
    if let Some(dtype) = checkpoint.dtype()? {
        return Ok(dtype);
    }
    Ok(checkpoint
        .names()
        .filter_map(|n| checkpoint.info(n))
        .map(|i| i.dtype)
        .find(|d| matches!(d, DType::F32 | DType::F16 | DType::BF16))
        .unwrap_or(DType::F32))
}

impl LoadOptions {
    /// The dtype named on a command line: `auto` (the checkpoint's own: `None`), `f32`, `f16`
    /// or `bf16` (also as torch names them: `float32`, `float16`, `bfloat16`).
    pub fn parse_dtype(name: &str) -> Result<Option<DType>, String> {
        match name {
            "auto" => Ok(None),
            "f32" | "float32" => Ok(Some(DType::F32)),
            "f16" | "float16" => Ok(Some(DType::F16)),
            "bf16" | "bfloat16" => Ok(Some(DType::BF16)),
            other => Err(format!(
                "dtype {other:?} is not auto, f32, f16 or bf16 (float32, float16, bfloat16)"
            )),
        }
    }
}

/// How a checkpoint was loaded ([`load_to_serve`]).
#[derive(Debug, Clone, PartialEq)]
pub struct LoadReport {
    /// The dtype the weights are served in.
    pub dtype: DType,
    /// How the layers were quantized as they were loaded, if they were.
    pub quantize: Option<Quantize>,
    /// The pre-quantized checkpoint's format and its layers' storage, if it was one.
    pub prequantized: Option<String>,
    /// Bytes of tensor data read from the checkpoint's files.
    pub read_bytes: u64,
    /// Seconds from the first read to the last weight on the device.
    pub secs: f64,
}

impl LoadReport {
    /// Bytes read per second, in GB/s.
    pub fn gb_per_s(&self) -> f64 {
        self.read_bytes as f64 / self.secs.max(1e-9) / 1e9
    }
}

/// `BF16, quantized W8A8 at 0.35 GB/s (2.49 GB in 7.1 s)`: what both programs' logs say.
impl std::fmt::Display for LoadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.dtype)?;
        if let Some(q) = self.quantize {
            write!(f, ", quantized {q}")?;
        }
        if let Some(p) = &self.prequantized {
            write!(f, ", pre-quantized {p}")?;
        }
        write!(
            f,
            " at {:.2} GB/s ({:.2} GB in {:.1} s)",
            self.gb_per_s(),
            self.read_bytes as f64 / 1e9,
            self.secs
        )
    }
}

/// A checkpoint's decoder loaded to serve ([`load_to_serve`]; split across NPUs:
/// [`parallel::load_parallel_to_serve`]).
pub struct ToServe<B: FusedOps, M = Decoder<B>> {
    /// The decoder.
    pub model: M,
    /// What [`Server::with_reload`] needs to load it again after a device reset: the same
    /// files, kept mapped (no copy of the weights on the host).
    ///
    /// [`Server::with_reload`]: crate::engine::serve::Server::with_reload
    pub reload: Reload<B, M>,
    /// How the load went.
    pub report: LoadReport,
}

/// Loads `checkpoint` to serve it (see [`ToServe`]), the load timed to the device's last copy.
pub fn load_to_serve<B: FusedOps>(
    checkpoint: Arc<Checkpoint>,
    options: impl Into<LoadOptions>,
    device: &B::Device,
) -> Result<ToServe<B>, LoadError> {
    let options = options.into();
    let start = Instant::now();
    let checked = checked_spec(&checkpoint)?;
    let model = load_checked::<B>(&checkpoint, &checked, options, device)?;
    B::sync(device).map_err(|e| LoadError::Device(format!("{e:?}")))?;
    let report = LoadReport {
        dtype: model.dtype(),
        quantize: options.quantize,
        prequantized: model.prequantized().map(str::to_string),
        read_bytes: stored_bytes(&checkpoint, &checked.tensors),
        secs: start.elapsed().as_secs_f64(),
    };
    let reload: Reload<B, Decoder<B>> =
        Box::new(move |device| load_from(&checkpoint, options, device).map_err(|e| e.to_string()));
    Ok(ToServe {
        model,
        reload,
        report,
    })
}

/// Bytes the checked `tensors` take in `checkpoint`'s files.
fn stored_bytes(checkpoint: &Checkpoint, tensors: &CheckedTensors) -> u64 {
    tensors
        .iter()
        .filter_map(|(name, _, _)| checkpoint.bytes(name).ok())
        .map(|(_, bytes)| bytes.len() as u64)
        .sum()
}

/// Loads the checkpoint directory `dir` (config.json, safetensors weights) as the family its
/// `model_type` names, each weight going from the file's map to `device` as it is read (see
/// [`Decoder::load`]). Everything is checked before anything is allocated on the device: the
/// config's options, every tensor's name and shape (none missing, none extra), and that the
/// weights can fit the device's free memory.
pub fn load<B: FusedOps>(
    dir: impl AsRef<Path>,
    options: impl Into<LoadOptions>,
    device: &B::Device,
) -> Result<LoadedModel<B>, LoadError> {
    let checkpoint = Checkpoint::open(dir)?;
    Ok(LoadedModel {
        model: load_from(&checkpoint, options, device)?,
        checkpoint,
    })
}

/// [`load`] from an opened checkpoint.
pub fn load_from<B: FusedOps>(
    checkpoint: &Checkpoint,
    options: impl Into<LoadOptions>,
    device: &B::Device,
) -> Result<Decoder<B>, LoadError> {
    load_checked(
        checkpoint,
        &checked_spec(checkpoint)?,
        options.into(),
        device,
    )
}

/// [`load_from`] of a checkpoint already checked.
fn load_checked<B: FusedOps>(
    checkpoint: &Checkpoint,
    checked: &Checked,
    options: LoadOptions,
    device: &B::Device,
) -> Result<Decoder<B>, LoadError> {
    let dtype = options_dtype(checkpoint, options)?;
    if let (Some(asked), Some(plan)) = (options.quantize, &checked.plan) {
        if plan.int8_mode().is_some() {
            return Err(LoadError::AlreadyQuantized {
                model: checkpoint.dir().display().to_string(),
                format: plan.to_string(),
                asked,
            });
        }
    }
    check_fits::<B>(
        checkpoint,
        checked,
        dtype,
        options.quantize,
        device,
        Part::WHOLE,
    )?;
    Decoder::load_planned(
        &checked.spec,
        checkpoint,
        checked.plan.as_ref(),
        dtype,
        options.quantize,
        device,
    )
}

/// The dtype `options` serve `checkpoint` in: theirs, else the checkpoint's own.
fn options_dtype(checkpoint: &Checkpoint, options: LoadOptions) -> Result<DType, LoadError> {
    match options.dtype {
        Some(dtype) => Ok(dtype),
        None => serving_dtype(checkpoint),
    }
}

/// A checkpoint's decoder, checked against its files.
struct Checked {
    /// The decoder the config describes.
    spec: DecoderSpec,
    /// The pre-quantization format, if any.
    plan: Option<prequant::Plan>,
    /// The tensors, with their names, shapes and element types checked.
    tensors: CheckedTensors,
}

/// The decoder the checkpoint describes, its pre-quantization format (if any) and its tensors,
/// checked: names, shapes and element types.
fn checked_spec(checkpoint: &Checkpoint) -> Result<Checked, LoadError> {
    let mut spec = spec_of(checkpoint.config())?;
    if checkpoint
        .names()
        .any(|n| n.ends_with(".experts.gate_up_proj"))
    {
        spec = spec.with_fused_experts();
    }
    // Older checkpoints carry rope's inverse frequencies, which the model computes.
    let not_the_decoder = deepseek::ignored(checkpoint.config());
    let (plan, tensors) = prequant::plan(checkpoint, &spec.expected())?;
    checkpoint.check(&tensors, |name| {
        name.ends_with(".self_attn.rotary_emb.inv_freq") || not_the_decoder(name)
    })?;
    Ok(Checked {
        spec,
        plan,
        tensors,
    })
}

/// Refuses weights that cannot fit an NPU's free memory, before anything is allocated: the
/// `part` of them the NPU holds. The bytes counted are a lower bound (quantized: every matrix of
/// a layer at one byte an element, scales not counted; stored int8: the int8 weights at one
/// byte, scales not counted; a shard: its share of every tensor, the fewest routed experts a
/// rank holds), so a model that fits is never refused; one that only nearly fits fails at its
/// allocation with the device's out-of-memory error.
fn check_fits<B: FusedOps>(
    checkpoint: &Checkpoint,
    checked: &Checked,
    dtype: DType,
    quantize: Option<Quantize>,
    device: &B::Device,
    part: Part,
) -> Result<(), LoadError> {
    use crate::hf::Element;
    let Some(npu) = (device as &dyn std::any::Any).downcast_ref::<AscendDevice>() else {
        return Ok(());
    };
    let experts = checked
        .spec
        .layers
        .iter()
        .find_map(|l| match &l.ffn {
            FfnSpec::Sparse(m) => Some(m.router.experts()),
            FfnSpec::Dense(_) => None,
        })
        .unwrap_or(1);
    let needed: u64 = checked
        .tensors
        .iter()
        .map(|(name, shape, element)| {
            let n = shape.iter().product::<usize>() as u64;
            let matrix_in_layer = name.starts_with("model.layers.") && shape.len() >= 2;
            let n = match (element, quantize) {
                (Element::Exactly(DType::I8), _) => n,
                // pack-quantized: four int8 to an int32 word.
                (Element::Exactly(DType::I32), _) if shape.len() == 2 => n * 4,
                (Element::Exactly(_) | Element::FloatOr(_), _) => 0,
                (_, Some(_)) if matrix_in_layer => n,
                _ => n * dtype.size() as u64,
            };
            // Routed experts (per expert or fused, never the shared ones) by the fewest a rank
            // holds; every other tensor by at least an even share.
            if name.contains(".experts.") {
                n * (experts / part.ranks) as u64 / experts as u64
            } else {
                n / part.ranks as u64
            }
        })
        .sum();
    let (free, total) = burn_ascend::runtime::device::memory_info(&(*npu).into())
        .map_err(|e| LoadError::Device(format!("cannot read {npu}'s free memory: {e}")))?;
    if needed > free as u64 {
        let split = if part.ranks > 1 {
            format!(", its part as rank {} of {}", part.rank, part.ranks)
        } else {
            String::new()
        };
        return Err(LoadError::DoesNotFit {
            model: checkpoint.dir().display().to_string(),
            device: npu.to_string(),
            what: match quantize {
                Some(q) => format!("{dtype:?}, layers quantized {q}{split}"),
                None => format!("{dtype:?}{split}"),
            },
            needed,
            free: free as u64,
            total: total as u64,
        });
    }
    Ok(())
}

/// Saves `model` into `dir` in the Hugging Face layout of `from` (the checkpoint it was loaded
/// from): the same tensor names and shapes (the experts fused when they were), in the model's dtype (config.json's `dtype` says
/// which), sharded when the weights exceed `max_shard_bytes`, with `from`'s tokenizer and
/// generation files.
pub fn save<B: FusedOps>(
    model: &Decoder<B>,
    dir: impl AsRef<Path>,
    from: &Checkpoint,
    max_shard_bytes: Option<usize>,
) -> Result<(), LoadError> {
    if model.part != Part::WHOLE {
        return Err(LoadError::Config {
            model_type: model.spec.model_type.clone(),
            why: format!(
                "saving one NPU's shard (rank {} of {}): save a whole decoder",
                model.part.rank, model.part.ranks
            ),
        });
    }
    let mut config = from.config().clone();
    let dtype = match model.dtype() {
        DType::F32 => "float32",
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        other => return Err(LoadError::Dtype(other)),
    };
    if let Some(fields) = config.as_object_mut() {
        // The weights are written float (a pre-quantized layer as the weight it computes with).
        fields.remove("quantization_config");
        // transformers 4.56 renamed torch_dtype to dtype; keep whichever the file has.
        for key in ["dtype", "torch_dtype"] {
            if fields.contains_key(key) {
                fields.insert(key.into(), dtype.into());
            }
        }
    }
    crate::hf::save(
        dir.as_ref(),
        &config,
        model.tensors(),
        Some(from),
        max_shard_bytes,
    )?;
    Ok(())
}
