//! Between Hugging Face tensors and the blocks' parameters: the names and shapes a model
//! expects ([`Expected`]), reading them ([`Source`]) and writing them back ([`Sink`]).
//!
//! transformers stores a linear layer's weight `[out, in]` and each expert apart; Burn's
//! `Linear` holds `[in, out]` and the grouped matmul takes the experts stacked `[E, in, out]`.
//! The layouts are changed on the host as the bytes leave the file's map (a permutation of
//! elements, no arithmetic), so each weight is uploaded once, contiguous; a dtype conversion
//! happens on the device.

use std::any::{Any, TypeId};
use std::borrow::Cow;
use std::cell::{RefCell, RefMut};
use std::collections::BTreeMap;

use burn::module::Param;
use burn::nn::{Embedding, Linear};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Int, Tensor, TensorData};

use burn_ascend::{Ascend, AscendDevice};
use rayon::prelude::*;

use super::blocks::quant::{Projection, QuantLinear, StaticInput};
use super::prequant::{Int8, LinearKind, ModelSlim, Plan, Storage};
use super::LoadError;
use crate::moe::model::{Experts, QuantizedExperts, QuantizedProjection};

/// The tensors a model is made of: `(name, shape)` as a float checkpoint stores them, and which
/// of them are linear layers' weights (a pre-quantized checkpoint stores those in its format:
/// [`super::prequant::plan`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Expected(
    pub Vec<(String, Vec<usize>)>,
    pub BTreeMap<String, LinearKind>,
);

impl Expected {
    /// A tensor of `shape`.
    pub fn tensor(&mut self, name: String, shape: Vec<usize>) {
        self.0.push((name, shape));
    }

    /// A linear layer `prefix.weight [out, in]` (and `prefix.bias [out]`) that may be stored
    /// quantized.
    pub fn linear(&mut self, prefix: &str, d_in: usize, d_out: usize, bias: bool) {
        self.linear_of(LinearKind::Quantizable, prefix, d_in, d_out, bias);
    }

    /// A linear layer the decoder always computes float (routers, the LM head, MLA's
    /// `kv_b_proj`, shared-expert gates): an FP8 checkpoint's is dequantized, an int8 one refused.
    pub fn float_linear(&mut self, prefix: &str, d_in: usize, d_out: usize, bias: bool) {
        self.linear_of(LinearKind::Float, prefix, d_in, d_out, bias);
    }

    fn linear_of(&mut self, kind: LinearKind, prefix: &str, d_in: usize, d_out: usize, bias: bool) {
        let weight = format!("{prefix}.weight");
        self.1.insert(weight.clone(), kind);
        self.tensor(weight, vec![d_out, d_in]);
        if bias {
            self.tensor(format!("{prefix}.bias"), vec![d_out]);
        }
    }

    /// One linear layer per expert, `name(e)` naming expert `e`'s weight `[out, in]`.
    /// (The fused layout is one tensor: see [`Source::fused_experts`].)
    pub fn experts(
        &mut self,
        name: impl Fn(usize) -> String,
        experts: usize,
        d_in: usize,
        d_out: usize,
    ) {
        for e in 0..experts {
            self.1.insert(name(e), LinearKind::Quantizable);
            self.tensor(name(e), vec![d_out, d_in]);
        }
    }
}

/// A tensor as its source stores it: dtype, shape and little-endian row-major bytes.
#[derive(Debug, Clone)]
pub struct Stored<'a> {
    /// The element type of `bytes`.
    pub dtype: DType,
    /// The shape, row-major.
    pub shape: Vec<usize>,
    /// The elements: borrowed from a memory-mapped file, or made up (benches).
    pub bytes: Cow<'a, [u8]>,
}

/// A layer stored int8: its weight `[in, out]`, f32 scales `[out]`, and the W8A16 offsets
/// `[out]` (added to the weight before scaling) if it has some.
type Int8Parts<B> = (Tensor<B, 2, Int>, Tensor<B, 1>, Option<Tensor<B, 1>>);

/// Where a model's tensors come from, by the checkpoint's names: a checkpoint's files
/// ([`crate::hf::Checkpoint`]), or tensors made up by a bench.
pub trait Tensors {
    /// The tensor `name` as stored.
    fn stored(&self, name: &str) -> Result<Stored<'_>, LoadError>;
}

impl Tensors for crate::hf::Checkpoint {
    fn stored(&self, name: &str) -> Result<Stored<'_>, LoadError> {
        let (info, bytes) = self.bytes(name)?;
        Ok(Stored {
            dtype: info.dtype,
            shape: info.shape.clone(),
            bytes: Cow::Borrowed(bytes),
        })
    }
}

/// Host memory one upload of stacked experts takes at most: a projection's experts are laid
/// out in one host buffer (reused from tensor to tensor) and uploaded at once, in chunks of
/// this size joined on the device only when they are larger (DeepSeek-V3's are 7.5 GB in bf16).
const EXPERT_CHUNK_BYTES: usize = 1 << 30;

/// Reads a checkpoint's tensors into parameters on `device`, in `dtype`.
///
/// Each tensor goes from its source to the device as it is stored: uploaded straight from the
/// file's map on `Ascend` (other backends take an owned copy), or, where Burn's layout differs,
/// laid out anew in one reused host buffer (a permutation on all host cores, no arithmetic);
/// uploaded in the stored dtype and converted on the device (aclnnCast on an NPU). The host
/// holds at most one tensor (one chunk of experts) and computes nothing.
///
/// A pre-quantized checkpoint's layers (its [`Plan`]) are uploaded as stored too: int8 weights
/// and their scales as they are (the int8 operators read them), FP8 weights as their bytes with
/// their block scales, decoded and scaled on the device.
pub struct Source<'a, B: Backend> {
    tensors: &'a dyn Tensors,
    dtype: DType,
    device: &'a B::Device,
    /// The buffer layouts are permuted into, kept from tensor to tensor: a fresh one per
    /// tensor costs the host a page fault per 4 KiB, which dominated loading.
    scratch: RefCell<Vec<u8>>,
    plan: Option<&'a Plan>,
    /// `(tensor, max |value|)` of the weight offsets a W8A8 scheme requires to be zero, read
    /// back once when the load ends ([`Source::check_zero_offsets`]).
    zero_offsets: RefCell<Vec<(String, Tensor<B, 1>)>>,
}

impl<'a, B: Backend> Source<'a, B> {
    /// Tensors of `tensors`, uploaded to `device` in `dtype`.
    pub fn new(tensors: &'a dyn Tensors, dtype: DType, device: &'a B::Device) -> Self {
        Self {
            tensors,
            dtype,
            device,
            scratch: RefCell::new(Vec::new()),
            plan: None,
            zero_offsets: RefCell::new(Vec::new()),
        }
    }

    /// The source of a pre-quantized checkpoint whose layers `plan` says how are stored.
    pub fn with_plan(mut self, plan: Option<&'a Plan>) -> Self {
        self.plan = plan;
        self
    }

    fn storage(&self, module: &str) -> Storage {
        self.plan.map_or(Storage::Float, |p| p.storage(module))
    }

    /// Every weight offset a W8A8 layer was read with is zero (vllm-ascend's W8A8 kernels read
    /// the weights as symmetric and ignore `weight_offset`): one read-back for the whole load.
    pub fn check_zero_offsets(&self) -> Result<(), LoadError> {
        let checks = std::mem::take(&mut *self.zero_offsets.borrow_mut());
        if checks.is_empty() {
            return Ok(());
        }
        let (names, maxima): (Vec<String>, Vec<Tensor<B, 1>>) = checks.into_iter().unzip();
        let maxima = Tensor::cat(maxima, 0)
            .into_data()
            .convert::<f32>()
            .to_vec::<f32>()
            .map_err(|e| LoadError::Device(format!("{e:?}")))?;
        match names.iter().zip(maxima).find(|(_, m)| *m != 0.0) {
            Some((name, m)) => Err(LoadError::Quantized {
                tensor: name.clone(),
                why: format!(
                    "a W8A8 layer's weight offset must be zero (its kernels read symmetric int8                      weights and ignore the offset), found |offset| up to {m}"
                ),
            }),
            None => Ok(()),
        }
    }

    /// The tensor `name` on the device as stored, converted to f32.
    fn f32<const D: usize>(&self, name: &str) -> Result<Tensor<B, D>, LoadError> {
        let t = self.tensors.stored(name)?;
        let data = TensorData::from_bytes_vec(t.bytes.into_owned(), t.shape, t.dtype);
        Ok(match t.dtype {
            DType::F32 | DType::F16 | DType::BF16 => {
                Tensor::<B, D>::from_data(data, (self.device, t.dtype)).cast(DType::F32)
            }
            int => Tensor::<B, D, Int>::from_data(data, (self.device, int))
                .cast(DType::I32)
                .float()
                .cast(DType::F32),
        })
    }

    /// The per-channel vector `name` (`[out, 1]` or `[out]`) as f32 `[out]`.
    fn channels(&self, name: &str) -> Result<Tensor<B, 1>, LoadError> {
        let t: Tensor<B, 2> = match self.tensors.stored(name)?.shape.len() {
            1 => self.f32::<1>(name)?.unsqueeze_dim(1),
            _ => self.f32(name)?,
        };
        let n = t.dims()[0];
        Ok(t.reshape([n]))
    }

    /// `{module}.weight_offset`, queued for the zero check.
    fn zero_offset(&self, module: &str) -> Result<(), LoadError> {
        let name = format!("{module}.weight_offset");
        let max = self.channels(&name)?.abs().max();
        self.zero_offsets.borrow_mut().push((name, max));
        Ok(())
    }

    /// An int8 layer's weight `[out, in]` stored as `int8` laid out `[in, out]` on the device.
    fn int8_weight(&self, module: &str, int8: Int8) -> Result<Tensor<B, 2, Int>, LoadError> {
        if let Int8::Compressed { packed: true, .. } = int8 {
            // pack_to_int32 with 8 bits: word w of a row holds elements 4w..4w+3 at bits 0, 8, 16,
            // 24 as int8 + 128, so the row's little-endian bytes are its elements (then padding).
            let t = self.tensors.stored(&format!("{module}.weight_packed"))?;
            let shape = self.tensors.stored(&format!("{module}.weight_shape"))?;
            let at = |i: usize| {
                i64::from_le_bytes(shape.bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
            };
            let (out, d_in) = (at(0) as usize, at(1) as usize);
            let row = t.shape[1] * 4;
            let mut rows = Vec::with_capacity(out * d_in);
            for r in 0..out {
                rows.extend_from_slice(&t.bytes[r * row..r * row + d_in]);
            }
            let mut to = vec![0u8; rows.len()];
            transpose_into(&rows, &mut to, out, d_in, 1);
            let data = TensorData::from_bytes_vec(to, [d_in, out], DType::U8);
            let biased = Tensor::<B, 2, Int>::from_data(data, (self.device, DType::U8));
            return Ok((biased.cast(DType::I32) - 128).cast(DType::I8));
        }
        let w = self.tensors.stored(&format!("{module}.weight"))?;
        let [out, d_in] = matrix(&w.shape);
        let mut to = vec![0u8; w.bytes.len()];
        transpose_into(&w.bytes, &mut to, out, d_in, 1);
        let data = TensorData::from_bytes_vec(to, [d_in, out], DType::I8);
        Ok(Tensor::from_data(data, (self.device, DType::I8)))
    }

    /// A layer stored in `int8` ([`Int8Parts`]).
    fn int8_parts(&self, module: &str, int8: Int8) -> Result<Int8Parts<B>, LoadError> {
        let weight = self.int8_weight(module, int8)?;
        let scale = self.channels(&format!("{module}.weight_scale"))?;
        let offset = match int8 {
            Int8::ModelSlim(ModelSlim::W8A16) => {
                Some(self.channels(&format!("{module}.weight_offset"))?)
            }
            Int8::ModelSlim(_) => {
                self.zero_offset(module)?;
                None
            }
            Int8::Compressed { .. } => None,
        };
        Ok((weight, scale, offset))
    }

    /// The projection `prefix` (and `prefix.bias`): float, FP8 dequantized to float, or int8
    /// as stored.
    pub fn projection(&self, prefix: &str, bias: bool) -> Result<Projection<B>, LoadError> {
        let Storage::Int8(int8) = self.storage(prefix) else {
            return Ok(self.linear(prefix, bias)?.into());
        };
        let (weight, scale, offset) = self.int8_parts(prefix, int8)?;
        let static_input = match int8 {
            Int8::ModelSlim(ModelSlim::W8A8Static) => Some(StaticInput::new(
                self.f32(&format!("{prefix}.input_scale"))?,
                self.f32(&format!("{prefix}.input_offset"))?,
                self.f32(&format!("{prefix}.deq_scale"))?,
                self.f32(&format!("{prefix}.quant_bias"))?,
                self.dtype,
            )),
            _ => None,
        };
        let bias = match bias {
            true => Some(self.tensor(&format!("{prefix}.bias"))?),
            false => None,
        };
        Ok(Projection::Quantized(QuantLinear::stored(
            weight,
            scale,
            offset,
            static_input,
            bias,
            int8.mode(),
            self.dtype,
        )))
    }

    /// `bytes` (`shape`, `stored` dtype) on the device in the model's dtype: uploaded as they
    /// are, converted there.
    fn upload<const D: usize>(
        &self,
        bytes: &[u8],
        shape: [usize; D],
        stored: DType,
    ) -> Tensor<B, D> {
        let ascend = (self.device as &dyn Any).downcast_ref::<AscendDevice>();
        let t = match ascend {
            Some(device) if TypeId::of::<B>() == TypeId::of::<Ascend>() => {
                let t: Box<dyn Any> =
                    Box::new(Ascend::float_from_bytes(bytes, shape, stored, device));
                *t.downcast::<Tensor<B, D>>().expect("B is Ascend")
            }
            _ => Tensor::from_data(
                TensorData::from_bytes_vec(bytes.to_vec(), shape, stored),
                (self.device, stored),
            ),
        };
        if stored == self.dtype {
            t
        } else {
            t.cast(self.dtype)
        }
    }

    /// The scratch buffer, `len` bytes long.
    fn scratch(&self, len: usize) -> RefMut<'_, Vec<u8>> {
        let mut scratch = self.scratch.borrow_mut();
        scratch.resize(len, 0);
        scratch
    }

    /// The tensor `name` as it is stored.
    pub fn tensor<const D: usize>(&self, name: &str) -> Result<Param<Tensor<B, D>>, LoadError> {
        let t = self.tensors.stored(name)?;
        let shape: [usize; D] = t.shape.clone().try_into().map_err(|_| LoadError::Config {
            model_type: "(weights)".into(),
            why: format!("{name} of shape {:?} is not {D}-D", t.shape),
        })?;
        Ok(Param::from_tensor(self.upload(&t.bytes, shape, t.dtype)))
    }

    /// The float linear layer `prefix.weight` (and `prefix.bias`); an FP8 weight is dequantized
    /// on the device.
    pub fn linear(&self, prefix: &str, bias: bool) -> Result<Linear<B>, LoadError> {
        let weight = match self.storage(prefix) {
            Storage::Float => {
                let w = self.tensors.stored(&format!("{prefix}.weight"))?;
                let [out, d_in] = matrix(&w.shape);
                let mut to = self.scratch(w.bytes.len());
                transpose_into(&w.bytes, &mut to, out, d_in, w.dtype.size());
                Param::from_tensor(self.upload(&to, [d_in, out], w.dtype))
            }
            Storage::Fp8 { block } => {
                let w: Tensor<B, 3> = self.fp8_experts(&[format!("{prefix}.weight")], block)?;
                let [_, d_in, out] = w.dims();
                Param::from_tensor(w.reshape([d_in, out]))
            }
            Storage::Int8(int8) => {
                return Err(LoadError::Quantized {
                    tensor: format!("{prefix}.weight"),
                    why: format!("stored int8 ({}): this layer is read float", int8.name()),
                })
            }
        };
        Ok(Linear {
            weight,
            bias: if bias {
                Some(self.tensor(&format!("{prefix}.bias"))?)
            } else {
                None
            },
        })
    }

    /// The embedding table `name [V, H]`.
    pub fn embedding(&self, name: &str) -> Result<Embedding<B>, LoadError> {
        Ok(Embedding {
            weight: self.tensor(name)?,
        })
    }

    /// The routed experts `[gate, up, down]` (`names[i](e)` naming expert `e`'s weight `[out,
    /// in]`), float (FP8 dequantized) or int8 as stored. Every expert's three projections must
    /// be stored alike (vllm-ascend's FusedMoE takes one scheme per layer).
    pub fn expert_set(
        &self,
        names: [&dyn Fn(usize) -> String; 3],
        experts: usize,
    ) -> Result<Experts<B>, LoadError> {
        let module = |w: &str| w.strip_suffix(".weight").unwrap_or(w).to_string();
        let first = self.storage(&module(&names[0](0)));
        for name in &names {
            for e in 0..experts {
                let found = self.storage(&module(&name(e)));
                if found != first {
                    return Err(LoadError::Quantized {
                        tensor: name(e),
                        why: format!(
                            "stored {found:?}, unlike {} ({first:?}): a layer's experts run one                              scheme",
                            names[0](0)
                        ),
                    });
                }
            }
        }
        match first {
            Storage::Float => {
                let [g, u, d] = names.map(|n| self.experts(n, experts));
                Ok(Experts::new(g?, u?, d?))
            }
            Storage::Fp8 { block } => {
                let load = |n: &dyn Fn(usize) -> String| -> Result<_, LoadError> {
                    let all: Vec<String> = (0..experts).map(n).collect();
                    let chunks = all
                        .chunks(self.fp8_chunk(&all[0])?)
                        .map(|c| self.fp8_experts(c, block))
                        .collect::<Result<Vec<_>, _>>()?;
                    Ok(Param::from_tensor(join(chunks)))
                };
                let [g, u, d] = names.map(load);
                Ok(Experts::new(g?, u?, d?))
            }
            Storage::Int8(int8) => {
                let mode = int8.mode();
                let load = |n: &dyn Fn(usize) -> String| -> Result<_, LoadError> {
                    let mut weights = Vec::new();
                    let mut scales = Vec::new();
                    let mut offsets = Vec::new();
                    for e in 0..experts {
                        let (w, s, o) = self.int8_parts(&module(&n(e)), int8)?;
                        weights.push(w.unsqueeze_dim::<3>(0));
                        scales.push(s.unsqueeze_dim::<2>(0));
                        offsets.extend(o.map(|o| o.unsqueeze_dim::<2>(0)));
                    }
                    let offsets = (!offsets.is_empty()).then(|| Tensor::cat(offsets, 0));
                    Ok(QuantizedProjection::new(
                        Tensor::cat(weights, 0),
                        Tensor::cat(scales, 0),
                        offsets,
                        mode,
                        self.dtype,
                    ))
                };
                let [g, u, d] = names.map(load);
                Ok(Experts::Quantized(QuantizedExperts {
                    projections: [g?, u?, d?],
                    mode,
                    dtype: self.dtype,
                }))
            }
        }
    }

    /// Experts per FP8 upload: as many as [`EXPERT_CHUNK_BYTES`] of their bytes.
    fn fp8_chunk(&self, first: &str) -> Result<usize, LoadError> {
        let bytes = self.tensors.stored(first)?.bytes.len().max(1);
        Ok((EXPERT_CHUNK_BYTES / bytes).max(1))
    }

    /// FP8 weights `names` (each `[out, in]` e4m3 with `weight_scale_inv` per `block`) stacked
    /// `[n, in, out]` in the model's dtype, dequantized on the device: the bytes (laid out
    /// `[in, out]` on the host, a permutation) decoded through the 256 values of e4m3, times
    /// each block's scale (DeepSeek-V3 inference/kernel.py `weight_dequant`: `w = fp8 * s`, in
    /// f32).
    fn fp8_experts(&self, names: &[String], block: [usize; 2]) -> Result<Tensor<B, 3>, LoadError> {
        let n = names.len();
        let (mut bytes, mut grids) = (Vec::new(), Vec::new());
        let mut dims = None;
        for name in names {
            let w = self.tensors.stored(name)?;
            let [out, d_in] = matrix(&w.shape);
            let at = bytes.len();
            bytes.resize(at + w.bytes.len(), 0u8);
            transpose_into(&w.bytes, &mut bytes[at..], out, d_in, 1);
            let module = name.strip_suffix(".weight").unwrap_or(name);
            let s = self.tensors.stored(&format!("{module}.weight_scale_inv"))?;
            let [gr, gc] = matrix(&s.shape);
            let at = grids.len();
            grids.resize(at + s.bytes.len(), 0u8);
            transpose_into(&s.bytes, &mut grids[at..], gr, gc, 4);
            dims = Some((out, d_in, gr, gc));
        }
        let (out, d_in, gr, gc) = dims.expect("one FP8 weight at least");
        let codes = Tensor::<B, 1, Int>::from_data(
            TensorData::from_bytes_vec(bytes, [n * d_in * out], DType::U8),
            (self.device, DType::U8),
        );
        let table = Tensor::<B, 1>::from_data(
            TensorData::new(e4m3_values(), [256]),
            (self.device, DType::F32),
        );
        let values = table
            .select(0, codes.cast(DType::I32))
            .reshape([n, d_in, out]);
        let [b0, b1] = block;
        let scales = Tensor::<B, 3>::from_data(
            TensorData::from_bytes_vec(grids, [n, gc, gr], DType::F32),
            (self.device, DType::F32),
        )
        .reshape([n, gc, 1, gr, 1])
        .expand([n, gc, b1, gr, b0])
        .reshape([n, gc * b1, gr * b0])
        .slice([0..n, 0..d_in, 0..out]);
        let w = values * scales;
        Ok(if self.dtype == DType::F32 {
            w
        } else {
            w.cast(self.dtype)
        })
    }

    /// The experts' weights `name(e) [out, in]` stacked `[E, in, out]`.
    pub fn experts(
        &self,
        name: impl Fn(usize) -> String,
        experts: usize,
    ) -> Result<Param<Tensor<B, 3>>, LoadError> {
        let first = self.tensors.stored(&name(0))?;
        let [out, d_in] = matrix(&first.shape);
        let (dtype, matrix_bytes) = (first.dtype, first.bytes.len());
        let per_chunk = (EXPERT_CHUNK_BYTES / matrix_bytes.max(1)).clamp(1, experts);
        let mut chunks = Vec::new();
        for start in (0..experts).step_by(per_chunk) {
            let n = per_chunk.min(experts - start);
            let mut bytes = self.scratch(n * matrix_bytes);
            for (i, to) in bytes.chunks_exact_mut(matrix_bytes).enumerate() {
                let w = self.tensors.stored(&name(start + i))?;
                if w.shape != first.shape || w.dtype != dtype {
                    return Err(LoadError::Config {
                        model_type: "(experts)".into(),
                        why: format!(
                            "{} is {:?} {:?}, expert 0 is {:?} {dtype:?}",
                            name(start + i),
                            w.shape,
                            w.dtype,
                            first.shape
                        ),
                    });
                }
                transpose_into(&w.bytes, to, out, d_in, dtype.size());
            }
            chunks.push(self.upload::<3>(&bytes, [n, d_in, out], dtype));
        }
        Ok(Param::from_tensor(join(chunks)))
    }

    /// The experts' weights of the fused layout transformers 5.x can write: one tensor `name`
    /// `[E, parts * out, in]` whose rows are `parts` weights `[out, in]` of each expert one after
    /// the other (`gate_up_proj`: the gate's rows, then the up projection's). Each part stacked
    /// `[E, in, out]`.
    pub fn fused_experts(
        &self,
        name: &str,
        parts: usize,
    ) -> Result<Vec<Param<Tensor<B, 3>>>, LoadError> {
        let t = self.tensors.stored(name)?;
        let (e, rows, d_in) = match t.shape[..] {
            [e, rows, d_in] if rows % parts == 0 => (e, rows, d_in),
            _ => {
                return Err(LoadError::Config {
                    model_type: "(experts)".into(),
                    why: format!(
                        "{name} of shape {:?} is not [experts, {parts} x out, in]",
                        t.shape
                    ),
                })
            }
        };
        let (out, size) = (rows / parts, t.dtype.size());
        let matrix_bytes = out * d_in * size;
        let per_chunk = (EXPERT_CHUNK_BYTES / matrix_bytes.max(1)).clamp(1, e.max(1));
        Ok((0..parts)
            .map(|part| {
                let chunks = (0..e)
                    .step_by(per_chunk)
                    .map(|first| {
                        let n = per_chunk.min(e - first);
                        let mut bytes = self.scratch(n * matrix_bytes);
                        for (i, to) in bytes.chunks_exact_mut(matrix_bytes).enumerate() {
                            let at = ((first + i) * parts + part) * matrix_bytes;
                            transpose_into(&t.bytes[at..at + matrix_bytes], to, out, d_in, size);
                        }
                        self.upload::<3>(&bytes, [n, d_in, out], t.dtype)
                    })
                    .collect();
                Param::from_tensor(join(chunks))
            })
            .collect())
    }
}

/// The 256 values of FP8 e4m3 by their byte (OCP FP8 E4M3FN, torch's `float8_e4m3fn`): sign,
/// 4 exponent bits of bias 7, 3 mantissa bits; no infinities, `S.1111.111` is NaN.
pub fn e4m3_values() -> Vec<f32> {
    (0..256u32)
        .map(|b| {
            let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
            let (e, m) = ((b >> 3) & 0xF, b & 0x7);
            if e == 0xF && m == 0x7 {
                return f32::NAN;
            }
            let magnitude = match e {
                0 => m as f32 / 8.0 * 2f32.powi(-6),
                _ => (1.0 + m as f32 / 8.0) * 2f32.powi(e as i32 - 7),
            };
            sign * magnitude
        })
        .collect()
}

/// Uploaded chunks as one tensor (joined on the device).
fn join<B: Backend>(mut chunks: Vec<Tensor<B, 3>>) -> Tensor<B, 3> {
    if chunks.len() == 1 {
        chunks.pop().expect("one chunk")
    } else {
        Tensor::cat(chunks, 0)
    }
}

/// The `[rows, cols]` of a matrix's shape (the expected shapes were checked before loading).
fn matrix(shape: &[usize]) -> [usize; 2] {
    match shape {
        [r, c] => [*r, *c],
        other => panic!("a matrix was checked to be 2-D, found {other:?}"),
    }
}

/// Rows of a `[r, c]` matrix of `size`-byte elements, written as its `[c, r]` transpose into
/// `to`: tiles that stay in cache, the row bands shared among the host's cores.
fn transpose_into(from: &[u8], to: &mut [u8], r: usize, c: usize, size: usize) {
    debug_assert_eq!(from.len(), r * c * size);
    debug_assert_eq!(to.len(), r * c * size);
    const TILE: usize = 32;
    // Output rows (one per input column) in bands of TILE, each band written by one task.
    to.par_chunks_mut(TILE * r * size)
        .enumerate()
        .for_each(|(band, out)| {
            let j0 = band * TILE;
            let cols = out.len() / (r * size);
            for i0 in (0..r).step_by(TILE) {
                for i in i0..(i0 + TILE).min(r) {
                    let src = &from[(i * c + j0) * size..(i * c + j0 + cols) * size];
                    for (dj, element) in src.chunks_exact(size).enumerate() {
                        let dst = (dj * r + i) * size;
                        out[dst..dst + size].copy_from_slice(element);
                    }
                }
            }
        });
}

/// Expert `i` `[R, C]` of stacked experts `[E, R, C]`.
fn expert(data: &TensorData, i: usize) -> TensorData {
    let size = data.as_bytes().len() / data.shape[0];
    let bytes = data.as_bytes()[i * size..(i + 1) * size].to_vec();
    TensorData::from_bytes_vec(bytes, [data.shape[1], data.shape[2]], data.dtype)
}

/// The tensors of a model being saved, named and laid out as the checkpoint stores them.
#[derive(Debug, Default)]
pub struct Sink(pub Vec<(String, TensorData)>);

impl Sink {
    /// A parameter as it is held.
    pub fn tensor<B: Backend, const D: usize>(&mut self, name: String, p: &Param<Tensor<B, D>>) {
        self.0.push((name, p.val().into_data()));
    }

    /// A linear layer: `prefix.weight [out, in]` (and `prefix.bias`).
    pub fn linear<B: Backend>(&mut self, prefix: &str, linear: &Linear<B>) {
        self.0.push((
            format!("{prefix}.weight"),
            transpose(linear.weight.val().into_data()),
        ));
        if let Some(bias) = &linear.bias {
            self.tensor(format!("{prefix}.bias"), bias);
        }
    }

    /// Stacked experts `[E, in, out]` as one `name(e) [out, in]` per expert.
    pub fn experts<B: Backend>(&mut self, name: impl Fn(usize) -> String, w: Tensor<B, 3>) {
        let data = w.into_data();
        for i in 0..data.shape[0] {
            self.0.push((name(i), transpose(expert(&data, i))));
        }
    }

    /// Stacked experts `[E, in, out]` (`parts` of them) as one tensor `name`
    /// `[E, parts * out, in]` of the fused layout (see [`Source::fused_experts`]).
    pub fn fused_experts<B: Backend, const N: usize>(
        &mut self,
        name: String,
        parts: [Tensor<B, 3>; N],
    ) {
        let parts: Vec<TensorData> = parts.into_iter().map(Tensor::into_data).collect();
        let [e, d_in, d_out] = [parts[0].shape[0], parts[0].shape[1], parts[0].shape[2]];
        let mut bytes = Vec::new();
        for i in 0..e {
            for part in &parts {
                bytes.extend_from_slice(transpose(expert(part, i)).as_bytes());
            }
        }
        let shape = [e, parts.len() * d_out, d_in];
        self.0.push((
            name,
            TensorData::from_bytes_vec(bytes, shape, parts[0].dtype),
        ));
    }
}

/// A matrix `[r, c]` laid out `[c, r]` (elements moved, not computed on).
pub fn transpose(data: TensorData) -> TensorData {
    let (r, c) = (data.shape[0], data.shape[1]);
    let mut to = vec![0u8; data.as_bytes().len()];
    transpose_into(data.as_bytes(), &mut to, r, c, data.dtype.size());
    TensorData::from_bytes_vec(to, [c, r], data.dtype)
}
