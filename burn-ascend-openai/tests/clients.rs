//! What OpenAI's SDKs and frameworks send (issue 37, item 1): fields the server does not read
//! are ignored, not refused; a chat message's content may be an array of text parts or null.
//! Each request is answered as the same request without what it adds.

mod common;

use std::sync::Arc;

use burn_ascend_llm::engine::serve::Server;
use burn_ascend_openai::chat::ChatTemplate;
use burn_ascend_openai::metrics::Metrics;
use burn_ascend_openai::text::Reasoning;
use burn_ascend_openai::{App, Engine};
use common::*;
use serde_json::{json, Value};
use serial_test::parallel;

/// The fixture served with `template` and the reasoning parser `reasoning`.
fn app_with(template: ChatTemplate, reasoning: Option<Reasoning>) -> Arc<App> {
    let cfg = config();
    let (engine, _) = Engine::spawn(
        move || Server::new(load(), cfg, &device()).map_err(|e| e.to_string()),
        Arc::new(Metrics::new(MODEL)),
    )
    .unwrap();
    App::new(engine, spec(Arc::new(template), reasoning))
}

/// The `data:` events of a streamed answer to `body` at `path`, `[DONE]` included.
async fn events(server: &Serving, path: &str, body: &Value) -> Vec<String> {
    reqwest::Client::new()
        .post(format!("{}{path}", server.base))
        .json(body)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("data: ").map(str::to_string))
        .collect()
}

/// The answer to `body` at `path`: status and JSON.
async fn post(server: &Serving, path: &str, body: &Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{}{path}", server.base))
        .json(body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

/// The text of the first choice of a completion or chat completion.
fn text(answer: &Value) -> String {
    let choice = &answer["choices"][0];
    choice["text"]
        .as_str()
        .or_else(|| choice["message"]["content"].as_str())
        .unwrap_or_else(|| panic!("no text in {answer}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[parallel]
async fn fields_the_server_does_not_read_are_ignored() {
    if skipped_on_npu("fields_the_server_does_not_read_are_ignored") {
        return;
    }
    let server = Serving::start(app(config(), None)).await;
    let plain = json!({"model": MODEL, "prompt": "The sea", "max_tokens": 6, "temperature": 0});
    let (status, want) = post(&server, "/v1/completions", &plain).await;
    assert_eq!(status, 200, "{want}");
    // What OpenAI's Python SDK, LangChain and vLLM's clients add.
    let mut extra = plain.clone();
    for (k, v) in [
        ("store", json!(false)),
        ("metadata", json!({"run": "eval-3"})),
        ("service_tier", json!("auto")),
        ("user", json!("someone")),
        ("frobnicate", json!([1, 2])),
    ] {
        extra[k] = v;
    }
    let (status, got) = post(&server, "/v1/completions", &extra).await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(text(&got), text(&want));
    // The same in chat, with chat-only fields.
    let chat = json!({"model": MODEL, "max_tokens": 6, "temperature": 0,
                      "messages": [{"role": "user", "content": "Hello"}]});
    let (status, want) = post(&server, "/v1/chat/completions", &chat).await;
    assert_eq!(status, 200, "{want}");
    let mut extra = chat.clone();
    extra["parallel_tool_calls"] = json!(true);
    extra["reasoning_effort"] = json!("low");
    extra["stream_options"] = json!(null);
    let (status, got) = post(&server, "/v1/chat/completions", &extra).await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(text(&got), text(&want));
    // A known field of the wrong type is still an error naming it.
    let mut wrong = plain.clone();
    wrong["max_tokens"] = json!("six");
    let (status, e) = post(&server, "/v1/completions", &wrong).await;
    assert_eq!((status, &e["error"]["param"]), (400, &json!("max_tokens")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[parallel]
async fn content_parts_and_null_content_are_read_as_text() {
    if skipped_on_npu("content_parts_and_null_content_are_read_as_text") {
        return;
    }
    let server = Serving::start(app(config(), None)).await;
    let chat = |messages: Value| json!({"model": MODEL, "max_tokens": 6, "temperature": 0, "messages": messages});
    // Text parts are joined by newlines, as vLLM joins them.
    let (status, want) = post(
        &server,
        "/v1/chat/completions",
        &chat(json!([{"role": "user", "content": "The sea\nwas grey"}])),
    )
    .await;
    assert_eq!(status, 200, "{want}");
    let parts = json!([{"role": "user", "content": [
        {"type": "text", "text": "The sea"}, {"type": "text", "text": "was grey"}]}]);
    let (status, got) = post(&server, "/v1/chat/completions", &chat(parts)).await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(text(&got), text(&want));
    // An assistant turn with null content (it called a tool) renders as an empty turn.
    let with_null = json!([
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": null},
        {"role": "user", "content": "Again"}]);
    let with_empty = json!([
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "Again"}]);
    let (status, got) = post(&server, "/v1/chat/completions", &chat(with_null)).await;
    assert_eq!(status, 200, "{got}");
    let (_, want) = post(&server, "/v1/chat/completions", &chat(with_empty)).await;
    assert_eq!(text(&got), text(&want));
    // Parts the model cannot read are refused, naming the message and the part's type.
    let image = json!([{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]);
    let (status, e) = post(&server, "/v1/chat/completions", &chat(image)).await;
    assert_eq!(status, 400, "{e}");
    assert_eq!(e["error"]["param"], "messages[0].content", "{e}");
    let message = e["error"]["message"].as_str().unwrap();
    assert!(message.contains("`image_url`"), "{message}");
}

/// The texts of an answer's choices, by index.
fn texts(answer: &Value) -> Vec<String> {
    let choices = answer["choices"].as_array().unwrap();
    let mut out = vec![String::new(); choices.len()];
    for c in choices {
        let i = c["index"].as_u64().unwrap() as usize;
        out[i] = c["text"]
            .as_str()
            .or_else(|| c["message"]["content"].as_str())
            .unwrap()
            .to_string();
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[parallel]
async fn several_choices_and_prompts_answer_as_single_requests_do() {
    if skipped_on_npu("several_choices_and_prompts_answer_as_single_requests_do") {
        return;
    }
    let server = Serving::start(app(config(), None)).await;
    let one = |prompt: &str, seed: u64| {
        json!({"model": MODEL, "prompt": prompt, "max_tokens": 6, "temperature": 1.0,
               "seed": seed})
    };
    // n choices of a seeded request: choice j is the request seeded seed + j.
    let mut three = one("The sea", 7);
    three["n"] = json!(3);
    let (status, got) = post(&server, "/v1/completions", &three).await;
    assert_eq!(status, 200, "{got}");
    let mut want = Vec::new();
    for j in 0..3 {
        let (_, single) = post(&server, "/v1/completions", &one("The sea", 7 + j)).await;
        want.push(text(&single));
    }
    assert_eq!(texts(&got), want);
    let (_, single) = post(&server, "/v1/completions", &one("The sea", 7)).await;
    assert_eq!(
        got["usage"]["prompt_tokens"], single["usage"]["prompt_tokens"],
        "the prompt counted once"
    );
    assert_eq!(got["usage"]["completion_tokens"], 18);
    // A batch of two prompts, two choices each: prompt i's choice j at index 2i + j.
    let batch = json!({"model": MODEL, "prompt": ["The sea", "A lighthouse"], "n": 2,
                       "max_tokens": 5, "temperature": 0});
    let (status, got) = post(&server, "/v1/completions", &batch).await;
    assert_eq!(status, 200, "{got}");
    let mut want = Vec::new();
    for prompt in ["The sea", "A lighthouse"] {
        let greedy = json!({"model": MODEL, "prompt": prompt, "max_tokens": 5,
                            "temperature": 0});
        let (_, single) = post(&server, "/v1/completions", &greedy).await;
        want.extend([text(&single), text(&single)]);
    }
    assert_eq!(texts(&got), want);
    // Streamed, the choices' chunks interleave; each index's text is the same, and the usage
    // chunk adds them up.
    let mut streamed = batch.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let events = events(&server, "/v1/completions", &streamed).await;
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let mut joined = vec![String::new(); 4];
    let mut finished = 0;
    for event in &events[..events.len() - 2] {
        let chunk: Value = serde_json::from_str(event).unwrap();
        let choice = &chunk["choices"][0];
        joined[choice["index"].as_u64().unwrap() as usize] += choice["text"].as_str().unwrap();
        finished += usize::from(!choice["finish_reason"].is_null());
    }
    assert_eq!(joined, want);
    assert_eq!(finished, 4, "one last chunk per choice");
    let usage: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(
        usage["usage"]["completion_tokens"],
        got["usage"]["completion_tokens"]
    );
    assert_eq!(
        usage["usage"]["prompt_tokens"],
        got["usage"]["prompt_tokens"]
    );
}

/// `chat_template_kwargs` reach the template as its variables (Qwen3's templates read
/// `enable_thinking` so): a template that opens the reply with an empty think block when it is
/// false answers as a completion of that text does.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[parallel]
async fn chat_template_kwargs_are_the_templates_variables() {
    if skipped_on_npu("chat_template_kwargs_are_the_templates_variables") {
        return;
    }
    let source = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}\
                  assistant:{% if enable_thinking is defined and not enable_thinking %} \
                  <think></think>{% endif %}";
    let template = ChatTemplate::from_source(source, [], "thinking").unwrap();
    let server = Serving::start(app_with(template, None)).await;
    let chat = json!({"model": MODEL, "max_tokens": 6, "temperature": 0,
                      "messages": [{"role": "user", "content": "The sea"}],
                      "chat_template_kwargs": {"enable_thinking": false}});
    let (status, got) = post(&server, "/v1/chat/completions", &chat).await;
    assert_eq!(status, 200, "{got}");
    // The same prompt as text: the template's rendering, with the empty think block.
    let rendered = json!({"model": MODEL, "max_tokens": 6, "temperature": 0,
                          "prompt": "user: The sea\nassistant: <think></think>"});
    let (_, want) = post(&server, "/v1/completions", &rendered).await;
    assert_eq!(text(&got), text(&want));
    assert_eq!(
        got["usage"]["prompt_tokens"],
        want["usage"]["prompt_tokens"]
    );
    // Without the variable, the block is not there: another prompt.
    let mut plain = chat.clone();
    plain
        .as_object_mut()
        .unwrap()
        .remove("chat_template_kwargs");
    let (_, without) = post(&server, "/v1/chat/completions", &plain).await;
    assert_ne!(
        without["usage"]["prompt_tokens"],
        want["usage"]["prompt_tokens"]
    );
}

/// A reasoning parser splits a reply's think block into `reasoning_content`: DeepSeek-R1's
/// template opens the block, so a reply that never closes it is all reasoning; a Qwen3 reply
/// that does not open one is all answer. Streamed, the deltas say the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[parallel]
async fn a_reasoning_parser_splits_the_think_block_from_the_answer() {
    if skipped_on_npu("a_reasoning_parser_splits_the_think_block_from_the_answer") {
        return;
    }
    let chatml = || {
        ChatTemplate::from_source(
            "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:",
            [],
            "plain",
        )
        .unwrap()
    };
    let chat = json!({"model": MODEL, "max_tokens": 8, "temperature": 0,
                      "messages": [{"role": "user", "content": "The sea"}]});
    let plain = Serving::start(app_with(chatml(), None)).await;
    let (_, want) = post(&plain, "/v1/chat/completions", &chat).await;
    let reply = text(&want);
    assert!(
        !reply.contains("</think>"),
        "the fixture's reply: {reply:?}"
    );
    assert!(want["choices"][0]["message"]
        .get("reasoning_content")
        .is_none());
    let r1 = Serving::start(app_with(chatml(), Some(Reasoning::DeepSeekR1))).await;
    let (status, got) = post(&r1, "/v1/chat/completions", &chat).await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(
        got["choices"][0]["message"]["reasoning_content"],
        json!(reply)
    );
    assert_eq!(got["choices"][0]["message"]["content"], "");
    let mut streamed = chat.clone();
    streamed["stream"] = json!(true);
    let (mut reasoning, mut content) = (String::new(), String::new());
    for event in events(&r1, "/v1/chat/completions", &streamed).await {
        if event == "[DONE]" {
            continue;
        }
        let chunk: Value = serde_json::from_str(&event).unwrap();
        let delta = &chunk["choices"][0]["delta"];
        reasoning += delta["reasoning_content"].as_str().unwrap_or("");
        content += delta["content"].as_str().unwrap_or("");
    }
    assert_eq!((reasoning.as_str(), content.as_str()), (reply.as_str(), ""));
    let qwen3 = Serving::start(app_with(chatml(), Some(Reasoning::Qwen3))).await;
    let (_, got) = post(&qwen3, "/v1/chat/completions", &chat).await;
    assert_eq!(got["choices"][0]["message"]["content"], json!(reply));
    assert_eq!(
        got["choices"][0]["message"]["reasoning_content"],
        Value::Null
    );
}
