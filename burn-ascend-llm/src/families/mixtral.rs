//! Mixtral: GQA with rope, every layer a MoE of SwiGLU experts behind a softmax top-k router
//! renormalised over the chosen experts (`block_sparse_moe.experts.E.{w1,w3,w2}`).

use serde::Deserialize;

use super::blocks::attention::AttentionSpec;
use super::blocks::ffn::{FfnSpec, MoeNames, MoeSpec};
use super::blocks::router::{RouterSpec, SoftmaxSpec};
use super::config::{parse, Common, MAX_SIZE};
use super::{DecoderSpec, LayerSpec, LoadError};

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    common: Common,
    num_local_experts: usize,
    num_experts_per_tok: usize,
    intermediate_size: usize,
    #[serde(default)]
    router_jitter_noise: f64,
}

/// The decoder a Mixtral config.json describes.
pub fn spec(config: &serde_json::Value) -> Result<DecoderSpec, LoadError> {
    let c: Config = parse("mixtral", config)?;
    let common = &c.common;
    common.check()?;
    common.check_experts(
        "num_local_experts",
        c.num_local_experts,
        c.num_experts_per_tok,
    )?;
    common.at_most("intermediate_size", c.intermediate_size, MAX_SIZE)?;
    if c.router_jitter_noise != 0.0 {
        // transformers multiplies the router's input by noise while training.
        return Err(common.unsupported(
            "router_jitter_noise",
            format!("{}: only 0 is implemented", c.router_jitter_noise),
        ));
    }
    let moe = MoeSpec {
        router: RouterSpec::Softmax(SoftmaxSpec {
            experts: c.num_local_experts,
            top_k: c.num_experts_per_tok,
            renormalize: true,
        }),
        expert_hidden: c.intermediate_size,
        shared: None,
        names: MoeNames {
            block: "block_sparse_moe".into(),
            expert: ["w1".into(), "w3".into(), "w2".into()],
            shared: String::new(),
            fused: false,
        },
    };
    let layer = LayerSpec {
        attention: AttentionSpec::Gqa(common.gqa(false, false, false)?),
        ffn: FfnSpec::Sparse(moe),
    };
    Ok(DecoderSpec {
        model_type: common.model_type.clone(),
        vocab: common.vocab_size,
        hidden: common.hidden_size,
        eps: common.rms_norm_eps,
        layers: vec![layer; common.num_hidden_layers],
        aux_loss_coef: common.router_aux_loss_coef.unwrap_or(0.0),
    })
}
