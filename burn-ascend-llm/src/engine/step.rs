//! The one interface between the serving engine and a model.
//!
//! The engine ([`super::serve::Server`], its scheduler, paged cache and captured decode) knows
//! no model: it asks a [`StepModel`] for the shape of its cache rows ([`CacheLayout`]) and runs
//! a step by calling [`StepModel::step`] with the step's device inputs and a
//! [`PagedAttention`] handle. The model computes its layers; each attention layer hands the
//! handle its queries and the step's new key (and value) rows, and the handle writes those
//! rows to the slots `fused::alloc_extend` gave the step's tokens and attends every token to
//! its cached positions: a prefill step's requests through their block tables
//! (`fused::extend_attention`: each chunk to its cached pages and itself, causally; on Ascend
//! aclnnFusedInferAttentionScoreV3 or the extend kernels, chosen by the device model), and
//! decode steps through `fused::decode_attention` with each token's key list. The built-in decoder
//! ([`crate::moe::model::MoeDecoder`]) and every Hugging Face family implement it.

use std::any::Any;

use burn::module::Module;
use burn::tensor::{DType, Int, Tensor};
use burn_ascend::fused::{self, DecodeAttentionOptions, ExtendLens};
use burn_ascend::{graph, Ascend, AscendDevice, FusedOps};

use super::cache::LayerCache;
use super::serve::StepInputs;

/// The rows one layer keeps per cached token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheLayout {
    /// Layers with a cache (attention layers).
    pub layers: usize,
    /// Query heads of attention (the step's workspace grows with them).
    pub query_heads: usize,
    /// Key heads and key dim: each token's key row is `[kv_heads, key_dim]`.
    pub kv_heads: usize,
    /// The key dim.
    pub key_dim: usize,
    /// The value dim of a separate value row `[kv_heads, value_dim]`, or `None` when the
    /// values are the leading dims of the key row (multi-head latent attention).
    pub value_dim: Option<usize>,
    /// The rows' dtype: the dtype of the queries and rows the model's attention gives.
    pub dtype: DType,
}

/// A model the engine serves: one step over the paged cache, and the dense reference.
pub trait StepModel<B: FusedOps>: Module<B> {
    /// The vocabulary (the width of the logits).
    fn vocab(&self) -> usize;

    /// The cache rows of its attention layers.
    fn cache_layout(&self) -> CacheLayout;

    /// One step: the step's tokens through every layer, each attention layer through
    /// `attention` (layer `i` of [`CacheLayout::layers`] calls [`PagedAttention::attend`] with
    /// `i`), and the logits `[S, V]` of the rows `x.sample_rows` names, on the server's device.
    /// `x` and `attention` hold one entry per step device ([`StepModel::step_devices`]): the
    /// step's inputs on that device and its paged cache; one unless the model says otherwise.
    fn step(&self, x: &[StepInputs<B>], attention: &mut [PagedAttention<'_, B>]) -> Tensor<B, 2>;

    /// Logits `[B, S, V]` of whole sequences by causal attention without a cache: the
    /// reference the paged path must agree with.
    fn forward_logits(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 3>;

    /// Why a step of this model cannot be captured into an ACL graph, if it cannot.
    fn capture_refusal(&self) -> Option<String> {
        None
    }

    /// The devices a step runs on when its attention is split across them (by heads): each
    /// has its own paged cache of [`StepModel::cache_layout`] rows and its own copy of the
    /// step's inputs, the server's device first. Empty (the default): the server's device
    /// alone.
    fn step_devices(&self) -> Vec<B::Device> {
        Vec::new()
    }

    /// NPUs besides the server's that hold parts of the model: a failed step resets them too.
    fn other_devices(&self) -> Vec<AscendDevice> {
        Vec::new()
    }

    /// The smallest `pages` of the processes serving the model together (one per machine,
    /// each with the same requests): their caches must have as many pages for their schedules
    /// to stay the same. One process (the default): `pages`.
    fn agree(&self, pages: usize) -> usize {
        pages
    }

    /// The model after its weights were reloaded on reset devices (an expert-parallel model
    /// splits its experts across [`StepModel::other_devices`] again).
    fn after_reset(self) -> Self {
        self
    }
}

/// A step's access to the paged cache: see [`StepModel::step`].
pub struct PagedAttention<'a, B: FusedOps> {
    caches: &'a mut [LayerCache<B>],
    slots: Tensor<B, 1, Int>,
    inputs: &'a StepInputs<B>,
    max_kv_splits: usize,
    /// What [`PagedAttention::shared`] built, with its key.
    shared: Vec<Box<dyn std::any::Any + Send>>,
}

impl<'a, B: FusedOps> PagedAttention<'a, B> {
    /// The handle of a step whose tokens take `slots` (the server makes one per step; the
    /// `real_sizes` bench drives a single layer with one).
    pub fn new(
        caches: &'a mut [LayerCache<B>],
        slots: Tensor<B, 1, Int>,
        inputs: &'a StepInputs<B>,
        max_kv_splits: usize,
    ) -> Self {
        Self {
            caches,
            slots,
            inputs,
            max_kv_splits,
            shared: Vec::new(),
        }
    }

    /// A value the step's layers share, built by the first layer that asks for `key` (a
    /// model's rotary rows of the step's positions, for one: built once per step rather than
    /// once per layer). The engine does not know what it holds.
    pub fn shared<K, T>(&mut self, key: K, build: impl FnOnce() -> T) -> T
    where
        K: PartialEq + Send + 'static,
        T: Clone + Send + 'static,
    {
        let found = self
            .shared
            .iter()
            .find_map(|v| match v.downcast_ref::<(K, T)>() {
                Some((k, v)) if *k == key => Some(v.clone()),
                _ => None,
            });
        found.unwrap_or_else(|| {
            let v = build();
            self.shared.push(Box::new((key, v.clone())));
            v
        })
    }

    /// Writes the step's key rows `[T, HKV, Dk]` (given whole or as pieces side by side along
    /// the last dim, such as MLA's latent and rotary rows, which the write places without joining
    /// them) and value rows `values [T, HKV, Dv]` (when the layout has them) to `layer`'s cache,
    /// in one launch on `Ascend` (`graph::write_cache`), then attends each of the step's queries
    /// `q [T, HQ, Dk]` to its token's cached positions: `[T, HQ, Dv]`, with `Dv` the layout's
    /// value dim, or `value_dim` leading dims of the key rows when the layout has no values.
    pub fn attend(
        &mut self,
        layer: usize,
        q: Tensor<B, 3>,
        keys: Vec<Tensor<B, 3>>,
        values: Option<Tensor<B, 3>>,
        sm_scale: f32,
        value_dim: usize,
    ) -> Tensor<B, 3> {
        let cache = &mut self.caches[layer];
        write_cache(cache, self.slots.clone(), keys, values);
        if let Some(prefill) = &self.inputs.prefill {
            return fused::extend_attention(
                q,
                cache.keys.clone(),
                cache.values.clone(),
                prefill.block_table.clone(),
                ExtendLens {
                    q_lens: &prefill.q_lens,
                    kv_lens: &prefill.kv_lens,
                    page_size: prefill.page_size,
                    value_dim,
                },
                sm_scale,
                None,
            );
        }
        let options = DecodeAttentionOptions {
            max_kv_splits: self.max_kv_splits,
            sm_scale,
            logit_cap: None,
            value_dim,
            path: None,
        };
        fused::decode_attention(
            q,
            cache.keys.clone(),
            cache.values.clone(),
            self.inputs.kv_indptr.clone(),
            self.inputs.kv_indices.clone(),
            self.inputs.kv_splits.clone(),
            options,
        )
        .0
    }
}

/// Writes the step's key rows (`keys`, pieces side by side along the last dim) and value rows at
/// `slots [T]` of `cache`. On `Ascend` into the caches' own buffers (`graph::write_cache`: one
/// `kv_cache_write` launch for keys and values, or for MLA's two key pieces): only the rows
/// written move, and a captured step reads and writes the cache at the address it had at
/// capture. Other backends join the pieces and scatter into a copy.
fn write_cache<B: FusedOps>(
    cache: &mut LayerCache<B>,
    slots: Tensor<B, 1, Int>,
    keys: Vec<Tensor<B, 3>>,
    values: Option<Tensor<B, 3>>,
) {
    let ascend = |t: &dyn Any| t.downcast_ref::<Tensor<Ascend, 3>>().cloned();
    let on_ascend = (&slots as &dyn Any)
        .downcast_ref::<Tensor<Ascend, 1, Int>>()
        .zip(ascend(&cache.keys))
        .zip(keys.iter().map(|k| ascend(k)).collect::<Option<Vec<_>>>());
    if let Some(((slots, cached_keys), key_rows)) = on_ascend {
        let values = cache
            .values
            .as_ref()
            .and_then(|v| ascend(v))
            .zip(values.as_ref().and_then(|v| ascend(v)));
        let value_rows = values.as_ref().map(|(_, rows)| [rows.clone()]);
        let mut writes = vec![graph::CacheWrite {
            cache: &cached_keys,
            rows: &key_rows,
        }];
        if let (Some((cached, _)), Some(rows)) = (&values, &value_rows) {
            writes.push(graph::CacheWrite {
                cache: cached,
                rows,
            });
        }
        return graph::write_cache(slots, &writes);
    }
    let keys = match keys.len() {
        1 => keys.into_iter().next().expect("one piece"),
        _ => Tensor::cat(keys, 2),
    };
    LayerCache::write_rows(&mut cache.keys, slots.clone(), keys);
    if let (Some(cached), Some(values)) = (cache.values.as_mut(), values) {
        LayerCache::write_rows(cached, slots, values);
    }
}
