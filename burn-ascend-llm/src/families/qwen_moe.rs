//! Qwen2-MoE and Qwen3-MoE: sparse layers of routed SwiGLU experts
//! (`mlp.experts.E.{gate,up,down}_proj`) behind a softmax top-k router renormalised when
//! `norm_topk_prob`, dense SwiGLU layers where `mlp_only_layers` / `decoder_sparse_step` say.
//! Qwen2-MoE adds a shared expert behind a sigmoid gate and biases on q, k and v; Qwen3-MoE
//! an RMS norm of each head's q and k, and a `head_dim` of its own.

use serde::Deserialize;

use super::blocks::attention::AttentionSpec;
use super::blocks::ffn::{FfnSpec, MoeNames, MoeSpec, SharedSpec};
use super::blocks::router::{RouterSpec, SoftmaxSpec};
use super::config::{parse, Common, MAX_SIZE};
use super::{DecoderSpec, LayerSpec, LoadError};

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    common: Common,
    /// transformers 5.x writes Qwen3-MoE's as `num_local_experts`.
    #[serde(alias = "num_local_experts")]
    num_experts: usize,
    num_experts_per_tok: usize,
    moe_intermediate_size: usize,
    intermediate_size: usize,
    #[serde(default = "one")]
    decoder_sparse_step: usize,
    #[serde(default)]
    mlp_only_layers: Vec<usize>,
    #[serde(default)]
    norm_topk_prob: bool,
    /// Qwen2-MoE only.
    #[serde(default)]
    shared_expert_intermediate_size: Option<usize>,
    /// Qwen2-MoE (default true there).
    #[serde(default)]
    qkv_bias: Option<bool>,
    /// Qwen3-MoE (default false).
    #[serde(default)]
    attention_bias: bool,
}

fn one() -> usize {
    1
}

/// The decoder a Qwen2-MoE (`qwen3 == false`) or Qwen3-MoE config.json describes.
pub fn spec(config: &serde_json::Value, qwen3: bool) -> Result<DecoderSpec, LoadError> {
    let model_type = if qwen3 { "qwen3_moe" } else { "qwen2_moe" };
    let c: Config = parse(model_type, config)?;
    let common = &c.common;
    common.check()?;
    for (field, value) in [
        ("moe_intermediate_size", c.moe_intermediate_size),
        ("intermediate_size", c.intermediate_size),
        (
            "shared_expert_intermediate_size",
            c.shared_expert_intermediate_size.unwrap_or(0),
        ),
    ] {
        common.at_most(field, value, MAX_SIZE)?;
    }
    if c.decoder_sparse_step == 0 {
        return Err(common.invalid("decoder_sparse_step must be at least 1".into()));
    }
    let attention = AttentionSpec::Gqa(if qwen3 {
        common.gqa(c.attention_bias, c.attention_bias, true)?
    } else {
        common.gqa(c.qkv_bias.unwrap_or(true), false, false)?
    });
    let shared = match (qwen3, c.shared_expert_intermediate_size) {
        (false, Some(hidden)) if hidden > 0 => Some(SharedSpec {
            hidden,
            gated: true,
        }),
        _ => None,
    };
    // transformers' rule: sparse unless listed in mlp_only_layers, every decoder_sparse_step-th
    // layer (counting from 1), when there are experts.
    let sparse = |i: usize| {
        !c.mlp_only_layers.contains(&i)
            && c.num_experts > 0
            && (i + 1).is_multiple_of(c.decoder_sparse_step)
    };
    let layers = (0..common.num_hidden_layers)
        .map(|i| {
            let ffn = if sparse(i) {
                common.check_experts("num_experts", c.num_experts, c.num_experts_per_tok)?;
                FfnSpec::Sparse(MoeSpec {
                    router: RouterSpec::Softmax(SoftmaxSpec {
                        experts: c.num_experts,
                        top_k: c.num_experts_per_tok,
                        renormalize: c.norm_topk_prob,
                    }),
                    expert_hidden: c.moe_intermediate_size,
                    shared: shared.clone(),
                    names: MoeNames {
                        block: "mlp".into(),
                        expert: ["gate_proj".into(), "up_proj".into(), "down_proj".into()],
                        shared: "shared_expert".into(),
                        fused: false,
                    },
                })
            } else {
                FfnSpec::Dense(c.intermediate_size)
            };
            Ok(LayerSpec {
                attention: attention.clone(),
                ffn,
            })
        })
        .collect::<Result<_, LoadError>>()?;
    Ok(DecoderSpec {
        model_type: model_type.into(),
        vocab: common.vocab_size,
        hidden: common.hidden_size,
        eps: common.rms_norm_eps,
        layers,
        aux_loss_coef: common.router_aux_loss_coef.unwrap_or(0.0),
    })
}
