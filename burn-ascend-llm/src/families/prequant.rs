//! Pre-quantized checkpoints: which format a checkpoint is in, how each linear layer's weight is
//! stored, and the tensors (names, shapes, element types) that takes.
//!
//! Three formats, told apart by the checkpoint itself (no option asks for one):
//! - **msModelSlim** as vllm-ascend reads it: `quant_model_description.json` beside the weights
//!   names each tensor's scheme (`FLOAT`, `W8A16`, `W8A8_DYNAMIC`, `W8A8`); an int8 layer keeps
//!   its Hugging Face name for `weight` and adds `weight_scale`, `weight_offset` `[out, 1]`
//!   and, static `W8A8` only, `input_scale`, `input_offset` `[1]`, `deq_scale`, `quant_bias`
//!   `[out]` (vllm_ascend/quantization/modelslim_config.py, methods/w8a16.py,
//!   w8a8_dynamic.py, w8a8_static.py).
//! - **compressed-tensors** as LLM Compressor writes it (`quantization_config` with
//!   `quant_method` `compressed-tensors` in config.json): `int-quantized` int8 `weight`, or
//!   `pack-quantized` `weight_packed` (int32, four int8 + 128 to a word) and `weight_shape`,
//!   with `weight_scale [out, 1]`; per-channel symmetric int8 weights, activations dynamic per
//!   token (W8A8) or not quantized (W8A16) (compressed_tensors 0.19 compressors/
//!   naive_quantized/base.py, pack_quantized/helpers.py `pack_to_int32`).
//! - **block FP8** as DeepSeek-V3/R1 publish it (`quant_method` `fp8`, `weight_block_size`):
//!   e4m3 `weight` and f32 `weight_scale_inv` per block, `w = fp8 * scale_inv` (DeepSeek-V3
//!   inference/kernel.py `weight_dequant`). Atlas A2 has no FP8 arithmetic: the weights are
//!   dequantized on the device as they load, then serve as float (or `--quantize`d).
//!
//! Everything a format leaves that the decoder has no operator path for is refused by name:
//! quantized routers, LM heads, embeddings and MLA's `kv_b_proj` (vllm-ascend refuses it too:
//! vllm_ascend/attention/mla_v1.py), group-wise scales, asymmetric W8A8 weights, quantized KV
//! caches, schemes other than these.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use burn::tensor::DType;
use serde_json::Value;

use super::blocks::quant::Quantize;
use super::weights::Expected;
use super::LoadError;
use crate::hf::{Checkpoint, Element};

/// msModelSlim's description of every tensor's scheme, beside the weights.
pub const DESCRIPTION: &str = "quant_model_description.json";

/// An msModelSlim scheme with an int8 weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelSlim {
    /// int8 weights, float activations: `(w + weight_offset) * weight_scale`
    /// (aclnnWeightQuantBatchMatmulV2's antiquant, methods/w8a16.py).
    W8A16,
    /// int8 weights and activations quantized per token at run time; the weights symmetric
    /// (methods/w8a8_dynamic.py passes no `weight_offset` to its kernels).
    W8A8Dynamic,
    /// int8 activations quantized per tensor with a calibrated scale and offset,
    /// `x_q = round(x / input_scale + input_offset)`, then
    /// `(x_q @ w + quant_bias) * deq_scale` (methods/w8a8_static.py: npu_quantize and
    /// npu_quant_matmul; `quant_bias` carries the input offset's and the float bias's terms).
    W8A8Static,
}

/// How a linear layer's int8 weight is stored, and how its activations are quantized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Int8 {
    /// msModelSlim's layout.
    ModelSlim(ModelSlim),
    /// compressed-tensors' layout.
    Compressed {
        /// `weight_packed` + `weight_shape` (pack-quantized) rather than an int8 `weight`.
        packed: bool,
        /// Activations quantized per token at run time (W8A8); none (W8A16) otherwise.
        dynamic: bool,
    },
}

impl Int8 {
    /// The int8 operators' mode the layer runs in.
    pub fn mode(self) -> Quantize {
        match self {
            Int8::ModelSlim(ModelSlim::W8A16) | Int8::Compressed { dynamic: false, .. } => {
                Quantize::W8A16
            }
            _ => Quantize::W8A8,
        }
    }

    /// The scheme's name in its format.
    pub fn name(self) -> &'static str {
        match self {
            Int8::ModelSlim(ModelSlim::W8A16) => "W8A16",
            Int8::ModelSlim(ModelSlim::W8A8Dynamic) => "W8A8_DYNAMIC",
            Int8::ModelSlim(ModelSlim::W8A8Static) => "W8A8",
            Int8::Compressed { dynamic: true, .. } => "W8A8 (int8 per channel, dynamic per token)",
            Int8::Compressed { dynamic: false, .. } => "W8A16 (int8 per channel)",
        }
    }

    /// The tensors `{module}.{suffix}` of a `[out, in]` layer stored so.
    fn tensors(self, out: usize, d_in: usize) -> Vec<(&'static str, Vec<usize>, Element)> {
        let int8 = Element::Exactly(DType::I8);
        let mut t = match self {
            Int8::Compressed { packed: true, .. } => vec![
                (
                    "weight_packed",
                    vec![out, d_in.div_ceil(4)],
                    Element::Exactly(DType::I32),
                ),
                ("weight_shape", vec![2], Element::Exactly(DType::I64)),
            ],
            _ => vec![("weight", vec![out, d_in], int8)],
        };
        t.push(("weight_scale", vec![out, 1], Element::Float));
        if let Int8::ModelSlim(scheme) = self {
            t.push(("weight_offset", vec![out, 1], Element::Float));
            if scheme == ModelSlim::W8A8Static {
                t.extend([
                    ("input_scale", vec![1], Element::Float),
                    ("input_offset", vec![1], Element::FloatOr(DType::I8)),
                    // The f32 form vllm-ascend declares for bf16 models; fp16 models' int64
                    // (aclnnTransQuantParamV2) form is refused by its dtype.
                    ("deq_scale", vec![out], Element::Exactly(DType::F32)),
                    ("quant_bias", vec![out], Element::Exactly(DType::I32)),
                ]);
            }
        }
        t
    }
}

/// How a linear layer's weight is stored in the checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// Float, as an unquantized checkpoint's.
    Float,
    /// int8, in a format's layout.
    Int8(Int8),
    /// FP8 e4m3 with an f32 `weight_scale_inv` per block of `[rows, cols]` of the `[out, in]`
    /// weight.
    Fp8 {
        /// The block's rows and columns (`weight_block_size`).
        block: [usize; 2],
    },
}

/// What a checkpoint's format stores for its linear layers, checked against its files.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The format, as the load report says it.
    pub format: String,
    storages: BTreeMap<String, Storage>,
}

impl Plan {
    /// How the linear layer `module` (its name without `.weight`) is stored.
    pub fn storage(&self, module: &str) -> Storage {
        self.storages.get(module).copied().unwrap_or(Storage::Float)
    }

    /// The int8 mode of the model: W8A8 when any layer's activations are quantized, else W8A16
    /// when any weight is int8; `None` when none is (FP8 loads float).
    pub fn int8_mode(&self) -> Option<Quantize> {
        let modes = self.storages.values().filter_map(|s| match s {
            Storage::Int8(i) => Some(i.mode()),
            _ => None,
        });
        modes.max_by_key(|m| *m == Quantize::W8A8)
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for s in self.storages.values() {
            let name = match s {
                Storage::Float => "float".to_string(),
                Storage::Int8(i) => i.name().to_string(),
                Storage::Fp8 { block } => format!("FP8 e4m3, blocks {}x{}", block[0], block[1]),
            };
            *counts.entry(name).or_default() += 1;
        }
        let parts: Vec<String> = counts.iter().map(|(n, c)| format!("{c} {n}")).collect();
        write!(f, "{}: {} linear layers", self.format, parts.join(", "))
    }
}

/// A checkpoint's pre-quantization format.
#[derive(Debug, Clone)]
enum Format {
    ModelSlim {
        description: BTreeMap<String, String>,
        path: PathBuf,
    },
    Compressed(Compressed),
    Fp8 {
        block: [usize; 2],
    },
}

/// A compressed-tensors config: which modules each scheme targets.
#[derive(Debug, Clone)]
struct Compressed {
    groups: Vec<(Vec<Target>, Int8)>,
    ignore: Vec<Target>,
}

/// A compressed-tensors target or ignore entry: a module class, a regex (`re:`) or a name.
#[derive(Debug, Clone)]
enum Target {
    /// `Linear`: every linear layer.
    Linear,
    Regex(regex::Regex),
    Name(String),
}

impl Target {
    fn parse(entry: &str, field: &str) -> Result<Self, LoadError> {
        if entry == "Linear" {
            Ok(Target::Linear)
        } else if let Some(re) = entry.strip_prefix("re:") {
            regex::Regex::new(re)
                .map(Target::Regex)
                .map_err(|e| config_error(field, format!("{entry:?} is not a regex: {e}")))
        } else if entry.chars().next().is_some_and(char::is_uppercase) {
            // compressed-tensors matches class names too; the decoder has Linear layers only.
            Err(config_error(
                field,
                format!("target class {entry:?} (only Linear layers are quantized here)"),
            ))
        } else {
            Ok(Target::Name(entry.to_string()))
        }
    }

    /// compressed-tensors' `is_match`: a class, a regex matched from the name's start
    /// (Python's `re.match`), or the name itself.
    fn matches(&self, module: &str) -> bool {
        match self {
            Target::Linear => true,
            Target::Regex(re) => re.find(module).is_some_and(|m| m.start() == 0),
            Target::Name(n) => n == module,
        }
    }
}

fn config_error(field: &str, why: String) -> LoadError {
    LoadError::Quantized {
        tensor: format!("config.json quantization_config.{field}"),
        why,
    }
}

impl Format {
    /// The checkpoint's format, if it is pre-quantized: refused by name when it is one this
    /// loader does not read.
    fn detect(checkpoint: &Checkpoint) -> Result<Option<Self>, LoadError> {
        let description = checkpoint.dir().join(DESCRIPTION);
        let config = checkpoint.config().get("quantization_config");
        if description.is_file() {
            if let Some(method) = config.and_then(|c| c.get("quant_method")) {
                return Err(LoadError::Quantized {
                    tensor: description.display().to_string(),
                    why: format!(
                        "config.json's quantization_config (quant_method {method}) says another \
                         format: one of them is stale"
                    ),
                });
            }
            return Self::modelslim(&description).map(Some);
        }
        let Some(config) = config else {
            return Ok(None);
        };
        match config.get("quant_method").and_then(Value::as_str) {
            Some("compressed-tensors") => {
                Compressed::parse(config).map(|c| Some(Format::Compressed(c)))
            }
            Some("fp8") => Self::fp8(config).map(Some),
            other => Err(config_error(
                "quant_method",
                format!(
                    "{} is not read (compressed-tensors, fp8 and msModelSlim's {DESCRIPTION} are)",
                    other.map_or("(none)".to_string(), |m| format!("{m:?}"))
                ),
            )),
        }
    }

    fn modelslim(path: &Path) -> Result<Self, LoadError> {
        let fail = |why: String| LoadError::Quantized {
            tensor: path.display().to_string(),
            why,
        };
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        let json: Value =
            serde_json::from_str(&text).map_err(|e| fail(format!("invalid JSON: {e}")))?;
        let object = json
            .as_object()
            .ok_or_else(|| fail("not a JSON object".into()))?;
        // KV cache and attention quantization (vllm-ascend's C8 and FA quant) have no path here.
        for key in ["kv_cache_type", "fa_quant_type", "indexer_quant_type"] {
            if let Some(v) = object
                .get(key)
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty())
            {
                return Err(fail(format!(
                    "{key} {v:?}: a quantized KV cache is not supported"
                )));
            }
        }
        let description = object
            .iter()
            .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
            .collect();
        Ok(Format::ModelSlim {
            description,
            path: path.to_path_buf(),
        })
    }

    fn fp8(config: &Value) -> Result<Self, LoadError> {
        if let Some(fmt) = config.get("fmt").and_then(Value::as_str) {
            if fmt != "e4m3" {
                return Err(config_error("fmt", format!("{fmt:?} (e4m3 is read)")));
            }
        }
        let block = config
            .get("weight_block_size")
            .and_then(Value::as_array)
            .and_then(|b| match b[..] {
                [ref r, ref c] => Some([r.as_u64()? as usize, c.as_u64()? as usize]),
                _ => None,
            })
            .filter(|b| b[0] > 0 && b[1] > 0)
            .ok_or_else(|| {
                config_error(
                    "weight_block_size",
                    "missing or not two positive sizes: FP8 is read with block scales only \
                     (DeepSeek-V3's [128, 128])"
                        .into(),
                )
            })?;
        Ok(Format::Fp8 { block })
    }

    fn name(&self) -> &'static str {
        match self {
            Format::ModelSlim { .. } => "msModelSlim",
            Format::Compressed(_) => "compressed-tensors",
            Format::Fp8 { .. } => "FP8",
        }
    }

    /// How the linear layer `module` is stored, as the format says.
    fn storage(&self, checkpoint: &Checkpoint, module: &str) -> Result<Storage, LoadError> {
        let weight = format!("{module}.weight");
        match self {
            Format::ModelSlim { description, path } => {
                let scheme = description
                    .get(&weight)
                    .ok_or_else(|| LoadError::Quantized {
                        tensor: weight.clone(),
                        why: format!("{} names no scheme for it", path.display()),
                    })?;
                Ok(match scheme.as_str() {
                    "FLOAT" => Storage::Float,
                    "W8A16" => Storage::Int8(Int8::ModelSlim(ModelSlim::W8A16)),
                    "W8A8_DYNAMIC" => Storage::Int8(Int8::ModelSlim(ModelSlim::W8A8Dynamic)),
                    "W8A8" => Storage::Int8(Int8::ModelSlim(ModelSlim::W8A8Static)),
                    other => {
                        return Err(LoadError::Quantized {
                            tensor: weight,
                            why: format!(
                                "{} gives scheme {other:?}: FLOAT, W8A16, W8A8_DYNAMIC and W8A8 \
                                 are read",
                                path.display()
                            ),
                        })
                    }
                })
            }
            Format::Compressed(c) => Ok(c.storage(module)),
            Format::Fp8 { block } => Ok(match checkpoint.info(&weight) {
                Some(info) if info.float8 => Storage::Fp8 { block: *block },
                _ => Storage::Float,
            }),
        }
    }
}

impl Compressed {
    fn parse(config: &Value) -> Result<Self, LoadError> {
        let status = config.get("quantization_status").and_then(Value::as_str);
        if status != Some("compressed") {
            return Err(config_error(
                "quantization_status",
                format!("{status:?}: only compressed checkpoints are read"),
            ));
        }
        for field in ["kv_cache_scheme", "sparsity_config", "transform_config"] {
            let empty = match config.get(field) {
                None | Some(Value::Null) => true,
                Some(Value::Object(o)) => o.is_empty(),
                _ => false,
            };
            if !empty {
                return Err(config_error(field, "is set: not supported".into()));
            }
        }
        let global = config.get("format").and_then(Value::as_str);
        let targets = |v: Option<&Value>, field: &str| -> Result<Vec<Target>, LoadError> {
            v.and_then(Value::as_array)
                .map(|a| a.as_slice())
                .unwrap_or(&[])
                .iter()
                .map(|t| {
                    t.as_str()
                        .ok_or_else(|| config_error(field, format!("{t} is not a string")))
                        .and_then(|t| Target::parse(t, field))
                })
                .collect()
        };
        let groups = config
            .get("config_groups")
            .and_then(Value::as_object)
            .ok_or_else(|| config_error("config_groups", "missing".into()))?
            .iter()
            .map(|(name, g)| {
                let field = format!("config_groups.{name}");
                let format = g.get("format").and_then(Value::as_str).or(global);
                let scheme = Self::scheme(g, format, &field)?;
                Ok((
                    targets(g.get("targets"), &format!("{field}.targets"))?,
                    scheme,
                ))
            })
            .collect::<Result<_, LoadError>>()?;
        Ok(Compressed {
            groups,
            ignore: targets(config.get("ignore"), "ignore")?,
        })
    }

    /// The group's scheme: int8 weights per channel, symmetric, static; activations none or
    /// int8 per token, symmetric, dynamic (LLM Compressor's W8A8 preset; W8A16 per channel).
    fn scheme(group: &Value, format: Option<&str>, field: &str) -> Result<Int8, LoadError> {
        let want = |args: &Value, part: &str, key: &str, value: Value| -> Result<(), LoadError> {
            let found = args.get(key).cloned().unwrap_or(Value::Null);
            if found == value {
                Ok(())
            } else {
                Err(config_error(
                    &format!("{field}.{part}.{key}"),
                    format!("{found} (the int8 operators read {value})"),
                ))
            }
        };
        let weights = group
            .get("weights")
            .filter(|w| !w.is_null())
            .ok_or_else(|| config_error(&format!("{field}.weights"), "missing".into()))?;
        want(weights, "weights", "num_bits", 8.into())?;
        want(weights, "weights", "type", "int".into())?;
        want(weights, "weights", "strategy", "channel".into())?;
        want(weights, "weights", "symmetric", true.into())?;
        want(weights, "weights", "dynamic", false.into())?;
        want(weights, "weights", "group_size", Value::Null)?;
        if group
            .get("output_activations")
            .is_some_and(|o| !o.is_null())
        {
            return Err(config_error(
                &format!("{field}.output_activations"),
                "is set: not supported".into(),
            ));
        }
        let dynamic = match group.get("input_activations").filter(|a| !a.is_null()) {
            None => false,
            Some(a) => {
                want(a, "input_activations", "num_bits", 8.into())?;
                want(a, "input_activations", "type", "int".into())?;
                want(a, "input_activations", "strategy", "token".into())?;
                want(a, "input_activations", "symmetric", true.into())?;
                want(a, "input_activations", "dynamic", true.into())?;
                true
            }
        };
        let packed = match format {
            Some("int-quantized" | "naive-quantized") => false,
            Some("pack-quantized") => true,
            other => {
                return Err(config_error(
                    &format!("{field}.format"),
                    format!(
                        "{other:?}: int-quantized, naive-quantized and pack-quantized are read"
                    ),
                ))
            }
        };
        Ok(Int8::Compressed { packed, dynamic })
    }

    fn storage(&self, module: &str) -> Storage {
        if self.ignore.iter().any(|t| t.matches(module)) {
            return Storage::Float;
        }
        self.groups
            .iter()
            .find(|(targets, _)| targets.iter().any(|t| t.matches(module)))
            .map_or(Storage::Float, |(_, s)| Storage::Int8(*s))
    }
}

/// A checkpoint's tensors as the model reads them: name, shape and element type.
pub type CheckedTensors = Vec<(String, Vec<usize>, Element)>;

/// The format of `checkpoint` (if pre-quantized) and the tensors the model `expected` takes in
/// it: names, shapes and element types, every linear layer's per its storage. Refuses, naming
/// the tensor, a scheme on a layer the decoder keeps float, a layout with no operator path,
/// and a description or config that does not say how a layer is stored.
pub fn plan(
    checkpoint: &Checkpoint,
    expected: &Expected,
) -> Result<(Option<Plan>, CheckedTensors), LoadError> {
    let Some(format) = Format::detect(checkpoint)? else {
        let tensors = expected
            .0
            .iter()
            .map(|(n, s)| (n.clone(), s.clone(), Element::Float));
        return Ok((None, tensors.collect()));
    };
    let mut storages = BTreeMap::new();
    let mut out = Vec::new();
    for (name, shape) in &expected.0 {
        let Some(kind) = expected.1.get(name) else {
            if let Format::ModelSlim { description, path } = &format {
                if let Some(s) = description.get(name).filter(|s| s.as_str() != "FLOAT") {
                    return Err(LoadError::Quantized {
                        tensor: name.clone(),
                        why: format!("{} gives it scheme {s:?}: it is read float", path.display()),
                    });
                }
            }
            out.push((name.clone(), shape.clone(), Element::Float));
            continue;
        };
        let module = name
            .strip_suffix(".weight")
            .expect("linear weights end in .weight");
        let (d_out, d_in) = (shape[0], shape[1]);
        let storage = format.storage(checkpoint, module)?;
        match storage {
            Storage::Float => out.push((name.clone(), shape.clone(), Element::Float)),
            Storage::Fp8 { block } => {
                out.push((name.clone(), shape.clone(), Element::Float8));
                let grid = vec![d_out.div_ceil(block[0]), d_in.div_ceil(block[1])];
                let scale = format!("{module}.weight_scale_inv");
                out.push((scale, grid, Element::Exactly(DType::F32)));
            }
            Storage::Int8(int8) => {
                if *kind == LinearKind::Float {
                    return Err(LoadError::Quantized {
                        tensor: name.clone(),
                        why: format!(
                            "stored {} int8 ({}), but this layer is computed float here (routers, \
                             LM heads, MLA's kv_b_proj and shared-expert gates are; vllm-ascend \
                             keeps them float too)",
                            format.name(),
                            int8.name()
                        ),
                    });
                }
                let bias = format!("{module}.bias");
                if int8 == Int8::ModelSlim(ModelSlim::W8A8Static)
                    && expected.0.iter().any(|(n, _)| *n == bias)
                {
                    return Err(LoadError::Quantized {
                        tensor: name.clone(),
                        why: "static W8A8 on a layer with a float bias: vllm-ascend adds \
                              quant_bias only (methods/w8a8_static.py), so whether the bias is \
                              in it is not said; not read"
                            .into(),
                    });
                }
                for (suffix, shape, element) in int8.tensors(d_out, d_in) {
                    out.push((format!("{module}.{suffix}"), shape, element));
                }
                if let Int8::Compressed { packed: true, .. } = int8 {
                    check_weight_shape(checkpoint, module, [d_out, d_in])?;
                }
            }
        }
        storages.insert(module.to_string(), storage);
    }
    let plan = Plan {
        format: format.name().to_string(),
        storages,
    };
    Ok((Some(plan), out))
}

/// A pack-quantized layer's `weight_shape` (two int64, read as metadata) says `[out, in]`.
fn check_weight_shape(
    checkpoint: &Checkpoint,
    module: &str,
    want: [usize; 2],
) -> Result<(), LoadError> {
    let name = format!("{module}.weight_shape");
    let Ok((info, bytes)) = checkpoint.bytes(&name) else {
        // Missing: the shape check names it.
        return Ok(());
    };
    if info.dtype != DType::I64 || bytes.len() != 16 {
        return Ok(());
    }
    let at = |i: usize| i64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    let found = [at(0), at(1)];
    if found != [want[0] as i64, want[1] as i64] {
        return Err(LoadError::Quantized {
            tensor: name,
            why: format!(
                "says the packed weight is {found:?}, the model's layer is {want:?} (in {})",
                info.file.display()
            ),
        });
    }
    Ok(())
}

/// Whether an expected linear layer may be stored quantized ([`Expected::linear`]) or is
/// always computed float ([`Expected::float_linear`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinearKind {
    /// A projection or an expert: float, int8 or FP8.
    Quantizable,
    /// A router, LM head, MLA `kv_b_proj` or shared-expert gate: float or FP8 (dequantized).
    Float,
}
