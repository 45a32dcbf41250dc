//! What each fuzz target does with one input, shared by the cargo-fuzz targets (`fuzz/`, which
//! include this file) and the tests that replay the corpora and run the fixed-seed mutations
//! (`tests/fuzz.rs`). A target returns `Ok` or the error the code under test gave, and panics
//! only when the property fails: the code panicked, or its error does not say what is wrong.
//!
//! Inputs that hold several files are archives: each file is `@@ NAME\n` followed by its bytes,
//! files separated by a newline (`\n@@ NAME\n...`). Separators rather than lengths, so that a
//! fuzzer inserting or deleting bytes changes one file's contents, not the framing. A name that
//! is not a plain file name is skipped: nothing is written outside the input's directory.

use burn::tensor::DType;
use burn_ascend_llm::families;
use burn_ascend_llm::hf::{Checkpoint, TextTokenizer};
use burn_ascend_openai::api::{self, ChatRequest, CompletionRequest};
use burn_ascend_openai::chat::{ChatError, ChatMessage, ChatTemplate};
use burn_flex::{Flex, FlexDevice};

/// Where a file starts in an archive.
const MARK: &[u8] = b"@@ ";

/// The files of an archive, in order (a later file of the same name replaces an earlier one
/// when written).
pub fn unpack(data: &[u8]) -> Vec<(String, &[u8])> {
    let mut files = Vec::new();
    let mut rest = data;
    while let Some(at) = find(rest, MARK) {
        let entry = &rest[at + MARK.len()..];
        let end = find(entry, b"\n@@ ").unwrap_or(entry.len());
        let (head, next) = entry.split_at(end);
        if let Some(newline) = head.iter().position(|&b| b == b'\n') {
            let name = String::from_utf8_lossy(&head[..newline]).into_owned();
            if plain(&name) {
                files.push((name, &head[newline + 1..]));
            }
        }
        rest = next;
    }
    files
}

/// An archive of `files`.
pub fn pack<'a>(files: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, bytes) in files {
        if !out.is_empty() {
            out.push(b'\n');
        }
        out.extend_from_slice(MARK);
        out.extend_from_slice(name.as_bytes());
        out.push(b'\n');
        out.extend_from_slice(bytes);
    }
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A name a file can have in the input's directory, and nowhere else.
fn plain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 100
        && !name.contains(['/', '\\', '\0'])
        && name != "."
        && name != ".."
}

/// The archive's files written into a new temporary directory.
fn directory(data: &[u8]) -> (tempfile::TempDir, Vec<String>) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut names = Vec::new();
    for (name, bytes) in unpack(data) {
        std::fs::write(dir.path().join(&name), bytes).expect("the input's file is written");
        names.push(name);
    }
    (dir, names)
}

/// The property of every error: its message names what is wrong, here by one of `names` (a
/// file or directory, a field).
fn clear(message: &str, names: &[&str]) -> Result<(), String> {
    assert!(
        names.iter().any(|n| !n.is_empty() && message.contains(n)),
        "the error names none of {names:?}: {message}"
    );
    Err(message.to_string())
}

/// `Checkpoint::open` on a directory (config.json, model.safetensors or shards with
/// model.safetensors.index.json), every tensor read, then the model loaded on burn-flex
/// (families::load: config.json, the tensors checked by name, shape and dtype, then uploaded).
pub fn checkpoint(data: &[u8]) -> Result<(), String> {
    let (dir, files) = directory(data);
    let path = dir.path().display().to_string();
    let mut names: Vec<&str> = files.iter().map(String::as_str).collect();
    names.extend([path.as_str(), "config.json", "quant_model_description.json"]);
    let checkpoint = match Checkpoint::open(dir.path()) {
        Ok(c) => c,
        Err(e) => return clear(&e.to_string(), &names),
    };
    let tensors: Vec<String> = checkpoint.names().map(str::to_string).collect();
    for (i, name) in tensors.iter().enumerate() {
        let (info, bytes) = checkpoint.bytes(name).expect("a listed tensor");
        let elements: usize = info.shape.iter().product();
        let size = if info.float8 { 1 } else { info.dtype.size() };
        assert_eq!(bytes.len(), elements * size, "{name}: {info:?}");
        let dtype = [DType::F32, DType::F16, DType::BF16][i % 3];
        match checkpoint.read(name, dtype) {
            Ok(data) => assert_eq!(data.num_elements(), elements, "{name}"),
            // Integer and FP8 tensors are not decoded on the host.
            Err(e) => assert!(e.to_string().contains(name.as_str()), "{e}"),
        }
    }
    if let Err(e) = checkpoint.dtype() {
        return clear(&e.to_string(), &["config.json"]);
    }
    let mut names: Vec<&str> = names;
    names.extend(tensors.iter().map(String::as_str));
    match families::load::<Flex>(dir.path(), DType::F32, &FlexDevice) {
        Ok(_) => Ok(()),
        Err(e) => clear(&e.to_string(), &names),
    }
}

/// `families::spec_of` on a config.json (text that is not a JSON value is skipped: reading the
/// file is `checkpoint`'s), and the tensors its decoder expects.
pub fn config(data: &[u8]) -> Result<(), String> {
    let Ok(config) = serde_json::from_slice::<serde_json::Value>(data) else {
        return Ok(());
    };
    match families::spec_of(&config) {
        Ok(spec) => {
            let expected = spec.expected();
            assert!(!expected.0.is_empty(), "a decoder with no tensors");
            Ok(())
        }
        Err(e) => clear(&e.to_string(), &["config.json"]),
    }
}

/// `TextTokenizer::from_dir` on a directory (tokenizer.json, tokenizer_config.json,
/// generation_config.json, config.json), then texts encoded and ids decoded.
pub fn tokenizer(data: &[u8]) -> Result<(), String> {
    let (dir, files) = directory(data);
    let path = dir.path().display().to_string();
    let mut names: Vec<&str> = files.iter().map(String::as_str).collect();
    names.extend([path.as_str(), "tokenizer.json"]);
    let tokenizer = match TextTokenizer::from_dir(dir.path()) {
        Ok(t) => t,
        Err(e) => return clear(&e.to_string(), &names),
    };
    let vocab = tokenizer.vocab_size() as u32;
    for text in [
        "",
        "The sea",
        "héllo wörld 😀 <|im_end|>\n\n  x",
        "\u{0}\u{fffd}",
    ] {
        for ids in [tokenizer.encode(text), tokenizer.encode_plain(text)] {
            let ids = match ids {
                Ok(ids) => ids,
                Err(e) => return clear(&e.to_string(), &["encoding"]),
            };
            if let Err(e) = tokenizer.decode(&ids) {
                return clear(&e.to_string(), &["decoding"]);
            }
        }
    }
    let ids: Vec<u32> = [0, 1, vocab.saturating_sub(1), vocab, u32::MAX].into();
    if let Err(e) = tokenizer.decode(&ids) {
        return clear(&e.to_string(), &["decoding"]);
    }
    Ok(())
}

/// The conversation a chat-template input renders (`conversation.json`).
#[derive(serde::Deserialize)]
struct Conversation {
    messages: Vec<ChatMessage>,
    #[serde(default)]
    add_generation_prompt: bool,
    #[serde(default)]
    kwargs: serde_json::Map<String, serde_json::Value>,
}

/// `ChatTemplate::from_dir` on a directory (chat_template.jinja, tokenizer_config.json,
/// special_tokens_map.json), then the template rendering `conversation.json` (a default
/// conversation when it is missing or not one) on a thread with the stack the server renders
/// on (tokio's blocking threads: 2 MiB).
pub fn chat_template(data: &[u8]) -> Result<(), String> {
    let (dir, files) = directory(data);
    let path = dir.path().display().to_string();
    let mut names: Vec<&str> = files.iter().map(String::as_str).collect();
    names.extend([path.as_str(), "chat_template"]);
    let conversation = std::fs::read(dir.path().join("conversation.json"))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Conversation>(&bytes).ok())
        .unwrap_or_else(|| Conversation {
            messages: vec![
                ChatMessage::new("system", "Be brief."),
                ChatMessage::new("user", "The sea?"),
            ],
            add_generation_prompt: true,
            kwargs: Default::default(),
        });
    let template = match ChatTemplate::from_dir(dir.path()) {
        Ok(Some(t)) => t,
        Ok(None) => return Ok(()),
        Err(e) => return clear(&e.to_string(), &names),
    };
    render(&template, &conversation)
}

/// Renders on a 2 MiB stack; a panic there is the input's failure.
fn render(template: &ChatTemplate, c: &Conversation) -> Result<(), String> {
    let rendered = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn_scoped(scope, || {
                template.render_with(&c.messages, c.add_generation_prompt, &c.kwargs)
            })
            .expect("a rendering thread")
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    });
    match rendered {
        Ok(_) => Ok(()),
        // The template's own refusal says what it wants.
        Err(ChatError::Rejected(message)) => Err(message),
        Err(e) => clear(&e.to_string(), &["chat template"]),
    }
}

/// The template the request target renders chats with (ChatML, as Qwen's templates render).
const CHATML: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n\
                      {% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// A request body as the server parses and checks it before tokenizing: its first line names
/// the endpoint (`/v1/chat/completions`, else a completion), the rest is the body. Every error
/// is a 4xx naming the field or saying what is wrong with the body; a chat is rendered by
/// ChatML.
pub fn request(data: &[u8]) -> Result<(), String> {
    let (path, body) = match data.iter().position(|&b| b == b'\n') {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (&b""[..], data),
    };
    let checked = if path == b"/v1/chat/completions" {
        api::parse::<ChatRequest>(body).and_then(|(request, common)| {
            let checked = common.check("served", &Default::default())?;
            request.check_unsupported()?;
            let template = ChatTemplate::from_source(CHATML, [], "chatml").expect("ChatML");
            let c = Conversation {
                messages: request.messages,
                add_generation_prompt: true,
                kwargs: Default::default(),
            };
            if let Err(e) = render(&template, &c) {
                return Err(api::ApiError::invalid("messages", e));
            }
            Ok(checked)
        })
    } else {
        api::parse::<CompletionRequest>(body).and_then(|(request, common)| {
            let checked = common.check("served", &Default::default())?;
            request.check_unsupported(checked.n)?;
            Ok(checked)
        })
    };
    match checked {
        Ok(c) => {
            assert!((0.0..=2.0).contains(&c.temperature), "{}", c.temperature);
            assert!(c.top_p > 0.0 && c.top_p <= 1.0, "{}", c.top_p);
            assert!(c.stop.len() <= 4 && c.stop.iter().all(|s| !s.is_empty()));
            Ok(())
        }
        Err(e) => {
            assert!(e.status.is_client_error(), "a bad request is a 4xx: {e:?}");
            let message = &e.body.message;
            assert!(!message.is_empty(), "{e:?}");
            // An error about one field names it (a field may be named ""); one about the whole
            // body says so.
            let fields: Option<serde_json::Map<String, serde_json::Value>> =
                serde_json::from_slice(body).ok();
            let unnamed = fields.is_some_and(|f| f.contains_key(""));
            match &e.body.param {
                Some(param) => assert!(!param.is_empty() || unnamed, "{e:?}"),
                None => assert!(
                    message.contains("body") || message.contains("model"),
                    "{e:?}"
                ),
            }
            Err(message.clone())
        }
    }
}
