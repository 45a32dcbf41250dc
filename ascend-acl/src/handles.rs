//! Safe owners of ACL objects (each released exactly once, on drop) and the two-phase
//! operator call.

use std::ffi::c_void;
use std::rc::Rc;

use super::cache::{Lent, View};
use super::dtype::DataType;
use super::error::{AclError, AclResult};
use super::table::{AclApi, Phase2Fn};
use super::types::format::*;
use super::types::*;

/// The layout format aclnn expects for a plain tensor of this rank (as torch_npu passes).
fn format_for_rank(rank: usize) -> i32 {
    match rank {
        3 => ACL_FORMAT_NCL,
        4 => ACL_FORMAT_NCHW,
        5 => ACL_FORMAT_NCDHW,
        _ => ACL_FORMAT_ND,
    }
}

fn created<T>(api: &AclApi, p: *mut T, function: &str) -> AclResult<*mut T> {
    if p.is_null() {
        Err(AclError::Call {
            code: status::ACLNN_ERR_PARAM_INVALID,
            function: function.into(),
            message: api.recent_error_message(),
            context: None,
        })
    } else {
        Ok(p)
    }
}

/// An `aclTensor` view descriptor: its own, or lent by the thread's descriptor cache
/// ([`super::cache`]), which destroys it on eviction.
pub struct TensorDesc<'a> {
    api: &'a AclApi,
    ptr: *mut aclTensor,
    lent: Option<Rc<Lent>>,
    /// The device context holding the described memory, 0 if unknown.
    owner: u64,
}

impl<'a> TensorDesc<'a> {
    /// Describes a view of the device allocation at `base` holding `storage_elems` elements.
    /// Strides and offset are in elements, as aclCreateTensor takes them.
    ///
    /// # Safety
    /// `base` must be a live device allocation of at least `storage_elems` elements of `dtype`
    /// for as long as operators launched with the descriptor may run: aclnn reads and writes
    /// through it without further checks on real hardware.
    pub unsafe fn new(
        api: &'a AclApi,
        shape: &[usize],
        strides: &[usize],
        offset: usize,
        dtype: DataType,
        storage_elems: usize,
        base: *mut c_void,
    ) -> AclResult<Self> {
        let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        let strides: Vec<i64> = strides.iter().map(|&s| s as i64).collect();
        let storage = [storage_elems as i64];
        // SAFETY: the arrays are valid for the lengths passed; aclCreateTensor copies them.
        let ptr = unsafe {
            (api.core.aclCreateTensor)(
                dims.as_ptr(),
                dims.len() as u64,
                dtype.acl(),
                strides.as_ptr(),
                offset as i64,
                format_for_rank(shape.len()),
                storage.as_ptr(),
                1,
                base,
            )
        };
        Ok(Self {
            api,
            ptr: created(api, ptr, "aclCreateTensor")?,
            lent: None,
            owner: 0,
        })
    }

    /// Records the device context holding the described memory ([`OpLauncher::context_id`]):
    /// operators launched on another context refuse the descriptor.
    pub fn owned_by(mut self, owner: u64) -> Self {
        self.owner = owner;
        self
    }

    /// Describes `view`, reusing the calling thread's cached descriptor of an identical view
    /// (same table, address, shape, strides, offset, dtype and storage size) when it is not
    /// lent out already; see [`super::cache`].
    ///
    /// # Safety
    /// As for [`TensorDesc::new`].
    pub unsafe fn cached(api: &'static AclApi, view: &View<'_>) -> AclResult<TensorDesc<'static>> {
        super::cache::lend_descriptor(api, view)
    }

    /// A descriptor lent by the cache.
    pub(super) fn lent(api: &'a AclApi, lent: Rc<Lent>) -> Self {
        Self {
            api,
            ptr: lent.ptr(),
            lent: Some(lent),
            owner: 0,
        }
    }

    /// The raw descriptor, for an operator argument.
    pub fn as_ptr(&self) -> *mut aclTensor {
        self.ptr
    }

    /// The view shape as the runtime has it now (data-dependent operators such as Nonzero
    /// rewrite it; read it after synchronising the stream). Frees the array the runtime
    /// returns, as its caller must.
    pub fn view_shape(&self) -> AclResult<Vec<usize>> {
        let (mut dims, mut count) = (std::ptr::null_mut(), 0u64);
        // SAFETY: the descriptor is alive; valid out-pointers.
        let status = unsafe { (self.api.core.aclGetViewShape)(self.ptr, &mut dims, &mut count) };
        self.api.check(status, "aclGetViewShape")?;
        if dims.is_null() {
            return Ok(Vec::new());
        }
        // SAFETY: the runtime returned an array of `count` dims, ours to free once.
        unsafe {
            let shape = std::slice::from_raw_parts(dims, count as usize)
                .iter()
                .map(|&d| d as usize)
                .collect();
            crate::view_dims::delete_array(dims);
            Ok(shape)
        }
    }

    /// Hands the descriptor over to a tensor list, which then owns it (a lent descriptor is
    /// copied first: the cache keeps its own).
    fn into_raw(self) -> AclResult<*mut aclTensor> {
        if let Some(lent) = &self.lent {
            // SAFETY: the view was valid when the cache created it, and still is for the
            // caller that asked for it.
            let copy = unsafe { lent.view().describe(self.api)? };
            // Dropping `self` only ends the loan.
            return copy.into_raw();
        }
        let p = self.ptr;
        std::mem::forget(self);
        Ok(p)
    }
}

impl Drop for TensorDesc<'_> {
    fn drop(&mut self) {
        if self.lent.is_none() {
            // SAFETY: created by aclCreateTensor and not owned by a list or the cache.
            unsafe { (self.api.core.aclDestroyTensor)(self.ptr) };
        }
    }
}

/// An `aclScalar`, created as torch_npu does: DOUBLE for floats, INT64 for integers, BOOL.
pub struct ScalarDesc<'a> {
    api: &'a AclApi,
    ptr: *mut aclScalar,
}

/// A host scalar operand.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HostScalar {
    /// Passed as ACL_DOUBLE.
    Float(f64),
    /// Passed as ACL_INT64.
    Int(i64),
    /// Passed as ACL_BOOL.
    Bool(bool),
}

impl<'a> ScalarDesc<'a> {
    /// Creates the scalar (its value is copied).
    pub fn new(api: &'a AclApi, value: HostScalar) -> AclResult<Self> {
        let mut bytes = [0u8; 8];
        let dtype = match value {
            HostScalar::Float(v) => {
                bytes = v.to_ne_bytes();
                DataType::F64
            }
            HostScalar::Int(v) => {
                bytes = v.to_ne_bytes();
                DataType::I64
            }
            HostScalar::Bool(v) => {
                bytes[0] = v as u8;
                DataType::Bool
            }
        };
        // SAFETY: `bytes` holds a value of `dtype`; aclCreateScalar copies it.
        let ptr =
            unsafe { (api.core.aclCreateScalar)(bytes.as_mut_ptr() as *mut c_void, dtype.acl()) };
        Ok(Self {
            api,
            ptr: created(api, ptr, "aclCreateScalar")?,
        })
    }

    /// The raw descriptor.
    pub fn as_ptr(&self) -> *const aclScalar {
        self.ptr
    }
}

impl Drop for ScalarDesc<'_> {
    fn drop(&mut self) {
        // SAFETY: created by aclCreateScalar.
        unsafe { (self.api.core.aclDestroyScalar)(self.ptr) };
    }
}

/// An `aclIntArray`.
pub struct IntArrayDesc<'a> {
    api: &'a AclApi,
    ptr: *mut aclIntArray,
}

impl<'a> IntArrayDesc<'a> {
    /// Creates the array (its values are copied).
    pub fn new(api: &'a AclApi, values: &[i64]) -> AclResult<Self> {
        // SAFETY: valid for `values.len()` elements; copied by the callee.
        let ptr = unsafe { (api.core.aclCreateIntArray)(values.as_ptr(), values.len() as u64) };
        Ok(Self {
            api,
            ptr: created(api, ptr, "aclCreateIntArray")?,
        })
    }

    /// The raw descriptor.
    pub fn as_ptr(&self) -> *const aclIntArray {
        self.ptr
    }
}

impl Drop for IntArrayDesc<'_> {
    fn drop(&mut self) {
        // SAFETY: created by aclCreateIntArray.
        unsafe { (self.api.core.aclDestroyIntArray)(self.ptr) };
    }
}

/// An `aclBoolArray`.
pub struct BoolArrayDesc<'a> {
    api: &'a AclApi,
    ptr: *mut aclBoolArray,
}

impl<'a> BoolArrayDesc<'a> {
    /// Creates the array (its values are copied).
    pub fn new(api: &'a AclApi, values: &[bool]) -> AclResult<Self> {
        // SAFETY: valid for `values.len()` one-byte bools; copied by the callee.
        let ptr = unsafe { (api.core.aclCreateBoolArray)(values.as_ptr(), values.len() as u64) };
        Ok(Self {
            api,
            ptr: created(api, ptr, "aclCreateBoolArray")?,
        })
    }

    /// The raw descriptor.
    pub fn as_ptr(&self) -> *const aclBoolArray {
        self.ptr
    }
}

impl Drop for BoolArrayDesc<'_> {
    fn drop(&mut self) {
        // SAFETY: created by aclCreateBoolArray.
        unsafe { (self.api.core.aclDestroyBoolArray)(self.ptr) };
    }
}

/// An `aclTensorList`; it owns (and destroys) its member tensors.
pub struct TensorListDesc<'a> {
    api: &'a AclApi,
    ptr: *mut aclTensorList,
    /// The device context of its members (they all share it), 0 if unknown.
    owner: u64,
}

impl<'a> TensorListDesc<'a> {
    /// Creates the list, taking ownership of the tensors, which must live on one device
    /// context.
    pub fn new(api: &'a AclApi, tensors: Vec<TensorDesc<'a>>) -> AclResult<Self> {
        let owner = common_owner(tensors.iter().map(|t| t.owner)).ok_or_else(|| {
            AclError::InvalidArgument(format!(
                "aclCreateTensorList: the tensors live on different device contexts ({:?})",
                tensors.iter().map(|t| t.owner).collect::<Vec<_>>()
            ))
        })?;
        let mut raw: Vec<*const aclTensor> = Vec::with_capacity(tensors.len());
        for t in tensors {
            match t.into_raw() {
                Ok(p) => raw.push(p),
                Err(e) => {
                    for t in raw {
                        // SAFETY: handed over above and not yet in a list.
                        unsafe { (api.core.aclDestroyTensor)(t) };
                    }
                    return Err(e);
                }
            }
        }
        // SAFETY: the pointer array is valid for its length and copied by the callee.
        let ptr = unsafe { (api.core.aclCreateTensorList)(raw.as_ptr(), raw.len() as u64) };
        if ptr.is_null() {
            for t in raw {
                // SAFETY: the list was not created, so the tensors are still ours to destroy.
                unsafe { (api.core.aclDestroyTensor)(t) };
            }
        }
        Ok(Self {
            api,
            ptr: created(api, ptr, "aclCreateTensorList")?,
            owner,
        })
    }

    /// The raw descriptor.
    pub fn as_ptr(&self) -> *const aclTensorList {
        self.ptr
    }
}

impl Drop for TensorListDesc<'_> {
    fn drop(&mut self) {
        // SAFETY: created by aclCreateTensorList; this also destroys the member tensors.
        unsafe { (self.api.core.aclDestroyTensorList)(self.ptr) };
    }
}

/// Runs phase two of an operator: the device runtime implements it (workspace, stream,
/// blocking mode).
pub trait OpLauncher {
    /// The table to call through.
    fn api(&self) -> &'static AclApi;
    /// The device context the operators run on, unique in the process (executors belong to
    /// it and are cached per context; a device reset starts a new one).
    fn context_id(&self) -> u64;
    /// Names a device context for messages (`npu:0`, `emulated:1`).
    fn describe_context(&self, context: u64) -> String {
        format!("device context {context}")
    }
    /// Whether the stream is capturing a graph: the executor cache is then bypassed, since a
    /// graph's recorded launch must keep its executor as it was (the cache would rebind or
    /// evict it while the graph lives).
    fn capturing(&self) -> bool {
        false
    }
    /// Whether an operator called now is issued, asked before its phase one: `Err` fails it
    /// (the context refuses work), `Ok(false)` drops it without calling either phase (the
    /// context stopped at a fault that its next synchronisation reports).
    fn issues_work(&self) -> AclResult<bool> {
        Ok(true)
    }
    /// Takes a `workspace_size`-byte workspace, calls `phase2` on the stream, releases the
    /// workspace in stream order.
    ///
    /// # Safety
    /// `executor` must come from phase one of the operator whose phase two is `phase2`, and
    /// must not have been launched before.
    unsafe fn launch(
        &self,
        op: &'static str,
        phase2: Phase2Fn,
        executor: *mut aclOpExecutor,
        workspace_size: u64,
    ) -> AclResult<()>;
    /// As [`OpLauncher::launch`], for a repeatable executor, which stays the caller's
    /// whatever happens.
    ///
    /// # Safety
    /// `executor` must be a repeatable executor of the operator whose phase two is `phase2`.
    unsafe fn launch_repeatable(
        &self,
        op: &'static str,
        phase2: Phase2Fn,
        executor: *mut aclOpExecutor,
        workspace_size: u64,
    ) -> AclResult<()>;
}

/// An argument of an aclnn operator as [`aclnn!`](crate::aclnn) takes it: the owner of a C
/// object (or a reference to one), which the macro keeps alive until phase two has returned,
/// since the executor refers to its `aclTensor`, `aclScalar` and `aclIntArray` objects until
/// then (acl-abi.md, aclnn lifetime rule 1); [`Absent`] for a NULL optional argument; or a
/// plain value (an integer, a float, a bool, a dtype code). Raw pointers are not arguments, so
/// an object cannot die inside the call.
pub trait AclArg<P> {
    /// The C argument.
    fn acl_arg(&self) -> P;
}

/// A NULL optional argument.
#[derive(Debug, Clone, Copy)]
pub struct Absent;

/// Which device context an [`aclnn!`](crate::aclnn) argument's memory lives on.
pub trait ArgOwner {
    /// The context ([`OpLauncher::context_id`]), or 0 for no memory or unknown.
    fn owner(&self) -> u64 {
        0
    }
}

impl ArgOwner for TensorDesc<'_> {
    fn owner(&self) -> u64 {
        self.owner
    }
}

impl ArgOwner for TensorListDesc<'_> {
    fn owner(&self) -> u64 {
        self.owner
    }
}

impl<T: ArgOwner> ArgOwner for &T {
    fn owner(&self) -> u64 {
        (**self).owner()
    }
}

impl<T: ArgOwner> ArgOwner for Option<T> {
    fn owner(&self) -> u64 {
        self.as_ref().map_or(0, ArgOwner::owner)
    }
}

macro_rules! ownerless {
    ($($t:ty),*) => {$(impl ArgOwner for $t {})*};
}
ownerless!(
    ScalarDesc<'_>,
    IntArrayDesc<'_>,
    BoolArrayDesc<'_>,
    Absent,
    bool,
    i8,
    i32,
    i64,
    u64,
    f32,
    f64
);

/// The one context of `owners` (ignoring unknown ones), or `None` when they differ.
fn common_owner(owners: impl Iterator<Item = u64>) -> Option<u64> {
    let mut common = 0;
    for o in owners.filter(|&o| o != 0) {
        if common != 0 && o != common {
            return None;
        }
        common = o;
    }
    Some(common)
}

/// Every operand of `op` lives on the launcher's device context: an operator runs on one
/// device and reads and writes that device's memory only.
pub fn check_owners<L: OpLauncher + ?Sized>(
    launcher: &L,
    op: &str,
    owners: &[u64],
) -> AclResult<()> {
    let here = launcher.context_id();
    match owners.iter().position(|&o| o != 0 && o != here) {
        None => Ok(()),
        Some(i) => Err(AclError::InvalidArgument(format!(
            "{op}: operand {i} lives on {}, but the operation runs on {}: move it with to_device \
             first (a tensor of a device context that was reset is gone: create it again)",
            launcher.describe_context(owners[i]),
            launcher.describe_context(here)
        ))),
    }
}

macro_rules! pointer_args {
    ($($owner:ident => $($ptr:ty),+;)*) => {$($(
        impl AclArg<$ptr> for $owner<'_> {
            fn acl_arg(&self) -> $ptr {
                self.ptr as $ptr
            }
        }
    )+)*
    $($(
        impl AclArg<$ptr> for Absent {
            fn acl_arg(&self) -> $ptr {
                std::ptr::null_mut::<std::ffi::c_void>() as $ptr
            }
        }
    )+)*};
}
pointer_args! {
    TensorDesc => *const aclTensor, *mut aclTensor;
    ScalarDesc => *const aclScalar;
    IntArrayDesc => *const aclIntArray;
    BoolArrayDesc => *const aclBoolArray;
    TensorListDesc => *const aclTensorList, *mut aclTensorList;
}

macro_rules! value_args {
    ($($t:ty),*) => {$(
        impl AclArg<$t> for $t {
            fn acl_arg(&self) -> $t {
                *self
            }
        }
    )*};
}
value_args!(bool, i8, i32, i64, u64, f32, f64);

/// A NUL-terminated string argument (an attention operator's `inputLayout`): CANN declares it
/// `char *` but only reads it, so a shared string is passed.
impl AclArg<*mut std::ffi::c_char> for &std::ffi::CStr {
    fn acl_arg(&self) -> *mut std::ffi::c_char {
        self.as_ptr().cast_mut()
    }
}

impl ArgOwner for &std::ffi::CStr {}

impl<P, T: AclArg<P>> AclArg<P> for &T {
    fn acl_arg(&self) -> P {
        (**self).acl_arg()
    }
}

impl<P, T: AclArg<P>> AclArg<P> for Option<T>
where
    Absent: AclArg<P>,
{
    fn acl_arg(&self) -> P {
        match self {
            Some(t) => t.acl_arg(),
            None => Absent.acl_arg(),
        }
    }
}

/// Calls an aclnn operator through the table: resolves it, binds every argument (so each
/// object lives until phase two has returned), runs phase one with them in header order
/// (without workspace size and executor), then hands the executor to the launcher for phase
/// two. Arguments are [`AclArg`]s: descriptor owners or references, [`Absent`], plain values.
///
/// `aclnn!(launcher, aclnnAdd(a.desc()?, &b, alpha, out.desc()?))`
#[macro_export]
macro_rules! aclnn {
    ($launcher:expr, $op:ident($($arg:expr),* $(,)?)) => {
        $crate::__aclnn_bind!(
            $launcher, $op, [$($arg),*],
            [a0 a1 a2 a3 a4 a5 a6 a7 a8 a9 a10 a11 a12 a13 a14 a15 a16 a17 a18 a19 a20 a21 a22 a23
             a24 a25 a26 a27 a28 a29 a30 a31 a32 a33 a34 a35 a36 a37 a38 a39 a40 a41 a42 a43 a44],
            []
        )
    };
}

/// Whether the loaded CANN exports the aclnn operator `op` (both phases), without calling it:
/// `Ok(())`, or the `MissingOp` error a call would return. For operators newer than the oldest
/// release we run on (`crate::release`), so a caller can take another route.
///
/// `aclnn_exported!(api, aclnnRightShift)` with `api: &AclApi`
#[macro_export]
macro_rules! aclnn_exported {
    ($api:expr, $op:ident) => {{
        let api: &$crate::table::AclApi = $api;
        // SAFETY: the table's own entry, resolved under its own names; nothing is called.
        unsafe {
            api.ops.$op.resolve(
                api.source(),
                stringify!($op),
                concat!(stringify!($op), "GetWorkspaceSize"),
            )
        }
        .map(|_| ())
    }};
}

/// Binds the arguments of [`aclnn!`](crate::aclnn) one by one, outside any `unsafe` block, then
/// makes the call.
#[doc(hidden)]
#[macro_export]
macro_rules! __aclnn_bind {
    ($launcher:expr, $op:ident, [$arg:expr $(, $rest:expr)*], [$name:ident $($names:ident)*], [$($bound:ident)*]) => {{
        let $name = $arg;
        $crate::__aclnn_bind!($launcher, $op, [$($rest),*], [$($names)*], [$($bound)* $name])
    }};
    ($launcher:expr, $op:ident, [], [$($names:ident)*], [$($bound:ident)*]) => {{
        let launcher = $launcher;
        let owners = [$($crate::handles::ArgOwner::owner(&$bound)),*];
        match $crate::handles::check_owners(launcher, stringify!($op), &owners)
            .and_then(|()| $crate::handles::OpLauncher::issues_work(launcher))
        {
            Err(e) => Err(e),
            Ok(false) => Ok(()),
            Ok(true) => $crate::__aclnn_call!(launcher, $op, [$($bound)*]),
        }
    }};
}

/// Phase one and phase two of [`aclnn!`](crate::aclnn) on bound arguments.
#[doc(hidden)]
#[macro_export]
macro_rules! __aclnn_call {
    ($launcher:ident, $op:ident, [$($bound:ident)*]) => {{
        let launcher = $launcher;
        let api = $crate::handles::OpLauncher::api(launcher);
        const PHASE1: &str = concat!(stringify!($op), "GetWorkspaceSize");
        // SAFETY: the table types each operator with its declared C signature.
        match unsafe { api.ops.$op.resolve(api.source(), stringify!($op), PHASE1) } {
            Err(e) => Err(e),
            Ok((phase1, phase2)) => {
                let mut workspace = 0u64;
                let mut executor = ::std::ptr::null_mut();
                // SAFETY: every argument is a live object bound above (or a plain value) and
                // outlives both phases.
                let status = unsafe {
                    phase1($($crate::handles::AclArg::acl_arg(&$bound),)* &mut workspace, &mut executor)
                };
                match api.check(status, PHASE1) {
                    Err(e) => Err(e),
                    // SAFETY: the executor comes from phase one of this operator, launched once.
                    Ok(()) => unsafe { $crate::handles::OpLauncher::launch(launcher, stringify!($op), phase2, executor, workspace) },
                }
            }
        }
    }};
}
