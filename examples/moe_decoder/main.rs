//! The MoE decoder example: trains a small mixture-of-experts decoder on the default Ascend
//! device (a real NPU when CANN finds one, else the emulated NPU) with `Autodiff<Ascend>`, saves
//! its weights with Burn's recorder, then serves a batch of prompts of different lengths with
//! the paged KV cache (fused `alloc_extend` and `decode_attention`) and prints each
//! continuation and the decode throughput. `--fusion` runs the same on `Fusion<Ascend>` (lazy
//! execution with fused element-wise runs), with the same outputs.
//!
//! `cargo run --release --example moe_decoder -- --help` lists the options.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

use burn::module::{AutodiffModule, Module};
use burn::record::{BinFileRecorder, FullPrecisionSettings};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn_ascend::runtime::DeviceContext;
use burn_ascend::{Ascend, AscendDevice, CollectiveOps, FusedOps};
use burn_ascend_suite::moe::config::MoeConfig;
use burn_ascend_suite::moe::corpus;
use burn_ascend_suite::moe::model::MoeDecoder;
use burn_ascend_suite::moe::serve::{Sampling, ServeConfig, Server};
use burn_ascend_suite::moe::train::{StepReport, TrainConfig};
use burn_autodiff::Autodiff;
use burn_fusion::Fusion;
use clap::Parser;

mod parallel;
use indicatif::{ProgressBar, ProgressStyle};

/// Train and serve the MoE decoder on Ascend.
#[derive(Parser, Debug)]
struct Args {
    /// Device: npu, npu:N, emulated or emulated:N (default: an NPU if CANN has one).
    #[arg(long)]
    device: Option<String>,
    /// Run on Fusion<Ascend>: ops recorded lazily, element-wise runs fused into one kernel.
    #[arg(long)]
    fusion: bool,
    /// NPUs to use, from --device on: data-parallel training, expert-parallel serving.
    #[arg(long, default_value_t = 1)]
    devices: usize,
    /// Training steps (0 with --load to only serve).
    #[arg(long, default_value_t = 60)]
    steps: usize,
    /// Sequences per training step.
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Tokens per training sequence.
    #[arg(long, default_value_t = 64)]
    seq_len: usize,
    /// Adam learning rate.
    #[arg(long, default_value_t = 3e-3)]
    lr: f64,
    /// Hidden size.
    #[arg(long, default_value_t = 256)]
    hidden: usize,
    /// Transformer blocks.
    #[arg(long, default_value_t = 4)]
    layers: usize,
    /// Query heads.
    #[arg(long, default_value_t = 8)]
    q_heads: usize,
    /// Key/value heads.
    #[arg(long, default_value_t = 2)]
    kv_heads: usize,
    /// Experts.
    #[arg(long, default_value_t = 8)]
    experts: usize,
    /// Experts per token.
    #[arg(long, default_value_t = 2)]
    top_k: usize,
    /// Hidden size of each expert.
    #[arg(long, default_value_t = 512)]
    expert_hidden: usize,
    /// Load weights from this file (written by an earlier run) instead of a fresh model.
    #[arg(long)]
    load: Option<PathBuf>,
    /// Where to save the trained weights.
    #[arg(long, default_value = "target/moe_decoder_weights")]
    save: PathBuf,
    /// Tokens to generate per prompt.
    #[arg(long, default_value_t = 48)]
    new_tokens: usize,
    /// Sample at this temperature instead of greedy decoding.
    #[arg(long)]
    temperature: Option<f64>,
    /// With --temperature: candidates kept per step.
    #[arg(long, default_value_t = 8)]
    top_k_sampling: usize,
    /// With --temperature: seed of the draws.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(args) {
        eprintln!("moe_decoder: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), String> {
    let device = match &args.device {
        Some(d) => AscendDevice::parse(d)
            .ok_or_else(|| format!("--device {d:?} is not npu, npu:N, emulated or emulated:N"))?,
        None => AscendDevice::default(),
    };
    let devices = parallel::devices(device, args.devices)?;
    // Open the devices up front: an explicit --device npu without CANN or an NPU is an error
    // here, not a panic inside the first tensor op.
    for d in &devices {
        DeviceContext::get(d).map_err(|e| format!("cannot open {d:?}: {e}"))?;
    }
    if args.fusion {
        println!("device: {} (Fusion<Ascend>)", Ascend::name(&device));
        train_and_serve::<Autodiff<Fusion<Ascend>>>(&args, &devices)
    } else {
        println!("device: {}", Ascend::name(&device));
        train_and_serve::<Autodiff<Ascend>>(&args, &devices)
    }
}

/// Trains on `B` (an autodiff backend over an Ascend backend), then serves on its inner backend.
fn train_and_serve<B>(args: &Args, devices: &[AscendDevice]) -> Result<(), String>
where
    B: AutodiffBackend<Device = AscendDevice> + FusedOps,
    B::InnerBackend: FusedOps + CollectiveOps,
{
    let device = &devices[0];
    let cfg = MoeConfig::new()
        .with_hidden(args.hidden)
        .with_layers(args.layers)
        .with_q_heads(args.q_heads)
        .with_kv_heads(args.kv_heads)
        .with_experts(args.experts)
        .with_top_k(args.top_k)
        .with_expert_hidden(args.expert_hidden);
    cfg.validate().map_err(|e| e.to_string())?;
    B::seed(device, args.seed);
    let recorder = BinFileRecorder::<FullPrecisionSettings>::new();
    let mut model = MoeDecoder::<B>::new(&cfg, device).map_err(|e| e.to_string())?;
    if let Some(path) = &args.load {
        model = model
            .load_file(path.clone(), &recorder, device)
            .map_err(|e| format!("loading {}: {e}", path.display()))?;
        println!("loaded weights from {}", path.display());
    }
    let tokens = corpus::tokens();
    if args.steps > 0 {
        let train_cfg = TrainConfig {
            steps: args.steps,
            batch: args.batch,
            seq_len: args.seq_len,
            learning_rate: args.lr,
            aux_weight: cfg.aux_loss,
        };
        println!(
            "training {} steps of {}x{} tokens on {} bytes of text",
            args.steps,
            args.batch,
            args.seq_len,
            tokens.len()
        );
        let bar = std::io::stdout().is_terminal().then(|| {
            let bar = ProgressBar::new(args.steps as u64);
            bar.set_style(
                ProgressStyle::with_template("{bar:30} step {pos}/{len} {msg}")
                    .expect("a valid template"),
            );
            bar
        });
        let start = Instant::now();
        let report = |r: StepReport| {
            let line = format!(
                "loss {:.3} aux {:.3} {:.0} tokens/s",
                r.loss, r.aux, r.tokens_per_second
            );
            match &bar {
                Some(bar) => {
                    bar.set_position(r.step as u64);
                    bar.set_message(line);
                }
                None if r.step == 1 || r.step.is_multiple_of(10) || r.step == args.steps => {
                    println!("step {}/{} {line}", r.step, args.steps)
                }
                None => {}
            }
        };
        model = parallel::train(model, &tokens, &train_cfg, devices, report)?;
        if let Some(bar) = bar {
            bar.finish();
        }
        println!("trained in {:.1} s", start.elapsed().as_secs_f64());
        if let Some(dir) = args.save.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        }
        model
            .clone()
            .save_file(args.save.clone(), &recorder)
            .map_err(|e| format!("saving {}: {e}", args.save.display()))?;
        println!("saved weights to {}", args.save.display());
    }
    let sampling = match args.temperature {
        Some(temperature) => Sampling::Random {
            temperature,
            top_k: args.top_k_sampling,
            seed: args.seed,
        },
        None => Sampling::Greedy,
    };
    let serve = ServeConfig {
        pages: 128,
        page_size: 16,
        max_seq: cfg.max_seq,
        max_kv_splits: 4,
        record_logits: false,
    };
    let served = model.valid();
    let mut server = Server::new(parallel::serving(served.clone(), devices)?, serve, device);
    let prompts = [
        "The lighthouse keeper",
        "She counted",
        "In the evenings the keeper taught his daughter to",
        "The sea",
    ];
    let batch: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| p.bytes().map(u32::from).collect())
        .collect();
    println!(
        "serving {} prompts, {} new tokens each (paged KV cache, {} pages of {} slots)",
        prompts.len(),
        args.new_tokens,
        serve.pages,
        serve.page_size
    );
    let out = server.generate(&batch, args.new_tokens, sampling);
    for (prompt, result) in prompts.iter().zip(&out.results) {
        match result {
            Ok(g) => {
                let text: Vec<u8> = g.tokens.iter().map(|&t| t as u8).collect();
                println!("  {prompt:?} -> {:?}", String::from_utf8_lossy(&text));
            }
            Err(e) => println!("  {prompt:?} -> error: {e}"),
        }
    }
    println!(
        "decode throughput: {:.1} tokens/s ({} free pages after the batch)",
        out.decode_tokens_per_second,
        server.pool().free_pages()
    );
    parallel::check_one_device(
        served,
        serve,
        devices,
        &batch,
        args.new_tokens,
        sampling,
        &out,
    );
    Ok(())
}
