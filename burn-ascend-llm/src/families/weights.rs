//! Between Hugging Face tensors and the blocks' parameters: the names and shapes a model
//! expects ([`Expected`]), reading them ([`Source`]) and writing them back ([`Sink`]).
//!
//! transformers stores a linear layer's weight `[out, in]` and each expert apart; Burn's
//! `Linear` holds `[in, out]` and the grouped matmul takes the experts stacked `[E, in, out]`.
//! The layouts are changed on the host as the bytes leave the file's map (a permutation of
//! elements, no arithmetic), so each weight is uploaded once, contiguous; a dtype conversion
//! happens on the device.
//!
//! A model split across NPUs ([`super::parallel`]) reads parts of tensors: a linear layer's
//! output or input features ([`Cut`]), an embedding's rows, a range of experts. Each part is
//! copied from the map straight into the upload of the NPU that holds it, so no NPU's weights
//! pass through the memory of another's, and the host holds one part at a time.

use std::any::{Any, TypeId};
use std::borrow::Cow;
use std::cell::{Cell, RefCell, RefMut};
use std::collections::BTreeMap;
use std::ops::Range;

use burn::module::Param;
use burn::nn::{Embedding, Linear};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Int, Tensor, TensorData};

use burn_ascend::{Ascend, AscendDevice};
use rayon::prelude::*;

use super::blocks::quant::{Projection, QuantLinear, StaticInput};
use super::prequant::{Int8, LinearKind, ModelSlim, Plan, Storage};
use super::LoadError;
use crate::moe::model::{gate_up, Experts, QuantizedExperts, QuantizedProjection};

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

/// The part of a linear layer (transformers' weight `[out, in]`) a shard reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cut {
    /// The whole layer.
    Whole,
    /// The output features `range` (column parallel: rows of the stored weight, and of the
    /// bias and per-channel scales), padded with zero features to `width` (at least
    /// `range.len()`).
    Out {
        /// The features read.
        range: Range<usize>,
        /// The layer's width on the shard.
        width: usize,
    },
    /// The input features `range` (row parallel: columns of the stored weight). The shards'
    /// outputs are summed, so the layer's constant terms (its bias, a static W8A8 layer's
    /// `quant_bias`) are added by the `first` shard only.
    In {
        /// The features read.
        range: Range<usize>,
        /// Whether this shard adds the constant terms.
        first: bool,
    },
}

impl Cut {
    /// The stored weight's `(rows, columns)` read, and the shard's width, of a layer of
    /// `out x d_in`.
    fn extent(&self, out: usize, d_in: usize) -> (Range<usize>, Range<usize>, usize) {
        match self {
            Cut::Whole => (0..out, 0..d_in, out),
            Cut::Out { range, width } => (range.clone(), 0..d_in, *width),
            Cut::In { range, .. } => (0..out, range.clone(), out),
        }
    }

    /// Whether the shard adds the layer's constant terms.
    fn adds_constants(&self) -> bool {
        !matches!(self, Cut::In { first: false, .. })
    }

    /// A per-output-feature vector `[out]` (a bias, scales) cut as the layer is, on the device.
    fn channels<B: Backend>(&self, v: Tensor<B, 1>) -> Tensor<B, 1> {
        match self {
            Cut::Out { range, width } => padded(v.slice(range.clone()), 0, *width),
            Cut::Whole | Cut::In { .. } => v,
        }
    }

    /// A weight `[in, out]` in Burn's layout cut as the layer is, on the device.
    fn matrix<B: Backend>(&self, w: Tensor<B, 2>) -> Tensor<B, 2> {
        let [d_in, out] = w.dims();
        match self {
            Cut::Whole => w,
            Cut::Out { range, width } => padded(w.slice([0..d_in, range.clone()]), 1, *width),
            Cut::In { range, .. } => w.slice([range.clone(), 0..out]),
        }
    }
}

/// `t` followed by zeros along `dim` up to `width` (at least its size there): a shard's padding
/// features.
fn padded<B: Backend, const D: usize>(t: Tensor<B, D>, dim: usize, width: usize) -> Tensor<B, D> {
    let mut pad = t.dims();
    pad[dim] = width - pad[dim];
    if pad[dim] == 0 {
        return t;
    }
    let zeros = Tensor::zeros(pad, (&t.device(), t.dtype()));
    Tensor::cat(vec![t, zeros], dim)
}

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
    /// Bytes of tensor data copied out of the source so far.
    read: Cell<u64>,
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
            read: Cell::new(0),
        }
    }

    /// The dtype the tensors are uploaded in.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Bytes of tensor data read so far (as stored: the parts read, not the whole tensors).
    pub fn read_bytes(&self) -> u64 {
        self.read.get()
    }

    fn count(&self, bytes: usize) {
        self.read.set(self.read.get() + bytes as u64);
    }

    /// The source of a pre-quantized checkpoint whose layers `plan` says how are stored.
    pub fn with_plan(mut self, plan: Option<&'a Plan>) -> Self {
        self.plan = plan;
        self
    }

    /// The pre-quantized checkpoint's plan, if it is one.
    pub fn plan(&self) -> Option<&'a Plan> {
        self.plan
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
                    "a W8A8 layer's weight offset must be zero (its kernels read symmetric int8 \
                     weights and ignore the offset), found |offset| up to {m}"
                ),
            }),
            None => Ok(()),
        }
    }

    /// The tensor `name` on the device as stored, converted to f32.
    fn f32<const D: usize>(&self, name: &str) -> Result<Tensor<B, D>, LoadError> {
        let t = self.tensors.stored(name)?;
        self.count(t.bytes.len());
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

    /// The part `cut` of an int8 layer's weight `[out, in]`, stored as `int8` laid out
    /// `[in, out]` on the device.
    fn int8_weight(
        &self,
        module: &str,
        int8: Int8,
        cut: &Cut,
    ) -> Result<Tensor<B, 2, Int>, LoadError> {
        if let Int8::Compressed { packed: true, .. } = int8 {
            // pack_to_int32 with 8 bits: word w of a row holds elements 4w..4w+3 at bits 0, 8,
            // 16, 24 as int8 + 128, so the row's little-endian bytes are its elements (then
            // padding): the rows read as a `[out, row]` byte matrix of which `in` columns count.
            let t = self.tensors.stored(&format!("{module}.weight_packed"))?;
            let shape = self.tensors.stored(&format!("{module}.weight_shape"))?;
            let at = |i: usize| {
                i64::from_le_bytes(shape.bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
            };
            let (out, d_in) = (at(0) as usize, at(1) as usize);
            let (rows, cols, width) = cut.extent(out, d_in);
            let mut to = vec![0u8; cols.len() * width];
            self.count(rows.len() * cols.len());
            transpose_part(
                &t.bytes,
                t.shape[1] * 4,
                rows,
                cols.clone(),
                width,
                1,
                &mut to,
            );
            let data = TensorData::from_bytes_vec(to, [cols.len(), width], DType::U8);
            let biased = Tensor::<B, 2, Int>::from_data(data, (self.device, DType::U8));
            // Padding features (zero bytes) become -128: their scales are zero.
            return Ok((biased.cast(DType::I32) - 128).cast(DType::I8));
        }
        let w = self.tensors.stored(&format!("{module}.weight"))?;
        let [out, d_in] = matrix(&w.shape);
        let (rows, cols, width) = cut.extent(out, d_in);
        let mut to = vec![0u8; cols.len() * width];
        self.count(rows.len() * cols.len());
        transpose_part(&w.bytes, d_in, rows, cols.clone(), width, 1, &mut to);
        let data = TensorData::from_bytes_vec(to, [cols.len(), width], DType::I8);
        Ok(Tensor::from_data(data, (self.device, DType::I8)))
    }

    /// The part `cut` of a layer stored in `int8` ([`Int8Parts`]).
    fn int8_parts(&self, module: &str, int8: Int8, cut: &Cut) -> Result<Int8Parts<B>, LoadError> {
        let weight = self.int8_weight(module, int8, cut)?;
        let scale = cut.channels(self.channels(&format!("{module}.weight_scale"))?);
        let offset = match int8 {
            Int8::ModelSlim(ModelSlim::W8A16) => {
                Some(cut.channels(self.channels(&format!("{module}.weight_offset"))?))
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
        self.projection_part(prefix, bias, Cut::Whole)
    }

    /// The part `cut` of the projection `prefix` (and `prefix.bias`): float, FP8 dequantized to
    /// float, or int8 as stored.
    pub fn projection_part(
        &self,
        prefix: &str,
        bias: bool,
        cut: Cut,
    ) -> Result<Projection<B>, LoadError> {
        let Storage::Int8(int8) = self.storage(prefix) else {
            return Ok(self.linear_part(prefix, bias, cut)?.into());
        };
        let (weight, scale, offset) = self.int8_parts(prefix, int8, &cut)?;
        let static_input = match int8 {
            Int8::ModelSlim(ModelSlim::W8A8Static) => {
                let deq_scale = cut.channels(self.f32(&format!("{prefix}.deq_scale"))?);
                let quant_bias = cut.channels(self.f32(&format!("{prefix}.quant_bias"))?);
                // vllm-ascend's row-parallel W8A8 adds quant_bias on TP rank 0 only.
                let quant_bias = match cut.adds_constants() {
                    true => quant_bias,
                    false => quant_bias.zeros_like(),
                };
                Some(StaticInput::new(
                    self.f32(&format!("{prefix}.input_scale"))?,
                    self.f32(&format!("{prefix}.input_offset"))?,
                    deq_scale,
                    quant_bias,
                    self.dtype,
                ))
            }
            _ => None,
        };
        Ok(Projection::Quantized(QuantLinear::stored(
            weight,
            scale,
            offset,
            static_input,
            self.bias(prefix, bias, &cut)?,
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

    /// The scratch buffer, `len` bytes long; `zeroed` where not every byte is written.
    fn scratch(&self, len: usize, zeroed: bool) -> RefMut<'_, Vec<u8>> {
        let mut scratch = self.scratch.borrow_mut();
        if len > scratch.capacity() {
            // A new buffer rather than a grown one (the old one freed first): growing would copy
            // the old, stale bytes, and a fresh zeroed allocation is the operating system's zero
            // pages, not a fill.
            *scratch = Vec::new();
            *scratch = vec![0; len];
        } else {
            if zeroed {
                scratch.clear();
            }
            scratch.resize(len, 0);
        }
        scratch
    }

    /// The tensor `name` as it is stored.
    pub fn tensor<const D: usize>(&self, name: &str) -> Result<Param<Tensor<B, D>>, LoadError> {
        let t = self.tensors.stored(name)?;
        let shape = dims::<D>(name, &t.shape)?;
        self.count(t.bytes.len());
        Ok(Param::from_tensor(self.upload(&t.bytes, shape, t.dtype)))
    }

    /// Rows `rows` (along dim 0) of the tensor `name`, followed by zero rows up to `pad_to`
    /// rows (at least `rows.len()`).
    pub fn tensor_rows<const D: usize>(
        &self,
        name: &str,
        rows: Range<usize>,
        pad_to: usize,
    ) -> Result<Param<Tensor<B, D>>, LoadError> {
        let t = self.tensors.stored(name)?;
        let mut shape = dims::<D>(name, &t.shape)?;
        let row = t.shape[1..].iter().product::<usize>() * t.dtype.size();
        let mut bytes = self.scratch(pad_to * row, pad_to > rows.len());
        bytes[..rows.len() * row].copy_from_slice(&t.bytes[rows.start * row..rows.end * row]);
        self.count(rows.len() * row);
        shape[0] = pad_to;
        Ok(Param::from_tensor(self.upload(&bytes, shape, t.dtype)))
    }

    /// The bias `prefix.bias` of a layer cut as `cut`, if it has one and the shard adds it.
    fn bias(
        &self,
        prefix: &str,
        bias: bool,
        cut: &Cut,
    ) -> Result<Option<Param<Tensor<B, 1>>>, LoadError> {
        let name = format!("{prefix}.bias");
        Ok(match (bias, cut) {
            (false, _) => None,
            (true, Cut::Out { range, width }) => {
                Some(self.tensor_rows(&name, range.clone(), *width)?)
            }
            (true, cut) if cut.adds_constants() => Some(self.tensor(&name)?),
            (true, _) => None,
        })
    }

    /// The float linear layer `prefix.weight` (and `prefix.bias`); an FP8 weight is dequantized
    /// on the device.
    pub fn linear(&self, prefix: &str, bias: bool) -> Result<Linear<B>, LoadError> {
        self.linear_part(prefix, bias, Cut::Whole)
    }

    /// The part `cut` of the float linear layer `prefix.weight` (and `prefix.bias`), in Burn's
    /// `[in, out]` layout: only the part's elements are read (an FP8 weight is dequantized
    /// whole on the device, then cut there). A float weight keeps the checkpoint's `[out, in]`
    /// rows on the device and is their transposed view, which the matmul operators take as it
    /// is (aclnnMatmul and aclnnAddmm read transposed operands): no host pass lays it out.
    pub fn linear_part(&self, prefix: &str, bias: bool, cut: Cut) -> Result<Linear<B>, LoadError> {
        let weight = match self.storage(prefix) {
            Storage::Float => {
                let w = self.tensors.stored(&format!("{prefix}.weight"))?;
                let [out, d_in] = matrix(&w.shape);
                let (rows, cols, width) = cut.extent(out, d_in);
                let size = w.dtype.size();
                self.count(rows.len() * cols.len() * size);
                let shape = [width, cols.len()];
                let stored = if rows.len() == width && cols.len() == d_in {
                    let row = d_in * size;
                    let bytes = &w.bytes[rows.start * row..rows.end * row];
                    self.upload(bytes, shape, w.dtype)
                } else {
                    let mut to = self.scratch(width * cols.len() * size, width > rows.len());
                    copy_part(&w.bytes, d_in, rows, cols, size, &mut to);
                    self.upload(&to, shape, w.dtype)
                };
                Param::from_tensor(stored.transpose())
            }
            Storage::Fp8 { block } => {
                let w: Tensor<B, 3> = self.fp8_experts(&[format!("{prefix}.weight")], block)?;
                let [_, d_in, out] = w.dims();
                Param::from_tensor(cut.matrix(w.reshape([d_in, out])))
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
            bias: self.bias(prefix, bias, &cut)?,
        })
    }

    /// The embedding table `name [V, H]`.
    pub fn embedding(&self, name: &str) -> Result<Embedding<B>, LoadError> {
        Ok(Embedding {
            weight: self.tensor(name)?,
        })
    }

    /// The routed experts `experts` (a range of the layer's) `[gate, up, down]` (`names[i](e)`
    /// naming expert `e`'s weight `[out, in]`), float (FP8 dequantized) or int8 as stored, gate
    /// and up side by side (`moe::model::gate_up`).
    /// Every expert's three projections must be stored alike (vllm-ascend's FusedMoE takes one
    /// scheme per layer).
    pub fn expert_set(
        &self,
        names: [&dyn Fn(usize) -> String; 3],
        experts: Range<usize>,
    ) -> Result<Experts<B>, LoadError> {
        let module = |w: &str| w.strip_suffix(".weight").unwrap_or(w).to_string();
        let first = self.storage(&module(&names[0](experts.start)));
        for name in &names {
            for e in experts.clone() {
                let found = self.storage(&module(&name(e)));
                if found != first {
                    return Err(LoadError::Quantized {
                        tensor: name(e),
                        why: format!(
                            "stored {found:?}, unlike {} ({first:?}): a layer's experts run one \
                             scheme",
                            names[0](experts.start)
                        ),
                    });
                }
            }
        }
        match first {
            Storage::Float => {
                let [g, u, d] = names;
                let gate_up = self.experts(&[g, u], experts.clone())?;
                Ok(Experts::new(gate_up, self.experts(&[d], experts)?))
            }
            Storage::Fp8 { block } => {
                let load = |n: &dyn Fn(usize) -> String| -> Result<_, LoadError> {
                    let all: Vec<String> = experts.clone().map(n).collect();
                    let chunks = all
                        .chunks(self.fp8_chunk(&all[0])?)
                        .map(|c| self.fp8_experts(c, block))
                        .collect::<Result<Vec<_>, _>>()?;
                    Ok(Param::from_tensor(join(chunks)))
                };
                let [g, u, d] = names.map(load);
                let gate_up = gate_up(g?.val(), u?.val());
                Ok(Experts::new(Param::from_tensor(gate_up), d?))
            }
            Storage::Int8(int8) => {
                let mode = int8.mode();
                let load = |n: &dyn Fn(usize) -> String| -> Result<_, LoadError> {
                    let mut weights = Vec::new();
                    let mut scales = Vec::new();
                    let mut offsets = Vec::new();
                    for e in experts.clone() {
                        let (w, s, o) = self.int8_parts(&module(&n(e)), int8, &Cut::Whole)?;
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
                let (g, u) = (g?, u?);
                if g.offsets.is_some() != u.offsets.is_some() {
                    return Err(LoadError::Quantized {
                        tensor: names[1](experts.start),
                        why: format!(
                            "weight offsets stored for only one of it and {}: a layer's gate and \
                             up projections are quantized alike",
                            names[0](experts.start)
                        ),
                    });
                }
                Ok(Experts::Quantized(QuantizedExperts {
                    projections: [QuantizedProjection::gate_up(g, u), d?],
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
            self.count(w.bytes.len() + s.bytes.len());
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

    /// The weights `names[j](e) [out, in]` of the experts `experts` (a range of the layer's),
    /// each expert's weights one after the other along their outputs (`[gate, up]`: its gate
    /// rows, then its up rows), stacked `[experts.len(), in, names.len() * out]`: a view of them
    /// stacked as stored, which the grouped matmul takes transposed (aclnnGroupedMatmulV4,
    /// "支持weight转置").
    pub fn experts(
        &self,
        names: &[&dyn Fn(usize) -> String],
        experts: Range<usize>,
    ) -> Result<Param<Tensor<B, 3>>, LoadError> {
        let first_name = names[0](experts.start);
        if experts.is_empty() {
            return Err(LoadError::Config {
                model_type: "(experts)".into(),
                why: format!("{first_name} names no expert (experts {experts:?})"),
            });
        }
        let first = self.tensors.stored(&first_name)?;
        let [out, d_in] = matrix(&first.shape);
        let (dtype, matrix_bytes) = (first.dtype, first.bytes.len());
        let expert_bytes = names.len() * matrix_bytes;
        let per_chunk = (EXPERT_CHUNK_BYTES / expert_bytes.max(1)).clamp(1, experts.len());
        let mut chunks = Vec::new();
        for start in experts.clone().step_by(per_chunk) {
            let n = per_chunk.min(experts.end - start);
            let mut bytes = self.scratch(n * expert_bytes, false);
            for (i, to) in bytes.chunks_exact_mut(matrix_bytes).enumerate() {
                let name = names[i % names.len()](start + i / names.len());
                let w = self.tensors.stored(&name)?;
                if w.shape != first.shape || w.dtype != dtype {
                    return Err(LoadError::Config {
                        model_type: "(experts)".into(),
                        why: format!(
                            "{name} is {:?} {:?}, {first_name} is {:?} {dtype:?}",
                            w.shape, w.dtype, first.shape
                        ),
                    });
                }
                self.count(matrix_bytes);
                to.copy_from_slice(&w.bytes);
            }
            let rows = names.len() * out;
            chunks.push(self.upload::<3>(&bytes, [n, rows, d_in], dtype));
        }
        Ok(Param::from_tensor(join(chunks).swap_dims(1, 2)))
    }

    /// The experts' weights of the fused layout transformers 5.x can write: one tensor `name`
    /// `[E, rows, in]` (`gate_up_proj`: each expert's gate rows, then its up rows, the layout
    /// `moe::model::gate_up` computes with). The experts `experts` (a range of the E) stacked
    /// `[experts.len(), in, rows]`, as a transposed view like [`Self::experts`]: their bytes lie
    /// together in the file, uploaded as they are.
    pub fn fused_experts(
        &self,
        name: &str,
        experts: Range<usize>,
    ) -> Result<Param<Tensor<B, 3>>, LoadError> {
        let t = self.tensors.stored(name)?;
        let (rows, d_in) = match t.shape[..] {
            [e, rows, d_in] if experts.end <= e && !experts.is_empty() => (rows, d_in),
            _ => {
                return Err(LoadError::Config {
                    model_type: "(experts)".into(),
                    why: format!(
                        "{name} of shape {:?} is not [experts, out, in] holding experts \
                         {experts:?}",
                        t.shape
                    ),
                })
            }
        };
        let matrix_bytes = rows * d_in * t.dtype.size();
        let per_chunk = (EXPERT_CHUNK_BYTES / matrix_bytes.max(1)).clamp(1, experts.len());
        let chunks = experts
            .clone()
            .step_by(per_chunk)
            .map(|first| {
                let n = per_chunk.min(experts.end - first);
                let bytes = &t.bytes[first * matrix_bytes..(first + n) * matrix_bytes];
                self.count(bytes.len());
                self.upload::<3>(bytes, [n, rows, d_in], t.dtype)
            })
            .collect();
        Ok(Param::from_tensor(join(chunks).swap_dims(1, 2)))
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

/// `shape` as `D` dims, or the error naming the tensor.
fn dims<const D: usize>(name: &str, shape: &[usize]) -> Result<[usize; D], LoadError> {
    shape.try_into().map_err(|_| LoadError::Config {
        model_type: "(weights)".into(),
        why: format!("{name} of shape {shape:?} is not {D}-D"),
    })
}

/// The `[rows, cols]` of a matrix's shape (the expected shapes were checked before loading).
fn matrix(shape: &[usize]) -> [usize; 2] {
    match shape {
        [r, c] => [*r, *c],
        other => panic!("a matrix was checked to be 2-D, found {other:?}"),
    }
}

/// The block `rows x cols` of a row-major matrix of `row_len` `size`-byte elements per row,
/// written row-major into `to` (rows beyond the block's left as they are: padding).
fn copy_part(
    from: &[u8],
    row_len: usize,
    rows: Range<usize>,
    cols: Range<usize>,
    size: usize,
    to: &mut [u8],
) {
    let part = cols.len() * size;
    for (r, to) in rows.zip(to.chunks_exact_mut(part)) {
        let at = (r * row_len + cols.start) * size;
        to.copy_from_slice(&from[at..at + part]);
    }
}

/// A `[r, c]` matrix of `size`-byte elements written as its `[c, r]` transpose into `to`.
fn transpose_into(from: &[u8], to: &mut [u8], r: usize, c: usize, size: usize) {
    transpose_part(from, c, 0..r, 0..c, r, size, to);
}

/// The block `rows x cols` of a row-major matrix `from` of `stride` columns of `size`-byte
/// elements, written transposed into `to`: a `[cols.len(), width]` matrix (`width` at least
/// `rows.len()`; the columns past `rows.len()` are left as they are). This copy is the loader's
/// hot loop (a checkpoint's every linear weight passes through it).
fn transpose_part(
    from: &[u8],
    stride: usize,
    rows: Range<usize>,
    cols: Range<usize>,
    width: usize,
    size: usize,
    to: &mut [u8],
) {
    debug_assert!(rows.end * stride * size <= from.len() && cols.end <= stride);
    debug_assert!(width >= rows.len());
    assert_eq!(
        to.len(),
        cols.len() * width * size,
        "the transpose's output size"
    );
    let block = Block {
        stride,
        rows,
        cols,
        width,
    };
    match size {
        1 => block.transpose::<1, 128>(from, to),
        2 => block.transpose::<2, 64>(from, to),
        4 => block.transpose::<4, 32>(from, to),
        8 => block.transpose::<8, 16>(from, to),
        other => panic!("no checkpoint dtype has {other}-byte elements"),
    }
}

/// The block of a row-major matrix that [`transpose_part`] lays out.
struct Block {
    stride: usize,
    rows: Range<usize>,
    cols: Range<usize>,
    width: usize,
}

/// The output of a transpose, shared by tasks that write disjoint columns of it.
struct Columns<T>(*mut T);

// SAFETY: each task writes only its own columns (see `Block::transpose`).
unsafe impl<T> Send for Columns<T> {}
unsafe impl<T> Sync for Columns<T> {}

impl Block {
    /// Elements of `N` bytes (`[u8; N]` has alignment 1, so the files' bytes need none), in
    /// square tiles of `E` (two cache lines of elements a side) through a buffer: each line read
    /// and each line written is used whole at once. Read or written one element at a time, a
    /// matrix whose rows are a power of two bytes apart puts a tile's lines in one cache set,
    /// evicted before they are used up (0.5-0.9 GB/s here, against 2 GB/s tiled). A task takes
    /// `E` input rows, so it writes `E` columns of every output row.
    fn transpose<const N: usize, const E: usize>(&self, from: &[u8], to: &mut [u8]) {
        let from: &[[u8; N]] = bytemuck::cast_slice(from);
        let to: &mut [[u8; N]] = bytemuck::cast_slice_mut(to);
        let (r, c, width) = (self.rows.len(), self.cols.len(), self.width);
        let out = Columns(to.as_mut_ptr());
        (0..r.div_ceil(E)).into_par_iter().for_each(|task| {
            let out = &out;
            let i0 = task * E;
            let ni = E.min(r - i0);
            let mut tile = [[[0u8; N]; E]; E];
            for j0 in (0..c).step_by(E) {
                let nj = E.min(c - j0);
                let starts = (self.rows.start + i0..self.rows.start + i0 + ni)
                    .map(|i| i * self.stride + self.cols.start + j0);
                for (di, at) in starts.enumerate() {
                    for (dj, &element) in from[at..at + nj].iter().enumerate() {
                        tile[dj][di] = element;
                    }
                }
                for (dj, line) in tile.iter().enumerate().take(nj) {
                    let at = (j0 + dj) * width + i0;
                    // SAFETY: `at + ni <= (j0 + dj) * width + r <= c * width = to.len()`
                    // (checked by the caller), and columns `i0..i0 + ni` of the output are this
                    // task's alone.
                    unsafe {
                        std::ptr::copy_nonoverlapping(line.as_ptr(), out.0.add(at), ni);
                    }
                }
            }
        });
    }
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

#[cfg(test)]
mod tests {
    use super::{copy_part, transpose_part};

    /// A block of a matrix (a tensor-parallel shard's rows or columns) copied row by row,
    /// against the index formula, rows past the block untouched.
    #[test]
    fn copy_part_copies_the_block_row_major() {
        let (r, c, size) = (7usize, 9usize, 2usize);
        let from: Vec<u8> = (0..r * c * size).map(|b| (b * 13 + 1) as u8).collect();
        for (rows, cols) in [(0..r, 0..c), (2..5, 0..c), (0..r, 3..8), (1..2, 8..9)] {
            let mut to = vec![0xAB; (rows.len() + 2) * cols.len() * size];
            copy_part(&from, c, rows.clone(), cols.clone(), size, &mut to);
            for (i, row) in to.chunks_exact(cols.len() * size).enumerate() {
                if i < rows.len() {
                    let at = ((rows.start + i) * c + cols.start) * size;
                    assert_eq!(
                        row,
                        &from[at..at + row.len()],
                        "{rows:?} x {cols:?} row {i}"
                    );
                } else {
                    assert!(row.iter().all(|&b| b == 0xAB), "padding overwritten");
                }
            }
        }
    }

    /// Every block of small matrices, every element size a checkpoint stores, odd shapes and
    /// padded widths, against the transpose written out index by index.
    #[test]
    fn transpose_part_lays_out_the_block_transposed() {
        for size in [1, 2, 4, 8] {
            for (r, c) in [(1usize, 1usize), (3, 5), (67, 130), (130, 67), (45, 600)] {
                let from: Vec<u8> = (0..r * c * size).map(|b| (b * 7 + b / 251) as u8).collect();
                for (rows, cols) in [
                    (0..r, 0..c),
                    (r / 3..r, c / 2..c),
                    (0..r.div_ceil(2), 1.min(c - 1)..c),
                ] {
                    let width = rows.len() + 3;
                    let mut to = vec![0xAB; cols.len() * width * size];
                    transpose_part(&from, c, rows.clone(), cols.clone(), width, size, &mut to);
                    for (oj, j) in cols.clone().enumerate() {
                        for ow in 0..width {
                            let got = &to[(oj * width + ow) * size..][..size];
                            if ow < rows.len() {
                                let at = ((rows.start + ow) * c + j) * size;
                                assert_eq!(
                                    got,
                                    &from[at..at + size],
                                    "size {size}, [{r}, {c}], row {} col {j}",
                                    rows.start + ow
                                );
                            } else {
                                assert!(got.iter().all(|&b| b == 0xAB), "padding overwritten");
                            }
                        }
                    }
                }
            }
        }
    }
}
