//! A Hugging Face checkpoint directory opened for reading: `config.json` and the safetensors
//! file(s), memory-mapped, every header parsed and cross-checked before any tensor is read.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};

use burn::tensor::{DType, TensorData};
use half::{bf16, f16};
use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};
use serde::Deserialize;

use super::CheckpointError;

/// The single-file weights transformers writes below its default shard size.
pub(crate) const SINGLE: &str = "model.safetensors";
/// The index transformers writes beside sharded weights.
pub(crate) const INDEX: &str = "model.safetensors.index.json";
/// The model's configuration.
pub(crate) const CONFIG: &str = "config.json";

/// Where a tensor is and what it holds, as the checkpoint's headers declare it.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// The tensor's shape (row-major).
    pub shape: Vec<usize>,
    /// The element type stored in the file (U8 for FP8 bytes: see `float8`).
    pub dtype: DType,
    /// The safetensors file holding the tensor.
    pub file: PathBuf,
    /// The elements are FP8 e4m3 (`F8_E4M3`, as DeepSeek-V3 publishes its weights), a type
    /// Burn has none for: they are held as their bytes (`dtype` U8) and decoded on the device.
    pub float8: bool,
}

/// The element types an expected tensor may have ([`Checkpoint::check`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Element {
    /// F32, F16 or BF16.
    Float,
    /// Exactly this dtype (int8 weights, int32 biases).
    Exactly(DType),
    /// A float type or this one (an offset some writers store as int8, others as float).
    FloatOr(DType),
    /// FP8 e4m3 (`F8_E4M3`).
    Float8,
}

impl Element {
    fn admits(self, info: &TensorInfo) -> bool {
        let float = matches!(info.dtype, DType::F32 | DType::F16 | DType::BF16) && !info.float8;
        match self {
            Element::Float => float,
            Element::Exactly(d) => info.dtype == d && !info.float8,
            Element::FloatOr(d) => float || (info.dtype == d && !info.float8),
            Element::Float8 => info.float8,
        }
    }
}

impl std::fmt::Display for Element {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Element::Float => f.write_str("F32, F16 or BF16"),
            Element::Exactly(d) => write!(f, "{d:?}"),
            Element::FloatOr(d) => write!(f, "F32, F16, BF16 or {d:?}"),
            Element::Float8 => f.write_str("F8_E4M3"),
        }
    }
}

#[derive(Debug)]
struct Entry {
    info: TensorInfo,
    /// The dtype as the file names it, for messages about dtypes Burn has no reader for.
    stored: Dtype,
    shard: usize,
    /// Byte range in the shard's map (header included).
    start: usize,
    end: usize,
}

/// `model.safetensors.index.json`: only the tensor -> shard map matters for reading.
#[derive(Deserialize)]
struct Index {
    weight_map: BTreeMap<String, String>,
}

/// A Hugging Face model directory opened for reading. Holds `config.json` and a read-only memory
/// map of each safetensors file; tensor data is only touched by [`Checkpoint::read`].
#[derive(Debug)]
pub struct Checkpoint {
    dir: PathBuf,
    config: serde_json::Value,
    maps: Vec<Mmap>,
    files: Vec<PathBuf>,
    tensors: BTreeMap<String, Entry>,
}

impl Checkpoint {
    /// Opens a Hugging Face model directory: reads `config.json`, then `model.safetensors` or the
    /// shards named by `model.safetensors.index.json` (memory-mapped; headers parsed and checked
    /// against the file sizes and the index; no tensor data read).
    ///
    /// Fails with a [`CheckpointError`] naming the file for a missing or unparsable file, an index
    /// naming a missing shard or disagreeing with the shards' headers, a tensor in two shards, and
    /// a dtype Burn has no type for (FP4, FP8 but e4m3, complex).
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        let dir = dir.as_ref().to_path_buf();
        if !dir.is_dir() {
            return Err(CheckpointError::MissingFile {
                path: dir,
                why: "a checkpoint is a directory (config.json, model.safetensors...)".into(),
            });
        }
        let config_path = dir.join(CONFIG);
        let config: serde_json::Value = read_json(&config_path, "every checkpoint has one")?;
        if !config.is_object() {
            return Err(CheckpointError::unreadable(
                &config_path,
                "not a JSON object",
            ));
        }

        let single = dir.join(SINGLE);
        let index_path = dir.join(INDEX);
        let (files, weight_map) = if single.is_file() {
            (vec![single], None)
        } else if index_path.is_file() {
            let index: Index = read_json(&index_path, "sharded weights need it")?;
            if index.weight_map.is_empty() {
                return Err(CheckpointError::unreadable(
                    &index_path,
                    "its weight_map is empty: it names no tensor and no shard",
                ));
            }
            let mut files = BTreeSet::new();
            for shard in index.weight_map.values() {
                // A shard is a file beside the index, never a path leading elsewhere.
                if Path::new(shard).file_name() != Some(shard.as_ref()) {
                    return Err(CheckpointError::unreadable(
                        &index_path,
                        format!("shard name {shard:?} is not a plain file name"),
                    ));
                }
                files.insert(dir.join(shard));
            }
            for file in &files {
                if !file.is_file() {
                    return Err(CheckpointError::MissingFile {
                        path: file.clone(),
                        why: format!("the index {} names it", index_path.display()),
                    });
                }
            }
            (files.into_iter().collect(), Some(index.weight_map))
        } else if dir.join("pytorch_model.bin").exists()
            || dir.join("pytorch_model.bin.index.json").exists()
        {
            return Err(CheckpointError::Unsupported(format!(
                "{} holds pytorch_model.bin (pickle) weights: only safetensors are read \
                 (save the model again with safe_serialization=True)",
                dir.display()
            )));
        } else {
            return Err(CheckpointError::MissingFile {
                path: single,
                why: format!("neither it nor {INDEX} is in {}", dir.display()),
            });
        };

        let mut maps = Vec::with_capacity(files.len());
        let mut tensors: BTreeMap<String, Entry> = BTreeMap::new();
        for (shard, path) in files.iter().enumerate() {
            let file = File::open(path).map_err(|e| CheckpointError::unreadable(path, e))?;
            // SAFETY: the map is read-only and private to this value. Another process truncating
            // the file while it is mapped would fault reads, as with every mapped checkpoint
            // loader; `save` never rewrites a file in place (it renames a new one over it).
            let map =
                unsafe { Mmap::map(&file) }.map_err(|e| CheckpointError::unreadable(path, e))?;
            let (header_len, metadata) = SafeTensors::read_metadata(&map).map_err(|e| {
                CheckpointError::unreadable(
                    path,
                    format!(
                        "not a valid safetensors file of {} bytes (truncated or another format?): {e}",
                        map.len()
                    ),
                )
            })?;
            // read_metadata checked that the offsets tile the data exactly up to the file's end.
            let data_start = 8 + header_len;
            for (name, info) in metadata.tensors() {
                let float8 = info.dtype == Dtype::F8_E4M3;
                let dtype = match float8 {
                    true => DType::U8,
                    false => burn_dtype(info.dtype).ok_or_else(|| CheckpointError::Dtype {
                        name: name.clone(),
                        file: path.clone(),
                        dtype: info.dtype.to_string(),
                    })?,
                };
                let entry = Entry {
                    info: TensorInfo {
                        shape: info.shape.clone(),
                        dtype,
                        file: path.clone(),
                        float8,
                    },
                    stored: info.dtype,
                    shard,
                    start: data_start + info.data_offsets.0,
                    end: data_start + info.data_offsets.1,
                };
                if let Some(first) = tensors.get(&name) {
                    return Err(CheckpointError::Duplicate {
                        name,
                        first: first.info.file.clone(),
                        second: path.clone(),
                    });
                }
                tensors.insert(name, entry);
            }
            maps.push(map);
        }

        if let Some(weight_map) = weight_map {
            for (name, shard) in &weight_map {
                let listed = dir.join(shard);
                let Some(entry) = tensors.get(name) else {
                    return Err(CheckpointError::MissingTensor {
                        name: name.clone(),
                        files: vec![listed],
                    });
                };
                if entry.info.file != listed {
                    return Err(CheckpointError::unreadable(
                        &index_path,
                        format!(
                            "it puts tensor {name} in {}, but {} holds it",
                            listed.display(),
                            entry.info.file.display()
                        ),
                    ));
                }
            }
            if let Some((name, entry)) = tensors.iter().find(|(n, _)| !weight_map.contains_key(*n))
            {
                return Err(CheckpointError::unreadable(
                    &index_path,
                    format!(
                        "tensor {name} of {} is not in its weight_map",
                        entry.info.file.display()
                    ),
                ));
            }
        }

        Ok(Self {
            dir,
            config,
            maps,
            files,
            tensors,
        })
    }

    /// The checkpoint's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The parsed `config.json` (a JSON object).
    pub fn config(&self) -> &serde_json::Value {
        &self.config
    }

    /// The safetensors files of the checkpoint, in the order they were opened.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// Shape, dtype and file of the tensor called `name`, if the checkpoint has one.
    pub fn info(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.get(name).map(|e| &e.info)
    }

    /// The names of all tensors, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// The dtype the checkpoint's weights are published in, as `config.json` says it
    /// (`dtype` since transformers 4.56, `torch_dtype` before): `None` when it says neither. A
    /// value other than `float32`, `float16` and `bfloat16` is an error naming it.
    pub fn dtype(&self) -> Result<Option<DType>, CheckpointError> {
        let config_path = self.dir.join(CONFIG);
        let Some(value) = ["dtype", "torch_dtype"]
            .iter()
            .find_map(|key| self.config.get(*key).filter(|v| !v.is_null()))
        else {
            return Ok(None);
        };
        match value.as_str() {
            Some("float32") => Ok(Some(DType::F32)),
            Some("float16") => Ok(Some(DType::F16)),
            Some("bfloat16") => Ok(Some(DType::BF16)),
            _ => Err(CheckpointError::unreadable(
                &config_path,
                format!("dtype {value} is not float32, float16 or bfloat16"),
            )),
        }
    }

    /// The tensor's bytes as the file stores them (little-endian, row-major), borrowed from the
    /// file's map, with its shape, dtype and file.
    pub fn bytes(&self, name: &str) -> Result<(&TensorInfo, &[u8]), CheckpointError> {
        let entry = self.entry(name)?;
        Ok((&entry.info, &self.maps[entry.shard][entry.start..entry.end]))
    }

    /// Checks, before any data is read, that every `expected` tensor is present with its shape and
    /// an element type its [`Element`] admits, and that no other tensor is there but those
    /// `ignored` accepts. The first problem found is returned, expected tensors (in the given
    /// order) first, then unexpected ones (sorted): its message names the tensor, the file, and
    /// the expected and found shapes or dtypes.
    pub fn check(
        &self,
        expected: &[(String, Vec<usize>, Element)],
        ignored: impl Fn(&str) -> bool,
    ) -> Result<(), CheckpointError> {
        for (name, shape, element) in expected {
            let entry = self.entry(name)?;
            if &entry.info.shape != shape {
                return Err(CheckpointError::Shape {
                    name: name.clone(),
                    file: entry.info.file.clone(),
                    expected: shape.clone(),
                    found: entry.info.shape.clone(),
                });
            }
            if !element.admits(&entry.info) {
                return Err(CheckpointError::ElementType {
                    name: name.clone(),
                    file: entry.info.file.clone(),
                    expected: element.to_string(),
                    found: entry.stored.to_string(),
                });
            }
        }
        let wanted: BTreeSet<&str> = expected.iter().map(|(n, _, _)| n.as_str()).collect();
        match self
            .tensors
            .iter()
            .find(|(name, _)| !wanted.contains(name.as_str()) && !ignored(name))
        {
            Some((name, entry)) => Err(CheckpointError::UnexpectedTensor {
                name: name.clone(),
                file: entry.info.file.clone(),
            }),
            None => Ok(()),
        }
    }

    /// The tensor's data converted to `dtype` (F32, F16 or BF16) from the F32, F16 or BF16 it is
    /// stored as, decoded from the map in one pass into the returned data. Widening conversions
    /// are exact; narrowing ones round to nearest even, as torch's `Tensor.to` does.
    pub fn read(&self, name: &str, dtype: DType) -> Result<TensorData, CheckpointError> {
        let entry = self.entry(name)?;
        readable(name, entry)?;
        let bytes = &self.maps[entry.shard][entry.start..entry.end];
        let shape = entry.info.shape.clone();
        Ok(match (entry.info.dtype, dtype) {
            (DType::F32, DType::F32) => TensorData::new(decode(bytes, f32::from_le_bytes), shape),
            (DType::F32, DType::F16) => TensorData::new(
                decode(bytes, |b| f16::from_f32(f32::from_le_bytes(b))),
                shape,
            ),
            (DType::F32, DType::BF16) => TensorData::new(
                decode(bytes, |b| bf16::from_f32(f32::from_le_bytes(b))),
                shape,
            ),
            (DType::F16, DType::F32) => {
                TensorData::new(decode(bytes, |b| f16::from_le_bytes(b).to_f32()), shape)
            }
            (DType::F16, DType::F16) => TensorData::new(decode(bytes, f16::from_le_bytes), shape),
            (DType::F16, DType::BF16) => TensorData::new(
                decode(bytes, |b| bf16::from_f32(f16::from_le_bytes(b).to_f32())),
                shape,
            ),
            (DType::BF16, DType::F32) => {
                TensorData::new(decode(bytes, |b| bf16::from_le_bytes(b).to_f32()), shape)
            }
            (DType::BF16, DType::F16) => TensorData::new(
                decode(bytes, |b| f16::from_f32(bf16::from_le_bytes(b).to_f32())),
                shape,
            ),
            (DType::BF16, DType::BF16) => {
                TensorData::new(decode(bytes, bf16::from_le_bytes), shape)
            }
            (_, target) => {
                return Err(CheckpointError::Unsupported(format!(
                    "reading tensor {name} as {target:?}: the targets are F32, F16 and BF16"
                )))
            }
        })
    }

    fn entry(&self, name: &str) -> Result<&Entry, CheckpointError> {
        self.tensors
            .get(name)
            .ok_or_else(|| CheckpointError::MissingTensor {
                name: name.to_string(),
                files: self.files.clone(),
            })
    }
}

/// Only float weights are decoded on the host: integer, FP8 and f64 tensors are not.
fn readable(name: &str, entry: &Entry) -> Result<(), CheckpointError> {
    match entry.info.dtype {
        DType::F32 | DType::F16 | DType::BF16 if !entry.info.float8 => Ok(()),
        _ => Err(CheckpointError::Dtype {
            name: name.to_string(),
            file: entry.info.file.clone(),
            dtype: entry.stored.to_string(),
        }),
    }
}

/// Little-endian elements of `N` bytes, each converted by `f`, in one pass.
fn decode<const N: usize, T>(bytes: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
    bytes
        .chunks_exact(N)
        .map(|chunk| {
            let mut element = [0u8; N];
            element.copy_from_slice(chunk);
            f(element)
        })
        .collect()
}

/// The Burn dtype of a safetensors dtype; `None` for those Burn has no element type for.
fn burn_dtype(dtype: Dtype) -> Option<DType> {
    Some(match dtype {
        Dtype::F32 => DType::F32,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::F64 => DType::F64,
        Dtype::I64 => DType::I64,
        Dtype::I32 => DType::I32,
        Dtype::I16 => DType::I16,
        Dtype::I8 => DType::I8,
        Dtype::U64 => DType::U64,
        Dtype::U32 => DType::U32,
        Dtype::U16 => DType::U16,
        Dtype::U8 => DType::U8,
        Dtype::BOOL => DType::Bool(burn::tensor::BoolStore::Native),
        _ => return None,
    })
}

/// Reads and parses a JSON file; a missing one is a [`CheckpointError::MissingFile`] saying `why`
/// it is needed.
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(
    path: &Path,
    why: &str,
) -> Result<T, CheckpointError> {
    let text = std::fs::read_to_string(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => CheckpointError::MissingFile {
            path: path.to_path_buf(),
            why: why.to_string(),
        },
        _ => CheckpointError::unreadable(path, e),
    })?;
    serde_json::from_str(&text)
        .map_err(|e| CheckpointError::unreadable(path, format!("invalid JSON: {e}")))
}
