//! The fused-ops API: Burn's custom-operation pattern. [`FusedOps`] has one method per fused
//! operation (contracts: the project's fused-ops specification), each with a default composed
//! from standard Burn ops, so model code using it runs on any backend; the defaults are also the
//! reference the kernels are tested against. `Ascend` overrides them with the Ascend C kernels.
//! `Autodiff<B>` keeps the composed defaults, which are differentiable.

use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_autodiff::Autodiff;
use burn_tensor::{Int, Tensor, TensorPrimitive};

use super::*;
use crate::ops::fused;

type Float2<B> = Tensor<B, 2>;
type Ints<B> = Tensor<B, 1, Int>;

fn float<B: Backend, const D: usize>(t: FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

fn prim<B: Backend, const D: usize>(t: Tensor<B, D>) -> FloatTensor<B> {
    t.into_primitive().tensor()
}

fn int<B: Backend, const D: usize>(t: IntTensor<B>) -> Tensor<B, D, Int> {
    Tensor::from_primitive(t)
}

/// Layer-norm results: normalised rows and the f32 row statistics.
pub struct LayerNormOutput<B: Backend> {
    /// `(x - mean) * rstd * gamma + beta`, x's shape and dtype.
    pub y: FloatTensor<B>,
    /// Row means `[M]`, f32.
    pub mean: FloatTensor<B>,
    /// Row reciprocal standard deviations `[M]`, f32.
    pub rstd: FloatTensor<B>,
}

/// Layer-norm gradients.
pub struct LayerNormGrads<B: Backend> {
    /// Gradient of x, x's shape and dtype.
    pub dx: FloatTensor<B>,
    /// Gradient of gamma `[N]`.
    pub dgamma: FloatTensor<B>,
    /// Gradient of beta `[N]`.
    pub dbeta: FloatTensor<B>,
}

/// Fused operations.
pub trait FusedOps: Backend {
    /// `x + y` over 1-D float tensors of equal length.
    fn vector_add(x: FloatTensor<Self>, y: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::float_add(x, y)
    }

    /// `x + y` over 1-D integer tensors of equal length.
    fn int_vector_add(x: IntTensor<Self>, y: IntTensor<Self>) -> IntTensor<Self> {
        Self::int_add(x, y)
    }

    /// Layer norm over the last dim of `x` (leading dims flattened into rows), statistics in f32.
    fn layer_norm(
        x: FloatTensor<Self>,
        gamma: Option<FloatTensor<Self>>,
        beta: Option<FloatTensor<Self>>,
        eps: f64,
    ) -> LayerNormOutput<Self> {
        let shape = x.shape();
        let n = shape[shape.num_dims() - 1];
        let dtype = x.dtype();
        let x: Float2<Self> = float::<Self, 2>(Self::float_reshape(
            x,
            [shape.num_elements() / n.max(1), n].into(),
        ))
        .cast(DType::F32);
        let mean = x.clone().mean_dim(1);
        let centred = x - mean.clone();
        let var = centred.clone().powi_scalar(2).mean_dim(1);
        let rstd = (var + eps).sqrt().recip();
        let mut y = centred * rstd.clone();
        if let Some(g) = gamma {
            y = y * float::<Self, 1>(g).cast(DType::F32).unsqueeze();
        }
        if let Some(b) = beta {
            y = y + float::<Self, 1>(b).cast(DType::F32).unsqueeze();
        }
        LayerNormOutput {
            y: Self::float_reshape(prim(y.cast(dtype)), shape),
            mean: prim(mean.flatten::<1>(0, 1)),
            rstd: prim(rstd.flatten::<1>(0, 1)),
        }
    }

    /// Gradients of [`FusedOps::layer_norm`]: `dx = rstd * (g - mean_N(g) - xhat * mean_N(g *
    /// xhat))` with `g = dy * gamma` and `xhat = (x - mean) * rstd`; `dgamma = sum_M dy * xhat`,
    /// `dbeta = sum_M dy`.
    fn layer_norm_backward(
        dy: FloatTensor<Self>,
        x: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        gamma: Option<FloatTensor<Self>>,
    ) -> LayerNormGrads<Self> {
        let shape = x.shape();
        let n = shape[shape.num_dims() - 1];
        let m = shape.num_elements() / n.max(1);
        let dtype = x.dtype();
        let as2 = |t: FloatTensor<Self>| {
            float::<Self, 2>(Self::float_reshape(t, [m, n].into())).cast(DType::F32)
        };
        let (dy, x) = (as2(dy), as2(x));
        let (mean, rstd): (Float2<Self>, Float2<Self>) = (
            float::<Self, 1>(mean).cast(DType::F32).unsqueeze_dim(1),
            float::<Self, 1>(rstd).cast(DType::F32).unsqueeze_dim(1),
        );
        let xhat = (x - mean) * rstd.clone();
        let g = match gamma {
            Some(gamma) => dy.clone() * float::<Self, 1>(gamma).cast(DType::F32).unsqueeze(),
            None => dy.clone(),
        };
        let dx =
            (g.clone() - g.clone().mean_dim(1) - xhat.clone() * (g * xhat.clone()).mean_dim(1))
                * rstd;
        LayerNormGrads {
            dx: Self::float_reshape(prim(dx.cast(dtype)), shape),
            dgamma: prim(
                (dy.clone() * xhat)
                    .sum_dim(0)
                    .flatten::<1>(0, 1)
                    .cast(dtype),
            ),
            dbeta: prim(dy.sum_dim(0).flatten::<1>(0, 1).cast(dtype)),
        }
    }

    /// `out[i] = x[indices[i] / top_k]` for `x [T, H]` and a permutation `indices [T*K]`.
    fn moe_gather(
        x: FloatTensor<Self>,
        indices: IntTensor<Self>,
        top_k: usize,
    ) -> FloatTensor<Self> {
        let rows = int::<Self, 1>(indices) / (top_k as i64);
        prim(float::<Self, 2>(x).select(0, rows))
    }

    /// `out[indices[i] / K] += w(indices[i]) * y[i]` for `y [T*K, H]`, accumulated in f32.
    fn moe_scatter(
        y: FloatTensor<Self>,
        indices: IntTensor<Self>,
        weights: Option<FloatTensor<Self>>,
        top_k: usize,
    ) -> FloatTensor<Self> {
        let y: Float2<Self> = float(y);
        let dtype = y.dtype();
        let [slots, h] = y.dims();
        let idx: Ints<Self> = int(indices);
        let mut terms = y.cast(DType::F32);
        if let Some(w) = weights {
            let w = float::<Self, 1>(w).cast(DType::F32).select(0, idx.clone());
            terms = terms * w.unsqueeze_dim(1);
        }
        let tokens = slots / top_k.max(1);
        let out = Float2::<Self>::zeros([tokens, h], (&terms.device(), DType::F32));
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

    /// `out[i] = x[perm[i]]` for `x [S, D]`.
    fn token_rearrange(x: FloatTensor<Self>, perm: IntTensor<Self>) -> FloatTensor<Self> {
        prim(float::<Self, 2>(x).select(0, int(perm)))
    }
}

impl FusedOps for Ascend {
    fn vector_add(x: FloatTensor<Self>, y: FloatTensor<Self>) -> FloatTensor<Self> {
        run("vector_add", fused::vector_add(&x, &y))
    }

    fn int_vector_add(x: IntTensor<Self>, y: IntTensor<Self>) -> IntTensor<Self> {
        run("vector_add", fused::vector_add(&x, &y))
    }

    fn layer_norm(
        x: FloatTensor<Self>,
        gamma: Option<FloatTensor<Self>>,
        beta: Option<FloatTensor<Self>>,
        eps: f64,
    ) -> LayerNormOutput<Self> {
        let (y, mean, rstd) = run(
            "layer_norm",
            fused::layer_norm(&x, gamma.as_ref(), beta.as_ref(), eps),
        );
        LayerNormOutput { y, mean, rstd }
    }

    fn moe_gather(
        x: FloatTensor<Self>,
        indices: IntTensor<Self>,
        top_k: usize,
    ) -> FloatTensor<Self> {
        run("moe_gather", fused::moe_gather(&x, &indices, top_k))
    }

    fn moe_scatter(
        y: FloatTensor<Self>,
        indices: IntTensor<Self>,
        weights: Option<FloatTensor<Self>>,
        top_k: usize,
    ) -> FloatTensor<Self> {
        run(
            "moe_scatter",
            fused::moe_scatter(&y, &indices, weights.as_ref(), top_k),
        )
    }

    fn token_rearrange(x: FloatTensor<Self>, perm: IntTensor<Self>) -> FloatTensor<Self> {
        run("token_rearrange", fused::token_rearrange(&x, &perm))
    }
}

impl<B: FusedOps, C: CheckpointStrategy> FusedOps for Autodiff<B, C> {}

#[cfg(feature = "flex")]
impl FusedOps for burn_flex::Flex {}

/// `x + y` elementwise over 1-D tensors of equal length.
pub fn vector_add<B: FusedOps>(x: Tensor<B, 1>, y: Tensor<B, 1>) -> Tensor<B, 1> {
    float(B::vector_add(prim(x), prim(y)))
}

/// [`vector_add`] for integer tensors.
pub fn int_vector_add<B: FusedOps>(
    x: Tensor<B, 1, Int>,
    y: Tensor<B, 1, Int>,
) -> Tensor<B, 1, Int> {
    int(B::int_vector_add(x.into_primitive(), y.into_primitive()))
}

/// Layer norm over the last dim: `(y, mean, rstd)` with `mean` and `rstd` per row (f32).
pub fn layer_norm<B: FusedOps, const D: usize>(
    x: Tensor<B, D>,
    gamma: Option<Tensor<B, 1>>,
    beta: Option<Tensor<B, 1>>,
    eps: f64,
) -> (Tensor<B, D>, Tensor<B, 1>, Tensor<B, 1>) {
    let out = <B as FusedOps>::layer_norm(prim(x), gamma.map(prim), beta.map(prim), eps);
    (float(out.y), float(out.mean), float(out.rstd))
}

/// The gradients `(dx, dgamma, dbeta)` of [`layer_norm`].
pub fn layer_norm_backward<B: FusedOps, const D: usize>(
    dy: Tensor<B, D>,
    x: Tensor<B, D>,
    mean: Tensor<B, 1>,
    rstd: Tensor<B, 1>,
    gamma: Option<Tensor<B, 1>>,
) -> (Tensor<B, D>, Tensor<B, 1>, Tensor<B, 1>) {
    let g = B::layer_norm_backward(prim(dy), prim(x), prim(mean), prim(rstd), gamma.map(prim));
    (float(g.dx), float(g.dgamma), float(g.dbeta))
}

/// Expert-major permutation of tokens: `out[i] = x[indices[i] / top_k]`.
pub fn moe_gather<B: FusedOps>(
    x: Tensor<B, 2>,
    indices: Tensor<B, 1, Int>,
    top_k: usize,
) -> Tensor<B, 2> {
    float(B::moe_gather(prim(x), indices.into_primitive(), top_k))
}

/// Weighted un-permutation and top-k reduction of expert outputs.
pub fn moe_scatter<B: FusedOps>(
    y: Tensor<B, 2>,
    indices: Tensor<B, 1, Int>,
    weights: Option<Tensor<B, 1>>,
    top_k: usize,
) -> Tensor<B, 2> {
    float(B::moe_scatter(
        prim(y),
        indices.into_primitive(),
        weights.map(prim),
        top_k,
    ))
}

/// Row gather by a permutation: `out[i] = x[perm[i]]`.
pub fn token_rearrange<B: FusedOps>(x: Tensor<B, 2>, perm: Tensor<B, 1, Int>) -> Tensor<B, 2> {
    float(B::token_rearrange(prim(x), perm.into_primitive()))
}
