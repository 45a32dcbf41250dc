//! The MoE decoder example's model on the fused paged path (`Ascend`: Ascend C kernels for
//! layer norm, routing, slot allocation and decode attention) against the reference path
//! (the same weights on burn-flex with the composed defaults and dense attention over the whole
//! sequence): logits at every decode step, greedy tokens, page reuse, bad input, training. The
//! server's scheduling: a cache three times too small for its load (preemption and recompute)
//! and requests batched together give every request the tokens it gets alone; bad requests
//! fail alone; a device fault or a panic in a step fails that step and the server serves the
//! next requests; a recovery that fails leaves the server refusing everything, saying why.
//!
//! The fault tests run alone (`serial`): the others may run together (`parallel`).

mod common;

use burn::module::Module;
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::AutodiffBackend;
use burn_ascend_llm::engine::serve::{reference_logits, Request, ServeConfig, ServeError, Server};
use burn_ascend_llm::engine::serve::{FinishReason, Generation, Sampling};
use burn_ascend_llm::moe::config::MoeConfig;
use burn_ascend_llm::moe::corpus;
use burn_ascend_llm::moe::model::MoeDecoder;
use burn_ascend_llm::moe::train::{train, TrainConfig};
use burn_autodiff::Autodiff;
use common::*;
use serial_test::{parallel, serial};

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
    // Pages of 4 slots, so every prompt crosses page boundaries; steps of 16 tokens, so the
    // longer prompts are prefilled in chunks beside the decode of the shorter ones.
    ServeConfig {
        pages: 64,
        page_size: 4,
        max_seq: 48,
        max_kv_splits: 3,
        step_tokens: 16,
        max_waiting: 1024,
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

fn greedy(prompts: &[Vec<u32>], new_tokens: usize) -> Vec<Request> {
    prompts
        .iter()
        .map(|p| Request::greedy(p.clone(), new_tokens))
        .collect()
}

fn new_server<B: burn_ascend::FusedOps>(
    model: MoeDecoder<B>,
    device: &B::Device,
) -> Server<B, MoeDecoder<B>> {
    Server::new(model, serve_config(), device).expect("a valid serving configuration")
}

#[test]
#[parallel]
fn paged_decode_matches_the_dense_reference_at_every_step() {
    let cfg = small();
    let (reference, model) = models(&cfg);
    let mut server = new_server(model, &device());
    let prompts = vec![
        prompt("The"),
        prompt("lighthouse keeper"),
        prompt("tide turned."),
    ];
    let out = server.generate(&greedy(&prompts, 6));
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
#[parallel]
fn finished_requests_free_their_pages_for_the_next_batch() {
    let cfg = small();
    let (_, model) = models(&cfg);
    let mut server = new_server(model, &device());
    let total = server.pool().free_pages();
    let prompts = greedy(&[prompt("She counted the gulls"), prompt("Ten seconds")], 5);
    let first = server.generate(&prompts);
    assert_eq!(server.pool().free_pages(), total, "every page came back");
    let second = server.generate(&prompts);
    for (a, b) in first.results.iter().zip(&second.results) {
        assert_eq!(
            a.as_ref().unwrap().tokens,
            b.as_ref().unwrap().tokens,
            "reused pages give the same continuation"
        );
    }
}

#[test]
#[parallel]
fn a_stop_token_ends_its_request_there_and_the_others_run_to_their_length() {
    let cfg = small();
    let (_, model) = models(&cfg);
    let mut server = new_server(model, &device());
    let plain = greedy(&[prompt("She counted the gulls"), prompt("Ten seconds")], 8);
    let full = server.generate(&plain);
    let first = tokens(&full.results[0]).to_vec();
    assert_eq!(first.len(), 8);
    assert_eq!(
        full.results[0].as_ref().unwrap().finish,
        FinishReason::Length
    );
    // The third token stops the first request (at its first occurrence, kept as its last token);
    // a stop token the second never generates leaves it alone.
    let unused = (0..cfg.vocab as u32)
        .find(|t| !tokens(&full.results[1]).contains(t))
        .expect("a token the second request never generates");
    let stopped = server.generate(&[
        plain[0].clone().with_stop(vec![first[2]]),
        plain[1].clone().with_stop(vec![unused]),
    ]);
    let at = first.iter().position(|&t| t == first[2]).unwrap();
    let cut = stopped.results[0].as_ref().unwrap();
    assert_eq!(cut.tokens, first[..=at]);
    assert_eq!(cut.finish, FinishReason::Stop);
    let other = stopped.results[1].as_ref().unwrap();
    assert_eq!(other.tokens, tokens(&full.results[1]));
    assert_eq!(other.finish, FinishReason::Length);
    assert_eq!(
        server.pool().free_pages(),
        serve_config().pages,
        "every page came back"
    );
}

#[test]
#[parallel]
fn bad_requests_fail_alone() {
    let cfg = small();
    let (_, model) = models(&cfg);
    let device = device();
    let mut server = new_server(model.clone(), &device);
    let good = prompt("The sea");
    let batch = vec![good.clone(), Vec::new(), vec![65; 45], vec![72, 300, 73]];
    let out = server.generate(&greedy(&batch, 4));
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
    let alone = new_server(model, &device).generate(&greedy(&[good], 4));
    assert_eq!(
        out.results[0].as_ref().unwrap().tokens,
        alone.results[0].as_ref().unwrap().tokens
    );
}

#[test]
#[parallel]
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
    })
    .expect("finite losses");
    losses
}

#[test]
#[parallel]
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
#[parallel]
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
    let prompts = greedy(&[prompt("The"), prompt("lighthouse keeper")], 4);
    let a = new_server(load::<Ascend>(&cfg, &bytes, &device), &device).generate(&prompts);
    let b = new_server(load::<Lazy>(&cfg, &bytes, &device), &device).generate(&prompts);
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

/// Tokens of each request, served alone on a server with room for it.
fn alone(model: &MoeDecoder<Ascend>, requests: &[Request]) -> Vec<Vec<u32>> {
    requests
        .iter()
        .map(|r| {
            let out = new_server(model.clone(), &device()).generate(std::slice::from_ref(r));
            out.results[0]
                .as_ref()
                .expect("a valid request")
                .tokens
                .clone()
        })
        .collect()
}

fn tokens(result: &Result<Generation, ServeError>) -> &[u32] {
    &result.as_ref().expect("a served request").tokens
}

/// Prompts of 3 to 35 tokens, 5 to 12 new tokens; greedy and seeded sampling.
fn workload() -> Vec<Request> {
    let texts = [
        "The keeper climbed the stairs",
        "Gulls",
        "At dawn the fog lifted over the bay",
        "She",
        "Ships passed in the night and",
        "Ten lamps",
    ];
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| Request {
            prompt: prompt(t),
            new_tokens: 5 + (i * 3) % 8,
            sampling: if i % 2 == 0 {
                Sampling::Greedy
            } else {
                Sampling::Random {
                    temperature: 0.8,
                    top_k: 5,
                    top_p: 1.0,
                    min_p: 0.0,
                    seed: i as u64,
                }
            },
            stop: Vec::new(),
        })
        .collect()
}

#[test]
#[parallel]
fn an_oversubscribed_cache_serves_every_request_as_it_serves_it_alone() {
    let cfg = small();
    let (_, model) = models(&cfg);
    let requests = workload();
    let page_size = serve_config().page_size;
    let demand: usize = requests
        .iter()
        .map(|r| (r.prompt.len() + r.new_tokens - 1).div_ceil(page_size))
        .sum();
    let small_cache = ServeConfig {
        pages: demand / 3,
        record_logits: false,
        ..serve_config()
    };
    assert!(requests
        .iter()
        .all(|r| small_cache.check(r, cfg.vocab).is_ok()));
    let mut shared = Server::new(model.clone(), small_cache, &device()).expect("a valid config");
    let out = shared.generate(&requests);
    assert!(
        out.preemptions > 0,
        "a third of the demand must preempt: {out}"
    );
    assert!(out
        .results
        .iter()
        .any(|r| r.as_ref().is_ok_and(|g| g.preemptions > 0)));
    assert_eq!(out.completed, requests.len(), "{out}");
    assert_eq!(shared.pool().free_pages(), small_cache.pages);
    for (i, (got, want)) in out.results.iter().zip(alone(&model, &requests)).enumerate() {
        assert_eq!(tokens(got), want, "request {i}");
    }
}

#[test]
#[parallel]
fn bad_requests_and_sampling_parameters_fail_alone() {
    let cfg = small();
    let (_, model) = models(&cfg);
    // All but the longest request (which needs 12 pages of 4 slots).
    let good: Vec<Request> = workload()
        .into_iter()
        .filter(|r| r.prompt.len() + r.new_tokens <= 40)
        .collect();
    let random = |temperature, top_k| Request {
        prompt: prompt("The sea"),
        new_tokens: 3,
        sampling: Sampling::Random {
            temperature,
            top_k,
            top_p: 1.0,
            min_p: 0.0,
            seed: 1,
        },
        stop: Vec::new(),
    };
    // The longest sequence the cache holds (a longer max_seq is refused at configuration).
    let cache = ServeConfig {
        pages: 10,
        max_seq: 40,
        ..serve_config()
    };
    let mut batch = good.clone();
    batch.extend([
        random(f64::NAN, 4),
        random(-1.0, 4),
        random(0.0, 4),
        random(1.0, 0),
        Request::greedy(prompt("The sea"), 0),
        // 24 + 20 tokens: more than the cache's 40 slots hold.
        Request::greedy(vec![65; 24], 20),
    ]);
    let out = Server::new(model.clone(), cache, &device())
        .expect("a valid config")
        .generate(&batch);
    let errors: Vec<String> = out.results[good.len()..]
        .iter()
        .map(|r| r.as_ref().expect_err("a bad request").to_string())
        .collect();
    for (error, says) in errors.iter().zip([
        "temperature NaN must be positive and finite",
        "temperature -1 must be positive and finite",
        "temperature 0 must be positive and finite",
        "top_k is 0",
        "new_tokens is 0",
        "prompt of 24 tokens plus 20 new tokens exceeds the maximum sequence of 40",
    ]) {
        assert!(error.contains(says), "{error:?} should say {says:?}");
    }
    for (i, (got, want)) in out.results.iter().zip(alone(&model, &good)).enumerate() {
        assert_eq!(tokens(got), want, "good request {i}");
    }
}

#[test]
#[parallel]
fn serving_settings_are_checked() {
    let (_, model) = models(&small());
    for (cfg, says) in [
        (
            ServeConfig {
                pages: 0,
                ..serve_config()
            },
            "pages must be at least 1",
        ),
        (
            ServeConfig {
                step_tokens: 0,
                ..serve_config()
            },
            "step_tokens must be at least 1",
        ),
        (
            ServeConfig {
                pages: 1 << 20,
                page_size: 1 << 12,
                ..serve_config()
            },
            "exceed the 2^31-1 slots",
        ),
        (
            // 2^32 keys in one step's kv_indices: past what int32 kv_indptr offsets reach.
            ServeConfig {
                pages: 1 << 14,
                step_tokens: 1 << 16,
                max_seq: 1 << 16,
                ..serve_config()
            },
            "exceeds the 2^31-1 cached keys one step can list",
        ),
        (
            // 2^30 slots: a KV cache of 512 GiB.
            ServeConfig {
                pages: 1 << 20,
                page_size: 1 << 10,
                ..serve_config()
            },
            "lower pages, step_tokens or max_seq",
        ),
        (
            ServeConfig {
                max_waiting: 0,
                ..serve_config()
            },
            "max_waiting must be at least 1",
        ),
    ] {
        let err = Server::new(model.clone(), cfg, &device())
            .err()
            .expect("rejected");
        assert!(err.to_string().contains(says), "{err}");
    }
}

#[test]
#[parallel]
fn a_step_whose_attention_workspace_exceeds_the_device_is_refused_at_configuration() {
    // 16 query heads: steps of 2^14 tokens over 2^16 positions need 2^30 keys x (4 + 16 x 6)
    // bytes = 100 GiB of kv_indices and cube workspaces, more than the device has.
    let cfg = small().with_q_heads(16).with_kv_heads(4);
    let model = load::<Ascend>(&cfg, &weights(&cfg), &device());
    let (_, total) =
        burn_ascend::runtime::device::memory_info(&device().into()).expect("memory size");
    assert!(total < 100 << 30, "the device has {total} bytes");
    let serve = ServeConfig {
        pages: 1 << 14,
        step_tokens: 1 << 14,
        max_seq: 1 << 16,
        ..serve_config()
    };
    let err = Server::new(model, serve, &device())
        .err()
        .expect("rejected");
    for says in [
        "buffers of the largest step",
        "16 query heads",
        "bytes free",
    ] {
        assert!(err.to_string().contains(says), "{err}");
    }
}

#[test]
#[parallel]
fn a_request_whose_length_overflows_is_refused() {
    let (_, model) = models(&small());
    let mut server = new_server(model, &device());
    for new_tokens in [usize::MAX, usize::MAX - 2] {
        let err = server
            .submit(Request::greedy(prompt("The sea"), new_tokens))
            .expect_err("longer than any sequence");
        assert!(matches!(err, ServeError::TooLong { max: 48, .. }), "{err}");
    }
    assert!(server.is_idle());
}

#[test]
#[parallel]
fn a_full_queue_refuses_new_requests_until_it_drains() {
    let (_, model) = models(&small());
    let requests = workload();
    let want = alone(&model, &requests[..3]);
    let cfg = ServeConfig {
        max_waiting: 2,
        ..serve_config()
    };
    let mut server = Server::new(model, cfg, &device()).expect("a valid config");
    let a = server.submit(requests[0].clone()).expect("room");
    let b = server.submit(requests[1].clone()).expect("room");
    let err = server
        .submit(requests[2].clone())
        .expect_err("the queue is full");
    assert_eq!(
        err,
        ServeError::Overloaded {
            waiting: 2,
            limit: 2
        }
    );
    assert!(err.to_string().contains("overloaded"), "{err}");
    // A step admits the waiting requests: there is room again.
    server.step();
    let c = server.submit(requests[2].clone()).expect("room again");
    let mut results = std::collections::HashMap::new();
    while !server.is_idle() {
        results.extend(server.step().finished);
    }
    for (i, id) in [a, b, c].iter().enumerate() {
        assert_eq!(tokens(&results[id]), want[i], "request {i}");
    }
}

#[test]
#[parallel]
fn a_cancelled_request_frees_its_pages_at_once_and_the_others_are_served() {
    let (_, model) = models(&small());
    let requests = workload();
    let want = alone(&model, &requests);
    // Steps of 8 tokens: the first requests run while the others wait.
    let cfg = ServeConfig {
        step_tokens: 8,
        ..serve_config()
    };
    let mut server = Server::new(model, cfg, &device()).expect("a valid config");
    let ids: Vec<_> = requests
        .iter()
        .map(|r| server.submit(r.clone()).expect("a valid request"))
        .collect();
    for _ in 0..6 {
        assert!(server.step().finished.is_empty());
    }
    // Request 1 (5 prompt tokens) runs and holds pages; the last one still waits.
    let free = server.pool().free_pages();
    let cancelled = server.cancel(ids[1]).expect("request 1 is pending");
    assert!(!cancelled.tokens.is_empty(), "request 1 had started");
    assert_eq!(cancelled.tokens, want[1][..cancelled.tokens.len()]);
    let held = (requests[1].prompt.len() + cancelled.tokens.len() - 1).div_ceil(cfg.page_size);
    assert_eq!(
        server.pool().free_pages(),
        free + held,
        "its pages are free now"
    );
    let last = *ids.last().unwrap();
    assert_eq!(
        server.cancel(last).expect("waiting").tokens,
        Vec::<u32>::new()
    );
    assert_eq!(server.cancel(ids[1]), None, "cancelled already");
    let mut results = std::collections::HashMap::new();
    while !server.is_idle() {
        results.extend(server.step().finished);
    }
    assert!(!results.contains_key(&ids[1]) && !results.contains_key(&last));
    for (i, id) in ids
        .iter()
        .enumerate()
        .filter(|(_, id)| **id != ids[1] && **id != last)
    {
        assert_eq!(tokens(&results[id]), want[i], "request {i}");
    }
    assert_eq!(server.pool().free_pages(), cfg.pages);
}

/// Global-memory bytes of the work of one decode step of a server with `pages` cache pages (one
/// request, after its prefill).
fn decode_step_bytes(model: &MoeDecoder<Ascend>, pages: usize) -> u64 {
    use burn::tensor::backend::Backend;
    let cfg = ServeConfig {
        pages,
        ..serve_config()
    };
    let mut server = Server::new(model.clone(), cfg, &device()).expect("a valid config");
    server
        .submit(Request::greedy(prompt("The keeper"), 4))
        .expect("a valid request");
    assert!(!server.step().decode_only, "the prefill");
    Ascend::sync(&device()).expect("sync");
    let before = burn_ascend::emulator::work_counters();
    assert!(server.step().decode_only);
    Ascend::sync(&device()).expect("sync");
    burn_ascend::emulator::work_counters()
        .since(&before)
        .bytes()
}

#[test]
#[serial]
fn a_decode_step_moves_the_same_bytes_whatever_the_cache_size() {
    if skipped_on_npu("a_decode_step_moves_the_same_bytes_whatever_the_cache_size") {
        return;
    }
    let (_, model) = models(&small());
    let small = decode_step_bytes(&model, 64);
    let large = decode_step_bytes(&model, 64 * 64);
    // 64 times the slots: writing the step's keys and values through a copy of the cache would
    // move megabytes more (a layer's keys alone are 4 MiB at 4096 pages); the free-page list
    // the slot allocation reads grows by 16 KiB.
    assert!(
        large <= small + (64 * 63) * 4,
        "a decode step moved {small} bytes with 64 cache pages, {large} with 4096"
    );
}

#[test]
#[serial]
fn a_device_fault_fails_its_step_and_the_server_serves_the_next_requests() {
    if skipped_on_npu("a_device_fault_fails_its_step_and_the_server_serves_the_next_requests") {
        return;
    }
    let (_, model) = models(&small());
    let requests = workload();
    let want = alone(&model, &requests);
    // Steps of 8 tokens: the first two requests run, the others wait.
    let cfg = ServeConfig {
        step_tokens: 8,
        ..serve_config()
    };
    let mut server = Server::new(model, cfg, &device()).expect("a valid config");
    let ids: Vec<_> = requests
        .iter()
        .map(|r| server.submit(r.clone()).expect("a valid request"))
        .collect();
    let first = server.step();
    assert!(first.finished.is_empty());
    server.inject_fault();
    let faulted = server.step();
    let failed: Vec<_> = faulted.finished.iter().map(|(id, _)| *id).collect();
    assert!(!failed.is_empty() && failed.len() < ids.len(), "{failed:?}");
    for (_, result) in &faulted.finished {
        let err = result.as_ref().expect_err("the step faulted").to_string();
        assert!(
            err.contains("the device failed") && err.contains("decode_attention"),
            "{err}"
        );
    }
    // The requests that were not in the faulted step are served as they would be alone, and
    // so are new ones.
    let mut results = std::collections::HashMap::new();
    while !server.is_idle() {
        results.extend(server.step().finished);
    }
    for (i, id) in ids
        .iter()
        .enumerate()
        .filter(|(_, id)| !failed.contains(id))
    {
        assert_eq!(tokens(&results[id]), want[i], "request {i}");
    }
    let again = server.generate(&requests);
    for (i, result) in again.results.iter().enumerate() {
        assert_eq!(tokens(result), want[i], "request {i} after the fault");
    }
    assert_eq!(server.pool().free_pages(), cfg.pages);
}

#[test]
#[serial]
fn a_panic_in_a_step_fails_that_step_and_the_server_serves_the_next_requests() {
    if skipped_on_npu("a_panic_in_a_step_fails_that_step_and_the_server_serves_the_next_requests") {
        return;
    }
    let (_, model) = models(&small());
    let requests = workload();
    let want = alone(&model, &requests);
    let mut server = new_server(model, &device());
    for r in &requests {
        server.submit(r.clone()).expect("a valid request");
    }
    server.step();
    server.inject_panic();
    let failed = server.step();
    assert!(!failed.finished.is_empty());
    for (_, result) in &failed.finished {
        let err = result.as_ref().expect_err("the step panicked").to_string();
        assert!(
            err.contains("the request's step failed") && err.contains("Server::inject_panic"),
            "{err}"
        );
    }
    assert_eq!(server.failure(), None, "a panicking step is recovered from");
    while !server.is_idle() {
        server.step();
    }
    let again = server.generate(&requests);
    for (i, result) in again.results.iter().enumerate() {
        assert_eq!(tokens(result), want[i], "request {i} after the panic");
    }
}

#[test]
#[serial]
fn a_failed_recovery_fails_every_pending_request_and_refuses_new_ones_saying_why() {
    if skipped_on_npu(
        "a_failed_recovery_fails_every_pending_request_and_refuses_new_ones_saying_why",
    ) {
        return;
    }
    let (_, model) = models(&small());
    let requests = workload();
    // Steps of 8 tokens: the first requests run, the others wait.
    let cfg = ServeConfig {
        step_tokens: 8,
        ..serve_config()
    };
    let mut server = Server::new(model, cfg, &device()).expect("a valid config");
    let ids: Vec<_> = requests
        .iter()
        .map(|r| server.submit(r.clone()).expect("a valid request"))
        .collect();
    server.step();
    assert!(server.waiting() > 0, "some requests wait");
    server.inject_fault();
    server.fail_next_recovery();
    let report = server.step();
    // The faulted step's requests end with the device's error, every other one with the reason
    // the server cannot go on: none is left pending, none is lost.
    let mut ended: Vec<_> = report.finished.iter().map(|(id, _)| *id).collect();
    ended.sort();
    assert_eq!(ended, ids);
    let (device_failed, unrecoverable): (Vec<_>, Vec<_>) = report
        .finished
        .iter()
        .map(|(_, r)| r.as_ref().expect_err("nothing completes").clone())
        .partition(|e| matches!(e, ServeError::Device(_)));
    assert!(!device_failed.is_empty() && !unrecoverable.is_empty());
    let why = server
        .failure()
        .expect("the server says why it cannot serve")
        .to_string();
    assert!(
        why.contains("decode_attention") && why.contains("the device reset failed"),
        "{why}"
    );
    for e in &unrecoverable {
        assert_eq!(e, &ServeError::Unrecoverable(why.clone()));
    }
    assert!(server.is_idle());
    assert_eq!(
        server.pool().free_pages(),
        cfg.pages,
        "every page came back"
    );
    assert_eq!(
        server.submit(requests[0].clone()),
        Err(ServeError::Unrecoverable(why))
    );
    assert_eq!(server.step(), Default::default(), "nothing left to run");
    // Its owner would restart it; the tests after this one need the device back.
    burn_ascend::reset_device(&device()).expect("the device resets");
}
