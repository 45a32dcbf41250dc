//! Routers: which experts each token goes to, with what weights.
//!
//! Every router gives a [`Routing`] (the built-in decoder's), computed on the device without
//! reading anything back, so a decode step that routes can be captured into a graph.

use burn::module::Module;
use burn::nn::Linear;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorPrimitive};
use burn_ascend::FusedOps;

use super::deepseek_router::{DeepseekRouter, RouterConfig};
use crate::families::weights::{Expected, Sink, Source};
use crate::families::LoadError;
pub use crate::moe::model::{RouterProbs, Routing};

/// Softmax over the router's logits, then each token's top-k.
#[derive(Debug, Clone, PartialEq)]
pub struct SoftmaxSpec {
    /// Routed experts.
    pub experts: usize,
    /// Experts per token.
    pub top_k: usize,
    /// Whether the chosen experts' probabilities are divided by their sum (Mixtral always;
    /// Qwen's `norm_topk_prob`).
    pub renormalize: bool,
}

/// What a router is (config side).
#[derive(Debug, Clone, PartialEq)]
pub enum RouterSpec {
    /// [`SoftmaxRouter`].
    Softmax(SoftmaxSpec),
    /// [`DeepseekRouter`].
    Deepseek(RouterConfig),
}

impl RouterSpec {
    /// Routed experts.
    pub fn experts(&self) -> usize {
        match self {
            RouterSpec::Softmax(s) => s.experts,
            RouterSpec::Deepseek(d) => d.experts,
        }
    }

    /// Experts per token.
    pub fn top_k(&self) -> usize {
        match self {
            RouterSpec::Softmax(s) => s.top_k,
            RouterSpec::Deepseek(d) => d.top_k,
        }
    }

    /// The router's tensors, under `prefix` (the MoE block's `gate`).
    pub fn expected(&self, prefix: &str, hidden: usize, out: &mut Expected) {
        match self {
            RouterSpec::Softmax(s) => out.float_linear(prefix, hidden, s.experts, false),
            RouterSpec::Deepseek(d) => d.expected(prefix, hidden, out),
        }
    }

    /// Loads the router.
    pub fn load<B: Backend>(&self, prefix: &str, src: &Source<B>) -> Result<Router<B>, LoadError> {
        Ok(match self {
            RouterSpec::Softmax(s) => Router::Softmax(SoftmaxRouter {
                gate: src.linear(prefix, false)?,
                spec: s.clone(),
            }),
            RouterSpec::Deepseek(d) => Router::Deepseek(d.load(prefix, src)?),
        })
    }
}

/// The softmax top-k router of Mixtral and Qwen-MoE: a linear gate `[H, E]` without bias.
#[derive(Module, Debug)]
pub struct SoftmaxRouter<B: Backend> {
    gate: Linear<B>,
    #[module(skip)]
    spec: SoftmaxSpec,
}

/// A MoE layer's router.
#[derive(Module, Debug)]
pub enum Router<B: Backend> {
    /// [`SoftmaxRouter`].
    Softmax(SoftmaxRouter<B>),
    /// [`DeepseekRouter`].
    Deepseek(DeepseekRouter<B>),
}

impl<B: FusedOps> Router<B> {
    /// Routes `x [T, H]`.
    pub fn route(&self, x: Tensor<B, 2>) -> Routing<B> {
        match self {
            Router::Softmax(r) => {
                // As transformers: the softmax, the choice and the renormalisation in f32, the
                // weights in the model's dtype (a half-precision softmax would tie or swap
                // close experts); one launch on Ascend.
                let logits = r.gate.forward(x);
                let g = B::moe_gating_softmax(
                    logits.clone().into_primitive().tensor(),
                    r.spec.top_k,
                    r.spec.renormalize,
                );
                let probs = match g.probs {
                    Some(p) => {
                        RouterProbs::Probs(Tensor::from_primitive(TensorPrimitive::Float(p)))
                    }
                    None => RouterProbs::Logits(logits),
                };
                Routing::from_choices(
                    probs,
                    Tensor::from_primitive(g.ids),
                    Tensor::from_primitive(TensorPrimitive::Float(g.weights)),
                )
            }
            Router::Deepseek(r) => r.route(x),
        }
    }

    /// Writes the router's tensors under `prefix`.
    pub fn save(&self, prefix: &str, out: &mut Sink) {
        match self {
            Router::Softmax(r) => out.linear(prefix, &r.gate),
            Router::Deepseek(r) => r.save(prefix, out),
        }
    }
}
