//! The OpenAI-compatible HTTP server (`burn_ascend_openai`) through a real HTTP client
//! against the server on 127.0.0.1: completions and chat, streamed and not, equal to the
//! in-process engine's tokens for the same request and seed; every error status; 64 streaming
//! clients of which some go away mid-stream, after which the cache is whole again; the drain
//! on shutdown. The model is the tiny Qwen3-MoE fixture (`tests/fixtures/hf/qwen3_moe`).
//!
//! The device-fault test runs alone (`serial`): the recovery resets the device.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use burn::tensor::DType;
use burn_ascend_llm::engine::serve::{FinishReason, Request, Sampling, ServeConfig, Server};
use burn_ascend_llm::families::{self, Decoder};
use burn_ascend_llm::hf::TextTokenizer;
use burn_ascend_openai::chat::{ChatMessage, ChatTemplate};
use burn_ascend_openai::engine::Injected;
use burn_ascend_openai::metrics::Metrics;
use burn_ascend_openai::{serve, App, Engine, ModelSpec, Served, Tokenizer};
use common::*;
use futures_util::StreamExt;
use serde_json::{json, Value};
use serial_test::{parallel, serial};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const MODEL: &str = "qwen3_moe";

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/qwen3_moe")
}

fn load() -> Decoder<Ascend> {
    families::load::<Ascend>(fixture(), DType::F32, &device())
        .expect("the fixture loads")
        .model
}

fn tokenizer() -> TextTokenizer {
    TextTokenizer::from_dir(fixture()).expect("the fixture's tokenizer")
}

fn config() -> ServeConfig {
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

/// ChatML, as Qwen's templates render a conversation (the fixture's tokenizer has its special
/// tokens; its tokenizer_config.json has no template).
fn chatml() -> Arc<ChatTemplate> {
    let source = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n\
                  {% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    Arc::new(ChatTemplate::from_source(source, [], "chatml").unwrap())
}

/// A server on 127.0.0.1:0 in this process.
struct Running {
    base: String,
    app: Arc<App>,
    client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    served: JoinHandle<std::io::Result<Served>>,
}

impl Running {
    async fn start(cfg: ServeConfig, chat: Option<Arc<ChatTemplate>>) -> Self {
        let (engine, _) = Engine::spawn(
            move || Server::new(load(), cfg, &device()).map_err(|e| e.to_string()),
            Arc::new(Metrics::new(MODEL)),
        )
        .expect("the engine starts");
        let spec = ModelSpec {
            name: MODEL.into(),
            tokenizer: Tokenizer::Checkpoint(Box::new(tokenizer())),
            chat,
            sampling: Default::default(),
            reasoning: None,
        };
        let app = App::new(engine, spec);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(serve(
            listener,
            app.clone(),
            async move {
                let _ = stopped.await;
            },
            Duration::from_secs(20),
        ));
        Self {
            base,
            app,
            client: reqwest::Client::new(),
            stop: Some(stop),
            served,
        }
    }

    async fn post(&self, path: &str, body: Value) -> reqwest::Response {
        self.client
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// Shuts down and returns the requests that had not finished.
    async fn shutdown(mut self) -> usize {
        self.stop.take().unwrap().send(()).unwrap();
        self.served.await.unwrap().unwrap().unfinished
    }

    /// Waits until the engine holds no request and every page is free.
    async fn assert_cache_returns_to_full(&self) {
        let pages = self.app.engine().config().pages;
        for _ in 0..500 {
            let s = self.app.engine().stats();
            if s.free_pages == pages && s.running == 0 && s.waiting == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!(
            "the cache did not return to {pages} free pages: {:?}",
            self.app.engine().stats()
        );
    }
}

/// The in-process engine's tokens for `request`.
fn reference(request: Request) -> (Vec<u32>, FinishReason) {
    let mut server = Server::new(load(), config(), &device()).unwrap();
    let report = server.generate(&[request]);
    let g = report.results[0].as_ref().unwrap();
    (g.tokens.clone(), g.finish)
}

fn request(prompt: Vec<u32>, new_tokens: usize, sampling: Sampling) -> Request {
    Request {
        prompt,
        new_tokens,
        sampling,
        stop: tokenizer().eos_ids().to_vec(),
    }
}

fn finish(f: FinishReason) -> &'static str {
    match f {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
    }
}

/// The JSON events of a server-sent event stream, up to `[DONE]` (which must be last).
async fn events(response: reqwest::Response) -> Vec<Value> {
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let body = response.text().await.unwrap();
    let data: Vec<&str> = body
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| e.strip_prefix("data: ").expect("a data event"))
        .collect();
    assert_eq!(data.last(), Some(&"[DONE]"), "{body}");
    data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// An error response: its status, and its `error` object with `param` naming the field.
async fn error(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    (status, body["error"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[parallel]
async fn completions_equal_the_in_process_engine_streamed_and_not() {
    let server = Running::start(config(), None).await;
    let tok = tokenizer();
    let prompt = "The lighthouse keeper";
    let ids = tok.encode(prompt).unwrap();
    let cases = [
        (json!({"temperature": 0}), Sampling::Greedy),
        (
            json!({"temperature": 0.8, "top_k": 20, "top_p": 0.9, "seed": 7}),
            Sampling::Random {
                temperature: 0.8,
                top_k: 20,
                top_p: 0.9,
                min_p: 0.0,
                seed: 7,
            },
        ),
        (
            json!({"temperature": 1.0, "min_p": 0.1, "seed": 8}),
            Sampling::Random {
                temperature: 1.0,
                top_k: usize::MAX,
                top_p: 1.0,
                min_p: 0.1,
                seed: 8,
            },
        ),
    ];
    let (mut generated, requests) = (0, 3 * cases.len());
    for (params, sampling) in cases {
        let (tokens, want_finish) = reference(request(ids.clone(), 10, sampling));
        generated += 3 * tokens.len();
        let text = tok.decode(&tokens).unwrap();
        let mut body = json!({"model": MODEL, "prompt": prompt, "max_tokens": 10});
        for (k, v) in params.as_object().unwrap() {
            body[k] = v.clone();
        }
        // Whole.
        let r: Value = server
            .post("/v1/completions", body.clone())
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(r["object"], "text_completion");
        assert_eq!(r["model"], MODEL);
        assert_eq!(r["choices"][0]["text"], text.as_str(), "{params}");
        assert_eq!(r["choices"][0]["finish_reason"], finish(want_finish));
        assert_eq!(
            r["usage"],
            json!({"prompt_tokens": ids.len(), "completion_tokens": tokens.len(),
                   "total_tokens": ids.len() + tokens.len()})
        );
        // The prompt as token ids.
        let mut by_ids = body.clone();
        by_ids["prompt"] = json!(ids);
        let r: Value = server
            .post("/v1/completions", by_ids)
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(r["choices"][0]["text"], text.as_str());
        // Streamed, with the usage chunk.
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
        let chunks = events(server.post("/v1/completions", body).await).await;
        let (last, text_chunks) = chunks.split_last().unwrap();
        let streamed: String = text_chunks
            .iter()
            .map(|c| c["choices"][0]["text"].as_str().unwrap())
            .collect();
        assert_eq!(streamed, text);
        assert!(text_chunks.len() > 1, "the text came in pieces");
        let finishes: Vec<&Value> = text_chunks
            .iter()
            .map(|c| &c["choices"][0]["finish_reason"])
            .collect();
        assert!(finishes[..finishes.len() - 1].iter().all(|f| f.is_null()));
        assert_eq!(*finishes[finishes.len() - 1], finish(want_finish));
        assert_eq!(last["choices"], json!([]));
        assert_eq!(last["usage"]["completion_tokens"], tokens.len());
        assert_eq!(text_chunks[0]["usage"], Value::Null);
    }
    server.assert_cache_returns_to_full().await;
    // GET /metrics counts the requests, their tokens and their first tokens.
    let response = server
        .client
        .get(format!("{}/metrics", server.base))
        .send()
        .await
        .unwrap();
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let metrics = response.text().await.unwrap();
    let sample = |series: &str| -> f64 {
        let line = metrics
            .lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .unwrap_or_else(|| panic!("no {series} in {metrics}"));
        line[series.len() + 1..].parse().unwrap()
    };
    let label = format!("{{model_name=\"{MODEL}\"}}");
    let reason = |r: &str| {
        sample(&format!(
            "vllm:request_success_total{{model_name=\"{MODEL}\",finished_reason=\"{r}\"}}"
        ))
    };
    assert_eq!(reason("stop") + reason("length"), requests as f64);
    assert_eq!(reason("abort"), 0.0);
    let prompt_tokens = sample(&format!("vllm:prompt_tokens_total{label}"));
    assert_eq!(prompt_tokens, (requests * ids.len()) as f64);
    let generation = sample(&format!("vllm:generation_tokens_total{label}"));
    assert_eq!(generation, generated as f64);
    assert_eq!(
        sample(&format!("vllm:time_to_first_token_seconds_count{label}")),
        requests as f64
    );
    assert_eq!(sample(&format!("vllm:num_requests_running{label}")), 0.0);
    assert_eq!(sample(&format!("vllm:gpu_cache_usage_perc{label}")), 0.0);
    assert_eq!(server.shutdown().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[parallel]
async fn stop_strings_end_the_text_before_them_and_stop_token_ids_end_the_generation() {
    let server = Running::start(config(), None).await;
    let tok = tokenizer();
    let ids = tok.encode("She counted").unwrap();
    let (tokens, _) = reference(request(ids.clone(), 12, Sampling::Greedy));
    let text = tok.decode(&tokens).unwrap();
    // A stop string from the middle of the greedy text: the text ends before it.
    let chars: Vec<char> = text.chars().collect();
    let at = chars.len() / 2;
    let stop: String = chars[at..at + 2].iter().collect();
    let cut = &text[..text.find(&stop).unwrap()];
    let body = json!({"model": MODEL, "prompt": "She counted", "max_tokens": 12,
                      "temperature": 0, "stop": [stop]});
    let r: Value = server
        .post("/v1/completions", body.clone())
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(r["choices"][0]["text"], cut);
    assert_eq!(r["choices"][0]["finish_reason"], "stop");
    let mut streamed = body;
    streamed["stream"] = json!(true);
    let chunks = events(server.post("/v1/completions", streamed).await).await;
    let joined: String = chunks
        .iter()
        .map(|c| c["choices"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(joined, cut);
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );
    // The third generated token as a stop token id: it is the last one generated.
    let body = json!({"model": MODEL, "prompt": "She counted", "max_tokens": 12,
                      "temperature": 0, "stop_token_ids": [tokens[2]]});
    let r: Value = server
        .post("/v1/completions", body)
        .await
        .json()
        .await
        .unwrap();
    let first = tokens.iter().position(|&t| t == tokens[2]).unwrap();
    assert_eq!(r["usage"]["completion_tokens"], first + 1);
    assert_eq!(r["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        r["choices"][0]["text"],
        tok.decode(&tokens[..=first]).unwrap()
    );
    server.assert_cache_returns_to_full().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[parallel]
async fn chat_completions_render_the_conversation_streamed_and_not() {
    let server = Running::start(config(), Some(chatml())).await;
    let tok = tokenizer();
    let messages = vec![
        ChatMessage::new("system", "Be brief."),
        ChatMessage::new("user", "Hi"),
    ];
    let rendered = chatml().render(&messages, true).unwrap();
    assert_eq!(
        rendered,
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
         <|im_start|>assistant\n"
    );
    let ids = tok.encode_plain(&rendered).unwrap();
    assert_eq!(
        ids.iter().filter(|&&t| t == 301).count(),
        3,
        "<|im_start|> is one token"
    );
    let sampling = Sampling::Random {
        temperature: 1.0,
        top_k: 320,
        top_p: 1.0,
        min_p: 0.0,
        seed: 3,
    };
    let (tokens, want_finish) = reference(request(ids.clone(), 8, sampling));
    let text = tok.decode(&tokens).unwrap();
    let body = json!({"model": MODEL, "messages": messages, "max_completion_tokens": 8,
                      "seed": 3});
    let r: Value = server
        .post("/v1/chat/completions", body.clone())
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(r["object"], "chat.completion");
    assert_eq!(r["choices"][0]["message"]["role"], "assistant");
    assert_eq!(r["choices"][0]["message"]["content"], text.as_str());
    assert_eq!(r["choices"][0]["finish_reason"], finish(want_finish));
    assert_eq!(r["usage"]["prompt_tokens"], ids.len());
    assert_eq!(r["usage"]["completion_tokens"], tokens.len());
    let mut streamed = body;
    streamed["stream"] = json!(true);
    let chunks = events(server.post("/v1/chat/completions", streamed).await).await;
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let joined: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(joined, text);
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        finish(want_finish)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[parallel]
async fn bad_requests_get_openai_errors_naming_the_field() {
    let server = Running::start(config(), None).await;
    let base = || json!({"model": MODEL, "prompt": "The sea", "max_tokens": 4});
    let with = |k: &str, v: Value| {
        let mut b = base();
        b[k] = v;
        b
    };
    let cases: Vec<(Value, u16, &str, &str)> = vec![
        (
            with("max_tokens", json!("x")),
            400,
            "max_tokens",
            "invalid type",
        ),
        (
            with("max_tokens", json!(0)),
            400,
            "max_tokens",
            "max_tokens is 0",
        ),
        (
            with("temperature", json!(3.0)),
            400,
            "temperature",
            "not in [0, 2]",
        ),
        (with("top_p", json!(0.0)), 400, "top_p", "not in (0, 1]"),
        (with("min_p", json!(1.5)), 400, "min_p", "not in [0, 1]"),
        (with("top_k", json!(-2)), 400, "top_k", "top_k -2"),
        (with("n", json!(0)), 400, "n", "n is 0"),
        (with("best_of", json!(2)), 400, "best_of", "not supported"),
        (with("logprobs", json!(1)), 400, "logprobs", "not supported"),
        (with("echo", json!(true)), 400, "echo", "not supported"),
        (
            with("presence_penalty", json!(0.5)),
            400,
            "presence_penalty",
            "not supported",
        ),
        (
            with("stop", json!(["a", "b", "c", "d", "e"])),
            400,
            "stop",
            "at most 4",
        ),
        (with("prompt", json!("")), 400, "prompt", "empty"),
        (with("prompt", json!([])), 400, "prompt", "empty"),
        (
            with("prompt", json!([1, 2, 999])),
            400,
            "prompt",
            "vocabulary of 320",
        ),
        (
            with("max_tokens", json!(64)),
            400,
            "max_tokens",
            "maximum context length is 64 tokens",
        ),
        (
            with("model", json!("gpt-4")),
            404,
            "model",
            "`gpt-4` does not exist",
        ),
        (json!({"model": MODEL}), 400, "prompt", "missing field"),
    ];
    for (body, status, param, says) in cases {
        let (got, e) = error(server.post("/v1/completions", body.clone()).await).await;
        assert_eq!(got, status, "{body}: {e}");
        assert_eq!(e["param"], param, "{body}: {e}");
        let message = e["message"].as_str().unwrap();
        assert!(
            message.contains(says),
            "{body}: {message:?} should say {says:?}"
        );
        assert!(e["type"].is_string());
    }
    // Chat: tools are refused; without a chat template the endpoint says so.
    let chat = json!({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]});
    let mut tools = chat.clone();
    tools["tools"] = json!([{"type": "function", "function": {"name": "f"}}]);
    let (status, e) = error(server.post("/v1/chat/completions", tools).await).await;
    assert_eq!((status, e["param"].as_str()), (400, Some("tools")), "{e}");
    let (status, e) = error(server.post("/v1/chat/completions", chat).await).await;
    assert_eq!(
        (status, e["param"].as_str()),
        (400, Some("messages")),
        "{e}"
    );
    assert!(e["message"].as_str().unwrap().contains("no chat template"));
    // GET /v1/models names the model and its limit.
    let models: Value = server
        .client
        .get(format!("{}/v1/models", server.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], MODEL);
    assert_eq!(models["data"][0]["max_model_len"], 64);
    server.assert_cache_returns_to_full().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[parallel]
async fn a_full_waiting_queue_is_a_429_with_retry_after_and_loses_nothing_admitted() {
    // 5 pages of 12 slots, one request waiting at most: a running request of 36 + 24 tokens
    // holds the cache (its prompt takes 3 pages, so the next prompt of 3 pages waits for it), a
    // third is refused. Its 24 decode steps are the window in which the two arrive: long
    // enough for a loaded machine.
    let cfg = ServeConfig {
        pages: 5,
        page_size: 12,
        max_seq: 60,
        max_waiting: 1,
        ..config()
    };
    let server = Arc::new(Running::start(cfg, None).await);
    let prompt: Vec<u32> = (10..46).collect();
    let body = |max: usize, stream: bool| {
        json!({"model": MODEL, "prompt": prompt, "max_tokens": max, "temperature": 0,
               "stop_token_ids": [], "stream": stream})
    };
    let mut running = server
        .post("/v1/completions", body(24, true))
        .await
        .bytes_stream();
    // Its first chunk: it runs.
    running.next().await.unwrap().unwrap();
    let (waiting, refused) = tokio::join!(
        server.post("/v1/completions", body(4, false)),
        server.post("/v1/completions", body(4, false)),
    );
    // Which of the two came first is not ordered: one waits, the other is refused.
    let (waiting, refused) = if refused.status() == 429 {
        (waiting, refused)
    } else {
        (refused, waiting)
    };
    assert_eq!(refused.headers()["retry-after"], "1");
    let (status, e) = error(refused).await;
    assert_eq!(status, 429);
    assert!(e["message"].as_str().unwrap().contains("overloaded"), "{e}");
    let r: Value = waiting.json().await.unwrap();
    assert_eq!(r["usage"]["completion_tokens"], 4, "{r}");
    let mut rest = Vec::new();
    while let Some(chunk) = running.next().await {
        rest.extend_from_slice(&chunk.unwrap());
    }
    assert!(String::from_utf8(rest)
        .unwrap()
        .ends_with("data: [DONE]\n\n"));
    server.assert_cache_returns_to_full().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[serial]
async fn a_device_fault_is_a_500_naming_it_and_the_server_keeps_serving() {
    if skipped_on_npu("a_device_fault_is_a_500_naming_it_and_the_server_keeps_serving") {
        return;
    }
    let server = Running::start(config(), None).await;
    let body = json!({"model": MODEL, "prompt": "The sea", "max_tokens": 4, "temperature": 0});
    let want: Value = server
        .post("/v1/completions", body.clone())
        .await
        .json()
        .await
        .unwrap();
    server.app.engine().inject(Injected::DeviceFault);
    let (status, e) = error(server.post("/v1/completions", body.clone()).await).await;
    assert_eq!(status, 500, "{e}");
    let message = e["message"].as_str().unwrap();
    assert!(
        message.contains("the device failed") && message.contains("decode_attention"),
        "{message}"
    );
    assert_eq!(e["type"], "server_error");
    let again: Value = server
        .post("/v1/completions", body.clone())
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(again["choices"], want["choices"]);
    // Streamed: the stream has begun (200), so the fault is an error event, then [DONE].
    server.app.engine().inject(Injected::DeviceFault);
    let mut streamed = body;
    streamed["stream"] = json!(true);
    let chunks = events(server.post("/v1/completions", streamed).await).await;
    let error = &chunks.last().unwrap()["error"];
    assert_eq!(error["code"], 500, "{chunks:?}");
    assert!(error["message"]
        .as_str()
        .unwrap()
        .contains("the device failed"));
    server.assert_cache_returns_to_full().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
#[parallel]
async fn sixty_four_streaming_clients_some_leaving_all_end_and_the_cache_is_whole() {
    // 48 pages of 4 slots for 64 requests of up to 19 positions: they queue and preempt.
    let cfg = ServeConfig {
        pages: 48,
        ..config()
    };
    let server = Arc::new(Running::start(cfg, None).await);
    let tok = tokenizer();
    let prompts = [
        "The sea",
        "She counted",
        "In the evenings",
        "The lighthouse keeper",
    ];
    let want: Vec<String> = prompts
        .iter()
        .map(|p| {
            let (tokens, _) = reference(request(tok.encode(p).unwrap(), 8, Sampling::Greedy));
            tok.decode(&tokens).unwrap()
        })
        .collect();
    let clients: Vec<_> = (0..64usize)
        .map(|i| {
            let server = server.clone();
            let prompt = prompts[i % 4];
            // A third leave after their first few chunks, asking for many more tokens than
            // the engine could generate before it hears of it.
            let leave_after = (i % 3 == 0).then_some(1 + i % 4);
            let max_tokens = if leave_after.is_some() { 48 } else { 8 };
            tokio::spawn(async move {
                let body = json!({"model": MODEL, "prompt": prompt, "max_tokens": max_tokens,
                                  "temperature": 0, "stream": true, "stop_token_ids": []});
                let response = server.post("/v1/completions", body).await;
                assert_eq!(response.status(), 200);
                let mut stream = response.bytes_stream();
                let mut received = String::new();
                let mut chunks = 0;
                while let Some(bytes) = stream.next().await {
                    received.push_str(std::str::from_utf8(&bytes.unwrap()).unwrap());
                    chunks += 1;
                    if leave_after == Some(chunks) {
                        return None;
                    }
                }
                Some((i, received))
            })
        })
        .collect();
    let mut completed = 0;
    for client in clients {
        let Some((i, body)) = client.await.unwrap() else {
            continue;
        };
        completed += 1;
        assert!(body.ends_with("data: [DONE]\n\n"), "client {i}: {body}");
        let chunks: Vec<Value> = body
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        let text: String = chunks
            .iter()
            .map(|c| c["choices"][0]["text"].as_str().unwrap())
            .collect();
        assert_eq!(text, want[i % 4], "client {i}");
        assert!(!chunks.last().unwrap()["choices"][0]["finish_reason"].is_null());
    }
    assert_eq!(completed, 64 - 22);
    server.assert_cache_returns_to_full().await;
    // Every client that left had its request cancelled, none ran to its end.
    assert_eq!(server.app.engine().stats().cancelled, 22);
    let metrics = server.app.engine().metrics().render();
    let aborted = format!(
        "vllm:request_success_total{{model_name=\"{MODEL}\",finished_reason=\"abort\"}} 22"
    );
    assert!(metrics.contains(&aborted), "{metrics}");
    assert_eq!(server.app.in_flight(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[parallel]
async fn shutdown_stops_admitting_and_drains_the_running_requests() {
    let mut server = Running::start(config(), None).await;
    let body = json!({"model": MODEL, "prompt": "The sea", "max_tokens": 16, "temperature": 0,
                      "stop_token_ids": [], "stream": true});
    let tok = tokenizer();
    let (tokens, _) = reference(Request {
        stop: Vec::new(),
        ..request(tok.encode("The sea").unwrap(), 16, Sampling::Greedy)
    });
    let mut running = server
        .post("/v1/completions", body.clone())
        .await
        .bytes_stream();
    let first = running.next().await.unwrap().unwrap();
    let mut received = String::from_utf8(first.to_vec()).unwrap();
    server.stop.take().unwrap().send(()).unwrap();
    // Draining: /health, then every new request, is a 503.
    let health = format!("{}/health", server.base);
    let mut waited = 0;
    while server.client.get(&health).send().await.unwrap().status() != 503 {
        tokio::time::sleep(Duration::from_millis(5)).await;
        waited += 1;
        assert!(waited < 400, "the server never started draining");
    }
    let refused = server.post("/v1/completions", body).await;
    assert_eq!(refused.headers()["retry-after"], "1");
    let (status, e) = error(refused).await;
    assert_eq!(status, 503, "{e}");
    while let Some(chunk) = running.next().await {
        received.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
    }
    let text: String = received
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| {
            let v: Value = serde_json::from_str(d).unwrap();
            v["choices"][0]["text"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(text, tok.decode(&tokens).unwrap());
    assert!(received.ends_with("data: [DONE]\n\n"));
    let served = tokio::time::timeout(Duration::from_secs(10), &mut server.served)
        .await
        .expect("serve returns once drained")
        .unwrap()
        .unwrap();
    let finished = Served {
        unfinished: 0,
        failure: None,
    };
    assert_eq!(served, finished, "every request finished");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[parallel]
async fn a_client_leaving_a_whole_response_cancels_its_request() {
    use std::io::Write;
    let server = Running::start(config(), None).await;
    let body = json!({"model": MODEL, "prompt": "The sea", "max_tokens": 56, "temperature": 0,
                      "stop_token_ids": []})
    .to_string();
    let address = server.base.strip_prefix("http://").unwrap();
    let mut socket = std::net::TcpStream::connect(address).unwrap();
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    );
    socket.write_all(head.as_bytes()).unwrap();
    socket.write_all(body.as_bytes()).unwrap();
    // Gone once the engine runs it.
    while server.app.engine().stats().running == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    drop(socket);
    server.assert_cache_returns_to_full().await;
    assert_eq!(server.app.engine().stats().cancelled, 1);
}
