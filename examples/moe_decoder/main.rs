//! The MoE decoder example: trains a small mixture-of-experts decoder on the default Ascend
//! device (a real NPU when CANN finds one, else the emulated NPU) with `Autodiff<Ascend>`, saves
//! its weights with Burn's recorder, then serves a set of prompts of different lengths with the
//! continuous-batching server (paged KV cache through the fused `alloc_extend` and
//! `decode_attention`, chunked prefill, preemption when the cache runs out) and prints each
//! continuation and the serving figures. Decode-only steps replay an ACL graph of the step
//! captured per batch-size bucket (`--eager-decode` issues every op instead); the example
//! prints which buckets run captured. `--fusion` runs the same on `Fusion<Ascend>` (lazy
//! execution with fused element-wise runs, decoding eagerly), with the same outputs.
//! `--devices N` trains data-parallel and serves expert-parallel across N NPUs
//! (`parallel.rs`), decoding eagerly; a `--model` checkpoint is split across them (attention,
//! MLPs and vocabulary by tensor parallelism, experts by expert parallelism), and across
//! machines with `--nodes`, one process per machine.
//!
//! Every option is checked before the device is touched and before training starts.
//!
//! `cargo run --release --example moe_decoder -- --help` lists the options.

use std::fs::OpenOptions;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::module::{AutodiffModule, Module};
use burn::record::{BinFileRecorder, FileRecorder, FullPrecisionSettings};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn_ascend::runtime::device::ENV_DEVICE;
use burn_ascend::runtime::DeviceContext;
use burn_ascend::{Ascend, AscendDevice, CollectiveOps, FusedOps};
use burn_ascend_llm::engine::decode_graph::DECODE_BUCKETS;
use burn_ascend_llm::engine::serve::{
    FinishReason, Generation, Request, Sampling, ServeConfig, Server,
};
use burn_ascend_llm::engine::step::StepModel;
use burn_ascend_llm::engine::workload::Arrival;
use burn_ascend_llm::engine::workload::ServingReport;
use burn_ascend_llm::families::blocks::quant::Quantize;
use burn_ascend_llm::moe::config::MoeConfig;
use burn_ascend_llm::moe::corpus;
use burn_ascend_llm::moe::model::MoeDecoder;
use burn_ascend_llm::moe::train::{StepReport, TrainConfig};
use burn_ascend_perf::a2::ModelledClock;
use burn_autodiff::Autodiff;
use burn_fusion::Fusion;
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};

/// Whether `--json` sends the run's messages to stderr (stdout then holds only the JSON lines).
static JSON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Prints a line of the run's progress: on stdout, or on stderr with `--json`.
macro_rules! say {
    ($($arg:tt)*) => {
        if JSON.load(std::sync::atomic::Ordering::Relaxed) {
            eprintln!($($arg)*)
        } else {
            println!($($arg)*)
        }
    };
}

mod checkpoint;
mod parallel;

/// Train and serve the MoE decoder on Ascend.
#[derive(Parser, Debug)]
#[command(
    after_help = "Serving: the prompts arrive together; each step decodes one token of \
every running request and prefills chunks of the others within --step-tokens, and when the \
--pages run out the newest requests are preempted and recomputed later. Afterwards the example \
prints the completed requests, the preemptions, the output tokens/s and the p50/p99 time per \
output token (wall time, and on the emulated NPU the modelled Atlas A2 time)."
)]
pub struct Args {
    /// Device: npu, npu:N, emulated or emulated:N (default: BURN_ASCEND_DEVICE, else an NPU if
    /// CANN has one).
    #[arg(long)]
    device: Option<String>,
    /// Run on Fusion<Ascend>: ops recorded lazily, element-wise runs fused into one kernel.
    #[arg(long)]
    fusion: bool,
    /// NPUs to use, from --device on: data-parallel training, expert-parallel serving; a
    /// --model checkpoint is split across them (tensor-parallel attention, MLPs and vocabulary,
    /// expert-parallel experts).
    #[arg(long, default_value_t = 1)]
    devices: usize,
    /// With --model: processes serving the checkpoint together, one per machine, each with
    /// --devices NPUs (the same number on every machine), meeting at --rendezvous. Each
    /// process is given the same prompts and prints the same results.
    #[arg(long, default_value_t = 1)]
    nodes: usize,
    /// With --nodes: this process's place among them, 0 to nodes - 1 (node 0 listens at
    /// --rendezvous).
    #[arg(long, default_value_t = 0)]
    node_rank: usize,
    /// With --nodes: host:port where node 0 listens for the others, on the machines' private
    /// network; every process needs the same secret in BURN_ASCEND_RENDEZVOUS_SECRET (or the
    /// file BURN_ASCEND_RENDEZVOUS_SECRET_FILE names).
    #[arg(long, value_name = "HOST:PORT")]
    rendezvous: Option<String>,
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
    #[arg(long, default_value_t = 3e-3, allow_negative_numbers = true)]
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
    /// Load weights from this record (a .bin file written by --save) instead of a fresh model.
    #[arg(long)]
    load: Option<PathBuf>,
    /// Where to save the trained weights (the recorder writes <path>.bin).
    #[arg(long, default_value = "target/moe_decoder_weights")]
    save: PathBuf,
    /// Serving: tokens to generate per prompt.
    #[arg(long, default_value_t = 48)]
    new_tokens: usize,
    /// Serving: sample at this temperature instead of greedy decoding.
    #[arg(long, allow_negative_numbers = true)]
    temperature: Option<f64>,
    /// Serving, with --temperature: candidates kept per step.
    #[arg(long, default_value_t = 8)]
    top_k_sampling: usize,
    /// Seed of the model's initialisation and of the sampling draws.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Serving: pages in the paged KV cache (default: 128 for the built-in model; a --model
    /// checkpoint's cache is sized from the NPU's memory, see --npu-memory-utilization). When the
    /// running requests need more, the newest are preempted and recomputed later (their tokens
    /// are kept).
    #[arg(long)]
    pages: Option<usize>,
    /// With --model and no --pages: the fraction of the NPU's memory serving may use; the KV
    /// cache gets what it leaves after the weights and the largest step's workspace.
    #[arg(long, default_value_t = 0.9)]
    npu_memory_utilization: f64,
    /// Serving: slots (tokens) per cache page.
    #[arg(long, default_value_t = 16)]
    page_size: usize,
    /// Serving: tokens one step computes at most, decoded tokens and prefill chunks together;
    /// a longer prompt is prefilled over several steps beside the decode of the others.
    #[arg(long, default_value_t = 64)]
    step_tokens: usize,
    /// Serving: issue every op of each decode step instead of replaying the step's captured
    /// graph.
    #[arg(long)]
    eager_decode: bool,
    /// Serving: a prompt (repeat the option for several; default: the example's four).
    #[arg(long = "prompt")]
    prompts: Vec<String>,
    /// Print one JSON object per request on stdout (prompt, prompt token ids, generated token
    /// ids, text, finish reason); everything else goes to stderr.
    #[arg(long)]
    json: bool,
    /// Serve this Hugging Face checkpoint directory (config.json, safetensors weights,
    /// tokenizer.json) instead of the built-in model: Mixtral, Qwen2-MoE, Qwen3-MoE,
    /// DeepSeek-V2/V3. The built-in model's sizes and --steps do not apply to it.
    #[arg(long, value_name = "DIR")]
    model: Option<PathBuf>,
    /// With --model: fine-tune this many steps on the shipped text first (none by default),
    /// then save the checkpoint (--save-model).
    #[arg(long, default_value_t = 0)]
    train_steps: usize,
    /// With --model: the dtype the weights are loaded (and served) in: auto (the checkpoint's
    /// own, as its config.json says; f32 with --train-steps), f32, f16 or bf16.
    #[arg(long, default_value = "auto")]
    dtype: String,
    /// With --model and --train-steps: the directory the fine-tuned checkpoint is saved to, in
    /// the same Hugging Face layout (default: target/<model dir name>-finetuned).
    #[arg(long, value_name = "DIR")]
    save_model: Option<PathBuf>,
    /// Serving: the longest sequence (prompt and generation) a request may reach (default: 512
    /// for the built-in model; the checkpoint's max_position_embeddings, at most 1024).
    #[arg(long)]
    max_seq: Option<usize>,
    /// Serve with int8 weights: w8a16 (int8 weights, float activations) or w8a8 (activations
    /// quantized per token too). The attention projections, dense MLPs and experts are
    /// quantized per output channel, a checkpoint's layer by layer as it is loaded (the built-in
    /// model after training);
    /// the embedding, routers, norms and LM head stay float. The int8 operators take f16/bf16
    /// activations (an f32 model runs the same arithmetic composed). Not with --train-steps.
    #[arg(long, value_name = "MODE")]
    quantize: Option<Quantize>,
}

/// The built-in model's cache unless `--pages` says otherwise.
const BUILT_IN_PAGES: usize = 128;

/// The prompts the example serves unless `--prompt` names others.
const PROMPTS: [&str; 4] = [
    "The lighthouse keeper",
    "She counted",
    "In the evenings the keeper taught his daughter to",
    "The sea",
];

/// Everything the run needs, from checked options.
pub struct Plan {
    model: MoeConfig,
    train: Option<TrainConfig>,
    serving: Serving,
}

/// What to serve and how, from checked options.
pub struct Serving {
    serve: ServeConfig,
    prompts: Vec<String>,
    requests: Vec<Request>,
    captured_decode: bool,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(args) {
        eprintln!("moe_decoder: {e}");
        std::process::exit(1);
    }
}

/// The prompts to serve: `--prompt`'s, else the example's own.
fn prompts(args: &Args) -> Vec<String> {
    if args.prompts.is_empty() {
        PROMPTS.iter().map(|p| p.to_string()).collect()
    } else {
        args.prompts.clone()
    }
}

/// The server's settings from the options, for sequences of at most `max_seq` tokens.
/// The serving settings; `pages` unless `--pages` says otherwise.
fn serve_config(args: &Args, max_seq: usize, pages: usize) -> Result<ServeConfig, String> {
    let serve = ServeConfig {
        pages: args.pages.unwrap_or(pages),
        page_size: args.page_size,
        max_seq,
        max_kv_splits: 4,
        step_tokens: args.step_tokens,
        max_waiting: 1024,
        record_logits: false,
    };
    serve.validate().map_err(|e| e.to_string())?;
    Ok(serve)
}

/// How tokens are chosen: `--temperature` samples, else greedy.
fn sampling(args: &Args) -> Sampling {
    match args.temperature {
        Some(temperature) => Sampling::Random {
            temperature,
            top_k: args.top_k_sampling,
            top_p: 1.0,
            min_p: 0.0,
            seed: args.seed,
        },
        None => Sampling::Greedy,
    }
}

/// Checks every option (nothing touches a device or a file yet, except the probe of the save
/// path) and says what to run.
pub fn plan(args: &Args) -> Result<Plan, String> {
    if args.train_steps > 0 {
        return Err(
            "--train-steps fine-tunes a --model checkpoint; the built-in model trains --steps"
                .into(),
        );
    }
    if args.quantize.is_some() && args.devices > 1 {
        return Err(
            "--quantize: the built-in model quantized serves on one NPU (its experts are not \
             split across --devices; a --model checkpoint's are)"
                .into(),
        );
    }
    if args.nodes > 1 {
        return Err("--nodes: processes on several machines serve a --model checkpoint".into());
    }
    let model = MoeConfig::new()
        .with_hidden(args.hidden)
        .with_layers(args.layers)
        .with_q_heads(args.q_heads)
        .with_kv_heads(args.kv_heads)
        .with_experts(args.experts)
        .with_top_k(args.top_k)
        .with_expert_hidden(args.expert_hidden);
    model.validate().map_err(|e| e.to_string())?;
    let train = (args.steps > 0)
        .then(|| {
            let cfg = TrainConfig {
                steps: args.steps,
                batch: args.batch,
                seq_len: args.seq_len,
                learning_rate: args.lr,
                aux_weight: model.aux_loss,
            };
            cfg.validate().map_err(|e| e.to_string()).map(|_| cfg)
        })
        .transpose()?;
    let serve = serve_config(args, args.max_seq.unwrap_or(model.max_seq), BUILT_IN_PAGES)?;
    let prompts = prompts(args);
    let sampling = sampling(args);
    let requests: Vec<Request> = prompts
        .iter()
        .map(|p| Request {
            prompt: p.bytes().map(u32::from).collect(),
            new_tokens: args.new_tokens,
            sampling,
            stop: Vec::new(),
        })
        .collect();
    for (prompt, request) in prompts.iter().zip(&requests) {
        serve
            .check(request, model.vocab)
            .map_err(|e| format!("serving {prompt:?}: {e}"))?;
    }
    if let Some(path) = &args.load {
        check_record(path)?;
    }
    if train.is_some() {
        check_writable(&record_file(&args.save))?;
    }
    Ok(Plan {
        model,
        train,
        serving: Serving {
            serve,
            prompts,
            requests,
            captured_decode: !args.eager_decode,
        },
    })
}

type Recorder = BinFileRecorder<FullPrecisionSettings>;

/// The file the recorder reads or writes for `path`: it replaces the extension with its own.
fn record_file(path: &Path) -> PathBuf {
    path.with_extension(<Recorder as FileRecorder<Ascend>>::file_extension())
}

/// `--load path` names an existing record file.
fn check_record(path: &Path) -> Result<(), String> {
    let file = record_file(path);
    if file.is_file() {
        return Ok(());
    }
    if path.exists() {
        return Err(format!(
            "--load {}: not a weights record: records are the .{} files --save writes (this \
             path would read {})",
            path.display(),
            <Recorder as FileRecorder<Ascend>>::file_extension(),
            file.display()
        ));
    }
    Err(format!("--load {}: no such file", file.display()))
}

/// `file` can be written: creates its directory and opens it for appending (an existing file
/// is left as it is; one created here is removed again).
pub(crate) fn check_writable(file: &Path) -> Result<(), String> {
    let fail = |e: std::io::Error| format!("--save: cannot write {}: {e}", file.display());
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(fail)?;
    }
    let existed = file.exists();
    OpenOptions::new()
        .append(true)
        .create(true)
        .open(file)
        .map_err(fail)?;
    if !existed {
        std::fs::remove_file(file).map_err(fail)?;
    }
    Ok(())
}

/// The device `--device`, else `BURN_ASCEND_DEVICE`, names (`None`: neither, the default
/// device); a value that is not a device is an error here, before anything opens one.
fn forced_device(args: &Args) -> Result<Option<AscendDevice>, String> {
    let (text, from) = match (&args.device, std::env::var(ENV_DEVICE)) {
        (Some(d), _) => (d.clone(), "--device".to_string()),
        (None, Ok(v)) => (v, ENV_DEVICE.to_string()),
        (None, Err(std::env::VarError::NotPresent)) => return Ok(None),
        (None, Err(e)) => return Err(format!("{ENV_DEVICE}: {e}")),
    };
    AscendDevice::parse(&text)
        .map(Some)
        .ok_or_else(|| format!("{from} {text:?} is not npu, npu:N, emulated or emulated:N"))
}

/// Checks the options, then trains and serves.
pub fn run(args: Args) -> Result<Vec<Outcome>, String> {
    JSON.store(args.json, std::sync::atomic::Ordering::Relaxed);
    let forced = forced_device(&args)?;
    if let Some(dir) = &args.model {
        return run_checkpoint(&args, dir, forced);
    }
    let plan = plan(&args)?;
    let device = forced.unwrap_or_default();
    let devices = parallel::devices(device, args.devices)?;
    // Open the devices up front: an explicit --device npu without CANN or an NPU is an error
    // here, not a panic inside the first tensor op.
    for d in &devices {
        DeviceContext::get(&d.into()).map_err(|e| format!("cannot open {d:?}: {e}"))?;
    }
    if args.fusion {
        say!("device: {} (Fusion<Ascend>)", Ascend::name(&device));
        train_and_serve::<Autodiff<Fusion<Ascend>>>(&args, &plan, &devices)
    } else {
        say!("device: {}", Ascend::name(&device));
        train_and_serve::<Autodiff<Ascend>>(&args, &plan, &devices)
    }
}

/// `--model DIR`: checks the options and the checkpoint, then fine-tunes (if asked) and serves it.
fn run_checkpoint(
    args: &Args,
    dir: &Path,
    forced: Option<AscendDevice>,
) -> Result<Vec<Outcome>, String> {
    let plan = checkpoint::plan(args, dir)?;
    let device = forced.unwrap_or_default();
    let devices = parallel::devices(device, args.devices)?;
    for d in &devices {
        DeviceContext::get(&d.into()).map_err(|e| format!("cannot open {d:?}: {e}"))?;
    }
    if args.fusion {
        say!("device: {} (Fusion<Ascend>)", Ascend::name(&device));
        checkpoint::run::<Autodiff<Fusion<Ascend>>>(&plan, &devices)
    } else {
        say!("device: {}", Ascend::name(&device));
        checkpoint::run::<Autodiff<Ascend>>(&plan, &devices)
    }
}

/// Trains on `B` (an autodiff backend over an Ascend backend), then serves on its inner backend.
fn train_and_serve<B>(
    args: &Args,
    plan: &Plan,
    devices: &[AscendDevice],
) -> Result<Vec<Outcome>, String>
where
    B: AutodiffBackend<Device = AscendDevice> + FusedOps,
    B::InnerBackend: FusedOps + CollectiveOps,
{
    let device = &devices[0];
    B::seed(device, args.seed);
    let recorder = Recorder::new();
    let mut model = MoeDecoder::<B>::new(&plan.model, device).map_err(|e| e.to_string())?;
    if let Some(path) = &args.load {
        let file = record_file(path);
        let params = model.num_params();
        model = model
            .load_file(file.clone(), &recorder, device)
            .map_err(|e| {
                format!(
                    "--load {}: not a weights record of this example: {e}",
                    file.display()
                )
            })?;
        if model.num_params() != params {
            return Err(format!(
                "--load {}: the record holds {} parameters, a model of these sizes has {}: \
                 pass the sizes it was trained with",
                file.display(),
                model.num_params(),
                params
            ));
        }
        say!("loaded weights from {}", file.display());
    }
    if let Some(train_cfg) = &plan.train {
        model = train_model(model, train_cfg, devices)?;
        let file = record_file(&args.save);
        model
            .clone()
            .save_file(file.clone(), &recorder)
            .map_err(|e| format!("saving {}: {e}", file.display()))?;
        say!("saved weights to {}", file.display());
    }
    let mut model = model.valid();
    if let Some(mode) = args.quantize {
        model = model.quantize(mode).map_err(|e| e.to_string())?;
        say!("quantized the model ({mode})");
    }
    serve(model, plan, devices)
}

fn train_model<B>(
    model: MoeDecoder<B>,
    cfg: &TrainConfig,
    devices: &[AscendDevice],
) -> Result<MoeDecoder<B>, String>
where
    B: AutodiffBackend<Device = AscendDevice> + FusedOps,
    B::InnerBackend: CollectiveOps,
{
    let tokens = corpus::tokens();
    let text = format!("{} bytes of text", tokens.len());
    Progress::run("trained", cfg, &text, |report| {
        parallel::train(model, &tokens, cfg, devices, report)
    })
}

/// Training progress: a bar on a terminal, else a line every ten steps.
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
    steps: usize,
}

impl Progress {
    /// Runs `train` (`cfg`'s steps on `text`), reporting its progress, then how long it took
    /// (`done`: "trained", "fine-tuned").
    pub(crate) fn run<T, E: std::fmt::Display>(
        done: &str,
        cfg: &TrainConfig,
        text: &str,
        train: impl FnOnce(&mut dyn FnMut(StepReport)) -> Result<T, E>,
    ) -> Result<T, String> {
        say!(
            "training {} steps of {}x{} tokens on {text}",
            cfg.steps,
            cfg.batch,
            cfg.seq_len
        );
        let start = Instant::now();
        let progress = Self::new(cfg.steps);
        let trained = train(&mut |r| progress.report(r));
        progress.finish();
        let trained = trained.map_err(|e| format!("{e}; nothing was saved"))?;
        say!("{done} in {:.1} s", start.elapsed().as_secs_f64());
        Ok(trained)
    }

    fn new(steps: usize) -> Self {
        let bar = std::io::stdout().is_terminal().then(|| {
            let bar = ProgressBar::new(steps as u64);
            bar.set_style(
                ProgressStyle::with_template("{bar:30} step {pos}/{len} {msg}")
                    .expect("a valid template"),
            );
            bar
        });
        Self { bar, steps }
    }

    fn report(&self, r: StepReport) {
        let line = format!(
            "loss {:.3} aux {:.3} {:.0} tokens/s",
            r.loss, r.aux, r.tokens_per_second
        );
        match &self.bar {
            Some(bar) => {
                bar.set_position(r.step as u64);
                bar.set_message(line);
            }
            None if r.step == 1 || r.step.is_multiple_of(10) || r.step == self.steps => {
                say!("step {}/{} {line}", r.step, self.steps)
            }
            None => {}
        }
    }

    fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish();
        }
    }
}

fn serve<B: FusedOps<Device = AscendDevice> + CollectiveOps>(
    model: MoeDecoder<B>,
    plan: &Plan,
    devices: &[AscendDevice],
) -> Result<Vec<Outcome>, String> {
    let serving = &plan.serving;
    let served = parallel::serving(model.clone(), devices)?;
    // Expert-parallel decode exchanges rows between NPUs (HCCL), which the captured step of
    // one device does not record.
    let eager =
        (devices.len() > 1).then(|| format!("expert-parallel decode spans {} NPUs", devices.len()));
    let bytes = |tokens: &[u32]| {
        let bytes: Vec<u8> = tokens.iter().map(|&t| t as u8).collect();
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    let server = Server::new(served, serving.serve, &devices[0]).map_err(|e| e.to_string())?;
    let (outcomes, report) = serve_model(server, serving, &devices[0], eager, bytes)?;
    parallel::check_one_device(model, serving.serve, devices, &serving.requests, &report)?;
    Ok(outcomes)
}

/// Serves `serving`'s requests with `model` on `device` (captured decode unless asked not to or
/// `eager` says why not), prints each outcome, its text decoded by `text`, and the serving
/// figures.
pub(crate) fn serve_model<B: FusedOps<Device = AscendDevice>, M: StepModel<B>>(
    mut server: Server<B, M>,
    serving: &Serving,
    device: &AscendDevice,
    eager: Option<String>,
    text: impl Fn(&[u32]) -> Result<String, String>,
) -> Result<(Vec<Outcome>, ServingReport), String> {
    let cfg = *server.config();
    match eager {
        Some(why) if serving.captured_decode => say!("decode steps run eagerly: {why}"),
        // On failure the server has said why, and decodes eagerly.
        None if serving.captured_decode => {
            if server.enable_captured_decode(&DECODE_BUCKETS).is_ok() {
                let eager: Vec<String> = server
                    .eager_buckets()
                    .iter()
                    .map(|(b, why)| format!("{b} ({why})"))
                    .collect();
                say!(
                    "decode steps replay captured graphs for batch buckets {:?}{}",
                    server.captured_buckets(),
                    if eager.is_empty() {
                        String::new()
                    } else {
                        format!("; eager: {}", eager.join(", "))
                    }
                );
            }
        }
        _ => say!("decode steps run eagerly (--eager-decode)"),
    }
    say!(
        "serving {} prompts, {} new tokens each at most (paged KV cache of {} pages of {} \
         slots, steps of at most {} tokens)",
        serving.requests.len(),
        serving.requests[0].new_tokens,
        cfg.pages,
        cfg.page_size,
        cfg.step_tokens
    );
    let arrivals: Vec<Arrival> = serving
        .requests
        .iter()
        .map(|r| Arrival {
            step: 0,
            request: r.clone(),
        })
        .collect();
    // The modelled device time exists on the emulated NPU only (it reads its counters).
    let mut clock = matches!(device, AscendDevice::Emulated(_)).then(ModelledClock::start);
    let report = server.serve(&arrivals, || clock.as_mut().map(ModelledClock::lap));
    let mut outcomes = Vec::new();
    for ((prompt, request), result) in serving
        .prompts
        .iter()
        .zip(&serving.requests)
        .zip(&report.results)
    {
        let decoded = match result {
            Ok(g) => text(&g.tokens).map(|t| (g, t)),
            Err(e) => Err(e.to_string()),
        };
        outcomes.push(outcome(prompt, &request.prompt, decoded));
    }
    say!("{report}");
    Ok((outcomes, report))
}

/// One request's outcome: prompt, prompt token ids, and the generated token ids, text and
/// finish reason, or the error.
pub type Outcome = serde_json::Value;

/// Prints one request's outcome (a line of text, or with `--json` its JSON object) and
/// returns it.
fn outcome(
    prompt: &str,
    prompt_ids: &[u32],
    result: Result<(&Generation, String), String>,
) -> Outcome {
    let json = JSON.load(std::sync::atomic::Ordering::Relaxed);
    let (line, value) = match result {
        Ok((g, text)) => {
            let finish = match g.finish {
                FinishReason::Stop => "stop",
                FinishReason::Length => "length",
            };
            let line = format!("  {prompt:?} -> {text:?}");
            let value = serde_json::json!({
                "prompt": prompt,
                "prompt_token_ids": prompt_ids,
                "token_ids": g.tokens,
                "text": text,
                "finish_reason": finish,
            });
            (line, value)
        }
        Err(e) => {
            let line = format!("  {prompt:?} -> error: {e}");
            let value = serde_json::json!({
                "prompt": prompt,
                "prompt_token_ids": prompt_ids,
                "error": e,
            });
            (line, value)
        }
    };
    if json {
        println!("{value}");
    } else {
        println!("{line}");
    }
    value
}
