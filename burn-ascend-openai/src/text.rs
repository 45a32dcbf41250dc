//! Text in and out: the served model's tokenizer, and the incremental detokenizer that turns a
//! request's tokens into text deltas as they arrive, ending the text at a `stop` string.

use burn_ascend_llm::hf::TextTokenizer;

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
/// Each token decodes only a window of the latest tokens, as vLLM's `detokenize_incrementally`
/// does (decoding all of them at each token is quadratic in the length): the tokens from
/// `prefix` to `read` are context (a token's text can depend on its neighbours'), those after
/// `read` are new. Their text is committed once it does not end in an incomplete UTF-8 sequence
/// (U+FFFD). The text given out is the committed text followed by the pending one, held back
/// while it ends in an incomplete sequence or might be the start of a stop string (as vLLM holds
/// back the longest stop string's length less one). For a byte-level decoder this is the text of
/// all the tokens at each token.
#[derive(Debug)]
pub struct Detokenizer {
    ids: Vec<u32>,
    stops: Vec<String>,
    /// The text of `ids[..read]`, final.
    text: String,
    /// The text of `ids[read..]` decoded after `ids[prefix..read]`: not final (it ends in an
    /// incomplete sequence), or empty.
    pending: String,
    /// Where the window decoded at each token starts (vLLM's prefix offset).
    prefix: usize,
    /// The tokens whose text is in `text` (vLLM's read offset).
    read: usize,
    /// Bytes of `text` + `pending` already given out.
    sent: usize,
    /// The prompt's last tokens at the start of `ids`, decoded before the first generated one
    /// and never given out.
    primed: usize,
}

/// Prompt tokens a detokenizer decodes before the first generated one (vLLM's
/// `INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET`).
const PRIMING_TOKENS: usize = 5;

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
            text: String::new(),
            pending: String::new(),
            prefix: 0,
            read: 0,
            sent: 0,
            primed: 0,
        }
    }

    /// [`Detokenizer::new`] continuing `prompt`: its last tokens are decoded before the first
    /// generated one, as vLLM does, so that the first token's text is what it adds after them
    /// (a SentencePiece decoder drops the space of a token that starts the text it decodes:
    /// `"Paris"` where the continuation is `" Paris"`).
    pub fn after(prompt: &[u32], stops: Vec<String>) -> Self {
        let tail = &prompt[prompt.len().saturating_sub(PRIMING_TOKENS)..];
        Self {
            ids: tail.to_vec(),
            read: tail.len(),
            primed: tail.len(),
            ..Self::new(stops)
        }
    }

    /// Generated tokens taken so far.
    pub fn tokens(&self) -> usize {
        self.ids.len() - self.primed
    }

    /// Takes one generated token.
    pub fn push(&mut self, tokenizer: &Tokenizer, token: u32) -> Delta {
        self.ids.push(token);
        let committed = self.text.len();
        let context = tokenizer.decode(&self.ids[self.prefix..self.read]);
        let window = tokenizer.decode(&self.ids[self.prefix..]);
        // A window no longer than its context (special tokens skipped) adds nothing yet.
        self.pending = match window.get(context.len()..) {
            Some(new) if window.len() > context.len() => new.to_string(),
            _ => String::new(),
        };
        if !self.pending.is_empty() && !self.pending.ends_with('\u{FFFD}') {
            self.text.push_str(&self.pending);
            self.pending.clear();
            self.prefix = self.read;
            self.read = self.ids.len();
        }
        let hold = self
            .stops
            .iter()
            .map(|s| s.len().saturating_sub(1))
            .max()
            .unwrap_or(0);
        // A stop string ending before `committed` would have ended the request at an earlier
        // token: only the text from `hold` bytes before it can hold the first one.
        let (base, tail) = self.tail(committed.saturating_sub(hold));
        let earliest = self
            .stops
            .iter()
            .filter_map(|s| tail.find(s.as_str()))
            .min();
        if let Some(end) = earliest {
            return self.take(&tail, base, base + end, true);
        }
        let mut end = (base + tail.len()).saturating_sub(hold).max(base) - base;
        while !tail.is_char_boundary(end) {
            end -= 1;
        }
        if tail[..end].ends_with('\u{FFFD}') {
            end -= '\u{FFFD}'.len_utf8();
        }
        self.take(&tail, base, base + end, false)
    }

    /// The rest of the text when the generation ended (held-back text included).
    pub fn finish(&mut self) -> String {
        let (base, tail) = self.tail(self.sent);
        self.take(&tail, base, base + tail.len(), false).text
    }

    /// The text from the last character boundary at or before `from` (and before the text not
    /// given out yet) to the end, with the byte offset it starts at.
    fn tail(&self, from: usize) -> (usize, String) {
        let mut base = from.min(self.sent).min(self.text.len());
        while !self.text.is_char_boundary(base) {
            base -= 1;
        }
        (base, [&self.text[base..], self.pending.as_str()].concat())
    }

    /// Gives out `tail` (which starts at byte `base` of the text) up to byte `end` of the text.
    fn take(&mut self, tail: &str, base: usize, end: usize, stopped: bool) -> Delta {
        // A decoder whose text of more tokens does not extend the text already sent (none of
        // the byte-level ones) gets nothing more until it does.
        let text = match tail.get(self.sent - base..end.max(base) - base) {
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
        let rest = d.finish();
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

    /// The fixture's byte-level BPE (300 tokens: most characters beyond ASCII span tokens).
    fn fixture_tokenizer() -> Tokenizer {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/hf/qwen3_moe"
        );
        Tokenizer::Checkpoint(Box::new(TextTokenizer::from_dir(dir).unwrap()))
    }

    /// A generated token's text is what it adds after the prompt: the leading space of a
    /// SentencePiece word is kept. The tokenizer is Llama's and Mixtral's kind (Metaspace
    /// pieces, a decoder that strips the space a decoded text starts with); transformers decodes
    /// `prompt + generated` and takes what follows the prompt's text.
    #[test]
    fn the_first_token_keeps_what_it_adds_after_the_prompt() {
        let dir = tempfile::tempdir().unwrap();
        let words = [
            "<unk>",
            "▁The",
            "▁lighthouse",
            "▁keeper",
            "▁rose",
            "▁before",
            "▁tide",
        ];
        let vocab: serde_json::Map<String, serde_json::Value> = words
            .iter()
            .enumerate()
            .map(|(i, w)| (w.to_string(), i.into()))
            .collect();
        let tokenizer_json = serde_json::json!({
            "version": "1.0",
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
            "pre_tokenizer": {"type": "Metaspace", "replacement": "▁",
                              "prepend_scheme": "first", "split": true},
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                {"type": "Fuse"},
                {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
            "added_tokens": [], "normalizer": null, "post_processor": null,
            "truncation": null, "padding": null,
        });
        std::fs::write(
            dir.path().join("tokenizer.json"),
            tokenizer_json.to_string(),
        )
        .unwrap();
        let text = TextTokenizer::from_dir(dir.path()).unwrap();
        let prompt = text.encode("The lighthouse keeper").unwrap();
        let whole = text
            .encode("The lighthouse keeper rose before The tide")
            .unwrap();
        assert_eq!(
            whole[..prompt.len()],
            prompt[..],
            "the prompt's tokens start the text"
        );
        let generated = &whole[prompt.len()..];
        let tokenizer = Tokenizer::Checkpoint(Box::new(text));
        let mut primed = Detokenizer::after(&prompt, Vec::new());
        let mut plain = Detokenizer::new(Vec::new());
        let (mut got, mut unprimed) = (String::new(), String::new());
        for &id in generated {
            got += &primed.push(&tokenizer, id).text;
            unprimed += &plain.push(&tokenizer, id).text;
        }
        got += &primed.finish();
        unprimed += &plain.finish();
        assert_eq!(got, " rose before The tide");
        assert_eq!(
            unprimed, "rose before The tide",
            "what an unprimed decoder loses"
        );
        assert_eq!(primed.tokens(), generated.len());
    }

    /// Pushes `ids` one by one and checks, at each token, that the text given out is the text
    /// of all the tokens so far decoded at once, less an incomplete character at its end, and
    /// that each token decoded at most `max_window` tokens.
    fn check_against_whole_decoding(tokenizer: &Tokenizer, ids: &[u32], max_window: usize) {
        let mut d = Detokenizer::new(Vec::new());
        let mut out = String::new();
        for (k, &id) in ids.iter().enumerate() {
            assert!(d.ids.len() - d.prefix < max_window, "window at token {k}");
            let delta = d.push(tokenizer, id);
            assert!(!delta.stopped);
            out.push_str(&delta.text);
            let whole = tokenizer.decode(&ids[..=k]);
            let expected = whole.strip_suffix('\u{FFFD}').unwrap_or(&whole);
            assert_eq!(out, expected, "after token {k}");
        }
        out.push_str(&d.finish());
        assert_eq!(out, tokenizer.decode(ids));
    }

    fn long_text() -> String {
        "Grüße aus Köln, 東京と北京 — naïve café 🦀🚀, ½ ∑ ∞; plain ASCII too. ".repeat(12)
    }

    #[test]
    fn the_window_gives_the_text_of_all_the_tokens_for_byte_level_bpe() {
        let tokenizer = fixture_tokenizer();
        let ids = tokenizer.encode(&long_text()).unwrap();
        // The check means something: characters are split across tokens.
        let split = (1..ids.len())
            .filter(|&k| tokenizer.decode(&ids[..k]).ends_with('\u{FFFD}'))
            .count();
        assert!(split > 100, "{split} tokens end inside a character");
        check_against_whole_decoding(&tokenizer, &ids, 8);
    }

    #[test]
    fn the_window_gives_the_text_of_all_the_tokens_for_any_bytes() {
        // Seeded noise bytes (as the untrained built-in model answers: invalid and incomplete
        // sequences), and the long text's bytes.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut ids: Vec<u32> = (0..4000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 56) as u32
            })
            .collect();
        ids.extend(long_text().bytes().map(u32::from));
        // A run of bytes whose text ends in U+FFFD (an invalid or incomplete sequence) widens
        // the window until a character completes (vLLM's rule): runs of noise are short.
        check_against_whole_decoding(&Tokenizer::Bytes, &ids, 24);
    }

    #[test]
    fn a_stop_string_split_across_tokens_ends_the_text_at_its_first_occurrence() {
        let tokenizer = fixture_tokenizer();
        // Only at the end of the long text.
        let stop = "京🦀";
        let text = long_text() + "Ende: 北京🦀 und mehr";
        let ids = tokenizer.encode(&text).unwrap();
        // The reference: the first token whose whole decoding holds the stop string.
        let (at, whole) = (1..=ids.len())
            .map(|k| (k, tokenizer.decode(&ids[..k])))
            .find(|(_, t)| t.contains(stop))
            .unwrap();
        let mut d = Detokenizer::new(vec![stop.to_string(), "never".to_string()]);
        let mut out = String::new();
        for (k, &id) in ids.iter().enumerate() {
            let delta = d.push(&tokenizer, id);
            out.push_str(&delta.text);
            assert_eq!(delta.stopped, k + 1 == at, "token {k}");
            if delta.stopped {
                break;
            }
        }
        assert_eq!(out, whole[..whole.find(stop).unwrap()]);
    }
}

/// Which reasoning parser splits a chat reply's thinking from its answer (vLLM's
/// `--reasoning-parser`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reasoning {
    /// Qwen3: a reply that opens with `<think>` reasons until `</think>`; one that does not
    /// (thinking turned off) is all answer.
    Qwen3,
    /// DeepSeek-R1: the template opens the think block, so a reply reasons until `</think>`.
    DeepSeekR1,
}

impl std::str::FromStr for Reasoning {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "qwen3" => Ok(Self::Qwen3),
            "deepseek_r1" => Ok(Self::DeepSeekR1),
            other => Err(format!("reasoning parser {other:?}: qwen3 or deepseek_r1")),
        }
    }
}

const THINK_START: &str = "<think>";
const THINK_END: &str = "</think>";

/// A reply's text as it comes, split into its reasoning and its answer: the text before
/// `</think>` (less an opening `<think>`) and the text after it. A tag split across deltas is
/// held back until it shows.
#[derive(Debug)]
pub struct ReasoningSplit {
    parser: Reasoning,
    /// Text not yet given out (it may start a tag).
    held: String,
    /// Whether the reply is past its reasoning (or has none).
    answering: bool,
    /// Whether the start of the reply was looked at (for an opening `<think>`).
    opened: bool,
}

/// Text of a chat reply: the model's reasoning and its answer.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Piece {
    /// Reasoning (`reasoning_content`).
    pub reasoning: String,
    /// Answer (`content`).
    pub content: String,
}

impl Piece {
    /// All of `text` is answer.
    pub fn content(text: String) -> Self {
        Self {
            reasoning: String::new(),
            content: text,
        }
    }

    /// Whether it holds no text.
    pub fn is_empty(&self) -> bool {
        self.reasoning.is_empty() && self.content.is_empty()
    }

    /// `other` appended.
    pub fn push(&mut self, other: Piece) {
        self.reasoning.push_str(&other.reasoning);
        self.content.push_str(&other.content);
    }
}

impl ReasoningSplit {
    /// A reply not yet begun.
    pub fn new(parser: Reasoning) -> Self {
        Self {
            parser,
            held: String::new(),
            answering: false,
            opened: false,
        }
    }

    /// The next text of the reply, split.
    pub fn push(&mut self, text: &str) -> Piece {
        if self.answering {
            return Piece::content(text.to_string());
        }
        self.held.push_str(text);
        if !self.opened {
            let trimmed = self.held.trim_start();
            if trimmed.len() < THINK_START.len() && THINK_START.starts_with(trimmed) {
                // Too little to tell whether the reply opens a think block.
                return Piece::default();
            }
            self.opened = true;
            if let Some(rest) = trimmed.strip_prefix(THINK_START) {
                self.held = rest.to_string();
            } else if self.parser == Reasoning::Qwen3 {
                self.answering = true;
                return Piece::content(std::mem::take(&mut self.held));
            }
        }
        if let Some(at) = self.held.find(THINK_END) {
            self.answering = true;
            let content = self.held[at + THINK_END.len()..].to_string();
            self.held.truncate(at);
            return Piece {
                reasoning: std::mem::take(&mut self.held),
                content,
            };
        }
        // Hold back the longest end of the text that could begin `</think>`.
        let keep = (1..THINK_END.len())
            .rev()
            .find(|&n| {
                self.held.len() >= n
                    && self.held.is_char_boundary(self.held.len() - n)
                    && THINK_END.starts_with(&self.held[self.held.len() - n..])
            })
            .unwrap_or(0);
        let out = self.held[..self.held.len() - keep].to_string();
        self.held.drain(..self.held.len() - keep);
        Piece {
            reasoning: out,
            content: String::new(),
        }
    }

    /// The rest when the reply ended: held text is reasoning if the reply was still reasoning
    /// (or answer, for a Qwen3 reply too short to have opened a think block).
    pub fn finish(&mut self) -> Piece {
        let held = std::mem::take(&mut self.held);
        if self.answering || (!self.opened && self.parser == Reasoning::Qwen3) {
            Piece::content(held)
        } else {
            Piece {
                reasoning: held,
                content: String::new(),
            }
        }
    }
}

#[cfg(test)]
mod reasoning_tests {
    use super::*;

    /// `deltas` through a splitter, and what the whole reply gives.
    fn split(parser: Reasoning, deltas: &[&str]) -> Piece {
        let mut s = ReasoningSplit::new(parser);
        let mut all = Piece::default();
        for d in deltas {
            all.push(s.push(d));
        }
        all.push(s.finish());
        all
    }

    #[test]
    fn thinking_before_the_end_tag_and_the_answer_after_whatever_the_deltas() {
        let want = Piece {
            reasoning: "\nThe sea is big.\n".into(),
            content: "\n\nIt is.".into(),
        };
        let text = "<think>\nThe sea is big.\n</think>\n\nIt is.";
        // Every way of cutting the text in two, and byte by byte.
        for cut in 0..=text.len() {
            let got = split(Reasoning::Qwen3, &[&text[..cut], &text[cut..]]);
            assert_eq!(got, want, "cut at {cut}");
        }
        let bytes: Vec<String> = text.chars().map(String::from).collect();
        let deltas: Vec<&str> = bytes.iter().map(String::as_str).collect();
        assert_eq!(split(Reasoning::Qwen3, &deltas), want);
    }

    #[test]
    fn a_qwen3_reply_without_a_think_block_is_all_answer() {
        let got = split(Reasoning::Qwen3, &["Hello", " there </think> x"]);
        assert_eq!(got, Piece::content("Hello there </think> x".into()));
        assert_eq!(
            split(Reasoning::Qwen3, &["<th"]),
            Piece::content("<th".into())
        );
    }

    #[test]
    fn a_deepseek_r1_reply_reasons_until_the_end_tag_even_without_the_opening_one() {
        let got = split(
            Reasoning::DeepSeekR1,
            &["Let me think", ".</thi", "nk>Yes."],
        );
        assert_eq!(
            got,
            Piece {
                reasoning: "Let me think.".into(),
                content: "Yes.".into(),
            }
        );
        // Never closed: all reasoning.
        let got = split(Reasoning::DeepSeekR1, &["<think>still </th"]);
        assert_eq!(got.reasoning, "still </th");
        assert!(got.content.is_empty());
    }
}
