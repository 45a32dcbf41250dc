//! The HTTP server's limits, each against a client that breaks it: half a request head (a
//! slowloris) is closed after the header timeout; a body that stops coming is a 408 after the
//! body timeout; a body over the size limit is a 413 naming the sizes; connections past the
//! cap wait in the accept backlog until one closes; a prompt over the token limit is a 400
//! naming the numbers; and a 1 MB prompt, tokenized off the async workers, holds back no other
//! stream's tokens by more than one step.

mod common;

use std::time::Duration;

use burn_ascend_llm::engine::serve::{Request, ServeConfig, Server};
use burn_ascend_openai::text::{Detokenizer, Tokenizer};
use burn_ascend_openai::Limits;
use common::*;
use futures_util::StreamExt;
use serde_json::{json, Value};
use serial_test::{parallel, serial};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

fn limits() -> Limits {
    Limits::new(config().max_seq)
}

/// What the server sends on `socket` until it closes the connection, or `None` when it is
/// still open after `wait`.
async fn until_closed(socket: &mut TcpStream, wait: Duration) -> Option<Vec<u8>> {
    let read = async {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        // A reset closes it too.
        while let Ok(n @ 1..) = socket.read(&mut buf).await {
            got.extend_from_slice(&buf[..n]);
        }
        got
    };
    timeout(wait, read).await.ok()
}

/// One response read from `socket`: its status and body (by its Content-Length).
async fn response(socket: &mut TcpStream) -> (u16, Value) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let read = async {
        loop {
            let n = socket.read(&mut buf).await.expect("a response");
            assert!(n > 0, "closed before a whole response: {got:?}");
            got.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&got).to_string();
            let Some((head, body)) = text.split_once("\r\n\r\n") else {
                continue;
            };
            let length = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().unwrap())
                })
                .expect("a Content-Length");
            if body.len() >= length {
                let status = head.split(' ').nth(1).unwrap().parse().unwrap();
                let body = serde_json::from_str(&body[..length]).unwrap_or(Value::Null);
                return (status, body);
            }
        }
    };
    timeout(Duration::from_secs(60), read)
        .await
        .expect("a response within 60 s")
}

fn health_request(address: &str) -> String {
    format!("GET /health HTTP/1.1\r\nHost: {address}\r\n\r\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[parallel]
async fn half_a_request_head_is_closed_after_the_header_timeout() {
    let limits = Limits {
        header_timeout: Duration::from_secs(1),
        ..limits()
    };
    let server = Serving::start(app(config(), Some(limits))).await;
    let mut slow = Vec::new();
    for _ in 0..20 {
        let mut socket = TcpStream::connect(&server.address).await.unwrap();
        let half = format!(
            "POST /v1/completions HTTP/1.1\r\nHost: {}\r\nContent-Ty",
            server.address
        );
        socket.write_all(half.as_bytes()).await.unwrap();
        slow.push(socket);
    }
    for (i, socket) in slow.iter_mut().enumerate() {
        let closed = until_closed(socket, Duration::from_secs(30)).await;
        assert!(
            closed.is_some(),
            "connection {i}, which sent half a head, is open after 30 s (header timeout: 1 s)"
        );
    }
    // A whole head in time is served.
    let mut socket = TcpStream::connect(&server.address).await.unwrap();
    socket
        .write_all(health_request(&server.address).as_bytes())
        .await
        .unwrap();
    assert_eq!(response(&mut socket).await.0, 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[parallel]
async fn a_body_that_stops_coming_is_a_408_after_the_body_timeout() {
    let limits = Limits {
        body_timeout: Duration::from_secs(1),
        ..limits()
    };
    let server = Serving::start(app(config(), Some(limits))).await;
    let mut socket = TcpStream::connect(&server.address).await.unwrap();
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: 100\r\n\r\n{{\"model\": ",
        server.address
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    let (status, body) = response(&mut socket).await;
    assert_eq!(status, 408, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("within 1s"), "{message}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[parallel]
async fn a_body_over_the_size_limit_is_a_413_naming_the_sizes() {
    let limits = Limits {
        max_body_bytes: 1000,
        ..limits()
    };
    let server = Serving::start(app(config(), Some(limits))).await;
    let address = &server.address;
    // Declared: refused before it is read.
    let mut socket = TcpStream::connect(address).await.unwrap();
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Content-Length: 5000\r\n\r\n"
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    let (status, body) = response(&mut socket).await;
    assert_eq!(status, 413, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("5000 bytes") && message.contains("limit of 1000 bytes"),
        "{message}"
    );
    // Chunked, with no size said: refused once it passes the limit.
    let mut socket = TcpStream::connect(address).await.unwrap();
    let mut request = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\n\r\n"
    );
    for _ in 0..6 {
        request.push_str(&format!("1f4\r\n{}\r\n", " ".repeat(500)));
    }
    request.push_str("0\r\n\r\n");
    socket.write_all(request.as_bytes()).await.unwrap();
    let (status, body) = response(&mut socket).await;
    assert_eq!(status, 413, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("limit of 1000 bytes"), "{message}");
    // Within the limit: served.
    let body = json!({"model": MODEL, "prompt": "The sea", "max_tokens": 2});
    let answered = reqwest::Client::new()
        .post(format!("{}/v1/completions", server.base))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[parallel]
async fn connections_past_the_cap_wait_in_the_accept_backlog_until_one_closes() {
    let limits = Limits {
        max_connections: 2,
        header_timeout: Duration::from_secs(60),
        ..limits()
    };
    let server = Serving::start(app(config(), Some(limits))).await;
    let address = &server.address;
    // Two connections, kept alive after an answer: both served, the cap reached.
    let mut open = Vec::new();
    for _ in 0..2 {
        let mut socket = TcpStream::connect(address).await.unwrap();
        socket
            .write_all(health_request(address).as_bytes())
            .await
            .unwrap();
        assert_eq!(response(&mut socket).await.0, 200);
        open.push(socket);
    }
    // A third is connected (the kernel's backlog holds it) but not served...
    let mut third = TcpStream::connect(address).await.unwrap();
    third
        .write_all(health_request(address).as_bytes())
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    let early = timeout(Duration::from_secs(1), third.read(&mut buf)).await;
    assert!(early.is_err(), "a third connection was answered: {early:?}");
    // ...until one of the two closes.
    drop(open.remove(0));
    assert_eq!(response(&mut third).await.0, 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[parallel]
async fn a_prompt_over_the_token_limit_is_a_400_naming_the_numbers() {
    let limits = Limits {
        max_prompt_tokens: 20,
        ..limits()
    };
    let server = Serving::start(app(config(), Some(limits))).await;
    let client = reqwest::Client::new();
    let post = |path: &str, body: Value| {
        client
            .post(format!("{}{path}", server.base))
            .json(&body)
            .send()
    };
    let prompt: Vec<u32> = (10..40).collect();
    let body = json!({"model": MODEL, "prompt": prompt, "max_tokens": 4});
    let response = post("/v1/completions", body).await.unwrap();
    assert_eq!(response.status(), 400);
    let e: Value = response.json().await.unwrap();
    let e = &e["error"];
    assert_eq!(e["param"], "prompt");
    assert_eq!(e["code"], "context_length_exceeded");
    let message = e["message"].as_str().unwrap();
    assert!(
        message.contains("30 tokens") && message.contains("limit of 20 prompt tokens"),
        "{message}"
    );
    // A conversation, counted as rendered.
    let words = "the sea ".repeat(20);
    let body = json!({"model": MODEL, "messages": [{"role": "user", "content": words}]});
    let response = post("/v1/chat/completions", body).await.unwrap();
    assert_eq!(response.status(), 400);
    let e: Value = response.json().await.unwrap();
    assert_eq!(e["error"]["param"], "messages", "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("limit of 20 prompt tokens"),
        "{e}"
    );
    // At the limit: served.
    let body = json!({"model": MODEL, "prompt": &prompt[..20], "max_tokens": 4});
    assert_eq!(post("/v1/completions", body).await.unwrap().status(), 200);
    server.stop().await;
}

/// The events of a stream as they arrive, each with the engine's step count when it came.
struct Receipts {
    events: Vec<(usize, Value)>,
    pending: String,
}

impl Receipts {
    fn take(&mut self, chunk: &[u8], steps: usize) {
        self.pending.push_str(std::str::from_utf8(chunk).unwrap());
        while let Some((event, rest)) = self.pending.split_once("\n\n") {
            let data = event.strip_prefix("data: ").expect("a data event");
            if data != "[DONE]" {
                self.events
                    .push((steps, serde_json::from_str(data).unwrap()));
            }
            self.pending = rest.to_string();
        }
    }
}

#[test]
#[serial]
fn a_one_megabyte_prompt_holds_back_no_other_stream() {
    // One async worker: a prompt tokenized on it would hold back every stream.
    let server_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let client_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cfg = ServeConfig {
        pages: 160,
        max_seq: 512,
        ..config()
    };
    // The stream's tokens, and the text chunk each completes (if any), as the server sends
    // them.
    let tok = tokenizer();
    let prompt = "The sea";
    let want = {
        let mut server = Server::new(load(), cfg, &device()).unwrap();
        let request =
            Request::greedy(tok.encode(prompt).unwrap(), 400).with_stop(tok.eos_ids().to_vec());
        let report = server.generate(&[request]);
        report.results[0].as_ref().unwrap().tokens.clone()
    };
    let tokenizer = Tokenizer::Checkpoint(Box::new(tok));
    let mut text = Detokenizer::new(Vec::new());
    let chunks: Vec<(usize, String)> = want
        .iter()
        .enumerate()
        .map(|(i, &t)| (i, text.push(&tokenizer, t).text))
        .filter(|(_, delta)| !delta.is_empty())
        .collect();
    assert!(
        chunks.len() >= 100,
        "a long stream: {} chunks",
        chunks.len()
    );

    let app = app(cfg, None);
    let server = client_runtime.block_on(Serving::start_on(app.clone(), |serving| {
        server_runtime.spawn(serving)
    }));
    let (events, window, refused) = client_runtime.block_on(async {
        let client = reqwest::Client::new();
        let url = format!("{}/v1/completions", server.base);
        let body = json!({"model": MODEL, "prompt": prompt, "max_tokens": 400, "temperature": 0,
                          "stream": true});
        let response = client.post(&url).json(&body).send().await.unwrap();
        let mut stream = response.bytes_stream();
        let mut receipts = Receipts {
            events: Vec::new(),
            pending: String::new(),
        };
        let mut long = None;
        while let Some(chunk) = stream.next().await {
            receipts.take(&chunk.unwrap(), app.engine().stats().steps);
            if long.is_none() && receipts.events.len() >= 5 {
                // 1 MiB of text, about half a million tokens: refused once it is tokenized.
                let huge = "The sea ".repeat(1 << 17);
                let body = json!({"model": MODEL, "prompt": huge, "max_tokens": 4});
                let (client, url, app) = (client.clone(), url.clone(), app.clone());
                long = Some(tokio::spawn(async move {
                    let start = app.engine().stats().steps;
                    let response = client.post(&url).json(&body).send().await.unwrap();
                    let status = response.status().as_u16();
                    let body: Value = response.json().await.unwrap();
                    ((start, app.engine().stats().steps), (status, body))
                }));
            }
        }
        let (window, refused) = long.expect("the stream began").await.unwrap();
        (receipts.events, window, refused)
    });
    let (status, body) = refused;
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("524288 tokens"), "{message}");
    // The stream's text is whole, chunk by chunk.
    assert!(
        events.len() > chunks.len(),
        "the stream ended: {}",
        events.len()
    );
    for ((_, event), (token, delta)) in events.iter().zip(&chunks) {
        assert_eq!(event["choices"][0]["text"], delta.as_str(), "token {token}");
    }
    // How many steps after the step that made it each token made while the prompt was
    // tokenized reached the client (the engine's first step, its prefill, made token 0; a
    // receipt counts the steps run when its chunk came).
    let (start, end) = window;
    let delays: Vec<usize> = events
        .iter()
        .zip(&chunks)
        .map(|((steps, _), (token, _))| (token + 1, *steps))
        .filter(|(made, _)| (start..end).contains(made))
        .map(|(made, steps)| steps - made)
        .collect();
    // Tokenizing took steps, else a worker held by it would not show.
    assert!(
        delays.len() >= 20,
        "tokenizing 1 MiB took steps {start} to {end}, {} tokens of the stream",
        delays.len()
    );
    // Held behind the tokenization, each token made while it ran would come when it ended. On a
    // loaded machine any token may come a few steps late, with or without the long prompt (the
    // test's own threads wait for a core), so each must come long before the end and most in
    // the step after theirs.
    let worst = delays.iter().max().copied().unwrap_or(0);
    assert!(
        worst < (end - start) / 4,
        "a token waited {worst} steps while the 1 MiB prompt was tokenized (steps {start} to \
         {end}): {delays:?}"
    );
    let mut sorted = delays.clone();
    sorted.sort_unstable();
    let median = sorted[sorted.len() / 2];
    assert!(median <= 1, "median delay {median} steps: {delays:?}");
    drop(server);
}
