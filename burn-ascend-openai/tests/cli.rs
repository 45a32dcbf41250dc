//! The program as an operator runs it (`cargo install --path burn-ascend-openai`): started on
//! a free port with a checkpoint, it prints its limits and its address, answers a greedy
//! completion with the text the library's engine generates for the same prompt in process, and
//! on SIGTERM drains and exits with 0. An engine that cannot recover (its test hook) answers
//! the request with a 500 and the program exits non-zero, for a supervisor to restart it. A bad
//! option stops it at start, naming the option.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use burn::tensor::DType;
use burn_ascend::{Ascend, AscendDevice};
use burn_ascend_llm::engine::serve::{Request, ServeConfig, Server};
use burn_ascend_llm::families;
use burn_ascend_llm::hf::TextTokenizer;
use serde_json::Value;

const PROGRAM: &str = env!("CARGO_BIN_EXE_burn-ascend-openai");

/// The tiny Qwen3-MoE fixture the workspace's HTTP tests serve.
fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/hf/qwen3_moe")
}

/// The child process, killed when dropped (a failing test must not leave it running).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `POST path` with a JSON body over one HTTP/1.1 connection; the response's status and body.
fn post(address: &str, path: &str, body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(address).expect("the server accepts connections");
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("a whole response");
    let (head, body) = response.split_once("\r\n\r\n").expect("a head and a body");
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok());
    (status.expect("a status line"), body.to_string())
}

/// What the library generates greedily for `prompt` on the fixture, as text.
fn in_process(prompt: &str, new_tokens: usize) -> String {
    let device = AscendDevice::default();
    let tokenizer = TextTokenizer::from_dir(fixture()).expect("the fixture's tokenizer");
    let model = families::load::<Ascend>(fixture(), DType::F32, &device)
        .expect("the fixture loads")
        .model;
    let cfg = ServeConfig {
        pages: 64,
        page_size: 16,
        max_seq: 128,
        max_kv_splits: 4,
        step_tokens: 64,
        max_waiting: 8,
        record_logits: false,
    };
    let mut server = Server::new(model, cfg, &device).expect("a valid configuration");
    let request = Request::greedy(tokenizer.encode(prompt).unwrap(), new_tokens)
        .with_stop(tokenizer.eos_ids().to_vec());
    let out = server.generate(&[request]);
    let tokens = &out.results[0].as_ref().expect("generated").tokens;
    tokenizer.decode(tokens).unwrap()
}

/// The program serving the fixture with `args` on a free port: the child, its log (a line
/// at a time) and the address it serves on.
fn start(args: &[&str]) -> (Running, mpsc::Receiver<String>, String) {
    let mut child = Command::new(PROGRAM)
        .arg("--model")
        .arg(fixture())
        .args(["--served-model-name", "m", "--port", "0", "--dtype", "f32"])
        .args(["--pages", "64", "--max-seq", "128"])
        .args(args)
        .env("BURN_ASCEND_DEVICE", "emulated")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("the program starts");
    let stderr = child.stderr.take().expect("piped stderr");
    let running = Running(child);
    // The log is read on a thread of its own, so that a program that never prints its address
    // fails the test at the deadline instead of hanging it.
    let (lines, log) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut limits = None;
    let address = loop {
        let line = log
            .recv_timeout(Duration::from_secs(300))
            .expect("the program prints the address it serves on");
        if line.contains("limits: ") {
            limits = Some(line);
        } else if let Some((_, url)) = line.split_once(" on http://") {
            break url.to_string();
        }
    };
    let limits = limits.expect("the program prints its limits before its address");
    // The log shows them all: what the test set, and the defaults.
    for shown in [
        "head within 10s",
        "body within 30s and 8388608 bytes",
        "7 connections at once (more wait in the accept backlog)",
        "one request at a time per connection (HTTP/1.1, HTTP/2 off)",
        "prompts of up to 127 tokens",
    ] {
        assert!(limits.contains(shown), "{shown:?} not in {limits:?}");
    }
    (running, log, address)
}

#[test]
fn serves_a_checkpoint_then_drains_on_sigterm() {
    let (mut running, _log, address) = start(&["--max-connections", "7"]);

    let prompt = "The tide turned";
    let body =
        format!(r#"{{"model": "m", "prompt": "{prompt}", "max_tokens": 8, "temperature": 0}}"#);
    let (status, response) = post(&address, "/v1/completions", &body);
    assert_eq!(status, 200, "{response}");
    let response: Value = serde_json::from_str(&response).expect("a JSON body");
    let text = response["choices"][0]["text"]
        .as_str()
        .expect("a completion's text");
    assert!(!text.is_empty(), "an empty completion proves nothing");
    assert_eq!(text, in_process(prompt, 8));

    let pid = running.0.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    let status = running.0.wait().expect("the program exits");
    assert!(status.success(), "exit status after SIGTERM: {status}");
}

#[test]
fn an_engine_that_cannot_recover_answers_then_exits_non_zero() {
    let (mut running, log, address) =
        start(&["--max-connections", "7", "--test-hook-unrecoverable-fault"]);
    let body = r#"{"model": "m", "prompt": "The tide turned", "max_tokens": 8}"#;
    let (status, response) = post(&address, "/v1/completions", body);
    assert_eq!(status, 500, "{response}");
    let response: Value = serde_json::from_str(&response).expect("a JSON body");
    let message = response["error"]["message"]
        .as_str()
        .expect("an error object");
    assert!(message.contains("the device failed"), "{message}");
    // Nothing else in flight: it exits at once, saying why, with a failure status.
    let mut waited = 0;
    let status = loop {
        if let Some(status) = running.0.try_wait().unwrap() {
            break status;
        }
        waited += 1;
        assert!(
            waited < 600,
            "the program is still running 60 s after the failure"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status.code(), Some(1), "exit status: {status}");
    let said = log.iter().collect::<Vec<String>>().join("\n");
    let (_, last) = said
        .rsplit_once("exiting for a restart: ")
        .unwrap_or_else(|| panic!("the program says why it exits: {said}"));
    assert!(last.contains("the device reset failed"), "{last}");
}

#[test]
fn a_bad_option_stops_it_at_start_naming_the_option() {
    let out = Command::new(PROGRAM)
        .arg("--model")
        .arg(fixture())
        .args(["--port", "0", "--dtype", "f8"])
        .env("BURN_ASCEND_DEVICE", "emulated")
        .output()
        .expect("the program runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--dtype \"f8\""), "stderr: {stderr}");
}
