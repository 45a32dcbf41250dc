//! The roofline of one MoE decoder layer's decode step: the bytes it must read (the weights the
//! step touches and the KV cache its requests attend over) and the FLOPs of its matrix products,
//! from the layer's shapes alone. The `real_sizes` bench compares the modelled time of the
//! layer's ops ([`crate::a2`]) with it.

/// The attention block of a layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Attention {
    /// Grouped-query attention: q, k, v and o projections (optionally with q/k/v biases); the
    /// cache holds a key and a value row per KV head.
    Gqa {
        /// Query heads.
        q_heads: usize,
        /// Key/value heads.
        kv_heads: usize,
        /// Head dim (keys and values).
        head_dim: usize,
        /// Whether q, k and v have biases.
        qkv_bias: bool,
    },
    /// Multi-head latent attention decoded with absorbed projections: the cache holds one row of
    /// `kv_lora_rank + qk_rope_head_dim` per token; `kv_b_proj` is read once per step to absorb
    /// the query's no-rope part into the latent space and to bring the attended latent back
    /// per head.
    Mla {
        /// Heads.
        heads: usize,
        /// Rank of the query's low-rank projection, or `None` for a full `q_proj`.
        q_lora_rank: Option<usize>,
        /// Rank of the compressed key/value latent.
        kv_lora_rank: usize,
        /// Per-head query/key dims without rope.
        qk_nope_head_dim: usize,
        /// Per-head query/key dims with rope (the rope key is shared by the heads).
        qk_rope_head_dim: usize,
        /// Per-head value dim.
        v_head_dim: usize,
    },
}

/// The shapes of one MoE decoder layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerShape {
    /// Hidden size.
    pub hidden: usize,
    /// The attention block.
    pub attention: Attention,
    /// Routed experts.
    pub experts: usize,
    /// Each routed expert's intermediate size (a SwiGLU: gate, up and down projections).
    pub moe_intermediate: usize,
    /// Experts per token.
    pub top_k: usize,
    /// The shared experts' intermediate size in all (0: none); DeepSeek's `n_shared_experts`
    /// experts of `moe_intermediate` act as one of their summed size.
    pub shared_intermediate: usize,
    /// Whether the shared expert's output is scaled by a sigmoid gate (`[hidden, 1]`).
    pub shared_gate: bool,
    /// Bytes per weight and per cache element.
    pub dtype_bytes: usize,
}

/// What a decode step of a layer must move and compute.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepCost {
    /// Bytes of the weights the step touches: attention, norms, router, shared experts and the
    /// routed experts its tokens chose.
    pub weight_bytes: u64,
    /// Bytes of the KV cache the step's requests attend over.
    pub kv_bytes: u64,
    /// FLOPs of the step's matrix products (two per multiply-add), attention's included.
    pub flops: u64,
}

impl StepCost {
    /// Bytes read from HBM at least.
    pub fn bytes(&self) -> u64 {
        self.weight_bytes + self.kv_bytes
    }

    /// Seconds to read [`StepCost::bytes`] at `hbm_bytes_per_s`.
    pub fn memory_secs(&self, hbm_bytes_per_s: f64) -> f64 {
        self.bytes() as f64 / hbm_bytes_per_s
    }

    /// Seconds of the FLOPs at `flops_per_s`.
    pub fn compute_secs(&self, flops_per_s: f64) -> f64 {
        self.flops as f64 / flops_per_s
    }

    /// The roofline: the larger of the two, since the cube unit computes on tiles while the
    /// next ones are copied in (at decode sizes the memory term is the larger by far).
    pub fn roofline_secs(&self, hbm_bytes_per_s: f64, flops_per_s: f64) -> f64 {
        self.memory_secs(hbm_bytes_per_s)
            .max(self.compute_secs(flops_per_s))
    }
}

impl LayerShape {
    /// Cache elements per token.
    pub fn kv_per_token(&self) -> usize {
        match self.attention {
            Attention::Gqa {
                kv_heads, head_dim, ..
            } => 2 * kv_heads * head_dim,
            Attention::Mla {
                kv_lora_rank,
                qk_rope_head_dim,
                ..
            } => kv_lora_rank + qk_rope_head_dim,
        }
    }

    /// Weights of the attention block's matrix products, and of its vectors (biases, norms).
    fn attention_weights(&self) -> (usize, usize) {
        let h = self.hidden;
        match self.attention {
            Attention::Gqa {
                q_heads,
                kv_heads,
                head_dim,
                qkv_bias,
            } => {
                let (q, kv) = (q_heads * head_dim, kv_heads * head_dim);
                let bias = if qkv_bias { q + 2 * kv } else { 0 };
                (h * (q + 2 * kv) + q * h, bias)
            }
            Attention::Mla {
                heads,
                q_lora_rank,
                kv_lora_rank,
                qk_nope_head_dim,
                qk_rope_head_dim,
                v_head_dim,
            } => {
                let q_dim = heads * (qk_nope_head_dim + qk_rope_head_dim);
                let (q, q_norm) = match q_lora_rank {
                    Some(r) => (h * r + r * q_dim, r),
                    None => (h * q_dim, 0),
                };
                let kv_a = h * (kv_lora_rank + qk_rope_head_dim);
                let kv_b = kv_lora_rank * heads * (qk_nope_head_dim + v_head_dim);
                let o = heads * v_head_dim * h;
                (q + kv_a + kv_b + o, q_norm + kv_lora_rank)
            }
        }
    }

    /// FLOPs of attention proper for one query over `keys` cached keys.
    fn attention_flops(&self, keys: usize) -> usize {
        match self.attention {
            Attention::Gqa {
                q_heads, head_dim, ..
            } => q_heads * 2 * keys * 2 * head_dim,
            // Scores over the latent and the rope key, values over the latent.
            Attention::Mla {
                heads,
                kv_lora_rank,
                qk_rope_head_dim,
                ..
            } => heads * 2 * keys * (2 * kv_lora_rank + qk_rope_head_dim),
        }
    }

    /// The cost of a decode step of `batch` requests, each attending over `keys` cached keys
    /// (its new token's included), whose tokens chose `experts_touched` distinct routed experts.
    pub fn decode_step(&self, batch: usize, keys: usize, experts_touched: usize) -> StepCost {
        let h = self.hidden;
        let (attn_matrices, attn_vectors) = self.attention_weights();
        let router = h * self.experts;
        let expert = 3 * h * self.moe_intermediate;
        let shared = 3 * h * self.shared_intermediate + if self.shared_gate { h } else { 0 };
        let norms = 2 * h;
        let dense = attn_matrices + router + shared;
        let weights = dense + attn_vectors + norms + experts_touched.min(self.experts) * expert;
        let flops = 2 * batch * dense
            + 2 * batch * self.top_k * expert
            + batch * self.attention_flops(keys);
        StepCost {
            weight_bytes: (weights * self.dtype_bytes) as u64,
            kv_bytes: (batch * keys * self.kv_per_token() * self.dtype_bytes) as u64,
            flops: flops as u64,
        }
    }
}

/// DeepSeek-V2-Lite's decoder layer (its config.json), bf16: MLA without a query LoRA, 64
/// routed experts of 1408 (top-6) and 2 shared ones.
pub const DEEPSEEK_V2_LITE: LayerShape = LayerShape {
    hidden: 2048,
    attention: Attention::Mla {
        heads: 16,
        q_lora_rank: None,
        kv_lora_rank: 512,
        qk_nope_head_dim: 128,
        qk_rope_head_dim: 64,
        v_head_dim: 128,
    },
    experts: 64,
    moe_intermediate: 1408,
    top_k: 6,
    shared_intermediate: 2 * 1408,
    shared_gate: false,
    dtype_bytes: 2,
};

/// Qwen1.5-MoE-A2.7B's decoder layer (its config.json), bf16: GQA with q/k/v biases, 60
/// experts of 1408 (top-4), a shared expert of 5632 behind a sigmoid gate.
pub const QWEN15_MOE_A27B: LayerShape = LayerShape {
    hidden: 2048,
    attention: Attention::Gqa {
        q_heads: 16,
        kv_heads: 16,
        head_dim: 128,
        qkv_bias: true,
    },
    experts: 60,
    moe_intermediate: 1408,
    top_k: 4,
    shared_intermediate: 5632,
    shared_gate: true,
    dtype_bytes: 2,
};

#[cfg(test)]
mod tests {
    use super::*;

    // The expected figures are the checkpoints' tensors counted one by one from their
    // safetensors index (shapes as [out, in]), not from the formulas above.

    #[test]
    fn deepseek_v2_lite_batch_1() {
        // q_proj [3072, 2048], kv_a_proj_with_mqa [576, 2048], kv_a_layernorm [512],
        // kv_b_proj [4096, 512], o_proj [2048, 2048], two layer norms [2048]: 13 767 168;
        // gate [64, 2048]: 131 072; shared_experts gate/up [2816, 2048], down [2048, 2816]:
        // 17 301 504; six experts of gate/up [1408, 2048], down [2048, 1408]: 51 904 512.
        let c = DEEPSEEK_V2_LITE.decode_step(1, 1024, 6);
        assert_eq!(c.weight_bytes, 2 * 83_104_256);
        // One 576-element bf16 row per cached token.
        assert_eq!(c.kv_bytes, 1024 * 576 * 2);
        // 2 x (q, kv_a, kv_b, o, gate, shared: 31 195 136) + 2 x 6 routed experts' 8 650 752
        // + 16 heads x 1024 keys x 2 x (576 for the scores + 512 for the values).
        assert_eq!(c.flops, 62_390_272 + 103_809_024 + 35_651_584);
    }

    #[test]
    fn qwen15_moe_batch_8() {
        // q/k/v_proj [2048, 2048] + biases [2048], o_proj [2048, 2048], two norms [2048]:
        // 16 787 456; gate [60, 2048]: 122 880; shared_expert [5632 x 2048] x 3 and
        // shared_expert_gate [1, 2048]: 34 605 056; 25 experts: 216 268 800.
        let c = QWEN15_MOE_A27B.decode_step(8, 1024, 25);
        assert_eq!(c.weight_bytes, 2 * 267_784_192);
        // Per token a key and a value row of 16 x 128.
        assert_eq!(c.kv_bytes, 8 * 1024 * 8192);
        // 2 x 8 x (q, k, v, o, gate, shared, shared gate: 51 505 152) + 2 x 8 x 4 routed
        // experts' 8 650 752 + 8 x 16 heads x 1024 keys x 2 x (128 + 128).
        assert_eq!(c.flops, 824_082_432 + 553_648_128 + 67_108_864);
    }

    #[test]
    fn q_lora_adds_its_projections_and_norm() {
        let mut v3_like = DEEPSEEK_V2_LITE;
        if let Attention::Mla { q_lora_rank, .. } = &mut v3_like.attention {
            *q_lora_rank = Some(1536);
        }
        let (full, lora) = (
            DEEPSEEK_V2_LITE.decode_step(1, 1, 0).weight_bytes,
            v3_like.decode_step(1, 1, 0).weight_bytes,
        );
        // q_a_proj [1536, 2048] + q_a_layernorm [1536] + q_b_proj [3072, 1536] replace
        // q_proj [3072, 2048].
        let added = 1536 * 2048 + 1536 + 3072 * 1536;
        assert_eq!(lora - full, 2 * (added - 3072 * 2048) as u64);
    }

    #[test]
    fn touched_experts_are_capped_and_the_roofline_is_the_larger_term() {
        let c = QWEN15_MOE_A27B.decode_step(32, 1024, 1000);
        assert_eq!(c, QWEN15_MOE_A27B.decode_step(32, 1024, 60));
        let (mem, flops) = (c.bytes() as f64, c.flops as f64);
        assert_eq!(c.roofline_secs(mem, 1e30), 1.0);
        assert_eq!(c.roofline_secs(1e30, flops), 1.0);
    }
}
