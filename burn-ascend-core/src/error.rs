//! Typed errors: an [`AclError`] classified by what a caller can do about it.

use std::sync::OnceLock;

use crate::acl::hccl::result as hccl;
use crate::acl::types::status;
use crate::acl::AclError;

/// Why a backend op failed, as a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AscendError {
    /// The device ran out of memory, after every cached block was released.
    #[error("burn-ascend: {op} failed: {message}")]
    OutOfMemory {
        /// The op that allocated.
        op: String,
        /// Bytes requested (0 when the failing allocation was not one of the backend's pools).
        requested: usize,
        /// Bytes held by live tensors at the time.
        in_use: usize,
        /// Bytes of device memory in all, as the device reported it (0 if it did not say).
        capacity: usize,
        /// The full explanation.
        message: String,
    },
    /// A kernel or operator faulted on the device (an AI Core error, a bad index a kernel
    /// checked), or the device stopped at an earlier fault. Faults are sticky: every later call
    /// on the device fails until [`crate::reset_device`].
    #[error("burn-ascend: {op} failed: {message}")]
    DeviceFault {
        /// The op or kernel that reported it.
        op: String,
        /// The device's explanation (the kernel's printed text on the emulated NPU).
        message: String,
    },
    /// The op refused its arguments (shapes, dtypes, values) before anything ran.
    #[error("burn-ascend: {op} failed: {message}")]
    InvalidArgument {
        /// The op.
        op: String,
        /// What was wrong, with the shapes and dtypes involved.
        message: String,
    },
    /// The installed CANN (or kernel library) lacks what the op needs.
    #[error("burn-ascend: {op} failed: {message}")]
    MissingOp {
        /// The op.
        op: String,
        /// What is missing.
        message: String,
    },
    /// The device cannot be used: it does not exist, CANN cannot be loaded, or it was reset
    /// since the tensor was made (create tensors on it again).
    #[error("burn-ascend: {op} failed: {message}")]
    DeviceLost {
        /// The op.
        op: String,
        /// Why.
        message: String,
    },
}

impl AscendError {
    /// The error of `op` failing with `e`, classified by what a caller can do about it.
    pub fn from_acl(op: &str, e: &AclError) -> Self {
        let (op, message) = (op.to_string(), e.to_string());
        match e {
            AclError::OutOfMemory {
                requested,
                in_use,
                capacity,
                ..
            } => AscendError::OutOfMemory {
                op,
                requested: *requested,
                in_use: *in_use,
                capacity: *capacity,
                message,
            },
            AclError::InvalidArgument(_) => AscendError::InvalidArgument { op, message },
            AclError::MissingOp { .. } | AclError::Library(_) => {
                AscendError::MissingOp { op, message }
            }
            AclError::Load(_) | AclError::DeviceLost(_) => AscendError::DeviceLost { op, message },
            AclError::Hccl { code, .. } => match *code {
                hccl::HCCL_E_PARA | hccl::HCCL_E_PTR | hccl::HCCL_E_NOT_SUPPORT => {
                    AscendError::InvalidArgument { op, message }
                }
                hccl::HCCL_E_MEMORY => AscendError::OutOfMemory {
                    op,
                    requested: 0,
                    in_use: 0,
                    capacity: 0,
                    message,
                },
                // A failed transfer or runtime error: the device may have stopped.
                _ => AscendError::DeviceFault { op, message },
            },
            AclError::Call { code, .. } => match *code {
                code if crate::runtime::allocator::is_out_of_memory_status(code) => {
                    AscendError::OutOfMemory {
                        op,
                        requested: 0,
                        in_use: 0,
                        capacity: 0,
                        message,
                    }
                }
                status::ACL_ERROR_RT_NO_DEVICE
                | status::ACL_ERROR_RT_INVALID_DEVICEID
                | status::ACL_ERROR_UNINITIALIZE => AscendError::DeviceLost { op, message },
                status::ACL_ERROR_INVALID_PARAM
                | status::ACL_ERROR_RT_PARAM_INVALID
                | status::ACL_ERROR_RT_ADDR_UNALIGNED
                | status::ACLNN_ERR_PARAM_NULLPTR
                | status::ACLNN_ERR_PARAM_INVALID => AscendError::InvalidArgument { op, message },
                // Runtime and device codes (5xxxxx, 361001, ...): the device may have stopped.
                _ => AscendError::DeviceFault { op, message },
            },
        }
    }

    /// An argument error of `op`.
    pub fn invalid(op: &str, message: impl Into<String>) -> Self {
        AscendError::InvalidArgument {
            op: op.to_string(),
            message: message.into(),
        }
    }

    /// The op (or kernel) that failed.
    pub fn op(&self) -> &str {
        match self {
            AscendError::OutOfMemory { op, .. }
            | AscendError::DeviceFault { op, .. }
            | AscendError::InvalidArgument { op, .. }
            | AscendError::MissingOp { op, .. }
            | AscendError::DeviceLost { op, .. } => op,
        }
    }
}

/// The adapter's hook for [`raise`] (see [`set_raise_hook`]).
static RAISE_HOOK: OnceLock<fn(AscendError)> = OnceLock::new();

/// Sets the function that receives the typed error of every failure the core raises as a panic
/// (materialising a lazily dequantized tensor in the infallible [`crate::AscendTensor::view`]
/// or [`crate::AscendTensor::storage_ptr`]), before the panic, whose message is the error's
/// `Display`. A Burn adapter, whose ops cannot return errors, records it there for its own
/// `try_run` (burn-ascend keys it by Burn's stream). One hook per process: the first set stays,
/// and setting it again returns `false`.
pub fn set_raise_hook(hook: fn(AscendError)) -> bool {
    RAISE_HOOK.set(hook).is_ok()
}

/// Panics with `e` (its `Display` is the message), after handing it to the hook, if one is set.
/// For the core's infallible accessors whose work can fail: materialising a lazily dequantized
/// tensor in [`crate::AscendTensor::view`] and [`crate::AscendTensor::storage_ptr`].
pub(crate) fn raise(e: AscendError) -> ! {
    let message = e.to_string();
    if let Some(hook) = RAISE_HOOK.get() {
        hook(e);
    }
    panic!("{message}")
}
