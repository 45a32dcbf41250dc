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

use burn::module::Param;
use burn::nn::{Embedding, Linear};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor, TensorData};

use burn_ascend::{Ascend, AscendDevice};
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
pub struct Source<'a, B: Backend> {
    tensors: &'a dyn Tensors,
    dtype: DType,
    device: &'a B::Device,
    /// The buffer layouts are permuted into, kept from tensor to tensor: a fresh one per
    /// tensor costs the host a page fault per 4 KiB, which dominated loading.
    scratch: RefCell<Vec<u8>>,
}

impl<'a, B: Backend> Source<'a, B> {
    /// Tensors of `tensors`, uploaded to `device` in `dtype`.
    pub fn new(tensors: &'a dyn Tensors, dtype: DType, device: &'a B::Device) -> Self {
        Self {
            tensors,
            dtype,
            device,
            scratch: RefCell::new(Vec::new()),
        }
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

    /// The linear layer `prefix.weight` (and `prefix.bias`).
    pub fn linear(&self, prefix: &str, bias: bool) -> Result<Linear<B>, LoadError> {
        let w = self.tensors.stored(&format!("{prefix}.weight"))?;
        let [out, d_in] = matrix(&w.shape);
        let mut to = self.scratch(w.bytes.len());
        transpose_into(&w.bytes, &mut to, out, d_in, w.dtype.size());
        let weight = self.upload(&to, [d_in, out], w.dtype);
        drop(to);
        Ok(Linear {
            weight: Param::from_tensor(weight),
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
