//! An OpenAI-compatible HTTP server (vLLM's interface) for the MoE models: a Hugging Face
//! checkpoint directory (`--model DIR`) or, without it, the built-in decoder untrained (bytes
//! as tokens: it loads at once and serves noise, to try the server).
//!
//! ```sh
//! cargo install --path burn-ascend-openai
//! burn-ascend-openai --model DIR --port 8000
//! curl -N localhost:8000/v1/completions -H 'Content-Type: application/json' \
//!     -d '{"model": "DIR", "prompt": "The capital of France is", "max_tokens": 16, "stream": true}'
//! ```
//!
//! SIGINT or SIGTERM: new requests get 503, the running ones finish (for up to
//! `--drain-secs`), then the server exits with 0. An engine that can no longer serve (a
//! failure its recovery could not fix) makes `/health` and new requests 503 and the pending
//! ones 500; after the same drain the server exits with 1, for its supervisor to restart it.
//!
//! `--devices N` serves across N NPUs from `--device` on: a checkpoint split by tensor and
//! expert parallelism (`burn_ascend_llm::families::parallel`), each NPU reading its part of the
//! files; the built-in decoder with its experts split.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use burn::tensor::backend::Backend;
use burn_ascend::runtime::device::device_count;
use burn_ascend::runtime::DeviceContext;
use burn_ascend::{Ascend, AscendDevice};
use burn_ascend_llm::engine::decode_graph::DECODE_BUCKETS;
use burn_ascend_llm::engine::serve::{ServeConfig, Server};
use burn_ascend_llm::engine::step::StepModel;
use burn_ascend_llm::families::blocks::quant::Quantize;
use burn_ascend_llm::families::parallel::{self, Placement};
use burn_ascend_llm::families::{self, LoadOptions, LoadReport, ToServe};
use burn_ascend_llm::hf::Checkpoint;
use burn_ascend_llm::hf::TextTokenizer;
use burn_ascend_llm::moe::config::MoeConfig;
use burn_ascend_llm::moe::expert_parallel::ExpertParallel;
use burn_ascend_llm::moe::model::MoeDecoder;
use burn_ascend_openai::api::SamplingDefaults;
use burn_ascend_openai::chat::ChatTemplate;
use burn_ascend_openai::engine::Injected;
use burn_ascend_openai::metrics::Metrics;
use burn_ascend_openai::text::Reasoning;
use burn_ascend_openai::{serve, App, Engine, Limits, ModelSpec, Tokenizer};
use clap::Parser;

/// Serve a MoE model over OpenAI's HTTP API.
#[derive(Parser, Debug)]
struct Args {
    /// A Hugging Face checkpoint directory (Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2/V3);
    /// without it, the built-in decoder, untrained.
    #[arg(long, value_name = "DIR")]
    model: Option<PathBuf>,
    /// The model name clients send (default: --model as given, else "moe-decoder").
    #[arg(long)]
    served_model_name: Option<String>,
    /// Split a chat reply's reasoning (its think block) into `reasoning_content`, as vLLM's
    /// `--reasoning-parser`: qwen3 or deepseek_r1 (default: none, the think block is content).
    #[arg(long)]
    reasoning_parser: Option<Reasoning>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0: any free one, printed).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Device: npu, npu:N, emulated or emulated:N (default: BURN_ASCEND_DEVICE, else an NPU if
    /// CANN has one).
    #[arg(long)]
    device: Option<String>,
    /// NPUs to serve on, from --device on: a checkpoint is split across them (attention,
    /// MLPs and vocabulary by tensor parallelism, routed experts by expert parallelism), the
    /// built-in decoder's experts are.
    #[arg(long, default_value_t = 1)]
    devices: usize,
    /// With --model: the dtype the weights are served in: auto (the checkpoint's own, as its
    /// config.json says), f32, f16 or bf16.
    #[arg(long, default_value = "auto")]
    dtype: String,
    /// With --model: quantize the layers to int8 as they are loaded: w8a16 or w8a8 (the
    /// embedding, routers, norms and LM head stay float).
    #[arg(long, value_name = "MODE")]
    quantize: Option<Quantize>,
    /// The fraction of the NPU's memory the server may use: the KV cache gets what it leaves
    /// after the weights and the largest step's workspace (as vLLM's
    /// --gpu-memory-utilization).
    #[arg(long, default_value_t = 0.9)]
    npu_memory_utilization: f64,
    /// Pages of the paged KV cache, instead of sizing it from the NPU's memory.
    #[arg(long)]
    pages: Option<usize>,
    /// Slots per cache page.
    #[arg(long, default_value_t = 16)]
    page_size: usize,
    /// Tokens one step computes at most (decoded tokens and prefill chunks).
    #[arg(long, default_value_t = 256)]
    step_tokens: usize,
    /// The longest sequence a request may reach (default: the checkpoint's
    /// max_position_embeddings, at most 2048; 512 for the built-in model).
    #[arg(long)]
    max_seq: Option<usize>,
    /// Requests that may wait for admission; more get 429 with Retry-After.
    #[arg(long, default_value_t = 256)]
    max_waiting: usize,
    /// Issue every op of decode steps instead of replaying captured graphs.
    #[arg(long)]
    eager_decode: bool,
    /// On SIGINT/SIGTERM (or when the engine can no longer serve), seconds the running
    /// requests get to finish.
    #[arg(long, default_value_t = 30)]
    drain_secs: u64,
    /// Seconds a client has to send a request's head (and a kept-alive connection may stay
    /// idle); then its connection is closed.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    header_timeout_secs: u64,
    /// Seconds a client has to send a request's body once its head has come; then 408.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    body_timeout_secs: u64,
    /// Bytes a request body may have; more is a 413.
    #[arg(long, default_value_t = 8 << 20, value_parser = at_least_one)]
    max_body_bytes: usize,
    /// Connections served at once; more wait in the accept backlog until one closes.
    #[arg(long, default_value_t = 512, value_parser = at_least_one)]
    max_connections: usize,
    /// Tokens a prompt may have; more is a 400 (default: --max-seq - 1).
    #[arg(long, value_parser = at_least_one)]
    max_prompt_tokens: Option<usize>,
    /// Requests parsed and tokenized (or rendered by the chat template) at once, off the
    /// threads that stream tokens (default: one per core).
    #[arg(long, value_parser = at_least_one)]
    tokenizer_threads: Option<usize>,
    /// A test hook, for the test of the exit path: the first step faults on the device and
    /// the recovery from it fails, so the engine can no longer serve.
    #[arg(long, hide = true)]
    test_hook_unrecoverable_fault: bool,
    /// Seed of the built-in model's weights.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// The longest sequence served when the checkpoint allows more.
const DEFAULT_MAX_SEQ: usize = 2048;

fn at_least_one(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(args) {
        eprintln!("burn-ascend-openai: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), String> {
    let device = match &args.device {
        Some(d) => AscendDevice::parse(d)
            .ok_or_else(|| format!("--device {d:?} is not npu, npu:N, emulated or emulated:N"))?,
        None => AscendDevice::default(),
    };
    let devices = npus(device, args.devices)?;
    for d in &devices {
        DeviceContext::get(&d.into()).map_err(|e| format!("cannot open {d:?}: {e}"))?;
    }
    // Without --pages, a cache that holds one longest request, until it is sized from memory.
    let serve_config = |max_seq: usize| {
        let cfg = ServeConfig {
            pages: args.pages.unwrap_or(max_seq.div_ceil(args.page_size)),
            page_size: args.page_size,
            max_seq,
            max_kv_splits: 4,
            step_tokens: args.step_tokens,
            max_waiting: args.max_waiting,
            record_logits: false,
        };
        cfg.validate().map(|_| cfg).map_err(|e| e.to_string())
    };
    let captured = !args.eager_decode;
    let (engine, spec, limits) = match &args.model {
        Some(dir) => {
            let fail = |e: &dyn std::fmt::Display| format!("--model {}: {e}", dir.display());
            let options = LoadOptions {
                dtype: LoadOptions::parse_dtype(&args.dtype).map_err(|e| format!("--{e}"))?,
                quantize: args.quantize,
            };
            let tokenizer = TextTokenizer::from_dir(dir).map_err(|e| fail(&e))?;
            let chat = ChatTemplate::from_dir(dir).map_err(|e| fail(&e))?;
            if chat.is_none() {
                eprintln!(
                    "burn-ascend-openai: {} has no chat template: /v1/chat/completions answers 400",
                    dir.display()
                );
            }
            // As vLLM's default `--generation-config auto`: the checkpoint's sampling for the
            // fields a request leaves out.
            let sampling = SamplingDefaults::from_dir(dir).map_err(|e| fail(&e))?;
            if sampling.is_set() {
                eprintln!(
                    "burn-ascend-openai: generation_config.json's sampling for the fields a \
                     request leaves out: {sampling}"
                );
            }
            let name = args
                .served_model_name
                .clone()
                .unwrap_or_else(|| dir.display().to_string());
            let metrics = Arc::new(Metrics::new(name.clone()));
            let checkpoint = Checkpoint::open(dir).map_err(|e| fail(&e))?;
            // The format comes from the checkpoint; quantizing an int8 one again is refused
            // before the device is opened.
            if let Some(q) = args.quantize {
                let spec = families::spec_of(checkpoint.config()).map_err(|e| fail(&e))?;
                let (plan, _) = families::prequant::plan(&checkpoint, &spec.expected())
                    .map_err(|e| fail(&e))?;
                if let Some(plan) = plan.filter(|p| p.int8_mode().is_some()) {
                    return Err(fail(&format!(
                        "--quantize {q} is refused: the checkpoint is already quantized \
                         ({plan}); serve it without --quantize"
                    )));
                }
            }
            let max_seq = families::serving_max_seq(&checkpoint, args.max_seq, DEFAULT_MAX_SEQ)?;
            let cfg = serve_config(max_seq)?;
            let limits = limits(&args, max_seq)?;
            let shown = dir.display().to_string();
            let memory = args.pages.is_none().then_some(args.npu_memory_utilization);
            let spec = families::spec_of(checkpoint.config()).map_err(|e| fail(&e))?;
            if devices.len() > 1 {
                spec.check_split(devices.len()).map_err(|e| fail(&e))?;
            }
            let checkpoint = Arc::new(checkpoint);
            let (engine, _) = if devices.len() == 1 {
                Engine::spawn(
                    move || {
                        let ToServe {
                            model,
                            reload,
                            report,
                        } = families::load_to_serve::<Ascend>(checkpoint, options, &device)
                            .map_err(|e| format!("--model {shown}: {e}"))?;
                        say_loaded(&shown, &report, "");
                        let server = Server::with_reload(model, cfg, &device, reload)
                            .map_err(|e| e.to_string())?;
                        ready(server, &[device], memory, captured)
                    },
                    metrics,
                )?
            } else {
                Engine::spawn(
                    move || {
                        let placement = Placement::local(&devices);
                        let ToServe {
                            model,
                            reload,
                            report,
                        } = parallel::load_parallel_to_serve::<Ascend>(
                            checkpoint, options, &placement,
                        )
                        .map_err(|e| format!("--model {shown}: {e}"))?;
                        let split = format!(" split across {}", placement.names());
                        say_loaded(&shown, &report, &split);
                        let server = Server::with_reload(model, cfg, &devices[0], reload)
                            .map_err(|e| e.to_string())?;
                        ready(server, &devices, memory, captured)
                    },
                    metrics,
                )?
            };
            let spec = ModelSpec {
                name,
                tokenizer: Tokenizer::Checkpoint(Box::new(tokenizer)),
                chat: chat.map(Arc::new),
                sampling,
                reasoning: args.reasoning_parser,
            };
            (engine, spec, limits)
        }
        None => {
            let model_cfg = MoeConfig::new();
            let cfg = serve_config(args.max_seq.unwrap_or(model_cfg.max_seq))?;
            let limits = limits(&args, cfg.max_seq)?;
            let seed = args.seed;
            let memory = args.pages.is_none().then_some(args.npu_memory_utilization);
            let name = args
                .served_model_name
                .clone()
                .unwrap_or_else(|| "moe-decoder".into());
            let metrics = Arc::new(Metrics::new(name.clone()));
            let (engine, _) = Engine::spawn(
                move || {
                    Ascend::seed(&device, seed);
                    let mut model = MoeDecoder::<Ascend>::new(&model_cfg, &device)
                        .map_err(|e| e.to_string())?;
                    if devices.len() > 1 {
                        model =
                            ExpertParallel::shard(model, &devices).map_err(|e| e.to_string())?;
                    }
                    let server = Server::new(model, cfg, &device).map_err(|e| e.to_string())?;
                    ready(server, &devices, memory, captured)
                },
                metrics,
            )?;
            let spec = ModelSpec {
                name,
                tokenizer: Tokenizer::Bytes,
                chat: None,
                sampling: SamplingDefaults::default(),
                reasoning: None,
            };
            (engine, spec, limits)
        }
    };
    if args.test_hook_unrecoverable_fault {
        engine.inject(Injected::DeviceFault);
        engine.inject(Injected::FailedRecovery);
    }
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
            .await
            .map_err(|e| format!("cannot listen on {}:{}: {e}", args.host, args.port))?;
        let address = listener.local_addr().map_err(|e| e.to_string())?;
        eprintln!("burn-ascend-openai: limits: {limits}");
        eprintln!("serving `{}` on http://{address}", spec.name);
        let app = App::with_limits(engine, spec, limits);
        let served = serve(
            listener,
            app,
            shutdown_signal(),
            Duration::from_secs(args.drain_secs),
        )
        .await
        .map_err(|e| format!("serving: {e}"))?;
        if served.unfinished > 0 {
            eprintln!(
                "burn-ascend-openai: {} requests had not finished after --drain-secs {}",
                served.unfinished, args.drain_secs
            );
        }
        match served.failure {
            Some(why) => Err(format!(
                "the engine cannot serve any more, exiting for a restart: {why}"
            )),
            None => Ok(()),
        }
    })
}

/// The HTTP limits the options set, checked against the longest sequence.
fn limits(args: &Args, max_seq: usize) -> Result<Limits, String> {
    let mut limits = Limits::new(max_seq);
    if let Some(n) = args.max_prompt_tokens {
        if n >= max_seq {
            return Err(format!(
                "--max-prompt-tokens {n} leaves no room to generate within the longest sequence \
                 of {max_seq} tokens (--max-seq): at most {}",
                max_seq - 1
            ));
        }
        limits.max_prompt_tokens = n;
    }
    limits.header_timeout = Duration::from_secs(args.header_timeout_secs);
    limits.body_timeout = Duration::from_secs(args.body_timeout_secs);
    limits.max_body_bytes = args.max_body_bytes;
    limits.max_connections = args.max_connections;
    if let Some(n) = args.tokenizer_threads {
        limits.tokenizer_threads = n;
    }
    Ok(limits)
}

/// `count` NPUs of `first`'s kind from `first` on.
fn npus(first: AscendDevice, count: usize) -> Result<Vec<AscendDevice>, String> {
    let available =
        device_count(&first.into()).map_err(|e| format!("cannot count devices: {e}"))?;
    if count == 0 || first.index() + count > available {
        return Err(format!(
            "--devices {count} from {first}: the machine has {available} (emulated NPUs: \
             BURN_ASCEND_EMU_DEVICES)"
        ));
    }
    Ok((first.index()..first.index() + count)
        .map(|i| match first {
            AscendDevice::Npu(_) => AscendDevice::Npu(i),
            AscendDevice::Emulated(_) => AscendDevice::Emulated(i),
        })
        .collect())
}

/// Says how a checkpoint loaded (`split`: where it went, when split).
fn say_loaded(shown: &str, load: &LoadReport, split: &str) {
    eprintln!("burn-ascend-openai: loaded {shown}{split}: {load}");
}

/// The server made ready to serve: its KV cache sized from the devices' memory (given a
/// utilization), then its decode steps captured unless asked not to (or the model refuses:
/// split across NPUs); the sizes said on stderr.
fn ready<M: StepModel<Ascend>>(
    mut server: Server<Ascend, M>,
    devices: &[AscendDevice],
    memory: Option<f64>,
    captured: bool,
) -> Result<Server<Ascend, M>, String> {
    let device = &devices[0];
    let mut weights = Vec::new();
    for d in devices {
        let ctx = DeviceContext::get(&(*d).into()).map_err(|e| e.to_string())?;
        // Only the NPUs a step runs on hold a cache (not those of the built-in's experts).
        let cache = if server.devices().contains(d) {
            server.cache_bytes()
        } else {
            0
        };
        let held = ctx.memory_stats().bytes_in_use as u64 - cache;
        weights.push(format!("{:.2} GB on {d}", held as f64 / 1e9));
    }
    let weights = weights.join(", ");
    if let Some(utilization) = memory {
        let sizing = server
            .fit_cache_to_memory(utilization)
            .map_err(|e| e.to_string())?;
        eprintln!(
            "burn-ascend-openai: the KV cache takes {utilization} of {device}'s {:.2} GB less \
             {:.2} GB in use and a step's {:.2} GB",
            sizing.total_bytes as f64 / 1e9,
            sizing.in_use_bytes as f64 / 1e9,
            sizing.workspace_bytes as f64 / 1e9,
        );
    }
    let cfg = *server.config();
    eprintln!(
        "burn-ascend-openai: weights {weights}; KV cache {} pages of {} slots ({} tokens) on \
         each NPU of the step; the longest request {} tokens",
        cfg.pages,
        cfg.page_size,
        cfg.pages * cfg.page_size,
        cfg.max_seq
    );
    // On failure it has said why, and decodes eagerly.
    if captured {
        let _ = server.enable_captured_decode(&DECODE_BUCKETS);
    }
    Ok(server)
}

/// SIGINT or SIGTERM.
async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    eprintln!("burn-ascend-openai: shutting down: no new requests; draining the running ones");
}
