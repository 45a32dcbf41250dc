//! Typed errors. Burn's ops cannot return errors, so a failing op panics; the panic carries an
//! [`AscendError`] that [`try_run`] turns back into a value for code that must survive it (a
//! server, a notebook). The panic message is the error's `Display`, unchanged for everyone else.
//!
//! The typed error travels beside the panic, recorded under the caller's Burn stream id
//! (`StreamId::current()`, the calling thread on `Ascend`).

use std::collections::HashMap;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Mutex, OnceLock};

use burn_backend::StreamId;

pub use burn_ascend_core::error::AscendError;

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
