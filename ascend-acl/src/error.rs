//! Errors of the ACL seam: every failed call carries its status code, the function that
//! returned it and the runtime's own explanation (`aclGetRecentErrMsg`).

use super::types::status;

/// A failed AscendCL or aclnn call, or a failure to load the function table.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AclError {
    /// A function returned a non-zero status.
    #[error("{function} failed with {code} ({name}): {message}{context}", name = status::name(*code), context = fmt_context(context))]
    Call {
        /// The status code (`aclError` or `aclnnStatus`).
        code: i32,
        /// The C function that returned it.
        function: String,
        /// `aclGetRecentErrMsg` at the time of the failure (empty if the runtime gave none).
        message: String,
        /// What the backend was doing: op, shapes and dtypes.
        context: Option<String>,
    },
    /// An HCCL function returned a non-zero `HcclResult`.
    #[error("{function} failed with {code} ({name}): {message}{context}", name = crate::hccl::result::name(*code), context = fmt_context(context))]
    Hccl {
        /// The `HcclResult`.
        code: i32,
        /// The C function that returned it.
        function: String,
        /// `HcclGetErrorString` of the code.
        message: String,
        /// What the backend was doing.
        context: Option<String>,
    },
    /// A CANN library could not be opened or lacks a required symbol.
    #[error("cannot load CANN: {0}")]
    Load(String),
    /// Another shared library (a kernel library) could not be opened or used.
    #[error("{0}")]
    Library(String),
    /// The caller passed something the API refuses before calling into it.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// An allocation failed again after every cache of the device was released.
    #[error("{cause}")]
    OutOfMemory {
        /// Bytes asked for.
        requested: usize,
        /// Bytes held by live tensors of the pool at the time.
        in_use: usize,
        /// Bytes the device reported free (`aclrtGetMemInfo`; 0 if it did not say).
        free: usize,
        /// Bytes of device memory in all (`aclrtGetMemInfo`; 0 if it did not say).
        capacity: usize,
        /// The failed allocation, with what the backend was doing.
        cause: Box<AclError>,
    },
    /// The device context is gone (reset since the tensor or operation was made): its memory,
    /// stream and tensors no longer exist.
    #[error("{0}")]
    DeviceLost(String),
    /// The installed CANN release does not export an aclnn operator the backend needs.
    #[error(
        "this CANN release has no {symbol} (needed for {op}); upgrade CANN or use the emulated NPU"
    )]
    MissingOp {
        /// The operator.
        op: &'static str,
        /// The missing symbol.
        symbol: &'static str,
    },
}

fn fmt_context(context: &Option<String>) -> String {
    context
        .as_ref()
        .map(|c| format!("\n  while running {c}"))
        .unwrap_or_default()
}

impl AclError {
    /// The status code, if this error came from a call.
    pub fn code(&self) -> Option<i32> {
        match self {
            AclError::Call { code, .. } | AclError::Hccl { code, .. } => Some(*code),
            AclError::OutOfMemory { cause, .. } => cause.code(),
            _ => None,
        }
    }

    /// Adds what the backend was doing (op, shapes, dtypes) to the error.
    pub fn with_context(mut self, what: impl FnOnce() -> String) -> Self {
        match &mut self {
            AclError::Call { context, .. } | AclError::Hccl { context, .. }
                if context.is_none() =>
            {
                *context = Some(what())
            }
            AclError::OutOfMemory { cause, .. } => {
                let inner = std::mem::replace(cause.as_mut(), AclError::Library(String::new()));
                **cause = inner.with_context(what);
            }
            _ => {}
        }
        self
    }
}

/// Result of a call through the seam.
pub type AclResult<T> = Result<T, AclError>;
