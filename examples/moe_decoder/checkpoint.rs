//! `--model DIR`: a Hugging Face checkpoint (Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2/V3)
//! served instead of the built-in model, fine-tuned first on the shipped text with
//! `--train-steps N` and then saved in the same Hugging Face layout (`--save-model`); split
//! across `--devices` NPUs and `--nodes` processes (one per machine, meeting at
//! `--rendezvous`) to serve.
//!
//! Everything that can be checked without a device is checked in [`plan`]: the options, the
//! checkpoint's config (an unsupported family or option is named), its tokenizer, the prompts'
//! tokens; [`burn_ascend_llm::families::load_from`] then checks every tensor's name and
//! shape before it allocates anything on the device.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::DType;
use burn_ascend::{AscendDevice, CollectiveOps, FusedOps};
use burn_ascend_llm::engine::serve::{Request, Server};
use burn_ascend_llm::engine::step::StepModel;
use burn_ascend_llm::families::parallel::{self, Placement};
use burn_ascend_llm::families::{self, Decoder, LoadOptions, LoadReport, ToServe};
use burn_ascend_llm::hf::{Checkpoint, TextTokenizer};
use burn_ascend_llm::moe::corpus;
use burn_ascend_llm::moe::train::{train, TrainConfig};

use super::{check_writable, serve_model, Args, Outcome, Progress, Serving, JSON};

/// What `--model` runs, from checked options.
pub struct CheckpointPlan {
    checkpoint: Arc<Checkpoint>,
    tokenizer: TextTokenizer,
    options: LoadOptions,
    train: Option<TrainConfig>,
    /// Without --pages: the fraction of the NPU's memory serving may use.
    memory: Option<f64>,
    /// With several processes (--nodes): this one's place and where they meet.
    nodes: Option<Nodes>,
    save: PathBuf,
    serving: Serving,
}

/// The processes serving a checkpoint together (`--nodes`).
struct Nodes {
    count: usize,
    rank: usize,
    rendezvous: String,
}

/// The longest sequence served when the checkpoint allows more: the server's captured decode
/// buffers and its step's key list grow with it.
const DEFAULT_MAX_SEQ: usize = 1024;

/// Checks the options for serving the checkpoint in `dir` (nothing touches a device).
pub fn plan(args: &Args, dir: &Path) -> Result<CheckpointPlan, String> {
    let fail = |e: &dyn std::fmt::Display| format!("--model {}: {e}", dir.display());
    let checkpoint = Checkpoint::open(dir).map_err(|e| fail(&e))?;
    let spec = families::spec_of(checkpoint.config()).map_err(|e| fail(&e))?;
    let tokenizer = TextTokenizer::from_dir(dir).map_err(|e| fail(&e))?;
    let dtype = LoadOptions::parse_dtype(&args.dtype).map_err(|e| format!("--{e}"))?;
    let options = LoadOptions {
        // Fine-tuning trains in f32 unless told otherwise: half-precision weights and optimizer
        // state without loss scaling lose the small updates (and overflow), as Burn's and
        // PyTorch's mixed-precision guides warn.
        dtype: match (dtype, args.train_steps > 0) {
            (None, true) => Some(DType::F32),
            (dtype, _) => dtype,
        },
        quantize: args.quantize,
    };
    // The format comes from the checkpoint (msModelSlim's description, compressed-tensors' or
    // FP8's quantization_config): no option names it.
    let (prequantized, _) =
        families::prequant::plan(&checkpoint, &spec.expected()).map_err(|e| fail(&e))?;
    if let Some(mode) = prequantized.as_ref().and_then(|p| p.int8_mode()) {
        let plan = prequantized.as_ref().expect("a plan");
        if let Some(q) = args.quantize {
            return Err(fail(&format!(
                "--quantize {q} is refused: the checkpoint is already quantized ({plan}); serve \
                 it without --quantize"
            )));
        }
        if args.train_steps > 0 {
            return Err(fail(&format!(
                "--train-steps: the checkpoint is stored int8 ({mode}, {plan}) and serves only"
            )));
        }
    }
    if let (Some(q), true) = (args.quantize, args.train_steps > 0) {
        return Err(format!(
            "--quantize {q} with --train-steps: a quantized model serves only; fine-tune \
             first, then serve the saved checkpoint with --quantize"
        ));
    }
    let nodes = match (args.nodes, &args.rendezvous) {
        (0, _) => return Err("--nodes must be at least 1".into()),
        (1, None) if args.node_rank == 0 => None,
        (1, _) => return Err("--node-rank and --rendezvous go with --nodes 2 or more".into()),
        (count, Some(rendezvous)) if args.node_rank < count => Some(Nodes {
            count,
            rank: args.node_rank,
            rendezvous: rendezvous.clone(),
        }),
        (count, Some(_)) => {
            return Err(format!(
                "--node-rank {} is not one of --nodes {count} (0 to {})",
                args.node_rank,
                count - 1
            ))
        }
        (count, None) => {
            return Err(format!(
                "--nodes {count}: give --rendezvous HOST:PORT, where node 0 listens for the others"
            ))
        }
    };
    let ranks = args.devices * args.nodes;
    if ranks > 1 {
        if args.train_steps > 0 {
            return Err(format!(
                "--train-steps fine-tunes on one NPU, not across {ranks}: fine-tune, then serve \
                 the saved checkpoint with --devices/--nodes"
            ));
        }
        spec.check_split(ranks).map_err(|e| fail(&e))?;
    }
    let train = (args.train_steps > 0)
        .then(|| {
            let cfg = TrainConfig {
                steps: args.train_steps,
                batch: args.batch,
                seq_len: args.seq_len,
                learning_rate: args.lr,
                aux_weight: spec.aux_loss_coef,
            };
            cfg.validate().map_err(|e| e.to_string()).map(|_| cfg)
        })
        .transpose()?;
    let save = args.save_model.clone().unwrap_or_else(|| {
        let name = dir
            .file_name()
            .map_or("model".into(), |n| n.to_string_lossy());
        PathBuf::from("target").join(format!("{name}-finetuned"))
    });
    if train.is_some() {
        check_writable(&save.join("config.json"))?;
    }
    let max_seq = families::serving_max_seq(&checkpoint, args.max_seq, DEFAULT_MAX_SEQ)?;
    // Until the cache is sized from memory: the pages of one longest request.
    let serve = super::serve_config(args, max_seq, max_seq.div_ceil(args.page_size))?;
    let prompts = super::prompts(args);
    let mut requests = Vec::new();
    for prompt in &prompts {
        let ids = tokenizer
            .encode(prompt)
            .map_err(|e| format!("encoding {prompt:?}: {e}"))?;
        let request = Request {
            prompt: ids,
            new_tokens: args.new_tokens,
            sampling: super::sampling(args),
            stop: tokenizer.eos_ids().to_vec(),
        };
        serve
            .check(&request, spec.vocab)
            .map_err(|e| format!("serving {prompt:?}: {e}"))?;
        requests.push(request);
    }
    Ok(CheckpointPlan {
        checkpoint: Arc::new(checkpoint),
        tokenizer,
        options,
        train,
        memory: args.pages.is_none().then_some(args.npu_memory_utilization),
        nodes,
        save,
        serving: Serving {
            serve,
            prompts,
            requests,
            captured_decode: !args.eager_decode,
        },
    })
}

/// Serves the checkpoint: loaded on the inner backend layer by layer (quantized as it loads,
/// if asked) with no copy of its weights on the host, split across `devices` (and the other
/// processes' NPUs, with --nodes) when there are several, or, with `--train-steps`, loaded on
/// `B` (an autodiff backend over an Ascend backend), fine-tuned, saved, then served.
pub fn run<B>(plan: &CheckpointPlan, devices: &[AscendDevice]) -> Result<Vec<Outcome>, String>
where
    B: AutodiffBackend<Device = AscendDevice> + FusedOps,
    B::InnerBackend: FusedOps + CollectiveOps,
{
    let dir = plan.checkpoint.dir().display();
    let device = &devices[0];
    if let Some(cfg) = &plan.train {
        let model = fine_tune::<B>(plan, cfg, device)?;
        let server = Server::new(model, plan.serving.serve, device).map_err(|e| e.to_string())?;
        return serve_loaded(server, plan, device, None);
    }
    let placement = match &plan.nodes {
        Some(n) => Placement::node(devices, n.rank, n.count, n.rendezvous.clone()),
        None => Placement::local(devices),
    };
    if placement.ranks == 1 {
        let ToServe {
            model,
            reload,
            report,
        } = families::load_to_serve::<B::InnerBackend>(
            plan.checkpoint.clone(),
            plan.options,
            device,
        )
        .map_err(|e| format!("--model {dir}: {e}"))?;
        say_loaded(plan, &report, model.spec(), "");
        let server = Server::with_reload(model, plan.serving.serve, device, reload)
            .map_err(|e| e.to_string())?;
        return serve_loaded(server, plan, device, None);
    }
    let ToServe {
        model,
        reload,
        report,
    } = parallel::load_parallel_to_serve::<B::InnerBackend>(
        plan.checkpoint.clone(),
        plan.options,
        &placement,
    )
    .map_err(|e| format!("--model {dir}: {e}"))?;
    let split = format!(
        " split across {} NPUs: ranks {}..{} here ({})",
        placement.ranks,
        placement.first_rank,
        placement.first_rank + devices.len(),
        placement.names()
    );
    say_loaded(plan, &report, model.spec(), &split);
    let eager = model.capture_refusal();
    let server = Server::with_reload(model, plan.serving.serve, device, reload)
        .map_err(|e| e.to_string())?;
    serve_loaded(server, plan, device, eager)
}

/// Says how the load went (`split`: where the model went, when split).
fn say_loaded(plan: &CheckpointPlan, load: &LoadReport, spec: &families::DecoderSpec, split: &str) {
    say!(
        "loaded {} ({}, {} layers){split}: {load}",
        plan.checkpoint.dir().display(),
        spec.model_type,
        spec.layers.len(),
    );
}

/// Sizes the cache from the NPUs' memory (unless --pages) and serves the plan's requests
/// (eagerly when `eager` says why).
fn serve_loaded<B: FusedOps<Device = AscendDevice>, M: StepModel<B>>(
    mut server: Server<B, M>,
    plan: &CheckpointPlan,
    device: &AscendDevice,
    eager: Option<String>,
) -> Result<Vec<Outcome>, String> {
    let dir = plan.checkpoint.dir().display();
    let tokenizer = &plan.tokenizer;
    let text = |ids: &[u32]| tokenizer.decode(ids).map_err(|e| e.to_string());
    if let Some(utilization) = plan.memory {
        let sizing = server
            .fit_cache_to_memory(utilization)
            .map_err(|e| format!("--model {dir}: {e}"))?;
        say!(
            "the KV cache takes {utilization} of {device}'s {:.2} GB less {:.2} GB in use (the \
             weights) and a step's {:.2} GB: {} pages, {} tokens",
            sizing.total_bytes as f64 / 1e9,
            sizing.in_use_bytes as f64 / 1e9,
            sizing.workspace_bytes as f64 / 1e9,
            sizing.pages,
            sizing.tokens
        );
    }
    serve_model(server, &plan.serving, device, eager, text).map(|(outcomes, _)| outcomes)
}

/// The checkpoint loaded on `B`, fine-tuned on the shipped text and saved; for inference.
fn fine_tune<B>(
    plan: &CheckpointPlan,
    cfg: &TrainConfig,
    device: &AscendDevice,
) -> Result<Decoder<B::InnerBackend>, String>
where
    B: AutodiffBackend<Device = AscendDevice> + FusedOps,
    B::InnerBackend: FusedOps,
{
    let dir = plan.checkpoint.dir().display();
    let start = Instant::now();
    let mut model: Decoder<B> = families::load_from(&plan.checkpoint, plan.options, device)
        .map_err(|e| format!("--model {dir}: {e}"))?;
    say!(
        "loaded {dir} ({}, {} layers, {:?}) in {:.1} s",
        model.spec().model_type,
        model.spec().layers.len(),
        model.dtype(),
        start.elapsed().as_secs_f64()
    );
    let tokens = plan
        .tokenizer
        .encode(corpus::TEXT)
        .map_err(|e| format!("encoding the training text: {e}"))?;
    let text = format!("{} tokens of text", tokens.len());
    model = Progress::run("fine-tuned", cfg, &text, |report| {
        train(model, &tokens, cfg, device, report)
    })?;
    families::save(&model, &plan.save, &plan.checkpoint, None)
        .map_err(|e| format!("saving {}: {e}", plan.save.display()))?;
    say!(
        "saved the fine-tuned checkpoint to {} (Hugging Face layout)",
        plan.save.display()
    );
    Ok(model.valid())
}
