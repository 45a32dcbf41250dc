//! The text the example trains on: a short original story, shipped with the example (no
//! downloads), read as bytes (the vocabulary is the 256 byte values).

/// The training text.
pub const TEXT: &str = include_str!("corpus.txt");

/// The text as token ids.
pub fn tokens() -> Vec<u32> {
    TEXT.bytes().map(u32::from).collect()
}
