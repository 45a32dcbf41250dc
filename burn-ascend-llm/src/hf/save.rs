//! Writing a checkpoint back in the layout transformers' `save_pretrained` writes and
//! `from_pretrained` reads.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use burn::tensor::{DType, TensorData};
use safetensors::Dtype;

use super::checkpoint::{CONFIG, INDEX, SINGLE};
use super::{Checkpoint, CheckpointError};

/// Files beside the weights that describe the tokenizer and generation defaults, copied from the
/// source checkpoint when it has them.
const COPIED: &[&str] = &[
    "tokenizer.json",
    "tokenizer_config.json",
    "generation_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
];

/// A tensor handed to the safetensors writer without copying its bytes.
struct Tensor<'a> {
    data: &'a TensorData,
    dtype: Dtype,
}

impl safetensors::View for Tensor<'_> {
    fn dtype(&self) -> Dtype {
        self.dtype
    }

    fn shape(&self) -> &[usize] {
        self.data.shape.as_slice()
    }

    // Burn holds the host's byte order; every host Ascend ships with (aarch64, x86_64) is
    // little-endian, as the format is.
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.data.as_bytes())
    }

    fn data_len(&self) -> usize {
        self.data.as_bytes().len()
    }
}

/// Writes a checkpoint into `dir` (created if needed) in the layout transformers reads:
/// `config.json` (`config` as given), the weights as `model.safetensors`, or, when their total
/// size exceeds `max_shard_bytes`, as `model-0000k-of-0000n.safetensors` shards filled greedily in
/// the given order plus `model.safetensors.index.json`; then the tokenizer and generation files
/// (`tokenizer.json`, `tokenizer_config.json`, `generation_config.json`, `special_tokens_map.json`
/// and the like) that `from`'s directory has.
///
/// Tensors keep the dtype of their `TensorData` (F32, F16 or BF16; others are refused before
/// anything is written). Each file is written beside its destination and renamed over it, so a
/// [`Checkpoint`] still mapping the old files of `dir` keeps reading them; weight files of an
/// earlier save that this one does not write (a single file replaced by shards, or the reverse)
/// are removed.
pub fn save(
    dir: &Path,
    config: &serde_json::Value,
    tensors: Vec<(String, TensorData)>,
    from: Option<&Checkpoint>,
    max_shard_bytes: Option<usize>,
) -> Result<(), CheckpointError> {
    let mut names = BTreeSet::new();
    let mut views = Vec::with_capacity(tensors.len());
    for (name, data) in &tensors {
        let dtype = match data.dtype {
            DType::F32 => Dtype::F32,
            DType::F16 => Dtype::F16,
            DType::BF16 => Dtype::BF16,
            other => {
                return Err(CheckpointError::Unsupported(format!(
                    "saving tensor {name} of dtype {other:?}: F32, F16 and BF16 are saved"
                )))
            }
        };
        if !names.insert(name.as_str()) {
            return Err(CheckpointError::write(
                dir,
                format!("tensor {name} is given twice"),
            ));
        }
        views.push((name.as_str(), Tensor { data, dtype }));
    }
    std::fs::create_dir_all(dir).map_err(|e| CheckpointError::write(dir, e))?;

    let shards = plan_shards(&views, max_shard_bytes);
    let total_size: usize = views.iter().map(|(_, t)| t.data.as_bytes().len()).sum();
    let count = shards.len();
    let mut written = BTreeSet::new();
    let mut weight_map = BTreeMap::new();
    let mut views = views.into_iter();
    for (k, len) in shards.into_iter().enumerate() {
        let file = if count == 1 {
            SINGLE.to_string()
        } else {
            format!("model-{:05}-of-{count:05}.safetensors", k + 1)
        };
        let shard: Vec<_> = views.by_ref().take(len).collect();
        for (name, _) in &shard {
            weight_map.insert(name.to_string(), file.clone());
        }
        // transformers refuses safetensors whose metadata names no framework it knows.
        let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
        let path = dir.join(&file);
        write_atomically(&path, |tmp| {
            safetensors::serialize_to_file(shard, Some(metadata), tmp).map_err(|e| e.to_string())
        })?;
        written.insert(file);
    }
    if count > 1 {
        let index = serde_json::json!({
            "metadata": { "total_size": total_size },
            "weight_map": weight_map,
        });
        write_json(&dir.join(INDEX), &index)?;
        written.insert(INDEX.to_string());
    }
    write_json(&dir.join(CONFIG), config)?;
    remove_stale_weights(dir, &written)?;

    if let Some(from) = from {
        for name in COPIED {
            let source = from.dir().join(name);
            let target = dir.join(name);
            if !source.is_file() || same_file(&source, &target) {
                continue;
            }
            write_atomically(&target, |tmp| {
                std::fs::copy(&source, tmp)
                    .map(drop)
                    .map_err(|e| format!("copying {}: {e}", source.display()))
            })?;
        }
    }
    Ok(())
}

/// How many tensors (in order) each shard takes: one shard when no limit is given or everything
/// fits; otherwise a new shard starts when the next tensor would take the current one past the
/// limit (a tensor larger than the limit gets a shard of its own), as huggingface_hub's
/// `split_torch_state_dict_into_shards` does for transformers.
fn plan_shards(views: &[(&str, Tensor<'_>)], max_shard_bytes: Option<usize>) -> Vec<usize> {
    let sizes = views.iter().map(|(_, t)| t.data.as_bytes().len());
    let Some(max) = max_shard_bytes.filter(|&max| sizes.clone().sum::<usize>() > max) else {
        return vec![views.len()];
    };
    let mut shards: Vec<(usize, usize)> = Vec::new();
    for size in sizes {
        match shards.last_mut() {
            Some((count, bytes)) if *bytes + size <= max => {
                *count += 1;
                *bytes += size;
            }
            _ => shards.push((1, size)),
        }
    }
    shards.into_iter().map(|(count, _)| count).collect()
}

fn write_json(path: &Path, value: &serde_json::Value) -> Result<(), CheckpointError> {
    let mut text =
        serde_json::to_string_pretty(value).map_err(|e| CheckpointError::write(path, e))?;
    text.push('\n');
    write_atomically(path, |tmp| {
        std::fs::write(tmp, text).map_err(|e| e.to_string())
    })
}

/// Runs `write` on a temporary file beside `path`, then renames it over `path`: a reader (or a
/// memory map) of the old file never sees a half-written one.
fn write_atomically(
    path: &Path,
    write: impl FnOnce(&Path) -> Result<(), String>,
) -> Result<(), CheckpointError> {
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(path.file_name().unwrap_or_default());
    tmp_name.push(".tmp");
    let tmp: PathBuf = path.with_file_name(tmp_name);
    let result = write(&tmp).and_then(|()| std::fs::rename(&tmp, path).map_err(|e| e.to_string()));
    result.map_err(|why| {
        // Best effort: the error reported is the write's, not the clean-up's.
        let _ = std::fs::remove_file(&tmp);
        CheckpointError::write(path, why)
    })
}

/// Weight files an earlier save left that this one did not write: transformers would read a
/// stale `model.safetensors` before a new index.
fn remove_stale_weights(dir: &Path, written: &BTreeSet<String>) -> Result<(), CheckpointError> {
    let entries = std::fs::read_dir(dir).map_err(|e| CheckpointError::write(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| CheckpointError::write(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_weight_file(&name) && !written.contains(&name) {
            let path = entry.path();
            std::fs::remove_file(&path).map_err(|e| {
                CheckpointError::write(&path, format!("removing a stale file: {e}"))
            })?;
        }
    }
    Ok(())
}

/// `model.safetensors`, its index, or a shard `model-<digits>-of-<digits>.safetensors`.
fn is_weight_file(name: &str) -> bool {
    if name == SINGLE || name == INDEX {
        return true;
    }
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    name.strip_prefix("model-")
        .and_then(|rest| rest.strip_suffix(".safetensors"))
        .and_then(|rest| rest.split_once("-of-"))
        .is_some_and(|(k, n)| digits(k) && digits(n))
}

/// Whether two paths name one file (copying a file onto itself would empty it).
fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
