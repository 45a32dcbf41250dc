//! The per-device context: the device's stream, its caching allocators (tensors and operator
//! workspaces), host/device transfers (uploads through a page-locked staging ring) and the
//! launch of aclnn operators and fused kernels.
//!
//! A device fault is sticky (the device context stops: every later synchronisation, read and
//! launch reports it) until [`reset_device`], which replaces the context: tensors of the old one
//! then fail clearly when used, and new work runs on the new one.
//!
//! On burn-fusion's runner threads a fault found while issuing work does not fail the op: it is
//! recorded on the context and reported by the next synchronisation or read (see
//! `defer_device_faults`).
//!
//! A process serving others resets a faulted device itself ([`set_reset_on_fault`]): the first
//! read or synchronisation that finds the fault resets the device ([`DeviceContext::recover`]).

use std::any::Any;
use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::ThreadId;

use burn_ascend_kernels::{KernelApi, LaunchError};

use super::allocator::{is_out_of_memory, Block, CachingAllocator, MemoryStats};
use super::device::AscendDevice;
use super::graph::GraphPool;
use super::staging::StagingRing;
use crate::acl::handles::OpLauncher;
use crate::acl::table::{GraphFns, Phase2Fn};
use crate::acl::types::memcpy_kind::ACL_MEMCPY_DEVICE_TO_HOST;
use crate::acl::types::status::ACL_ERROR_REPEAT_INITIALIZE;
use crate::acl::types::{aclOpExecutor, aclrtStream};
use crate::acl::{AclApi, AclError, AclResult};

/// Environment variable: `1` synchronises after every operator, so an asynchronous device
/// error is reported at the operator that caused it (as `ASCEND_LAUNCH_BLOCKING` does for
/// torch_npu).
pub const ENV_LAUNCH_BLOCKING: &str = "ASCEND_LAUNCH_BLOCKING";

/// Calls `aclInit` once per table; a repeated initialisation by another component is fine.
pub(crate) fn initialize(api: &'static AclApi) -> AclResult<()> {
    static DONE: Mutex<Vec<usize>> = Mutex::new(Vec::new());
    let mut done = DONE.lock().unwrap();
    let key = api as *const AclApi as usize;
    if !done.contains(&key) {
        // SAFETY: NULL means "no configuration file".
        let status = unsafe { (api.core.aclInit)(std::ptr::null()) };
        if status != ACL_ERROR_REPEAT_INITIALIZE {
            api.check(status, "aclInit")?;
        }
        done.push(key);
    }
    Ok(())
}

/// Everything the backend holds for one device.
pub struct DeviceContext {
    device: AscendDevice,
    /// Unique in the process: a reset replaces the context with one of a new id.
    id: u64,
    api: &'static AclApi,
    stream: aclrtStream,
    tensors: Mutex<CachingAllocator>,
    workspaces: Mutex<CachingAllocator>,
    blocking: bool,
    /// (seed, offset) of the device's counter-based generator.
    rng: Mutex<(u64, u64)>,
    /// The device's fused-kernel library, or why it has none (opened on first use).
    kernels: OnceLock<Result<&'static KernelApi, String>>,
    /// The device's SoC name (read on first use: every fused op's tiling asks for it).
    soc: OnceLock<Option<String>>,
    /// Kernels whose absence was already reported.
    kernels_noticed: Mutex<HashSet<&'static str>>,
    /// Page-locked staging for uploads (allocated on the first upload).
    staging: Mutex<Option<StagingRing>>,
    /// Set when the device was reset: why this context is no longer usable.
    retired: OnceLock<String>,
    /// Set (under the capture lock, which every enqueue holds) when a reset begins: work issued
    /// after it would reach the stream being reset, so it is refused while the stream drains.
    resetting: AtomicBool,
    /// `aclrtSetDevice` calls made for this context (one per binding thread): what a reset
    /// must balance where the library has no `aclrtResetDeviceForce`.
    set_calls: AtomicU64,
    /// The graph being captured on the stream: every allocation and upload goes to its pool
    /// while it is set (`graph.rs`).
    capture: Mutex<Option<Capture>>,
    /// The first device fault a deferring thread found while issuing work: every later
    /// synchronisation, read and launch reports it, until [`reset_device`].
    fault: OnceLock<AclError>,
    /// Read-only device constants built once per context, by name ([`DeviceContext::constant`]).
    constants: Mutex<HashMap<&'static str, Arc<dyn Any + Send + Sync>>>,
}

/// A capture in progress on a context's stream.
struct Capture {
    pool: Arc<GraphPool>,
    /// The thread capturing: the stream is shared, so work of any other thread would be
    /// recorded into the graph; it is refused instead.
    thread: ThreadId,
}

/// The eager caches of a context, where a block freed during a capture returns once the graph
/// that may address it is gone.
#[derive(Debug, Clone, Copy)]
pub(crate) enum EagerCache {
    Tensors,
    Workspaces,
}

// SAFETY: the stream handle is used from any thread after binding the device to it, which
// AscendCL allows; the allocators are behind mutexes.
unsafe impl Send for DeviceContext {}
unsafe impl Sync for DeviceContext {}

thread_local! {
    /// The context this thread last bound with aclrtSetDevice (by id: a reset device must be
    /// bound again).
    static BOUND: Cell<Option<u64>> = const { Cell::new(None) };

    /// Whether this thread defers device faults (see `defer_device_faults`).
    static DEFERS: Cell<bool> = const { Cell::new(false) };
}

/// Makes the calling thread defer device faults, as CANN reports an asynchronous fault: at the
/// next synchronisation or read (`acl-abi.md`, aclrtSynchronizeStream: "async kernel failures
/// (507xxx codes) surface here"). A fault (or a reset context) found while this thread
/// allocates, uploads or launches is recorded on the context; the op completes without the
/// work (its outputs own no memory) and the next synchronisation or read of the context, on
/// any thread, fails with it. For burn-fusion's runner threads: burn-fusion 0.21 counts a
/// segment as executed before running its ops, so an op that panics there leaves the stream's
/// queue broken for good (every later op and read of the device fails, even after a reset).
pub fn defer_device_faults() {
    DEFERS.with(|d| d.set(true));
}

/// The live context of each device.
fn contexts() -> &'static Mutex<HashMap<AscendDevice, Arc<DeviceContext>>> {
    static CONTEXTS: OnceLock<Mutex<HashMap<AscendDevice, Arc<DeviceContext>>>> = OnceLock::new();
    CONTEXTS.get_or_init(Default::default)
}

/// Whether a read or synchronisation that finds its device faulted resets it (see
/// [`set_reset_on_fault`]).
static RESET_ON_FAULT: AtomicBool = AtomicBool::new(false);

/// With `true`, every read or synchronisation that finds a device faulted resets the device
/// before it reports the fault ([`DeviceContext::recover`]), for a process serving clients that
/// cannot call [`reset_device`] (burn-ascend-server): a fault is sticky, so one client's bad
/// input would otherwise fail every later call on the device, of every client, until a restart.
/// Off by default: a program in process resets the device itself, once it knows what it will
/// rebuild (the serving engine reloads its weights). One setting per process.
pub fn set_reset_on_fault(on: bool) {
    RESET_ON_FAULT.store(on, Ordering::Release);
}

/// Resets `device` after a fault: its context (stream, memory, cached blocks, its ranks of HCCL
/// communicators) is destroyed with `aclrtResetDevice`, and the next use of the device opens a
/// new one. Tensors and communicators of the old context fail clearly when used; new ones
/// work. A server calls this after a device fault
/// to keep serving; it needs no fault to be called.
pub fn reset_device(device: &AscendDevice) -> AclResult<()> {
    let Some(old) = contexts().lock().unwrap().remove(device) else {
        return Ok(());
    };
    retire(device, old)
}

/// Destroys `old`, the context just taken out of the live map (see [`reset_device`]).
fn retire(device: &AscendDevice, old: Arc<DeviceContext>) -> AclResult<()> {
    // Before the wait: work issued after it would reach the stream being reset. Every enqueue
    // holds the capture lock, so one under way is queued before the flag is seen, and drained.
    super::collective::retire_device(device);
    {
        let _enqueues = old.capture.lock().unwrap();
        old.resetting.store(true, Ordering::Release);
    }
    let reason = match old.drain() {
        Err(e) => format!("{device} was reset after a fault: {e}"),
        Ok(()) => format!("{device} was reset"),
    };
    // A constant holds its context: dropped here, so the retired context can go.
    old.constants.lock().unwrap().clear();
    let _ = old.retired.set(reason);
    super::collective::release_device(device);
    let api = old.api;
    // The ring's page-locked memory is host memory: freed here, after the stream is done.
    if let Some(ring) = old.staging.lock().unwrap().take() {
        ring.release(api);
    }
    let index = device.index() as i32;
    // CANN counts aclrtSetDevice calls per process and destroys the context only when as many
    // aclrtResetDevice calls balance them (acl-abi.md §3.1); every thread that used the device
    // bound it. So the reset is forced where the library can (8.1.RC1 on), and otherwise
    // balances each binding this context made, and the one below.
    // SAFETY: plain calls; the old context is retired, so nothing launches on it any more.
    unsafe {
        api.check((api.core.aclrtSetDevice)(index), "aclrtSetDevice")?;
        match api.optional.aclrtResetDeviceForce {
            Some(force) => api.check(force(index), "aclrtResetDeviceForce")?,
            None => {
                for _ in 0..=old.set_calls.load(Ordering::Acquire) {
                    api.check((api.core.aclrtResetDevice)(index), "aclrtResetDevice")?;
                }
            }
        }
    }
    BOUND.with(|b| b.set(None));
    Ok(())
}

impl DeviceContext {
    /// The context of `device`, created on first use (and again after [`reset_device`]).
    pub fn get(device: &AscendDevice) -> AclResult<Arc<DeviceContext>> {
        let mut map = contexts().lock().unwrap();
        if let Some(ctx) = map.get(device) {
            return Ok(ctx.clone());
        }
        let ctx = Arc::new(Self::create(*device)?);
        map.insert(*device, ctx.clone());
        Ok(ctx)
    }

    fn create(device: AscendDevice) -> AclResult<Self> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let api = device.api()?;
        initialize(api)?;
        let index = device.index() as i32;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        // SAFETY: plain calls with valid out-pointers.
        api.check(
            unsafe { (api.core.aclrtSetDevice)(index) },
            "aclrtSetDevice",
        )
        .map_err(|e| e.with_context(|| format!("opening {device}")))?;
        BOUND.with(|b| b.set(Some(id)));
        let set_calls = AtomicU64::new(1);
        let mut stream = std::ptr::null_mut();
        api.check(
            unsafe { (api.core.aclrtCreateStream)(&mut stream) },
            "aclrtCreateStream",
        )?;
        Ok(Self {
            device,
            id,
            api,
            stream,
            tensors: Mutex::default(),
            workspaces: Mutex::default(),
            blocking: launch_blocking()?,
            rng: Mutex::new((entropy_seed(), 0)),
            kernels: OnceLock::new(),
            soc: OnceLock::new(),
            kernels_noticed: Mutex::default(),
            staging: Mutex::default(),
            retired: OnceLock::new(),
            resetting: AtomicBool::new(false),
            set_calls,
            capture: Mutex::default(),
            fault: OnceLock::new(),
            constants: Mutex::default(),
        })
    }

    /// The device constant `name`, built by `build` on its first use on this context and shared
    /// afterwards: for read-only tensors that every call of an operator takes (the compressed
    /// causal mask of flash attention and paged prefill), uploaded once per device rather than
    /// once per call. A constant's value is shared, so callers never write it.
    pub fn constant<T: Clone + Send + Sync + 'static>(
        &self,
        name: &'static str,
        build: impl FnOnce() -> AclResult<T>,
    ) -> AclResult<T> {
        let cached = self.constants.lock().unwrap().get(name).cloned();
        if let Some(c) = cached {
            return Ok(c
                .downcast_ref::<T>()
                .expect("one type per constant name")
                .clone());
        }
        // Built outside the lock (it launches work); a racing builder's value is dropped.
        let value = build()?;
        let shared = self
            .constants
            .lock()
            .unwrap()
            .entry(name)
            .or_insert_with(|| Arc::new(value))
            .clone();
        Ok(shared
            .downcast_ref::<T>()
            .expect("one type per constant name")
            .clone())
    }

    /// The device this context serves.
    pub fn device(&self) -> AscendDevice {
        self.device
    }

    /// Binds the device to the calling thread (AscendCL requires it of every thread that
    /// issues work) and returns the table.
    pub fn bind(&self) -> &'static AclApi {
        if BOUND.with(Cell::get) != Some(self.id) && self.retired.get().is_none() {
            // SAFETY: the index was validated when the context was created.
            let status = unsafe { (self.api.core.aclrtSetDevice)(self.device.index() as i32) };
            if status == 0 {
                self.set_calls.fetch_add(1, Ordering::AcqRel);
                BOUND.with(|b| b.set(Some(self.id)));
            }
        }
        self.api
    }

    /// The context's stream, on which all its work is queued (collectives join it there).
    pub fn stream(&self) -> aclrtStream {
        self.stream
    }

    /// The context's stream as profiling windows name it: the context's id (one stream per
    /// context, and a reset gives the device a new context, so a new stream).
    pub fn stream_id(&self) -> u64 {
        self.id
    }

    /// Fails when the device was reset since this context was opened (its memory, stream and
    /// tensors are gone), or when another thread is capturing a graph on it: all work of the
    /// context shares one stream, so this thread's work would be recorded into that graph.
    pub fn check_alive(&self) -> AclResult<()> {
        self.check_not_reset()?;
        self.refuse_other_thread(self.capture.lock().unwrap().as_ref())
    }

    fn check_not_reset(&self) -> AclResult<()> {
        if let Some(reason) = self.retired.get() {
            return Err(AclError::DeviceLost(format!(
                "this tensor or operation belongs to a device context that no longer exists: \
                 {reason}; create tensors on the device again"
            )));
        }
        if self.resetting.load(Ordering::Acquire) {
            return Err(AclError::DeviceLost(format!(
                "{} is being reset: this tensor or operation belongs to the context being \
                 destroyed; create tensors on the device again",
                self.device
            )));
        }
        Ok(())
    }

    fn refuse_other_thread(&self, capture: Option<&Capture>) -> AclResult<()> {
        match capture {
            Some(c) if c.thread != std::thread::current().id() => {
                Err(AclError::InvalidArgument(format!(
                    "{} is capturing a graph on thread {:?}: work from other threads is refused \
                     until the capture ends (it would be recorded into the graph)",
                    self.device, c.thread
                )))
            }
            _ => Ok(()),
        }
    }

    /// Runs `enqueue`, one call that queues work on the stream, holding the capture state: the
    /// work either precedes a capture another thread begins or is refused by it, and is never
    /// recorded into that thread's graph (a check before the call alone leaves that window).
    pub(crate) fn issue<R>(&self, enqueue: impl FnOnce() -> R) -> AclResult<R> {
        let capture = self.capture.lock().unwrap();
        self.check_not_reset()?;
        self.refuse_other_thread(capture.as_ref())?;
        Ok(enqueue())
    }

    /// The device's SoC as `aclrtGetSocName` names it (`Ascend910B2`, ...), `None` when the
    /// runtime gives none. Read once per context.
    pub fn soc_name(&self) -> Option<&str> {
        self.soc
            .get_or_init(|| {
                let api = self.bind();
                // SAFETY: returns NULL or a static NUL-terminated string.
                unsafe {
                    let p = (api.core.aclrtGetSocName)();
                    (!p.is_null())
                        .then(|| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
                }
            })
            .as_deref()
    }

    /// The error to report for `e`, which failed a read or synchronisation of this context.
    ///
    /// With [`set_reset_on_fault`], a device fault resets the device if this context is still
    /// its live one (once, however many reads find the same fault), so that new work runs on a
    /// new context; the report is then [`AclError::DeviceLost`], naming the fault: every tensor
    /// of the device is gone, and which caller's work raised the fault is not this read's to say
    /// (all work of the device shares one stream, so the read that finds a fault may belong to
    /// any caller). Anything else is `e` unchanged.
    pub fn recover(&self, e: AclError) -> AclError {
        use crate::error::AscendError;
        if !RESET_ON_FAULT.load(Ordering::Acquire)
            || !matches!(
                AscendError::from_acl("", &e),
                AscendError::DeviceFault { .. }
            )
        {
            return e;
        }
        let live = {
            let mut map = contexts().lock().unwrap();
            match map.get(&self.device) {
                Some(live) if live.id == self.id => map.remove(&self.device),
                _ => None,
            }
        };
        if let Some(live) = live {
            if let Err(reset) = retire(&self.device, live) {
                return AclError::DeviceLost(format!(
                    "{} faulted and could not be reset ({reset}); the fault: {e}",
                    self.device
                ));
            }
        }
        // No longer live: retired here, or by another read of the same fault (maybe still
        // under way, its reason not yet set).
        let reason = match self.retired.get() {
            Some(reason) => reason.clone(),
            None => format!("{} is being reset after a fault: {e}", self.device),
        };
        AclError::DeviceLost(format!(
            "{reason}; every tensor it held is lost: create tensors on the device again"
        ))
    }

    /// Fails with the fault a deferring thread recorded, if one did.
    fn check_fault(&self) -> AclResult<()> {
        self.fault.get().map_or(Ok(()), |e| Err(e.clone()))
    }

    /// `result` of issuing work; on a deferring thread a device fault or lost context is
    /// recorded instead of returned (see `defer_device_faults`). Other errors (arguments,
    /// memory) are the op's own and fail it.
    fn defer(&self, result: AclResult<()>) -> AclResult<()> {
        match result {
            Err(e) if DEFERS.with(Cell::get) && is_device_fault(&e) => {
                let _ = self.fault.set(e);
                Ok(())
            }
            other => other,
        }
    }

    /// A description of the device for `Backend::name`.
    pub fn describe(&self) -> String {
        let soc = self.soc_name().unwrap_or("unknown SoC");
        format!("ascend({}, {soc}, {})", self.device, self.bind().describe())
    }

    /// Waits for all queued work; reports an asynchronous device error raised by it (and,
    /// once the device has faulted, that fault every time, until [`reset_device`]).
    pub fn synchronize(&self) -> AclResult<()> {
        self.check_alive()?;
        self.drain()
    }

    /// Waits for the stream's work and reports its fault (the reset's wait too, once new work
    /// is refused).
    fn drain(&self) -> AclResult<()> {
        let api = self.bind();
        // SAFETY: the stream is owned by this context.
        api.check(
            unsafe { (api.core.aclrtSynchronizeStream)(self.stream) },
            "aclrtSynchronizeStream",
        )?;
        self.check_fault()
    }

    /// Allocates a tensor buffer of at least `bytes` bytes (on a deferring thread, after a
    /// fault: a buffer that owns no memory, see `defer_device_faults`).
    pub fn alloc(self: &Arc<Self>, bytes: usize) -> AclResult<DeviceStorage> {
        let pool = self.capturing();
        let block = self.check_fault().and_then(|()| match &pool {
            Some(pool) => self.alloc_captured(pool, bytes),
            None => self.alloc_block(&self.tensors, bytes),
        });
        let block = match block {
            Ok(block) => block,
            Err(e) => {
                self.defer(Err(e))?;
                Block {
                    ptr: std::ptr::null_mut(),
                    size: 0,
                }
            }
        };
        Ok(DeviceStorage {
            ctx: self.clone(),
            block,
            bytes,
            pool,
        })
    }

    /// Whether a graph is being captured on the stream.
    pub(crate) fn is_capturing(&self) -> bool {
        self.capturing().is_some()
    }

    /// The pool of the graph being captured, if one is.
    fn capturing(&self) -> Option<Arc<GraphPool>> {
        self.capture
            .lock()
            .unwrap()
            .as_ref()
            .map(|c| c.pool.clone())
    }

    fn eager(&self, cache: EagerCache) -> &Mutex<CachingAllocator> {
        match cache {
            EagerCache::Tensors => &self.tensors,
            EagerCache::Workspaces => &self.workspaces,
        }
    }

    /// Returns a block of an eager cache. During a capture it is parked with the graph instead:
    /// the graph may address it (an eager tensor whose last use was recorded), so it must not
    /// serve other work while the graph lives (aclgraph-abi.md §5).
    fn free_eager(&self, cache: EagerCache, block: Block) {
        match self.capturing() {
            Some(pool) => pool.park(cache, block),
            None => self.unpark(cache, block),
        }
    }

    /// Puts a block back into an eager cache for reuse, telling the emulated runtime's debug
    /// hook (absent on CANN) that it is freed from now on, so that a graph replay still
    /// addressing it faults as a use of a freed buffer.
    pub(crate) fn unpark(&self, cache: EagerCache, block: Block) {
        if let Some(freed) = self.api.debug_block_freed {
            // SAFETY: a device address from aclrtMalloc. The status only concerns the debug
            // check (a reset device no longer knows the block): nothing to act on.
            let _ = unsafe { freed(block.ptr) };
        }
        self.eager(cache).lock().unwrap().free(block);
    }

    /// A block of a capture's pool. No cache is released on out-of-memory: that needs a
    /// synchronisation, which the capture forbids.
    fn alloc_captured(&self, pool: &GraphPool, bytes: usize) -> AclResult<Block> {
        self.check_alive()?;
        pool.alloc(self.bind(), bytes)
            .map_err(|e| e.with_context(|| format!("allocating {bytes} bytes during a graph capture on {} (the capture cannot release cached memory)", self.device)))
    }

    /// The ACL graph functions, or why this context cannot capture.
    pub(crate) fn graph_fns(&self) -> Result<&'static GraphFns, String> {
        if self.blocking {
            return Err(format!(
                "{ENV_LAUNCH_BLOCKING}=1 synchronises after every operator, which a graph capture forbids"
            ));
        }
        self.api
            .graph
            .as_ref()
            .map_err(|why| format!("{}: {why}", self.device))
    }

    /// Calls `begin` (which begins capturing on the stream) and, if it succeeds, routes
    /// allocations and uploads to `pool` until [`DeviceContext::end_capture`] and refuses work
    /// from other threads meanwhile (see [`DeviceContext::issue`]).
    pub(crate) fn begin_capture(
        &self,
        pool: Arc<GraphPool>,
        begin: impl FnOnce() -> AclResult<()>,
    ) -> AclResult<()> {
        self.check_alive()?;
        let mut capture = self.capture.lock().unwrap();
        if capture.is_some() {
            return Err(AclError::InvalidArgument(format!(
                "a graph capture is already in progress on {}",
                self.device
            )));
        }
        begin()?;
        *capture = Some(Capture {
            pool,
            thread: std::thread::current().id(),
        });
        Ok(())
    }

    pub(crate) fn end_capture(&self) {
        self.capture.lock().unwrap().take();
    }

    /// Takes the blocks of a graph pool that is gone into the tensor cache.
    pub(crate) fn absorb(&self, blocks: CachingAllocator) {
        self.tensors.lock().unwrap().absorb(blocks);
    }

    /// A block of `pool`; on out-of-memory, after synchronising, every pool's cache is released
    /// (tensors and workspaces) and the allocation retried once.
    fn alloc_block(&self, pool: &Mutex<CachingAllocator>, bytes: usize) -> AclResult<Block> {
        self.check_alive()?;
        let api = self.bind();
        let first = pool.lock().unwrap().alloc(api, bytes);
        match first {
            Err(e) if is_out_of_memory(&e) => {
                self.release_cache()?;
                let mut pool = pool.lock().unwrap();
                pool.alloc(api, bytes)
                    .map_err(|e| pool.out_of_memory(api, bytes, e))
            }
            other => other,
        }
    }

    /// Statistics of the tensor allocator.
    pub fn memory_stats(&self) -> MemoryStats {
        self.tensors.lock().unwrap().stats()
    }

    /// Starts the tensor allocator's `peak_bytes_in_use` over from the bytes in use now, to
    /// measure the peak of the work that follows.
    pub fn reset_peak_memory(&self) {
        self.tensors.lock().unwrap().reset_peak();
    }

    /// Releases every cached block of both allocators to the device.
    pub fn release_cache(&self) -> AclResult<()> {
        self.synchronize()?;
        let api = self.bind();
        let tensors = self.tensors.lock().unwrap().release_cache(api);
        let workspaces = self.workspaces.lock().unwrap().release_cache(api);
        tensors.and(workspaces)
    }

    /// Copies host bytes into `dst`, in stream order, through the page-locked staging ring:
    /// the call returns once the bytes are staged, without waiting for the queue.
    pub fn upload(&self, dst: &DeviceStorage, bytes: &[u8]) -> AclResult<()> {
        self.defer(
            self.check_fault()
                .and_then(|()| self.upload_now(dst, bytes)),
        )
    }

    /// Copies host bytes into `dst` with a blocking copy from pageable memory, for bulk loads
    /// (a checkpoint's weights): through the page-locked ring every byte would be copied twice
    /// more on the host. `aclrtMemcpy` is not ordered with stream work (acl-abi.md §3 and trap
    /// 13), so the stream is drained first, as torch_npu does before a blocking copy: `dst` may
    /// be a cached block that work queued earlier still uses. Recorded in a capture, the copy
    /// goes through the capture's own staging, as [`DeviceContext::upload`]'s does.
    pub fn upload_blocking(&self, dst: &DeviceStorage, bytes: &[u8]) -> AclResult<()> {
        if self.capturing().is_some() {
            return self.upload(dst, bytes);
        }
        self.defer(self.check_fault().and_then(|()| {
            self.check_alive()?;
            self.check_upload_fits(dst, bytes.len())?;
            if bytes.is_empty() {
                return Ok(());
            }
            self.drain()?;
            let api = self.bind();
            // SAFETY: `dst` holds `dst.bytes` bytes, no queued work touches it (drained), and
            // `bytes` is live host memory for the whole (blocking) call.
            let status = unsafe {
                (api.core.aclrtMemcpy)(
                    dst.block.ptr,
                    dst.bytes,
                    bytes.as_ptr() as *const c_void,
                    bytes.len(),
                    crate::acl::types::memcpy_kind::ACL_MEMCPY_HOST_TO_DEVICE,
                )
            };
            api.check(status, "aclrtMemcpy")
        }))
    }

    /// An upload of `len` bytes into `dst` fits it.
    fn check_upload_fits(&self, dst: &DeviceStorage, len: usize) -> AclResult<()> {
        if len > dst.bytes {
            return Err(AclError::Library(format!(
                "upload of {len} bytes into a buffer of {} bytes on {}",
                dst.bytes, self.device
            )));
        }
        Ok(())
    }

    fn upload_now(&self, dst: &DeviceStorage, bytes: &[u8]) -> AclResult<()> {
        self.check_alive()?;
        self.check_upload_fits(dst, bytes.len())?;
        if bytes.is_empty() {
            return Ok(());
        }
        let api = self.bind();
        if let Some(pool) = self.capturing() {
            // Recorded: every replay copies these bytes again, from staging the graph owns.
            let staged = pool.stage(api, bytes)?;
            // SAFETY: `dst` holds `dst.bytes` bytes; the staging lives as long as the graph.
            let status = self.issue(|| unsafe {
                (api.core.aclrtMemcpyAsync)(
                    dst.block.ptr,
                    dst.bytes,
                    staged,
                    bytes.len(),
                    crate::acl::types::memcpy_kind::ACL_MEMCPY_HOST_TO_DEVICE,
                    self.stream,
                )
            })?;
            return api.check(status, "aclrtMemcpyAsync");
        }
        let mut staging = self.staging.lock().unwrap();
        let ring = match &mut *staging {
            Some(ring) => ring,
            None => staging.insert(StagingRing::new(api)?),
        };
        self.issue(|| ring.upload(api, self.stream, dst.block.ptr, dst.bytes, bytes))?
    }

    /// Reads `len` bytes of `src` at byte `offset`; the caller has synchronised the stream
    /// since the last work that wrote them (`aclrtMemcpy` is not stream-ordered).
    pub fn read_synchronized(
        &self,
        src: &DeviceStorage,
        offset: usize,
        len: usize,
    ) -> AclResult<Vec<u8>> {
        self.check_alive()?;
        self.check_fault()?;
        if offset.checked_add(len).is_none_or(|end| end > src.bytes) {
            return Err(AclError::Library(format!(
                "read of {len} bytes at offset {offset} from a buffer of {} bytes on {}",
                src.bytes, self.device
            )));
        }
        let mut out = vec![0u8; len];
        if len == 0 {
            return Ok(out);
        }
        let api = self.bind();
        // SAFETY: the range lies inside `src`; `out` has room for `len` bytes.
        let status = unsafe {
            (api.core.aclrtMemcpy)(
                out.as_mut_ptr() as *mut c_void,
                len,
                (src.block.ptr as *const u8).add(offset) as *const c_void,
                len,
                ACL_MEMCPY_DEVICE_TO_HOST,
            )
        };
        api.check(status, "aclrtMemcpy")?;
        Ok(out)
    }

    /// Seeds the device's random number generator and restarts its counter.
    pub fn set_seed(&self, seed: u64) {
        *self.rng.lock().unwrap() = (seed, 0);
    }

    /// The (seed, offset) for a draw of `count` values, advancing the counter past them (to a
    /// multiple of 4, which aclnnInplaceBernoulli requires of offsets).
    pub fn next_random(&self, count: u64) -> (u64, u64) {
        let mut rng = self.rng.lock().unwrap();
        let drawn = *rng;
        rng.1 += count.div_ceil(4) * 4;
        drawn
    }
}

impl DeviceContext {
    /// Vector cores (AIV) of the device, as `aclGetDeviceCapability` reports them.
    pub fn vector_cores(&self) -> AclResult<u32> {
        let api = self.bind();
        let mut value = 0i64;
        // SAFETY: valid out-pointer.
        let status = unsafe {
            (api.core.aclGetDeviceCapability)(
                self.device.index() as u32,
                crate::acl::types::device_info::ACL_DEVICE_INFO_VECTOR_CORE_NUM,
                &mut value,
            )
        };
        api.check(status, "aclGetDeviceCapability")?;
        Ok(value.max(1) as u32)
    }

    /// The device's fused-kernel library, or why it has none.
    fn kernel_library(&self) -> Result<&'static KernelApi, &str> {
        self.kernels
            .get_or_init(|| self.device.kernels().map_err(|e| e.to_string()))
            .as_ref()
            .map(|api| *api)
            .map_err(String::as_str)
    }

    /// Whether `kernel` can run on this device. When it cannot (the device has no kernel
    /// library, or its library lacks the kernel), the fused op that needs it runs its composed
    /// default instead, and this says so once per kernel and device, naming what is missing.
    pub fn has_kernel(&self, kernel: &'static str) -> bool {
        let why = match self.kernel_library() {
            Ok(api) if api.has(kernel) => return true,
            Ok(api) => format!(
                "its kernel library ({}) has no aclrtlaunch_{kernel}",
                api.describe()
            ),
            Err(reason) => format!("it has no kernel library: {reason}"),
        };
        if self.kernels_noticed.lock().unwrap().insert(kernel) {
            eprintln!(
                "burn-ascend: {} cannot run the fused kernel {kernel}: {why}. The ops that use it \
                 run their composed defaults (standard operators: correct, slower).",
                self.device
            );
        }
        false
    }

    /// Launches a fused Ascend C kernel on this context's stream: `launch` receives the
    /// device's kernel library and the stream, and calls the kernel's launcher. Callers check
    /// [`DeviceContext::has_kernel`] first (a missing kernel is an error here).
    pub fn launch_kernel(
        &self,
        kernel: &'static str,
        launch: impl FnOnce(&KernelApi, aclrtStream) -> Result<(), LaunchError>,
    ) -> AclResult<()> {
        self.defer(self.launch_kernel_now(kernel, launch))
    }

    fn launch_kernel_now(
        &self,
        kernel: &'static str,
        launch: impl FnOnce(&KernelApi, aclrtStream) -> Result<(), LaunchError>,
    ) -> AclResult<()> {
        self.check_alive()?;
        self.check_fault()?;
        let api = self.kernel_library().map_err(|reason| {
            crate::acl::AclError::Library(format!("{} cannot run {kernel}: {reason}", self.device))
        })?;
        self.bind();
        self.issue(|| launch(api, self.stream))?
            .map_err(|e| match e {
                LaunchError::Refused { code, .. } => crate::acl::AclError::Call {
                    code: code as i32,
                    function: format!("aclrtlaunch_{kernel}"),
                    message: self.api.recent_error_message(),
                    context: None,
                },
                LaunchError::Missing { .. } => crate::acl::AclError::Library(format!(
                    "{}: {e} ({})",
                    self.device,
                    api.describe()
                )),
            })?;
        if self.blocking {
            self.synchronize()?;
        }
        Ok(())
    }
}

impl DeviceContext {
    /// Phase two on the stream with a workspace from the pool; a one-shot executor that never
    /// reaches phase two (no workspace) is destroyed, a repeatable one stays the caller's.
    unsafe fn run_phase2(
        &self,
        op: &'static str,
        phase2: Phase2Fn,
        executor: *mut aclOpExecutor,
        workspace_size: u64,
        repeatable: bool,
    ) -> AclResult<()> {
        let api = self.bind();
        let alive = self.check_alive();
        let workspace = if alive.is_err() {
            if !repeatable {
                // SAFETY: phase two never ran, so the executor is still ours.
                unsafe { (api.core.aclDestroyAclOpExecutor)(executor) };
            }
            return alive;
        } else if workspace_size > 0 {
            // Read once: the workspace goes back where it came from even if a capture starts
            // (on another thread) while phase two runs.
            let pool = self.capturing();
            let taken = match &pool {
                Some(pool) => self.alloc_captured(pool, workspace_size as usize),
                None => self.alloc_block(&self.workspaces, workspace_size as usize),
            };
            match taken {
                Ok(block) => Some((block, pool)),
                Err(e) => {
                    if !repeatable {
                        // SAFETY: phase two never ran, so the executor is still ours.
                        unsafe { (api.core.aclDestroyAclOpExecutor)(executor) };
                    }
                    return Err(e);
                }
            }
        } else {
            None
        };
        let ws_ptr = workspace
            .as_ref()
            .map_or(std::ptr::null_mut(), |(b, _)| b.ptr);
        // SAFETY: the executor comes from phase one of the same operator.
        let issued =
            self.issue(|| unsafe { phase2(ws_ptr, workspace_size, executor, self.stream) });
        if let Some((block, pool)) = workspace {
            // Stream-ordered reuse: later work on this stream may take it (during a capture,
            // later work of the same graph: its pool).
            match pool {
                Some(pool) => pool.free(block),
                None => self.free_eager(EagerCache::Workspaces, block),
            }
        }
        let status = match issued {
            Ok(status) => status,
            Err(refused) => {
                if !repeatable {
                    // SAFETY: phase two never ran, so the executor is still ours.
                    unsafe { (api.core.aclDestroyAclOpExecutor)(executor) };
                }
                return Err(refused);
            }
        };
        api.check(status, op)?;
        if self.blocking {
            self.synchronize()?;
        }
        Ok(())
    }
}

impl OpLauncher for DeviceContext {
    fn api(&self) -> &'static AclApi {
        self.bind()
    }

    fn context_id(&self) -> u64 {
        self.id
    }

    fn capturing(&self) -> bool {
        self.capturing().is_some()
    }

    /// A deferring thread drops work once the context has faulted (see `defer_device_faults`):
    /// the outputs own no memory, so phase one must not see them.
    fn issues_work(&self) -> AclResult<bool> {
        match self.check_alive().and_then(|()| self.check_fault()) {
            Ok(()) => Ok(true),
            Err(e) => self.defer(Err(e)).map(|()| false),
        }
    }

    fn describe_context(&self, context: u64) -> String {
        // A retired context is no longer the device's: named as reset, like any other.
        if context == self.id && self.retired.get().is_none() {
            return self.device.to_string();
        }
        let live = contexts().lock().unwrap();
        match live.values().find(|c| c.id == context) {
            Some(c) => c.device.to_string(),
            None => "a device context that was reset".into(),
        }
    }

    unsafe fn launch(
        &self,
        op: &'static str,
        phase2: Phase2Fn,
        executor: *mut aclOpExecutor,
        workspace_size: u64,
    ) -> AclResult<()> {
        // SAFETY: the caller's contract.
        self.defer(unsafe { self.run_phase2(op, phase2, executor, workspace_size, false) })
    }

    unsafe fn launch_repeatable(
        &self,
        op: &'static str,
        phase2: Phase2Fn,
        executor: *mut aclOpExecutor,
        workspace_size: u64,
    ) -> AclResult<()> {
        // SAFETY: the caller's contract.
        self.defer(unsafe { self.run_phase2(op, phase2, executor, workspace_size, true) })
    }
}

impl Drop for DeviceContext {
    fn drop(&mut self) {
        // A retired context's stream and memory went with the device reset.
        if self.retired.get().is_some() {
            return;
        }
        let api = self.bind();
        // SAFETY: the stream is ours; nothing is queued after a synchronisation.
        unsafe {
            (api.core.aclrtSynchronizeStream)(self.stream);
            (api.core.aclrtDestroyStream)(self.stream);
        }
        if let Some(ring) = self.staging.get_mut().unwrap().take() {
            ring.release(api);
        }
    }
}

/// [`ENV_LAUNCH_BLOCKING`]: `1` or `0` (unset: 0); anything else is an error naming it.
fn launch_blocking() -> AclResult<bool> {
    match std::env::var(ENV_LAUNCH_BLOCKING) {
        Err(std::env::VarError::NotPresent) => Ok(false),
        Ok(v) if v.trim() == "1" => Ok(true),
        Ok(v) if v.trim() == "0" || v.trim().is_empty() => Ok(false),
        Ok(v) => Err(AclError::InvalidArgument(format!(
            "{ENV_LAUNCH_BLOCKING}={v:?} is not understood: use 1 or 0"
        ))),
        Err(e) => Err(AclError::InvalidArgument(format!(
            "{ENV_LAUNCH_BLOCKING}: {e}"
        ))),
    }
}

/// Whether `e` means the device context stopped (a fault, sticky until reset) or is gone.
fn is_device_fault(e: &AclError) -> bool {
    use crate::error::AscendError;
    matches!(
        AscendError::from_acl("", e),
        AscendError::DeviceFault { .. } | AscendError::DeviceLost { .. }
    )
}

/// A seed for unseeded programs, different in every process.
fn entropy_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// A device buffer owned by tensors; returned to its context's cache on drop.
pub struct DeviceStorage {
    ctx: Arc<DeviceContext>,
    block: Block,
    bytes: usize,
    /// The graph pool the block came from (allocated during a capture).
    pool: Option<Arc<GraphPool>>,
}

impl DeviceStorage {
    /// The device address of the buffer's first byte.
    pub fn ptr(&self) -> *mut c_void {
        self.block.ptr
    }

    /// Usable size in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The context that owns the buffer.
    pub fn context(&self) -> &Arc<DeviceContext> {
        &self.ctx
    }
}

impl Drop for DeviceStorage {
    fn drop(&mut self) {
        // The output of an op whose work a fault dropped owns no memory (`alloc`).
        if self.block.ptr.is_null() {
            return;
        }
        match &self.pool {
            Some(pool) => pool.free(self.block),
            None => self.ctx.free_eager(EagerCache::Tensors, self.block),
        }
    }
}

impl std::fmt::Debug for DeviceStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceStorage({}, {:?}, {} bytes)",
            self.ctx.device, self.block.ptr, self.bytes
        )
    }
}
