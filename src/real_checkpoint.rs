//! Checkpoints at the real layer shapes of published models: their published `config.json`
//! with fewer layers and random bf16 weights ([`burn_ascend_llm::hf::dummy`]), for the tests
//! and benches of real sizes, which load them from disk as a user's checkpoint is loaded.

use std::path::Path;

use burn_ascend_llm::hf::dummy::{self, Precision, Written};
use serde_json::{json, Value};

/// A published checkpoint whose layer shapes a test or bench reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// Qwen/Qwen3-30B-A3B: 48 layers of GQA (32 query, 4 KV heads of 128) and 128 experts of
    /// 768 (top 8); 61 GB in bf16.
    Qwen3_30bA3b,
    /// deepseek-ai/DeepSeek-V2-Lite: 27 layers of MLA (16 heads, KV latent 512 + rope 64), the
    /// first dense (10944), then 64 routed experts of 1408 (top 6) and 2 shared; 31 GB in bf16.
    DeepseekV2Lite,
    /// mistralai/Mixtral-8x7B-v0.1: 32 layers of GQA (32 query, 8 KV heads of 128) and 8
    /// experts of 14336 (top 2); 93 GB in bf16.
    Mixtral8x7b,
    /// Qwen/Qwen1.5-MoE-A2.7B (Qwen2-MoE): 24 layers of MHA with q/k/v biases (16 heads of 128)
    /// and 60 experts of 1408 (top 4) beside a gated shared expert of 5632; 29 GB in bf16.
    Qwen15MoeA27b,
    /// deepseek-ai/DeepSeek-V3 (its bf16 form; published in FP8): 61 layers of MLA (128 heads,
    /// query LoRA 1536, KV latent 512 + rope 64), the first 3 dense (18432), then 256 routed
    /// experts of 2048 (top 8 by `noaux_tc` in 8 groups, 4 kept) and 1 shared; 1.3 TB in bf16.
    DeepseekV3,
}

impl Published {
    /// Its name on the Hugging Face hub.
    pub fn name(self) -> &'static str {
        match self {
            Self::Qwen3_30bA3b => "Qwen/Qwen3-30B-A3B",
            Self::DeepseekV2Lite => "deepseek-ai/DeepSeek-V2-Lite",
            Self::Mixtral8x7b => "mistralai/Mixtral-8x7B-v0.1",
            Self::Qwen15MoeA27b => "Qwen/Qwen1.5-MoE-A2.7B",
            Self::DeepseekV3 => "deepseek-ai/DeepSeek-V3",
        }
    }

    /// Its `config.json` as published (the fields the families read, the architecture and the
    /// dtype), with `layers` decoder layers instead of all of them.
    pub fn config(self, layers: usize) -> Value {
        let mut config = match self {
            Self::Qwen3_30bA3b => json!({
                "architectures": ["Qwen3MoeForCausalLM"],
                "attention_bias": false,
                "attention_dropout": 0.0,
                "bos_token_id": 151643,
                "decoder_sparse_step": 1,
                "eos_token_id": 151645,
                "head_dim": 128,
                "hidden_act": "silu",
                "hidden_size": 2048,
                "initializer_range": 0.02,
                "intermediate_size": 6144,
                "max_position_embeddings": 40960,
                "max_window_layers": 48,
                "mlp_only_layers": [],
                "model_type": "qwen3_moe",
                "moe_intermediate_size": 768,
                "norm_topk_prob": true,
                "num_attention_heads": 32,
                "num_experts": 128,
                "num_experts_per_tok": 8,
                "num_hidden_layers": 48,
                "num_key_value_heads": 4,
                "output_router_logits": false,
                "rms_norm_eps": 1e-6,
                "rope_scaling": null,
                "rope_theta": 1000000.0,
                "router_aux_loss_coef": 0.001,
                "sliding_window": null,
                "tie_word_embeddings": false,
                "torch_dtype": "bfloat16",
                "transformers_version": "4.51.0",
                "use_cache": true,
                "use_sliding_window": false,
                "vocab_size": 151936
            }),
            Self::DeepseekV2Lite => json!({
                "architectures": ["DeepseekV2ForCausalLM"],
                "attention_bias": false,
                "attention_dropout": 0.0,
                "aux_loss_alpha": 0.001,
                "bos_token_id": 100000,
                "eos_token_id": 100001,
                "first_k_dense_replace": 1,
                "hidden_act": "silu",
                "hidden_size": 2048,
                "initializer_range": 0.02,
                "intermediate_size": 10944,
                "kv_lora_rank": 512,
                "max_position_embeddings": 163840,
                "model_type": "deepseek_v2",
                "moe_intermediate_size": 1408,
                "moe_layer_freq": 1,
                "n_group": 1,
                "n_routed_experts": 64,
                "n_shared_experts": 2,
                "norm_topk_prob": false,
                "num_attention_heads": 16,
                "num_experts_per_tok": 6,
                "num_hidden_layers": 27,
                "num_key_value_heads": 16,
                "q_lora_rank": null,
                "qk_nope_head_dim": 128,
                "qk_rope_head_dim": 64,
                "rms_norm_eps": 1e-6,
                "rope_scaling": {
                    "beta_fast": 32,
                    "beta_slow": 1,
                    "factor": 40,
                    "mscale": 0.707,
                    "mscale_all_dim": 0.707,
                    "original_max_position_embeddings": 4096,
                    "type": "yarn"
                },
                "rope_theta": 10000,
                "routed_scaling_factor": 1.0,
                "scoring_func": "softmax",
                "seq_aux": true,
                "tie_word_embeddings": false,
                "topk_group": 1,
                "topk_method": "greedy",
                "torch_dtype": "bfloat16",
                "transformers_version": "4.33.1",
                "use_cache": true,
                "v_head_dim": 128,
                "vocab_size": 102400
            }),
            Self::Mixtral8x7b => json!({
                "architectures": ["MixtralForCausalLM"],
                "attention_dropout": 0.0,
                "bos_token_id": 1,
                "eos_token_id": 2,
                "hidden_act": "silu",
                "hidden_size": 4096,
                "initializer_range": 0.02,
                "intermediate_size": 14336,
                "max_position_embeddings": 32768,
                "model_type": "mixtral",
                "num_attention_heads": 32,
                "num_experts_per_tok": 2,
                "num_hidden_layers": 32,
                "num_key_value_heads": 8,
                "num_local_experts": 8,
                "output_router_logits": false,
                "rms_norm_eps": 1e-5,
                "rope_theta": 1000000.0,
                "router_aux_loss_coef": 0.02,
                "sliding_window": null,
                "tie_word_embeddings": false,
                "torch_dtype": "bfloat16",
                "transformers_version": "4.36.0.dev0",
                "use_cache": true,
                "vocab_size": 32000
            }),
            Self::Qwen15MoeA27b => json!({
                "architectures": ["Qwen2MoeForCausalLM"],
                "attention_dropout": 0.0,
                "bos_token_id": 151643,
                "decoder_sparse_step": 1,
                "eos_token_id": 151643,
                "hidden_act": "silu",
                "hidden_size": 2048,
                "initializer_range": 0.02,
                "intermediate_size": 5632,
                "max_position_embeddings": 8192,
                "max_window_layers": 21,
                "model_type": "qwen2_moe",
                "moe_intermediate_size": 1408,
                "norm_topk_prob": false,
                "num_attention_heads": 16,
                "num_experts": 60,
                "num_experts_per_tok": 4,
                "num_hidden_layers": 24,
                "num_key_value_heads": 16,
                "output_router_logits": false,
                "rms_norm_eps": 1e-6,
                "rope_theta": 1000000.0,
                "router_aux_loss_coef": 0.001,
                "shared_expert_intermediate_size": 5632,
                "sliding_window": 32768,
                "tie_word_embeddings": false,
                "torch_dtype": "bfloat16",
                "transformers_version": "4.40.0.dev0",
                "use_cache": true,
                "use_sliding_window": false,
                "vocab_size": 151936
            }),
            Self::DeepseekV3 => json!({
                "architectures": ["DeepseekV3ForCausalLM"],
                "attention_bias": false,
                "attention_dropout": 0.0,
                "bos_token_id": 0,
                "eos_token_id": 1,
                "first_k_dense_replace": 3,
                "hidden_act": "silu",
                "hidden_size": 7168,
                "initializer_range": 0.02,
                "intermediate_size": 18432,
                "kv_lora_rank": 512,
                "max_position_embeddings": 163840,
                "model_type": "deepseek_v3",
                "moe_intermediate_size": 2048,
                "moe_layer_freq": 1,
                "n_group": 8,
                "n_routed_experts": 256,
                "n_shared_experts": 1,
                "norm_topk_prob": true,
                "num_attention_heads": 128,
                "num_experts_per_tok": 8,
                "num_hidden_layers": 61,
                "num_key_value_heads": 128,
                "num_nextn_predict_layers": 1,
                "q_lora_rank": 1536,
                "qk_nope_head_dim": 128,
                "qk_rope_head_dim": 64,
                "rms_norm_eps": 1e-6,
                "rope_scaling": {
                    "beta_fast": 32,
                    "beta_slow": 1,
                    "factor": 40,
                    "mscale": 1.0,
                    "mscale_all_dim": 1.0,
                    "original_max_position_embeddings": 4096,
                    "type": "yarn"
                },
                "rope_theta": 10000,
                "routed_scaling_factor": 2.5,
                "scoring_func": "sigmoid",
                "tie_word_embeddings": false,
                "topk_group": 4,
                "topk_method": "noaux_tc",
                "torch_dtype": "bfloat16",
                "transformers_version": "4.33.1",
                "use_cache": true,
                "v_head_dim": 128,
                "vocab_size": 129280
            }),
        };
        config["num_hidden_layers"] = layers.into();
        config
    }
}

/// Writes `model`'s checkpoint with `layers` layers into `dir`, in shards of at most
/// `max_shard_bytes`.
pub fn write(
    model: Published,
    layers: usize,
    dir: &Path,
    max_shard_bytes: u64,
    seed: u64,
) -> std::io::Result<Written> {
    write_as(model, layers, dir, max_shard_bytes, seed, Precision::Bf16)
}

/// [`write()`] in `precision` (W8A8: the linear layers int8 as LLM Compressor stores them).
pub fn write_as(
    model: Published,
    layers: usize,
    dir: &Path,
    max_shard_bytes: u64,
    seed: u64,
    precision: Precision,
) -> std::io::Result<Written> {
    dummy::write_as(&model.config(layers), dir, max_shard_bytes, seed, precision)
}
