//! What the HTTP tests share: the tiny Qwen3-MoE fixture of the workspace's tests, an engine
//! serving it, and the server on a free port of 127.0.0.1 in this process.

#![allow(dead_code)] // Each test file uses its own part.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use burn::tensor::DType;
use burn_ascend::{Ascend, AscendDevice};
use burn_ascend_llm::engine::serve::{ServeConfig, Server};
use burn_ascend_llm::families::{self, Decoder};
use burn_ascend_llm::hf::TextTokenizer;
use burn_ascend_openai::chat::ChatTemplate;
use burn_ascend_openai::metrics::Metrics;
use burn_ascend_openai::text::Reasoning;
use burn_ascend_openai::{serve, App, Engine, Limits, ModelSpec, Served, Tokenizer};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub const MODEL: &str = "qwen3_moe";

pub fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/hf/qwen3_moe")
}

pub fn device() -> AscendDevice {
    AscendDevice::default()
}

/// Tests that fault the device read the emulated NPU's behaviour: skipped on a real one.
pub fn skipped_on_npu(test: &str) -> bool {
    let npu = matches!(device(), AscendDevice::Npu(_));
    if npu {
        eprintln!("{test}: skipped on {}: it faults the device", device());
    }
    npu
}

/// A device fit to load a model on: an engine that could not recover (a test of supervision)
/// leaves it faulted, as its process would exit.
pub fn reset_device() {
    burn_ascend::reset_device(&device()).expect("the device resets");
}

pub fn load() -> Decoder<Ascend> {
    families::load::<Ascend>(fixture(), DType::F32, &device())
        .expect("the fixture loads")
        .model
}

pub fn tokenizer() -> TextTokenizer {
    TextTokenizer::from_dir(fixture()).expect("the fixture's tokenizer")
}

pub fn config() -> ServeConfig {
    ServeConfig {
        pages: 64,
        page_size: 4,
        max_seq: 64,
        max_kv_splits: 2,
        step_tokens: 32,
        max_waiting: 128,
        record_logits: false,
    }
}

/// ChatML, as Qwen's templates render a conversation (the fixture has no template).
pub fn chatml() -> Arc<ChatTemplate> {
    let source = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n\
                  {% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    Arc::new(ChatTemplate::from_source(source, [], "chatml").unwrap())
}

/// The app serving the fixture through an engine with `cfg`, within `limits` (default ones
/// when `None`).
pub fn app(cfg: ServeConfig, limits: Option<Limits>) -> Arc<App> {
    let (engine, _) = Engine::spawn(
        move || Server::new(load(), cfg, &device()).map_err(|e| e.to_string()),
        Arc::new(Metrics::new(MODEL)),
    )
    .expect("the engine starts");
    let limits = limits.unwrap_or_else(|| Limits::new(cfg.max_seq));
    App::with_limits(engine, spec(chatml(), None), limits)
}

/// The fixture's model as the server names it, with the chat template `chat` and the reasoning
/// parser `reasoning`.
pub fn spec(chat: Arc<ChatTemplate>, reasoning: Option<Reasoning>) -> ModelSpec {
    ModelSpec {
        name: MODEL.into(),
        tokenizer: Tokenizer::Checkpoint(Box::new(tokenizer())),
        chat: Some(chat),
        sampling: Default::default(),
        reasoning,
    }
}

/// `app` served by [`serve`] on 127.0.0.1 until [`Serving::stop`] (or the engine fails).
pub struct Serving {
    pub base: String,
    pub address: String,
    pub app: Arc<App>,
    stop: Option<oneshot::Sender<()>>,
    pub served: JoinHandle<std::io::Result<Served>>,
}

impl Serving {
    pub async fn start(app: Arc<App>) -> Self {
        Self::start_on(app, |serving| tokio::spawn(serving)).await
    }

    /// Serving spawned by `spawn` (on another runtime, say).
    pub async fn start_on(
        app: Arc<App>,
        spawn: impl FnOnce(
            std::pin::Pin<Box<dyn Future<Output = std::io::Result<Served>> + Send>>,
        ) -> JoinHandle<std::io::Result<Served>>,
    ) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async move {
            let _ = stopped.await;
        };
        let served_app = app.clone();
        let served = spawn(Box::pin(async move {
            let listener = TcpListener::from_std(listener)?;
            serve(listener, served_app, shutdown, Duration::from_secs(20)).await
        }));
        Self {
            base: format!("http://{address}"),
            address,
            app,
            stop: Some(stop),
            served,
        }
    }

    /// Shuts down: how serving ended.
    pub async fn stop(mut self) -> Served {
        let _ = self.stop.take().unwrap().send(());
        self.served.await.unwrap().unwrap()
    }
}
