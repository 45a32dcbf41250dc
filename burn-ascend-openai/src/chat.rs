//! A checkpoint's chat template, rendered as transformers' `apply_chat_template(tokenize=False)`
//! renders it.
//!
//! The template comes from `chat_template.jinja` (transformers >= 4.47 saves it there, and it takes
//! priority) or from `tokenizer_config.json`'s `chat_template` (a string, or a list of named
//! templates of which "default" is used, as transformers does when no tools are given). It is
//! rendered with minijinja configured as transformers configures Jinja2: `trim_blocks` and
//! `lstrip_blocks` on, the trailing newline of the template dropped, `break`/`continue`, the globals
//! `raise_exception` and `strftime_now`, transformers' own `tojson` (plain `json.dumps`, no HTML
//! escaping) and Python's string/dict methods (`.strip()`, `.startswith()`, `.items()`...);
//! minijinja already prints `True`/`False`/`None` as Jinja2 does. The variables are those transformers passes:
//! `messages`, `tools` and `documents` (both `none`), `add_generation_prompt`, the tokenizer's
//! special tokens (`bos_token`, `eos_token`, ...) and any extra keyword arguments.
//!
//! Not supported: transformers' `{% generation %}` tag (it only marks assistant tokens for training
//! masks); a template using it fails to load with a syntax error naming the tag.
//!
//! Limits (transformers has none): a render may do [`FUEL`] units of work (minijinja's fuel: an
//! instruction, or 64 bytes of data made), write [`MAX_RENDERED_BYTES`], and nest loops, calls
//! and macros [`RECURSION_LIMIT`] deep; it runs on a thread of its own whose stack holds the
//! deepest value that budget can build. A template that loops or recurses without end is
//! refused ([`ChatError::TooMuchWork`], or a rendering error naming the recursion limit) in
//! milliseconds. Not bounded: minijinja formats lists and maps as text without charging fuel, so
//! a template that builds a list holding itself twice, over and over (through a `namespace`),
//! then converts it to text (`~`, `string`, `join`, `pprint`, string filters) runs until memory
//! runs out. Only a template can build such a value, never a conversation (its messages are
//! strings); the template is the checkpoint's, trusted as its weights are.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use minijinja::value::{Kwargs, Serde, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State};
use serde::{Deserialize, Serialize};

/// The special tokens transformers hands to a template (its `special_tokens_map`, less the list of
/// additional ones, which no published template reads).
const SPECIAL_TOKENS: [&str; 7] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];

const TEMPLATE_NAME: &str = "chat_template";

/// The work a render may do (minijinja's fuel: an instruction costs one, as does every 64
/// bytes of data made). The published templates (tests/fixtures/chat) use about 64 a message and
/// one per 16 bytes of text: this is about 2000 messages or 2 MB of text, more than a prompt of
/// 128k tokens holds.
pub const FUEL: u64 = 1 << 17;

/// The most bytes a render may write: what [`FUEL`] pays for.
pub const MAX_RENDERED_BYTES: usize = (FUEL * 64) as usize;

/// The stack of the thread a render runs on. A value nested one level deeper costs at least one
/// fuel, and formatting, serializing or dropping it takes at most about 2.2 kB of stack a level
/// (measured in a debug build: minijinja's formatting 1.3 kB, `tojson(sort_keys=true)` 2.2 kB,
/// a drop 0.3 kB), so the deepest value [`FUEL`] can build needs about 290 MB. Only the pages a
/// render touches are ever mapped.
const RENDER_STACK: usize = 512 << 20;

/// How deep loops, calls and macros may nest while rendering (minijinja counts a macro call as
/// 4 levels): minijinja's own limit, made explicit; a template that recurses without end stops
/// there.
pub const RECURSION_LIMIT: usize = 500;

/// One message of a conversation, as OpenAI's chat API and transformers take it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, `tool`...: the template decides which it accepts.
    pub role: String,
    /// The message text: a string, the text parts of a content array joined by newlines (as
    /// vLLM joins them), or empty for `null` or no content (an assistant turn that only calls
    /// tools).
    #[serde(default, deserialize_with = "content_text")]
    pub content: String,
}

/// A message's `content` as text; a part other than text (`image_url`, `input_audio`, `file`)
/// is refused, naming its type: the models served read text only.
fn content_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    use serde::de::Error;
    match Option::<serde_json::Value>::deserialize(d)? {
        None | Some(serde_json::Value::Null) => Ok(String::new()),
        Some(serde_json::Value::String(text)) => Ok(text),
        Some(serde_json::Value::Array(parts)) => {
            let texts = parts
                .iter()
                .map(|part| match part.get("type").and_then(|t| t.as_str()) {
                    Some("text") => part.get("text").and_then(|t| t.as_str()).ok_or_else(|| {
                        D::Error::custom("a text content part has no `text` string")
                    }),
                    Some(other) => Err(D::Error::custom(format!(
                        "content parts of type `{other}` are not supported: the model reads text \
                         parts only"
                    ))),
                    None => Err(D::Error::custom("a content part has no `type`")),
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(texts.join("\n"))
        }
        Some(other) => Err(D::Error::custom(format!(
            "content is {other}: a string, an array of content parts or null"
        ))),
    }
}

impl ChatMessage {
    /// A message with this role and content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// Why a chat template could not be loaded or rendered.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// A file exists but could not be read.
    #[error("chat template: cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// `tokenizer_config.json` (or `special_tokens_map.json`) is not valid JSON.
    #[error("chat template: {path} is not valid JSON: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// The parse error.
        source: serde_json::Error,
    },
    /// The configuration holds a template in a form transformers would not accept either.
    #[error("chat template: {path}: {reason}")]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The checkpoint has no chat template (see [`ChatTemplate::load`]).
    #[error(
        "chat template: {dir} has none (no chat_template.jinja, no \"chat_template\" in \
         tokenizer_config.json): chat requests need one, use completions instead"
    )]
    Missing {
        /// The checkpoint directory.
        dir: PathBuf,
    },
    /// The template is not valid Jinja (or uses a tag transformers adds that is not supported).
    #[error("chat template from {path}: syntax error: {detail}")]
    Syntax {
        /// Where the template came from.
        path: PathBuf,
        /// minijinja's message, with the line.
        detail: String,
    },
    /// The template refused the conversation with `raise_exception(message)` (as transformers
    /// raises `TemplateError(message)`): a bad request, e.g. roles that do not alternate.
    #[error("the chat template rejected the conversation: {0}")]
    Rejected(String),
    /// Rendering failed otherwise (e.g. an attribute of an undefined value, a bad argument, the
    /// recursion limit).
    #[error("chat template: rendering failed: {0}")]
    Render(String),
    /// Rendering did more work, or wrote more, than a render may ([`FUEL`],
    /// [`MAX_RENDERED_BYTES`]): the template loops (or builds data) without end, or the
    /// conversation is far longer than any prompt.
    #[error(
        "chat template: rendering stopped at its budget of {FUEL} units of work and \
         {MAX_RENDERED_BYTES} bytes, on a conversation of {messages} messages and {bytes} bytes \
         (does the template loop without end?)"
    )]
    TooMuchWork {
        /// The conversation's messages.
        messages: usize,
        /// The conversation's bytes.
        bytes: usize,
    },
    /// The thread a render runs on could not be started.
    #[error("chat template: cannot start a thread to render on: {0}")]
    Thread(String),
}

/// The marker `raise_exception` attaches to its error, so that a template's own refusal is told
/// apart from a rendering failure.
#[derive(Debug)]
struct Raised(String);

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

/// A loaded chat template with the tokenizer's special tokens; cheap to share between threads.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    special_tokens: BTreeMap<&'static str, String>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source", &self.source)
            .field("special_tokens", &self.special_tokens)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// The chat template of the checkpoint directory `dir`, or `None` when it has none.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Option<Self>, ChatError> {
        let dir = dir.as_ref();
        let config_path = dir.join("tokenizer_config.json");
        let config = read_json(&config_path)?;
        let jinja_path = dir.join("chat_template.jinja");
        let (template, origin) = if jinja_path.is_file() {
            let text = std::fs::read_to_string(&jinja_path).map_err(|source| ChatError::Io {
                path: jinja_path.clone(),
                source,
            })?;
            (text, jinja_path)
        } else {
            match config
                .as_ref()
                .and_then(|c| c.get("chat_template"))
                .map(|t| template_from_config(t, &config_path))
                .transpose()?
                .flatten()
            {
                Some(text) => (text, config_path.clone()),
                None => return Ok(None),
            }
        };
        // transformers reads the legacy special_tokens_map.json too, keeping tokenizer_config's
        // value where both have one.
        let legacy = read_json(&dir.join("special_tokens_map.json"))?;
        let mut special_tokens = BTreeMap::new();
        for name in SPECIAL_TOKENS {
            let token = [config.as_ref(), legacy.as_ref()]
                .into_iter()
                .flatten()
                .find_map(|c| c.get(name).and_then(token_content));
            if let Some(token) = token {
                special_tokens.insert(name, token);
            }
        }
        Self::new(template, special_tokens, &origin).map(Some)
    }

    /// [`from_dir`](Self::from_dir), with a checkpoint that has no template an error naming the
    /// directory.
    pub fn load(dir: impl AsRef<Path>) -> Result<Self, ChatError> {
        let dir = dir.as_ref();
        Self::from_dir(dir)?.ok_or_else(|| ChatError::Missing {
            dir: dir.to_path_buf(),
        })
    }

    /// A template from its source text and the special tokens (`"bos_token"` ... ) it may use;
    /// `origin` names where it came from in errors.
    pub fn from_source(
        source: impl Into<String>,
        special_tokens: impl IntoIterator<Item = (&'static str, String)>,
        origin: impl AsRef<Path>,
    ) -> Result<Self, ChatError> {
        Self::new(
            source.into(),
            special_tokens.into_iter().collect(),
            origin.as_ref(),
        )
    }

    fn new(
        source: String,
        special_tokens: BTreeMap<&'static str, String>,
        origin: &Path,
    ) -> Result<Self, ChatError> {
        let mut env = Environment::new();
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .keep_trailing_newline(false)
                .build()
                .expect("the default delimiters are valid"),
        );
        env.set_recursion_limit(RECURSION_LIMIT);
        env.set_fuel(Some(FUEL));
        env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(TEMPLATE_NAME, source.clone())
            .map_err(|e| ChatError::Syntax {
                path: origin.to_path_buf(),
                detail: describe(&e),
            })?;
        Ok(Self {
            env,
            source,
            special_tokens,
        })
    }

    /// The template's source text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The tokenizer's beginning-of-sequence token, if it has one.
    pub fn bos_token(&self) -> Option<&str> {
        self.special_tokens.get("bos_token").map(String::as_str)
    }

    /// The tokenizer's end-of-sequence token, if it has one.
    pub fn eos_token(&self) -> Option<&str> {
        self.special_tokens.get("eos_token").map(String::as_str)
    }

    /// The prompt text of `messages`; with `add_generation_prompt`, followed by what opens the
    /// assistant's reply.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        self.render_with(messages, add_generation_prompt, &serde_json::Map::new())
    }

    /// [`render`](Self::render) with extra template variables, as transformers'
    /// `apply_chat_template(..., **kwargs)` and vLLM's `chat_template_kwargs` pass them (e.g.
    /// Qwen3's `enable_thinking`). They override the special tokens of the same name.
    pub fn render_with(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        kwargs: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String, ChatError> {
        let mut vars: BTreeMap<String, Value> = self
            .special_tokens
            .iter()
            .map(|(k, v)| (k.to_string(), Value::from(v.as_str())))
            .collect();
        for (k, v) in kwargs {
            vars.insert(k.clone(), Value::from(Serde(v)));
        }
        vars.insert("messages".into(), Value::from(Serde(messages)));
        vars.insert("tools".into(), Value::from(()));
        vars.insert("documents".into(), Value::from(()));
        vars.insert(
            "add_generation_prompt".into(),
            Value::from(add_generation_prompt),
        );
        let template = self.env.get_template(TEMPLATE_NAME).expect("added in new");
        let out_of_budget = ChatError::TooMuchWork {
            messages: messages.len(),
            bytes: messages
                .iter()
                .map(|m| m.role.len() + m.content.len())
                .sum(),
        };
        let mut out = Bounded::new(MAX_RENDERED_BYTES);
        // minijinja's errors hold the template's variables (to print them): they are turned
        // into ours on the rendering thread, which drops them there, where a value nested as
        // deep as the budget allows fits the stack.
        let render = || match template.render_captured_to(vars, &mut out) {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == ErrorKind::OutOfFuel || out.full => Err(None),
            Err(e) => Err(Some(rendering_error(&e))),
        };
        let rendered = std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("chat template".into())
                .stack_size(RENDER_STACK)
                .spawn_scoped(scope, render)
                .map(|thread| thread.join())
        });
        match rendered {
            Err(e) => Err(ChatError::Thread(e.to_string())),
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            Ok(Ok(Ok(()))) => {
                String::from_utf8(out.bytes).map_err(|e| ChatError::Render(e.to_string()))
            }
            Ok(Ok(Err(None))) => Err(out_of_budget),
            Ok(Ok(Err(Some(e)))) => Err(e),
        }
    }
}

/// A rendering failure: the template's own refusal (`raise_exception`), or minijinja's message.
fn rendering_error(e: &Error) -> ChatError {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(Raised(message)) = c.downcast_ref::<Raised>() {
            return ChatError::Rejected(message.clone());
        }
        cause = c.source();
    }
    ChatError::Render(describe(e))
}

/// minijinja's message with the line it points at.
fn describe(e: &Error) -> String {
    match e.line() {
        Some(line) => format!("{} (template line {line})", e.detail().unwrap_or("")),
        None => e.to_string(),
    }
    .trim()
    .to_string()
}

fn read_json(path: &Path) -> Result<Option<serde_json::Value>, ChatError> {
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path).map_err(|source| ChatError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|source| ChatError::Json {
            path: path.to_path_buf(),
            source,
        })
}

/// `chat_template` of tokenizer_config.json: a string, a list of `{name, template}` (transformers
/// uses "default"), or null.
fn template_from_config(
    value: &serde_json::Value,
    path: &Path,
) -> Result<Option<String>, ChatError> {
    let bad = |reason: String| ChatError::Config {
        path: path.to_path_buf(),
        reason,
    };
    match value {
        serde_json::Value::Null => Ok(None),
        serde_json::Value::String(s) => Ok(Some(s.clone())),
        serde_json::Value::Array(list) => {
            let mut names = Vec::new();
            for entry in list {
                let name = entry.get("name").and_then(|n| n.as_str());
                let template = entry.get("template").and_then(|t| t.as_str());
                let (Some(name), Some(template)) = (name, template) else {
                    return Err(bad(format!(
                        "\"chat_template\" list entries must be {{\"name\": string, \
                         \"template\": string}}, found {entry}"
                    )));
                };
                if name == "default" {
                    return Ok(Some(template.to_string()));
                }
                names.push(name.to_string());
            }
            names.sort();
            Err(bad(format!(
                "\"chat_template\" lists several templates but none named \"default\" \
                 (names: {names:?})"
            )))
        }
        other => Err(bad(format!(
            "\"chat_template\" must be a string or a list of named templates, found {other}"
        ))),
    }
}

/// A special token as tokenizer_config.json stores it: a string or an AddedToken object.
fn token_content(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Object(o) => o.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message.clone()).with_source(Raised(message)))
}

/// Python's `datetime.now().strftime(format)` (local time), refusing directives chrono does not
/// know instead of printing garbage.
fn strftime_now(format: String) -> Result<String, Error> {
    use chrono::format::{Item, StrftimeItems};
    let items: Vec<Item<'_>> = StrftimeItems::new(&format).collect();
    if items.iter().any(|i| matches!(i, Item::Error)) {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: unsupported format {format:?}"),
        ));
    }
    let mut out = String::new();
    write!(
        out,
        "{}",
        chrono::Local::now().format_with_items(items.into_iter())
    )
    .map_err(|_| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: cannot format {format:?}"),
        )
    })?;
    Ok(out)
}

/// transformers' `tojson`: `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)` with those keyword arguments. Its text may be as long as the render's
/// remaining fuel pays for (64 bytes a fuel), no longer: a huge `indent` is an error, not an
/// allocation that aborts the process.
fn tojson(state: &State, value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let limit = state.fuel_levels().map_or(usize::MAX, |(_, remaining)| {
        usize::try_from(remaining.saturating_mul(64)).unwrap_or(usize::MAX)
    });
    let too_long = || {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("tojson: the text would be longer than the {limit} bytes the render has left"),
        )
    };
    let ensure_ascii: bool = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    let sort_keys: bool = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    let indent = match kwargs.get::<Option<Value>>("indent")? {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(match v.as_str() {
            Some(s) => s.to_string(),
            None => {
                let n = i64::try_from(v.clone()).map_err(|_| {
                    Error::new(
                        ErrorKind::InvalidOperation,
                        format!("tojson: indent must be an integer or a string, got {v}"),
                    )
                })?;
                let n = usize::try_from(n.max(0)).unwrap_or(usize::MAX);
                if n > limit {
                    return Err(too_long());
                }
                " ".repeat(n)
            }
        }),
    };
    let (item_sep, key_sep) = match kwargs.get::<Option<Value>>("separators")? {
        Some(v) if !v.is_none() => {
            let parts: Vec<String> = v
                .try_iter()
                .map_err(|_| separators_error(&v))?
                .map(|p| {
                    p.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| separators_error(&v))
                })
                .collect::<Result<_, _>>()?;
            let [item, key] = <[String; 2]>::try_from(parts).map_err(|_| separators_error(&v))?;
            (item, key)
        }
        // Python's defaults: ", " without indent, "," with (the newline follows).
        _ if indent.is_some() => (",".to_string(), ": ".to_string()),
        _ => (", ".to_string(), ": ".to_string()),
    };
    kwargs.assert_all_used()?;
    let value = if sort_keys {
        sorted(state, value)?
    } else {
        value
    };
    let mut buf = Bounded::new(limit);
    let formatter = PyJson {
        indent,
        item_sep,
        key_sep,
        ensure_ascii,
        depth: 0,
        has_value: false,
    };
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, formatter);
    value
        .serialize(&mut ser)
        .map_err(|e| match e.io_error_kind() {
            Some(std::io::ErrorKind::OutOfMemory) => too_long(),
            _ => Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")),
        })?;
    Ok(Value::from(
        String::from_utf8(buf.bytes).expect("serde_json writes UTF-8"),
    ))
}

/// Bytes written up to a limit; past it, writes fail (`OutOfMemory`) and it is `full`.
struct Bounded {
    bytes: Vec<u8>,
    limit: usize,
    full: bool,
}

impl Bounded {
    fn new(limit: usize) -> Self {
        Self {
            bytes: Vec::new(),
            limit,
            full: false,
        }
    }
}

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len().saturating_add(buf.len()) > self.limit {
            self.full = true;
            return Err(std::io::ErrorKind::OutOfMemory.into());
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn separators_error(v: &Value) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("tojson: separators must be a pair of strings, got {v}"),
    )
}

/// `sort_keys=True`: maps rebuilt in key order, recursively, each value visited paying a fuel
/// (a list holding itself twice, doubled n times, has 2^n of them).
fn sorted(state: &State, value: Value) -> Result<Value, Error> {
    state.consume_fuel(1)?;
    match value.kind() {
        ValueKind::Map => {
            let mut entries = BTreeMap::new();
            for key in value.try_iter()? {
                let item = value.get_item(&key)?;
                entries.insert(key.to_string(), sorted(state, item)?);
            }
            Ok(Value::from(entries))
        }
        ValueKind::Seq => Ok(Value::from(
            value
                .try_iter()?
                .map(|item| sorted(state, item))
                .collect::<Result<Vec<_>, _>>()?,
        )),
        _ => Ok(value),
    }
}

/// serde_json output spelled as Python's `json.dumps`: its separators, its indentation (empty
/// containers stay `[]`/`{}`), and `ensure_ascii`'s `\uXXXX` escapes. serde_json already escapes
/// control characters as Python does.
struct PyJson {
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    ensure_ascii: bool,
    depth: usize,
    has_value: bool,
}

impl PyJson {
    fn newline<W: ?Sized + std::io::Write>(&self, w: &mut W) -> std::io::Result<()> {
        if let Some(indent) = &self.indent {
            w.write_all(b"\n")?;
            for _ in 0..self.depth {
                w.write_all(indent.as_bytes())?;
            }
        }
        Ok(())
    }

    fn open<W: ?Sized + std::io::Write>(&mut self, w: &mut W, c: &[u8]) -> std::io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        w.write_all(c)
    }

    fn close<W: ?Sized + std::io::Write>(&mut self, w: &mut W, c: &[u8]) -> std::io::Result<()> {
        self.depth -= 1;
        if self.has_value {
            self.newline(w)?;
        }
        self.has_value = true;
        w.write_all(c)
    }

    fn item<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if !first {
            w.write_all(self.item_sep.as_bytes())?;
        }
        self.newline(w)
    }
}

impl serde_json::ser::Formatter for PyJson {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open(w, b"[")
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close(w, b"]")
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.item(w, first)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open(w, b"{")
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close(w, b"}")
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.item(w, first)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(self.key_sep.as_bytes())
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        if !self.ensure_ascii {
            return w.write_all(fragment.as_bytes());
        }
        for c in fragment.chars() {
            if c.is_ascii() {
                w.write_all(&[c as u8])?;
            } else {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    write!(w, "\\u{unit:04x}")?;
                }
            }
        }
        Ok(())
    }
}
