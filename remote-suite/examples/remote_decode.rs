//! Decodes the example's prompts with the MoE decoder written as a Burn 0.22 program
//! (`burn_ascend_remote_suite::moe`: plain Burn ops and burn-ascend-client's fused ops) on a
//! burn-ascend-server device. Its weights come from the example's Burn 0.21 model, trained here
//! for a few steps in process on the emulated NPU and written as safetensors; the in-process
//! Burn 0.21 server decodes the same prompts, for comparison.
//!
//! ```text
//! cargo run -p burn-ascend-remote-suite --example remote_decode
//! ```
//!
//! serves the emulated NPU from this process; against a running server:
//!
//! ```text
//! cargo run -p burn-ascend-server -- --port 3000
//! BURN_REMOTE_ADDRESS=ws://127.0.0.1:3000 \
//!     cargo run -p burn-ascend-remote-suite --example remote_decode
//! ```

#[path = "../tests/moe021/mod.rs"]
mod moe021;

use burn::remote::RemoteHost;
use burn::tensor::Device;
use burn_ascend::AscendDevice;
use burn_ascend_llm::engine::serve::Server;
use burn_ascend_remote_suite::moe::{save_weights, MoeDecoder};
use burn_ascend_remote_suite::LocalServer;
use moe021::{requests, serving, sizes, small, trained, weights, NEW_TOKENS, PAGES, PAGE_SIZE};

fn text(tokens: &[u32]) -> String {
    String::from_utf8_lossy(&tokens.iter().map(|&t| t as u8).collect::<Vec<_>>()).into_owned()
}

fn main() {
    let npu = AscendDevice::Emulated(0);
    let cfg = small();
    let (model, losses) = trained(&cfg, &npu);
    println!(
        "trained in process (Burn 0.21, {npu}): loss {:.3} -> {:.3} in {} steps",
        losses[0],
        losses[losses.len() - 1],
        losses.len()
    );

    let requests = requests();
    let serving = serving(&cfg, false);
    let in_process = Server::new(model.clone(), serving, &npu)
        .expect("a valid serving configuration")
        .generate(&requests);

    let path =
        std::env::temp_dir().join(format!("remote_decode-{}.safetensors", std::process::id()));
    save_weights(&path, &sizes(&cfg), weights(model)).expect("the weights written");
    println!("weights: {}", path.display());

    // A server of our own unless one is named: keep it alive while decoding.
    let (_local, device) = match std::env::var("BURN_REMOTE_ADDRESS") {
        Ok(url) => {
            let device = Device::remote_options(&RemoteHost::websocket(&url))
                .init()
                .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
            (None, device)
        }
        Err(_) => {
            let server = LocalServer::start();
            let device = server.device();
            (Some(server), device)
        }
    };
    println!("device: {device:?}");
    let decoder = MoeDecoder::load(&path, &device).expect("the weights read");
    std::fs::remove_file(&path).expect("the weights file removed");

    for (request, reference) in requests.iter().zip(&in_process.results) {
        let remote = decoder
            .generate(&request.prompt, NEW_TOKENS, (PAGES, PAGE_SIZE), false)
            .expect("a prompt the cache holds");
        let reference = reference.as_ref().expect("a valid prompt");
        println!("{:?}", text(&request.prompt));
        println!("  remote (Burn 0.22): {:?}", text(&remote.tokens));
        println!(
            "  in process (0.21): {:?}{}",
            text(&reference.tokens),
            if remote.tokens == reference.tokens {
                " (the same)"
            } else {
                " (DIFFERENT)"
            }
        );
    }
}
