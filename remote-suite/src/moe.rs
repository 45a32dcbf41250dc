//! The example's MoE decoder (burn-ascend-suite's `moe::model::MoeDecoder`, trained and served
//! in process with Burn 0.21) written as a Burn 0.22 program: plain Burn ops on a `Device` and
//! burn-ascend-client's fused ops (layer norm, MoE gather/scatter, grouped matmul, paged decode
//! attention), no backend type and no Ascend type. On a burn-ascend-server device it decodes
//! greedily, token for token as the in-process server does.
//!
//! The model, as the Burn 0.21 one computes it (`src/moe/model.rs`):
//! - embedding rows of the tokens;
//! - per block: `x + o(attention(layer_norm(x)))`, grouped-query attention with rotary
//!   positions in NeoX's form (the halves of each head rotated, frequencies
//!   `theta^(-2i/D)`, angles in f32), scale `D^-0.5`; then `x + moe(layer_norm(x))`: router
//!   softmax, top-k, the k weights renormalised to sum 1, the rows gathered by expert
//!   (`moe_gather` in the expert-sorted order), the experts' SwiGLU `down(silu(gate x) * up x)`
//!   by grouped matmuls, and the results scattered back weighted (`moe_scatter`);
//! - final layer norm, then the LM head.
//!
//! Decoding ([`MoeDecoder::generate`]): the prompt in one pass with causal attention over its
//! own keys, then one token per step through `decode_attention` over a paged KV cache kept on
//! the device ([`PagedCache`]). The chosen token is the argmax on the device; the program reads
//! back only its id (and, when asked, the logits it was chosen from).
//!
//! Weights come from a safetensors file whose names, shapes and metadata are defined once here
//! ([`Weights::build`], [`MoeSizes`]): the Burn 0.21 side writes it with [`save_weights`] from
//! its model's record, this program reads it with [`load_weights`].

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use burn::tensor::activation::{silu, softmax};
use burn::tensor::{DType, Device, IndexingUpdateOp, Int, Tensor, TensorData};
use burn_ascend_client::{self as fused, DecodeAttentionOptions};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

/// A weights file that cannot be read or written, or a request the decoder cannot serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoeError(pub String);

impl fmt::Display for MoeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for MoeError {}

fn fail<T>(message: String) -> Result<T, MoeError> {
    Err(MoeError(message))
}

/// The model's sizes (the Burn 0.21 `MoeConfig`'s, less what only training and serving use),
/// stored in the weights file's metadata under their field names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoeSizes {
    /// Vocabulary.
    pub vocab: usize,
    /// Hidden size.
    pub hidden: usize,
    /// Transformer blocks.
    pub layers: usize,
    /// Query heads.
    pub q_heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Experts per MoE layer.
    pub experts: usize,
    /// Experts each token is routed to.
    pub top_k: usize,
    /// Hidden size of each expert's SwiGLU.
    pub expert_hidden: usize,
    /// Rotary embedding base.
    pub rope_theta: f64,
    /// Layer-norm epsilon.
    pub eps: f64,
}

impl MoeSizes {
    /// Dimension of each attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden / self.q_heads
    }

    fn check(&self) -> Result<(), MoeError> {
        let counts = [
            self.vocab,
            self.hidden,
            self.layers,
            self.q_heads,
            self.kv_heads,
            self.experts,
            self.top_k,
            self.expert_hidden,
        ];
        let fits = counts.iter().all(|&n| n > 0)
            && self.hidden.is_multiple_of(self.q_heads)
            && self.q_heads.is_multiple_of(self.kv_heads)
            && self.head_dim().is_multiple_of(2)
            && self.top_k <= self.experts
            && self.rope_theta.is_finite()
            && self.rope_theta > 0.0
            && self.eps.is_finite()
            && self.eps >= 0.0;
        if fits {
            Ok(())
        } else {
            fail(format!("sizes that build no model: {self:?}"))
        }
    }

    fn to_metadata(self) -> HashMap<String, String> {
        let counts = [
            ("vocab", self.vocab),
            ("hidden", self.hidden),
            ("layers", self.layers),
            ("q_heads", self.q_heads),
            ("kv_heads", self.kv_heads),
            ("experts", self.experts),
            ("top_k", self.top_k),
            ("expert_hidden", self.expert_hidden),
        ];
        // f64's `Display` prints the shortest text that parses back to the same value.
        counts
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .chain([
                ("rope_theta".to_string(), self.rope_theta.to_string()),
                ("eps".to_string(), self.eps.to_string()),
            ])
            .collect()
    }

    fn from_metadata(meta: &HashMap<String, String>) -> Result<Self, MoeError> {
        fn field<T: std::str::FromStr>(
            meta: &HashMap<String, String>,
            key: &str,
        ) -> Result<T, MoeError> {
            let text = meta
                .get(key)
                .ok_or_else(|| MoeError(format!("the metadata has no {key:?}")))?;
            text.parse()
                .map_err(|_| MoeError(format!("the metadata's {key} {text:?} is not a number")))
        }
        let sizes = Self {
            vocab: field(meta, "vocab")?,
            hidden: field(meta, "hidden")?,
            layers: field(meta, "layers")?,
            q_heads: field(meta, "q_heads")?,
            kv_heads: field(meta, "kv_heads")?,
            experts: field(meta, "experts")?,
            top_k: field(meta, "top_k")?,
            expert_hidden: field(meta, "expert_hidden")?,
            rope_theta: field(meta, "rope_theta")?,
            eps: field(meta, "eps")?,
        };
        sizes.check()?;
        Ok(sizes)
    }
}

/// A layer norm's scale and shift, `[hidden]` each.
#[derive(Debug, Clone, PartialEq)]
pub struct NormWeights<T> {
    /// Scale.
    pub gamma: T,
    /// Shift.
    pub beta: T,
}

/// One block's weights. Projections are `[in, out]` (Burn's `Linear` layout: `y = x W`).
#[derive(Debug, Clone, PartialEq)]
pub struct BlockWeights<T> {
    /// Norm before attention.
    pub attn_norm: NormWeights<T>,
    /// `[H, HQ * D]`
    pub q: T,
    /// `[H, HKV * D]`
    pub k: T,
    /// `[H, HKV * D]`
    pub v: T,
    /// `[HQ * D, H]`
    pub o: T,
    /// Norm before the experts.
    pub ffn_norm: NormWeights<T>,
    /// `[H, E]`
    pub router: T,
    /// `[E, H, F]`
    pub gate: T,
    /// `[E, H, F]`
    pub up: T,
    /// `[E, F, H]`
    pub down: T,
}

/// The model's weights, `T` per tensor: the file's layout.
#[derive(Debug, Clone, PartialEq)]
pub struct Weights<T> {
    /// `[V, H]`
    pub embed: T,
    /// The blocks, in order.
    pub blocks: Vec<BlockWeights<T>>,
    /// Final norm.
    pub norm: NormWeights<T>,
    /// `[H, V]`
    pub head: T,
}

impl<T> Weights<T> {
    /// Every tensor of the layout made by `f(name, shape)`: the one place the file's names
    /// and shapes are defined. Names follow the Burn 0.21 module's fields: `embed`,
    /// `blocks.{i}.attn_norm.{gamma,beta}`, `blocks.{i}.attn.{q,k,v,o}`,
    /// `blocks.{i}.ffn_norm.{gamma,beta}`, `blocks.{i}.moe.router`,
    /// `blocks.{i}.moe.experts.{gate,up,down}`, `norm.{gamma,beta}`, `head`.
    pub fn build(sizes: &MoeSizes, mut f: impl FnMut(String, Vec<usize>) -> T) -> Self {
        let (h, v, e, ff) = (
            sizes.hidden,
            sizes.vocab,
            sizes.experts,
            sizes.expert_hidden,
        );
        let (q, kv) = (
            sizes.q_heads * sizes.head_dim(),
            sizes.kv_heads * sizes.head_dim(),
        );
        let norm = |f: &mut dyn FnMut(String, Vec<usize>) -> T, prefix: &str| NormWeights {
            gamma: f(format!("{prefix}.gamma"), vec![h]),
            beta: f(format!("{prefix}.beta"), vec![h]),
        };
        let embed = f("embed".into(), vec![v, h]);
        let blocks = (0..sizes.layers)
            .map(|i| {
                let b = format!("blocks.{i}");
                BlockWeights {
                    attn_norm: norm(&mut f, &format!("{b}.attn_norm")),
                    q: f(format!("{b}.attn.q"), vec![h, q]),
                    k: f(format!("{b}.attn.k"), vec![h, kv]),
                    v: f(format!("{b}.attn.v"), vec![h, kv]),
                    o: f(format!("{b}.attn.o"), vec![q, h]),
                    ffn_norm: norm(&mut f, &format!("{b}.ffn_norm")),
                    router: f(format!("{b}.moe.router"), vec![h, e]),
                    gate: f(format!("{b}.moe.experts.gate"), vec![e, h, ff]),
                    up: f(format!("{b}.moe.experts.up"), vec![e, h, ff]),
                    down: f(format!("{b}.moe.experts.down"), vec![e, ff, h]),
                }
            })
            .collect();
        Self {
            embed,
            blocks,
            norm: norm(&mut f, "norm"),
            head: f("head".into(), vec![h, v]),
        }
    }

    /// The tensors in one fixed order ([`save_weights`] flattens the layout of
    /// [`Weights::build`] the same way to pair each tensor with its name).
    pub fn flatten(self) -> Vec<T> {
        let norm = |n: NormWeights<T>| [n.gamma, n.beta];
        let mut all = vec![self.embed];
        for b in self.blocks {
            all.extend(norm(b.attn_norm));
            all.extend([b.q, b.k, b.v, b.o]);
            all.extend(norm(b.ffn_norm));
            all.extend([b.router, b.gate, b.up, b.down]);
        }
        all.extend(norm(self.norm));
        all.push(self.head);
        all
    }
}

/// Writes `weights` (f32, in the layout of [`Weights::build`]) and `sizes` (as metadata) to
/// the safetensors file `path`; a tensor of another shape or dtype is an error naming it.
pub fn save_weights(
    path: &Path,
    sizes: &MoeSizes,
    weights: Weights<TensorData>,
) -> Result<(), MoeError> {
    sizes.check()?;
    let layout = Weights::build(sizes, |name, shape| (name, shape)).flatten();
    let tensors = weights.flatten();
    if tensors.len() != layout.len() {
        return fail(format!(
            "{} tensors for a layout of {} ({} blocks)",
            tensors.len(),
            layout.len(),
            sizes.layers
        ));
    }
    let mut bytes = Vec::with_capacity(layout.len());
    for ((name, shape), data) in layout.iter().zip(&tensors) {
        if data.shape().as_slice() != shape.as_slice() || data.dtype() != DType::F32 {
            return fail(format!(
                "{name}: the layout has f32 {shape:?}, the model gave {:?} {:?}",
                data.dtype(),
                data.shape().as_slice()
            ));
        }
        let values = data.try_to_vec::<f32>().expect("f32 data");
        bytes.push(
            values
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect::<Vec<u8>>(),
        );
    }
    let views = layout
        .iter()
        .zip(&bytes)
        .map(|((name, shape), b)| {
            let view = TensorView::new(Dtype::F32, shape.clone(), b).expect("sizes checked");
            (name.as_str(), view)
        })
        .collect::<Vec<_>>();
    safetensors::serialize_to_file(views, Some(sizes.to_metadata()), path)
        .map_err(|e| MoeError(format!("writing {}: {e}", path.display())))
}

/// Reads the sizes and weights [`save_weights`] wrote to `path`: every tensor of the layout,
/// f32 of its shape (a missing or misshapen one is an error naming it).
pub fn load_weights(path: &Path) -> Result<(MoeSizes, Weights<TensorData>), MoeError> {
    let bytes =
        std::fs::read(path).map_err(|e| MoeError(format!("reading {}: {e}", path.display())))?;
    let not_safetensors =
        |e| MoeError(format!("{} is not a safetensors file: {e}", path.display()));
    let (_, meta) = SafeTensors::read_metadata(&bytes).map_err(not_safetensors)?;
    let sizes = match meta.metadata() {
        Some(m) => MoeSizes::from_metadata(m)?,
        None => return fail(format!("{} has no metadata (the sizes)", path.display())),
    };
    let file = SafeTensors::deserialize(&bytes).map_err(not_safetensors)?;
    let mut error = None;
    let weights = Weights::build(&sizes, |name, shape| {
        let read = file
            .tensor(&name)
            .map_err(|e| format!("{name}: {e}"))
            .and_then(|t| {
                if t.dtype() != Dtype::F32 || t.shape() != shape.as_slice() {
                    return Err(format!(
                        "{name}: the layout has F32 {shape:?}, the file {:?} {:?}",
                        t.dtype(),
                        t.shape()
                    ));
                }
                let values = t
                    .data()
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect::<Vec<f32>>();
                Ok(TensorData::new(values, shape))
            });
        read.unwrap_or_else(|e| {
            error.get_or_insert(e);
            TensorData::new(Vec::<f32>::new(), [0])
        })
    });
    match error {
        Some(e) => fail(format!("{}: {e}", path.display())),
        None => Ok((sizes, weights)),
    }
}

/// A layer norm on the device.
#[derive(Debug, Clone)]
struct Norm {
    gamma: Tensor<1>,
    beta: Tensor<1>,
}

impl Norm {
    fn new(w: NormWeights<TensorData>, device: &Device) -> Self {
        Self {
            gamma: Tensor::from_data(w.gamma, device),
            beta: Tensor::from_data(w.beta, device),
        }
    }

    fn forward(&self, x: Tensor<2>, eps: f64) -> Tensor<2> {
        fused::layer_norm(x, self.gamma.clone(), self.beta.clone(), eps)
    }
}

/// One block's weights on the device.
#[derive(Debug, Clone)]
struct Block {
    attn_norm: Norm,
    q: Tensor<2>,
    k: Tensor<2>,
    v: Tensor<2>,
    o: Tensor<2>,
    ffn_norm: Norm,
    router: Tensor<2>,
    gate: Tensor<3>,
    up: Tensor<3>,
    down: Tensor<3>,
}

/// Splits of a token's cached keys in decode attention, at most (one split per key when there
/// are fewer keys).
pub const MAX_KV_SPLITS: usize = 4;

/// The paged KV cache of one sequence: per layer, keys and values `[slots, HKV, D]` on the
/// device, `pages` pages of `page_size` slots, and the sequence's block table (page of each
/// run of `page_size` positions) as an int32 tensor. The pages are handed out last first, so
/// a position's slot is not the position itself and a wrong block table would show.
pub struct PagedCache {
    page_size: usize,
    block_table: Tensor<1, Int>,
    keys: Vec<Tensor<3>>,
    values: Vec<Tensor<3>>,
}

impl PagedCache {
    /// An empty cache of `pages` pages of `page_size` slots for `sizes`' model on `device`.
    pub fn new(sizes: &MoeSizes, pages: usize, page_size: usize, device: &Device) -> Self {
        let table: Vec<i32> = (0..pages).rev().map(|p| p as i32).collect();
        let shape = [pages * page_size, sizes.kv_heads, sizes.head_dim()];
        Self {
            page_size,
            block_table: Tensor::from_data(TensorData::new(table, [pages]), device),
            keys: vec![Tensor::zeros(shape, device); sizes.layers],
            values: vec![Tensor::zeros(shape, device); sizes.layers],
        }
    }

    /// The slots `[len]` (int32) of positions `start..start + len`, computed on the device
    /// from the block table: `table[p / page_size] * page_size + p % page_size`.
    fn slots(&self, start: usize, len: usize) -> Tensor<1, Int> {
        let device = self.block_table.device();
        let positions: Vec<i32> = (start..start + len).map(|p| p as i32).collect();
        let positions = Tensor::<1, Int>::from_data(TensorData::new(positions, [len]), &device);
        let size = self.page_size as i64;
        let pages = self
            .block_table
            .clone()
            .select(0, positions.clone().div_scalar(size));
        (pages.mul_scalar(size) + positions.remainder_scalar(size)).cast(DType::I32)
    }

    /// Writes the keys and values `[T, HKV, D]` of layer `layer` at `slots [T]`.
    fn write(&mut self, layer: usize, slots: Tensor<1, Int>, k: Tensor<3>, v: Tensor<3>) {
        let assign = |cache: &Tensor<3>, rows| {
            cache
                .clone()
                .select_assign(0, slots.clone(), rows, IndexingUpdateOp::Assign)
        };
        self.keys[layer] = assign(&self.keys[layer], k);
        self.values[layer] = assign(&self.values[layer], v);
    }
}

/// What [`MoeDecoder::generate`] produced for one prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// The generated tokens.
    pub tokens: Vec<u32>,
    /// The logits each token was chosen from (`[vocab]` each), when asked for.
    pub logits: Vec<Vec<f32>>,
}

/// The decoder, its weights on a device.
#[derive(Debug, Clone)]
pub struct MoeDecoder {
    sizes: MoeSizes,
    embed: Tensor<2>,
    blocks: Vec<Block>,
    norm: Norm,
    head: Tensor<2>,
}

impl MoeDecoder {
    /// The decoder with `weights` (the layout of [`Weights::build`]) uploaded to `device`.
    pub fn new(sizes: MoeSizes, weights: Weights<TensorData>, device: &Device) -> Self {
        let up2 = |t| Tensor::<2>::from_data(t, device);
        let up3 = |t| Tensor::<3>::from_data(t, device);
        Self {
            sizes,
            embed: up2(weights.embed),
            blocks: weights
                .blocks
                .into_iter()
                .map(|b| Block {
                    attn_norm: Norm::new(b.attn_norm, device),
                    q: up2(b.q),
                    k: up2(b.k),
                    v: up2(b.v),
                    o: up2(b.o),
                    ffn_norm: Norm::new(b.ffn_norm, device),
                    router: up2(b.router),
                    gate: up3(b.gate),
                    up: up3(b.up),
                    down: up3(b.down),
                })
                .collect(),
            norm: Norm::new(weights.norm, device),
            head: up2(weights.head),
        }
    }

    /// The decoder of the weights file `path` ([`load_weights`]) on `device`.
    pub fn load(path: &Path, device: &Device) -> Result<Self, MoeError> {
        let (sizes, weights) = load_weights(path)?;
        Ok(Self::new(sizes, weights, device))
    }

    /// The model's sizes.
    pub fn sizes(&self) -> &MoeSizes {
        &self.sizes
    }

    /// Greedy decoding of `new_tokens` tokens after `prompt`, with a fresh paged cache of
    /// `pages` pages of `page_size` slots: the prompt in one causal pass, then one
    /// `decode_attention` step per token. With `record_logits`, also reads back the logits
    /// each token was chosen from.
    pub fn generate(
        &self,
        prompt: &[u32],
        new_tokens: usize,
        (pages, page_size): (usize, usize),
        record_logits: bool,
    ) -> Result<Generation, MoeError> {
        let total = prompt.len() + new_tokens;
        if prompt.is_empty() || new_tokens == 0 {
            return fail(format!(
                "a prompt of {} tokens and {new_tokens} new tokens: both must be at least 1",
                prompt.len()
            ));
        }
        if total > pages * page_size {
            return fail(format!(
                "{total} positions (prompt {} + {new_tokens} new) exceed the cache's {} \
                 ({pages} pages of {page_size} slots)",
                prompt.len(),
                pages * page_size
            ));
        }
        if let Some(bad) = prompt.iter().find(|&&t| t as usize >= self.sizes.vocab) {
            return fail(format!(
                "token {bad} is outside the vocabulary of {}",
                self.sizes.vocab
            ));
        }
        let device = self.embed.device();
        let mut cache = PagedCache::new(&self.sizes, pages, page_size, &device);
        let ids: Vec<i32> = prompt.iter().map(|&t| t as i32).collect();
        let tokens = Tensor::<1, Int>::from_data(TensorData::new(ids, [prompt.len()]), &device);
        let mut logits = self.prefill(tokens, &mut cache);
        let mut out = Generation {
            tokens: Vec::with_capacity(new_tokens),
            logits: Vec::new(),
        };
        for step in 0..new_tokens {
            let next = logits.clone().argmax(1).reshape([1]);
            // The user's own transfers: the chosen id, and the logits when asked for.
            let id = next
                .clone()
                .into_data()
                .convert::<i64>()
                .try_to_vec::<i64>();
            out.tokens.push(id.expect("an int tensor")[0] as u32);
            if record_logits {
                let row = logits
                    .clone()
                    .into_data()
                    .convert::<f32>()
                    .try_to_vec::<f32>();
                out.logits.push(row.expect("a float tensor"));
            }
            if step + 1 < new_tokens {
                logits = self.decode(next, prompt.len() + step, &mut cache);
            }
        }
        Ok(out)
    }

    /// The prompt `tokens [S]` at positions `0..S` through the model, its keys and values
    /// written to `cache`: the logits `[1, V]` of its last position.
    pub fn prefill(&self, tokens: Tensor<1, Int>, cache: &mut PagedCache) -> Tensor<2> {
        let s = tokens.dims()[0];
        let slots = cache.slots(0, s);
        self.forward(tokens, 0, cache, slots, |q, k, v, _| self.causal(q, k, v))
    }

    /// One token `token [1]` at `position` through the model, attending through
    /// `decode_attention` to the cached keys of positions `0..=position`: its logits `[1, V]`.
    pub fn decode(
        &self,
        token: Tensor<1, Int>,
        position: usize,
        cache: &mut PagedCache,
    ) -> Tensor<2> {
        let keys = position + 1;
        let device = token.device();
        let ints = |v: Vec<i32>| {
            let n = v.len();
            Tensor::<1, Int>::from_data(TensorData::new(v, [n]), &device)
        };
        let kv_indptr = ints(vec![0, keys as i32]);
        let splits = ints(vec![keys.min(MAX_KV_SPLITS) as i32]);
        let kv_indices = cache.slots(0, keys);
        let slot = cache.slots(position, 1);
        let options = DecodeAttentionOptions {
            max_kv_splits: MAX_KV_SPLITS,
            sm_scale: (self.sizes.head_dim() as f32).powf(-0.5),
            logit_cap: None,
        };
        self.forward(
            token,
            position,
            cache,
            slot,
            |q, _, _, (k_cache, v_cache)| {
                let (out, _lse) = fused::decode_attention(
                    q,
                    k_cache,
                    v_cache,
                    kv_indptr.clone(),
                    kv_indices.clone(),
                    splits.clone(),
                    options,
                );
                out
            },
        )
    }

    /// `tokens [T]` at positions `start..start + T` through every block, their keys and values
    /// written to `cache` at `slots [T]` before `attend(q, k, v, (k_cache, v_cache))` gives
    /// the attention `[T, HQ, D]` of the rotated queries `[T, HQ, D]`: the logits `[1, V]` of
    /// the last token.
    fn forward(
        &self,
        tokens: Tensor<1, Int>,
        start: usize,
        cache: &mut PagedCache,
        slots: Tensor<1, Int>,
        attend: impl Fn(Tensor<3>, Tensor<3>, Tensor<3>, (Tensor<3>, Tensor<3>)) -> Tensor<3>,
    ) -> Tensor<2> {
        let sz = self.sizes;
        let (t, d) = (tokens.dims()[0], sz.head_dim());
        let positions = self.rotary_angles(start, t);
        let mut x = self.embed.clone().select(0, tokens);
        for (layer, b) in self.blocks.iter().enumerate() {
            let a = b.attn_norm.forward(x.clone(), sz.eps);
            let q = a.clone().matmul(b.q.clone()).reshape([t, sz.q_heads, d]);
            let k = a.clone().matmul(b.k.clone()).reshape([t, sz.kv_heads, d]);
            let v = a.matmul(b.v.clone()).reshape([t, sz.kv_heads, d]);
            let (q, k) = (rotate(q, &positions), rotate(k, &positions));
            cache.write(layer, slots.clone(), k.clone(), v.clone());
            let caches = (cache.keys[layer].clone(), cache.values[layer].clone());
            let attended = attend(q, k, v, caches).reshape([t, sz.q_heads * d]);
            x = x + attended.matmul(b.o.clone());
            x = x.clone() + self.moe(b, b.ffn_norm.forward(x, sz.eps));
        }
        let last = x.narrow(0, t - 1, 1);
        self.norm.forward(last, sz.eps).matmul(self.head.clone())
    }

    /// `(cos, sin)` `[T, 1, D]` of positions `start..start + T`: angles `p * theta^(-2i/D)`
    /// in f32 for the first half of the head, repeated for the second.
    fn rotary_angles(&self, start: usize, t: usize) -> (Tensor<3>, Tensor<3>) {
        let d = self.sizes.head_dim();
        let device = self.embed.device();
        let inv_freq: Vec<f32> = (0..d / 2)
            .map(|i| self.sizes.rope_theta.powf(-(2.0 * i as f64) / d as f64) as f32)
            .collect();
        let positions: Vec<f32> = (start..start + t).map(|p| p as f32).collect();
        let positions = Tensor::<1>::from_data(TensorData::new(positions, [t]), &device);
        let inv_freq = Tensor::<1>::from_data(TensorData::new(inv_freq, [d / 2]), &device);
        let angles = positions.reshape([t, 1]) * inv_freq.reshape([1, d / 2]);
        let angles = Tensor::cat(vec![angles.clone(), angles], 1).reshape([t, 1, d]);
        (angles.clone().cos(), angles.sin())
    }

    /// Causal attention of the prompt's queries `[S, HQ, D]` over its own keys and values
    /// `[S, HKV, D]` (query head `h` reads kv head `h / (HQ / HKV)`): `[S, HQ, D]`.
    fn causal(&self, q: Tensor<3>, k: Tensor<3>, v: Tensor<3>) -> Tensor<3> {
        let sz = self.sizes;
        let ([s, _, d], group) = (q.dims(), sz.q_heads / sz.kv_heads);
        let widen = |t: Tensor<3>| {
            t.swap_dims(0, 1)
                .unsqueeze_dim::<4>(1)
                .expand([sz.kv_heads, group, s, d])
                .reshape([sz.q_heads, s, d])
        };
        let q = q.swap_dims(0, 1);
        let scores = q.matmul(widen(k).swap_dims(1, 2)) * (d as f64).powf(-0.5);
        let device = scores.device();
        let rows = Tensor::<1, Int>::arange(0..s as i64, &device).reshape([s, 1]);
        let cols = Tensor::<1, Int>::arange(0..s as i64, &device).reshape([1, s]);
        let future = cols
            .greater(rows)
            .unsqueeze::<3>()
            .expand([sz.q_heads, s, s]);
        let scores = scores.mask_fill(future, f32::NEG_INFINITY);
        softmax(scores, 2).matmul(widen(v)).swap_dims(0, 1)
    }

    /// `x [T, H]` through the block's experts: router softmax, top-k renormalised, rows
    /// gathered in expert order, SwiGLU by grouped matmuls, scattered back weighted.
    fn moe(&self, b: &Block, x: Tensor<2>) -> Tensor<2> {
        let (t, k, e) = (x.dims()[0], self.sizes.top_k, self.sizes.experts);
        let probs = softmax(x.clone().matmul(b.router.clone()), 1);
        let (top, ids) = probs.topk_with_indices(k, 1);
        let weights = (top.clone() / top.sum_dim(1)).reshape([t * k]);
        let ids = ids.reshape([t * k]);
        // The (token, choice) slots in expert order, token order within an expert.
        let order = ids.clone().argsort(0).cast(DType::I32);
        let experts = Tensor::<1, Int>::arange(0..e as i64, &x.device());
        let group_sizes = ids
            .reshape([t * k, 1])
            .equal(experts.reshape([1, e]))
            .int()
            .sum_dim(0)
            .reshape([e])
            .cast(DType::I32);
        let rows = fused::moe_gather(x, order.clone(), k);
        let g = fused::grouped_matmul(rows.clone(), b.gate.clone(), group_sizes.clone());
        let u = fused::grouped_matmul(rows, b.up.clone(), group_sizes.clone());
        let y = fused::grouped_matmul(silu(g) * u, b.down.clone(), group_sizes);
        fused::moe_scatter(y, order, Some(weights), k)
    }
}

/// Rotary embedding of `x [T, heads, D]` by `(cos, sin)` `[T, 1, D]`: the halves rotated,
/// `x * cos + [-x2, x1] * sin` (NeoX's form, as the Burn 0.21 model's `rope`).
fn rotate(x: Tensor<3>, (cos, sin): &(Tensor<3>, Tensor<3>)) -> Tensor<3> {
    let d = x.dims()[2];
    let x1 = x.clone().narrow(2, 0, d / 2);
    let x2 = x.clone().narrow(2, d / 2, d / 2);
    let rotated = Tensor::cat(vec![x2.neg(), x1], 2);
    x * cos.clone() + rotated * sin.clone()
}
