//! Text in and out: the served model's tokenizer, and the incremental detokenizer that turns a
//! request's tokens into text deltas as they arrive, ending the text at a `stop` string.

use crate::hf::TextTokenizer;

/// How text becomes tokens and back.
#[derive(Debug, Clone)]
pub enum Tokenizer {
    /// The built-in model's: one token per UTF-8 byte.
    Bytes,
    /// A checkpoint's `tokenizer.json`.
    Checkpoint(Box<TextTokenizer>),
}

impl Tokenizer {
    /// The ids of `text` (with the special tokens the checkpoint's tokenizer adds).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        match self {
            Tokenizer::Bytes => Ok(text.bytes().map(u32::from).collect()),
            Tokenizer::Checkpoint(t) => t.encode(text).map_err(|e| e.to_string()),
        }
    }

    /// The ids of text a chat template rendered, which holds its special tokens already (none
    /// is added, as vLLM encodes it).
    pub fn encode_rendered(&self, text: &str) -> Result<Vec<u32>, String> {
        match self {
            Tokenizer::Bytes => self.encode(text),
            Tokenizer::Checkpoint(t) => t.encode_plain(text).map_err(|e| e.to_string()),
        }
    }

    /// The text of `ids`, special tokens skipped (an incomplete UTF-8 sequence at the end shows
    /// as U+FFFD).
    pub fn decode(&self, ids: &[u32]) -> String {
        match self {
            Tokenizer::Bytes => {
                let bytes: Vec<u8> = ids.iter().map(|&t| t as u8).collect();
                String::from_utf8_lossy(&bytes).into_owned()
            }
            // Ids come from the model's vocabulary, which the tokenizer decodes.
            Tokenizer::Checkpoint(t) => t.decode(ids).unwrap_or_default(),
        }
    }

    /// The ids generation stops at (the checkpoint's EOS ids; none for bytes).
    pub fn eos_ids(&self) -> &[u32] {
        match self {
            Tokenizer::Bytes => &[],
            Tokenizer::Checkpoint(t) => t.eos_ids(),
        }
    }
}

/// A request's text so far: takes its tokens one by one and gives the text that is final.
///
/// Text is decoded from all the tokens each time (a token's text can depend on its
/// neighbours'), and held back while it ends in an incomplete UTF-8 sequence or might be the
/// start of a stop string (as vLLM holds back the longest stop string's length less one).
#[derive(Debug)]
pub struct Detokenizer {
    ids: Vec<u32>,
    stops: Vec<String>,
    /// Bytes of the text already given out.
    sent: usize,
}

/// What one token added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delta {
    /// Text now final.
    pub text: String,
    /// The text reached a stop string (not included): the request ends here.
    pub stopped: bool,
}

impl Detokenizer {
    /// No token yet; the text ends at the first of `stops`.
    pub fn new(stops: Vec<String>) -> Self {
        Self {
            ids: Vec::new(),
            stops,
            sent: 0,
        }
    }

    /// Tokens taken so far.
    pub fn tokens(&self) -> usize {
        self.ids.len()
    }

    /// Takes one generated token.
    pub fn push(&mut self, tokenizer: &Tokenizer, token: u32) -> Delta {
        self.ids.push(token);
        let text = tokenizer.decode(&self.ids);
        let earliest = self
            .stops
            .iter()
            .filter_map(|s| text.find(s.as_str()))
            .min();
        if let Some(end) = earliest {
            return self.take(&text, end, true);
        }
        let hold = self
            .stops
            .iter()
            .map(|s| s.len().saturating_sub(1))
            .max()
            .unwrap_or(0);
        let mut end = text.len().saturating_sub(hold);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        if text[..end].ends_with('\u{FFFD}') {
            end -= '\u{FFFD}'.len_utf8();
        }
        self.take(&text, end, false)
    }

    /// The rest of the text when the generation ended (held-back text included).
    pub fn finish(&mut self, tokenizer: &Tokenizer) -> String {
        let text = tokenizer.decode(&self.ids);
        self.take(&text, text.len(), false).text
    }

    fn take(&mut self, text: &str, end: usize, stopped: bool) -> Delta {
        // A decoder whose text of more tokens does not extend the text already sent (none of
        // the byte-level ones) gets nothing more until it does.
        let text = match text.get(self.sent..end) {
            Some(t) if end >= self.sent => t.to_string(),
            _ => String::new(),
        };
        self.sent = self.sent.max(end);
        Delta { text, stopped }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], text: &str) -> (Vec<String>, bool, String) {
        let mut d = Detokenizer::new(stops.iter().map(|s| s.to_string()).collect());
        let mut deltas = Vec::new();
        for b in text.bytes() {
            let delta = d.push(&Tokenizer::Bytes, b as u32);
            deltas.push(delta.text);
            if delta.stopped {
                return (deltas, true, String::new());
            }
        }
        let rest = d.finish(&Tokenizer::Bytes);
        (deltas, false, rest)
    }

    #[test]
    fn the_text_ends_before_the_first_stop_string() {
        let (deltas, stopped, _) = run(&["lo w", "xyz"], "hello world");
        assert!(stopped);
        assert_eq!(deltas.concat(), "hel");
        // "l" could start "lo w": held back until the stop string shows.
        assert_eq!(deltas[2], "");
    }

    #[test]
    fn held_back_text_comes_out_at_the_end() {
        let (deltas, stopped, rest) = run(&["abc"], "xyab");
        assert!(!stopped);
        assert_eq!(deltas.concat() + &rest, "xyab");
        assert_eq!(rest, "ab");
    }

    #[test]
    fn an_incomplete_character_is_held_back() {
        let (deltas, _, rest) = run(&[], "aé");
        assert_eq!(deltas, ["a", "", "é"]);
        assert_eq!(rest, "");
    }
}
