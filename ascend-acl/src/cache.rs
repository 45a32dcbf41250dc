//! Host-side caches of the operator path, per thread and bounded:
//!
//! - **Descriptors**: `aclTensor`s of identical views (table, device address, shape, strides,
//!   offset, dtype, storage size) are created once and lent to one caller at a time
//!   ([`TensorDesc::cached`]). A descriptor holds nothing but the address and the view, so when
//!   memory is freed and the address handed out again, a view with the same key is described
//!   exactly by the cached descriptor.
//! - **Executors**: the hot tiny operators (arithmetic, matmul, ReduceSum) go through
//!   [`aclnn_cached!`](crate::aclnn_cached), which keys the operator by the structure of its
//!   arguments (shapes, strides, offsets, dtypes, storage sizes, which arguments share a
//!   buffer, scalar and attribute values; not addresses). On a miss it runs phase one on
//!   descriptors of its own and makes the executor repeatable
//!   (`aclSetAclOpExecutorRepeatable`); on a hit it only rebinds the addresses that changed
//!   (`aclSetInputTensorAddr` / `aclSetOutputTensorAddr`) and launches phase two again. Without
//!   those functions in the table, or for an operator that refuses to be repeatable, it runs
//!   phase one every time. While the launcher's stream captures a graph the executor cache is
//!   bypassed (one-shot executors only): a graph's recorded launch would otherwise refer to an
//!   executor the cache later rebinds or evicts while the graph lives.
//!
//! Evicted entries are destroyed (`aclDestroyAclOpExecutor`, then their descriptors); so are
//! all of a thread's entries when the thread exits or calls [`clear`]. Both caches are
//! thread-local, so nothing is shared between threads and no lock is taken.
//!
//! Assumptions about CANN (acl-abi.md 6.3 states rules 3 and 6; the rest is not documented):
//! - an `aclTensor` may be passed to another phase one once the previous phase two that used it
//!   has returned (it may be destroyed at that point, rule 3), while the kernel still runs;
//! - phase one may keep referring to the descriptors, scalars and arrays it was given for as
//!   long as a repeatable executor lives, so an executor entry owns its own and destroys them
//!   after the executor;
//! - a launch captures the addresses bound at that moment, so rebinding after phase two
//!   returned does not reach work already queued, and a repeatable executor may be destroyed
//!   while a launch of it is still queued (as a one-shot one is by its own phase two);
//! - the `index` of `aclSetInputTensorAddr` / `aclSetOutputTensorAddr` counts the operator's
//!   input (output) `aclTensor` arguments in header order (the docs give only its range), so
//!   only operators whose tensors are plain `aclTensor` arguments go through this cache;
//! - the executor belongs to the device context current at phase one, so the key includes the
//!   context (a device reset starts a new one, whose calls never meet the old executors);
//! - no operator used here rewrites its descriptors, except Nonzero's output, which is never
//!   taken from the cache (`AscendTensor::desc_owned`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::hash::{BuildHasherDefault, Hasher};
use std::rc::Rc;

use super::dtype::DataType;
use super::error::AclResult;
use super::handles::{HostScalar, IntArrayDesc, OpLauncher, ScalarDesc, TensorDesc};
use super::table::{AclApi, Phase2Fn};
use super::types::{aclIntArray, aclOpExecutor, aclScalar, aclTensor, aclnnStatus};

/// Descriptors each thread keeps.
pub const DESCRIPTOR_CAPACITY: usize = 256;
/// Repeatable executors each thread keeps.
pub const EXECUTOR_CAPACITY: usize = 64;

/// A strided view of a device allocation, as `aclCreateTensor` takes it.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    /// Size of each dimension.
    pub shape: &'a [usize],
    /// Element strides.
    pub strides: &'a [usize],
    /// Element offset of the first element from `base`.
    pub offset: usize,
    /// Element type.
    pub dtype: DataType,
    /// Elements the allocation holds.
    pub storage_elems: usize,
    /// Device address of the allocation.
    pub base: *mut c_void,
    /// The device context holding the allocation ([`OpLauncher::context_id`]), or 0 when
    /// unknown: an operator launched on another context refuses it.
    pub owner: u64,
}

impl View<'_> {
    /// A new descriptor of the view, owned by the caller.
    ///
    /// # Safety
    /// As for [`TensorDesc::new`].
    pub unsafe fn describe<'a>(&self, api: &'a AclApi) -> AclResult<TensorDesc<'a>> {
        unsafe {
            TensorDesc::new(
                api,
                self.shape,
                self.strides,
                self.offset,
                self.dtype,
                self.storage_elems,
                self.base,
            )
        }
        .map(|d| d.owned_by(self.owner))
    }

    fn key_words(&self, words: &mut Vec<u64>) {
        words.extend([
            self.dtype.acl() as u64,
            self.storage_elems as u64,
            self.offset as u64,
            self.shape.len() as u64,
        ]);
        words.extend(self.shape.iter().map(|&d| d as u64));
        words.extend(self.strides.iter().map(|&s| s as u64));
    }
}

/// A view whose slices the cache owns.
#[derive(Debug)]
struct OwnedView {
    shape: Vec<usize>,
    strides: Vec<usize>,
    offset: usize,
    dtype: DataType,
    storage_elems: usize,
    base: *mut c_void,
}

impl OwnedView {
    fn of(v: &View<'_>) -> Self {
        Self {
            shape: v.shape.to_vec(),
            strides: v.strides.to_vec(),
            offset: v.offset,
            dtype: v.dtype,
            storage_elems: v.storage_elems,
            base: v.base,
        }
    }

    fn view(&self) -> View<'_> {
        View {
            shape: &self.shape,
            strides: &self.strides,
            offset: self.offset,
            dtype: self.dtype,
            storage_elems: self.storage_elems,
            base: self.base,
            owner: 0,
        }
    }
}

/// A cached descriptor; destroyed when the cache has dropped it and no caller holds it.
pub struct Lent {
    api: &'static AclApi,
    ptr: *mut aclTensor,
    view: OwnedView,
}

impl Lent {
    pub(super) fn ptr(&self) -> *mut aclTensor {
        self.ptr
    }

    pub(super) fn view(&self) -> View<'_> {
        self.view.view()
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        // SAFETY: created by aclCreateTensor for the cache; nobody else destroys it.
        unsafe { (self.api.core.aclDestroyTensor)(self.ptr) };
    }
}

/// Counters of the calling thread's caches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Descriptors cached now (at most [`DESCRIPTOR_CAPACITY`]).
    pub descriptors: usize,
    /// Descriptor requests served from the cache.
    pub descriptor_hits: u64,
    /// Descriptor requests that created one.
    pub descriptor_misses: u64,
    /// Repeatable executors cached now (at most [`EXECUTOR_CAPACITY`]).
    pub executors: usize,
    /// Operator calls that relaunched a cached executor.
    pub executor_hits: u64,
    /// Operator calls that ran phase one.
    pub executor_misses: u64,
    /// Entries of either cache destroyed to make room.
    pub evictions: u64,
}

/// FxHash-style mixing of key words; keys are compared in full after the hash matches.
fn hash_words(seed: u64, words: &[u64]) -> u64 {
    words.iter().fold(seed, |h, &w| {
        (h.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95)
    })
}

/// The map's keys are hashes already.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | b as u64;
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

struct Entry<V> {
    words: Box<[u64]>,
    value: V,
    used: u64,
}

/// A bounded map from key words to values, evicting the least recently used entry.
struct Bounded<V> {
    capacity: usize,
    map: HashMap<u64, Entry<V>, BuildHasherDefault<PassThrough>>,
    clock: u64,
    hits: u64,
    misses: u64,
    evictions: u64,
}

impl<V> Bounded<V> {
    fn new(capacity: usize) -> Self {
        Self {
            capacity,
            map: HashMap::default(),
            clock: 0,
            hits: 0,
            misses: 0,
            evictions: 0,
        }
    }

    /// The entry of `words` (hashed as `hash`), counting the hit or miss.
    fn get(&mut self, hash: u64, words: &[u64]) -> Option<&mut V> {
        self.clock += 1;
        match self.map.get_mut(&hash) {
            Some(e) if *e.words == *words => {
                e.used = self.clock;
                self.hits += 1;
                Some(&mut e.value)
            }
            _ => {
                self.misses += 1;
                None
            }
        }
    }

    /// Inserts, replacing an entry of the same hash or else evicting the least recently used
    /// one when full. The displaced value is returned, to be dropped by the caller.
    fn insert(&mut self, hash: u64, words: &[u64], value: V) -> Option<V> {
        let mut displaced = None;
        if !self.map.contains_key(&hash) && self.map.len() >= self.capacity {
            let oldest = self.map.iter().min_by_key(|(_, e)| e.used).map(|(&h, _)| h);
            if let Some(h) = oldest {
                displaced = self.map.remove(&h).map(|e| e.value);
                self.evictions += 1;
            }
        }
        let entry = Entry {
            words: words.into(),
            value,
            used: self.clock,
        };
        self.map.insert(hash, entry).map(|e| e.value).or(displaced)
    }

    fn remove(&mut self, hash: u64) -> Option<V> {
        self.map.remove(&hash).map(|e| e.value)
    }

    fn clear(&mut self) -> Vec<V> {
        self.map.drain().map(|(_, e)| e.value).collect()
    }
}

/// A cached repeatable executor and everything phase one was given.
struct CachedExecutor {
    op: &'static str,
    api: &'static AclApi,
    executor: *mut aclOpExecutor,
    phase2: Phase2Fn,
    workspace: u64,
    /// Addresses bound now, per input and output slot.
    inputs: Vec<u64>,
    outputs: Vec<u64>,
    /// Declared after `executor` is destroyed (see `Drop`), these outlive it.
    parts: Parts,
}

impl Drop for CachedExecutor {
    fn drop(&mut self) {
        // SAFETY: a repeatable executor owned by this entry; the parts are dropped after it.
        unsafe { (self.api.core.aclDestroyAclOpExecutor)(self.executor) };
    }
}

/// What phase one was given: descriptors of the input and output tensors (in order), scalars
/// and arrays. Dropped after the executor that may refer to them.
#[derive(Default)]
pub struct Parts {
    inputs: Vec<TensorDesc<'static>>,
    outputs: Vec<TensorDesc<'static>>,
    scalars: Vec<ScalarDesc<'static>>,
    arrays: Vec<IntArrayDesc<'static>>,
}

/// The words of an operator's key and the addresses of its tensor arguments.
#[derive(Default)]
pub struct KeyBuilder {
    words: Vec<u64>,
    inputs: Vec<u64>,
    outputs: Vec<u64>,
    /// Base addresses of the tensor arguments so far, for the aliasing pattern.
    bases: Vec<u64>,
}

impl KeyBuilder {
    fn reset(&mut self, op: &str, api: &AclApi, context: u64) {
        self.words.clear();
        self.inputs.clear();
        self.outputs.clear();
        self.bases.clear();
        // The op's name enters as a hash; entries compare the name itself too.
        let name = op.bytes().fold(0u64, |h, b| hash_words(h, &[b as u64]));
        self.words
            .extend([name, api as *const AclApi as u64, context]);
    }

    fn tensor(&mut self, tag: u64, view: &View<'_>) {
        let base = view.base as u64;
        // Which earlier argument shares the buffer: phase one may plan differently for
        // aliased arguments, so the pattern is part of the key.
        let alias = self
            .bases
            .iter()
            .position(|&b| b == base)
            .map_or(u64::MAX, |i| i as u64);
        self.bases.push(base);
        self.words.extend([tag, alias]);
        view.key_words(&mut self.words);
    }

    /// Adds a plain value (scalar bits, attribute) to the key.
    pub fn value(&mut self, tag: u64, bits: u64) {
        self.words.extend([tag, bits]);
    }
}

/// One argument of a cached operator call.
pub trait CachedArg {
    /// The C type of the parameter.
    type Raw;
    /// Adds the argument's structure (not its address) to the key.
    fn key(&self, k: &mut KeyBuilder);
    /// Makes the C argument for phase one; objects it creates go to `parts`.
    ///
    /// # Safety
    /// A tensor argument's view must be valid as [`TensorDesc::new`] requires.
    unsafe fn raw(&self, api: &'static AclApi, parts: &mut Parts) -> AclResult<Self::Raw>;
    /// The device context holding a tensor argument (0 for anything else, or unknown).
    fn owner(&self) -> u64 {
        0
    }
}

/// An input tensor of a cached operator call.
#[derive(Debug, Clone, Copy)]
pub struct In<'a>(pub View<'a>);

/// An output tensor of a cached operator call.
#[derive(Debug, Clone, Copy)]
pub struct Out<'a>(pub View<'a>);

/// An `aclIntArray` argument of a cached operator call.
#[derive(Debug, Clone, Copy)]
pub struct Ints<'a>(pub &'a [i64]);

impl CachedArg for In<'_> {
    type Raw = *const aclTensor;
    fn owner(&self) -> u64 {
        self.0.owner
    }
    fn key(&self, k: &mut KeyBuilder) {
        k.tensor(1, &self.0);
        k.inputs.push(self.0.base as u64);
    }
    unsafe fn raw(&self, api: &'static AclApi, parts: &mut Parts) -> AclResult<Self::Raw> {
        let d = unsafe { self.0.describe(api)? };
        let p = d.as_ptr();
        parts.inputs.push(d);
        Ok(p)
    }
}

impl CachedArg for Out<'_> {
    type Raw = *mut aclTensor;
    fn owner(&self) -> u64 {
        self.0.owner
    }
    fn key(&self, k: &mut KeyBuilder) {
        k.tensor(2, &self.0);
        k.outputs.push(self.0.base as u64);
    }
    unsafe fn raw(&self, api: &'static AclApi, parts: &mut Parts) -> AclResult<Self::Raw> {
        let d = unsafe { self.0.describe(api)? };
        let p = d.as_ptr();
        parts.outputs.push(d);
        Ok(p)
    }
}

impl CachedArg for HostScalar {
    type Raw = *const aclScalar;
    fn key(&self, k: &mut KeyBuilder) {
        match *self {
            HostScalar::Float(v) => k.value(3, v.to_bits()),
            HostScalar::Int(v) => k.value(4, v as u64),
            HostScalar::Bool(v) => k.value(5, v as u64),
        }
    }
    unsafe fn raw(&self, api: &'static AclApi, parts: &mut Parts) -> AclResult<Self::Raw> {
        let s = ScalarDesc::new(api, *self)?;
        let p = s.as_ptr();
        parts.scalars.push(s);
        Ok(p)
    }
}

impl CachedArg for Ints<'_> {
    type Raw = *const aclIntArray;
    fn key(&self, k: &mut KeyBuilder) {
        k.value(6, self.0.len() as u64);
        k.words.extend(self.0.iter().map(|&v| v as u64));
    }
    unsafe fn raw(&self, api: &'static AclApi, parts: &mut Parts) -> AclResult<Self::Raw> {
        let a = IntArrayDesc::new(api, self.0)?;
        let p = a.as_ptr();
        parts.arrays.push(a);
        Ok(p)
    }
}

macro_rules! plain_args {
    ($($t:ty => $tag:expr),* $(,)?) => {$(
        impl CachedArg for $t {
            type Raw = $t;
            fn key(&self, k: &mut KeyBuilder) {
                k.value($tag, *self as u64);
            }
            unsafe fn raw(&self, _: &'static AclApi, _: &mut Parts) -> AclResult<$t> {
                Ok(*self)
            }
        }
    )*};
}
plain_args!(i64 => 7, i32 => 8, i8 => 9, bool => 10);

/// The arguments of a cached operator call, in header order, and its phase one.
pub trait CachedArgs {
    /// Phase one of the operator taking these arguments.
    type Phase1: Copy;
    /// Adds every argument to the key.
    fn key(&self, k: &mut KeyBuilder);
    /// The device context of each argument (see [`CachedArg::owner`]).
    fn owners(&self) -> Vec<u64>;
    /// Runs phase one; the objects it is given are left in `parts`.
    ///
    /// # Safety
    /// `phase1` must be the operator's phase one; tensor views must be valid as
    /// [`TensorDesc::new`] requires.
    unsafe fn phase1(
        &self,
        phase1: Self::Phase1,
        api: &'static AclApi,
        parts: &mut Parts,
        workspace: &mut u64,
        executor: &mut *mut aclOpExecutor,
    ) -> AclResult<aclnnStatus>;
}

macro_rules! cached_args {
    ($($t:ident $i:tt),+) => {
        impl<$($t: CachedArg),+> CachedArgs for ($($t,)+) {
            type Phase1 = unsafe extern "C" fn($(<$t as CachedArg>::Raw,)+ *mut u64, *mut *mut aclOpExecutor) -> aclnnStatus;
            fn key(&self, k: &mut KeyBuilder) {
                $(self.$i.key(k);)+
            }
            fn owners(&self) -> Vec<u64> {
                vec![$(self.$i.owner()),+]
            }
            unsafe fn phase1(
                &self,
                phase1: Self::Phase1,
                api: &'static AclApi,
                parts: &mut Parts,
                workspace: &mut u64,
                executor: &mut *mut aclOpExecutor,
            ) -> AclResult<aclnnStatus> {
                // Arguments are evaluated in order, so tensors land in `parts` in slot order.
                unsafe { Ok(phase1($(self.$i.raw(api, parts)?,)+ workspace, executor)) }
            }
        }
    };
}
cached_args!(A 0, B 1, C 2);
cached_args!(A 0, B 1, C 2, D 3);
cached_args!(A 0, B 1, C 2, D 3, E 4);

struct Caches {
    descriptors: Bounded<Rc<Lent>>,
    executors: Bounded<CachedExecutor>,
    /// Operators whose executors the runtime refused to make repeatable.
    refused: Vec<&'static str>,
    key: KeyBuilder,
    desc_key: Vec<u64>,
}

thread_local! {
    static CACHES: RefCell<Caches> = RefCell::new(Caches {
        descriptors: Bounded::new(DESCRIPTOR_CAPACITY),
        executors: Bounded::new(EXECUTOR_CAPACITY),
        refused: Vec::new(),
        key: KeyBuilder::default(),
        desc_key: Vec::new(),
    });
}

/// Lends the cached descriptor of `view`, creating it on a miss; a descriptor already lent
/// (the same view twice in one call) is not shared: the caller gets one of its own.
pub(super) fn lend_descriptor(
    api: &'static AclApi,
    view: &View<'_>,
) -> AclResult<TensorDesc<'static>> {
    CACHES.with(|c| {
        let mut c = c.borrow_mut();
        let c = &mut *c;
        c.desc_key.clear();
        c.desc_key
            .extend([api as *const AclApi as u64, view.base as u64]);
        view.key_words(&mut c.desc_key);
        let hash = hash_words(0, &c.desc_key);
        if let Some(lent) = c.descriptors.get(hash, &c.desc_key) {
            return if Rc::strong_count(lent) == 1 {
                Ok(TensorDesc::lent(api, lent.clone()).owned_by(view.owner))
            } else {
                // SAFETY: the caller's contract (`TensorDesc::cached`).
                unsafe { view.describe(api) }
            };
        }
        // SAFETY: as above.
        let desc = unsafe { view.describe(api)? };
        let lent = Rc::new(Lent {
            api,
            ptr: desc.as_ptr(),
            view: OwnedView::of(view),
        });
        // The cache destroys it from now on.
        std::mem::forget(desc);
        let displaced = c.descriptors.insert(hash, &c.desc_key, lent.clone());
        drop(displaced);
        Ok(TensorDesc::lent(api, lent).owned_by(view.owner))
    })
}

/// Calls an aclnn operator through the executor cache; the arguments are wrapped in
/// [`In`], [`Out`], [`Ints`] or are [`HostScalar`]s and plain values, in header order.
///
/// `aclnn_cached!(ctx, aclnnAdd(In(a.view()), In(b.view()), HostScalar::Int(1), Out(out.view())))`
#[macro_export]
macro_rules! aclnn_cached {
    ($launcher:expr, $op:ident($($arg:expr),* $(,)?)) => {{
        let launcher = $launcher;
        let args = ($($arg,)*);
        let api = $crate::handles::OpLauncher::api(launcher);
        const PHASE1: &str = concat!(stringify!($op), "GetWorkspaceSize");
        // SAFETY: the table types each operator with its declared C signature.
        match unsafe { api.ops.$op.resolve(api.source(), stringify!($op), PHASE1) } {
            Err(e) => Err(e),
            // SAFETY: the arguments describe live tensors of the launcher's device.
            Ok((phase1, phase2)) => unsafe {
                $crate::cache::run_cached(launcher, stringify!($op), PHASE1, phase1, phase2, args)
            },
        }
    }};
}

/// The body of [`aclnn_cached!`](crate::aclnn_cached).
///
/// # Safety
/// `phase1` and `phase2` must be the two phases of `op`; tensor views must be valid as
/// [`TensorDesc::new`] requires, for the launcher's device.
pub unsafe fn run_cached<L: OpLauncher + ?Sized, T: CachedArgs>(
    launcher: &L,
    op: &'static str,
    phase1_name: &'static str,
    phase1: T::Phase1,
    phase2: Phase2Fn,
    args: T,
) -> AclResult<()> {
    let api = launcher.api();
    super::handles::check_owners(launcher, op, &args.owners())?;
    if !launcher.issues_work()? {
        return Ok(());
    }
    CACHES.with(|c| {
        let mut c = c.borrow_mut();
        let c = &mut *c;
        c.key.reset(op, api, launcher.context_id());
        args.key(&mut c.key);
        let hash = hash_words(0, &c.key.words);
        // A graph being captured records one-shot executors only: nothing the cache holds
        // (and rebinds or evicts later) is recorded.
        let capturing = launcher.capturing();
        let cached = if capturing {
            // Phase one runs: counted as a miss, as the counter's doc says.
            c.executors.misses += 1;
            None
        } else {
            c.executors.get(hash, &c.key.words)
        };
        if let Some(entry) = cached {
            if entry.op == op {
                match unsafe { relaunch(launcher, entry, &c.key) } {
                    Ok(()) => return Ok(()),
                    Err(e) => {
                        // Its state is unknown now: drop it.
                        drop(c.executors.remove(hash));
                        return Err(e);
                    }
                }
            }
        }
        let repeatable = match (
            api.optional.aclSetAclOpExecutorRepeatable,
            api.optional.aclSetInputTensorAddr,
            api.optional.aclSetOutputTensorAddr,
        ) {
            (Some(f), Some(_), Some(_)) if !capturing && !c.refused.contains(&op) => Some(f),
            _ => None,
        };
        let mut parts = Parts::default();
        let (mut workspace, mut executor) = (0u64, std::ptr::null_mut());
        let status =
            unsafe { args.phase1(phase1, api, &mut parts, &mut workspace, &mut executor)? };
        api.check(status, phase1_name)?;
        let made_repeatable = repeatable.is_some_and(|f| {
            // SAFETY: a fresh executor from phase one.
            let ok = unsafe { f(executor) } == 0;
            if !ok {
                c.refused.push(op);
            }
            ok
        });
        if !made_repeatable {
            // SAFETY: a one-shot executor from phase one of `op`, launched once; `parts`
            // lives until phase two has returned.
            let launched = unsafe { launcher.launch(op, phase2, executor, workspace) };
            drop(parts);
            return launched;
        }
        let entry = CachedExecutor {
            op,
            api,
            executor,
            phase2,
            workspace,
            inputs: c.key.inputs.clone(),
            outputs: c.key.outputs.clone(),
            parts,
        };
        // SAFETY: a repeatable executor of `op`, kept by `entry`.
        unsafe { launcher.launch_repeatable(op, phase2, executor, workspace)? };
        drop(c.executors.insert(hash, &c.key.words, entry));
        Ok(())
    })
}

/// Rebinds the addresses that changed since the entry's last launch, then launches it.
unsafe fn relaunch<L: OpLauncher + ?Sized>(
    launcher: &L,
    entry: &mut CachedExecutor,
    key: &KeyBuilder,
) -> AclResult<()> {
    let api = entry.api;
    let (Some(set_input), Some(set_output)) = (
        api.optional.aclSetInputTensorAddr,
        api.optional.aclSetOutputTensorAddr,
    ) else {
        unreachable!("entries are made only with the rebinding functions present");
    };
    for (i, &addr) in key.inputs.iter().enumerate() {
        if entry.inputs[i] != addr {
            // SAFETY: slot `i` of the entry's own repeatable executor and descriptor.
            let status =
                unsafe { set_input(entry.executor, i, entry.parts.inputs[i].as_ptr(), addr as _) };
            api.check(status, "aclSetInputTensorAddr")?;
            entry.inputs[i] = addr;
        }
    }
    for (i, &addr) in key.outputs.iter().enumerate() {
        if entry.outputs[i] != addr {
            // SAFETY: as above.
            let status = unsafe {
                set_output(
                    entry.executor,
                    i,
                    entry.parts.outputs[i].as_ptr(),
                    addr as _,
                )
            };
            api.check(status, "aclSetOutputTensorAddr")?;
            entry.outputs[i] = addr;
        }
    }
    // SAFETY: the entry's repeatable executor of `entry.op`.
    unsafe { launcher.launch_repeatable(entry.op, entry.phase2, entry.executor, entry.workspace) }
}

/// The calling thread's cache counters.
pub fn stats() -> CacheStats {
    CACHES.with(|c| {
        let c = c.borrow();
        CacheStats {
            descriptors: c.descriptors.map.len(),
            descriptor_hits: c.descriptors.hits,
            descriptor_misses: c.descriptors.misses,
            executors: c.executors.map.len(),
            executor_hits: c.executors.hits,
            executor_misses: c.executors.misses,
            evictions: c.descriptors.evictions + c.executors.evictions,
        }
    })
}

/// Destroys the calling thread's cached executors and descriptors (descriptors still lent
/// are destroyed when their holder drops them).
pub fn clear() {
    let (executors, descriptors) = CACHES.with(|c| {
        let mut c = c.borrow_mut();
        c.refused.clear();
        (c.executors.clear(), c.descriptors.clear())
    });
    drop(executors);
    drop(descriptors);
}
