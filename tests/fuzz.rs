//! Fuzzing of what the loader and the server read from files and clients: five targets
//! (`fuzz/harness.rs`), each of which must end in `Ok` or an error naming what is wrong, never a
//! panic, a hang or an abort:
//!
//! - `checkpoint`: a checkpoint directory (config.json, safetensors files, the shard index, a
//!   quantization description) opened, read and loaded on burn-flex;
//! - `config`: config.json through `families::spec_of`;
//! - `tokenizer`: the tokenizer files through `TextTokenizer::from_dir`, then encoding;
//! - `chat_template`: the chat template's files through `ChatTemplate::from_dir`, then rendering;
//! - `request`: an HTTP request body parsed and checked as the server does.
//!
//! Inputs are mutations of the workspace's fixtures (`tests/fixtures/hf`, `prequant`, `chat`),
//! made by proptest strategies that know the formats: a tensor's dtype, shape or offsets
//! changed, a header's length, a JSON value anywhere replaced, removed or added, a template's
//! text cut or given a loop, bytes flipped or cut. A mutated input is a recipe (the fixture and
//! its edits, in JSON), so that the inputs worth keeping are small files.
//!
//! In CI: [`corpora_replay`] runs every input kept under `tests/fuzz_corpus/<target>/` (recipes,
//! `*.json`, and the archives cargo fuzz reads and writes, `*.bin`); `<target>_mutations` runs a
//! fixed-seed sample of mutations. Off CI, [`fuzz_for_a_while`] (ignored) mutates for
//! `FUZZ_SECS` seconds and keeps the inputs that fail and those that reach an outcome not seen
//! before; `cargo +nightly fuzz run <target>` (`fuzz/`) fuzzes the same targets coverage-guided.

#[path = "fuzz/harness.rs"]
mod harness;

use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// A target: the harness's function of an input.
type Run = fn(&[u8]) -> Result<(), String>;

/// How long an input may take before it counts as a hang (debug builds are slow).
const HANG: Duration = Duration::from_secs(30);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn corpus_dir(target: &str) -> PathBuf {
    root().join("tests/fuzz_corpus").join(target)
}

/// Runs `run` on `input` on a thread of its own: the target's result, or why it failed (its
/// panic, or no result within [`HANG`]).
fn attempt(run: Run, input: Vec<u8>) -> Result<Result<(), String>, String> {
    let (send, receive) = mpsc::channel();
    std::thread::Builder::new()
        .name("fuzz input".into())
        .spawn(move || {
            let result = catch_unwind(AssertUnwindSafe(|| run(&input)));
            let _ = send.send(result.map_err(|panic| {
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "a panic without a message".into())
            }));
        })
        .expect("a thread for the input");
    match receive.recv_timeout(HANG) {
        Ok(Ok(result)) => Ok(result),
        Ok(Err(panic)) => Err(format!("panicked: {panic}")),
        Err(_) => Err(format!("no result within {HANG:?}: it hangs")),
    }
}

/// An outcome with its particulars (numbers, quoted names, paths) blurred: inputs whose
/// outcomes differ in more than those took different ways through the code.
fn class(outcome: &Result<(), String>) -> String {
    let Err(message) = outcome else {
        return "ok".into();
    };
    let mut out = String::new();
    let mut quoted = None;
    for c in message.chars() {
        match (quoted, c) {
            (Some(q), c) if c == q => quoted = None,
            (Some(_), _) => {}
            (None, '"' | '`' | '\'') => {
                quoted = Some(c);
                out.push('_');
            }
            (None, c) if c.is_ascii_digit() => {
                if !out.ends_with('#') {
                    out.push('#');
                }
            }
            (None, c) => out.push(c),
        }
    }
    out.split_whitespace()
        .map(|w| if w.contains('/') { "<path>" } else { w })
        .take(14)
        .collect::<Vec<_>>()
        .join(" ")
}

// ---------------------------------------------------------------------------------------------
// Mutations shared by the targets: JSON values and bytes.

/// The numbers most likely to break sizes and offsets.
static NUMBERS: [i128; 22] = [
    0,
    1,
    2,
    3,
    -1,
    -2,
    7,
    8,
    64,
    255,
    256,
    4096,
    65535,
    65536,
    1 << 31,
    (1 << 31) - 1,
    1 << 32,
    1 << 40,
    1 << 53,
    1_000_000_000_000_000,
    i64::MAX as i128,
    u64::MAX as i128,
];

/// Strings the formats give meaning to.
static STRINGS: [&str; 40] = [
    "",
    "F32",
    "F16",
    "BF16",
    "F64",
    "I8",
    "I32",
    "U8",
    "BOOL",
    "F8_E4M3",
    "F8_E5M2",
    "F4",
    "C64",
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "deepseek_v2",
    "deepseek_v3",
    "silu",
    "gelu",
    "yarn",
    "linear",
    "default",
    "float32",
    "bfloat16",
    "int8",
    "noaux_tc",
    "group_limited_greedy",
    "sigmoid",
    "../model.safetensors",
    "/etc/passwd",
    "model.safetensors",
    "model-00001-of-00003.safetensors",
    "missing.safetensors",
    "<|im_end|>",
    "<|endoftext|>",
    "BPE",
    "ByteLevel",
    "\u{0}",
    "é😀",
];

/// Keys the formats read (config.json, the header, the index, the tokenizer's files).
static KEYS: [&str; 40] = [
    "model_type",
    "num_hidden_layers",
    "hidden_size",
    "vocab_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "moe_intermediate_size",
    "num_experts",
    "num_local_experts",
    "n_routed_experts",
    "num_experts_per_tok",
    "n_group",
    "topk_group",
    "rope_scaling",
    "rope_parameters",
    "rope_theta",
    "factor",
    "qk_rope_head_dim",
    "kv_lora_rank",
    "q_lora_rank",
    "first_k_dense_replace",
    "mlp_only_layers",
    "torch_dtype",
    "dtype",
    "quantization_config",
    "quant_method",
    "weight_block_size",
    "__metadata__",
    "data_offsets",
    "shape",
    "weight_map",
    "eos_token_id",
    "eos_token",
    "chat_template",
    "bos_token",
    "added_tokens",
    "pre_tokenizer",
    "normalizer",
];

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(&NUMBERS[..]).prop_map(|n| match u64::try_from(n) {
            Ok(u) => json!(u),
            Err(_) => json!(n as i64),
        }),
        any::<i64>().prop_map(Value::from),
        prop::sample::select(vec![0.5, -0.0, 1e-300, 1e300, f64::MAX, -1.5, 2.5])
            .prop_map(Value::from),
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        number(),
        number(),
        prop::sample::select(&STRINGS[..]).prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(prop::sample::select(&KEYS[..]), inner, 0..4).prop_map(
                |m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            ),
        ]
    })
}

/// An edit of a JSON document, at the `at`-th of its values (in document order, modulo their
/// number).
#[derive(Debug, Clone, Serialize, Deserialize)]
enum JsonEdit {
    /// That value replaced.
    Set { at: u32, value: Value },
    /// That value removed from its object or array.
    Remove { at: u32 },
    /// A key added to that object (or a value pushed to that array).
    Insert { at: u32, key: String, value: Value },
    /// That value (a number) made one more or less, or doubled.
    Nudge { at: u32, by: i8 },
}

fn json_edit() -> impl Strategy<Value = JsonEdit> {
    prop_oneof![
        3 => (any::<u32>(), json_value()).prop_map(|(at, value)| JsonEdit::Set { at, value }),
        2 => any::<u32>().prop_map(|at| JsonEdit::Remove { at }),
        2 => (any::<u32>(), prop::sample::select(&KEYS[..]), json_value())
            .prop_map(|(at, key, value)| JsonEdit::Insert { at, key: key.into(), value }),
        2 => (any::<u32>(), prop::sample::select(vec![-1i8, 1, 2, 0]))
            .prop_map(|(at, by)| JsonEdit::Nudge { at, by }),
    ]
}

/// The JSON pointers of `value` and all the values inside it, in document order.
fn pointers(value: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match value {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                pointers(item, format!("{at}/{i}"), out);
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                let key = k.replace('~', "~0").replace('/', "~1");
                pointers(v, format!("{at}/{key}"), out);
            }
        }
        _ => {}
    }
}

impl JsonEdit {
    fn apply(&self, doc: &mut Value) {
        let mut all = Vec::new();
        pointers(doc, String::new(), &mut all);
        let pick = |at: u32| all[at as usize % all.len()].clone();
        match self {
            JsonEdit::Set { at, value } => {
                *doc.pointer_mut(&pick(*at))
                    .expect("a pointer of the document") = value.clone();
            }
            JsonEdit::Remove { at } => {
                let target = pick(*at);
                let Some((parent, last)) = target.rsplit_once('/') else {
                    return;
                };
                match doc.pointer_mut(parent) {
                    Some(Value::Object(map)) => {
                        map.remove(&last.replace("~1", "/").replace("~0", "~"));
                    }
                    Some(Value::Array(items)) => {
                        items.remove(last.parse::<usize>().expect("an index"));
                    }
                    _ => {}
                }
            }
            JsonEdit::Insert { at, key, value } => match doc.pointer_mut(&pick(*at)) {
                Some(Value::Object(map)) => {
                    map.insert(key.clone(), value.clone());
                }
                Some(Value::Array(items)) => items.push(value.clone()),
                _ => {}
            },
            JsonEdit::Nudge { at, by } => {
                let target = doc.pointer_mut(&pick(*at)).expect("a pointer");
                if let Some(n) = target.as_i64() {
                    *target = match by {
                        0 => json!(n.wrapping_mul(2)),
                        by => json!(n.wrapping_add(*by as i64)),
                    };
                } else if let Some(n) = target.as_u64() {
                    *target = json!(n.wrapping_add(*by as u64));
                }
            }
        }
    }
}

/// An edit of a file's bytes, at a position modulo its length.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum ByteEdit {
    Flip { at: u32, xor: u8 },
    Truncate { at: u32 },
    Delete { at: u32, len: u16 },
    Insert { at: u32, bytes: String },
}

fn byte_edit() -> impl Strategy<Value = ByteEdit> {
    prop_oneof![
        (any::<u32>(), 1..=255u8).prop_map(|(at, xor)| ByteEdit::Flip { at, xor }),
        any::<u32>().prop_map(|at| ByteEdit::Truncate { at }),
        (any::<u32>(), any::<u16>()).prop_map(|(at, len)| ByteEdit::Delete { at, len }),
        (any::<u32>(), "\\PC{0,8}").prop_map(|(at, bytes)| ByteEdit::Insert { at, bytes }),
    ]
}

impl ByteEdit {
    fn apply(&self, bytes: &mut Vec<u8>) {
        let at = |at: u32| match bytes.len() {
            0 => 0,
            n => at as usize % n,
        };
        match self {
            ByteEdit::Flip { at: a, xor } => {
                if !bytes.is_empty() {
                    let i = at(*a);
                    bytes[i] ^= xor;
                }
            }
            ByteEdit::Truncate { at: a } => bytes.truncate(at(*a)),
            ByteEdit::Delete { at: a, len } => {
                let start = at(*a);
                let end = (start + *len as usize).min(bytes.len());
                bytes.drain(start..end);
            }
            ByteEdit::Insert { at: a, bytes: b } => {
                let i = at(*a);
                bytes.splice(i..i, b.bytes());
            }
        }
    }
}

/// A directory's files by name, in name order.
type Files = Vec<(String, Vec<u8>)>;

fn read_files(dir: &Path, keep: impl Fn(&str) -> bool) -> Files {
    let mut files: Files = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), p))
        .filter(|(name, _)| keep(name))
        .map(|(name, p)| (name, std::fs::read(p).unwrap()))
        .collect();
    files.sort();
    files
}

fn archive(files: &Files) -> Vec<u8> {
    harness::pack(files.iter().map(|(n, b)| (n.as_str(), b.as_slice())))
}

/// The file of `files` that `at` picks among those `kind` accepts.
fn pick(files: &mut Files, at: u32, kind: impl Fn(&str) -> bool) -> Option<&mut Vec<u8>> {
    let mut matching: Vec<&mut (String, Vec<u8>)> =
        files.iter_mut().filter(|(n, _)| kind(n)).collect();
    let n = matching.len();
    (n > 0).then(|| &mut matching.swap_remove(at as usize % n).1)
}

/// An edit of one of a directory's JSON files (`at` picks which).
fn edit_json(files: &mut Files, at: u32, json: impl Fn(&str) -> bool, edit: &JsonEdit) {
    if let Some(bytes) = pick(files, at, json) {
        if let Ok(mut doc) = serde_json::from_slice::<Value>(bytes) {
            edit.apply(&mut doc);
            *bytes = serde_json::to_vec_pretty(&doc).unwrap();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The checkpoint target.

/// The checkpoints the checkpoint target mutates: one file, shards with an index, FP8 weights,
/// msModelSlim int8 with its description.
static CHECKPOINTS: [&str; 5] = [
    "hf/qwen3_moe",
    "hf/mixtral",
    "hf/deepseek_v3",
    "prequant/fp8_deepseek_v3",
    "prequant/modelslim_w8a8_deepseek_v3",
];

fn checkpoint_files(fixture: &str) -> Files {
    read_files(&root().join("tests/fixtures").join(fixture), |n| {
        n.ends_with(".safetensors")
            || matches!(
                n,
                "config.json" | "model.safetensors.index.json" | "quant_model_description.json"
            )
    })
}

/// A safetensors file: its header and the bytes after it.
fn split_safetensors(bytes: &[u8]) -> Option<(serde_json::Map<String, Value>, Vec<u8>)> {
    let len = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?) as usize;
    let header = serde_json::from_slice(bytes.get(8..8usize.checked_add(len)?)?).ok()?;
    Some((header, bytes[8 + len..].to_vec()))
}

fn join_safetensors(header: &serde_json::Map<String, Value>, data: &[u8]) -> Vec<u8> {
    let mut text = serde_json::to_vec(header).unwrap();
    // safetensors pads its header with spaces to a multiple of 8.
    text.resize(text.len().div_ceil(8) * 8, b' ');
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend(text);
    out.extend_from_slice(data);
    out
}

/// An edit of one tensor's entry in a safetensors header.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum TensorEdit {
    Dtype(String),
    Shape(Vec<u64>),
    Offsets(u64, u64),
    Remove,
    Rename(String),
    /// Moved into the header of another file (`at` picks which).
    MoveTo(u32),
}

fn tensor_edit() -> impl Strategy<Value = TensorEdit> {
    let dim = prop_oneof![
        prop::sample::select(vec![0u64, 1, 2, 3, 4, 16, 64, 1 << 32, u64::MAX]),
        any::<u64>()
    ];
    prop_oneof![
        prop::sample::select(&STRINGS[1..13]).prop_map(|d| TensorEdit::Dtype(d.into())),
        prop::collection::vec(dim, 0..4).prop_map(TensorEdit::Shape),
        (
            prop::sample::select(vec![0u64, 4, 8, 100, 1 << 20, u64::MAX]),
            any::<u64>()
        )
            .prop_map(|(a, b)| TensorEdit::Offsets(a, b % (1 << 20))),
        Just(TensorEdit::Remove),
        prop::sample::select(vec![
            "model.norm.weight",
            "lm_head.weight",
            "model.layers.0.mlp.gate.weight",
            "model.layers.99.mlp.gate.weight",
            "",
            "__metadata__",
        ])
        .prop_map(|n| TensorEdit::Rename(n.into())),
        any::<u32>().prop_map(TensorEdit::MoveTo),
    ]
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum CheckpointEdit {
    /// One tensor's entry of one safetensors file's header (`file` and `tensor` pick them).
    Tensor {
        file: u32,
        tensor: u32,
        edit: TensorEdit,
    },
    /// A safetensors header as a JSON document.
    Header { file: u32, edit: JsonEdit },
    /// The length at the start of a safetensors file.
    Length { file: u32, value: u64 },
    /// Any file's bytes.
    Bytes { file: u32, edit: ByteEdit },
    /// A JSON file (config.json, the index, the description).
    Json { file: u32, edit: JsonEdit },
    /// A file removed.
    Remove { file: u32 },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct CheckpointInput {
    fixture: String,
    edits: Vec<CheckpointEdit>,
}

fn safetensors(name: &str) -> bool {
    name.ends_with(".safetensors")
}

fn json_file(name: &str) -> bool {
    name.ends_with(".json")
}

impl CheckpointEdit {
    fn apply(&self, files: &mut Files) {
        match self {
            CheckpointEdit::Tensor { file, tensor, edit } => {
                let shards = files.iter().filter(|(n, _)| safetensors(n)).count();
                let Some(bytes) = pick(files, *file, safetensors) else {
                    return;
                };
                let Some((mut header, data)) = split_safetensors(bytes) else {
                    return;
                };
                let names: Vec<String> = header
                    .keys()
                    .filter(|k| *k != "__metadata__")
                    .cloned()
                    .collect();
                if names.is_empty() {
                    return;
                }
                let name = &names[*tensor as usize % names.len()];
                let mut moved = None;
                let mut set = |key: &str, value: Value| {
                    if let Some(entry) = header.get_mut(name).and_then(Value::as_object_mut) {
                        entry.insert(key.into(), value);
                    }
                };
                match edit {
                    TensorEdit::Dtype(d) => set("dtype", json!(d)),
                    TensorEdit::Shape(s) => set("shape", json!(s)),
                    TensorEdit::Offsets(a, b) => set("data_offsets", json!([a, b])),
                    TensorEdit::Remove => {
                        header.remove(name);
                    }
                    TensorEdit::Rename(to) => {
                        let entry = header.remove(name).unwrap();
                        header.insert(to.clone(), entry);
                    }
                    TensorEdit::MoveTo(to) => {
                        moved = header.remove(name).map(|e| (name.clone(), e, *to));
                    }
                }
                *bytes = join_safetensors(&header, &data);
                if let Some((name, entry, to)) = moved.filter(|_| shards > 0) {
                    let target = pick(files, to, safetensors).unwrap();
                    if let Some((mut header, data)) = split_safetensors(target) {
                        header.insert(name, entry);
                        *target = join_safetensors(&header, &data);
                    }
                }
            }
            CheckpointEdit::Header { file, edit } => {
                if let Some(bytes) = pick(files, *file, safetensors) {
                    if let Some((header, data)) = split_safetensors(bytes) {
                        let mut doc = Value::Object(header);
                        edit.apply(&mut doc);
                        *bytes = match doc {
                            Value::Object(header) => join_safetensors(&header, &data),
                            other => {
                                let text = other.to_string();
                                let mut out = (text.len() as u64).to_le_bytes().to_vec();
                                out.extend(text.bytes());
                                out.extend(data);
                                out
                            }
                        };
                    }
                }
            }
            CheckpointEdit::Length { file, value } => {
                if let Some(bytes) = pick(files, *file, safetensors) {
                    if bytes.len() >= 8 {
                        bytes[..8].copy_from_slice(&value.to_le_bytes());
                    }
                }
            }
            CheckpointEdit::Bytes { file, edit } => {
                if let Some(bytes) = pick(files, *file, |_| true) {
                    edit.apply(bytes);
                }
            }
            CheckpointEdit::Json { file, edit } => edit_json(files, *file, json_file, edit),
            CheckpointEdit::Remove { file } => {
                if !files.is_empty() {
                    files.remove(*file as usize % files.len());
                }
            }
        }
    }
}

impl CheckpointInput {
    fn materialize(&self) -> Vec<u8> {
        let mut files = checkpoint_files(&self.fixture);
        for edit in &self.edits {
            edit.apply(&mut files);
        }
        archive(&files)
    }
}

fn checkpoint_edit() -> impl Strategy<Value = CheckpointEdit> {
    prop_oneof![
        4 => (any::<u32>(), any::<u32>(), tensor_edit())
            .prop_map(|(file, tensor, edit)| CheckpointEdit::Tensor { file, tensor, edit }),
        2 => (any::<u32>(), json_edit()).prop_map(|(file, edit)| CheckpointEdit::Header { file, edit }),
        1 => (any::<u32>(), prop_oneof![
                prop::sample::select(vec![0u64, 1, 7, 8, 9, 1 << 20, 100_000_001, u64::MAX]),
                any::<u64>()
            ])
            .prop_map(|(file, value)| CheckpointEdit::Length { file, value }),
        1 => (any::<u32>(), byte_edit()).prop_map(|(file, edit)| CheckpointEdit::Bytes { file, edit }),
        3 => (any::<u32>(), json_edit()).prop_map(|(file, edit)| CheckpointEdit::Json { file, edit }),
        1 => any::<u32>().prop_map(|file| CheckpointEdit::Remove { file }),
    ]
}

fn checkpoint_input() -> impl Strategy<Value = CheckpointInput> {
    (
        prop::sample::select(&CHECKPOINTS[..]),
        prop::collection::vec(checkpoint_edit(), 1..4),
    )
        .prop_map(|(fixture, edits)| CheckpointInput {
            fixture: fixture.into(),
            edits,
        })
}

// ---------------------------------------------------------------------------------------------
// The config target.

/// Every fixture's config.json (and transformers 5's spelling, where there is one).
static CONFIGS: [&str; 8] = [
    "hf/mixtral/config.json",
    "hf/qwen2_moe/config.json",
    "hf/qwen3_moe/config.json",
    "hf/deepseek_v2/config.json",
    "hf/deepseek_v2/config.v5.json",
    "hf/deepseek_v3/config.json",
    "hf/deepseek_v3/config.v5.json",
    "prequant/fp8_deepseek_v3/config.json",
];

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ConfigInput {
    fixture: String,
    edits: Vec<JsonEdit>,
}

impl ConfigInput {
    fn materialize(&self) -> Vec<u8> {
        let path = root().join("tests/fixtures").join(&self.fixture);
        let mut doc: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        for edit in &self.edits {
            edit.apply(&mut doc);
        }
        serde_json::to_vec_pretty(&doc).unwrap()
    }
}

fn config_input() -> impl Strategy<Value = ConfigInput> {
    (
        prop::sample::select(&CONFIGS[..]),
        prop::collection::vec(json_edit(), 1..5),
    )
        .prop_map(|(fixture, edits)| ConfigInput {
            fixture: fixture.into(),
            edits,
        })
}

// ---------------------------------------------------------------------------------------------
// The tokenizer target.

static TOKENIZERS: [&str; 5] = [
    "hf/qwen3_moe",
    "hf/qwen2_moe",
    "hf/mixtral",
    "hf/deepseek_v2",
    "hf/deepseek_v3",
];

fn tokenizer_files(fixture: &str) -> Files {
    read_files(&root().join("tests/fixtures").join(fixture), |n| {
        matches!(
            n,
            "tokenizer.json"
                | "tokenizer_config.json"
                | "generation_config.json"
                | "config.json"
                | "special_tokens_map.json"
        )
    })
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum FileEdit {
    Json { file: u32, edit: JsonEdit },
    Bytes { file: u32, edit: ByteEdit },
    Remove { file: u32 },
}

impl FileEdit {
    fn apply(&self, files: &mut Files) {
        match self {
            FileEdit::Json { file, edit } => edit_json(files, *file, json_file, edit),
            FileEdit::Bytes { file, edit } => {
                if let Some(bytes) = pick(files, *file, |_| true) {
                    edit.apply(bytes);
                }
            }
            FileEdit::Remove { file } => {
                if !files.is_empty() {
                    files.remove(*file as usize % files.len());
                }
            }
        }
    }
}

fn file_edit() -> impl Strategy<Value = FileEdit> {
    prop_oneof![
        8 => (any::<u32>(), json_edit()).prop_map(|(file, edit)| FileEdit::Json { file, edit }),
        2 => (any::<u32>(), byte_edit()).prop_map(|(file, edit)| FileEdit::Bytes { file, edit }),
        1 => any::<u32>().prop_map(|file| FileEdit::Remove { file }),
    ]
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct TokenizerInput {
    fixture: String,
    edits: Vec<FileEdit>,
}

impl TokenizerInput {
    fn materialize(&self) -> Vec<u8> {
        let mut files = tokenizer_files(&self.fixture);
        for edit in &self.edits {
            edit.apply(&mut files);
        }
        archive(&files)
    }
}

fn tokenizer_input() -> impl Strategy<Value = TokenizerInput> {
    (
        prop::sample::select(&TOKENIZERS[..]),
        prop::collection::vec(file_edit(), 1..5),
    )
        .prop_map(|(fixture, edits)| TokenizerInput {
            fixture: fixture.into(),
            edits,
        })
}

// ---------------------------------------------------------------------------------------------
// The chat template target.

fn chat_fixture() -> Value {
    let path = root().join("tests/fixtures/chat/templates.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// A published template (tests/fixtures/chat) in tokenizer_config.json with its special
/// tokens, and the conversation of one of the fixture's cases for it.
fn chat_files(case: usize) -> Files {
    let fixture = chat_fixture();
    let cases = fixture["cases"].as_array().unwrap();
    let case = &cases[case % cases.len()];
    let template = &fixture["templates"][case["template"].as_str().unwrap()];
    let config = json!({
        "chat_template": template["chat_template"],
        "bos_token": template["bos_token"],
        "eos_token": template["eos_token"],
    });
    let conversation = json!({
        "messages": case["messages"],
        "add_generation_prompt": case["add_generation_prompt"],
        "kwargs": case["kwargs"],
    });
    vec![
        (
            "conversation.json".into(),
            serde_json::to_vec_pretty(&conversation).unwrap(),
        ),
        (
            "tokenizer_config.json".into(),
            serde_json::to_vec_pretty(&config).unwrap(),
        ),
    ]
}

/// Jinja that loops, recurses, builds data or calls what may fail. Not here: a list holding
/// itself twice, doubled, converted to text (`~`, `string`, `join`, `pprint`), which minijinja
/// formats without fuel, a limit `burn-ascend-openai/src/chat.rs` documents.
static JINJA: [&str; 24] = [
    "{% for m in messages %}",
    "{% endfor %}",
    "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
    "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x | tojson }}",
    "{% set ns = namespace(x=[]) %}{% for i in range(3000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x | tojson(sort_keys=true) }}",
    "{{ messages | tojson(indent=1000000000000) }}",
    "{{ messages | tojson(indent=100000000) }}",
    "{{ 'x' * 100000000 }}",
    "{{ raise_exception('no') }}",
    "{{ strftime_now('%Q %') }}",
    "{{ messages[0].content.split('') }}",
    "{{ messages[0]['content'] | trim }}",
    "{% if add_generation_prompt %}",
    "{% endif %}",
    "{{ ",
    " }}",
    "{% include 'chat_template' %}",
    "{{ loop.cycle('a', 'b') }}",
    "{% for x in messages recursive %}{{ loop(messages) }}{% endfor %}",
    "{{ messages | map(attribute='role') | join(' ' * 1000000) }}",
    "{{ (messages * 1000000) | length }}",
    "{% break %}",
    "{{ bos_token + eos_token }}",
];

#[derive(Debug, Clone, Serialize, Deserialize)]
enum ChatEdit {
    /// Jinja inserted into the template's text.
    Insert { at: u32, jinja: String },
    /// Part of the template's text removed.
    Delete { at: u32, len: u16 },
    /// The template moved from tokenizer_config.json to chat_template.jinja.
    ToJinjaFile,
    /// Any other edit of the files (tokenizer_config.json, conversation.json...).
    File(FileEdit),
}

/// The template's text in `files` (chat_template.jinja, else tokenizer_config.json's string).
fn edit_template(files: &mut Files, edit: impl FnOnce(&mut String)) {
    if let Some((_, bytes)) = files.iter_mut().find(|(n, _)| n == "chat_template.jinja") {
        let mut text = String::from_utf8_lossy(bytes).into_owned();
        edit(&mut text);
        *bytes = text.into_bytes();
        return;
    }
    if let Some((_, bytes)) = files.iter_mut().find(|(n, _)| n == "tokenizer_config.json") {
        if let Ok(mut config) = serde_json::from_slice::<Value>(bytes) {
            if let Some(Value::String(text)) = config.get_mut("chat_template") {
                edit(text);
                *bytes = serde_json::to_vec_pretty(&config).unwrap();
            }
        }
    }
}

/// The byte index of a char boundary of `text` at `at` (modulo its length).
fn boundary(text: &str, at: u32) -> usize {
    let mut i = at as usize % (text.len() + 1);
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

impl ChatEdit {
    fn apply(&self, files: &mut Files) {
        match self {
            ChatEdit::Insert { at, jinja } => edit_template(files, |text| {
                let i = boundary(text, *at);
                text.insert_str(i, jinja);
            }),
            ChatEdit::Delete { at, len } => edit_template(files, |text| {
                let start = boundary(text, *at);
                let end = boundary(text, (start + *len as usize).min(text.len()) as u32);
                if end > start {
                    text.replace_range(start..end, "");
                }
            }),
            ChatEdit::ToJinjaFile => {
                let mut template = None;
                edit_template(files, |text| template = Some(std::mem::take(text)));
                if let Some(text) = template {
                    files.push(("chat_template.jinja".into(), text.into_bytes()));
                }
            }
            ChatEdit::File(edit) => edit.apply(files),
        }
    }
}

fn chat_edit() -> impl Strategy<Value = ChatEdit> {
    prop_oneof![
        5 => (any::<u32>(), prop::sample::select(&JINJA[..]))
            .prop_map(|(at, jinja)| ChatEdit::Insert { at, jinja: jinja.into() }),
        2 => (any::<u32>(), any::<u16>()).prop_map(|(at, len)| ChatEdit::Delete { at, len: len % 64 }),
        1 => Just(ChatEdit::ToJinjaFile),
        3 => file_edit().prop_map(ChatEdit::File),
    ]
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ChatInput {
    case: u32,
    edits: Vec<ChatEdit>,
}

impl ChatInput {
    fn materialize(&self) -> Vec<u8> {
        let mut files = chat_files(self.case as usize);
        for edit in &self.edits {
            edit.apply(&mut files);
        }
        archive(&files)
    }
}

fn chat_input() -> impl Strategy<Value = ChatInput> {
    (any::<u32>(), prop::collection::vec(chat_edit(), 1..4))
        .prop_map(|(case, edits)| ChatInput { case, edits })
}

// ---------------------------------------------------------------------------------------------
// The request target.

/// Requests as clients send them (OpenAI's SDKs, curl, the tests of the server).
fn requests() -> Vec<(&'static str, Value)> {
    let m = "served";
    vec![
        (
            "/v1/completions",
            json!({"model": m, "prompt": "The sea", "max_tokens": 4, "temperature": 0}),
        ),
        (
            "/v1/completions",
            json!({"model": m, "prompt": [10, 11, 12], "max_tokens": 8, "stream": true,
                   "stream_options": {"include_usage": true}, "seed": 7, "top_p": 0.9,
                   "top_k": 5, "stop": ["\n", "."], "stop_token_ids": [3]}),
        ),
        (
            "/v1/completions",
            json!({"model": m, "prompt": ["one"], "n": 1, "best_of": 1, "echo": false,
                   "logprobs": null, "presence_penalty": 0, "frequency_penalty": 0,
                   "logit_bias": {}, "user": "u"}),
        ),
        (
            "/v1/chat/completions",
            json!({"model": m, "messages": [{"role": "system", "content": "Be brief."},
                   {"role": "user", "content": "The sea?"}], "max_completion_tokens": 16,
                   "temperature": 0.7, "stream": false}),
        ),
        (
            "/v1/chat/completions",
            json!({"model": m, "messages": [{"role": "user", "content": "x"}],
                   "response_format": {"type": "text"}, "tools": null, "logprobs": false,
                   "stop": "END"}),
        ),
    ]
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct RequestInput {
    request: u32,
    edits: Vec<JsonEdit>,
    bytes: Vec<ByteEdit>,
}

impl RequestInput {
    fn materialize(&self) -> Vec<u8> {
        let all = requests();
        let (path, mut body) = all[self.request as usize % all.len()].clone();
        for edit in &self.edits {
            edit.apply(&mut body);
        }
        let mut bytes = serde_json::to_vec(&body).unwrap();
        for edit in &self.bytes {
            edit.apply(&mut bytes);
        }
        let mut out = format!("{path}\n").into_bytes();
        out.extend(bytes);
        out
    }
}

fn request_input() -> impl Strategy<Value = RequestInput> {
    (
        any::<u32>(),
        prop::collection::vec(json_edit(), 0..5),
        prop::collection::vec(byte_edit(), 0..2),
    )
        .prop_map(|(request, edits, bytes)| RequestInput {
            request,
            edits,
            bytes,
        })
}

// ---------------------------------------------------------------------------------------------
// The targets, their seeds and the runs.

/// One target: its harness, its mutations and the files cargo fuzz starts from.
struct Target {
    name: &'static str,
    run: Run,
    /// A recipe (its JSON) made into the harness's input.
    materialize: fn(&str) -> Vec<u8>,
    /// Mutations: (recipe JSON, input).
    mutations: BoxedStrategy<(String, Vec<u8>)>,
    /// The unmutated fixtures, as inputs, with names.
    seeds: fn() -> Vec<(String, Vec<u8>)>,
}

fn recipe<T: Serialize + for<'a> Deserialize<'a> + std::fmt::Debug + Clone + 'static>(
    strategy: impl Strategy<Value = T> + 'static,
    materialize: fn(&T) -> Vec<u8>,
) -> BoxedStrategy<(String, Vec<u8>)> {
    strategy
        .prop_map(move |input| {
            (
                serde_json::to_string_pretty(&input).unwrap(),
                materialize(&input),
            )
        })
        .boxed()
}

fn from_json<T: for<'a> Deserialize<'a>>(text: &str) -> T {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not a recipe of this target: {e}"))
}

/// The largest tensors a checkpoint seed of cargo fuzz keeps whole: the others are left out of
/// its headers and data, so that the seed is a few kilobytes (libFuzzer mutates small inputs).
const SEED_TENSOR_BYTES: usize = 256;

/// A checkpoint with only its small tensors (the index, if any, following).
fn small_checkpoint(fixture: &str) -> Vec<u8> {
    let mut files = checkpoint_files(fixture);
    let mut kept = BTreeSet::new();
    for (name, bytes) in files.iter_mut().filter(|(n, _)| safetensors(n)) {
        let (header, data) = split_safetensors(bytes).expect("a fixture's safetensors");
        let mut small = serde_json::Map::new();
        let mut out = Vec::new();
        for (tensor, entry) in &header {
            let Some([a, b]) = entry["data_offsets"].as_array().map(|o| {
                [
                    o[0].as_u64().unwrap() as usize,
                    o[1].as_u64().unwrap() as usize,
                ]
            }) else {
                small.insert(tensor.clone(), entry.clone());
                continue;
            };
            if b - a <= SEED_TENSOR_BYTES {
                let mut entry = entry.clone();
                entry["data_offsets"] = json!([out.len(), out.len() + b - a]);
                out.extend_from_slice(&data[a..b]);
                small.insert(tensor.clone(), entry);
                kept.insert((tensor.clone(), name.clone()));
            }
        }
        *bytes = join_safetensors(&small, &out);
    }
    if let Some((_, index)) = files
        .iter_mut()
        .find(|(n, _)| n == "model.safetensors.index.json")
    {
        let mut doc: Value = serde_json::from_slice(index).unwrap();
        doc["weight_map"] = Value::Object(
            kept.into_iter()
                .map(|(tensor, file)| (tensor, Value::from(file)))
                .collect(),
        );
        *index = serde_json::to_vec_pretty(&doc).unwrap();
    }
    archive(&files)
}

fn targets() -> Vec<Target> {
    vec![
        Target {
            name: "checkpoint",
            run: harness::checkpoint,
            materialize: |t| from_json::<CheckpointInput>(t).materialize(),
            mutations: recipe(checkpoint_input(), CheckpointInput::materialize),
            seeds: || {
                CHECKPOINTS
                    .iter()
                    .map(|f| (f.replace('/', "-"), small_checkpoint(f)))
                    .collect()
            },
        },
        Target {
            name: "config",
            run: harness::config,
            materialize: |t| from_json::<ConfigInput>(t).materialize(),
            mutations: recipe(config_input(), ConfigInput::materialize),
            seeds: || {
                CONFIGS
                    .iter()
                    .map(|f| {
                        let name = f.replace('/', "-").replace(".json", "");
                        (
                            name,
                            std::fs::read(root().join("tests/fixtures").join(f)).unwrap(),
                        )
                    })
                    .collect()
            },
        },
        Target {
            name: "tokenizer",
            run: harness::tokenizer,
            materialize: |t| from_json::<TokenizerInput>(t).materialize(),
            mutations: recipe(tokenizer_input(), TokenizerInput::materialize),
            seeds: || {
                TOKENIZERS
                    .iter()
                    .map(|f| (f.replace('/', "-"), archive(&tokenizer_files(f))))
                    .collect()
            },
        },
        Target {
            name: "chat_template",
            run: harness::chat_template,
            materialize: |t| from_json::<ChatInput>(t).materialize(),
            mutations: recipe(chat_input(), ChatInput::materialize),
            seeds: || {
                // One case of each template.
                let fixture = chat_fixture();
                let mut seen = BTreeSet::new();
                let cases = fixture["cases"].as_array().unwrap();
                (0..cases.len())
                    .filter(|&i| seen.insert(cases[i]["template"].as_str().unwrap().to_string()))
                    .map(|i| {
                        let name = cases[i]["template"].as_str().unwrap().to_string();
                        (name, archive(&chat_files(i)))
                    })
                    .collect()
            },
        },
        Target {
            name: "request",
            run: harness::request,
            materialize: |t| from_json::<RequestInput>(t).materialize(),
            mutations: recipe(request_input(), RequestInput::materialize),
            seeds: || {
                requests()
                    .into_iter()
                    .enumerate()
                    .map(|(i, (path, body))| {
                        let mut bytes = format!("{path}\n").into_bytes();
                        bytes.extend(serde_json::to_vec(&body).unwrap());
                        let kind = if path.contains("chat") {
                            "chat"
                        } else {
                            "completion"
                        };
                        (format!("{kind}-{i}"), bytes)
                    })
                    .collect()
            },
        },
    ]
}

fn target(name: &str) -> Target {
    targets()
        .into_iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no fuzz target {name}"))
}

/// Every input kept for `target`: (file, input).
fn corpus(target: &Target) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = corpus_dir(target.name);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let bytes = std::fs::read(&path).unwrap();
            let input = match path.extension().and_then(|e| e.to_str()) {
                Some("json") => (target.materialize)(std::str::from_utf8(&bytes).unwrap()),
                _ => bytes,
            };
            (path, input)
        })
        .collect()
}

#[test]
fn corpora_replay() {
    let mut failures = Vec::new();
    for target in targets() {
        let corpus = corpus(&target);
        let seeds = (target.seeds)().len();
        assert!(
            corpus.len() > seeds,
            "{}: the corpus holds only {} inputs",
            target.name,
            corpus.len()
        );
        let mut classes = BTreeSet::new();
        for (path, input) in corpus {
            match attempt(target.run, input) {
                Ok(outcome) => {
                    classes.insert(class(&outcome));
                }
                Err(why) => failures.push(format!("{}: {why}", path.display())),
            }
        }
        // The kept inputs go different ways (a harness that failed every input early would
        // reach one).
        assert!(classes.len() >= 3, "{}: {classes:?}", target.name);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_seeds_are_the_fixtures_and_reach_the_end() {
    let write = std::env::var_os("FUZZ_WRITE_SEEDS").is_some();
    for target in targets() {
        for (name, input) in (target.seeds)() {
            let path = corpus_dir(target.name).join(format!("seed-{name}.bin"));
            if write {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, &input).unwrap();
            }
            let kept = std::fs::read(&path).unwrap_or_default();
            assert!(
                kept == input,
                "{} is not what the fixtures give: FUZZ_WRITE_SEEDS=1 writes it",
                path.display()
            );
        }
        // The fixtures themselves, unmutated and whole, pass (the checkpoint seeds lack the
        // large tensors, so their load fails: the whole fixtures are checked instead).
        let whole: Vec<Vec<u8>> = match target.name {
            "checkpoint" => CHECKPOINTS
                .iter()
                .map(|f| archive(&checkpoint_files(f)))
                .collect(),
            _ => (target.seeds)().into_iter().map(|(_, i)| i).collect(),
        };
        for input in whole {
            assert_eq!(
                attempt(target.run, input),
                Ok(Ok(())),
                "{}: an unmutated fixture",
                target.name
            );
        }
    }
}

#[test]
fn archives_round_trip_and_keep_to_their_directory() {
    for fixture in CHECKPOINTS {
        let files = checkpoint_files(fixture);
        let unpacked: Files = harness::unpack(&archive(&files))
            .into_iter()
            .map(|(n, b)| (n, b.to_vec()))
            .collect();
        assert_eq!(unpacked, files, "{fixture}");
    }
    let names: Vec<String> = harness::unpack(b"@@ ../x\na\n@@ /etc/y\nb\n@@ ok\nc\n@@ .\nd")
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["ok"]);
}

/// Runs `cases` mutations of `target` from a fixed seed: none may fail.
fn mutations(name: &str, cases: u32) {
    let target = target(name);
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let seed = *b"burn-ascend fuzz: fixed seed 035";
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed));
    let classes = std::cell::RefCell::new(BTreeSet::new());
    let result = runner.run(&target.mutations, |(recipe, input)| {
        let outcome = attempt(target.run, input)
            .map_err(|why| TestCaseError::fail(format!("{why}\nrecipe: {recipe}")))?;
        classes.borrow_mut().insert(class(&outcome));
        Ok(())
    });
    let classes = classes.into_inner();
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
    // The mutations reach many different outcomes, not one early error.
    assert!(classes.len() >= 5, "{name}: {classes:?}");
}

#[test]
fn checkpoint_mutations() {
    mutations("checkpoint", 96);
}

#[test]
fn config_mutations() {
    mutations("config", 512);
}

#[test]
fn tokenizer_mutations() {
    mutations("tokenizer", 96);
}

#[test]
fn chat_template_mutations() {
    mutations("chat_template", 256);
}

#[test]
fn request_mutations() {
    mutations("request", 512);
}

/// The long run: `FUZZ_SECS` seconds (default 60) of each target of `FUZZ_TARGETS` (default all;
/// names separated by commas) from the seed `FUZZ_SEED` (default: the time). Inputs that fail are
/// kept as `tests/fuzz_corpus/<target>/crash-*.json` (the run fails), and those that reach an
/// outcome not seen before, up to 16 a target, as `found-*.json`. Before each input, its recipe
/// is written to `<target dir>/tmp/fuzz-<target>-current.json`: if the process aborts, it is there.
#[test]
#[ignore = "minutes of fuzzing: FUZZ_SECS=300 cargo test --release --test fuzz -- --ignored"]
fn fuzz_for_a_while() {
    let secs: u64 = std::env::var("FUZZ_SECS").map_or(60, |s| s.parse().expect("FUZZ_SECS"));
    let seed: u64 = std::env::var("FUZZ_SEED").map_or_else(
        |_| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        },
        |s| s.parse().expect("FUZZ_SEED"),
    );
    let names = std::env::var("FUZZ_TARGETS").ok();
    let mut failures = Vec::new();
    for target in targets() {
        if names
            .as_ref()
            .is_some_and(|n| !n.split(',').any(|n| n == target.name))
        {
            continue;
        }
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        let mut runner = TestRunner::new_with_rng(
            Config::default(),
            TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
        );
        let mut classes: BTreeSet<String> = corpus(&target)
            .into_iter()
            .filter_map(|(_, input)| attempt(target.run, input).ok())
            .map(|o| class(&o))
            .collect();
        let current = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("fuzz-{}-current.json", target.name));
        let (start, mut runs, mut found) = (Instant::now(), 0u64, 0);
        while start.elapsed() < Duration::from_secs(secs) {
            let (recipe, input) = target
                .mutations
                .new_tree(&mut runner)
                .expect("a mutation")
                .current();
            std::fs::write(&current, &recipe).unwrap();
            runs += 1;
            let name = format!("{:016x}", fxhash(recipe.as_bytes()));
            match attempt(target.run, input) {
                Err(why) => {
                    let path = corpus_dir(target.name).join(format!("crash-{name}.json"));
                    std::fs::write(&path, &recipe).unwrap();
                    failures.push(format!("{}: {why}", path.display()));
                    if why.contains("hangs") {
                        // Its thread still runs: nothing after it would be measured alone.
                        break;
                    }
                }
                Ok(outcome) => {
                    if found < 16 && classes.insert(class(&outcome)) {
                        eprintln!("fuzz {}: new outcome {}", target.name, class(&outcome));
                        let path = corpus_dir(target.name).join(format!("found-{name}.json"));
                        std::fs::write(&path, &recipe).unwrap();
                        found += 1;
                    }
                }
            }
        }
        eprintln!(
            "fuzz {}: {runs} inputs in {:.0} s, {} outcomes known, {found} new inputs kept",
            target.name,
            start.elapsed().as_secs_f64(),
            classes.len()
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// FNV-1a: a stable name for a kept input.
fn fxhash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}
