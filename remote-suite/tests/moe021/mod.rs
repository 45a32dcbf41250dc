//! The Burn 0.21 side of the MoE decoder through the remote device, shared by the test
//! (`moe_decode.rs`) and the example (`examples/remote_decode.rs`): the example's model in a
//! small configuration, trained in process on the emulated NPU, and its weights in the Burn 0.22
//! program's layout (`burn_ascend_remote_suite::moe::Weights`), read from the model's record.

use burn::tensor::TensorData;
use burn021::module::{AutodiffModule, Param};
use burn021::tensor::Tensor as Tensor21;
use burn_ascend::{Ascend, AscendDevice};
use burn_ascend_llm::engine::serve::{Request, ServeConfig};
use burn_ascend_llm::families::blocks::quant::ProjectionRecord;
use burn_ascend_llm::moe::config::MoeConfig;
use burn_ascend_llm::moe::corpus;
use burn_ascend_llm::moe::model::{
    split_gate_up, ExpertsRecord, MoeDecoder as MoeDecoder21, NormRecord,
};
use burn_ascend_llm::moe::train::{train, TrainConfig};
use burn_ascend_remote_suite::moe::{BlockWeights, MoeSizes, NormWeights, Weights};
use burn_autodiff::Autodiff;

/// The example's prompts (`examples/moe_decoder`): 21, 11, 49 and 7 bytes.
pub const PROMPTS: [&str; 4] = [
    "The lighthouse keeper",
    "She counted",
    "In the evenings the keeper taught his daughter to",
    "The sea",
];

/// Tokens generated per prompt (the longest prompt then fills the 64 slots of its pages but
/// three).
pub const NEW_TOKENS: usize = 12;

/// Pages of 4 slots on both sides, so every prompt spans several pages.
pub const PAGE_SIZE: usize = 4;
/// Pages per prompt: 64 slots, the model's longest sequence.
pub const PAGES: usize = 16;

/// The prompts as greedy requests of [`NEW_TOKENS`] each.
pub fn requests() -> Vec<Request> {
    PROMPTS
        .iter()
        .map(|p| Request::greedy(p.bytes().map(u32::from).collect(), NEW_TOKENS))
        .collect()
}

/// The in-process server's settings for the prompts, recording each step's logits if asked.
pub fn serving(cfg: &MoeConfig, record_logits: bool) -> ServeConfig {
    ServeConfig {
        pages: PAGES * PROMPTS.len(),
        page_size: PAGE_SIZE,
        max_seq: cfg.max_seq,
        max_kv_splits: 4,
        step_tokens: 32,
        max_waiting: PROMPTS.len(),
        record_logits,
    }
}

/// A small model, so that training and both decodes take seconds in a debug build.
pub fn small() -> MoeConfig {
    MoeConfig::new()
        .with_hidden(64)
        .with_layers(2)
        .with_q_heads(4)
        .with_kv_heads(2)
        .with_experts(4)
        .with_top_k(2)
        .with_expert_hidden(128)
        .with_max_seq(64)
}

pub fn sizes(cfg: &MoeConfig) -> MoeSizes {
    MoeSizes {
        vocab: cfg.vocab,
        hidden: cfg.hidden,
        layers: cfg.layers,
        q_heads: cfg.q_heads,
        kv_heads: cfg.kv_heads,
        experts: cfg.experts,
        top_k: cfg.top_k,
        expert_hidden: cfg.expert_hidden,
        rope_theta: cfg.rope_theta,
        eps: cfg.eps,
    }
}

/// A Burn 0.21 parameter's values as Burn 0.22 data (reading them: a user-requested transfer).
fn data<const D: usize>(p: Param<Tensor21<Ascend, D>>) -> TensorData {
    let d = p.val().into_data().convert::<f32>();
    TensorData::new(d.to_vec::<f32>().expect("f32"), d.shape.as_slice().to_vec())
}

fn norm(n: NormRecord<Ascend>) -> NormWeights<TensorData> {
    NormWeights {
        gamma: data(n.gamma),
        beta: data(n.beta),
    }
}

fn projection(p: ProjectionRecord<Ascend>) -> TensorData {
    match p {
        ProjectionRecord::Float(linear) => data(linear.weight),
        ProjectionRecord::Quantized(_) => panic!("the test's model is not quantized"),
    }
}

/// The Burn 0.21 model's weights in the layout of the Burn 0.22 program's file.
pub fn weights(model: MoeDecoder21<Ascend>) -> Weights<TensorData> {
    use burn021::module::Module;
    let r = model.into_record();
    Weights {
        embed: data(r.embed.weight),
        blocks: r
            .blocks
            .into_iter()
            .map(|b| {
                let ExpertsRecord::Float(experts) = b.moe.experts else {
                    panic!("the test's model is not quantized")
                };
                // Burn 0.21's experts keep gate and up side by side; the 0.22 program apart.
                let [gate, up] = split_gate_up(experts.gate_up.val()).map(Param::from_tensor);
                BlockWeights {
                    attn_norm: norm(b.attn_norm),
                    q: projection(b.attn.q),
                    k: projection(b.attn.k),
                    v: projection(b.attn.v),
                    o: projection(b.attn.o),
                    ffn_norm: norm(b.ffn_norm),
                    router: data(b.moe.router.weight),
                    gate: data(gate),
                    up: data(up),
                    down: data(experts.down),
                }
            })
            .collect(),
        norm: norm(r.norm),
        head: data(r.head.weight),
    }
}

/// The model trained a few steps on the shipped corpus, so that its greedy choices are clear
/// (an untrained model's logits are near ties), and the training losses.
pub fn trained(cfg: &MoeConfig, device: &AscendDevice) -> (MoeDecoder21<Ascend>, Vec<f32>) {
    // Seeded: the same weights, hence the same margins, on every run.
    <Autodiff<Ascend> as burn021::tensor::backend::Backend>::seed(device, 26);
    let model = MoeDecoder21::<Autodiff<Ascend>>::new(cfg, device).expect("a valid config");
    let settings = TrainConfig {
        steps: 20,
        batch: 4,
        seq_len: 32,
        learning_rate: 1e-2,
        aux_weight: 0.01,
    };
    let mut losses = Vec::new();
    let model = train(model, &corpus::tokens(), &settings, device, |r| {
        losses.push(r.loss)
    })
    .expect("finite losses");
    (model.valid(), losses)
}
