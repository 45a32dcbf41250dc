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

use std::borrow::Cow;
use std::cell::Cell;
use std::ops::Range;

use burn::module::Param;
use burn::nn::{Embedding, Linear};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor, TensorData};

use rayon::prelude::*;

use super::LoadError;

/// The tensors a model is made of: `(name, shape)` as the checkpoint stores them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Expected(pub Vec<(String, Vec<usize>)>);

impl Expected {
    /// A tensor of `shape`.
    pub fn tensor(&mut self, name: String, shape: Vec<usize>) {
        self.0.push((name, shape));
    }

    /// A linear layer `prefix.weight [out, in]` (and `prefix.bias [out]`).
    pub fn linear(&mut self, prefix: &str, d_in: usize, d_out: usize, bias: bool) {
        self.tensor(format!("{prefix}.weight"), vec![d_out, d_in]);
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

/// The part of a linear layer (transformers' weight `[out, in]`) a shard reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cut {
    /// The whole layer.
    Whole,
    /// The output features `range` (column parallel: rows of the stored weight, and of the
    /// bias), padded with zero features to `width` (at least `range.len()`).
    Out {
        /// The features read.
        range: Range<usize>,
        /// The layer's width on the shard.
        width: usize,
    },
    /// The input features `range` (row parallel: columns of the stored weight; the bias, if
    /// read, whole).
    In(Range<usize>),
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

/// Host memory one upload of stacked experts takes at most: experts are laid out in chunks of
/// this size and joined on the device, so a layer's experts (1.2 GB of bf16 for Qwen3-30B-A3B)
/// never sit on the host whole.
const EXPERT_CHUNK_BYTES: usize = 64 << 20;

/// Reads a checkpoint's tensors into parameters on `device`, in `dtype`.
///
/// Each tensor goes from its source to the device as it is stored: the bytes are copied from
/// the map (laid out anew where Burn's layout differs: a permutation, on all host cores, no
/// arithmetic), uploaded in the stored dtype and converted on the device (aclnnCast on an NPU),
/// so the host holds one tensor (one chunk of experts) at a time and computes nothing.
pub struct Source<'a, B: Backend> {
    tensors: &'a dyn Tensors,
    dtype: DType,
    device: &'a B::Device,
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

    /// `data` on the device in the model's dtype: uploaded as it is, converted there.
    fn upload<const D: usize>(&self, data: TensorData) -> Tensor<B, D> {
        let stored = data.dtype;
        let t = Tensor::from_data(data, (self.device, stored));
        if stored == self.dtype {
            t
        } else {
            t.cast(self.dtype)
        }
    }

    fn param<const D: usize>(&self, data: TensorData) -> Param<Tensor<B, D>> {
        Param::from_tensor(self.upload(data))
    }

    /// The tensor `name` as it is stored.
    pub fn tensor<const D: usize>(&self, name: &str) -> Result<Param<Tensor<B, D>>, LoadError> {
        let t = self.tensors.stored(name)?;
        self.count(t.bytes.len());
        Ok(self.param(TensorData::from_bytes_vec(
            t.bytes.into_owned(),
            t.shape,
            t.dtype,
        )))
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
        let row = t.shape[1..].iter().product::<usize>() * t.dtype.size();
        let mut bytes = vec![0u8; pad_to * row];
        bytes[..rows.len() * row].copy_from_slice(&t.bytes[rows.start * row..rows.end * row]);
        self.count(rows.len() * row);
        let mut shape = t.shape.clone();
        shape[0] = pad_to;
        Ok(self.param(TensorData::from_bytes_vec(bytes, shape, t.dtype)))
    }

    /// The linear layer `prefix.weight` (and `prefix.bias`).
    pub fn linear(&self, prefix: &str, bias: bool) -> Result<Linear<B>, LoadError> {
        self.linear_part(prefix, bias, Cut::Whole)
    }

    /// The part `cut` of the linear layer `prefix.weight` (and `prefix.bias`), in Burn's
    /// `[in, out]` layout: only the part's elements are read and laid out.
    pub fn linear_part(&self, prefix: &str, bias: bool, cut: Cut) -> Result<Linear<B>, LoadError> {
        let w = self.tensors.stored(&format!("{prefix}.weight"))?;
        let [out, d_in] = matrix(&w.shape);
        let (rows, cols, width) = match &cut {
            Cut::Whole => (0..out, 0..d_in, out),
            Cut::Out { range, width } => (range.clone(), 0..d_in, *width),
            Cut::In(range) => (0..out, range.clone(), out),
        };
        let size = w.dtype.size();
        let mut to = vec![0u8; cols.len() * width * size];
        self.count(rows.len() * cols.len() * size);
        transpose_part(&w.bytes, d_in, rows, cols.clone(), width, size, &mut to);
        let bias_name = format!("{prefix}.bias");
        Ok(Linear {
            weight: self.param(TensorData::from_bytes_vec(to, [cols.len(), width], w.dtype)),
            bias: match (bias, cut) {
                (false, _) => None,
                (true, Cut::Out { range, width }) => {
                    Some(self.tensor_rows(&bias_name, range, width)?)
                }
                (true, _) => Some(self.tensor(&bias_name)?),
            },
        })
    }

    /// The embedding table `name [V, H]`.
    pub fn embedding(&self, name: &str) -> Result<Embedding<B>, LoadError> {
        Ok(Embedding {
            weight: self.tensor(name)?,
        })
    }

    /// The weights `name(e) [out, in]` of the experts `experts` (a range of the layer's),
    /// stacked `[experts.len(), in, out]`.
    pub fn experts(
        &self,
        name: impl Fn(usize) -> String,
        experts: Range<usize>,
    ) -> Result<Param<Tensor<B, 3>>, LoadError> {
        let mut chunks = Vec::new();
        let mut chunk = Vec::new();
        let mut layout = None;
        let mut in_chunk = 0;
        for e in experts.clone() {
            let w = self.tensors.stored(&name(e))?;
            let [out, d_in] = matrix(&w.shape);
            let (dtype, size) = (w.dtype, w.dtype.size());
            layout = Some((d_in, out, dtype));
            let at = chunk.len();
            self.count(w.bytes.len());
            chunk.resize(at + w.bytes.len(), 0u8);
            transpose_part(&w.bytes, d_in, 0..out, 0..d_in, out, size, &mut chunk[at..]);
            in_chunk += 1;
            if chunk.len() >= EXPERT_CHUNK_BYTES || e + 1 == experts.end {
                let data = TensorData::from_bytes_vec(
                    std::mem::take(&mut chunk),
                    [in_chunk, d_in, out],
                    dtype,
                );
                chunks.push(self.upload::<3>(data));
                in_chunk = 0;
            }
        }
        layout.ok_or_else(|| LoadError::Config {
            model_type: "(experts)".into(),
            why: format!(
                "{} names no expert (experts {experts:?})",
                name(experts.start)
            ),
        })?;
        Ok(Param::from_tensor(join(chunks)))
    }

    /// The experts' weights of the fused layout transformers 5.x can write: one tensor `name`
    /// `[E, parts * out, in]` whose rows are `parts` weights `[out, in]` of each expert one after
    /// the other (`gate_up_proj`: the gate's rows, then the up projection's). Each part of the
    /// experts `experts` (a range of the E) stacked `[experts.len(), in, out]`.
    pub fn fused_experts(
        &self,
        name: &str,
        parts: usize,
        experts: Range<usize>,
    ) -> Result<Vec<Param<Tensor<B, 3>>>, LoadError> {
        let t = self.tensors.stored(name)?;
        let (rows, d_in) = match t.shape[..] {
            [e, rows, d_in] if rows % parts == 0 && experts.end <= e && !experts.is_empty() => {
                (rows, d_in)
            }
            _ => {
                return Err(LoadError::Config {
                    model_type: "(experts)".into(),
                    why: format!(
                        "{name} of shape {:?} is not [experts, {parts} x out, in] holding \
                         experts {experts:?}",
                        t.shape
                    ),
                })
            }
        };
        let (out, size) = (rows / parts, t.dtype.size());
        let matrix_bytes = out * d_in * size;
        let per_chunk = (EXPERT_CHUNK_BYTES / matrix_bytes.max(1)).max(1);
        Ok((0..parts)
            .map(|part| {
                let chunks = experts
                    .clone()
                    .step_by(per_chunk)
                    .map(|first| {
                        let n = per_chunk.min(experts.end - first);
                        let mut bytes = vec![0u8; n * matrix_bytes];
                        self.count(bytes.len());
                        for (i, to) in bytes.chunks_exact_mut(matrix_bytes).enumerate() {
                            let at = ((first + i) * parts + part) * matrix_bytes;
                            let from = &t.bytes[at..at + matrix_bytes];
                            transpose_part(from, d_in, 0..out, 0..d_in, out, size, to);
                        }
                        self.upload::<3>(TensorData::from_bytes_vec(bytes, [n, d_in, out], t.dtype))
                    })
                    .collect();
                Param::from_tensor(join(chunks))
            })
            .collect())
    }
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

/// The block `rows x cols` of a row-major matrix `from` of `stride` columns of `size`-byte
/// elements, written transposed into `to`: a `[cols.len(), width]` matrix (`width` at least
/// `rows.len()`; the columns past `rows.len()` are left as they are). Tiles that stay in cache,
/// the output's row bands shared among the host's cores.
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
    debug_assert_eq!(to.len(), cols.len() * width * size);
    debug_assert!(width >= rows.len());
    const TILE: usize = 32;
    let r = rows.len();
    // Output rows (one per input column) in bands of TILE, each band written by one task.
    to.par_chunks_mut(TILE * width * size)
        .enumerate()
        .for_each(|(band, out)| {
            let j0 = cols.start + band * TILE;
            let n = out.len() / (width * size);
            for i0 in (0..r).step_by(TILE) {
                for i in i0..(i0 + TILE).min(r) {
                    let at = ((rows.start + i) * stride + j0) * size;
                    for (dj, element) in from[at..at + n * size].chunks_exact(size).enumerate() {
                        let dst = (dj * width + i) * size;
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
    transpose_part(
        data.as_bytes(),
        c,
        0..r,
        0..c,
        r,
        data.dtype.size(),
        &mut to,
    );
    TensorData::from_bytes_vec(to, [c, r], data.dtype)
}
