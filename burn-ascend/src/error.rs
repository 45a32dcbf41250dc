//! Typed errors. Burn's ops cannot return errors, so a failing op panics; the panic carries an
//! [`AscendError`] that [`try_run`] turns back into a value for code that must survive it (a
//! server, a notebook). The panic message is the error's `Display`, unchanged for everyone else.
//!
//! The typed error travels beside the panic, recorded under the caller's Burn stream id
//! (`StreamId::current()`): on `Ascend` that is the calling thread; on `Fusion<Ascend>` the
//! recorded ops run on the device's runner thread *as the caller's stream*, so an error raised
//! there reaches the `try_run` of the thread that queued the op, never another caller's.

use std::collections::HashMap;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Mutex, OnceLock};

use burn_backend::StreamId;

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

/// The last error raised under each stream, until [`try_run`] takes it.
fn raised() -> &'static Mutex<HashMap<StreamId, AscendError>> {
    static RAISED: OnceLock<Mutex<HashMap<StreamId, AscendError>>> = OnceLock::new();
    RAISED.get_or_init(Default::default)
}

/// Records `e` for the [`try_run`] of the current stream: for an error Burn returns as an
/// `ExecutionError` (a read, a sync), which `Tensor::into_data` then turns into a panic.
pub(crate) fn record(e: AscendError) {
    raised()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(StreamId::current(), e);
}

/// Panics with `e` (its `Display` is the message), recording it for [`try_run`].
pub(crate) fn raise(e: AscendError) -> ! {
    let message = e.to_string();
    record(e);
    panic!("{message}")
}

/// The text of a panic payload, if it is text.
fn payload_text(payload: &(dyn std::any::Any + Send)) -> Option<&str> {
    payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
}

/// Runs `f`, turning a failure of the backend inside it into an [`AscendError`]; any other
/// panic (a bug in `f`) continues to unwind. Burn's own argument checks (its "Tensor Operation
/// Error" panics) count as [`AscendError::InvalidArgument`].
///
/// The panic message is still printed by the panic hook. After a
/// [`AscendError::DeviceFault`], call [`crate::reset_device`] before using the device again.
///
/// ```
/// use burn_tensor::Tensor;
/// use burn_ascend::{try_run, Ascend, AscendError};
///
/// let device = Default::default();
/// let a = Tensor::<Ascend, 2>::ones([2, 3], &device);
/// let b = Tensor::<Ascend, 2>::ones([4, 5], &device);
/// match try_run(|| a.matmul(b).into_data()) {
///     Err(AscendError::InvalidArgument { .. }) => {}
///     other => panic!("a shape mismatch is an argument error, got {other:?}"),
/// }
/// ```
pub fn try_run<T>(f: impl FnOnce() -> T) -> Result<T, AscendError> {
    let stream = StreamId::current();
    let take = || {
        raised()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&stream)
    };
    // An error raised earlier outside any `try_run` must not be taken for this call's.
    take();
    match panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(value) => {
            take();
            Ok(value)
        }
        Err(payload) => {
            if let Some(e) = take() {
                return Err(e);
            }
            match payload_text(payload.as_ref()) {
                Some(text) if text.contains("=== Tensor Operation Error ===") => {
                    Err(AscendError::InvalidArgument {
                        op: burn_check_op(text).unwrap_or("burn").to_string(),
                        message: text.to_string(),
                    })
                }
                _ => panic::resume_unwind(payload),
            }
        }
    }
}

/// The operation a Burn check names (`Operation: 'Matmul'`).
fn burn_check_op(text: &str) -> Option<&str> {
    let rest = &text[text.find("Operation: '")? + "Operation: '".len()..];
    Some(&rest[..rest.find('\'')?])
}
