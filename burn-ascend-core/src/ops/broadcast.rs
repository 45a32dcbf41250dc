//! Shape rules shared by the op families.

use super::tensor::AscendTensor;
use crate::acl::shape::broadcast_dims;
use crate::acl::types::status::ACLNN_ERR_PARAM_INVALID;
use crate::acl::{AclError, AclResult};

/// The broadcast shape of two operands, or an error naming the op and both operands.
pub fn broadcast_shape(op: &str, a: &AscendTensor, b: &AscendTensor) -> AclResult<Vec<usize>> {
    broadcast_dims(a.shape(), b.shape()).ok_or_else(|| {
        invalid_input(
            op,
            format!(
                "shapes of {} and {} do not broadcast",
                a.describe(),
                b.describe()
            ),
        )
    })
}

/// An input the backend rejects before calling the device.
pub fn invalid_input(op: &str, message: String) -> AclError {
    AclError::Call {
        code: ACLNN_ERR_PARAM_INVALID,
        function: op.to_string(),
        message,
        context: None,
    }
}
