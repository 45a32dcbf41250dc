//! The emulated AscendCL runtime and aclnn object API, with CANN's C signatures.
#![allow(missing_docs, non_snake_case, clippy::missing_safety_doc)]

use std::ffi::{c_char, c_void};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::fault::{fault, guard, recent, report, Fault};
use super::machine::machine;
use super::meta::{
    create_scalar, create_tensor, destroy_executor, set_repeatable, set_tensor_addr, Slot,
};
use super::objects::{self, Object};
use super::stream::{Event, Stream};
use ascend_acl::types::device_info::*;
use ascend_acl::types::event_status::*;
use ascend_acl::types::memcpy_kind::*;
use ascend_acl::types::status::*;
use ascend_acl::types::*;

pub unsafe extern "C" fn aclInit(_config_path: *const c_char) -> aclError {
    if let Some(e) = &machine().config_error {
        return report(fault(ACL_ERROR_INVALID_PARAM, format!("aclInit: {e}")));
    }
    if machine().initialized.swap(true, Ordering::AcqRel) {
        report(fault(
            ACL_ERROR_REPEAT_INITIALIZE,
            "aclInit was already called",
        ))
    } else {
        ACL_SUCCESS
    }
}

pub unsafe extern "C" fn aclFinalize() -> aclError {
    machine().initialized.store(false, Ordering::Release);
    ACL_SUCCESS
}

pub unsafe extern "C" fn aclrtSetDevice(device_id: i32) -> aclError {
    guard("aclrtSetDevice", || machine().set_current(device_id))
}

/// Balances one `aclrtSetDevice`; the last one destroys the device's context: its streams
/// (after their queued work), its memory and its sticky fault, and threads bound to it must call
/// `aclrtSetDevice` again (see `Machine::release` for the counting).
pub unsafe extern "C" fn aclrtResetDevice(device_id: i32) -> aclError {
    guard("aclrtResetDevice", || machine().release(device_id))
}

/// Destroys the device's context whatever the count of `aclrtSetDevice` calls (CANN 8.1.RC1
/// and later, acl-abi.md §3.1).
pub unsafe extern "C" fn aclrtResetDeviceForce(device_id: i32) -> aclError {
    guard("aclrtResetDeviceForce", || machine().reset(device_id))
}

pub unsafe extern "C" fn aclrtGetDeviceCount(count: *mut u32) -> aclError {
    guard("aclrtGetDeviceCount", || {
        let m = machine();
        m.check_initialized()?;
        *non_null(count, "count")? = m.npus.len() as u32;
        Ok(())
    })
}

pub unsafe extern "C" fn aclrtCreateStream(stream: *mut aclrtStream) -> aclError {
    guard("aclrtCreateStream", || {
        let out = non_null(stream, "stream")?;
        let m = machine();
        let (id, npu) = m.current()?;
        let handle = Arc::into_raw(npu.new_stream(id)) as aclrtStream;
        m.streams.lock().unwrap().insert(handle as usize);
        *out = handle;
        Ok(())
    })
}

pub unsafe extern "C" fn aclrtDestroyStream(stream: aclrtStream) -> aclError {
    guard("aclrtDestroyStream", || {
        let m = machine();
        if stream.is_null() {
            return Err(fault(
                ACL_ERROR_RT_PARAM_INVALID,
                "the default stream cannot be destroyed",
            ));
        }
        let s = m.stream(stream)?;
        if s.capture().is_some() {
            return Err(fault(
                ACL_ERROR_RT_STREAM_CAPTURED,
                "aclrtDestroyStream: the stream is capturing a graph",
            ));
        }
        m.streams.lock().unwrap().remove(&(stream as usize));
        s.shutdown();
        drop(Arc::from_raw(stream as *const Stream));
        Ok(())
    })
}

pub unsafe extern "C" fn aclrtSynchronizeStream(stream: aclrtStream) -> aclError {
    guard("aclrtSynchronizeStream", || {
        machine().stream(stream)?.synchronize()
    })
}

pub unsafe extern "C" fn aclrtStreamWaitEvent(stream: aclrtStream, event: aclrtEvent) -> aclError {
    guard("aclrtStreamWaitEvent", || {
        let m = machine();
        m.event(event)?.wait_on(&*m.stream(stream)?)
    })
}

/// An event of the calling thread's device. Its records are stamped: the elapsed-time doc of
/// hicann/runtime names `aclrtCreateEvent` among the ways to create the events it times.
pub unsafe extern "C" fn aclrtCreateEvent(event: *mut aclrtEvent) -> aclError {
    guard("aclrtCreateEvent", || create_event(event, true))
}

/// An event with `flag` (acl-abi.md §3.4): its records are stamped only with
/// `ACL_EVENT_TIME_LINE`. Flags outside the CANN 8.x set are refused (stricter reading: the
/// runtime's checks of unknown bits are not in the fact sheets).
pub unsafe extern "C" fn aclrtCreateEventWithFlag(event: *mut aclrtEvent, flag: u32) -> aclError {
    use ascend_acl::types::event_flag::*;
    guard("aclrtCreateEventWithFlag", || {
        let known = ACL_EVENT_SYNC
            | ACL_EVENT_CAPTURE_STREAM_PROGRESS
            | ACL_EVENT_TIME_LINE
            | ACL_EVENT_EXTERNAL;
        if flag & !known != 0 {
            return Err(fault(
                ACL_ERROR_INVALID_PARAM,
                format!(
                    "aclrtCreateEventWithFlag: unknown flag bits {:#x}",
                    flag & !known
                ),
            ));
        }
        create_event(event, flag & ACL_EVENT_TIME_LINE != 0)
    })
}

unsafe fn create_event(event: *mut aclrtEvent, timed: bool) -> Result<(), Fault> {
    let out = non_null(event, "event")?;
    let m = machine();
    m.current()?;
    let handle = Arc::into_raw(Arc::new(Event::new(timed))) as aclrtEvent;
    m.events.lock().unwrap().insert(handle as usize);
    *out = handle;
    Ok(())
}

pub unsafe extern "C" fn aclrtDestroyEvent(event: aclrtEvent) -> aclError {
    guard("aclrtDestroyEvent", || {
        let m = machine();
        m.event(event)?;
        m.events.lock().unwrap().remove(&(event as usize));
        drop(Arc::from_raw(event as *const Event));
        Ok(())
    })
}

pub unsafe extern "C" fn aclrtRecordEvent(event: aclrtEvent, stream: aclrtStream) -> aclError {
    guard("aclrtRecordEvent", || {
        let m = machine();
        m.event(event)?.record(&*m.stream(stream)?)
    })
}

pub unsafe extern "C" fn aclrtSynchronizeEvent(event: aclrtEvent) -> aclError {
    guard("aclrtSynchronizeEvent", || machine().event(event)?.wait())
}

/// The milliseconds from `start_event`'s latest record to `end_event`'s, with CANN's rules
/// (`Event::elapsed_since`).
pub unsafe extern "C" fn aclrtEventElapsedTime(
    ms: *mut f32,
    start_event: aclrtEvent,
    end_event: aclrtEvent,
) -> aclError {
    guard("aclrtEventElapsedTime", || {
        let out = non_null(ms, "ms")?;
        let m = machine();
        let (start, end) = (m.event(start_event)?, m.event(end_event)?);
        *out = end.elapsed_since(&start)?;
        Ok(())
    })
}

pub unsafe extern "C" fn aclrtQueryEventStatus(event: aclrtEvent, status: *mut i32) -> aclError {
    guard("aclrtQueryEventStatus", || {
        let out = non_null(status, "status")?;
        *out = if machine().event(event)?.is_complete()? {
            ACL_EVENT_RECORDED_STATUS_COMPLETE
        } else {
            ACL_EVENT_RECORDED_STATUS_NOT_READY
        };
        Ok(())
    })
}

pub unsafe extern "C" fn aclrtMalloc(
    dev_ptr: *mut *mut c_void,
    size: usize,
    _policy: i32,
) -> aclError {
    guard("aclrtMalloc", || {
        let out = non_null(dev_ptr, "devPtr")?;
        let (_, npu) = machine().current()?;
        npu.fault.check()?;
        *out = npu.memory.malloc(size)? as *mut c_void;
        Ok(())
    })
}

pub unsafe extern "C" fn aclrtFree(dev_ptr: *mut c_void) -> aclError {
    guard("aclrtFree", || {
        let addr = dev_ptr as u64;
        let npu = machine().npu_of(addr).ok_or_else(|| {
            fault(
                ACL_ERROR_RT_MEMORY_FREE,
                format!("aclrtFree: {dev_ptr:?} is not a device address"),
            )
        })?;
        super::graph::check_unsafe(npu.memory.device(), "aclrtFree")?;
        npu.memory.free(addr)
    })
}

/// Page-locked host memory (`aclrtMallocHost`): 64-byte aligned (acl-abi.md 3.3).
pub unsafe extern "C" fn aclrtMallocHost(host_ptr: *mut *mut c_void, size: usize) -> aclError {
    guard("aclrtMallocHost", || {
        let out = non_null(host_ptr, "hostPtr")?;
        machine().check_initialized()?;
        *out = machine().pinned.alloc(size)? as *mut c_void;
        Ok(())
    })
}

pub unsafe extern "C" fn aclrtFreeHost(host_ptr: *mut c_void) -> aclError {
    guard("aclrtFreeHost", || machine().pinned.free(host_ptr as usize))
}

/// Which side of a copy is where.
enum Ends {
    HostToDevice,
    DeviceToHost,
    DeviceToDevice,
    HostToHost,
}

fn ends(kind: i32) -> Result<Ends, Fault> {
    Ok(match kind {
        ACL_MEMCPY_HOST_TO_DEVICE => Ends::HostToDevice,
        ACL_MEMCPY_DEVICE_TO_HOST => Ends::DeviceToHost,
        ACL_MEMCPY_DEVICE_TO_DEVICE => Ends::DeviceToDevice,
        ACL_MEMCPY_HOST_TO_HOST => Ends::HostToHost,
        k => {
            return Err(fault(
                ACL_ERROR_RT_PARAM_INVALID,
                format!("unsupported aclrtMemcpyKind {k}"),
            ))
        }
    })
}

/// A copy between host memory and emulated device memory.
struct Copy {
    dst: *mut c_void,
    src: *const c_void,
    count: usize,
    ends: Ends,
}
// SAFETY: a synchronous copy runs before its call returns; an asynchronous one only ever has
// page-locked host memory at its host end, which `run` checks is still allocated.
unsafe impl Send for Copy {}

impl Copy {
    /// The device memory at `p`, `[p, p + count)` live, on a device that has not faulted.
    fn device(&self, p: u64) -> Result<*mut u8, Fault> {
        let npu = machine().npu_of(p).ok_or_else(|| {
            fault(
                ACL_ERROR_RT_PARAM_INVALID,
                format!("0x{p:x} is not a device address, but the copy kind says it is"),
            )
        })?;
        npu.fault.check()?;
        let (block, off) = npu.memory.resolve(p, self.count).map_err(|f| Fault {
            code: ACL_ERROR_RT_PARAM_INVALID,
            message: format!("memcpy of {} bytes: {}", self.count, f.message),
        })?;
        Ok(block.host_ptr(off))
    }

    fn host(&self, p: u64) -> Result<(), Fault> {
        if machine().npu_of(p).is_some() {
            Err(fault(
                ACL_ERROR_RT_PARAM_INVALID,
                format!("0x{p:x} is a device address, but the copy kind says host"),
            ))
        } else {
            Ok(())
        }
    }

    /// The host end of an asynchronous copy must be page-locked memory from aclrtMallocHost,
    /// 64-byte aligned. CANN 8.0 requires the alignment and warns that other host memory may
    /// fail on some products (acl-abi.md 3.3 and trap 14); the emulation takes the stricter
    /// reading and refuses pageable memory outright, so the backend cannot come to rely on a
    /// copy that completes before the call returns.
    fn pinned(&self, p: u64) -> Result<(), Fault> {
        self.host(p)?;
        machine().pinned.check(p as usize, self.count)?;
        if !p.is_multiple_of(64) {
            return Err(fault(
                ACL_ERROR_RT_PARAM_INVALID,
                format!("aclrtMemcpyAsync: host address 0x{p:x} is not 64-byte aligned (CANN 8.0 requires it)"),
            ));
        }
        Ok(())
    }

    unsafe fn run(&self) -> Result<(), Fault> {
        if self.count == 0 {
            return Ok(());
        }
        let (dst, src) = match self.ends {
            Ends::HostToDevice => {
                self.host(self.src as u64)?;
                let dst = self.device(self.dst as u64)?;
                super::counters::uploaded(self.count as u64);
                (dst, self.src as *const u8)
            }
            Ends::DeviceToHost => {
                self.host(self.dst as u64)?;
                let src = self.device(self.src as u64)? as *const u8;
                super::counters::downloaded(self.count as u64);
                (self.dst as *mut u8, src)
            }
            Ends::DeviceToDevice => (
                self.device(self.dst as u64)?,
                self.device(self.src as u64)? as *const u8,
            ),
            Ends::HostToHost => {
                self.host(self.src as u64)?;
                self.host(self.dst as u64)?;
                (self.dst as *mut u8, self.src as *const u8)
            }
        };
        if matches!(self.ends, Ends::HostToDevice | Ends::DeviceToDevice) {
            // SAFETY: `device` found `[dst, dst + count)` inside one block's backing.
            unsafe { super::memory::prefault(dst, self.count) };
        }
        std::ptr::copy(src, dst, self.count);
        Ok(())
    }

    /// A checksum of the host source of a host-to-device copy (checked live and page-locked).
    fn source_sum(&self) -> u32 {
        // SAFETY: `check_async` found `[src, src + count)` inside live page-locked memory.
        crc32fast::hash(unsafe { std::slice::from_raw_parts(self.src as *const u8, self.count) })
    }

    /// The page-locked host end of an asynchronous copy, checked when it is queued and again
    /// when it runs (freeing it before is a use after free on the device).
    fn check_async(&self) -> Result<(), Fault> {
        match self.ends {
            Ends::HostToDevice => self.pinned(self.src as u64),
            Ends::DeviceToHost => self.pinned(self.dst as u64),
            Ends::DeviceToDevice => Ok(()),
            Ends::HostToHost => Err(fault(
                ACL_ERROR_RT_PARAM_INVALID,
                "aclrtMemcpyAsync: host-to-host copies are not supported asynchronously",
            )),
        }
    }
}

unsafe fn check_copy(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
) -> Result<(), Fault> {
    if count > dest_max {
        return Err(fault(
            ACL_ERROR_RT_PARAM_INVALID,
            format!("copy of {count} bytes exceeds destMax {dest_max}"),
        ));
    }
    if count > 0 && (dst.is_null() || src.is_null()) {
        return Err(fault(ACL_ERROR_RT_PARAM_INVALID, "NULL copy address"));
    }
    machine().current()?;
    Ok(())
}

/// Synchronous and, as on hardware, not ordered with stream work.
pub unsafe extern "C" fn aclrtMemcpy(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: i32,
) -> aclError {
    guard("aclrtMemcpy", || {
        check_copy(dst, dest_max, src, count)?;
        let (device, _) = machine().current()?;
        super::graph::check_unsafe(device, "aclrtMemcpy (synchronous)")?;
        Copy {
            dst,
            src,
            count,
            ends: ends(kind)?,
        }
        .run()
    })
}

/// Stream-ordered and asynchronous: the copy runs when the stream reaches it, reading (or
/// writing) the page-locked host buffer then, as the DMA engine does.
pub unsafe extern "C" fn aclrtMemcpyAsync(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: i32,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtMemcpyAsync", || {
        check_copy(dst, dest_max, src, count)?;
        let copy = Copy {
            dst,
            src,
            count,
            ends: ends(kind)?,
        };
        copy.check_async()?;
        let s = machine().stream(stream)?;
        // The DMA engine reads the page-locked source when the stream reaches the copy, not
        // when it is queued: a host that rewrites the buffer in between (a staging ring reusing
        // a region too early) uploads the wrong bytes on an NPU, silently. The emulation
        // remembers a checksum of the source at queue time and faults at run time if it
        // changed (acl-abi.md 3.3: the host buffer belongs to the copy until it completes). A
        // capture's recorded copy is exempt: each replay reads the buffer as it is then.
        let mut queued = match copy.ends {
            Ends::HostToDevice if s.capture().is_none() => Some(copy.source_sum()),
            _ => None,
        };
        s.enqueue(Box::new(move || unsafe {
            copy.check_async().map_err(|f| Fault {
                code: ACL_ERROR_RT_AICORE_EXCEPTION,
                message: format!(
                    "aclrtMemcpyAsync ran after its page-locked host buffer was freed: {}",
                    f.message
                ),
            })?;
            if let Some(sum) = queued.take() {
                if copy.source_sum() != sum {
                    return Err(fault(
                        ACL_ERROR_RT_AICORE_EXCEPTION,
                        format!(
                            "aclrtMemcpyAsync (host-to-device, {} bytes from host {:p} to device \
                             {:p}): the page-locked source was overwritten after the copy was \
                             queued and before it ran; the device would receive the new bytes",
                            copy.count, copy.src, copy.dst
                        ),
                    ));
                }
            }
            copy.run()
        }))
    })
}

pub unsafe extern "C" fn aclrtMemsetAsync(
    dev_ptr: *mut c_void,
    max_count: usize,
    value: i32,
    count: usize,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtMemsetAsync", || {
        if count > max_count {
            return Err(fault(
                ACL_ERROR_RT_PARAM_INVALID,
                format!("memset of {count} bytes exceeds maxCount {max_count}"),
            ));
        }
        let m = machine();
        let addr = dev_ptr as u64;
        let s = m.stream(stream)?;
        s.enqueue(Box::new(move || {
            let npu = machine().npu_of(addr).ok_or_else(|| {
                fault(
                    ACL_ERROR_RT_PARAM_INVALID,
                    format!("0x{addr:x} is not a device address"),
                )
            })?;
            let (block, off) = npu.memory.resolve(addr, count)?;
            // SAFETY: resolve checked the range.
            unsafe { std::ptr::write_bytes(block.host_ptr(off), value as u8, count) };
            Ok(())
        }))
    })
}

pub unsafe extern "C" fn aclrtGetMemInfo(
    _attr: i32,
    free: *mut usize,
    total: *mut usize,
) -> aclError {
    guard("aclrtGetMemInfo", || {
        let (f, t) = machine().current()?.1.memory.info();
        *non_null(free, "free")? = f as usize;
        *non_null(total, "total")? = t as usize;
        Ok(())
    })
}

pub unsafe extern "C" fn aclrtGetSocName() -> *const c_char {
    machine().soc.name.as_ptr()
}

pub unsafe extern "C" fn aclGetDeviceCapability(
    device_id: u32,
    info: i32,
    value: *mut i64,
) -> aclError {
    guard("aclGetDeviceCapability", || {
        machine().npu(device_id as i32)?;
        *non_null(value, "value")? = match info {
            ACL_DEVICE_INFO_AI_CORE_NUM => machine().soc.ai_cores,
            ACL_DEVICE_INFO_VECTOR_CORE_NUM => machine().soc.vector_cores,
            ACL_DEVICE_INFO_L2_SIZE => machine().soc.l2_bytes,
            other => {
                return Err(fault(
                    ACL_ERROR_INVALID_PARAM,
                    format!("unknown aclDeviceInfo {other}"),
                ))
            }
        };
        Ok(())
    })
}

pub unsafe extern "C" fn aclGetRecentErrMsg() -> *const c_char {
    recent()
}

unsafe fn non_null<'a, T>(p: *mut T, name: &str) -> Result<&'a mut T, Fault> {
    p.as_mut()
        .ok_or_else(|| fault(ACL_ERROR_RT_PARAM_INVALID, format!("{name} is NULL")))
}

/// Registers an object, or reports why it could not be created and returns NULL.
fn created<U>(r: Result<Object, Fault>) -> *mut U {
    match r {
        Ok(o) => objects::register(o) as *mut U,
        Err(f) => {
            report(f);
            std::ptr::null_mut()
        }
    }
}

fn destroyed(what: &str, kind: &'static str, handle: usize) -> aclnnStatus {
    if handle == 0 {
        return report(fault(ACLNN_ERR_PARAM_NULLPTR, format!("{what}: NULL")));
    }
    match objects::destroy(what, kind, handle) {
        Ok(()) => ACLNN_SUCCESS,
        Err(f) => report(f),
    }
}

pub unsafe extern "C" fn aclCreateTensor(
    view_dims: *const i64,
    view_dims_num: u64,
    data_type: i32,
    stride: *const i64,
    offset: i64,
    _format: i32,
    storage_dims: *const i64,
    storage_dims_num: u64,
    tensor_data: *mut c_void,
) -> *mut aclTensor {
    created(
        create_tensor(
            view_dims,
            view_dims_num,
            data_type,
            stride,
            offset,
            storage_dims,
            storage_dims_num,
            tensor_data,
        )
        .map(Object::Tensor),
    )
}

pub unsafe extern "C" fn aclDestroyTensor(tensor: *const aclTensor) -> aclnnStatus {
    destroyed("aclDestroyTensor", "aclTensor", tensor as usize)
}

pub unsafe extern "C" fn aclCreateScalar(value: *mut c_void, data_type: i32) -> *mut aclScalar {
    created(create_scalar(value, data_type).map(Object::Scalar))
}

pub unsafe extern "C" fn aclDestroyScalar(scalar: *const aclScalar) -> aclnnStatus {
    destroyed("aclDestroyScalar", "aclScalar", scalar as usize)
}

/// The `size` values at `value`, copied (as CANN's array constructors memcpy them).
unsafe fn copied<T: std::marker::Copy>(
    what: &str,
    value: *const T,
    size: u64,
) -> Result<Vec<T>, Fault> {
    if size > 0 && value.is_null() {
        Err(fault(
            ACLNN_ERR_PARAM_NULLPTR,
            format!("{what}: value is NULL"),
        ))
    } else if size == 0 {
        Ok(Vec::new())
    } else {
        Ok(std::slice::from_raw_parts(value, size as usize).to_vec())
    }
}

pub unsafe extern "C" fn aclCreateIntArray(value: *const i64, size: u64) -> *mut aclIntArray {
    created(copied("aclCreateIntArray", value, size).map(Object::IntArray))
}

pub unsafe extern "C" fn aclDestroyIntArray(array: *const aclIntArray) -> aclnnStatus {
    destroyed("aclDestroyIntArray", "aclIntArray", array as usize)
}

pub unsafe extern "C" fn aclCreateBoolArray(value: *const bool, size: u64) -> *mut aclBoolArray {
    created(copied("aclCreateBoolArray", value, size).map(Object::BoolArray))
}

pub unsafe extern "C" fn aclDestroyBoolArray(array: *const aclBoolArray) -> aclnnStatus {
    destroyed("aclDestroyBoolArray", "aclBoolArray", array as usize)
}

/// Takes ownership of the member tensors, which must be live: destroying the list destroys
/// them, as CANN does.
pub unsafe extern "C" fn aclCreateTensorList(
    value: *const *const aclTensor,
    size: u64,
) -> *mut aclTensorList {
    const WHAT: &str = "aclCreateTensorList";
    let members = copied(WHAT, value, size).and_then(|members| {
        for &t in &members {
            objects::read(WHAT, "aclTensor", t as usize, |o| match o {
                Object::Tensor(_) => Some(()),
                _ => None,
            })?;
        }
        Ok(members.into_iter().map(|t| t as usize).collect())
    });
    created(members.map(Object::TensorList))
}

/// Destroys the list and, as CANN does, every tensor in it.
pub unsafe extern "C" fn aclDestroyTensorList(array: *const aclTensorList) -> aclnnStatus {
    destroyed("aclDestroyTensorList", "aclTensorList", array as usize)
}

pub unsafe extern "C" fn aclDestroyAclOpExecutor(executor: *mut aclOpExecutor) -> aclnnStatus {
    guard("aclDestroyAclOpExecutor", || destroy_executor(executor))
}

pub unsafe extern "C" fn aclSetAclOpExecutorRepeatable(
    executor: *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclSetAclOpExecutorRepeatable", || set_repeatable(executor))
}

pub unsafe extern "C" fn aclSetInputTensorAddr(
    executor: *mut aclOpExecutor,
    index: usize,
    tensor: *mut aclTensor,
    addr: *mut c_void,
) -> aclnnStatus {
    const WHAT: &str = "aclSetInputTensorAddr";
    guard(WHAT, || {
        set_tensor_addr(WHAT, executor, Slot::Input(index), tensor, addr)
    })
}

pub unsafe extern "C" fn aclSetOutputTensorAddr(
    executor: *mut aclOpExecutor,
    index: usize,
    tensor: *mut aclTensor,
    addr: *mut c_void,
) -> aclnnStatus {
    const WHAT: &str = "aclSetOutputTensorAddr";
    guard(WHAT, || {
        set_tensor_addr(WHAT, executor, Slot::Output(index), tensor, addr)
    })
}

/// The view shape of a descriptor (after data-dependent operators rewrite it). The array is
/// allocated by the runtime and, as with CANN's `new[]`, not freed by the caller.
pub unsafe extern "C" fn aclGetViewShape(
    tensor: *const aclTensor,
    view_dims: *mut *mut i64,
    view_dims_num: *mut u64,
) -> aclnnStatus {
    if tensor.is_null() || view_dims.is_null() || view_dims_num.is_null() {
        return report(fault(
            ACLNN_ERR_PARAM_NULLPTR,
            "aclGetViewShape: NULL argument",
        ));
    }
    const WHAT: &str = "aclGetViewShape";
    let dims = objects::read(WHAT, "aclTensor", tensor as usize, |o| match o {
        Object::Tensor(t) => Some(t.shape.clone()),
        _ => None,
    });
    match dims {
        Ok(dims) => {
            *view_dims_num = dims.len() as u64;
            *view_dims = ascend_acl::view_dims::new_array(dims.len());
            for (i, d) in dims.into_iter().enumerate() {
                *(*view_dims).add(i) = d as i64;
            }
            ACLNN_SUCCESS
        }
        Err(f) => report(f),
    }
}
