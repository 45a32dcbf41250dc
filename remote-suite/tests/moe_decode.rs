//! The example's MoE decoder decoding through the remote device: in one process, the Burn 0.21
//! model (burn-ascend-suite's `MoeDecoder<Ascend>`, in process on the emulated NPU) is trained
//! a few steps on the shipped corpus and serves the example's prompts greedily with the
//! in-process engine (paged cache, chunked prefill, `decode_attention`); its weights are written
//! to a safetensors file; a Burn 0.22 program (`burn_ascend_remote_suite::moe`, no Ascend type)
//! loads them on a burn-ascend-server device and decodes the same prompts. The tokens must be
//! the same, token for token, and the logits each was chosen from close.

mod moe021;

use std::path::PathBuf;

use burn::tensor::TensorData;
use burn_ascend::AscendDevice;
use burn_ascend_llm::engine::serve::Server;
use burn_ascend_remote_suite::moe::{load_weights, save_weights, MoeDecoder, Weights};
use burn_ascend_remote_suite::LocalServer;
use moe021::{requests, serving, sizes, small, trained, weights, NEW_TOKENS, PAGES, PAGE_SIZE};
use safetensors::tensor::TensorView;
use safetensors::Dtype;

/// Largest difference allowed between a remote logit and the in-process one. Both run the same
/// emulated kernels on the same weights, but not the same compositions: the in-process server
/// prefills through `extend_attention` in chunks, the Burn 0.22 program by a causal
/// composition over the whole prompt, and they sum in different orders. Measured: 2.9e-6 at
/// most (the test prints it).
const LOGIT_TOLERANCE: f32 = 1e-4;

/// The smallest top-1 / top-2 logit margin at a compared step for the token comparison to mean
/// something: ten times what the logits may differ by.
const MIN_MARGIN: f32 = 10.0 * LOGIT_TOLERANCE;

fn temp_file(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("moe_decode-{}-{name}", std::process::id()))
}

/// `(top-1 - top-2)` of `logits`.
fn margin(logits: &[f32]) -> f32 {
    let mut sorted = logits.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    sorted[0] - sorted[1]
}

#[test]
fn the_burn_022_decoder_on_the_remote_device_decodes_as_the_in_process_server() {
    let device = AscendDevice::Emulated(0);
    let cfg = small();
    let (model, losses) = trained(&cfg, &device);
    println!("training losses: {losses:?}");
    assert!(
        losses[losses.len() - 1] < losses[0] * 0.8,
        "the model learned: {losses:?}"
    );

    let requests = requests();
    let serving = serving(&cfg, true);
    let mut server = Server::new(model.clone(), serving, &device).expect("a valid config");
    let reference: Vec<_> = server
        .generate(&requests)
        .results
        .into_iter()
        .map(|r| r.expect("a valid prompt"))
        .collect();

    let path = temp_file("weights.safetensors");
    save_weights(&path, &sizes(&cfg), weights(model)).expect("the weights written");
    let remote = LocalServer::start();
    let decoder = MoeDecoder::load(&path, &remote.device()).expect("the weights read");
    std::fs::remove_file(&path).expect("the weights file removed");

    let mut worst = 0f32;
    let mut margins = Vec::new();
    for (request, want) in requests.iter().zip(&reference) {
        let prompt =
            String::from_utf8_lossy(&request.prompt.iter().map(|&t| t as u8).collect::<Vec<_>>())
                .into_owned();
        let got = decoder
            .generate(&request.prompt, NEW_TOKENS, (PAGES, PAGE_SIZE), true)
            .expect("a prompt the cache holds");
        assert_eq!(got.tokens.len(), NEW_TOKENS, "prompt {prompt:?}: tokens");
        for step in 0..NEW_TOKENS {
            assert_eq!(
                got.tokens[step], want.tokens[step],
                "prompt {prompt:?} step {step}: the remote decoder chose token {}, the \
                 in-process server {} (remote {:?}, in process {:?})",
                got.tokens[step], want.tokens[step], got.tokens, want.tokens
            );
            let (r, l) = (&got.logits[step], &want.logits[step]);
            let m = margin(l);
            margins.push(m);
            assert!(
                m >= MIN_MARGIN,
                "prompt {prompt:?} step {step}: the in-process top-1/top-2 logit margin {m} is \
                 below {MIN_MARGIN}: the token comparison would not mean anything"
            );
            let diff = r
                .iter()
                .zip(l)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            worst = worst.max(diff);
            assert!(
                diff <= LOGIT_TOLERANCE,
                "prompt {prompt:?} step {step}: the remote logits differ from the in-process \
                 ones by up to {diff} (tolerance {LOGIT_TOLERANCE})"
            );
        }
    }
    println!(
        "largest logit difference {worst:e}; top-1/top-2 margins: smallest {:.4}, all {margins:.3?}",
        margins.iter().copied().fold(f32::INFINITY, f32::min)
    );
}

/// A weights file that does not fit the layout is refused naming the tensor, before anything
/// reaches a device; so is a request the cache cannot hold.
#[test]
fn weights_and_requests_that_do_not_fit_are_clear_errors() {
    let sizes = sizes(&small().with_layers(1));
    let zeros = |_: String, shape: Vec<usize>| {
        let n = shape.iter().product();
        TensorData::new(vec![0f32; n], shape)
    };

    // The head transposed.
    let mut w = Weights::build(&sizes, zeros);
    w.head = TensorData::new(
        vec![0f32; sizes.vocab * sizes.hidden],
        [sizes.vocab, sizes.hidden],
    );
    let path = temp_file("transposed.safetensors");
    let err = save_weights(&path, &sizes, w).expect_err("a misshapen tensor");
    assert!(
        err.0
            .contains("head: the layout has f32 [64, 256], the model gave F32 [256, 64]"),
        "{err}"
    );
    assert!(!path.exists(), "nothing written");

    // A file without the block's tensors.
    let path = temp_file("partial.safetensors");
    let embed = vec![0u8; sizes.vocab * sizes.hidden * 4];
    let view = TensorView::new(Dtype::F32, vec![sizes.vocab, sizes.hidden], &embed).unwrap();
    let meta = [
        ("vocab", "256"),
        ("hidden", "64"),
        ("layers", "1"),
        ("q_heads", "4"),
    ]
    .into_iter()
    .chain([("kv_heads", "2"), ("experts", "4"), ("top_k", "2")])
    .chain([
        ("expert_hidden", "128"),
        ("rope_theta", "10000"),
        ("eps", "1e-5"),
    ])
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    safetensors::serialize_to_file([("embed", view)], Some(meta), &path).unwrap();
    let err = load_weights(&path).expect_err("missing tensors");
    std::fs::remove_file(&path).unwrap();
    assert!(err.0.contains("blocks.0.attn_norm.gamma"), "{err}");

    // A prompt and continuation longer than the cache.
    let server = LocalServer::start();
    let decoder = MoeDecoder::new(sizes, Weights::build(&sizes, zeros), &server.device());
    let err = decoder
        .generate(&[1; 10], 7, (4, 4), false)
        .expect_err("17 positions in 16 slots");
    assert!(
        err.0.contains(
            "17 positions (prompt 10 + 7 new) exceed the cache's 16 (4 pages of 4 slots)"
        ),
        "{err}"
    );
}
