//! What the tests of the runtime through the function table share: the table over the emulated
//! runtime, device binding, streams and device memory, and the lock of the files whose tests
//! must not overlap.

// Each test binary uses its own part of this module.
#![allow(dead_code)]

use std::ffi::c_void;
use std::sync::{Mutex, MutexGuard, OnceLock};

use ascend_acl::types::*;
use ascend_acl::AclApi;
use ascend_emulator::EmulatedRuntime;

pub mod ops;

/// The table over the emulated runtime, initialised once per test binary, with emulated NPU 0
/// bound to the calling thread (AscendCL binds devices per thread).
pub fn api() -> &'static AclApi {
    let api = table();
    bind(api);
    api
}

/// The table over the emulated runtime, initialised once per test binary, leaving the calling
/// thread's device binding as it is.
pub fn table() -> &'static AclApi {
    static API: OnceLock<AclApi> = OnceLock::new();
    API.get_or_init(|| {
        let api = AclApi::new(Box::new(EmulatedRuntime)).expect("the emulator exports the list");
        // SAFETY: NULL means "no configuration file".
        api.check(unsafe { (api.core.aclInit)(std::ptr::null()) }, "aclInit")
            .unwrap();
        api
    })
}

/// Binds emulated NPU 0 to the calling thread.
pub fn bind(api: &AclApi) {
    // SAFETY: plain call; device 0 exists on the emulated machine.
    api.check(unsafe { (api.core.aclrtSetDevice)(0) }, "aclrtSetDevice")
        .unwrap();
}

/// The lock that keeps a file's tests apart (a poisoned lock is still a lock: one failed test
/// must not fail the others).
pub fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// A new stream on the calling thread's device.
pub fn stream(api: &AclApi) -> aclrtStream {
    let mut s = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    api.check(
        unsafe { (api.core.aclrtCreateStream)(&mut s) },
        "aclrtCreateStream",
    )
    .unwrap();
    s
}

/// `bytes` of device memory on the calling thread's device.
pub fn malloc(api: &AclApi, bytes: usize) -> *mut c_void {
    let mut p = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    api.check(
        unsafe { (api.core.aclrtMalloc)(&mut p, bytes, ACL_MEM_MALLOC_HUGE_FIRST) },
        "aclrtMalloc",
    )
    .unwrap();
    p
}
