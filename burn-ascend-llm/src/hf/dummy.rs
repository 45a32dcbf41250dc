//! A checkpoint of any supported `config.json` with random weights, written without Python,
//! as vLLM's `--load-format dummy` serves one: to try and measure the server at a published
//! model's real sizes without its weights. The weights are drawn as transformers initialises
//! them (normal with `initializer_range`, default 0.02; norms 1; biases 0), in bf16, sharded as
//! transformers shards; the tensors' names and shapes are the families' own
//! ([`DecoderSpec::expected`](crate::families::DecoderSpec::expected)).
//!
//! [`Precision::W8A8`] writes the checkpoint as LLM Compressor's W8A8 preset stores it
//! (compressed-tensors `int-quantized`: int8 weights per output channel with their
//! `weight_scale`, activations quantized per token at run time), every linear layer the
//! families may quantize in int8, the others (routers, the LM head) in bf16.
//!
//! The writer streams: it holds one chunk of a tensor at a time, so a checkpoint of any size is
//! written in a few MiB of host memory.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use half::bf16;
use rayon::prelude::*;
use serde_json::{json, Value};

use crate::families::prequant::LinearKind;
use crate::families::spec_of;

/// How [`write_as`] stores the weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// Every tensor in bf16.
    Bf16,
    /// Quantizable linear layers in int8 per output channel (compressed-tensors W8A8), the
    /// rest in bf16.
    W8A8,
}

/// A tensor to write: name, shape, stored in int8 (else bf16).
type Planned = (String, Vec<usize>, bool);

/// What [`write()`] wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    /// The directory.
    pub dir: PathBuf,
    /// Bytes of tensor data (the checkpoint's size less headers and config).
    pub tensor_bytes: u64,
    /// The safetensors files.
    pub shards: usize,
}

/// Writes the checkpoint `config` describes into `dir` (created): `config.json` as given, the
/// weights in bf16 in shards of at most `max_shard_bytes` of tensor data (with their index when
/// there are several), `seed` drawing them.
pub fn write(
    config: &Value,
    dir: &Path,
    max_shard_bytes: u64,
    seed: u64,
) -> std::io::Result<Written> {
    write_as(config, dir, max_shard_bytes, seed, Precision::Bf16)
}

/// [`write()`] in `precision` (for W8A8, config.json gains its `quantization_config`).
pub fn write_as(
    config: &Value,
    dir: &Path,
    max_shard_bytes: u64,
    seed: u64,
    precision: Precision,
) -> std::io::Result<Written> {
    let spec = spec_of(config).map_err(std::io::Error::other)?;
    let std = config
        .get("initializer_range")
        .and_then(Value::as_f64)
        .unwrap_or(0.02) as f32;
    std::fs::create_dir_all(dir)?;
    let expected = spec.expected();
    let int8 = |name: &str| {
        precision == Precision::W8A8 && expected.1.get(name) == Some(&LinearKind::Quantizable)
    };
    let mut config = config.clone();
    if precision == Precision::W8A8 {
        let floats: Vec<&str> = expected
            .1
            .iter()
            .filter(|(_, kind)| **kind == LinearKind::Float)
            .filter_map(|(name, _)| name.strip_suffix(".weight"))
            .collect();
        config["quantization_config"] = w8a8_config(&floats);
    }
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_vec_pretty(&config).map_err(std::io::Error::other)?,
    )?;
    let tensors: Vec<Planned> = expected
        .0
        .iter()
        .flat_map(|(name, shape)| {
            let mut out = vec![(name.clone(), shape.clone(), int8(name))];
            if int8(name) {
                let module = name.strip_suffix(".weight").unwrap_or(name);
                out.push((format!("{module}.weight_scale"), vec![shape[0], 1], false));
            }
            out
        })
        .collect();
    let shards = shards(&tensors, max_shard_bytes);
    let count = shards.len();
    let mut weight_map = serde_json::Map::new();
    let mut tensor_bytes = 0;
    for (k, shard) in shards.iter().enumerate() {
        let file = if count == 1 {
            "model.safetensors".to_string()
        } else {
            format!("model-{:05}-of-{count:05}.safetensors", k + 1)
        };
        for (name, _, _) in shard {
            weight_map.insert(name.clone(), file.clone().into());
        }
        tensor_bytes += write_shard(&dir.join(&file), shard, std, seed)?;
    }
    if count > 1 {
        let index = json!({
            "metadata": {"total_size": tensor_bytes},
            "weight_map": weight_map,
        });
        std::fs::write(
            dir.join("model.safetensors.index.json"),
            serde_json::to_vec_pretty(&index).map_err(std::io::Error::other)?,
        )?;
    }
    Ok(Written {
        dir: dir.to_path_buf(),
        tensor_bytes,
        shards: count,
    })
}

/// LLM Compressor's W8A8 preset as config.json records it, `floats` (modules) kept float.
fn w8a8_config(floats: &[&str]) -> Value {
    let int8 = |strategy: &str, dynamic: bool| {
        json!({"num_bits": 8, "type": "int", "strategy": strategy, "symmetric": true,
               "dynamic": dynamic, "group_size": null, "block_structure": null,
               "actorder": null, "observer": null, "observer_kwargs": {}})
    };
    json!({
        "quant_method": "compressed-tensors",
        "format": "int-quantized",
        "quantization_status": "compressed",
        "config_groups": {"group_0": {
            "targets": ["Linear"],
            "weights": int8("channel", false),
            "input_activations": int8("token", true),
            "output_activations": null,
            "format": "int-quantized",
        }},
        "ignore": floats,
        "kv_cache_scheme": null,
        "sparsity_config": {},
    })
}

/// Bytes of a tensor: one an element in int8, two in bf16.
fn bytes_of(shape: &[usize], int8: bool) -> u64 {
    shape.iter().product::<usize>() as u64 * if int8 { 1 } else { 2 }
}

/// The tensors in order, cut into shards as transformers fills them: a tensor goes to the
/// current shard unless that would take it past the limit.
fn shards(tensors: &[Planned], max: u64) -> Vec<Vec<Planned>> {
    let mut out: Vec<Vec<Planned>> = vec![Vec::new()];
    let mut size = 0;
    for t in tensors {
        let bytes = bytes_of(&t.1, t.2);
        if size > 0 && size + bytes > max {
            out.push(Vec::new());
            size = 0;
        }
        size += bytes;
        out.last_mut().unwrap().push(t.clone());
    }
    out
}

/// Values of one tensor, by its name: how transformers' `_init_weights` leaves them; an int8
/// weight's values and its scales such that they dequantize to the same spread.
#[derive(Clone, Copy)]
enum Init {
    Ones,
    Zeros,
    Normal,
    Scale,
}

/// An int8 weight's values are drawn with this standard deviation (a third of the range:
/// clamping at 127 cuts a 3-sigma tail), its scale being the float one's over it.
const INT8_STD: f32 = 42.0;

fn init_of(name: &str) -> Init {
    if name.ends_with(".weight_scale") {
        Init::Scale
    } else if name.ends_with("norm.weight") || name.ends_with("layernorm.weight") {
        Init::Ones
    } else if name.ends_with(".bias") {
        Init::Zeros
    } else {
        Init::Normal
    }
}

/// One safetensors file: the header, then each tensor drawn chunk by chunk. Returns its bytes
/// of tensor data.
fn write_shard(path: &Path, tensors: &[Planned], std: f32, seed: u64) -> std::io::Result<u64> {
    let mut header = serde_json::Map::new();
    header.insert(
        "__metadata__".into(),
        json!({"format": "pt", "written_by": "burn-ascend-llm hf::dummy"}),
    );
    let mut offset = 0u64;
    for (name, shape, int8) in tensors {
        let end = offset + bytes_of(shape, *int8);
        let dtype = if *int8 { "I8" } else { "BF16" };
        header.insert(
            name.clone(),
            json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, end]}),
        );
        offset = end;
    }
    let mut header = serde_json::to_vec(&header).map_err(std::io::Error::other)?;
    // The format pads the header with spaces to a multiple of 8 bytes.
    while header.len() % 8 != 0 {
        header.push(b' ');
    }
    let mut out = BufWriter::with_capacity(1 << 20, File::create(path)?);
    out.write_all(&(header.len() as u64).to_le_bytes())?;
    out.write_all(&header)?;
    const CHUNK: usize = 1 << 22;
    for (name, shape, int8) in tensors {
        let n: usize = shape.iter().product();
        let init = init_of(name);
        let tensor_seed = seed ^ hash(name);
        let size = if *int8 { 1 } else { 2 };
        let mut chunk = vec![0u8; CHUNK.min(n) * size];
        for start in (0..n).step_by(CHUNK) {
            let len = CHUNK.min(n - start);
            chunk[..len * size]
                .par_chunks_mut(size << 12)
                .enumerate()
                .for_each(|(c, bytes)| {
                    for (i, b) in bytes.chunks_exact_mut(size).enumerate() {
                        let index = (start + c * (1 << 12) + i) as u64;
                        let v = match init {
                            Init::Ones => 1.0,
                            Init::Zeros => 0.0,
                            Init::Normal if *int8 => INT8_STD * normal(tensor_seed, index),
                            Init::Normal => std * normal(tensor_seed, index),
                            Init::Scale => std / INT8_STD,
                        };
                        if *int8 {
                            b[0] = v.round().clamp(-127.0, 127.0) as i8 as u8;
                        } else {
                            b.copy_from_slice(&bf16::from_f32(v).to_le_bytes());
                        }
                    }
                });
            out.write_all(&chunk[..len * size])?;
        }
    }
    out.flush()?;
    Ok(offset)
}

/// FNV-1a of a name: each tensor draws its own values.
fn hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A standard normal value for `(seed, index)`: the sum of four uniform draws of a
/// counter-based hash, rescaled (Irwin-Hall; close enough to normal for weights that only need
/// the right spread).
fn normal(seed: u64, index: u64) -> f32 {
    let mut x = seed ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut sum = 0.0f32;
    for _ in 0..4 {
        x = splitmix(x);
        sum += (x >> 40) as f32 / (1u64 << 24) as f32;
    }
    // Four U(0, 1): mean 2, variance 1/3.
    (sum - 2.0) * 3f32.sqrt()
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
