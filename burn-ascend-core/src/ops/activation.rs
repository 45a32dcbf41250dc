//! Activations and their backward passes.
//!
//! Bridged gaps (Atlas A2): Sigmoid, LogSigmoid, Gelu, GeluBackward and LeakyRelu take
//! F16/BF16/F32 only, so F64 runs them in F32 and casts back (F32 precision); Relu lacks
//! F64/I16/U8 (ClampMin(0) instead) and ThresholdBackward lacks F64/I64/I16 (a select on
//! `output > 0` instead). hard_sigmoid with Burn's general alpha/beta is `clamp(alpha*x +
//! beta, 0, 1)`; log_sigmoid_backward is `grad * sigmoid(-x)` (aclnnLogSigmoidBackward needs a
//! forward buffer Burn does not keep).

use super::arith::{binary, binary_scalar, BinaryOp};
use super::compare::{compare_scalar, select, Compare};
use super::copy::cast;
use super::creation::zeros;
use super::math::{clamp, unary, Unary};
use super::tensor::AscendTensor;
use crate::acl::handles::{HostScalar, ScalarDesc};
use crate::acl::{AclResult, DataType};

/// An activation taking F16, BF16 and F32 only on Atlas A2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Activation {
    Sigmoid,
    LogSigmoid,
    Gelu,
}

fn via_f32(
    x: &AscendTensor,
    f: impl FnOnce(&AscendTensor) -> AclResult<AscendTensor>,
) -> AclResult<AscendTensor> {
    if x.dtype == DataType::F64 {
        cast(&f(&cast(x, DataType::F32)?)?, DataType::F64)
    } else {
        f(x)
    }
}

/// `op(x)`.
pub fn activation(op: Activation, x: &AscendTensor) -> AclResult<AscendTensor> {
    via_f32(x, |x| {
        let out = AscendTensor::empty(x.ctx(), x.shape().to_vec(), x.dtype)?;
        if out.layout.numel() > 0 {
            let (i, o) = (x.desc()?, out.desc()?);
            let (i, o) = (&i, &o);
            match op {
                Activation::Sigmoid => run_op!(x.ctx(), aclnnSigmoid(i, o), x.describe()),
                Activation::LogSigmoid => run_op!(x.ctx(), aclnnLogSigmoid(i, o), x.describe()),
                Activation::Gelu => run_op!(x.ctx(), aclnnGelu(i, o), x.describe()),
            }?;
        }
        Ok(out)
    })
}

/// `max(x, 0)`.
pub fn relu(x: &AscendTensor) -> AclResult<AscendTensor> {
    use DataType::*;
    if !matches!(x.dtype, F32 | F16 | I8 | I32 | I64 | BF16) {
        return clamp(x, Some(zero_of(x.dtype)), None);
    }
    let out = AscendTensor::empty(x.ctx(), x.shape().to_vec(), x.dtype)?;
    if out.layout.numel() > 0 {
        run_op!(x.ctx(), aclnnRelu(x.desc()?, out.desc()?), x.describe())?;
    }
    Ok(out)
}

fn zero_of(dtype: DataType) -> HostScalar {
    if dtype.is_float() {
        HostScalar::Float(0.0)
    } else {
        HostScalar::Int(0)
    }
}

/// `grad` where `output > 0`, else 0.
pub fn relu_backward(output: &AscendTensor, grad: &AscendTensor) -> AclResult<AscendTensor> {
    use DataType::*;
    if !matches!(grad.dtype, F32 | BF16 | F16 | I32 | I8 | U8) {
        let positive = compare_scalar(Compare::Gt, output, zero_of(output.dtype))?;
        return select(&positive, grad, &zeros(grad.ctx(), Vec::new(), grad.dtype)?);
    }
    let out = AscendTensor::empty(grad.ctx(), grad.shape().to_vec(), grad.dtype)?;
    if out.layout.numel() > 0 {
        let t = ScalarDesc::new(grad.ctx().bind(), zero_of(grad.dtype))?;
        let what = format!("{} at {}", grad.describe(), output.describe());
        run_op!(
            grad.ctx(),
            aclnnThresholdBackward(grad.desc()?, output.desc()?, &t, out.desc()?),
            what
        )?;
    }
    Ok(out)
}

/// `x > 0 ? x : slope * x`.
pub fn leaky_relu(x: &AscendTensor, slope: f64) -> AclResult<AscendTensor> {
    via_f32(x, |x| {
        let out = AscendTensor::empty(x.ctx(), x.shape().to_vec(), x.dtype)?;
        if out.layout.numel() > 0 {
            let s = ScalarDesc::new(x.ctx().bind(), HostScalar::Float(slope))?;
            run_op!(
                x.ctx(),
                aclnnLeakyRelu(x.desc()?, &s, out.desc()?),
                x.describe()
            )?;
        }
        Ok(out)
    })
}

/// The gradient of the exact (erf) GELU at `x`, times `grad`.
pub fn gelu_backward(x: &AscendTensor, grad: &AscendTensor) -> AclResult<AscendTensor> {
    if x.dtype == DataType::F64 {
        let g = gelu_backward(&cast(x, DataType::F32)?, &cast(grad, DataType::F32)?)?;
        return cast(&g, DataType::F64);
    }
    let grad = cast(grad, x.dtype)?;
    let out = AscendTensor::empty(x.ctx(), x.shape().to_vec(), x.dtype)?;
    if out.layout.numel() > 0 {
        let what = format!("{} at {}", grad.describe(), x.describe());
        run_op!(
            x.ctx(),
            aclnnGeluBackward(grad.desc()?, x.desc()?, out.desc()?),
            what
        )?;
    }
    Ok(out)
}

/// `grad * y * (1 - y)` for the sigmoid output `y`.
pub fn sigmoid_backward(output: &AscendTensor, grad: &AscendTensor) -> AclResult<AscendTensor> {
    let grad = cast(grad, output.dtype)?;
    let out = AscendTensor::empty(output.ctx(), output.shape().to_vec(), output.dtype)?;
    if out.layout.numel() > 0 {
        let what = format!("{} at {}", grad.describe(), output.describe());
        run_op!(
            output.ctx(),
            aclnnSigmoidBackward(grad.desc()?, output.desc()?, out.desc()?),
            what
        )?;
    }
    Ok(out)
}

/// `clamp(alpha * x + beta, 0, 1)`.
pub fn hard_sigmoid(x: &AscendTensor, alpha: f64, beta: f64) -> AclResult<AscendTensor> {
    let scaled = binary_scalar(BinaryOp::Mul, x, HostScalar::Float(alpha))?;
    let shifted = binary_scalar(BinaryOp::Add, &scaled, HostScalar::Float(beta))?;
    clamp(
        &shifted,
        Some(HostScalar::Float(0.0)),
        Some(HostScalar::Float(1.0)),
    )
}

/// `grad * sigmoid(-x)`.
pub fn log_sigmoid_backward(x: &AscendTensor, grad: &AscendTensor) -> AclResult<AscendTensor> {
    let s = activation(Activation::Sigmoid, &unary(Unary::Neg, x)?)?;
    binary(BinaryOp::Mul, grad, &s)
}

/// Softmax (or log-softmax) along `dim`.
pub fn softmax(x: &AscendTensor, dim: usize, log: bool) -> AclResult<AscendTensor> {
    let out = AscendTensor::empty(x.ctx(), x.shape().to_vec(), x.dtype)?;
    if out.layout.numel() > 0 {
        let what = format!("{} along {dim}", x.describe());
        let (i, o) = (x.desc()?, out.desc()?);
        if log {
            run_op!(x.ctx(), aclnnLogSoftmax(&i, dim as i64, &o), what)?;
        } else {
            run_op!(x.ctx(), aclnnSoftmax(&i, dim as i64, &o), what)?;
        }
    }
    Ok(out)
}
