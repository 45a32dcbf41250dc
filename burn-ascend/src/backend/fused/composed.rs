//! The composed defaults of the fused ops: each written with standard Burn ops only, so it
//! runs on any backend. [`FusedOps`]'s default methods call them; tests and benchmarks call them
//! directly to run the reference composition on the same device as the kernel it checks.

use super::*;

pub use super::paged::{
    composed_alloc_extend as alloc_extend, composed_decode_attention as decode_attention,
    composed_extend_attention as extend_attention,
    composed_paged_prefill_attention as paged_prefill_attention,
};

/// The composed default of [`FusedOps::layer_norm`].
pub fn layer_norm<B: Backend>(
    x: FloatTensor<B>,
    gamma: Option<FloatTensor<B>>,
    beta: Option<FloatTensor<B>>,
    eps: f64,
) -> LayerNormOutput<B> {
    let shape = x.shape();
    let (m, n) = rows_cols(&shape);
    let dtype = x.dtype();
    if n == 0 {
        return LayerNormOutput {
            mean: nan_rows::<B>(&x, m),
            rstd: nan_rows::<B>(&x, m),
            y: x,
        };
    }
    let x: Float2<B> = float::<B, 2>(B::float_reshape(x, [m, n].into())).cast(DType::F32);
    let mean = x.clone().mean_dim(1);
    let centred = x - mean.clone();
    let var = centred.clone().powi_scalar(2).mean_dim(1);
    let rstd = (var + eps).sqrt().recip();
    let mut y = centred * rstd.clone();
    if let Some(g) = gamma {
        y = y * float::<B, 1>(g).cast(DType::F32).unsqueeze();
    }
    if let Some(b) = beta {
        y = y + float::<B, 1>(b).cast(DType::F32).unsqueeze();
    }
    LayerNormOutput {
        y: B::float_reshape(prim(y.cast(dtype)), shape),
        mean: prim(mean.flatten::<1>(0, 1)),
        rstd: prim(rstd.flatten::<1>(0, 1)),
    }
}

/// The composed default of [`FusedOps::layer_norm_backward`].
pub fn layer_norm_backward<B: Backend>(
    dy: FloatTensor<B>,
    x: FloatTensor<B>,
    mean: FloatTensor<B>,
    rstd: FloatTensor<B>,
    gamma: Option<FloatTensor<B>>,
) -> LayerNormGrads<B> {
    let shape = x.shape();
    let (m, n) = rows_cols(&shape);
    let dtype = x.dtype();
    let as2 =
        |t: FloatTensor<B>| float::<B, 2>(B::float_reshape(t, [m, n].into())).cast(DType::F32);
    let (dy, x) = (as2(dy), as2(x));
    let (mean, rstd): (Float2<B>, Float2<B>) = (
        float::<B, 1>(mean).cast(DType::F32).unsqueeze_dim(1),
        float::<B, 1>(rstd).cast(DType::F32).unsqueeze_dim(1),
    );
    let xhat = (x - mean) * rstd.clone();
    let g = match gamma {
        Some(gamma) => dy.clone() * float::<B, 1>(gamma).cast(DType::F32).unsqueeze(),
        None => dy.clone(),
    };
    let dx =
        (g.clone() - g.clone().mean_dim(1) - xhat.clone() * (g * xhat.clone()).mean_dim(1)) * rstd;
    LayerNormGrads {
        dx: B::float_reshape(prim(dx.cast(dtype)), shape),
        dgamma: prim(
            (dy.clone() * xhat)
                .sum_dim(0)
                .flatten::<1>(0, 1)
                .cast(dtype),
        ),
        dbeta: prim(dy.sum_dim(0).flatten::<1>(0, 1).cast(dtype)),
    }
}

/// `(rows, cols)` of a norm's input: the last dim and the product of the others (also when
/// there are no columns).
fn rows_cols(shape: &Shape) -> (usize, usize) {
    let dims = shape.as_slice();
    let (cols, leading) = dims.split_last().unwrap_or((&0, &[]));
    (leading.iter().product(), *cols)
}

/// The f32 statistic `[m]` of rows without columns: NaN, the mean of no values (some backends
/// refuse a mean over an empty dim).
fn nan_rows<B: Backend>(x: &FloatTensor<B>, m: usize) -> FloatTensor<B> {
    let device = B::float_device(x);
    prim(Tensor::<B, 1>::full([m], f32::NAN, (&device, DType::F32)))
}

/// The composed default of [`FusedOps::rms_norm`].
pub fn rms_norm<B: Backend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    eps: f64,
) -> RmsNormOutput<B> {
    let shape = x.shape();
    let (m, n) = rows_cols(&shape);
    let dtype = x.dtype();
    if n == 0 {
        return RmsNormOutput {
            rstd: nan_rows::<B>(&x, m),
            y: x,
        };
    }
    let x: Float2<B> = float::<B, 2>(B::float_reshape(x, [m, n].into())).cast(DType::F32);
    let rstd = (x.clone().powi_scalar(2).mean_dim(1) + eps).sqrt().recip();
    let y = x * rstd.clone() * float::<B, 1>(gamma).cast(DType::F32).unsqueeze();
    RmsNormOutput {
        y: B::float_reshape(prim(y.cast(dtype)), shape),
        rstd: prim(rstd.flatten::<1>(0, 1)),
    }
}

/// The composed default of [`FusedOps::add_rms_norm`]: the add in x1's dtype, then
/// [`FusedOps::rms_norm`] of the sum (so `Autodiff` differentiates through both).
pub fn add_rms_norm<B: FusedOps>(
    x1: FloatTensor<B>,
    x2: FloatTensor<B>,
    gamma: FloatTensor<B>,
    eps: f64,
) -> AddRmsNormOutput<B> {
    let x = B::float_add(x1, x2);
    let out = B::rms_norm(x.clone(), gamma, eps);
    AddRmsNormOutput {
        y: out.y,
        rstd: out.rstd,
        x,
    }
}

/// The composed default of [`FusedOps::rms_norm_backward`].
pub fn rms_norm_backward<B: Backend>(
    dy: FloatTensor<B>,
    x: FloatTensor<B>,
    rstd: FloatTensor<B>,
    gamma: FloatTensor<B>,
) -> RmsNormGrads<B> {
    let shape = x.shape();
    let (m, n) = rows_cols(&shape);
    let dtype = x.dtype();
    let device = B::float_device(&x);
    if m * n == 0 {
        // No element contributes to dgamma (and dx has none).
        return RmsNormGrads {
            dx: B::float_zeros(shape, &device, dtype.into()),
            dgamma: prim(Tensor::<B, 1>::zeros([n], (&device, DType::F32))),
        };
    }
    let as2 =
        |t: FloatTensor<B>| float::<B, 2>(B::float_reshape(t, [m, n].into())).cast(DType::F32);
    let (dy, x) = (as2(dy), as2(x));
    let rstd: Float2<B> = float::<B, 1>(rstd).cast(DType::F32).unsqueeze_dim(1);
    let xhat = x * rstd.clone();
    let g = dy.clone() * float::<B, 1>(gamma).cast(DType::F32).unsqueeze();
    let dx = (g.clone() - xhat.clone() * (g * xhat.clone()).mean_dim(1)) * rstd;
    RmsNormGrads {
        dx: B::float_reshape(prim(dx.cast(dtype)), shape),
        dgamma: prim((dy * xhat).sum_dim(0).flatten::<1>(0, 1)),
    }
}

/// The composed default of [`FusedOps::moe_gather`].
pub fn moe_gather<B: Backend>(
    x: FloatTensor<B>,
    indices: IntTensor<B>,
    top_k: usize,
) -> FloatTensor<B> {
    let rows = int::<B, 1>(indices) / (top_k as i64);
    prim(float::<B, 2>(x).select(0, rows))
}

/// The composed default of [`FusedOps::moe_scatter`].
pub fn moe_scatter<B: Backend>(
    y: FloatTensor<B>,
    indices: IntTensor<B>,
    weights: Option<FloatTensor<B>>,
    top_k: usize,
) -> FloatTensor<B> {
    let y: Float2<B> = float(y);
    let dtype = y.dtype();
    let [slots, h] = y.dims();
    let idx: Ints<B> = int(indices);
    let mut terms = y.cast(DType::F32);
    if let Some(w) = weights {
        let w = float::<B, 1>(w).cast(DType::F32).select(0, idx.clone());
        terms = terms * w.unsqueeze_dim(1);
    }
    let tokens = slots / top_k.max(1);
    let out = Float2::<B>::zeros([tokens, h], (&terms.device(), DType::F32));
    prim(
        out.select_assign(
            0,
            idx / (top_k as i64),
            terms,
            burn_tensor::IndexingUpdateOp::Add,
        )
        .cast(dtype),
    )
}

/// The composed default of [`FusedOps::token_rearrange`].
pub fn token_rearrange<B: Backend>(x: FloatTensor<B>, perm: IntTensor<B>) -> FloatTensor<B> {
    prim(float::<B, 2>(x).select(0, int(perm)))
}

/// The composed default of [`FusedOps::grouped_matmul`].
pub fn grouped_matmul<B: Backend>(
    x: FloatTensor<B>,
    weights: FloatTensor<B>,
    group_sizes: IntTensor<B>,
) -> FloatTensor<B> {
    let x: Float2<B> = float(x);
    let weights: Tensor<B, 3> = float(weights);
    let [rows, _] = x.dims();
    let [groups, _, n] = weights.dims();
    let masks = group_masks::<B>(group_sizes, rows, x.dtype());
    let zeros = Float2::<B>::zeros([rows, n], (&x.device(), x.dtype()));
    prim((0..groups).fold(zeros, |out, e| {
        let rows_e = x.clone() * masks.clone().narrow(1, e, 1);
        out + rows_e.matmul(weights.clone().narrow(0, e, 1).squeeze_dim::<2>(0))
    }))
}

/// The composed default of [`FusedOps::grouped_matmul_weight_grad`].
pub fn grouped_matmul_weight_grad<B: Backend>(
    x: FloatTensor<B>,
    dy: FloatTensor<B>,
    group_sizes: IntTensor<B>,
) -> FloatTensor<B> {
    let (x, dy): (Float2<B>, Float2<B>) = (float(x), float(dy));
    let [rows, _] = x.dims();
    let groups = group_sizes.shape()[0];
    let masks = group_masks::<B>(group_sizes, rows, x.dtype());
    let per_group = (0..groups)
        .map(|e| {
            (x.clone() * masks.clone().narrow(1, e, 1))
                .transpose()
                .matmul(dy.clone())
        })
        .collect();
    prim(Tensor::<B, 2>::stack::<3>(per_group, 0))
}

/// `[R, E]` in `dtype`: 1 where row `r` lies in group `e`, else 0. The groups tile the rows
/// in order, group `e` holding `group_sizes[e]` rows; the bounds come from a running sum on the
/// device.
fn group_masks<B: Backend>(group_sizes: IntTensor<B>, rows: usize, dtype: DType) -> Float2<B> {
    let sizes: Ints<B> = int(group_sizes);
    let groups = sizes.dims()[0];
    let row = Ints::<B>::arange(0..rows as i64, &sizes.device());
    let sizes = sizes.cast(row.dtype());
    let ends = sizes.clone().cumsum(0);
    let starts = ends.clone() - sizes;
    let across = |t: Ints<B>| t.unsqueeze::<2>().expand([rows, groups]);
    let row = row.unsqueeze_dim::<2>(1).expand([rows, groups]);
    row.clone()
        .greater_equal(across(starts))
        .bool_and(row.lower(across(ends)))
        .float()
        .cast(dtype)
}
