//! Failures inside the emulated runtime, and the thread-local "recent error" they leave for
//! `aclGetRecentErrMsg`.

use std::cell::RefCell;
use std::ffi::{c_char, CString};

/// A status code and the message the runtime gives for it.
#[derive(Debug, Clone)]
pub(crate) struct Fault {
    pub code: i32,
    pub message: String,
}

pub(crate) fn fault(code: i32, message: impl Into<String>) -> Fault {
    Fault {
        code,
        message: message.into(),
    }
}

thread_local! {
    static RECENT: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `f` as this thread's recent error and returns its code.
pub(crate) fn report(f: Fault) -> i32 {
    // A failed call builds no executor: what its phase one read so far refers to nothing.
    drop(super::objects::take_recorded());
    let text = CString::new(f.message.replace('\0', " ")).unwrap_or_default();
    RECENT.with(|r| *r.borrow_mut() = text);
    f.code
}

/// Pointer to this thread's recent error text (valid until the next error on this thread).
pub(crate) fn recent() -> *const c_char {
    RECENT.with(|r| r.borrow().as_ptr())
}

/// Runs `body`, turning a fault or a panic into a status code (unwinding must not cross the
/// C ABI).
pub(crate) fn guard(what: &str, body: impl FnOnce() -> Result<(), Fault>) -> i32 {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(Ok(())) => 0,
        Ok(Err(f)) => report(f),
        Err(panic) => report(fault(
            ascend_acl::types::status::ACLNN_ERR_INNER,
            format!("internal error in emulated {what}: {}", panic_text(&panic)),
        )),
    }
}

pub(crate) fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into())
}
