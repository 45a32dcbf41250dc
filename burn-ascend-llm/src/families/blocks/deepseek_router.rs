//! DeepSeek's MoE routers, as transformers 4.57.1 computes them: DeepSeek-V2's `greedy` and
//! `group_limited_greedy` over softmax scores, DeepSeek-V3's `noaux_tc` over sigmoid scores with
//! the selection-only correction bias, each one fused op (`moe_gating_softmax` or
//! `moe_group_topk`). Everything stays on the device: no value is read back, so a captured
//! decode step can route.

use burn::module::{Module, Param};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Int, Tensor, TensorPrimitive};
use burn_ascend::fused::GroupTopk;
use burn_ascend::FusedOps;

use crate::families::weights::{Expected, Sink, Source};
use crate::families::LoadError;
use crate::moe::model::Routing;

/// How a DeepSeek router chooses a token's experts (`topk_method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopkMethod {
    /// DeepSeek-V2 `greedy`: the top-k softmax scores.
    Greedy,
    /// DeepSeek-V2 `group_limited_greedy`: the experts are split into `n_group` groups scored
    /// by their best expert; only the best `topk_group` groups' experts compete.
    GroupLimitedGreedy {
        /// Groups of experts.
        n_group: usize,
        /// Groups kept per token.
        topk_group: usize,
    },
    /// DeepSeek-V3 `noaux_tc`: sigmoid scores plus the correction bias choose; a group scores
    /// the sum of its two best; the chosen experts weigh their unbiased scores.
    NoauxTc {
        /// Groups of experts.
        n_group: usize,
        /// Groups kept per token.
        topk_group: usize,
    },
}

/// The settings of a DeepSeek router.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RouterConfig {
    /// Routed experts.
    pub experts: usize,
    /// Experts per token.
    pub top_k: usize,
    /// How they are chosen.
    pub method: TopkMethod,
    /// Factor on the routing weights.
    pub routed_scaling_factor: f64,
    /// `noaux_tc` only: the chosen weights are renormalised to sum to 1 (before the factor).
    /// transformers 4.57.1's DeepSeek-V2 router ignores it.
    pub norm_topk_prob: bool,
}

impl RouterConfig {
    /// Checks that the sizes fit the method; the error says which do not.
    pub fn validate(&self) -> Result<(), String> {
        let (e, k) = (self.experts, self.top_k);
        if k == 0 || k > e {
            return Err(format!(
                "num_experts_per_tok {k} must be in 1..=n_routed_experts ({e})"
            ));
        }
        let (n_group, topk_group, least) = match self.method {
            TopkMethod::Greedy => return Ok(()),
            TopkMethod::GroupLimitedGreedy {
                n_group,
                topk_group,
            } => (n_group, topk_group, 1),
            // Each group scores its two best experts.
            TopkMethod::NoauxTc {
                n_group,
                topk_group,
            } => (n_group, topk_group, 2),
        };
        if n_group == 0 || !e.is_multiple_of(n_group) || e / n_group < least {
            return Err(format!(
                "n_group {n_group} must divide n_routed_experts {e} into groups of at least \
                 {least} experts"
            ));
        }
        if topk_group == 0 || topk_group > n_group {
            return Err(format!(
                "topk_group {topk_group} must be in 1..=n_group ({n_group})"
            ));
        }
        Ok(())
    }

    fn noaux(&self) -> bool {
        matches!(self.method, TopkMethod::NoauxTc { .. })
    }

    /// The gate's tensors under `prefix` (the MoE block's `gate`): `weight [E, hidden]` and,
    /// for `noaux_tc`, `e_score_correction_bias [E]`.
    pub fn expected(&self, prefix: &str, hidden: usize, out: &mut Expected) {
        out.tensor(format!("{prefix}.weight"), vec![self.experts, hidden]);
        if self.noaux() {
            out.tensor(
                format!("{prefix}.e_score_correction_bias"),
                vec![self.experts],
            );
        }
    }

    /// Loads the gate under `prefix`.
    pub fn load<B: Backend>(
        &self,
        prefix: &str,
        src: &Source<B>,
    ) -> Result<DeepseekRouter<B>, LoadError> {
        let bias = match self.noaux() {
            true => Some(
                src.tensor::<1>(&format!("{prefix}.e_score_correction_bias"))?
                    .map(|b| b.cast(DType::F32))
                    .set_require_grad(false),
            ),
            false => None,
        };
        let weight: Param<Tensor<B, 2>> = src.tensor(&format!("{prefix}.weight"))?;
        let saved = weight.val().dtype();
        Ok(DeepseekRouter {
            weight: weight.map(|w| w.cast(DType::F32)),
            e_score_correction_bias: bias,
            cfg: *self,
            saved,
        })
    }

    /// Each token's scores `[T, E]` (f32), experts `[T, k]` and weights `[T, k]` (in
    /// `weights_dtype`, rounded once) from the f32 router `logits [T, E]` and, for `noaux_tc`,
    /// the selection-only `bias [E]`: one `FusedOps::moe_group_topk` (one kernel launch on
    /// `Ascend`; `greedy` is its ungrouped softmax form).
    pub fn choose<B: FusedOps>(
        &self,
        logits: Tensor<B, 2>,
        bias: Option<Tensor<B, 1>>,
        weights_dtype: DType,
    ) -> (Tensor<B, 2>, Tensor<B, 2, Int>, Tensor<B, 2>) {
        let float = |t| Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(t));
        let (groups, keep_groups, noaux) = match self.method {
            TopkMethod::Greedy => (1, 1, false),
            TopkMethod::GroupLimitedGreedy {
                n_group,
                topk_group,
            } => (n_group, topk_group, false),
            TopkMethod::NoauxTc {
                n_group,
                topk_group,
            } => (n_group, topk_group, true),
        };
        let choice = GroupTopk {
            top_k: self.top_k,
            groups,
            keep_groups,
            group_top_two: noaux,
            sigmoid: noaux,
            gather_scores: noaux,
            // transformers 4.57.1's DeepSeek-V2 routers ignore norm_topk_prob.
            renormalize: noaux && self.norm_topk_prob,
            scale: self.routed_scaling_factor,
        };
        let bias = bias.filter(|_| noaux).map(|b| b.into_primitive().tensor());
        let g = B::moe_group_topk(
            logits.into_primitive().tensor(),
            bias,
            choice,
            weights_dtype,
        );
        let probs = g.probs.expect("the grouped choice gives its scores");
        (
            float(probs),
            Tensor::from_primitive(g.ids),
            float(g.weights),
        )
    }
}

/// A DeepSeek MoE gate: `weight [E, hidden]` (transformers' layout: `mlp.gate.weight`) and,
/// for `noaux_tc`, `e_score_correction_bias [E]` (a buffer: it takes no gradient).
///
/// The weight and the bias are held in f32 whatever the model's dtype: transformers computes
/// the gate's logits and scores in f32 (`F.linear(x.float(), weight.float())`), so holding them
/// so spares every step their casts, and the values are the checkpoint's exactly. They are
/// saved in the dtype the weight was loaded in.
#[derive(Module, Debug)]
pub struct DeepseekRouter<B: Backend> {
    /// `[E, hidden]`, f32.
    pub weight: Param<Tensor<B, 2>>,
    /// `[E]` the selection-only bias of `noaux_tc`.
    pub e_score_correction_bias: Option<Param<Tensor<B, 1>>>,
    /// The settings.
    #[module(skip)]
    pub cfg: RouterConfig,
    /// The dtype the weight and bias are saved in: the checkpoint's.
    #[module(skip)]
    pub saved: DType,
}

impl<B: Backend> DeepseekRouter<B> {
    /// A gate of normal(0, 0.02) weights (transformers' initialisation) and a zero bias for
    /// `noaux_tc`.
    pub fn new(cfg: RouterConfig, hidden: usize, device: &B::Device) -> Self {
        let weight = burn::nn::Initializer::Normal {
            mean: 0.0,
            std: 0.02,
        }
        .init([cfg.experts, hidden], device);
        let e_score_correction_bias = cfg.noaux().then(|| {
            Param::from_tensor(Tensor::zeros([cfg.experts], device)).set_require_grad(false)
        });
        let saved = weight.val().dtype();
        Self {
            weight: weight.map(|w| w.cast(DType::F32)),
            e_score_correction_bias,
            cfg,
            saved,
        }
    }

    /// Writes the gate's tensors under `prefix`.
    pub fn save(&self, prefix: &str, out: &mut Sink) {
        let weight = self.weight.val().cast(self.saved).into_data();
        out.0.push((format!("{prefix}.weight"), weight));
        if let Some(bias) = &self.e_score_correction_bias {
            let bias = bias.val().cast(self.saved).into_data();
            out.0
                .push((format!("{prefix}.e_score_correction_bias"), bias));
        }
    }
}

impl<B: FusedOps> DeepseekRouter<B> {
    /// Routes `x [T, hidden]` ([`RouterConfig::choose`] of its f32 logits): the scores are the
    /// routing's `probs`, the weights come in x's dtype.
    pub fn route(&self, x: Tensor<B, 2>) -> Routing<B> {
        let dtype = x.dtype();
        let logits = x.cast(DType::F32).matmul(self.weight.val().transpose());
        let bias = self.e_score_correction_bias.as_ref().map(Param::val);
        let (probs, ids, weights) = self.cfg.choose(logits, bias, dtype);
        Routing::from_choices(probs, ids, weights)
    }
}
