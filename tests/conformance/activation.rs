//! `ActivationOps`: the forward activations through `burn::tensor::activation`, and the four
//! `*_backward` methods through `Autodiff<B>`, whose backward pass calls them.

use burn::tensor::activation;
use burn::tensor::backend::Backend;
use burn::tensor::{Float, Tensor};
use burn_autodiff::Autodiff;

use crate::common::*;
use crate::ops;

ops! {
    unary activation_relu(Float, FLOATS, Role::Lhs) |x| activation::relu(x);
    unary activation_leaky_relu(Float, FLOATS, Role::Lhs) |x| activation::leaky_relu(x, 0.125);
    unary activation_gelu(Float, FLOATS, Role::Lhs, Tolerance::F32_IN_F64) |x| activation::gelu(x);
    /// One weight per channel (dim 1), and one shared weight.
    custom activation_prelu(FLOATS) |c| {
        let x = c.input::<Float>(SHAPE, Role::Lhs, 0);
        let per_channel = c.dense::<Float, 1>([3], Role::Rhs, 1);
        let shared = c.dense::<Float, 1>([1], Role::Rhs, 2);
        (activation::prelu(x.clone(), per_channel), activation::prelu(x, shared))
    };
    unary activation_sigmoid(Float, FLOATS, Role::Lhs, Tolerance::F32_IN_F64) |x| activation::sigmoid(x);
    unary activation_hard_sigmoid(Float, FLOATS, Role::Lhs) |x| {
        activation::hard_sigmoid(x, 0.2, 0.5)
    };
    unary activation_log_sigmoid(Float, FLOATS, Role::Lhs, Tolerance::F32_IN_F64) |x| {
        activation::log_sigmoid(x)
    };
    unary activation_softmax(Float, FLOATS, Role::Lhs, Tolerance::LOOSE) |x| {
        (activation::softmax(x.clone(), 1), activation::softmax(x, 2))
    };
    /// Not along the empty dim of the empty layout: there the reference's max_dim panics.
    unary activation_log_softmax(Float, FLOATS, Role::Lhs, Tolerance::LOOSE) |x| {
        (activation::log_softmax(x.clone(), 0), activation::log_softmax(x, 2))
    };
    unary activation_softmin(Float, FLOATS, Role::Lhs, Tolerance::LOOSE) |x| {
        (activation::softmin(x.clone(), 1), activation::softmin(x, 2))
    };
    custom activation_relu_backward(FLOATS) |c| input_grad(c, activation::relu);
    custom activation_gelu_backward(FLOATS, Tolerance::F32_IN_F64) |c| {
        input_grad(c, activation::gelu)
    };
    custom activation_sigmoid_backward(FLOATS, Tolerance::F32_IN_F64) |c| {
        input_grad(c, activation::sigmoid)
    };
    custom activation_log_sigmoid_backward(FLOATS, Tolerance::F32_IN_F64) |c| {
        input_grad(c, activation::log_sigmoid)
    };
}

/// The gradient that `activation` passes back to an input in the view under test, for an
/// upstream gradient of `Rhs` values.
fn input_grad<B: Backend>(
    c: &Case<B>,
    activation: fn(Tensor<Autodiff<B>, 3>) -> Tensor<Autodiff<B>, 3>,
) -> Tensor<B, 3> {
    let x = input::<Autodiff<B>, Float>(&c.device, c.dtype, SHAPE, c.view(), Role::Lhs, 0)
        .require_grad();
    let upstream =
        input::<Autodiff<B>, Float>(&c.device, c.dtype, SHAPE, View::Contiguous, Role::Rhs, 3);
    let grads = (activation(x.clone()) * upstream).sum().backward();
    x.grad(&grads).expect("the input takes part in the graph")
}
