//! RMS norm with a learned scale, through the fused kernels.

use burn::module::{Module, Param};
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;
use burn_ascend::{fused, FusedOps};

/// `x / sqrt(mean(x^2) + eps) * weight` over the last dim.
#[derive(Module, Debug)]
pub struct RmsNorm<B: Backend> {
    /// The scale `[N]`.
    pub weight: Param<Tensor<B, 1>>,
    #[module(skip)]
    eps: f64,
}

impl<B: FusedOps> RmsNorm<B> {
    /// A norm of scale `weight [N]`.
    pub fn new(weight: Param<Tensor<B, 1>>, eps: f64) -> Self {
        Self { weight, eps }
    }

    /// Normalises the last dim of `x`.
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        fused::rms_norm(x, self.weight.val(), self.eps).0
    }

    /// The residual add then the norm: `(norm(x + y), x + y)`.
    pub fn add_forward<const D: usize>(
        &self,
        x: Tensor<B, D>,
        y: Tensor<B, D>,
    ) -> (Tensor<B, D>, Tensor<B, D>) {
        let (normed, _, sum) = fused::add_rms_norm(x, y, self.weight.val(), self.eps);
        (normed, sum)
    }
}
