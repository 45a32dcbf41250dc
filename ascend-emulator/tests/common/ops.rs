//! Calling aclnn operators through the table in tests: device buffers of any dtype filled from
//! f64 values, descriptors over them, the two phases and a synchronisation, and failures as
//! (status, the runtime's message).

use std::ffi::c_void;

use ascend_acl::handles::TensorDesc;
use ascend_acl::table::LazyOp;
use ascend_acl::types::memcpy_kind::*;
use ascend_acl::types::*;
use ascend_acl::{AclApi, DataType};
use half::{bf16, f16};

use super::{api, malloc, stream, table};

/// A failed call: the status and `aclGetRecentErrMsg`.
pub type Failure = (i32, String);

/// A device buffer of `len` elements of `dtype` (at least 64 bytes allocated).
pub struct Buf {
    pub ptr: *mut c_void,
    pub dtype: DataType,
    pub len: usize,
}

/// The bytes of `v` stored as `dtype` (floats rounded to nearest even, integers truncated).
pub fn encode(dtype: DataType, v: f64) -> Vec<u8> {
    match dtype {
        DataType::F64 => v.to_le_bytes().to_vec(),
        DataType::F32 => (v as f32).to_le_bytes().to_vec(),
        DataType::F16 => f16::from_f64(v).to_le_bytes().to_vec(),
        DataType::BF16 => bf16::from_f64(v).to_le_bytes().to_vec(),
        DataType::I64 => (v as i64).to_le_bytes().to_vec(),
        DataType::I32 => (v as i32).to_le_bytes().to_vec(),
        DataType::I16 => (v as i16).to_le_bytes().to_vec(),
        DataType::I8 => (v as i8).to_le_bytes().to_vec(),
        DataType::U8 | DataType::Bool => vec![v as u8],
        other => panic!("no test encoding for {other}"),
    }
}

/// The value of one element of `dtype`.
pub fn decode(dtype: DataType, b: &[u8]) -> f64 {
    match dtype {
        DataType::F64 => f64::from_le_bytes(b.try_into().unwrap()),
        DataType::F32 => f32::from_le_bytes(b.try_into().unwrap()) as f64,
        DataType::F16 => f16::from_le_bytes(b.try_into().unwrap()).to_f64(),
        DataType::BF16 => bf16::from_le_bytes(b.try_into().unwrap()).to_f64(),
        DataType::I64 => i64::from_le_bytes(b.try_into().unwrap()) as f64,
        DataType::I32 => i32::from_le_bytes(b.try_into().unwrap()) as f64,
        DataType::I16 => i16::from_le_bytes(b.try_into().unwrap()) as f64,
        DataType::I8 => b[0] as i8 as f64,
        DataType::U8 | DataType::Bool => b[0] as f64,
        other => panic!("no test decoding for {other}"),
    }
}

/// `v` as `dtype` stores it.
pub fn stored(dtype: DataType, v: f64) -> f64 {
    decode(dtype, &encode(dtype, v))
}

/// A buffer on the calling thread's device holding `values` as `dtype`.
pub fn buf(api: &AclApi, dtype: DataType, values: &[f64]) -> Buf {
    let bytes: Vec<u8> = values.iter().flat_map(|&v| encode(dtype, v)).collect();
    let ptr = malloc(api, bytes.len().max(64));
    if !bytes.is_empty() {
        // SAFETY: `ptr` holds at least `bytes.len()` bytes.
        let status = unsafe {
            (api.core.aclrtMemcpy)(
                ptr,
                bytes.len(),
                bytes.as_ptr() as _,
                bytes.len(),
                ACL_MEMCPY_HOST_TO_DEVICE,
            )
        };
        api.check(status, "h2d").unwrap();
    }
    Buf {
        ptr,
        dtype,
        len: values.len(),
    }
}

/// A buffer of `len` elements all `fill`.
pub fn filled(api: &AclApi, dtype: DataType, len: usize, fill: f64) -> Buf {
    buf(api, dtype, &vec![fill; len])
}

/// The buffer's elements, read back (the caller synchronised).
pub fn read(api: &AclApi, b: &Buf) -> Vec<f64> {
    let es = b.dtype.size();
    let mut bytes = vec![0u8; b.len * es];
    if !bytes.is_empty() {
        // SAFETY: the buffer holds `len` elements.
        let status = unsafe {
            (api.core.aclrtMemcpy)(
                bytes.as_mut_ptr() as _,
                bytes.len(),
                b.ptr,
                bytes.len(),
                ACL_MEMCPY_DEVICE_TO_HOST,
            )
        };
        api.check(status, "d2h").unwrap();
    }
    bytes.chunks(es).map(|c| decode(b.dtype, c)).collect()
}

/// Row-major strides of `shape`.
pub fn dense_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

/// A dense view of the whole buffer as `shape`.
pub fn desc(b: &Buf, shape: &[usize]) -> TensorDesc<'static> {
    view(b, shape, &dense_strides(shape), 0)
}

/// A view of the buffer with `strides` and `offset` (elements).
pub fn view(b: &Buf, shape: &[usize], strides: &[usize], offset: usize) -> TensorDesc<'static> {
    // SAFETY: the buffer holds `len` elements of its dtype for the test's life (never freed).
    unsafe { TensorDesc::new(table(), shape, strides, offset, b.dtype, b.len, b.ptr) }.unwrap()
}

/// Phase one through `call` (given the resolved phase-one function and the two out-pointers),
/// then phase two on a new stream with the workspace asked for, then a synchronisation.
pub fn launch<F: Copy>(
    op: &LazyOp<F>,
    name: &'static str,
    phase1: &'static str,
    call: impl FnOnce(F, *mut u64, *mut *mut aclOpExecutor) -> i32,
) -> Result<(), Failure> {
    let api = table();
    // SAFETY: the table types each operator with its declared signature.
    let (f, phase2) =
        unsafe { op.resolve(api.source(), name, phase1) }.map_err(|e| (-1, e.to_string()))?;
    let (mut ws, mut exec) = (0u64, std::ptr::null_mut());
    let status = call(f, &mut ws, &mut exec);
    if status != 0 {
        return Err((status, api.recent_error_message()));
    }
    let workspace = if ws > 0 {
        malloc(api, ws as usize)
    } else {
        std::ptr::null_mut()
    };
    let s = stream(api);
    // SAFETY: the executor comes from phase one; the workspace is as large as asked.
    let status = unsafe { phase2(workspace, ws, exec, s) };
    if status != 0 {
        return Err((status, api.recent_error_message()));
    }
    // SAFETY: a live stream.
    let status = unsafe { (api.core.aclrtSynchronizeStream)(s) };
    if status != 0 {
        return Err((status, api.recent_error_message()));
    }
    // SAFETY: a live stream and allocation, with no work left on them.
    unsafe {
        api.check((api.core.aclrtDestroyStream)(s), "destroy stream")
            .unwrap();
        if !workspace.is_null() {
            api.check((api.core.aclrtFree)(workspace), "free workspace")
                .unwrap();
        }
    }
    Ok(())
}

/// Asserts a refusal: its status and that its message names every needle.
#[track_caller]
pub fn refused(result: Result<(), Failure>, status: i32, needles: &[&str]) {
    let (got, message) = result.expect_err("the call should have been refused");
    assert_eq!(got, status, "status of: {message}");
    for n in needles {
        assert!(message.contains(n), "{n:?} missing from: {message}");
    }
}

/// Runs `f` with emulated NPU 1 bound (the device the tests that fault a device use), then
/// resets NPU 1 and binds NPU 0 again: a fault is sticky until the device is reset.
pub fn on_faulting_device(f: impl FnOnce(&'static AclApi)) {
    let api = api();
    // SAFETY: plain calls; the emulated machine has two NPUs.
    unsafe {
        api.check((api.core.aclrtSetDevice)(1), "aclrtSetDevice")
            .unwrap();
    }
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(api)));
    let reset = api
        .optional
        .aclrtResetDeviceForce
        .expect("CANN 8.1.RC1 has it");
    // SAFETY: plain calls.
    unsafe {
        api.check(reset(1), "aclrtResetDeviceForce").unwrap();
        api.check((api.core.aclrtSetDevice)(0), "aclrtSetDevice")
            .unwrap();
    }
    if let Err(p) = outcome {
        std::panic::resume_unwind(p);
    }
}
