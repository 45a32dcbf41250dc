//! Feed-forward blocks: a dense SwiGLU MLP, or a sparse mixture of SwiGLU experts.

use std::ops::Range;

use burn::module::Module;
use burn::nn::Linear;
use burn::tensor::activation::{sigmoid, silu};
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor};
use burn_ascend::{fused, FusedOps};

use super::quant::{Projection, Projections, Quantize};
use super::router::{Router, RouterSpec, Routing};
use crate::families::parallel::{Group, Part};
use crate::families::weights::{Cut, Expected, Sink, Source};
use crate::families::LoadError;
use crate::moe::model::Experts;

/// The tensor names of a MoE block under its layer (`{layer}.{block}.…`).
#[derive(Debug, Clone, PartialEq)]
pub struct MoeNames {
    /// The block (`block_sparse_moe`, `mlp`).
    pub block: String,
    /// Each expert's gate, up and down projections (`w1`, `w3`, `w2`; `gate_proj`, …).
    pub expert: [String; 3],
    /// The shared expert (`shared_expert`, `shared_experts`).
    pub shared: String,
    /// Whether the experts are stored fused, as transformers 5.x can write them:
    /// `{block}.experts.gate_up_proj [E, 2F, H]` (each expert's gate rows, then its up rows)
    /// and `{block}.experts.down_proj [E, H, F]`, with `block` `mlp` in every family.
    pub fused: bool,
}

/// A shared expert every token goes through.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedSpec {
    /// Its intermediate size.
    pub hidden: usize,
    /// Whether a sigmoid gate `{block}.shared_expert_gate [1, H]` scales it (Qwen2-MoE).
    pub gated: bool,
}

/// A sparse MoE block.
#[derive(Debug, Clone, PartialEq)]
pub struct MoeSpec {
    /// How tokens are routed (and the experts count and top-k).
    pub router: RouterSpec,
    /// Each routed expert's intermediate size.
    pub expert_hidden: usize,
    /// The shared expert, if there is one.
    pub shared: Option<SharedSpec>,
    /// Tensor names.
    pub names: MoeNames,
}

/// A feed-forward block (config side).
#[derive(Debug, Clone, PartialEq)]
pub enum FfnSpec {
    /// A SwiGLU MLP of this intermediate size (`{layer}.mlp.{gate,up,down}_proj`).
    Dense(usize),
    /// Routed experts.
    Sparse(MoeSpec),
}

/// A SwiGLU MLP: `down(silu(gate(x)) * up(x))`, gate and up side by side where they join
/// (one matmul and one [`fused::swiglu`]).
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    gate_up: Projections<B>,
    down: Projection<B>,
}

impl<B: FusedOps> Mlp<B> {
    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let h = match self.gate_up.joined() {
            Some(p) => fused::swiglu(p.forward(x)),
            None => {
                let [g, u]: [Tensor<B, 2>; 2] = self
                    .gate_up
                    .forward(x)
                    .try_into()
                    .unwrap_or_else(|_| unreachable!("gate and up"));
                silu(g) * u
            }
        };
        self.down.forward(h)
    }

    /// The MLP's intermediate features `inner` (all of them, or a rank's share: gate and up
    /// by columns, down by rows; the ranks' outputs are summed, the `first` adding the
    /// constant terms).
    fn load(
        prefix: &str,
        src: &Source<B>,
        inner: Range<usize>,
        first: bool,
    ) -> Result<Self, LoadError> {
        let columns = Cut::Out {
            width: inner.len(),
            range: inner.clone(),
        };
        let gate = src.projection_part(&format!("{prefix}.gate_proj"), false, columns.clone())?;
        let up = src.projection_part(&format!("{prefix}.up_proj"), false, columns)?;
        Ok(Self {
            gate_up: Projections::new(vec![gate, up]),
            down: src.projection_part(
                &format!("{prefix}.down_proj"),
                false,
                Cut::In {
                    range: inner,
                    first,
                },
            )?,
        })
    }

    fn quantize(self, mode: Quantize) -> Self {
        Self {
            gate_up: self.gate_up.quantize(mode),
            down: self.down.quantize(mode),
        }
    }

    fn save(&self, prefix: &str, out: &mut Sink) {
        let names = ["gate_proj", "up_proj"].map(|n| format!("{prefix}.{n}"));
        self.gate_up.save(&names, out);
        self.down.save(&format!("{prefix}.down_proj"), out);
    }
}

/// Routed SwiGLU experts (stacked for the grouped matmul) and an optional shared expert.
#[derive(Module, Debug)]
pub struct SparseMoe<B: Backend> {
    router: Router<B>,
    /// Float or quantized ([`Ffn::quantize`]).
    experts: Experts<B>,
    shared: Option<Mlp<B>>,
    shared_gate: Option<Linear<B>>,
    #[module(skip)]
    spec: MoeSpec,
}

/// What a MoE block's routing contributes to the load-balancing loss (transformers'
/// `load_balancing_loss_func`, which averages over the tokens of every MoE layer together).
pub struct RouterStats<B: Backend> {
    /// The routing, whose counts and probabilities are computed when asked (serving does not).
    pub routing: Routing<B>,
}

impl<B: Backend> RouterStats<B> {
    /// `[E]` I64: (token, choice) pairs routed to each expert.
    pub fn counts(&self) -> Tensor<B, 1, Int> {
        self.routing.group_sizes()
    }

    /// `[T, E]` the router probabilities of each token.
    pub fn probs(self) -> Tensor<B, 2> {
        self.routing.probs.get()
    }
}

/// A layer's feed-forward block.
// A few dozen per model, each built once: the size of the smaller variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum Ffn<B: Backend> {
    /// A dense MLP.
    Dense(Mlp<B>),
    /// A sparse MoE block.
    Sparse(SparseMoe<B>),
}

impl FfnSpec {
    /// The block's tensors under `layer` (`model.layers.N`).
    pub fn expected(&self, layer: &str, hidden: usize, out: &mut Expected) {
        match self {
            FfnSpec::Dense(inner) => expected_mlp(&format!("{layer}.mlp"), hidden, *inner, out),
            FfnSpec::Sparse(m) => {
                let block = format!("{layer}.{}", m.names.block);
                let e = m.router.experts();
                m.router.expected(&format!("{block}.gate"), hidden, out);
                let f = m.expert_hidden;
                if m.names.fused {
                    out.tensor(
                        format!("{block}.experts.gate_up_proj"),
                        vec![e, 2 * f, hidden],
                    );
                    out.tensor(format!("{block}.experts.down_proj"), vec![e, hidden, f]);
                } else {
                    let [g, u, d] = &m.names.expert;
                    let name = |w: &str| expert_names(&block, w);
                    out.experts(name(g), e, hidden, f);
                    out.experts(name(u), e, hidden, f);
                    out.experts(name(d), e, f, hidden);
                }
                if let Some(s) = &m.shared {
                    let prefix = format!("{block}.{}", m.names.shared);
                    expected_mlp(&prefix, hidden, s.hidden, out);
                    if s.gated {
                        out.float_linear(&format!("{block}.shared_expert_gate"), hidden, 1, false);
                    }
                }
            }
        }
    }

    /// Loads the block under `layer`: the part `part` holds (its share of a dense MLP's and a
    /// shared expert's features, its range of the routed experts; see
    /// [`crate::families::parallel`]).
    pub fn load<B: FusedOps>(
        &self,
        layer: &str,
        src: &Source<B>,
        part: Part,
    ) -> Result<Ffn<B>, LoadError> {
        Ok(match self {
            FfnSpec::Dense(inner) => Ffn::Dense(Mlp::load(
                &format!("{layer}.mlp"),
                src,
                part.share(*inner),
                part.is_first(),
            )?),
            FfnSpec::Sparse(m) => {
                let block = format!("{layer}.{}", m.names.block);
                let e = part.experts(m.router.experts());
                let experts = if m.names.fused {
                    let fused = |name: &str| {
                        src.fused_experts(&format!("{block}.experts.{name}"), e.clone())
                    };
                    Experts::new(fused("gate_up_proj")?, fused("down_proj")?)
                } else {
                    let [g, u, d] = &m.names.expert;
                    let name = |w: &str| expert_names(&block, w);
                    let (g, u, d) = (name(g), name(u), name(d));
                    src.expert_set([&g, &u, &d], e)?
                };
                let shared = m.shared.as_ref();
                Ffn::Sparse(SparseMoe {
                    router: m.router.load(&format!("{block}.gate"), src)?,
                    experts,
                    shared: match shared {
                        Some(s) => Some(Mlp::load(
                            &format!("{block}.{}", m.names.shared),
                            src,
                            part.share(s.hidden),
                            part.is_first(),
                        )?),
                        None => None,
                    },
                    shared_gate: match shared {
                        Some(s) if s.gated => {
                            Some(src.linear(&format!("{block}.shared_expert_gate"), false)?)
                        }
                        _ => None,
                    },
                    spec: m.clone(),
                })
            }
        })
    }
}

/// The names `{block}.experts.{e}.{w}.weight` of the experts' weights `w`.
fn expert_names(block: &str, w: &str) -> impl Fn(usize) -> String {
    let (block, w) = (block.to_owned(), w.to_owned());
    move |e| format!("{block}.experts.{e}.{w}.weight")
}

fn expected_mlp(prefix: &str, hidden: usize, inner: usize, out: &mut Expected) {
    out.linear(&format!("{prefix}.gate_proj"), hidden, inner, false);
    out.linear(&format!("{prefix}.up_proj"), hidden, inner, false);
    out.linear(&format!("{prefix}.down_proj"), inner, hidden, false);
}

impl<B: FusedOps> Ffn<B> {
    /// `x [T, H]` through the block; a sparse block also gives its routing's statistics.
    pub fn forward(&self, x: Tensor<B, 2>) -> (Tensor<B, 2>, Option<RouterStats<B>>) {
        match self {
            Ffn::Dense(mlp) => (mlp.forward(x), None),
            Ffn::Sparse(moe) => {
                let (y, stats) = moe.forward(x);
                (y, Some(stats))
            }
        }
    }

    /// The shards' parts of the block over the step's tokens `xs[i] [T, H]` (the same on every
    /// shard, shard i's `blocks[i]`), to be summed over every rank: a dense MLP's share of the
    /// features; for a MoE block, the routed experts' output of the shard's chunk of the tokens
    /// (routed here, dispatched to the ranks holding their experts) placed among zero rows, plus
    /// its share of the shared expert.
    pub fn forward_ranks(
        blocks: &[&Self],
        xs: Vec<Tensor<B, 2>>,
        group: &Group<B>,
    ) -> Vec<Tensor<B, 2>> {
        let moes: Vec<&SparseMoe<B>> = match blocks
            .iter()
            .map(|b| match b {
                Ffn::Sparse(m) => Some(m),
                Ffn::Dense(_) => None,
            })
            .collect::<Option<Vec<_>>>()
        {
            Some(moes) => moes,
            None => {
                return blocks
                    .iter()
                    .zip(xs)
                    .map(|(b, x)| match b {
                        Ffn::Dense(mlp) => mlp.forward(x),
                        Ffn::Sparse(_) => unreachable!("every shard has the layer's kind"),
                    })
                    .collect()
            }
        };
        let [t, hidden] = xs[0].dims();
        let dtype = xs[0].dtype();
        let spec = &moes[0].spec;
        let chunks: Vec<Range<usize>> = group.parts().iter().map(|p| p.tokens(t)).collect();
        let routed: Vec<Option<(Tensor<B, 2>, Routing<B>)>> = xs
            .iter()
            .zip(&moes)
            .zip(&chunks)
            .map(|((x, moe), chunk)| {
                (!chunk.is_empty()).then(|| {
                    let x = x.clone().narrow(0, chunk.start, chunk.len());
                    let routing = moe.router.route(x.clone());
                    (x, routing)
                })
            })
            .collect();
        let inputs = routed
            .iter()
            .map(|r| r.as_ref().map(|(x, routing)| (x.clone(), routing)))
            .collect();
        let shards: Vec<&Experts<B>> = moes.iter().map(|m| &m.experts).collect();
        let experts = group.dispatch().forward(
            inputs,
            spec.router.top_k(),
            spec.router.experts(),
            &shards,
            (dtype, hidden),
        );
        experts
            .into_iter()
            .zip(xs)
            .zip(&moes)
            .zip(&chunks)
            .map(|(((y, x), moe), chunk)| {
                let device = x.device();
                let zeros = |rows: usize| Tensor::<B, 2>::zeros([rows, hidden], (&device, dtype));
                let mut out = match y {
                    Some(y) => {
                        let pieces = [zeros(chunk.start), y, zeros(t - chunk.end)];
                        Tensor::cat(pieces.into_iter().filter(|p| p.dims()[0] > 0).collect(), 0)
                    }
                    None => zeros(t),
                };
                if let Some(shared) = &moe.shared {
                    out = out + moe.gated_shared(shared, x);
                }
                out
            })
            .collect()
    }

    /// The block quantized for inference: dense MLPs, the shared expert and the routed
    /// experts; the router and the shared expert's gate stay float.
    pub fn quantize(self, mode: Quantize) -> Self {
        match self {
            Ffn::Dense(mlp) => Ffn::Dense(mlp.quantize(mode)),
            Ffn::Sparse(moe) => Ffn::Sparse(SparseMoe {
                experts: moe.experts.quantize(mode),
                shared: moe.shared.map(|s| s.quantize(mode)),
                ..moe
            }),
        }
    }

    /// Writes the block's tensors under `layer` (quantized experts and projections as the
    /// dequantized weights they compute with).
    pub fn save(&self, layer: &str, out: &mut Sink) {
        match self {
            Ffn::Dense(mlp) => mlp.save(&format!("{layer}.mlp"), out),
            Ffn::Sparse(moe) => {
                let names = &moe.spec.names;
                let block = format!("{layer}.{}", names.block);
                moe.router.save(&format!("{block}.gate"), out);
                let [gate, up, down] = moe.experts.weights();
                if names.fused {
                    let gate_up = format!("{block}.experts.gate_up_proj");
                    out.fused_experts(gate_up, [gate, up]);
                    out.fused_experts(format!("{block}.experts.down_proj"), [down]);
                } else {
                    let [g, u, d] = &names.expert;
                    let name = |w: &str| expert_names(&block, w);
                    out.experts(name(g), gate);
                    out.experts(name(u), up);
                    out.experts(name(d), down);
                }
                if let Some(shared) = &moe.shared {
                    shared.save(&format!("{block}.{}", names.shared), out);
                }
                if let Some(gate) = &moe.shared_gate {
                    out.linear(&format!("{block}.shared_expert_gate"), gate);
                }
            }
        }
    }
}

impl<B: FusedOps> SparseMoe<B> {
    /// The shared expert over `x`, times its sigmoid gate when it has one (a gate of `x`
    /// scales the shards' parts alike, so their sum is the whole expert's).
    fn gated_shared(&self, shared: &Mlp<B>, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let s = shared.forward(x.clone());
        match &self.shared_gate {
            Some(gate) => sigmoid(gate.forward(x)) * s,
            None => s,
        }
    }

    fn forward(&self, x: Tensor<B, 2>) -> (Tensor<B, 2>, RouterStats<B>) {
        let k = self.spec.router.top_k();
        let routing = self.router.route(x.clone());
        // The shared expert's output is added as the routed ones are summed.
        let shared = self
            .shared
            .as_ref()
            .map(|s| self.gated_shared(s, x.clone()));
        let out = self.experts.forward(x, &routing, k, shared);
        (out, RouterStats { routing })
    }
}
