//! One MoE decoder layer at the shapes of published checkpoints, shared by `real_sizes` and
//! `quantized`: the checkpoints' configs, the families' layer with random bf16 weights drawn
//! through the loader, and a bf16 cache of `CONTEXT` tokens per request with the decode step's
//! inputs.
#![allow(dead_code)]

use std::borrow::Cow;
use std::collections::HashMap;

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Distribution, Int, Tensor, TensorData};
use burn_ascend::{Ascend, AscendDevice};
use burn_ascend_llm::engine::cache::LayerCache;
use burn_ascend_llm::engine::serve::StepInputs;
use burn_ascend_llm::families::weights::{Stored, Tensors};
use burn_ascend_llm::families::{self, Decoder, LoadError};
use burn_ascend_perf::roofline::{self, Attention, LayerShape};
use serde_json::json;

pub type B = Ascend;

pub const BATCHES: [usize; 3] = [1, 8, 32];
/// Tokens each request holds in the cache before the step; the step's token makes one more.
pub const CONTEXT: usize = 1024;
/// Splits per request as the example's server picks them (a split per 32 keys), at most this.
pub const MAX_KV_SPLITS: usize = 16;
pub const EPS: f64 = 1e-6;
/// The checkpoints' `initializer_range`: router logits of about unit spread, so tokens route
/// nearly uniformly.
pub const INIT_STD: f64 = 0.02;
pub const BF16: DType = DType::BF16;

/// A checkpoint's layer: its shapes and what the roofline does not say.
pub struct Model {
    pub name: &'static str,
    pub shape: LayerShape,
    /// Router weights renormalised over the chosen experts.
    pub norm_topk_prob: bool,
    pub rope_theta: f64,
    /// The checkpoint's config.json with one (MoE) layer and a small vocabulary, for the
    /// families' decoder.
    pub config: fn() -> serde_json::Value,
}

/// DeepSeek-V2-Lite's config.json, one MoE layer (`first_k_dense_replace` 0), vocabulary 256.
pub fn deepseek_v2_lite() -> serde_json::Value {
    json!({
        "model_type": "deepseek_v2", "vocab_size": 256, "hidden_size": 2048,
        "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_hidden_layers": 1,
        "num_attention_heads": 16, "num_key_value_heads": 16, "n_shared_experts": 2,
        "n_routed_experts": 64, "num_experts_per_tok": 6, "routed_scaling_factor": 1.0,
        "kv_lora_rank": 512, "q_lora_rank": null, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "qk_nope_head_dim": 128, "topk_method": "greedy", "n_group": 1, "topk_group": 1,
        "norm_topk_prob": false, "scoring_func": "softmax", "aux_loss_alpha": 0.001,
        "seq_aux": true, "first_k_dense_replace": 0, "moe_layer_freq": 1,
        "hidden_act": "silu", "max_position_embeddings": 163840, "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "attention_bias": false, "tie_word_embeddings": false,
        "rope_scaling": {
            "type": "yarn", "rope_type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
            "beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707
        }
    })
}

/// Qwen1.5-MoE-A2.7B's config.json, one layer, vocabulary 256.
pub fn qwen15_moe_a27b() -> serde_json::Value {
    json!({
        "model_type": "qwen2_moe", "vocab_size": 256, "hidden_size": 2048,
        "intermediate_size": 5632, "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632, "num_hidden_layers": 1,
        "num_attention_heads": 16, "num_key_value_heads": 16, "num_experts": 60,
        "num_experts_per_tok": 4, "norm_topk_prob": false, "decoder_sparse_step": 1,
        "mlp_only_layers": [], "qkv_bias": true, "hidden_act": "silu",
        "max_position_embeddings": 8192, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "rope_scaling": null, "router_aux_loss_coef": 0.001, "use_sliding_window": false,
        "sliding_window": null, "tie_word_embeddings": false
    })
}

pub const MODELS: [Model; 2] = [
    Model {
        name: "DeepSeek-V2-Lite",
        shape: roofline::DEEPSEEK_V2_LITE,
        norm_topk_prob: false,
        rope_theta: 10000.0,
        config: deepseek_v2_lite,
    },
    Model {
        name: "Qwen1.5-MoE-A2.7B",
        shape: roofline::QWEN15_MOE_A27B,
        norm_topk_prob: false,
        rope_theta: 1_000_000.0,
        config: qwen15_moe_a27b,
    },
];

pub fn device() -> AscendDevice {
    AscendDevice::Emulated(0)
}

pub fn sync() {
    B::sync(&device()).expect("the device ran the step");
}

/// The cache and the step's inputs for `batch` requests of `CONTEXT` cached tokens each.
pub struct StepState {
    pub x: Tensor<B, 2>,
    pub positions: Tensor<B, 1>,
    pub cache: LayerCache<B>,
    /// The cache slot of each request's new token.
    pub slots: Tensor<B, 1, Int>,
    pub kv_indptr: Tensor<B, 1, Int>,
    pub kv_indices: Tensor<B, 1, Int>,
    pub kv_splits: Tensor<B, 1, Int>,
}

pub fn ints(v: Vec<i32>) -> Tensor<B, 1, Int> {
    let n = v.len();
    Tensor::from_data(TensorData::new(v, [n]), (&device(), DType::I32))
}

impl StepState {
    pub fn new(s: &LayerShape, batch: usize) -> Self {
        let keys = CONTEXT + 1;
        let rows = batch * keys;
        // Request b holds the slots b * keys ..; its new token takes the last one.
        let random = |shape: [usize; 3]| {
            Tensor::random(shape, Distribution::Normal(0.0, 1.0), (&device(), BF16))
        };
        let cache = match s.attention {
            Attention::Gqa {
                kv_heads, head_dim, ..
            } => LayerCache {
                keys: random([rows, kv_heads, head_dim]),
                values: Some(random([rows, kv_heads, head_dim])),
            },
            Attention::Mla {
                kv_lora_rank,
                qk_rope_head_dim,
                ..
            } => LayerCache {
                keys: random([rows, 1, kv_lora_rank + qk_rope_head_dim]),
                values: None,
            },
        };
        let splits = keys.div_ceil(32).clamp(1, MAX_KV_SPLITS) as i32;
        Self {
            x: Tensor::random(
                [batch, s.hidden],
                Distribution::Normal(0.0, 1.0),
                (&device(), BF16),
            ),
            positions: Tensor::full([batch], CONTEXT as f32, (&device(), DType::F32)),
            cache,
            slots: ints((0..batch).map(|b| (b * keys + CONTEXT) as i32).collect()),
            kv_indptr: ints((0..=batch).map(|b| (b * keys) as i32).collect()),
            kv_indices: ints((0..rows as i32).collect()),
            kv_splits: ints(vec![splits; batch]),
        }
    }
}

/// Random weights of a spec's shapes, drawn on the device and read back, as a checkpoint
/// would hold them.
struct Drawn(HashMap<String, Vec<usize>>);

impl Tensors for Drawn {
    fn stored(&self, name: &str) -> Result<Stored<'_>, LoadError> {
        let shape = self.0[name].clone();
        let n = shape.iter().product::<usize>();
        let t: Tensor<B, 1> = if name.ends_with("norm.weight") {
            Tensor::ones([n], (&device(), BF16))
        } else {
            Tensor::random([n], Distribution::Normal(0.0, INIT_STD), (&device(), BF16))
        };
        Ok(Stored {
            dtype: BF16,
            shape,
            bytes: Cow::Owned(t.into_data().as_bytes().to_vec()),
        })
    }
}

/// The layer as the model families build it (`families::Decoder`, one layer, a small
/// vocabulary): config.json through the family's spec, random weights through the loader.
pub fn families_layer(m: &Model) -> Decoder<B> {
    let spec = families::spec_of(&(m.config)()).expect("a supported config");
    let drawn = Drawn(spec.expected().0.into_iter().collect());
    Decoder::load(&spec, &drawn, BF16, None, &device()).expect("the layer loads")
}

/// The step's device inputs as the server gives them to a model (only the attention's are
/// read by a layer).
pub fn step_inputs(st: &StepState, batch: usize) -> StepInputs<B> {
    let keys = CONTEXT + 1;
    StepInputs {
        tokens: ints(vec![0; batch]),
        positions: st.positions.clone(),
        prefix_lens: ints(vec![CONTEXT as i32; batch]),
        seq_lens: ints(vec![keys as i32; batch]),
        last_loc: ints(
            (0..batch)
                .map(|b| (b * keys + CONTEXT - 1) as i32)
                .collect(),
        ),
        free_pages: ints(vec![0]),
        kv_indptr: st.kv_indptr.clone(),
        kv_indices: st.kv_indices.clone(),
        kv_splits: st.kv_splits.clone(),
        sample_rows: ints((0..batch as i32).collect()),
        // A decode step: every token through decode_attention.
        prefill: None,
    }
}
