//! What OpenAI's SDKs and frameworks send (issue 37, item 1): fields the server does not read
//! are ignored, not refused; a chat message's content may be an array of text parts or null.
//! Each request is answered as the same request without what it adds.

mod common;

use common::*;
use serde_json::{json, Value};
use serial_test::parallel;

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
