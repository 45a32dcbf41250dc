//! Supervision of the engine through HTTP: a step that fails is a 500 and the server serves on;
//! an engine that cannot recover (its recovery fails, or its thread panics) answers every client
//! (the running and waiting requests with a 500 error object, new ones and `/health` with a 503
//! naming why) and [`serve`] returns the failure after its drain, for the program to exit
//! non-zero. No handler panics on an engine that is gone.
//!
//! Each test faults the (emulated) device, whose reset affects every server on it: they run
//! one at a time.

mod common;

use std::time::Duration;

use burn_ascend_llm::engine::serve::{Request, ServeConfig, ServeError};
use burn_ascend_openai::engine::Injected;
use common::*;
use futures_util::StreamExt;
use serde_json::{json, Value};
use serial_test::serial;

/// An error response: its status, and its `error` object.
async fn error(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    (status, body["error"].clone())
}

/// The last event of a server-sent event stream before `[DONE]`, from `first` on.
async fn last_event(
    first: String,
    mut stream: impl futures_util::Stream<Item = reqwest::Result<axum::body::Bytes>> + Unpin,
) -> Value {
    let mut body = first;
    while let Some(chunk) = stream.next().await {
        body.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
    }
    assert!(body.ends_with("data: [DONE]\n\n"), "{body}");
    let events: Vec<&str> = body
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .collect();
    serde_json::from_str(events[events.len() - 2]).unwrap()
}

/// A request that holds the whole cache of [`small_cache`] while it runs (36 + 24 tokens in 5
/// pages of 12), streamed, and one that must wait for it.
fn holding(stream: bool) -> Value {
    let prompt: Vec<u32> = (10..46).collect();
    json!({"model": MODEL, "prompt": prompt, "max_tokens": 24, "temperature": 0,
           "stream": stream})
}

fn small_cache() -> ServeConfig {
    ServeConfig {
        pages: 5,
        page_size: 12,
        max_seq: 60,
        ..config()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[serial]
async fn an_engine_that_cannot_recover_answers_every_client_then_serve_returns_why() {
    if skipped_on_npu("an_engine_that_cannot_recover_answers_every_client_then_serve_returns_why") {
        return;
    }
    reset_device();
    let server = Serving::start(app(small_cache(), None)).await;
    let client = reqwest::Client::new();
    let url = format!("{}/v1/completions", server.base);
    let running = client.post(&url).json(&holding(true)).send().await.unwrap();
    assert_eq!(running.status(), 200);
    let mut running = running.bytes_stream();
    // Its first chunk: it runs, holding the cache.
    let first = running.next().await.unwrap().unwrap();
    let first = String::from_utf8(first.to_vec()).unwrap();
    let waiting = tokio::spawn(client.post(&url).json(&holding(false)).send());
    while server.app.engine().stats().waiting == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let engine = server.app.engine().clone();
    engine.inject(Injected::FailedRecovery);
    engine.inject(Injected::DeviceFault);

    // The running request's step faulted: its stream ends with the device's error.
    let last = last_event(first, running).await;
    assert_eq!(last["error"]["code"], 500, "{last}");
    let message = last["error"]["message"].as_str().unwrap();
    assert!(message.contains("the device failed"), "{message}");
    // The waiting one fails with why the server cannot go on.
    let (status, e) = error(waiting.await.unwrap().unwrap()).await;
    assert_eq!(status, 500, "{e}");
    assert_eq!(e["type"], "server_error");
    let message = e["message"].as_str().unwrap();
    assert!(
        message.contains("cannot serve any more") && message.contains("the device reset failed"),
        "{message}"
    );
    // Nothing was left in flight: serve returns at once, with the failure.
    let served = tokio::time::timeout(Duration::from_secs(10), server.served)
        .await
        .expect("serve returns once the unhealthy engine's requests are answered")
        .unwrap()
        .unwrap();
    assert_eq!(served.unfinished, 0);
    let why = served.failure.expect("the failure that ended serving");
    assert!(why.contains("the device reset failed"), "{why}");
    assert_eq!(engine.failure(), Some(why));
    assert!(
        std::net::TcpStream::connect(&server.address).is_err(),
        "the port is closed"
    );
}

/// The router alone on 127.0.0.1 (axum's own loop, which never stops on a failed engine), so
/// that the server is still there to ask after the engine failed.
async fn router_only(app: std::sync::Arc<burn_ascend_openai::App>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let router = app.router();
    tokio::spawn(async move { axum::serve(listener, router).await });
    base
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[serial]
async fn an_unhealthy_engine_fails_health_and_new_requests_with_a_503_naming_why() {
    if skipped_on_npu("an_unhealthy_engine_fails_health_and_new_requests_with_a_503_naming_why") {
        return;
    }
    reset_device();
    let app = app(config(), None);
    let base = router_only(app.clone()).await;
    let client = reqwest::Client::new();
    let health = client.get(format!("{base}/health")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    app.engine().inject(Injected::FailedRecovery);
    app.engine().inject(Injected::DeviceFault);
    let body = json!({"model": MODEL, "prompt": "The sea", "max_tokens": 4, "temperature": 0});
    let url = format!("{base}/v1/completions");
    let (status, e) = error(client.post(&url).json(&body).send().await.unwrap()).await;
    assert_eq!(status, 500, "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("the device failed"),
        "{e}"
    );

    let health = client.get(format!("{base}/health")).send().await.unwrap();
    let (status, e) = error(health).await;
    assert_eq!(status, 503);
    let message = e["message"].as_str().unwrap();
    assert!(
        message.contains("will restart") && message.contains("the device reset failed"),
        "{message}"
    );
    for path in ["/v1/completions", "/v1/chat/completions"] {
        let body = json!({"model": MODEL, "prompt": "The sea",
                          "messages": [{"role": "user", "content": "The sea"}]});
        let response = client
            .post(format!("{base}{path}"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.headers()["retry-after"], "1");
        let (status, e) = error(response).await;
        assert_eq!(status, 503, "{path}: {e}");
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains("the device reset failed"),
            "{path}: {e}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[serial]
async fn a_dead_engine_thread_is_answered_for_not_panicked_on() {
    if skipped_on_npu("a_dead_engine_thread_is_answered_for_not_panicked_on") {
        return;
    }
    reset_device();
    let app = app(small_cache(), None);
    let base = router_only(app.clone()).await;
    let client = reqwest::Client::new();
    let url = format!("{base}/v1/completions");
    let running = client.post(&url).json(&holding(true)).send().await.unwrap();
    let mut running = running.bytes_stream();
    let first = running.next().await.unwrap().unwrap();
    let first = String::from_utf8(first.to_vec()).unwrap();
    app.engine().inject(Injected::ThreadPanic);

    let last = last_event(first, running).await;
    assert_eq!(last["error"]["code"], 500, "{last}");
    let message = last["error"]["message"].as_str().unwrap();
    assert!(message.contains("the engine thread panicked"), "{message}");
    let (status, e) = error(client.get(format!("{base}/health")).send().await.unwrap()).await;
    assert_eq!(status, 503);
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("the engine thread panicked"),
        "{e}"
    );
    let (status, e) = error(
        client
            .post(&url)
            .json(&holding(false))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 503, "{e}");
    // The engine's own handle: a submission to the ended thread is an error, not a panic.
    let refused = app
        .engine()
        .submit(Request::greedy(vec![10, 11], 2))
        .await
        .map(|(id, _)| id)
        .unwrap_err();
    assert!(
        matches!(&refused, ServeError::Unrecoverable(why) if why.contains("the engine thread panicked")),
        "{refused}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[serial]
async fn a_step_that_panics_is_a_500_and_the_server_serves_on() {
    if skipped_on_npu("a_step_that_panics_is_a_500_and_the_server_serves_on") {
        return;
    }
    reset_device();
    let server = Serving::start(app(config(), None)).await;
    let client = reqwest::Client::new();
    let url = format!("{}/v1/completions", server.base);
    let body = json!({"model": MODEL, "prompt": "The sea", "max_tokens": 4, "temperature": 0});
    let want: Value = client
        .post(&url)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    server.app.engine().inject(Injected::StepPanic);
    let (status, e) = error(client.post(&url).json(&body).send().await.unwrap()).await;
    assert_eq!(status, 500, "{e}");
    let message = e["message"].as_str().unwrap();
    assert!(
        message.contains("the request's step failed") && message.contains("inject_panic"),
        "{message}"
    );
    let again: Value = client
        .post(&url)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(again["choices"], want["choices"]);
    let health = client
        .get(format!("{}/health", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(server.stop().await.failure, None);
}
