//! The aclnn object layer of the emulated runtime: tensor, scalar, int-array and tensor-list
//! descriptors, and executors (the product of phase one of an operator call), repeatable ones
//! included.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::fault::{fault, Fault};
use super::objects::{check_live, read, record, Object, ObjectArg};
use ascend_acl::dtype::DataType;
pub(crate) use ascend_acl::shape::contiguous_strides;
use ascend_acl::types::status::*;
use ascend_acl::types::*;

/// Highest rank aclnn operators accept.
pub(crate) const MAX_RANK: usize = 8;

/// What `aclCreateTensor` captured. Strides and offset are in elements.
#[derive(Debug, Clone)]
pub(crate) struct TensorDesc {
    pub shape: Vec<usize>,
    pub strides: Vec<usize>,
    pub offset: usize,
    pub dtype: DataType,
    pub addr: u64,
    /// The executor argument this view was captured as, for operators whose repeatable
    /// executors can rebind addresses; `None` elsewhere.
    pub slot: Option<Slot>,
}

impl TensorDesc {
    /// The device address of the view's storage for the kernel now running: a view captured as
    /// an executor argument follows the address bound to that argument for this launch.
    pub fn device_addr(&self) -> u64 {
        match self.slot {
            None => self.addr,
            Some(slot) => RUNNING.with(|r| r.borrow().as_ref().map_or(self.addr, |b| b.get(slot))),
        }
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_contiguous(&self) -> bool {
        ascend_acl::shape::is_contiguous(&self.shape, &self.strides)
    }

    /// One past the highest storage element the view reaches.
    pub fn extent(&self) -> usize {
        ascend_acl::shape::extent(&self.shape, &self.strides, self.offset)
    }

    pub fn describe(&self) -> String {
        format!("{:?} {}", self.shape, self.dtype)
    }
}

/// A host scalar as `aclCreateScalar` copied it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ScalarValue {
    Float(f64),
    Int(i64),
}

impl ScalarValue {
    pub fn as_f64(self) -> f64 {
        match self {
            ScalarValue::Float(v) => v,
            ScalarValue::Int(v) => v as f64,
        }
    }
}

/// What an operator computes once its stream reaches it; an executor may run it many times.
pub(crate) type Kernel = Arc<dyn Fn() -> Result<(), Fault> + Send + Sync>;

/// An executor argument whose device address `aclSetInputTensorAddr` /
/// `aclSetOutputTensorAddr` can change. Indices count the operator's input (or output) tensors
/// in header order, scalars and arrays left out (assumption: CANN's docs give the range as
/// "0 to the number of input tensors - 1" without defining the order further).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    Input(usize),
    Output(usize),
}

/// The device address of every argument slot of an executor.
#[derive(Debug, Clone, Default)]
pub(crate) struct Bindings {
    inputs: Vec<u64>,
    outputs: Vec<u64>,
}

impl Bindings {
    fn get(&self, slot: Slot) -> u64 {
        match slot {
            Slot::Input(i) => self.inputs[i],
            Slot::Output(i) => self.outputs[i],
        }
    }
}

/// Collects the argument slots of an operator during phase one.
#[derive(Default)]
pub(crate) struct Io {
    bindings: Bindings,
}

impl Io {
    /// Captures `desc` as the operator's next input tensor.
    pub fn input(&mut self, mut desc: TensorDesc) -> TensorDesc {
        desc.slot = Some(Slot::Input(self.bindings.inputs.len()));
        self.bindings.inputs.push(desc.addr);
        desc
    }

    /// Captures `desc` as the operator's next output tensor.
    pub fn output(&mut self, mut desc: TensorDesc) -> TensorDesc {
        desc.slot = Some(Slot::Output(self.bindings.outputs.len()));
        self.bindings.outputs.push(desc.addr);
        desc
    }
}

thread_local! {
    /// The bindings of the launch whose kernel runs on this (stream worker) thread.
    static RUNNING: RefCell<Option<Arc<Bindings>>> = const { RefCell::new(None) };
}

/// A validated operator launch: made by phase one, run by phase two (once, or as often as
/// the caller likes once made repeatable, until destroyed).
pub(crate) struct Executor {
    op: &'static str,
    workspace: u64,
    kernel: Kernel,
    bindings: Arc<Bindings>,
    /// Operators that capture their arguments as slots can be made repeatable; others keep
    /// aclnn's documented one-shot behaviour (see [`set_repeatable`]).
    rebindable: bool,
    repeatable: bool,
    /// Global-memory bytes of its tensor arguments (the work counters' model).
    bytes: u64,
    /// The objects phase one read, which must live until phase two returns.
    objects: Vec<ObjectArg>,
    /// Bumped when the executor is rebound or destroyed (see [`Launch::changed`]).
    changes: Arc<AtomicU64>,
}

/// One launch of an executor: its kernel with the addresses bound when phase two was called
/// (later rebinding does not reach work already queued).
pub(crate) struct Launch {
    pub workspace: u64,
    /// The device address of each tensor argument (by name), for the one-device check.
    pub addrs: Vec<(String, u64)>,
    /// Global-memory bytes of the executor's tensor arguments (the work counters' model).
    pub bytes: u64,
    kernel: Kernel,
    bindings: Arc<Bindings>,
    changes: Arc<AtomicU64>,
    /// `changes` when phase two was called.
    version: u64,
}

impl Launch {
    /// Whether the executor was rebound or destroyed since this launch. A queued launch keeps
    /// its addresses; a graph's recorded launch is taken to refer to the executor itself
    /// (ASSUMPTION, the stricter reading: CANN does not document what a captured aclnn task
    /// keeps of its executor; aclgraph-abi.md §5 only says captured tasks keep their addresses),
    /// so its replay refuses an executor that changed.
    pub fn changed(&self) -> bool {
        self.changes.load(Ordering::SeqCst) != self.version
    }

    /// Runs the kernel with this launch's addresses.
    pub fn run(&self) -> Result<(), Fault> {
        struct Restore(Option<Arc<Bindings>>);
        impl Drop for Restore {
            fn drop(&mut self) {
                RUNNING.with(|r| *r.borrow_mut() = self.0.take());
            }
        }
        let _restore = Restore(RUNNING.with(|r| r.replace(Some(self.bindings.clone()))));
        (self.kernel)()
    }
}

/// Handles are a counter: one multiply spreads them over the table (every op looks one up).
#[derive(Default)]
pub(crate) struct HandleHasher(u64);

impl Hasher for HandleHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0 << 8 | b as u64);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

type ExecutorMap = HashMap<usize, Executor, BuildHasherDefault<HandleHasher>>;

/// Live executors by handle. Handles are never reused, so a launched (non-repeatable) or
/// destroyed executor is reported as such instead of being mistaken for a newer one.
static EXECUTORS: Mutex<Option<ExecutorMap>> = Mutex::new(None);
static NEXT_EXECUTOR: AtomicUsize = AtomicUsize::new(1);

fn with_executors<R>(f: impl FnOnce(&mut ExecutorMap) -> R) -> R {
    f(EXECUTORS
        .lock()
        .unwrap()
        .get_or_insert_with(Default::default))
}

/// Registers the product of phase one and returns its handle.
pub(crate) fn new_executor(
    op: &'static str,
    workspace: u64,
    kernel: Kernel,
    io: Io,
    bytes: u64,
    objects: Vec<ObjectArg>,
) -> *mut aclOpExecutor {
    let rebindable = !(io.bindings.inputs.is_empty() && io.bindings.outputs.is_empty());
    let exec = Executor {
        op,
        workspace,
        kernel,
        bindings: Arc::new(io.bindings),
        rebindable,
        repeatable: false,
        bytes,
        objects,
        changes: Arc::default(),
    };
    // Aligned like a heap object, never NULL.
    let handle = NEXT_EXECUTOR.fetch_add(1, Ordering::Relaxed) << 4;
    with_executors(|m| m.insert(handle, exec));
    handle as *mut aclOpExecutor
}

fn not_live(what: &str, handle: *mut aclOpExecutor) -> Fault {
    // CANN's nnopbase answers ACLNN_ERR_INNER for a pointer that is not an executor.
    fault(
        ACLNN_ERR_INNER,
        format!("{what}: {handle:?} is not a live executor (launched already, or destroyed)"),
    )
}

fn null_executor(what: &str) -> Fault {
    fault(ACLNN_ERR_INNER_NULLPTR, format!("{what}: executor is NULL"))
}

/// Phase two's view of an executor: a non-repeatable one is consumed, a repeatable one stays.
pub(crate) fn launch_of(op: &str, handle: *mut aclOpExecutor) -> Result<Launch, Fault> {
    with_executors(|m| {
        let key = handle as usize;
        let exec = m.get(&key).ok_or_else(|| not_live(op, handle))?;
        if exec.op != op {
            return Err(fault(
                ACLNN_ERR_PARAM_INVALID,
                format!(
                    "{op}: the executor was built by {}GetWorkspaceSize",
                    exec.op
                ),
            ));
        }
        check_live(op, &exec.objects)?;
        let launch = Launch {
            workspace: exec.workspace,
            addrs: super::objects::tensor_addrs(&exec.objects),
            bytes: exec.bytes,
            kernel: exec.kernel.clone(),
            bindings: exec.bindings.clone(),
            changes: exec.changes.clone(),
            version: exec.changes.load(Ordering::SeqCst),
        };
        if !exec.repeatable {
            m.remove(&key);
        }
        Ok(launch)
    })
}

/// `aclSetAclOpExecutorRepeatable`.
pub(crate) fn set_repeatable(handle: *mut aclOpExecutor) -> Result<(), Fault> {
    const WHAT: &str = "aclSetAclOpExecutorRepeatable";
    if handle.is_null() {
        return Err(null_executor(WHAT));
    }
    with_executors(|m| {
        let exec = m
            .get_mut(&(handle as usize))
            .ok_or_else(|| not_live(WHAT, handle))?;
        if !exec.rebindable {
            // CANN refuses some operators (those with internal copies); the emulation models
            // repeatable executors only for operators that declare their tensor slots.
            return Err(fault(
                ACLNN_ERR_PARAM_INVALID,
                format!(
                    "{WHAT}: the emulated {} does not support repeatable executors",
                    exec.op
                ),
            ));
        }
        exec.repeatable = true;
        Ok(())
    })
}

/// `aclSetInputTensorAddr` / `aclSetOutputTensorAddr`: rebinds `slot` of a repeatable
/// executor to `addr`, and records `addr` in `tensor` as CANN does.
pub(crate) unsafe fn set_tensor_addr(
    what: &str,
    handle: *mut aclOpExecutor,
    slot: Slot,
    tensor: *mut aclTensor,
    addr: *mut c_void,
) -> Result<(), Fault> {
    if handle.is_null() || tensor.is_null() {
        return Err(fault(
            ACLNN_ERR_INNER_NULLPTR,
            format!("{what}: executor or tensor is NULL"),
        ));
    }
    // CANN leaves a misaligned address undefined; the emulation rejects it.
    if !(addr as u64).is_multiple_of(32) {
        return Err(fault(
            ACLNN_ERR_PARAM_INVALID,
            format!("{what}: address {addr:?} is not 32-byte aligned"),
        ));
    }
    with_executors(|m| {
        let exec = m
            .get_mut(&(handle as usize))
            .ok_or_else(|| not_live(what, handle))?;
        if !exec.repeatable {
            // Assumption: rebinding a one-shot executor is refused (CANN documents it only
            // for executors made repeatable).
            return Err(fault(
                ACLNN_ERR_PARAM_INVALID,
                format!("{what}: the {} executor is not repeatable", exec.op),
            ));
        }
        exec.changes.fetch_add(1, Ordering::SeqCst);
        let bindings = Arc::make_mut(&mut exec.bindings);
        let (list, index) = match slot {
            Slot::Input(i) => (&mut bindings.inputs, i),
            Slot::Output(i) => (&mut bindings.outputs, i),
        };
        let count = list.len();
        let entry = list.get_mut(index).ok_or_else(|| {
            fault(
                ACLNN_ERR_PARAM_INVALID,
                format!(
                    "{what}: index {index} is out of range: {} has {count}",
                    exec.op
                ),
            )
        })?;
        *entry = addr as u64;
        Ok(())
    })?;
    read(what, "aclTensor", tensor as usize, |o| match o {
        Object::Tensor(t) => {
            t.addr = addr as u64;
            Some(())
        }
        _ => None,
    })
}

/// `aclDestroyAclOpExecutor`: drops a live executor (a repeatable one, or one that phase two
/// never consumed, as CANN's nnopbase also accepts).
pub(crate) fn destroy_executor(handle: *mut aclOpExecutor) -> Result<(), Fault> {
    const WHAT: &str = "aclDestroyAclOpExecutor";
    if handle.is_null() {
        return Err(null_executor(WHAT));
    }
    with_executors(|m| m.remove(&(handle as usize)))
        .map(|exec| {
            exec.changes.fetch_add(1, Ordering::SeqCst);
        })
        .ok_or_else(|| not_live(WHAT, handle))
}

#[allow(clippy::too_many_arguments)] // mirrors aclCreateTensor
pub(crate) unsafe fn create_tensor(
    dims: *const i64,
    ndims: u64,
    dtype: i32,
    strides: *const i64,
    offset: i64,
    storage: *const i64,
    nstorage: u64,
    data: *mut c_void,
) -> Result<TensorDesc, Fault> {
    let bad = |m: String| fault(ACLNN_ERR_PARAM_INVALID, format!("aclCreateTensor: {m}"));
    let read = |p: *const i64, n: u64, what: &str| -> Result<Vec<i64>, Fault> {
        if n == 0 {
            Ok(Vec::new())
        } else if p.is_null() {
            Err(fault(
                ACLNN_ERR_PARAM_NULLPTR,
                format!("aclCreateTensor: {what} is NULL with {n} dims"),
            ))
        } else {
            Ok(std::slice::from_raw_parts(p, n as usize).to_vec())
        }
    };
    let dtype =
        DataType::from_acl(dtype).ok_or_else(|| bad(format!("unsupported aclDataType {dtype}")))?;
    let shape = read(dims, ndims, "viewDims")?;
    if shape.len() > MAX_RANK {
        return Err(bad(format!("rank {} exceeds {MAX_RANK}", shape.len())));
    }
    if let Some(d) = shape.iter().find(|&&d| d < 0) {
        return Err(bad(format!("negative dimension {d} in {shape:?}")));
    }
    let shape: Vec<usize> = shape.into_iter().map(|d| d as usize).collect();
    let strides: Vec<usize> = if strides.is_null() {
        contiguous_strides(&shape)
    } else {
        let s = std::slice::from_raw_parts(strides, shape.len()).to_vec();
        if let Some(n) = s.iter().find(|&&s| s < 0) {
            return Err(bad(format!(
                "negative stride {n} in {s:?}: aclnn views do not support negative strides"
            )));
        }
        s.into_iter().map(|s| s as usize).collect()
    };
    if offset < 0 {
        return Err(bad(format!("negative offset {offset}")));
    }
    let storage = read(storage, nstorage, "storageDims")?;
    let storage_elems = storage.iter().map(|&d| d.max(0) as usize).product();
    let desc = TensorDesc {
        shape,
        strides,
        offset: offset as usize,
        dtype,
        addr: data as u64,
        slot: None,
    };
    if desc.numel() > 0 && desc.extent() > storage_elems {
        return Err(bad(format!(
            "view (shape {:?}, strides {:?}, offset {}) reaches element {} but storage holds {storage_elems}",
            desc.shape,
            desc.strides,
            desc.offset,
            desc.extent() - 1
        )));
    }
    if !desc.addr.is_multiple_of(32) {
        return Err(bad(format!(
            "tensor data address 0x{:x} is not 32-byte aligned",
            desc.addr
        )));
    }
    Ok(desc)
}

pub(crate) unsafe fn create_scalar(value: *mut c_void, dtype: i32) -> Result<ScalarValue, Fault> {
    if value.is_null() {
        return Err(fault(
            ACLNN_ERR_PARAM_NULLPTR,
            "aclCreateScalar: value is NULL",
        ));
    }
    let v = value as *const u8;
    Ok(match DataType::from_acl(dtype) {
        Some(DataType::F64) => ScalarValue::Float(*(v as *const f64)),
        Some(DataType::F32) => ScalarValue::Float(*(v as *const f32) as f64),
        Some(DataType::F16) => ScalarValue::Float(half::f16::from_bits(*(v as *const u16)).into()),
        Some(DataType::BF16) => {
            ScalarValue::Float(half::bf16::from_bits(*(v as *const u16)).into())
        }
        Some(DataType::I64) | Some(DataType::U64) => ScalarValue::Int(*(v as *const i64)),
        Some(DataType::I32) => ScalarValue::Int(*(v as *const i32) as i64),
        Some(DataType::I16) => ScalarValue::Int(*(v as *const i16) as i64),
        Some(DataType::I8) => ScalarValue::Int(*(v as *const i8) as i64),
        Some(DataType::U32) => ScalarValue::Int(*(v as *const u32) as i64),
        Some(DataType::U16) => ScalarValue::Int(*(v as *const u16) as i64),
        Some(DataType::U8) | Some(DataType::Bool) => ScalarValue::Int(*v as i64),
        None => {
            return Err(fault(
                ACLNN_ERR_PARAM_INVALID,
                format!("aclCreateScalar: unsupported aclDataType {dtype}"),
            ))
        }
    })
}

/// The descriptor passed to an operator as argument `name` (recorded for phase two's check).
pub(crate) unsafe fn tensor_arg(
    op: &str,
    name: &str,
    p: *const aclTensor,
) -> Result<TensorDesc, Fault> {
    if p.is_null() {
        return Err(fault(
            ACLNN_ERR_PARAM_NULLPTR,
            format!("{op}: {name} is NULL"),
        ));
    }
    let desc = read(
        &format!("{op}: {name}"),
        "aclTensor",
        p as usize,
        |o| match o {
            Object::Tensor(t) => Some(t.clone()),
            _ => None,
        },
    )?;
    record(p as usize, "aclTensor", name);
    if desc.addr == 0 && desc.numel() > 0 {
        return Err(fault(
            ACLNN_ERR_PARAM_NULLPTR,
            format!("{op}: {name} has no device address"),
        ));
    }
    super::counters::note(&desc);
    Ok(desc)
}

pub(crate) unsafe fn scalar_arg(
    op: &str,
    name: &str,
    p: *const aclScalar,
) -> Result<ScalarValue, Fault> {
    if p.is_null() {
        return Err(fault(
            ACLNN_ERR_PARAM_NULLPTR,
            format!("{op}: {name} is NULL"),
        ));
    }
    let v = read(
        &format!("{op}: {name}"),
        "aclScalar",
        p as usize,
        |o| match o {
            Object::Scalar(v) => Some(*v),
            _ => None,
        },
    )?;
    record(p as usize, "aclScalar", name);
    Ok(v)
}

pub(crate) unsafe fn int_array_arg(
    op: &str,
    name: &str,
    p: *const aclIntArray,
) -> Result<Vec<i64>, Fault> {
    if p.is_null() {
        return Err(fault(
            ACLNN_ERR_PARAM_NULLPTR,
            format!("{op}: {name} is NULL"),
        ));
    }
    let v = read(
        &format!("{op}: {name}"),
        "aclIntArray",
        p as usize,
        |o| match o {
            Object::IntArray(v) => Some(v.clone()),
            _ => None,
        },
    )?;
    record(p as usize, "aclIntArray", name);
    Ok(v)
}

pub(crate) unsafe fn bool_array_arg(
    op: &str,
    name: &str,
    p: *const aclBoolArray,
) -> Result<Vec<bool>, Fault> {
    if p.is_null() {
        return Err(fault(
            ACLNN_ERR_PARAM_NULLPTR,
            format!("{op}: {name} is NULL"),
        ));
    }
    let v = read(
        &format!("{op}: {name}"),
        "aclBoolArray",
        p as usize,
        |o| match o {
            Object::BoolArray(v) => Some(v.clone()),
            _ => None,
        },
    )?;
    record(p as usize, "aclBoolArray", name);
    Ok(v)
}

pub(crate) unsafe fn tensor_list_arg(
    op: &str,
    name: &str,
    p: *const aclTensorList,
) -> Result<Vec<TensorDesc>, Fault> {
    if p.is_null() {
        return Err(fault(
            ACLNN_ERR_PARAM_NULLPTR,
            format!("{op}: {name} is NULL"),
        ));
    }
    let members = read(
        &format!("{op}: {name}"),
        "aclTensorList",
        p as usize,
        |o| match o {
            Object::TensorList(v) => Some(v.clone()),
            _ => None,
        },
    )?;
    record(p as usize, "aclTensorList", name);
    members
        .iter()
        .enumerate()
        .map(|(i, &t)| tensor_arg(op, &format!("{name}[{i}]"), t as *const aclTensor))
        .collect()
}
