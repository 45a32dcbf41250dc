//! The config.json fields the families share, and their checks.

use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::blocks::attention::GqaSpec;
use super::blocks::rope::Rope;
use super::LoadError;

/// The most decoder layers a config.json may give: far past every published model (DeepSeek-V3
/// has 61, the largest dense models about 130), as llama.cpp bounds them (`LLAMA_MAX_LAYERS`).
/// The decoder is built from config.json before any tensor is read: a number past this is
/// refused by name instead of being allocated for.
pub const MAX_LAYERS: usize = 1024;
/// The most routed experts a layer may have (DeepSeek-V3 has 256, Kimi K2 384).
pub const MAX_EXPERTS: usize = 1 << 14;
/// The most routed experts of all layers together (DeepSeek-V3: 58 x 256 = 14 848), each of
/// which names tensors the checkpoint must hold.
pub const MAX_ROUTED_EXPERTS: usize = 1 << 18;
/// The largest size (vocabulary, hidden size, heads, head dims, intermediate sizes, ranks) a
/// config.json may give: the largest published vocabularies are about 2^18, hidden sizes 2^14.
/// Within it, products of two sizes cannot overflow.
pub const MAX_SIZE: usize = 1 << 24;

/// Fields every family's config.json has (transformers' names).
#[derive(Debug, Clone, Deserialize)]
pub struct Common {
    /// `model_type`.
    pub model_type: String,
    /// `vocab_size`.
    pub vocab_size: usize,
    /// `hidden_size`.
    pub hidden_size: usize,
    /// `num_hidden_layers`.
    pub num_hidden_layers: usize,
    /// `num_attention_heads`.
    pub num_attention_heads: usize,
    /// `num_key_value_heads` (the query heads when absent).
    pub num_key_value_heads: Option<usize>,
    /// `head_dim` (hidden / heads when absent or null).
    pub head_dim: Option<usize>,
    /// `rms_norm_eps`.
    pub rms_norm_eps: f64,
    /// `rope_theta` (transformers 4.x).
    #[serde(default)]
    pub rope_theta: Option<f64>,
    /// `rope_scaling` (transformers 4.x): only null is supported by these families (DeepSeek
    /// reads YaRN from it, see [`Common::rope_scaling_settings`]).
    #[serde(default)]
    pub rope_scaling: Option<serde_json::Value>,
    /// `rope_parameters` (transformers 5.x: `rope_theta` and the scaling in one object): only
    /// `rope_type` `default`, but for DeepSeek's YaRN.
    #[serde(default)]
    pub rope_parameters: Option<serde_json::Value>,
    /// `layer_types` (transformers 5.x): only `full_attention`.
    #[serde(default)]
    pub layer_types: Option<Vec<String>>,
    /// `hidden_act`: only `silu`.
    pub hidden_act: String,
    /// `tie_word_embeddings`: only false.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// `sliding_window`.
    #[serde(default)]
    pub sliding_window: Option<usize>,
    /// `use_sliding_window` (Qwen: the window applies only when it is true).
    #[serde(default)]
    pub use_sliding_window: Option<bool>,
    /// `router_aux_loss_coef`.
    #[serde(default)]
    pub router_aux_loss_coef: Option<f64>,
}

/// config.json as `T`, its errors naming the family.
pub fn parse<T: DeserializeOwned>(
    model_type: &str,
    config: &serde_json::Value,
) -> Result<T, LoadError> {
    T::deserialize(config).map_err(|e| LoadError::Config {
        model_type: model_type.into(),
        why: e.to_string(),
    })
}

impl Common {
    /// An error for `option`.
    pub fn unsupported(&self, option: &str, why: String) -> LoadError {
        LoadError::Unsupported {
            model_type: self.model_type.clone(),
            option: option.into(),
            why,
        }
    }

    /// Refuses `value` of `field` past `max` (see [`MAX_SIZE`]).
    pub fn at_most(&self, field: &str, value: usize, max: usize) -> Result<(), LoadError> {
        if value > max {
            return Err(self.invalid(format!(
                "{field} {value} is more than {max}, past any published model: nothing of that \
                 size is built"
            )));
        }
        Ok(())
    }

    /// An error for sizes that do not fit.
    pub fn invalid(&self, why: String) -> LoadError {
        LoadError::Config {
            model_type: self.model_type.clone(),
            why,
        }
    }

    /// Refuses sizes past [`MAX_LAYERS`] and [`MAX_SIZE`], and the options no family here
    /// implements: an activation other than SiLU, tied embeddings, rope scaling, a sliding
    /// attention window (`sliding_window` applies when set unless `use_sliding_window` says it
    /// does not).
    pub fn check(&self) -> Result<(), LoadError> {
        self.at_most("num_hidden_layers", self.num_hidden_layers, MAX_LAYERS)?;
        for (field, value) in [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.kv_heads()),
            ("head_dim", self.head_dim()),
        ] {
            self.at_most(field, value, MAX_SIZE)?;
        }
        if self.hidden_act != "silu" {
            return Err(self.unsupported(
                "hidden_act",
                format!("{:?}: only \"silu\" is implemented", self.hidden_act),
            ));
        }
        if self.tie_word_embeddings {
            return Err(self.unsupported(
                "tie_word_embeddings",
                "true: the LM head must be its own tensor lm_head.weight".into(),
            ));
        }
        if let Some((key, scaling)) = self.rope_scaling_settings() {
            return Err(self.unsupported(
                key,
                format!(
                    "rope_type {}: only the unscaled rotary embedding (\"default\") is implemented",
                    rope_kind(scaling)
                ),
            ));
        }
        self.rope_theta()?;
        if let Some(other) = self
            .layer_types
            .iter()
            .flatten()
            .find(|t| *t != "full_attention")
        {
            return Err(self.unsupported(
                "layer_types",
                format!("{other:?}: only \"full_attention\" is implemented"),
            ));
        }
        if let (Some(window), true) = (self.sliding_window, self.use_sliding_window.unwrap_or(true))
        {
            return Err(self.unsupported(
                "sliding_window",
                format!("{window}: attention over a sliding window is not implemented"),
            ));
        }
        let kv = self.kv_heads();
        if self.num_attention_heads == 0 || kv == 0 || !self.num_attention_heads.is_multiple_of(kv)
        {
            return Err(self.invalid(format!(
                "num_attention_heads {} is not a positive multiple of num_key_value_heads {kv}",
                self.num_attention_heads
            )));
        }
        if !self.head_dim().is_multiple_of(2) || self.head_dim() == 0 {
            return Err(self.invalid(format!(
                "the head dim {} must be even and positive for rotary embeddings",
                self.head_dim()
            )));
        }
        Ok(())
    }

    /// `rope_theta`, or `rope_parameters.rope_theta` (transformers 5.x).
    pub fn rope_theta(&self) -> Result<f64, LoadError> {
        self.rope_theta
            .or_else(|| {
                self.rope_parameters
                    .as_ref()
                    .and_then(|p| p.get("rope_theta"))
                    .and_then(|t| t.as_f64())
            })
            .ok_or_else(|| {
                self.invalid("neither rope_theta nor rope_parameters.rope_theta is given".into())
            })
    }

    /// The rotary scaling settings and the key they are under, `None` for the unscaled rotary
    /// embedding: `rope_scaling` (transformers 4.x) when set, else `rope_parameters`
    /// (transformers 5.x, rope_theta and the scaling in one object) unless its type is
    /// `"default"` or absent. transformers 5.x reads them in that order too.
    pub fn rope_scaling_settings(&self) -> Option<(&'static str, &serde_json::Value)> {
        if let Some(scaling) = self.rope_scaling.as_ref().filter(|s| !s.is_null()) {
            return Some(("rope_scaling", scaling));
        }
        self.rope_parameters
            .as_ref()
            .filter(|p| {
                p.get("rope_type")
                    .or_else(|| p.get("type"))
                    .is_some_and(|t| t != "default")
            })
            .map(|p| ("rope_parameters", p))
    }

    fn kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// The grouped-query attention these fields describe.
    pub fn gqa(&self, qkv_bias: bool, o_bias: bool, qk_norm: bool) -> Result<GqaSpec, LoadError> {
        Ok(GqaSpec {
            q_heads: self.num_attention_heads,
            kv_heads: self.kv_heads(),
            head_dim: self.head_dim(),
            qkv_bias,
            o_bias,
            qk_norm,
            eps: self.rms_norm_eps,
            rope: Rope::Default {
                theta: self.rope_theta()?,
            },
        })
    }

    /// Checks `top_k` of `experts` (config.json's `field`).
    pub fn check_experts(
        &self,
        field: &str,
        experts: usize,
        top_k: usize,
    ) -> Result<(), LoadError> {
        self.at_most(field, experts, MAX_EXPERTS)?;
        if experts == 0 || top_k == 0 || top_k > experts {
            return Err(self.invalid(format!(
                "experts per token {top_k} must be in 1..={experts} (the experts)"
            )));
        }
        Ok(())
    }
}

/// The `rope_type` (or older `type`) of a rope scaling object, quoted.
fn rope_kind(scaling: &serde_json::Value) -> String {
    scaling
        .get("rope_type")
        .or_else(|| scaling.get("type"))
        .map_or_else(|| scaling.to_string(), |t| t.to_string())
}
