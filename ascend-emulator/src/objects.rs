//! The live aclnn objects (`aclTensor`, `aclScalar`, `aclIntArray`, `aclBoolArray`,
//! `aclTensorList`) by handle. Handles are a counter, never reused, so a destroyed object is
//! reported as destroyed (a double destroy, a use after destroy) instead of being mistaken for
//! a newer one, and nothing here ever dereferences a pointer the caller passed.
//!
//! Phase one records which objects it read (`record`), the executor keeps the list, and phase
//! two checks them again: an executor refers to its objects until phase two returns
//! (acl-abi.md 6.3, lifetime rule 1), so destroying one earlier is an error here.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::fault::{fault, Fault};
use super::meta::{HandleHasher, ScalarValue, TensorDesc};
use ascend_acl::types::status::*;

/// A live object.
pub(crate) enum Object {
    Tensor(TensorDesc),
    Scalar(ScalarValue),
    IntArray(Vec<i64>),
    BoolArray(Vec<bool>),
    /// Owns its member tensors (destroying the list destroys them, as CANN does).
    TensorList(Vec<usize>),
}

impl Object {
    fn kind(&self) -> &'static str {
        match self {
            Object::Tensor(_) => "aclTensor",
            Object::Scalar(_) => "aclScalar",
            Object::IntArray(_) => "aclIntArray",
            Object::BoolArray(_) => "aclBoolArray",
            Object::TensorList(_) => "aclTensorList",
        }
    }
}

type ObjectMap = HashMap<usize, Object, BuildHasherDefault<HandleHasher>>;

static OBJECTS: Mutex<Option<ObjectMap>> = Mutex::new(None);
static NEXT: AtomicUsize = AtomicUsize::new(1);

fn with_objects<R>(f: impl FnOnce(&mut ObjectMap) -> R) -> R {
    f(OBJECTS.lock().unwrap().get_or_insert_with(Default::default))
}

/// Registers `object` and returns its handle (aligned like a heap object, never NULL).
pub(crate) fn register(object: Object) -> usize {
    let handle = NEXT.fetch_add(1, Ordering::Relaxed) << 4;
    with_objects(|m| m.insert(handle, object));
    handle
}

fn not_live(what: &str, kind: &str, handle: usize) -> Fault {
    fault(
        ACLNN_ERR_PARAM_INVALID,
        format!("{what}: 0x{handle:x} is not a live {kind} (destroyed already, or never created)"),
    )
}

/// Reads the live object of `kind` at `handle` with `f`.
pub(crate) fn read<R>(
    what: &str,
    kind: &'static str,
    handle: usize,
    f: impl FnOnce(&mut Object) -> Option<R>,
) -> Result<R, Fault> {
    with_objects(|m| m.get_mut(&handle).and_then(f)).ok_or_else(|| not_live(what, kind, handle))
}

/// Removes the object of `kind` at `handle` (and, for a list, its members).
pub(crate) fn destroy(what: &str, kind: &'static str, handle: usize) -> Result<(), Fault> {
    with_objects(|m| {
        match m.get(&handle) {
            Some(o) if o.kind() == kind => {}
            _ => return Err(not_live(what, kind, handle)),
        }
        if let Some(Object::TensorList(members)) = m.remove(&handle) {
            for t in members {
                // A member destroyed on its own first was destroyed twice.
                m.remove(&t)
                    .ok_or_else(|| not_live(what, "aclTensor (member of the list)", t))?;
            }
        }
        Ok(())
    })
}

/// Whether `handle` is a live object.
fn is_live(handle: usize) -> bool {
    with_objects(|m| m.contains_key(&handle))
}

thread_local! {
    /// The objects the phase one running on this thread has read so far. Operators read some
    /// arguments before their common phase-one path starts, so reading always records; phase
    /// one takes the list when it builds its executor, and a failed call clears it
    /// (`fault::report`), so nothing carries over to the next call.
    static READ: RefCell<Vec<ObjectArg>> = const { RefCell::new(Vec::new()) };
}

/// An object an executor refers to.
#[derive(Debug, Clone)]
pub(crate) struct ObjectArg {
    handle: usize,
    kind: &'static str,
    name: String,
}

/// Notes that phase one read the object at `handle` as argument `name`.
pub(crate) fn record(handle: usize, kind: &'static str, name: &str) {
    READ.with(|r| {
        r.borrow_mut().push(ObjectArg {
            handle,
            kind,
            name: name.to_string(),
        })
    });
}

/// The objects read since the last call took them (or failed).
pub(crate) fn take_recorded() -> Vec<ObjectArg> {
    READ.with(|r| std::mem::take(&mut *r.borrow_mut()))
}

/// The device addresses of the tensors (and list members) among `args`, with their argument
/// names, as they are now (a repeatable executor's rebinding updates them).
pub(crate) fn tensor_addrs(args: &[ObjectArg]) -> Vec<(String, u64)> {
    with_objects(|m| {
        args.iter()
            .filter_map(|a| match m.get(&a.handle) {
                Some(Object::Tensor(t)) if t.numel() > 0 => Some((a.name.clone(), t.addr)),
                _ => None,
            })
            .collect()
    })
}

/// Phase two's check: every object phase one read is still live.
pub(crate) fn check_live(op: &str, args: &[ObjectArg]) -> Result<(), Fault> {
    match args.iter().find(|a| !is_live(a.handle)) {
        None => Ok(()),
        Some(a) => Err(fault(
            ACLNN_ERR_PARAM_INVALID,
            format!(
                "{op}: the {} passed as `{}` to {op}GetWorkspaceSize (0x{:x}) was destroyed \
                 before phase two: an executor refers to its aclTensor, aclScalar and aclIntArray \
                 objects until phase two returns (acl-abi.md 6.3, lifetime rule 1)",
                a.kind, a.name, a.handle
            ),
        )),
    }
}
