//! The shared part of Burn's `ActivationOps`.

/// The `ActivationOps` methods whose text is the same for Burn 0.21 and 0.22, for each adapter's
/// `impl ActivationOps<Ascend> for Ascend` (the methods that differ stand beside the invocation).
#[macro_export]
macro_rules! adapter_activation_ops {
    () => {
        fn leaky_relu(tensor: FloatTensor<Ascend>, negative_slope: Scalar) -> FloatTensor<Ascend> {
            run(
                "leaky_relu",
                act::leaky_relu(&tensor, negative_slope.elem::<f64>()),
            )
        }

        fn relu(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("relu", act::relu(&tensor))
        }

        fn relu_backward(
            output: FloatTensor<Ascend>,
            grad: FloatTensor<Ascend>,
        ) -> FloatTensor<Ascend> {
            run("relu_backward", act::relu_backward(&output, &grad))
        }

        fn gelu(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("gelu", act::activation(Activation::Gelu, &tensor))
        }

        fn gelu_backward(x: FloatTensor<Ascend>, grad: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("gelu_backward", act::gelu_backward(&x, &grad))
        }

        fn sigmoid(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run("sigmoid", act::activation(Activation::Sigmoid, &tensor))
        }

        fn sigmoid_backward(
            output: FloatTensor<Ascend>,
            grad: FloatTensor<Ascend>,
        ) -> FloatTensor<Ascend> {
            run("sigmoid_backward", act::sigmoid_backward(&output, &grad))
        }

        fn hard_sigmoid(
            tensor: FloatTensor<Ascend>,
            alpha: Scalar,
            beta: Scalar,
        ) -> FloatTensor<Ascend> {
            run(
                "hard_sigmoid",
                act::hard_sigmoid(&tensor, alpha.elem::<f64>(), beta.elem::<f64>()),
            )
        }

        fn log_sigmoid(tensor: FloatTensor<Ascend>) -> FloatTensor<Ascend> {
            run(
                "log_sigmoid",
                act::activation(Activation::LogSigmoid, &tensor),
            )
        }

        fn softmax(tensor: FloatTensor<Ascend>, dim: usize) -> FloatTensor<Ascend> {
            run("softmax", act::softmax(&tensor, dim, false))
        }

        fn log_softmax(tensor: FloatTensor<Ascend>, dim: usize) -> FloatTensor<Ascend> {
            run("log_softmax", act::softmax(&tensor, dim, true))
        }

        fn log_sigmoid_backward(
            x: FloatTensor<Ascend>,
            grad: FloatTensor<Ascend>,
        ) -> FloatTensor<Ascend> {
            run("log_sigmoid_backward", act::log_sigmoid_backward(&x, &grad))
        }
    };
}
