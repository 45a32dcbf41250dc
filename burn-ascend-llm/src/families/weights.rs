//! Between Hugging Face tensors and the blocks' parameters: the names and shapes a model
//! expects ([`Expected`]), reading them ([`Source`]) and writing them back ([`Sink`]).
//!
//! transformers stores a linear layer's weight `[out, in]` and each expert apart; Burn's
//! `Linear` holds `[in, out]` and the grouped matmul takes the experts stacked `[E, in, out]`.
//! The layouts are changed on the host while the file is decoded (a permutation of elements,
//! no arithmetic), so each weight is uploaded once, contiguous, in the model's dtype.

use burn::module::Param;
use burn::nn::{Embedding, Linear};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor, TensorData};

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

/// Reads tensors `(name, dtype)` in the checkpoint's layout, converted to dtype.
pub type Reader<'a> = dyn Fn(&str, DType) -> Result<TensorData, LoadError> + 'a;

/// Reads a checkpoint's tensors into parameters on `device`, in `dtype`.
pub struct Source<'a, B: Backend> {
    read: &'a Reader<'a>,
    dtype: DType,
    device: &'a B::Device,
}

impl<'a, B: Backend> Source<'a, B> {
    /// Tensors of `read`, uploaded to `device` in `dtype`.
    pub fn new(read: &'a Reader<'a>, dtype: DType, device: &'a B::Device) -> Self {
        Self {
            read,
            dtype,
            device,
        }
    }

    fn upload<const D: usize>(&self, data: TensorData) -> Param<Tensor<B, D>> {
        Param::from_tensor(Tensor::from_data(data, (self.device, self.dtype)))
    }

    /// The tensor `name` as it is stored.
    pub fn tensor<const D: usize>(&self, name: &str) -> Result<Param<Tensor<B, D>>, LoadError> {
        Ok(self.upload((self.read)(name, self.dtype)?))
    }

    /// The linear layer `prefix.weight` (and `prefix.bias`).
    pub fn linear(&self, prefix: &str, bias: bool) -> Result<Linear<B>, LoadError> {
        let weight = transpose((self.read)(&format!("{prefix}.weight"), self.dtype)?);
        Ok(Linear {
            weight: self.upload(weight),
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
        let mut bytes = Vec::new();
        let mut shape = Vec::new();
        for e in 0..experts {
            let w = transpose((self.read)(&name(e), self.dtype)?);
            shape = w.shape.to_vec();
            bytes.extend_from_slice(w.as_bytes());
        }
        let shape = [experts, shape[0], shape[1]];
        Ok(self.upload(TensorData::from_bytes_vec(bytes, shape, self.dtype)))
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
        let data = (self.read)(name, self.dtype)?;
        let (e, out) = (data.shape[0], data.shape[1] / parts);
        Ok((0..parts)
            .map(|part| {
                let mut bytes = Vec::with_capacity(data.as_bytes().len() / parts);
                for i in 0..e {
                    let rows = expert(&data, i).split_rows(parts, part);
                    bytes.extend_from_slice(transpose(rows).as_bytes());
                }
                let shape = [e, data.shape[2], out];
                self.upload(TensorData::from_bytes_vec(bytes, shape, self.dtype))
            })
            .collect())
    }
}

/// Expert `i` `[R, C]` of stacked experts `[E, R, C]`.
fn expert(data: &TensorData, i: usize) -> TensorData {
    let size = data.as_bytes().len() / data.shape[0];
    let bytes = data.as_bytes()[i * size..(i + 1) * size].to_vec();
    TensorData::from_bytes_vec(bytes, [data.shape[1], data.shape[2]], data.dtype)
}

/// Rows of a matrix, split in equal parts.
trait SplitRows {
    fn split_rows(&self, parts: usize, part: usize) -> TensorData;
}

impl SplitRows for TensorData {
    fn split_rows(&self, parts: usize, part: usize) -> TensorData {
        let size = self.as_bytes().len() / parts;
        let bytes = self.as_bytes()[part * size..(part + 1) * size].to_vec();
        TensorData::from_bytes_vec(bytes, [self.shape[0] / parts, self.shape[1]], self.dtype)
    }
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
    let size = data.dtype.size();
    let from = data.as_bytes();
    let mut to = vec![0u8; from.len()];
    for i in 0..r {
        for j in 0..c {
            let (src, dst) = ((i * c + j) * size, (j * r + i) * size);
            to[dst..dst + size].copy_from_slice(&from[src..src + size]);
        }
    }
    TensorData::from_bytes_vec(to, [c, r], data.dtype)
}
