//! SwiGLU in one launch: aclnnSwiGlu (`aclnn-fused-decode-ops.md` §5.1) on the output of one
//! matmul by the gate and up weights side by side, where the composition takes three (the
//! sigmoid, its product with the gate, the product with the up half) after two matmuls.

use crate::acl::aclnn;
use crate::acl::{AclResult, DataType};
use crate::ops::broadcast::invalid_input;
use crate::ops::copy::contiguous;
use crate::ops::tensor::AscendTensor;

use super::Operand;

/// Whether `t`'s CANN exports aclnnSwiGlu (8.1.RC1 on, `ascend_acl::release`).
pub fn swiglu_available(t: &AscendTensor) -> bool {
    ascend_acl::aclnn_exported!(t.ctx().bind(), aclnnSwiGlu).is_ok()
}

/// The contract of [`swiglu`]: a float `x [.., 2N]` (at least 1-D, its last dim even).
pub fn check_swiglu(x: &impl Operand) -> AclResult<()> {
    let dims = x.dims();
    let dtype = x.data_type();
    if dtype.is_float() && dims.last().is_some_and(|n| n % 2 == 0) {
        return Ok(());
    }
    Err(invalid_input(
        "swiglu",
        format!(
            "needs a float x [.., 2N] (the gate's N features, then the up projection's), got {}",
            x.describe()
        ),
    ))
}

/// Whether the operator takes `x`: F16, BF16 or F32 (§5.1).
pub fn swiglu_fits(x: &AscendTensor) -> bool {
    matches!(x.dtype, DataType::F16 | DataType::BF16 | DataType::F32)
}

/// `silu(x[.., :N]) * x[.., N:]` for `x [.., 2N]`: a new contiguous `[.., N]` of x's dtype,
/// each element computed in f32 and rounded once. x is made contiguous first (the operator
/// refuses strided operands).
pub fn swiglu(x: &AscendTensor) -> AclResult<AscendTensor> {
    const OP: &str = "swiglu";
    check_swiglu(x)?;
    let mut shape = x.shape().to_vec();
    let last = shape.len() - 1;
    shape[last] /= 2;
    let out = AscendTensor::empty(x.ctx(), shape, x.dtype)?;
    if out.layout.numel() == 0 {
        return Ok(out);
    }
    let x = contiguous(x)?;
    aclnn!(&**x.ctx(), aclnnSwiGlu(x.desc()?, -1, out.desc()?)).map_err(|e| {
        e.with_context(|| format!("{OP}: aclnnSwiGlu of {} along its last dim", x.describe()))
    })?;
    Ok(out)
}
