//! DeepSeek's MoE routers, as transformers 4.57.1 computes them: DeepSeek-V2's `greedy` and
//! `group_limited_greedy` over softmax scores, DeepSeek-V3's `noaux_tc` over sigmoid scores with
//! the selection-only correction bias. Every step stays on the device (top-k, comparisons,
//! gathers): no value is read back, so a captured decode step can route.

use burn::module::{Module, Param};
use burn::tensor::activation::{sigmoid, softmax};
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, DType, Int, Tensor, TensorPrimitive};
use burn_ascend::FusedOps;

use crate::families::weights::{Expected, Sink, Source};
use crate::families::LoadError;
use crate::moe::model::{RouterProbs, Routing};

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
                src.tensor(&format!("{prefix}.e_score_correction_bias"))?
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

    /// The scores of router logits `[T, E]`: softmax for DeepSeek-V2's methods, sigmoid for
    /// `noaux_tc`, in f32 (transformers scores in f32 whatever the model's dtype).
    pub fn scores<B: Backend>(&self, logits: Tensor<B, 2>) -> Tensor<B, 2> {
        let logits = logits.cast(DType::F32);
        match self.method {
            TopkMethod::NoauxTc { .. } => sigmoid(logits),
            _ => softmax(logits, 1),
        }
    }

    /// Each token's experts `[T, k]` and weights `[T, k]` (f32) from its `scores [T, E]` and,
    /// for `noaux_tc`, the correction `bias [E]` (zeros if `None`).
    pub fn choose<B: Backend>(
        &self,
        scores: Tensor<B, 2>,
        bias: Option<Tensor<B, 1>>,
    ) -> (Tensor<B, 2, Int>, Tensor<B, 2>) {
        let (k, factor) = (self.top_k, self.routed_scaling_factor);
        match self.method {
            TopkMethod::Greedy => {
                let (top, ids) = scores.topk_with_indices(k, 1);
                (ids, top * factor)
            }
            TopkMethod::GroupLimitedGreedy {
                n_group,
                topk_group,
            } => {
                let group_best = |grouped: Tensor<B, 3>| grouped.max_dim(2);
                let kept = keep_groups(scores.clone(), n_group, topk_group, group_best);
                let (top, ids) = kept.topk_with_indices(k, 1);
                (ids, top * factor)
            }
            TopkMethod::NoauxTc {
                n_group,
                topk_group,
            } => {
                let [_, e] = scores.dims();
                let choice = match bias {
                    Some(bias) => scores.clone() + bias.cast(DType::F32).reshape([1, e]),
                    None => scores.clone(),
                };
                let top_two = |grouped: Tensor<B, 3>| grouped.topk_with_indices(2, 2).0.sum_dim(2);
                let kept = keep_groups(choice, n_group, topk_group, top_two);
                let (_, ids) = kept.topk_with_indices(k, 1);
                let mut weights = scores.gather(1, ids.clone());
                if self.norm_topk_prob {
                    weights = weights.clone() / (weights.sum_dim(1) + 1e-20);
                }
                (ids, weights * factor)
            }
        }
    }
}

/// `scores [T, E]` with the experts outside each token's best `topk_group` groups set to 0
/// (as transformers masks them: a kept expert with a negative biased score ranks below them).
/// A group's score is `group_score` of its experts' scores `[T, G, E / G]`, giving `[T, G, 1]`.
fn keep_groups<B: Backend>(
    scores: Tensor<B, 2>,
    n_group: usize,
    topk_group: usize,
    group_score: impl Fn(Tensor<B, 3>) -> Tensor<B, 3>,
) -> Tensor<B, 2> {
    let [t, e] = scores.dims();
    let per_group = e / n_group;
    let grouped = scores.clone().reshape([t, n_group, per_group]);
    let group_scores = group_score(grouped).reshape([t, n_group]);
    let (_, groups) = group_scores.topk_with_indices(topk_group, 1);
    let all = Tensor::<B, 1, Int>::arange(0..n_group as i64, &groups.device());
    let kept: Tensor<B, 3, Bool> = groups
        .reshape([t, topk_group, 1])
        .equal(all.reshape([1, 1, n_group]))
        .any_dim(1);
    let kept = kept
        .reshape([t, n_group, 1])
        .expand([t, n_group, per_group])
        .reshape([t, e]);
    scores.mask_fill(kept.bool_not(), 0.0)
}

/// A DeepSeek MoE gate: `weight [E, hidden]` (transformers' layout: `mlp.gate.weight`) and,
/// for `noaux_tc`, `e_score_correction_bias [E]` (a buffer: it takes no gradient).
///
/// The weight is held in f32 whatever the model's dtype: transformers computes the gate's
/// logits in f32 (`F.linear(x.float(), weight.float())`), so holding it so spares every step a
/// cast of the weight, and the values are the checkpoint's exactly. It is saved in the dtype it
/// was loaded in.
#[derive(Module, Debug)]
pub struct DeepseekRouter<B: Backend> {
    /// `[E, hidden]`, f32.
    pub weight: Param<Tensor<B, 2>>,
    /// `[E]` the selection-only bias of `noaux_tc`.
    pub e_score_correction_bias: Option<Param<Tensor<B, 1>>>,
    /// The settings.
    #[module(skip)]
    pub cfg: RouterConfig,
    /// The dtype the weight is saved in: the checkpoint's.
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
            out.tensor(format!("{prefix}.e_score_correction_bias"), bias);
        }
    }
}

impl<B: FusedOps> DeepseekRouter<B> {
    /// Routes `x [T, hidden]`: the scores (f32) are the routing's `probs`, the weights take
    /// x's dtype. DeepSeek-V2's `greedy` softmax top-k is the softmax routers' operator
    /// without renormalisation (`FusedOps::moe_gating_softmax`, one
    /// aclnnMoeGatingTopKSoftmaxV2 on `Ascend`), its weights times `routed_scaling_factor`.
    pub fn route(&self, x: Tensor<B, 2>) -> Routing<B> {
        let dtype = x.dtype();
        let logits = x.cast(DType::F32).matmul(self.weight.val().transpose());
        if matches!(self.cfg.method, TopkMethod::Greedy) {
            let g = B::moe_gating_softmax(
                logits.clone().into_primitive().tensor(),
                self.cfg.top_k,
                false,
            );
            let float = |t| Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(t));
            let probs = match g.probs {
                Some(p) => RouterProbs::Probs(float(p)),
                None => RouterProbs::Logits(logits),
            };
            let factor = self.cfg.routed_scaling_factor;
            let weights = match factor {
                1.0 => float(g.weights),
                f => float(g.weights) * f,
            };
            return Routing::from_choices(
                probs,
                Tensor::from_primitive(g.ids),
                weights.cast(dtype),
            );
        }
        let scores = self.cfg.scores(logits);
        let (ids, weights) = self.cfg.choose(
            scores.clone(),
            self.e_score_correction_bias.as_ref().map(Param::val),
        );
        Routing::from_choices(scores, ids, weights.cast(dtype))
    }
}
