//! The checkpoint's tokenizer, used as transformers' fast tokenizer uses it.

use std::path::Path;

use serde_json::Value;
use tokenizers::Tokenizer;

use super::checkpoint::{read_json, CONFIG};
use super::CheckpointError;

/// A checkpoint's tokenizer (`tokenizer.json` through the `tokenizers` crate, as transformers'
/// fast tokenizers run it) with the end-of-sequence ids generation stops on.
#[derive(Clone)]
pub struct TextTokenizer {
    tokenizer: Tokenizer,
    eos_ids: Vec<u32>,
    clean_up_spaces: bool,
}

impl std::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextTokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("eos_ids", &self.eos_ids)
            .finish()
    }
}

impl TextTokenizer {
    /// Loads `tokenizer.json` from `dir`, with `tokenizer_config.json` (optional: its
    /// `clean_up_tokenization_spaces` and `eos_token`) and the EOS ids: `generation_config.json`'s
    /// `eos_token_id` (an id or a list), else `config.json`'s, else the id of
    /// `tokenizer_config.json`'s `eos_token`; none of them gives no EOS id.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        let dir = dir.as_ref();
        let path = dir.join("tokenizer.json");
        if !path.is_file() {
            return Err(CheckpointError::MissingFile {
                path,
                why: "the tokenizer is read from it".into(),
            });
        }
        let mut tokenizer = unpanicked(|| Tokenizer::from_file(&path))
            .and_then(|read| read.map_err(|e| e.to_string()))
            .map_err(|e| CheckpointError::unreadable(&path, format!("not a tokenizer: {e}")))?;
        // transformers' tokenizer(text) without padding/truncation arguments turns both off,
        // whatever tokenizer.json stored.
        tokenizer
            .with_truncation(None)
            .map_err(|e| CheckpointError::Tokenizer(e.to_string()))?;
        tokenizer.with_padding(None);
        // The tokenizers library checks some parts only when it first encodes (a post-processor
        // naming a special token the vocabulary lacks panics there): a text is encoded now, so
        // that such a file fails here, named, not at a request.
        unpanicked(|| tokenizer.encode("a", true))
            .and_then(|encoded| encoded.map(drop).map_err(|e| e.to_string()))
            .map_err(|e| {
                CheckpointError::unreadable(&path, format!("not a tokenizer: encoding fails: {e}"))
            })?;

        let tokenizer_config = optional_json(&dir.join("tokenizer_config.json"))?;
        let clean_up_spaces = tokenizer_config
            .as_ref()
            .and_then(|c| c.get("clean_up_tokenization_spaces"))
            .and_then(Value::as_bool)
            .unwrap_or(false);

        let mut eos_ids = None;
        for name in ["generation_config.json", CONFIG] {
            let file = dir.join(name);
            if let Some(value) = optional_json(&file)? {
                eos_ids = token_ids(&file, value.get("eos_token_id"))?;
                if eos_ids.is_some() {
                    break;
                }
            }
        }
        let eos_ids = match (eos_ids, tokenizer_config) {
            (Some(ids), _) => ids,
            (None, Some(config)) => match config.get("eos_token") {
                None | Some(Value::Null) => Vec::new(),
                Some(token) => {
                    let file = dir.join("tokenizer_config.json");
                    // A plain string, or an AddedToken object with its text in "content".
                    let text = token
                        .as_str()
                        .or_else(|| token.get("content").and_then(Value::as_str))
                        .ok_or_else(|| {
                            CheckpointError::unreadable(
                                &file,
                                format!("eos_token {token} is not a token"),
                            )
                        })?;
                    let id = tokenizer.token_to_id(text).ok_or_else(|| {
                        CheckpointError::Tokenizer(format!(
                            "eos_token {text:?} of {} is not in the vocabulary of {}",
                            file.display(),
                            path.display()
                        ))
                    })?;
                    vec![id]
                }
            },
            (None, None) => Vec::new(),
        };
        Ok(Self {
            tokenizer,
            eos_ids,
            clean_up_spaces,
        })
    }

    /// The ids of `text`, with the special tokens (BOS...) the tokenizer's post-processor adds, as
    /// transformers' `tokenizer(text)` returns them.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, CheckpointError> {
        self.encoded(text, true)
    }

    fn encoded(&self, text: &str, special: bool) -> Result<Vec<u32>, CheckpointError> {
        let encoding = unpanicked(|| self.tokenizer.encode(text, special))
            .and_then(|encoded| encoded.map_err(|e| e.to_string()))
            .map_err(|e| CheckpointError::Tokenizer(format!("encoding {text:?}: {e}")))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The ids of `text` without added special tokens, as transformers'
    /// `tokenizer(text, add_special_tokens=False)`: for text that holds them already (a rendered
    /// chat template).
    pub fn encode_plain(&self, text: &str) -> Result<Vec<u32>, CheckpointError> {
        self.encoded(text, false)
    }

    /// The text of `ids`, special tokens skipped, as transformers'
    /// `decode(ids, skip_special_tokens=True)` gives it (with its clean-up of spaces before
    /// punctuation when `tokenizer_config.json` asks for it).
    pub fn decode(&self, ids: &[u32]) -> Result<String, CheckpointError> {
        let text = unpanicked(|| self.tokenizer.decode(ids, true))
            .and_then(|decoded| decoded.map_err(|e| e.to_string()))
            .map_err(|e| CheckpointError::Tokenizer(format!("decoding {ids:?}: {e}")))?;
        Ok(if self.clean_up_spaces {
            clean_up_tokenization(&text)
        } else {
            text
        })
    }

    /// The ids that end a generated sequence (possibly none).
    pub fn eos_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    /// The number of tokens, added (special) tokens included, as transformers' `len(tokenizer)`.
    pub fn vocab_size(&self) -> usize {
        self.tokenizer.get_vocab_size(true)
    }
}

/// `work`'s result, or the message of its panic: the tokenizers library panics on some
/// malformed files (an `expect` while reading a decoder, a missing special token when
/// encoding), which is an error of the file here, not of the program.
fn unpanicked<T>(work: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).map_err(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("no message");
        format!("the tokenizers library panicked: {message}")
    })
}

/// transformers' `clean_up_tokenization`, the same replacements in the same order.
fn clean_up_tokenization(text: &str) -> String {
    [
        (" .", "."),
        (" ?", "?"),
        (" !", "!"),
        (" ,", ","),
        (" ' ", "'"),
        (" n't", "n't"),
        (" 'm", "'m"),
        (" 's", "'s"),
        (" 've", "'ve"),
        (" 're", "'re"),
    ]
    .iter()
    .fold(text.to_string(), |text, (from, to)| text.replace(from, to))
}

fn optional_json(path: &Path) -> Result<Option<Value>, CheckpointError> {
    if path.is_file() {
        read_json(path, "").map(Some)
    } else {
        Ok(None)
    }
}

/// An `eos_token_id` entry: an id, a list of ids, or absent/null.
fn token_ids(file: &Path, value: Option<&Value>) -> Result<Option<Vec<u32>>, CheckpointError> {
    let id = |v: &Value| {
        v.as_u64()
            .and_then(|id| u32::try_from(id).ok())
            .ok_or_else(|| {
                CheckpointError::unreadable(file, format!("eos_token_id {v} is not a token id"))
            })
    };
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(ids)) => ids.iter().map(id).collect::<Result<_, _>>().map(Some),
        Some(v) => Ok(Some(vec![id(v)?])),
    }
}
