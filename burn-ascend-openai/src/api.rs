//! OpenAI's request, response, chunk and error objects, and the checks of a request's fields
//! (each error names its field, as OpenAI's `param`).

use std::collections::BTreeSet;
use std::sync::Mutex;

use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::chat::ChatMessage;
use burn_ascend_llm::engine::serve::{FinishReason, ServeError};

/// An error as OpenAI returns it: a status and `{"error": {...}}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The error object.
    pub body: ErrorObject,
    /// Seconds to wait before trying again (429 and 503).
    pub retry_after: Option<u64>,
}

/// OpenAI's error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// What went wrong.
    pub message: String,
    /// Its kind: `invalid_request_error`, `server_error`...
    #[serde(rename = "type")]
    pub kind: String,
    /// The request field at fault.
    pub param: Option<String>,
    /// A machine-readable code.
    pub code: Option<String>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &str, message: String) -> Self {
        Self {
            status,
            body: ErrorObject {
                message,
                kind: kind.into(),
                param: None,
                code: None,
            },
            retry_after: None,
        }
    }

    /// 400: field `param` is invalid.
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        let mut e = Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            message.into(),
        );
        e.body.param = Some(param.into());
        e
    }

    /// 400: field `param` asks for what this server does not do.
    pub fn unsupported(param: &str, what: &str) -> Self {
        Self::invalid(
            param,
            format!("{param}: {what} is not supported by this server"),
        )
    }

    /// 404: no such model.
    pub fn unknown_model(model: &str, served: &str) -> Self {
        let mut e = Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("The model `{model}` does not exist: this server serves `{served}`."),
        );
        e.body.param = Some("model".into());
        e.body.code = Some("model_not_found".into());
        e
    }

    /// 500: the server failed.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            message.into(),
        )
    }

    /// 503: the server is shutting down.
    pub fn shutting_down() -> Self {
        let mut e = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "the server is shutting down and admits no new request".into(),
        );
        e.retry_after = Some(1);
        e
    }

    /// 503: the engine can no longer serve (why); the server is about to exit and be restarted.
    pub fn unavailable(why: &str) -> Self {
        let mut e = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            format!("the server cannot serve any more and will restart: {why}"),
        );
        e.retry_after = Some(1);
        e
    }

    /// 413: the body is `size` bytes (when its Content-Length says so), more than `limit`.
    pub fn too_large(size: Option<u64>, limit: usize) -> Self {
        let size = size.map_or_else(String::new, |s| format!("{s} bytes, "));
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!("the request body is {size}more than the limit of {limit} bytes"),
        )
    }

    /// 408: the body did not all come within `limit`.
    pub fn body_timeout(limit: std::time::Duration) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            format!("the request body did not all arrive within {limit:?}"),
        )
    }

    /// A request the engine refused or failed (`prompt` and `max_tokens` as asked, for the
    /// length limits).
    pub fn engine(error: ServeError) -> Self {
        match error {
            ServeError::EmptyPrompt => Self::invalid("prompt", error.to_string()),
            ServeError::NoNewTokens => Self::invalid("max_tokens", error.to_string()),
            ServeError::TooLong { prompt, new, max } => too_long(prompt, new, max),
            ServeError::NeverFits { .. } => Self::invalid("max_tokens", error.to_string()),
            ServeError::BadToken { .. } => Self::invalid("prompt", error.to_string()),
            ServeError::Temperature(_) => Self::invalid("temperature", error.to_string()),
            ServeError::TopK => Self::invalid("top_k", error.to_string()),
            ServeError::TopP(_) => Self::invalid("top_p", error.to_string()),
            ServeError::MinP(_) => Self::invalid("min_p", error.to_string()),
            ServeError::Overloaded { .. } => {
                let mut e = Self::new(StatusCode::TOO_MANY_REQUESTS, "requests", error.to_string());
                e.body.code = Some("rate_limit_exceeded".into());
                e.retry_after = Some(1);
                e
            }
            ServeError::Device(_) | ServeError::Step(_) | ServeError::Unrecoverable(_) => {
                Self::internal(error.to_string())
            }
        }
    }
}

/// 400: `prompt` tokens and `new` to generate exceed the `max` of the model (OpenAI's words).
pub fn too_long(prompt: usize, new: usize, max: usize) -> ApiError {
    let mut e = ApiError::invalid(
        "max_tokens",
        format!(
            "This model's maximum context length is {max} tokens. However, you requested {} \
             tokens ({prompt} in the prompt, {new} for the completion). Please reduce the \
             length of the prompt or of the completion (max_tokens).",
            prompt + new
        ),
    );
    e.body.code = Some("context_length_exceeded".into());
    e
}

/// 400: a prompt (from field `param`) of `prompt` tokens, more than the server's `limit`.
pub fn prompt_too_long(param: &str, prompt: usize, limit: usize) -> ApiError {
    let mut e = ApiError::invalid(
        param,
        format!(
            "the prompt has {prompt} tokens, more than this server's limit of {limit} prompt \
             tokens"
        ),
    );
    e.body.code = Some("context_length_exceeded".into());
    e
}

/// `stop`: one string or several.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    /// One.
    One(String),
    /// Several.
    Many(Vec<String>),
}

/// `prompt`: text or token ids, or a batch of either.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    /// Text.
    Text(String),
    /// Token ids.
    Tokens(Vec<u32>),
    /// Several texts.
    Texts(Vec<String>),
    /// Several lists of token ids.
    Batches(Vec<Vec<u32>>),
}

/// `stream_options` (other options, such as vLLM's `continuous_usage_stats`, are ignored).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    /// Send a last chunk with the usage.
    #[serde(default)]
    pub include_usage: bool,
}

/// The sampling fields both endpoints share.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Common {
    /// The model's name (`/v1/models`).
    pub model: String,
    /// Tokens to generate at most.
    pub max_tokens: Option<u64>,
    /// 0 decodes greedily (the default is 1).
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    pub top_p: Option<f64>,
    /// Candidates kept (vLLM's extension; -1 or 0: all).
    pub top_k: Option<i64>,
    /// Candidates at least this fraction of the likeliest's probability (vLLM's extension; 0:
    /// all).
    pub min_p: Option<f64>,
    /// Seed of the draws.
    pub seed: Option<u64>,
    /// Strings that end the text (not included).
    pub stop: Option<Stop>,
    /// Token ids that end the generation (vLLM's extension).
    pub stop_token_ids: Option<Vec<u32>>,
    /// Stream server-sent events.
    pub stream: Option<bool>,
    /// Stream options.
    pub stream_options: Option<StreamOptions>,
    /// Choices per prompt (1 to [`MAX_CHOICES`]).
    pub n: Option<u64>,
    /// Refused unless 0.
    pub presence_penalty: Option<f64>,
    /// Refused unless 0.
    pub frequency_penalty: Option<f64>,
    /// Refused unless empty.
    pub logit_bias: Option<serde_json::Map<String, Value>>,
    /// Accepted, unused.
    pub user: Option<String>,
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    /// The prompt.
    pub prompt: Prompt,
    /// Refused unless it is `n` (choosing the best of more needs log-probabilities).
    pub best_of: Option<u64>,
    /// Refused.
    pub logprobs: Option<Value>,
    /// Refused when true.
    pub echo: Option<bool>,
    /// Refused.
    pub suffix: Option<String>,
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    /// The conversation.
    pub messages: Vec<ChatMessage>,
    /// OpenAI's newer name of `max_tokens`.
    pub max_completion_tokens: Option<u64>,
    /// Refused when true.
    pub logprobs: Option<bool>,
    /// Refused.
    pub top_logprobs: Option<u64>,
    /// Refused.
    pub tools: Option<Value>,
    /// Refused.
    pub tool_choice: Option<Value>,
    /// Refused.
    pub functions: Option<Value>,
    /// Refused.
    pub function_call: Option<Value>,
    /// Refused unless `{"type": "text"}`.
    pub response_format: Option<Value>,
    /// Variables for the chat template (vLLM's extension, as transformers'
    /// `apply_chat_template(**kwargs)`): Qwen3's `enable_thinking`, say.
    pub chat_template_kwargs: Option<serde_json::Map<String, Value>>,
}

/// The fields of [`Common`].
const COMMON_FIELDS: [&str; 16] = [
    "model",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "stop_token_ids",
    "stream",
    "stream_options",
    "n",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "user",
];

/// Parses a JSON body into the endpoint's own fields and the shared ones, naming the field at
/// fault. Fields the server does not know (those OpenAI's SDKs and frameworks send: `store`,
/// `metadata`, `parallel_tool_calls`, `service_tier`...) are ignored, each name said once in
/// the log, as vLLM does.
pub fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<(T, Common), ApiError> {
    let fields: serde_json::Map<String, Value> = serde_json::from_slice(body).map_err(|e| {
        let mut error = ApiError::invalid("", format!("the body is not a JSON object: {e}"));
        error.body.param = None;
        error
    })?;
    let (common, own): (serde_json::Map<_, _>, serde_json::Map<_, _>) = fields
        .into_iter()
        .partition(|(k, _)| COMMON_FIELDS.contains(&k.as_str()));
    let mut ignored = Vec::new();
    let own = typed(own, &mut ignored)?;
    let common = typed(common, &mut ignored)?;
    warn_once(&ignored);
    Ok((own, common))
}

/// Says, once per field name for the process's life, that a request's field was ignored.
fn warn_once(fields: &[String]) {
    static SAID: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let mut said = SAID.lock().unwrap_or_else(|p| p.into_inner());
    for field in fields {
        if said.insert(field.clone()) {
            eprintln!(
                "burn-ascend-openai: the request field `{field}` is not supported and is ignored \
                 (said once)"
            );
        }
    }
}

/// The typed fields of `fields`, the names of those the type does not read added to `ignored`
/// (nested ones by their path: `stream_options.x`); a type error names its field.
fn typed<T: serde::de::DeserializeOwned>(
    fields: serde_json::Map<String, Value>,
    ignored: &mut Vec<String>,
) -> Result<T, ApiError> {
    let value = Value::Object(fields);
    let mut note = |path: serde_ignored::Path| ignored.push(path.to_string());
    let unread = serde_ignored::Deserializer::new(&value, &mut note);
    serde_path_to_error::deserialize(unread).map_err(|e| {
        let path = e.path().to_string();
        let message = format!("invalid request body: {}", e.into_inner());
        let param = match missing_field(&message) {
            Some(field) => Some(field),
            None if path != "." => Some(path),
            None => None,
        };
        let mut error = ApiError::invalid("", message);
        error.body.param = param;
        error
    })
}

/// The field a "missing field `x`" message names.
fn missing_field(message: &str) -> Option<String> {
    let rest = message.split("missing field `").nth(1)?;
    Some(rest.split('`').next()?.to_string())
}

/// The sampling a request gets for the fields it leaves out: the checkpoint's
/// `generation_config.json` (as vLLM's default `--generation-config auto` reads it), else
/// OpenAI's defaults (temperature 1, top_p 1, every token).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SamplingDefaults {
    /// `temperature`.
    pub temperature: Option<f64>,
    /// `top_p`.
    pub top_p: Option<f64>,
    /// `top_k`.
    pub top_k: Option<i64>,
    /// `min_p`.
    pub min_p: Option<f64>,
}

impl SamplingDefaults {
    /// The defaults of `generation_config.json` in `dir` (none when the file is absent);
    /// a field of the wrong type is an error naming the file and the field.
    pub fn from_dir(dir: &std::path::Path) -> Result<Self, String> {
        let path = dir.join("generation_config.json");
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let config: Value = serde_json::from_str(&text)
            .map_err(|e| format!("{} is not JSON: {e}", path.display()))?;
        let field = |name: &str| -> Result<Option<f64>, String> {
            match config.get(name) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v
                    .as_f64()
                    .map(Some)
                    .ok_or_else(|| format!("{}: {name} is {v}, not a number", path.display())),
            }
        };
        Ok(Self {
            temperature: field("temperature")?,
            top_p: field("top_p")?,
            top_k: field("top_k")?.map(|k| k as i64),
            min_p: field("min_p")?,
        })
    }

    /// Whether any is set.
    pub fn is_set(&self) -> bool {
        *self != Self::default()
    }
}

impl std::fmt::Display for SamplingDefaults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = [
            self.temperature.map(|t| format!("temperature {t}")),
            self.top_p.map(|p| format!("top_p {p}")),
            self.top_k.map(|k| format!("top_k {k}")),
            self.min_p.map(|p| format!("min_p {p}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        f.write_str(&parts.join(", "))
    }
}

/// The most choices a request may ask for (`n`), as OpenAI's API.
pub const MAX_CHOICES: u64 = 128;

/// The checked sampling fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    /// Choices per prompt.
    pub n: usize,
    /// Tokens to generate at most, if given.
    pub max_tokens: Option<usize>,
    /// Temperature (0: greedy).
    pub temperature: f64,
    /// Nucleus mass.
    pub top_p: f64,
    /// Candidates kept (`None`: all).
    pub top_k: Option<usize>,
    /// Least probability relative to the likeliest's (0: all).
    pub min_p: f64,
    /// Seed.
    pub seed: Option<u64>,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Stop token ids.
    pub stop_token_ids: Vec<u32>,
    /// Stream.
    pub stream: bool,
    /// A last chunk with the usage.
    pub include_usage: bool,
}

/// OpenAI's limit on stop strings.
const MAX_STOPS: usize = 4;

impl Common {
    /// Checks the shared fields; `served` is the model's name, `defaults` the sampling of the
    /// fields left out.
    pub fn check(&self, served: &str, defaults: &SamplingDefaults) -> Result<Checked, ApiError> {
        if self.model != served {
            return Err(ApiError::unknown_model(&self.model, served));
        }
        let n = match self.n.unwrap_or(1) {
            n @ 1..=MAX_CHOICES => n as usize,
            n => {
                return Err(ApiError::invalid(
                    "n",
                    format!("n is {n}: from 1 to {MAX_CHOICES} choices"),
                ))
            }
        };
        if self.presence_penalty.is_some_and(|p| p != 0.0) {
            return Err(ApiError::unsupported(
                "presence_penalty",
                "a presence penalty",
            ));
        }
        if self.frequency_penalty.is_some_and(|p| p != 0.0) {
            return Err(ApiError::unsupported(
                "frequency_penalty",
                "a frequency penalty",
            ));
        }
        if self.logit_bias.as_ref().is_some_and(|b| !b.is_empty()) {
            return Err(ApiError::unsupported("logit_bias", "a logit bias"));
        }
        let max_tokens = match self.max_tokens {
            Some(0) => {
                return Err(ApiError::invalid(
                    "max_tokens",
                    "max_tokens is 0: at least one token is generated",
                ))
            }
            m => m.map(|m| usize::try_from(m).unwrap_or(usize::MAX)),
        };
        let temperature = self.temperature.or(defaults.temperature).unwrap_or(1.0);
        if !(0.0..=2.0).contains(&temperature) {
            return Err(ApiError::invalid(
                "temperature",
                format!("temperature {temperature} is not in [0, 2]"),
            ));
        }
        let top_p = self.top_p.or(defaults.top_p).unwrap_or(1.0);
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(ApiError::invalid(
                "top_p",
                format!("top_p {top_p} is not in (0, 1]"),
            ));
        }
        let min_p = self.min_p.or(defaults.min_p).unwrap_or(0.0);
        if !(0.0..=1.0).contains(&min_p) {
            return Err(ApiError::invalid(
                "min_p",
                format!("min_p {min_p} is not in [0, 1]"),
            ));
        }
        let top_k = match self.top_k.or(defaults.top_k) {
            None | Some(-1) | Some(0) => None,
            Some(k) if k > 0 => Some(usize::try_from(k).unwrap_or(usize::MAX)),
            Some(k) => {
                return Err(ApiError::invalid(
                    "top_k",
                    format!("top_k {k} is not -1 or 0 (all tokens) or a positive count"),
                ))
            }
        };
        let stop = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };
        if stop.len() > MAX_STOPS {
            return Err(ApiError::invalid(
                "stop",
                format!(
                    "{} stop strings, at most {MAX_STOPS} are accepted",
                    stop.len()
                ),
            ));
        }
        if stop.iter().any(String::is_empty) {
            return Err(ApiError::invalid("stop", "a stop string is empty"));
        }
        let stream = self.stream.unwrap_or(false);
        if self.stream_options.is_some() && !stream {
            return Err(ApiError::invalid(
                "stream_options",
                "stream_options is only allowed with stream: true",
            ));
        }
        Ok(Checked {
            n,
            max_tokens,
            temperature,
            top_p,
            top_k,
            min_p,
            seed: self.seed,
            stop,
            stop_token_ids: self.stop_token_ids.clone().unwrap_or_default(),
            stream,
            include_usage: self
                .stream_options
                .as_ref()
                .is_some_and(|o| o.include_usage),
        })
    }
}

impl CompletionRequest {
    /// Refuses the options this server does not implement.
    pub fn check_unsupported(&self, n: usize) -> Result<(), ApiError> {
        if self.best_of.is_some_and(|b| b != n as u64) {
            return Err(ApiError::unsupported(
                "best_of",
                "best_of other than n (ranking choices by log-probability)",
            ));
        }
        if self.logprobs.as_ref().is_some_and(|l| !l.is_null()) {
            return Err(ApiError::unsupported(
                "logprobs",
                "returning log-probabilities",
            ));
        }
        if self.echo == Some(true) {
            return Err(ApiError::unsupported("echo", "echoing the prompt"));
        }
        if self.suffix.is_some() {
            return Err(ApiError::unsupported("suffix", "a suffix (insertion)"));
        }
        Ok(())
    }
}

impl ChatRequest {
    /// Refuses the options this server does not implement.
    pub fn check_unsupported(&self) -> Result<(), ApiError> {
        if self.logprobs == Some(true) || self.top_logprobs.is_some() {
            return Err(ApiError::unsupported(
                "logprobs",
                "returning log-probabilities",
            ));
        }
        for (name, value) in [
            ("tools", &self.tools),
            ("tool_choice", &self.tool_choice),
            ("functions", &self.functions),
            ("function_call", &self.function_call),
        ] {
            if value.as_ref().is_some_and(|v| !v.is_null()) {
                return Err(ApiError::unsupported(name, "tool and function calling"));
            }
        }
        if let Some(format) = &self.response_format {
            if format.get("type").and_then(Value::as_str) != Some("text") {
                return Err(ApiError::unsupported(
                    "response_format",
                    "a response format other than text",
                ));
            }
        }
        if self.messages.is_empty() {
            return Err(ApiError::invalid("messages", "messages is empty"));
        }
        Ok(())
    }
}

/// `usage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens of the prompt.
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// Both.
    pub total_tokens: usize,
}

impl Usage {
    /// The usage of a request.
    pub fn new(prompt_tokens: usize, completion_tokens: usize) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
        }
    }
}

/// OpenAI's `finish_reason` of an engine's [`FinishReason`].
pub fn finish_reason(finish: FinishReason) -> &'static str {
    match finish {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
    }
}

/// One entry of `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCard {
    /// Its name.
    pub id: String,
    /// `model`.
    pub object: String,
    /// When the server started (Unix seconds).
    pub created: u64,
    /// Who serves it.
    pub owned_by: String,
    /// The longest sequence a request may reach (vLLM's field).
    pub max_model_len: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn common(body: Value) -> Common {
        let mut body = body;
        body["model"] = "m".into();
        serde_json::from_value(body).unwrap()
    }

    #[test]
    fn generation_config_sampling_fills_the_fields_a_request_leaves_out() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            SamplingDefaults::from_dir(dir.path()).unwrap(),
            SamplingDefaults::default(),
            "no generation_config.json"
        );
        let file = dir.path().join("generation_config.json");
        std::fs::write(
            &file,
            r#"{"do_sample": true, "temperature": 0.6, "top_p": 0.95, "top_k": 20}"#,
        )
        .unwrap();
        let defaults = SamplingDefaults::from_dir(dir.path()).unwrap();
        assert_eq!(
            defaults.to_string(),
            "temperature 0.6, top_p 0.95, top_k 20"
        );
        let left_out = common(json_object("{}")).check("m", &defaults).unwrap();
        assert_eq!(
            (left_out.temperature, left_out.top_p, left_out.top_k),
            (0.6, 0.95, Some(20))
        );
        // What the request says wins; with no defaults, OpenAI's.
        let given = common(json_object(r#"{"temperature": 0, "top_k": -1}"#))
            .check("m", &defaults)
            .unwrap();
        assert_eq!(
            (given.temperature, given.top_p, given.top_k),
            (0.0, 0.95, None)
        );
        let plain = common(json_object("{}"))
            .check("m", &SamplingDefaults::default())
            .unwrap();
        assert_eq!(
            (plain.temperature, plain.top_p, plain.top_k),
            (1.0, 1.0, None)
        );
        std::fs::write(&file, r#"{"temperature": "hot"}"#).unwrap();
        let e = SamplingDefaults::from_dir(dir.path()).unwrap_err();
        assert!(
            e.contains("generation_config.json: temperature is \"hot\""),
            "{e}"
        );
    }

    fn json_object(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }
}
