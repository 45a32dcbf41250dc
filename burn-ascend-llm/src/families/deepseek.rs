//! DeepSeek-V2 and DeepSeek-V3 (`model_type` `deepseek_v2`, `deepseek_v3`), as transformers
//! 4.57.1 ports them: multi-head latent attention ([`blocks::mla`]) with the default or YaRN
//! rotary embedding ([`blocks::yarn`]), the first `first_k_dense_replace` layers dense SwiGLU
//! MLPs and the others routed SwiGLU experts (`mlp.experts.E.{gate,up,down}_proj`) plus
//! `n_shared_experts` shared ones fused into one MLP (`mlp.shared_experts`), behind
//! DeepSeek's routers ([`blocks::deepseek_router`]): V2's `greedy` or `group_limited_greedy`
//! over softmax scores, V3's `noaux_tc` over sigmoid scores.
//!
//! transformers' readings that differ from DeepSeek's own code, followed here (the checkpoints'
//! reference outputs are transformers'): V2 never renormalises the routing weights
//! (`norm_topk_prob` is ignored); `moe_layer_freq` is not read (only 1 is accepted here); the
//! router's auxiliary loss is not computed (`aux_loss_alpha` is not read). The softmax scale
//! has YaRN's `mscale(factor, mscale_all_dim)^2` in both, as DeepSeek's code and transformers
//! 5 have it (4.57.1's V2 leaves it out: `tests/fixtures/hf/deepseek_v2`'s reference is
//! 5.24.0's).
//!
//! config.json as transformers 5.x writes it reads the same: rope_theta and YaRN from
//! `rope_parameters` ([`Common::rope_scaling_settings`]); `qk_head_dim` (5.x recomputes it too),
//! `pretraining_tp` and `num_nextn_predict_layers` are not read: V3's multi-token-prediction
//! layers are never built, their tensors skipped when stored ([`ignored`]), none expected.
//!
//! [`blocks::mla`]: super::blocks::mla
//! [`blocks::yarn`]: super::blocks::yarn
//! [`blocks::deepseek_router`]: super::blocks::deepseek_router

use serde::Deserialize;

use super::blocks::attention::AttentionSpec;
use super::blocks::deepseek_router::{RouterConfig, TopkMethod};
use super::blocks::ffn::{FfnSpec, MoeNames, MoeSpec, SharedSpec};
use super::blocks::mla::MlaConfig;
use super::blocks::router::RouterSpec;
use super::blocks::yarn::{Rotary, Yarn};
use super::config::{parse, Common, MAX_EXPERTS, MAX_SIZE};
use super::{DecoderSpec, LayerSpec, LoadError};

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    common: Common,
    max_position_embeddings: usize,
    intermediate_size: usize,
    moe_intermediate_size: usize,
    n_routed_experts: usize,
    #[serde(default)]
    n_shared_experts: Option<usize>,
    num_experts_per_tok: usize,
    #[serde(default)]
    first_k_dense_replace: Option<usize>,
    #[serde(default)]
    moe_layer_freq: Option<usize>,
    #[serde(default)]
    q_lora_rank: Option<usize>,
    kv_lora_rank: usize,
    qk_nope_head_dim: usize,
    qk_rope_head_dim: usize,
    v_head_dim: usize,
    #[serde(default)]
    routed_scaling_factor: Option<f64>,
    #[serde(default)]
    topk_method: Option<String>,
    #[serde(default)]
    scoring_func: Option<String>,
    #[serde(default)]
    n_group: Option<usize>,
    #[serde(default)]
    topk_group: Option<usize>,
    #[serde(default)]
    norm_topk_prob: Option<bool>,
    #[serde(default)]
    rope_interleave: Option<bool>,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default)]
    mlp_bias: bool,
}

/// The YaRN settings of `rope_scaling` (transformers 4.x) or `rope_parameters` (5.x, the same
/// keys plus rope_theta), or `None` for the unscaled rotary embedding; other kinds are refused.
fn yarn(common: &Common, max_position_embeddings: usize) -> Result<Option<Yarn>, LoadError> {
    let Some((field, scaling)) = common.rope_scaling_settings() else {
        return Ok(None);
    };
    let kind = scaling.get("rope_type").or_else(|| scaling.get("type"));
    if kind.and_then(|k| k.as_str()) != Some("yarn") {
        let kind = kind.map_or_else(|| scaling.to_string(), |k| k.to_string());
        return Err(common.unsupported(
            field,
            format!(
                "{kind}: only unscaled and \"yarn\" rotary embeddings are implemented for DeepSeek"
            ),
        ));
    }
    let number = |key: &str| -> Result<Option<f64>, LoadError> {
        match scaling.get(key).filter(|v| !v.is_null()) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| common.invalid(format!("{field}.{key} must be a number, got {v}"))),
        }
    };
    // transformers tests these keys for truth: 0 counts as absent.
    let given =
        |key: &str| -> Result<Option<f64>, LoadError> { Ok(number(key)?.filter(|v| *v != 0.0)) };
    let factor = number("factor")?
        .ok_or_else(|| common.invalid(format!("{field} of type yarn needs a factor")))?;
    let truncate = match scaling.get("truncate").filter(|v| !v.is_null()) {
        None => true,
        Some(v) => v.as_bool().ok_or_else(|| {
            common.invalid(format!("{field}.truncate must be a boolean, got {v}"))
        })?,
    };
    Ok(Some(Yarn {
        factor,
        original_max_position_embeddings: given("original_max_position_embeddings")?
            .unwrap_or(max_position_embeddings as f64),
        beta_fast: given("beta_fast")?.unwrap_or(32.0),
        beta_slow: given("beta_slow")?.unwrap_or(1.0),
        mscale: given("mscale")?,
        mscale_all_dim: given("mscale_all_dim")?,
        attention_factor: number("attention_factor")?,
        truncate,
    }))
}

/// The router of a V2 (`v3 == false`) or V3 config.
fn router(c: &Config, v3: bool) -> Result<RouterConfig, LoadError> {
    let common = &c.common;
    let (method, scoring) = match (v3, c.topk_method.as_deref()) {
        // transformers' V3 always routes noaux_tc (published configs name it).
        (true, None | Some("noaux_tc")) => ("noaux_tc", "sigmoid"),
        (false, None | Some("greedy")) => ("greedy", "softmax"),
        (false, Some("group_limited_greedy")) => ("group_limited_greedy", "softmax"),
        (_, Some(other)) => {
            let supported = if v3 {
                "\"noaux_tc\""
            } else {
                "\"greedy\" and \"group_limited_greedy\""
            };
            return Err(common.unsupported(
                "topk_method",
                format!("{other:?}: {} implements {supported}", common.model_type),
            ));
        }
    };
    if let Some(func) = c.scoring_func.as_deref().filter(|f| *f != scoring) {
        return Err(common.unsupported(
            "scoring_func",
            format!("{func:?}: topk_method {method} scores with {scoring}"),
        ));
    }
    let groups = || -> Result<(usize, usize), LoadError> {
        match (c.n_group, c.topk_group) {
            (Some(n_group), Some(topk_group)) => Ok((n_group, topk_group)),
            _ => Err(common.invalid(format!("topk_method {method} needs n_group and topk_group"))),
        }
    };
    let method = match method {
        "noaux_tc" => {
            let (n_group, topk_group) = groups()?;
            TopkMethod::NoauxTc {
                n_group,
                topk_group,
            }
        }
        "group_limited_greedy" => {
            let (n_group, topk_group) = groups()?;
            TopkMethod::GroupLimitedGreedy {
                n_group,
                topk_group,
            }
        }
        _ => TopkMethod::Greedy,
    };
    let cfg = RouterConfig {
        experts: c.n_routed_experts,
        top_k: c.num_experts_per_tok,
        method,
        // transformers' defaults: V3 2.5 and renormalised, V2 1.0 (never renormalised).
        routed_scaling_factor: c
            .routed_scaling_factor
            .unwrap_or(if v3 { 2.5 } else { 1.0 }),
        norm_topk_prob: v3 && c.norm_topk_prob.unwrap_or(true),
    };
    cfg.validate().map_err(|why| common.invalid(why))?;
    Ok(cfg)
}

/// The decoder a DeepSeek-V2 (`v3 == false`) or DeepSeek-V3 config.json describes.
pub fn spec(config: &serde_json::Value, v3: bool) -> Result<DecoderSpec, LoadError> {
    let model_type = if v3 { "deepseek_v3" } else { "deepseek_v2" };
    let c: Config = parse(model_type, config)?;
    let common = &c.common;
    // Before the shared checks, which see qk_rope_head_dim as head_dim.
    for (field, value) in [
        ("intermediate_size", c.intermediate_size),
        ("moe_intermediate_size", c.moe_intermediate_size),
        ("q_lora_rank", c.q_lora_rank.unwrap_or(0)),
        ("kv_lora_rank", c.kv_lora_rank),
        ("qk_nope_head_dim", c.qk_nope_head_dim),
        ("qk_rope_head_dim", c.qk_rope_head_dim),
        ("v_head_dim", c.v_head_dim),
    ] {
        common.at_most(field, value, MAX_SIZE)?;
    }
    common.at_most("n_routed_experts", c.n_routed_experts, MAX_EXPERTS)?;
    common.at_most(
        "n_shared_experts",
        c.n_shared_experts.unwrap_or(0),
        MAX_EXPERTS,
    )?;
    let theta = common.rope_theta()?;
    // The shared checks, but the rope scaling, which DeepSeek reads itself (YaRN).
    Common {
        rope_theta: Some(theta),
        rope_scaling: None,
        rope_parameters: None,
        head_dim: Some(c.qk_rope_head_dim),
        ..common.clone()
    }
    .check()?;
    let heads = common.num_attention_heads;
    if common.num_key_value_heads.is_some_and(|kv| kv != heads) {
        return Err(common.unsupported(
            "num_key_value_heads",
            format!(
                "{:?}: multi-head latent attention gives every one of the {heads} heads its own \
                 key and value (transformers' attention breaks otherwise)",
                common.num_key_value_heads
            ),
        ));
    }
    // transformers sets head_dim to qk_rope_head_dim; YaRN's frequencies are over head_dim.
    if common.head_dim.is_some_and(|d| d != c.qk_rope_head_dim) {
        return Err(common.invalid(format!(
            "head_dim {:?} must equal qk_rope_head_dim {} (the rotary dims)",
            common.head_dim, c.qk_rope_head_dim
        )));
    }
    if c.mlp_bias {
        return Err(common.unsupported(
            "mlp_bias",
            "true: the MLPs and experts are implemented without biases".into(),
        ));
    }
    if c.moe_layer_freq.is_some_and(|f| f != 1) {
        return Err(common.unsupported(
            "moe_layer_freq",
            format!(
                "{:?}: transformers does not read it (every layer from first_k_dense_replace on \
                 is MoE); only 1 is accepted",
                c.moe_layer_freq
            ),
        ));
    }
    if [c.kv_lora_rank, c.qk_rope_head_dim, c.v_head_dim].contains(&0)
        || c.q_lora_rank == Some(0)
        || !c.qk_rope_head_dim.is_multiple_of(2)
    {
        return Err(common.invalid(format!(
            "kv_lora_rank {}, q_lora_rank {:?}, qk_rope_head_dim {} (even) and v_head_dim {} must \
             be positive",
            c.kv_lora_rank, c.q_lora_rank, c.qk_rope_head_dim, c.v_head_dim
        )));
    }
    let yarn = yarn(common, c.max_position_embeddings)?;
    // V3 interleaves by default; V2's complex-number rope always pairs adjacent dims.
    let interleaved = !v3 || c.rope_interleave.unwrap_or(true);
    let rotary = match &yarn {
        Some(y) => Rotary::yarn(c.qk_rope_head_dim, theta, y, interleaved),
        None => Rotary::default_rope(c.qk_rope_head_dim, theta, interleaved),
    };
    // qk_head_dim^-0.5 times YaRN's mscale(factor, mscale_all_dim)^2, as DeepSeek's own code,
    // transformers' V3 and transformers >= 5's V2 scale (4.57.1's V2 omitted the mscale^2).
    let sm_scale = ((c.qk_nope_head_dim + c.qk_rope_head_dim) as f64).powf(-0.5)
        * yarn.as_ref().map_or(1.0, Yarn::softmax_scale_multiplier);
    let attention = AttentionSpec::Mla(MlaConfig {
        hidden: common.hidden_size,
        heads,
        q_lora_rank: c.q_lora_rank,
        kv_lora_rank: c.kv_lora_rank,
        qk_nope_head_dim: c.qk_nope_head_dim,
        qk_rope_head_dim: c.qk_rope_head_dim,
        v_head_dim: c.v_head_dim,
        attention_bias: c.attention_bias,
        // transformers builds q_a_layernorm and kv_a_layernorm with its default eps.
        latent_norm_eps: 1e-6,
        sm_scale,
        rotary,
    });
    // transformers' defaults: V3 3 dense layers, V2 none.
    let dense_layers = c.first_k_dense_replace.unwrap_or(if v3 { 3 } else { 0 });
    let moe = if dense_layers < common.num_hidden_layers {
        Some(MoeSpec {
            router: RouterSpec::Deepseek(router(&c, v3)?),
            expert_hidden: c.moe_intermediate_size,
            shared: c.n_shared_experts.filter(|n| *n > 0).map(|n| SharedSpec {
                hidden: n * c.moe_intermediate_size,
                gated: false,
            }),
            names: MoeNames {
                block: "mlp".into(),
                expert: ["gate_proj".into(), "up_proj".into(), "down_proj".into()],
                shared: "shared_experts".into(),
                // transformers 4.x stores each expert apart.
                fused: false,
            },
        })
    } else {
        None
    };
    let layers = (0..common.num_hidden_layers)
        .map(|i| LayerSpec {
            attention: attention.clone(),
            ffn: match &moe {
                Some(m) if i >= dense_layers => FfnSpec::Sparse(m.clone()),
                _ => FfnSpec::Dense(c.intermediate_size),
            },
        })
        .collect();
    Ok(DecoderSpec {
        model_type: model_type.into(),
        vocab: common.vocab_size,
        hidden: common.hidden_size,
        eps: common.rms_norm_eps,
        layers,
        aux_loss_coef: 0.0,
    })
}

/// Tensors of a checkpoint that are not its decoder's: DeepSeek-V3's multi-token prediction
/// layers, stored as `model.layers.N.*` past `num_hidden_layers` (transformers skips them too).
/// Nothing for other families, where such a tensor is an error.
pub fn ignored(config: &serde_json::Value) -> impl Fn(&str) -> bool {
    let v3 = config.get("model_type").and_then(serde_json::Value::as_str) == Some("deepseek_v3");
    let layers = config
        .get("num_hidden_layers")
        .and_then(serde_json::Value::as_u64)
        .filter(|_| v3)
        .unwrap_or(u64::MAX);
    move |name: &str| {
        name.strip_prefix("model.layers.")
            .and_then(|rest| rest.split('.').next())
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|n| n >= layers)
    }
}
