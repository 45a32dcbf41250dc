//! The MoE decoder example's model on the fused paged path (`Ascend`: Ascend C kernels for
//! layer norm, routing, slot allocation and decode attention) against the reference path
//! (the same weights on burn-flex with the composed defaults and dense attention over the whole
//! sequence): logits at every decode step, greedy tokens, page reuse, bad input, training.

mod common;

use burn::module::Module;
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::AutodiffBackend;
use burn_ascend_suite::moe::config::MoeConfig;
use burn_ascend_suite::moe::corpus;
use burn_ascend_suite::moe::model::MoeDecoder;
use burn_ascend_suite::moe::serve::{reference_logits, Sampling, ServeConfig, ServeError, Server};
use burn_ascend_suite::moe::train::{train, TrainConfig};
use burn_autodiff::Autodiff;
use common::*;

fn small() -> MoeConfig {
    MoeConfig::new()
        .with_hidden(64)
        .with_layers(2)
        .with_q_heads(4)
        .with_kv_heads(2)
        .with_experts(4)
        .with_top_k(2)
        .with_expert_hidden(64)
        .with_max_seq(48)
}

fn serve_config() -> ServeConfig {
    // Pages of 4 slots, so every prompt crosses page boundaries.
    ServeConfig {
        pages: 64,
        page_size: 4,
        max_seq: 48,
        max_kv_splits: 3,
        record_logits: true,
    }
}

/// A fresh model's weights as bytes. Both sides load them, because Burn initialises parameters
/// lazily and a clone of an untouched module draws its own random weights.
fn weights(cfg: &MoeConfig) -> Vec<u8> {
    let model = MoeDecoder::<Flex>::new(cfg, &Default::default()).expect("a valid config");
    BinBytesRecorder::<FullPrecisionSettings>::default()
        .record(model.into_record(), ())
        .expect("record")
}

fn load<B: burn_ascend::FusedOps>(
    cfg: &MoeConfig,
    weights: &[u8],
    device: &B::Device,
) -> MoeDecoder<B> {
    let record = BinBytesRecorder::<FullPrecisionSettings>::default()
        .load(weights.to_vec(), device)
        .expect("load");
    MoeDecoder::<B>::new(cfg, device)
        .expect("a valid config")
        .load_record(record)
}

/// The same weights on both backends.
fn models(cfg: &MoeConfig) -> (MoeDecoder<Flex>, MoeDecoder<Ascend>) {
    let bytes = weights(cfg);
    (
        load(cfg, &bytes, &Default::default()),
        load(cfg, &bytes, &device()),
    )
}

fn prompt(text: &str) -> Vec<u32> {
    text.bytes().map(u32::from).collect()
}

#[test]
fn paged_decode_matches_the_dense_reference_at_every_step() {
    let cfg = small();
    let (reference, model) = models(&cfg);
    let mut server = Server::new(model, serve_config(), &device());
    let prompts = vec![
        prompt("The"),
        prompt("lighthouse keeper"),
        prompt("tide turned."),
    ];
    let out = server.generate(&prompts, 6, Sampling::Greedy);
    for (p, result) in prompts.iter().zip(&out.results) {
        let g = result.as_ref().expect("a valid prompt");
        assert_eq!(g.tokens.len(), 6);
        let mut seq = p.clone();
        for (step, (token, logits)) in g.tokens.iter().zip(&g.logits).enumerate() {
            let want = reference_logits(&reference, &seq, &Default::default());
            for (i, (a, b)) in logits.iter().zip(&want).enumerate() {
                assert!(
                    (a - b).abs() <= 2e-4 * b.abs().max(1.0),
                    "prompt {p:?} step {step}: logit {i} is {a}, the reference gives {b}"
                );
            }
            let best = want
                .iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map(|(i, _)| i as u32)
                .unwrap();
            assert_eq!(*token, best, "prompt {p:?} step {step}: greedy token");
            seq.push(*token);
        }
    }
}

#[test]
fn finished_requests_free_their_pages_for_the_next_batch() {
    let cfg = small();
    let (_, model) = models(&cfg);
    let mut server = Server::new(model, serve_config(), &device());
    let total = server.pool().free_pages();
    let prompts = vec![prompt("She counted the gulls"), prompt("Ten seconds")];
    let first = server.generate(&prompts, 5, Sampling::Greedy);
    assert_eq!(server.pool().free_pages(), total, "every page came back");
    let second = server.generate(&prompts, 5, Sampling::Greedy);
    for (a, b) in first.results.iter().zip(&second.results) {
        assert_eq!(
            a.as_ref().unwrap().tokens,
            b.as_ref().unwrap().tokens,
            "reused pages give the same continuation"
        );
    }
}

#[test]
fn bad_requests_fail_alone() {
    let cfg = small();
    let (_, model) = models(&cfg);
    let device = device();
    let mut server = Server::new(model.clone(), serve_config(), &device);
    let good = prompt("The sea");
    let batch = vec![good.clone(), Vec::new(), vec![65; 45], vec![72, 300, 73]];
    let out = server.generate(&batch, 4, Sampling::Greedy);
    assert_eq!(out.results[1], Err(ServeError::EmptyPrompt));
    assert!(matches!(
        out.results[2],
        Err(ServeError::TooLong {
            prompt: 45,
            new: 4,
            max: 48
        })
    ));
    assert!(matches!(
        out.results[3],
        Err(ServeError::BadToken {
            token: 300,
            position: 1,
            vocab: 256
        })
    ));
    let alone = Server::new(model, serve_config(), &device).generate(&[good], 4, Sampling::Greedy);
    assert_eq!(
        out.results[0].as_ref().unwrap().tokens,
        alone.results[0].as_ref().unwrap().tokens
    );
}

#[test]
fn heads_that_do_not_divide_are_a_clear_error() {
    let err = MoeDecoder::<Ascend>::new(&small().with_q_heads(4).with_kv_heads(3), &device())
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("q_heads 4 is not a multiple of kv_heads 3"),
        "{err}"
    );
}

fn train_losses<B: AutodiffBackend + burn_ascend::FusedOps>(
    model: MoeDecoder<B>,
    device: &B::Device,
) -> Vec<f32> {
    let cfg = TrainConfig {
        steps: 12,
        batch: 4,
        seq_len: 24,
        learning_rate: 1e-2,
        aux_weight: 0.01,
    };
    let mut losses = Vec::new();
    train(model, &corpus::tokens(), &cfg, device, |r| {
        losses.push(r.loss)
    });
    losses
}

#[test]
fn training_reduces_the_loss_and_follows_the_reference() {
    let cfg = small();
    let bytes = weights(&cfg);
    let device = device();
    let on_ascend = load::<Autodiff<Ascend>>(&cfg, &bytes, &device);
    let on_flex = load::<Autodiff<Flex>>(&cfg, &bytes, &Default::default());
    let (a, f) = (
        train_losses(on_ascend, &device),
        train_losses(on_flex, &Default::default()),
    );
    assert!(
        a.last().unwrap() < &(a[0] * 0.8),
        "the loss falls on Ascend: {a:?}"
    );
    for (step, (x, y)) in a.iter().zip(&f).enumerate() {
        assert!(
            (x - y).abs() <= 1e-2 * y.abs().max(1.0),
            "step {step}: loss {x} on Ascend, {y} on burn-flex"
        );
    }
}

#[test]
fn the_model_trains_and_serves_on_fusion_as_on_ascend() {
    // Lazy execution through burn-fusion must not change what the model computes.
    type Lazy = burn_fusion::Fusion<Ascend>;
    let cfg = small();
    let bytes = weights(&cfg);
    let device = device();
    let eager = train_losses(load::<Autodiff<Ascend>>(&cfg, &bytes, &device), &device);
    let lazy = train_losses(load::<Autodiff<Lazy>>(&cfg, &bytes, &device), &device);
    for (step, (x, y)) in lazy.iter().zip(&eager).enumerate() {
        assert!(
            (x - y).abs() <= 1e-3 * y.abs().max(1.0),
            "step {step}: loss {x} on Fusion<Ascend>, {y} on Ascend"
        );
    }
    let prompts = vec![prompt("The"), prompt("lighthouse keeper")];
    let a = Server::new(
        load::<Ascend>(&cfg, &bytes, &device),
        serve_config(),
        &device,
    )
    .generate(&prompts, 4, Sampling::Greedy);
    let b = Server::new(load::<Lazy>(&cfg, &bytes, &device), serve_config(), &device).generate(
        &prompts,
        4,
        Sampling::Greedy,
    );
    // Fusion<Ascend> runs the fused ops' compositions, not the kernels: rounding may differ.
    for (x, y) in a.results.iter().zip(&b.results) {
        let (x, y) = (
            x.as_ref().expect("a valid prompt"),
            y.as_ref().expect("a valid prompt"),
        );
        assert_eq!(x.tokens, y.tokens, "the same continuation");
        for (step, (lx, ly)) in x.logits.iter().zip(&y.logits).enumerate() {
            let worst = lx
                .iter()
                .zip(ly)
                .map(|(p, q)| (p - q).abs())
                .fold(0f32, f32::max);
            assert!(worst <= 2e-4, "step {step}: logits differ by {worst}");
        }
    }
}
