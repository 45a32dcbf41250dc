//! C types, enum values and status codes of AscendCL and aclnn (CANN 8.x, `../shared/ascend/acl-abi.md`).
//!
//! Enums are C `enum`s, so they travel as `i32`. Only the values the backend and the emulated
//! runtime use are listed.
#![allow(non_camel_case_types)]

use std::ffi::c_void;

/// `aclError` (plain C `int`): status of the runtime API.
pub type aclError = i32;
/// `aclnnStatus` (`int32_t`): status of the aclnn object and operator API.
pub type aclnnStatus = i32;
/// `aclrtStream`: an opaque stream handle; NULL is the current context's default stream.
pub type aclrtStream = *mut c_void;
/// `aclrtEvent`: an opaque event handle.
pub type aclrtEvent = *mut c_void;
/// `aclmdlRI`: a model run instance, here the graph a stream capture produced.
pub type aclmdlRI = *mut c_void;

macro_rules! opaque {
    ($($(#[$m:meta])* $name:ident),* $(,)?) => {$(
        $(#[$m])*
        #[repr(C)]
        pub struct $name {
            _private: [u8; 0],
        }
    )*};
}
opaque!(
    /// `aclTensor`: a view descriptor (shape, strides, offset, dtype, format, base address).
    aclTensor,
    /// `aclScalar`: a host scalar copied at creation.
    aclScalar,
    /// `aclIntArray`: a host `int64_t` array copied at creation.
    aclIntArray,
    /// `aclBoolArray`: a host `bool` array copied at creation (e.g. ConvolutionBackward's
    /// `outputMask`).
    aclBoolArray,
    /// `aclTensorList`: a list that owns its member tensors.
    aclTensorList,
    /// `aclOpExecutor`: the product of phase one of a two-phase aclnn call.
    aclOpExecutor,
);

/// `aclDataType` values.
#[allow(missing_docs)]
pub mod dtype {
    pub const ACL_FLOAT: i32 = 0;
    pub const ACL_FLOAT16: i32 = 1;
    pub const ACL_INT8: i32 = 2;
    pub const ACL_INT32: i32 = 3;
    pub const ACL_UINT8: i32 = 4;
    pub const ACL_INT16: i32 = 6;
    pub const ACL_UINT16: i32 = 7;
    pub const ACL_UINT32: i32 = 8;
    pub const ACL_INT64: i32 = 9;
    pub const ACL_UINT64: i32 = 10;
    pub const ACL_DOUBLE: i32 = 11;
    pub const ACL_BOOL: i32 = 12;
    pub const ACL_BF16: i32 = 27;
}

/// `aclFormat` values used for plain layouts.
#[allow(missing_docs)]
pub mod format {
    pub const ACL_FORMAT_NCHW: i32 = 0;
    pub const ACL_FORMAT_ND: i32 = 2;
    pub const ACL_FORMAT_NCDHW: i32 = 30;
    pub const ACL_FORMAT_NCL: i32 = 47;
}

/// `aclrtMemcpyKind` values.
#[allow(missing_docs)]
pub mod memcpy_kind {
    pub const ACL_MEMCPY_HOST_TO_HOST: i32 = 0;
    pub const ACL_MEMCPY_HOST_TO_DEVICE: i32 = 1;
    pub const ACL_MEMCPY_DEVICE_TO_HOST: i32 = 2;
    pub const ACL_MEMCPY_DEVICE_TO_DEVICE: i32 = 3;
}

/// `aclrtMemMallocPolicy`: huge pages first, as torch_npu allocates.
pub const ACL_MEM_MALLOC_HUGE_FIRST: i32 = 0;
/// `aclrtMemAttr` for HBM, the memory of Atlas A2 devices.
pub const ACL_HBM_MEM: i32 = 1;
/// `aclDeviceInfo` keys of `aclGetDeviceCapability`.
#[allow(missing_docs)]
pub mod device_info {
    pub const ACL_DEVICE_INFO_AI_CORE_NUM: i32 = 0;
    pub const ACL_DEVICE_INFO_VECTOR_CORE_NUM: i32 = 1;
    pub const ACL_DEVICE_INFO_L2_SIZE: i32 = 2;
}
/// `aclrtEventRecordedStatus` values.
#[allow(missing_docs)]
pub mod event_status {
    pub const ACL_EVENT_RECORDED_STATUS_NOT_READY: i32 = 0;
    pub const ACL_EVENT_RECORDED_STATUS_COMPLETE: i32 = 1;
}
/// `aclrtCreateEventWithFlag` flags (acl-abi.md §3.4, §4): bits, combined with OR.
#[allow(missing_docs)]
pub mod event_flag {
    pub const ACL_EVENT_SYNC: u32 = 0x1;
    pub const ACL_EVENT_CAPTURE_STREAM_PROGRESS: u32 = 0x2;
    /// The event records a timestamp: what `aclrtEventElapsedTime` reads.
    pub const ACL_EVENT_TIME_LINE: u32 = 0x8;
    pub const ACL_EVENT_EXTERNAL: u32 = 0x20;
}
/// `aclmdlRICaptureMode` and `aclmdlRICaptureStatus` values (aclgraph-abi.md §1).
#[allow(missing_docs)]
pub mod capture {
    pub const ACL_MODEL_RI_CAPTURE_MODE_GLOBAL: i32 = 0;
    pub const ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL: i32 = 1;
    pub const ACL_MODEL_RI_CAPTURE_MODE_RELAXED: i32 = 2;
    pub const ACL_MODEL_RI_CAPTURE_STATUS_NONE: i32 = 0;
    pub const ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE: i32 = 1;
    pub const ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED: i32 = 2;
}
/// `cubeMathType` 0: keep the input dtype (no HF32 down-conversion of f32).
pub const CUBE_MATH_KEEP_DTYPE: i8 = 0;
/// `aclnnDivMod` rounding mode 1: truncate toward zero (Burn's integer division).
pub const DIV_MODE_TRUNC: i32 = 1;
/// aclnnDivMod's floor mode: rounds the quotient toward negative infinity.
pub const DIV_MODE_FLOOR: i32 = 2;

/// Status codes, with their CANN names.
#[allow(missing_docs)]
pub mod status {
    pub const ACL_SUCCESS: i32 = 0;
    pub const ACL_ERROR_INVALID_PARAM: i32 = 100000;
    pub const ACL_ERROR_UNINITIALIZE: i32 = 100001;
    pub const ACL_ERROR_REPEAT_INITIALIZE: i32 = 100002;
    pub const ACL_ERROR_RT_PARAM_INVALID: i32 = 107000;
    pub const ACL_ERROR_RT_INVALID_DEVICEID: i32 = 107001;
    pub const ACL_ERROR_RT_CONTEXT_NULL: i32 = 107002;
    pub const ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID: i32 = 107006;
    pub const ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL: i32 = 107007;
    pub const ACL_ERROR_RT_ADDR_UNALIGNED: i32 = 107008;
    pub const ACL_ERROR_RT_TASK_TIMEOUT: i32 = 107020;
    pub const ACL_ERROR_RT_CAPTURE_DEPENDENCY: i32 = 107024;
    pub const ACL_ERROR_RT_STREAM_UNJOINED: i32 = 107025;
    pub const ACL_ERROR_RT_MODEL_CAPTURED: i32 = 107026;
    pub const ACL_ERROR_RT_STREAM_CAPTURED: i32 = 107027;
    pub const ACL_ERROR_RT_EVENT_CAPTURED: i32 = 107028;
    pub const ACL_ERROR_RT_STREAM_NOT_CAPTURED: i32 = 107029;
    pub const ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT: i32 = 107030;
    pub const ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT: i32 = 107031;
    pub const ACL_ERROR_RT_STREAM_CAPTURE_CONFLICT: i32 = 107032;
    pub const ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED: i32 = 107036;
    pub const ACL_ERROR_RT_MODEL_RUNNING: i32 = 107037;
    pub const ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD: i32 = 107038;
    pub const ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED: i32 = 507903;
    pub const ACL_ERROR_BAD_ALLOC: i32 = 200000;
    pub const ACL_ERROR_RT_MEMORY_ALLOCATION: i32 = 207001;
    pub const ACL_ERROR_RT_MEMORY_FREE: i32 = 207002;
    pub const ACL_ERROR_RT_NO_DEVICE: i32 = 207004;
    pub const ACL_ERROR_RT_DEVICE_OOM: i32 = 207018;
    pub const ACL_ERROR_RT_INTERNAL_ERROR: i32 = 507000;
    pub const ACL_ERROR_RT_AICORE_EXCEPTION: i32 = 507015;
    pub const ACL_ERROR_RT_DEVICE_MEM_ERROR: i32 = 507053;
    pub const ACLNN_SUCCESS: i32 = 0;
    pub const ACLNN_ERR_PARAM_NULLPTR: i32 = 161001;
    pub const ACLNN_ERR_PARAM_INVALID: i32 = 161002;
    pub const ACLNN_ERR_RUNTIME_ERROR: i32 = 361001;
    pub const ACLNN_ERR_INNER: i32 = 561000;
    pub const ACLNN_ERR_INNER_TILING_ERROR: i32 = 561002;
    pub const ACLNN_ERR_INNER_NULLPTR: i32 = 561103;

    /// The CANN name of a status code, for error messages.
    pub fn name(code: i32) -> &'static str {
        match code {
            ACL_SUCCESS => "ACL_SUCCESS",
            ACL_ERROR_INVALID_PARAM => "ACL_ERROR_INVALID_PARAM",
            ACL_ERROR_UNINITIALIZE => "ACL_ERROR_UNINITIALIZE",
            ACL_ERROR_REPEAT_INITIALIZE => "ACL_ERROR_REPEAT_INITIALIZE",
            ACL_ERROR_RT_PARAM_INVALID => "ACL_ERROR_RT_PARAM_INVALID",
            ACL_ERROR_RT_INVALID_DEVICEID => "ACL_ERROR_RT_INVALID_DEVICEID",
            ACL_ERROR_RT_CONTEXT_NULL => "ACL_ERROR_RT_CONTEXT_NULL",
            ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID => "ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID",
            ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL => "ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL",
            ACL_ERROR_RT_ADDR_UNALIGNED => "ACL_ERROR_RT_ADDR_UNALIGNED",
            ACL_ERROR_RT_TASK_TIMEOUT => "ACL_ERROR_RT_TASK_TIMEOUT",
            ACL_ERROR_RT_CAPTURE_DEPENDENCY => "ACL_ERROR_RT_CAPTURE_DEPENDENCY",
            ACL_ERROR_RT_STREAM_UNJOINED => "ACL_ERROR_RT_STREAM_UNJOINED",
            ACL_ERROR_RT_MODEL_CAPTURED => "ACL_ERROR_RT_MODEL_CAPTURED",
            ACL_ERROR_RT_STREAM_CAPTURED => "ACL_ERROR_RT_STREAM_CAPTURED",
            ACL_ERROR_RT_EVENT_CAPTURED => "ACL_ERROR_RT_EVENT_CAPTURED",
            ACL_ERROR_RT_STREAM_NOT_CAPTURED => "ACL_ERROR_RT_STREAM_NOT_CAPTURED",
            ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT => "ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT",
            ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT => "ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT",
            ACL_ERROR_RT_STREAM_CAPTURE_CONFLICT => "ACL_ERROR_RT_STREAM_CAPTURE_CONFLICT",
            ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED => "ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED",
            ACL_ERROR_RT_MODEL_RUNNING => "ACL_ERROR_RT_MODEL_RUNNING",
            ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD => "ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD",
            ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED => "ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED",
            ACL_ERROR_BAD_ALLOC => "ACL_ERROR_BAD_ALLOC",
            ACL_ERROR_RT_MEMORY_ALLOCATION => "ACL_ERROR_RT_MEMORY_ALLOCATION",
            ACL_ERROR_RT_MEMORY_FREE => "ACL_ERROR_RT_MEMORY_FREE",
            ACL_ERROR_RT_NO_DEVICE => "ACL_ERROR_RT_NO_DEVICE",
            ACL_ERROR_RT_DEVICE_OOM => "ACL_ERROR_RT_DEVICE_OOM",
            ACL_ERROR_RT_INTERNAL_ERROR => "ACL_ERROR_RT_INTERNAL_ERROR",
            ACL_ERROR_RT_AICORE_EXCEPTION => "ACL_ERROR_RT_AICORE_EXCEPTION",
            ACL_ERROR_RT_DEVICE_MEM_ERROR => "ACL_ERROR_RT_DEVICE_MEM_ERROR",
            ACLNN_ERR_PARAM_NULLPTR => "ACLNN_ERR_PARAM_NULLPTR",
            ACLNN_ERR_PARAM_INVALID => "ACLNN_ERR_PARAM_INVALID",
            ACLNN_ERR_RUNTIME_ERROR => "ACLNN_ERR_RUNTIME_ERROR",
            ACLNN_ERR_INNER => "ACLNN_ERR_INNER",
            ACLNN_ERR_INNER_TILING_ERROR => "ACLNN_ERR_INNER_TILING_ERROR",
            ACLNN_ERR_INNER_NULLPTR => "ACLNN_ERR_INNER_NULLPTR",
            _ => "unnamed status",
        }
    }
}
