//! ACL graphs: capture the work a closure issues to a device's stream once, replay it with one
//! call (`aclmdlRIExecuteAsync`) per step (`../shared/ascend/aclgraph-abi.md`).
//!
//! A captured task keeps the device addresses it had at capture (§5), so everything the closure
//! allocates comes from a private [`GraphPool`] (as torch_npu's graph pools): those blocks stay
//! with the graph, never serve eager work while it lives, and go back to the device's cache only
//! once the graph and every tensor of the pool are gone. Host data the closure uploads (constants
//! such as a rotary table) is staged in page-locked memory the graph owns, since each replay
//! copies it again (§4 rule 4). Inputs that change per replay are written into the closure's
//! input tensors before [`Graph::replay`]; outputs are read from its output tensors after it.
//!
//! An eager tensor whose last reference dies during the capture (its last use was recorded)
//! does not return its block to the eager cache: the block is parked with the graph and goes
//! back only once the graph is destroyed. The capture runs on the device's one stream, so
//! while it lasts work from any other thread is refused with an error naming the capture; the
//! executor cache is bypassed (`ascend_acl::cache`), so a recorded executor is never rebound
//! or evicted later. Inputs read by the graph that were created before the capture must stay
//! alive as long as the graph.
//!
//! The capture runs in GLOBAL mode: nothing may synchronise with the device while it lasts
//! (reads, `synchronize`, an out-of-memory retry); such a call fails the capture, and
//! [`capture`] says which call it was.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::allocator::{Block, CachingAllocator};
use super::context::{DeviceContext, EagerCache};
use super::device::AscendDevice;
use crate::acl::table::GraphFns;
use crate::acl::types::aclmdlRI;
use crate::acl::types::capture::ACL_MODEL_RI_CAPTURE_MODE_GLOBAL;
use crate::acl::{AclApi, AclError, AclResult};

/// The memory of one graph: device blocks and page-locked staging of its uploads.
pub struct GraphPool {
    ctx: Arc<DeviceContext>,
    blocks: Mutex<CachingAllocator>,
    /// Page-locked host buffers the graph's recorded copies read (freed with the graph).
    pinned: Mutex<Vec<usize>>,
    /// Blocks of the eager caches freed during the capture: the graph may address them.
    parked: Mutex<Vec<(EagerCache, Block)>>,
    /// Set when the graph could not be destroyed: it may still run, so none of its memory may
    /// be reused.
    leaked: AtomicBool,
}

impl GraphPool {
    pub(crate) fn alloc(&self, api: &AclApi, bytes: usize) -> AclResult<Block> {
        self.blocks.lock().unwrap().alloc(api, bytes)
    }

    pub(crate) fn free(&self, block: Block) {
        self.blocks.lock().unwrap().free(block);
    }

    /// Keeps a block of an eager cache until the graph is destroyed.
    pub(crate) fn park(&self, cache: EagerCache, block: Block) {
        self.parked.lock().unwrap().push((cache, block));
    }

    /// The graph is gone: parked blocks serve eager work again.
    fn release_parked(&self) {
        for (cache, block) in self.parked.lock().unwrap().drain(..) {
            self.ctx.unpark(cache, block);
        }
    }

    /// Frees the page-locked staging (no graph reads it any more).
    fn free_pinned(&self, api: &AclApi) {
        for p in self.pinned.lock().unwrap().drain(..) {
            // SAFETY: our own aclrtMallocHost buffer, freed once (drained). A failure leaves
            // nothing to do: the buffer is not used again either way.
            unsafe { (api.core.aclrtFreeHost)(p as *mut c_void) };
        }
    }

    /// Page-locked memory holding `bytes`, kept until the graph is destroyed.
    pub(crate) fn stage(&self, api: &AclApi, bytes: &[u8]) -> AclResult<*const c_void> {
        let mut p = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        api.check(
            unsafe { (api.core.aclrtMallocHost)(&mut p, bytes.len()) },
            "aclrtMallocHost",
        )?;
        self.pinned.lock().unwrap().push(p as usize);
        // SAFETY: `p` holds `bytes.len()` bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p as *mut u8, bytes.len()) };
        Ok(p)
    }
}

impl Drop for GraphPool {
    fn drop(&mut self) {
        if self.leaked.load(Ordering::Acquire) {
            return;
        }
        // No graph and no tensor uses the blocks any more: they serve eager work again.
        self.release_parked();
        self.ctx
            .absorb(std::mem::take(&mut *self.blocks.lock().unwrap()));
    }
}

/// A captured graph of one device: [`Graph::replay`] runs the captured work again.
pub struct Graph {
    ctx: Arc<DeviceContext>,
    fns: &'static GraphFns,
    ri: aclmdlRI,
    pool: Arc<GraphPool>,
}

// SAFETY: the handle is used from any thread after binding the device, which AscendCL allows.
unsafe impl Send for Graph {}
unsafe impl Sync for Graph {}

/// Whether `device` can capture graphs, or why not (a CANN release without the ACL graph
/// functions, blocking launches).
pub fn supported(device: &AscendDevice) -> Result<(), String> {
    let ctx = DeviceContext::get(device).map_err(|e| e.to_string())?;
    ctx.graph_fns().map(|_| ())
}

/// A capture in progress on one device, from [`begin`] to [`Capture::end`]: the closure-free
/// form of [`capture`], for callers whose capture spans calls (Burn 0.22's
/// `graph_start_capture` / `graph_stop_capture`). While it lasts, the device's stream records
/// instead of running; a capture never ended leaves the device capturing.
pub struct Capture {
    ctx: Arc<DeviceContext>,
    fns: &'static GraphFns,
    pool: Arc<GraphPool>,
}

/// Starts capturing the work issued to `device`'s stream. Fails, saying why, when the device
/// cannot capture or is already capturing.
pub fn begin(device: &AscendDevice) -> AclResult<Capture> {
    let ctx = DeviceContext::get(device)?;
    let fns = ctx.graph_fns().map_err(AclError::Library)?;
    let api = ctx.bind();
    let pool = Arc::new(GraphPool {
        ctx: ctx.clone(),
        blocks: Mutex::default(),
        pinned: Mutex::default(),
        parked: Mutex::default(),
        leaked: AtomicBool::new(false),
    });
    ctx.begin_capture(pool.clone(), || {
        // SAFETY: the context's own stream.
        api.check(
            unsafe { (fns.aclmdlRICaptureBegin)(ctx.stream(), ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) },
            "aclmdlRICaptureBegin",
        )
    })?;
    Ok(Capture { ctx, fns, pool })
}

impl Capture {
    /// Ends the capture: the graph of the work recorded since [`begin`], or why there is none
    /// (something synchronised with the device meanwhile, which invalidated the capture).
    pub fn end(self) -> AclResult<Graph> {
        let api = self.ctx.bind();
        let mut ri = std::ptr::null_mut();
        // SAFETY: the stream began capturing in `begin`.
        let ended = api.check(
            unsafe { (self.fns.aclmdlRICaptureEnd)(self.ctx.stream(), &mut ri) },
            "aclmdlRICaptureEnd",
        );
        self.ctx.end_capture();
        if ended.is_err() {
            // No graph resulted: nothing will read the staging of its recorded uploads.
            self.pool.free_pinned(api);
        }
        ended.map(|()| Graph {
            ctx: self.ctx,
            fns: self.fns,
            ri,
            pool: self.pool,
        })
    }
}

/// Runs `f` with the device's stream capturing: the work it issues is recorded, not run (its
/// output tensors hold no values until the first [`Graph::replay`]). Returns the graph and
/// `f`'s result. Fails, saying why, when the device cannot capture, when `f` synchronises with
/// the device (the capture is then invalidated and nothing is recorded), or when `f` panics.
pub fn capture<R>(device: &AscendDevice, f: impl FnOnce() -> R) -> AclResult<(Graph, R)> {
    let capture = begin(device)?;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    let graph = capture.end();
    match (result, graph) {
        (Ok(out), Ok(graph)) => Ok((graph, out)),
        (Ok(_), Err(e)) => Err(e),
        (Err(panic), graph) => {
            drop(graph);
            Err(AclError::Library(format!(
                "graph capture on {device} failed: {}",
                panic_text(&panic)
            )))
        }
    }
}

impl Graph {
    /// Queues one replay of the captured work on the device's stream; it runs after the work
    /// queued before it (writes of the inputs) and before the work queued after it (reads).
    pub fn replay(&self) -> AclResult<()> {
        self.ctx.check_alive()?;
        let api = self.ctx.bind();
        // SAFETY: a live graph of this context, the context's stream.
        let status = self
            .ctx
            .issue(|| unsafe { (self.fns.aclmdlRIExecuteAsync)(self.ri, self.ctx.stream()) })?;
        api.check(status, "aclmdlRIExecuteAsync")
    }

    /// The device the graph runs on.
    pub fn device(&self) -> AscendDevice {
        self.ctx.device()
    }

    /// Bytes of device memory the graph's pool holds (its tensors and workspaces).
    pub fn pool_bytes(&self) -> usize {
        self.pool.blocks.lock().unwrap().stats().bytes_reserved
    }
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Graph({}, {:?}, pool of {} bytes)",
            self.ctx.device(),
            self.ri,
            self.pool_bytes()
        )
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        let api = self.ctx.bind();
        // A replay may still be queued: the graph and its staging must outlive it. A faulted
        // or reset device reports its fault here; the graph is destroyed all the same.
        let _ = self.ctx.synchronize();
        // SAFETY: a graph of this process, destroyed once.
        let destroyed = api.check(
            unsafe { (self.fns.aclmdlRIDestroy)(self.ri) },
            "aclmdlRIDestroy",
        );
        if let Err(e) = destroyed {
            // The graph may still exist and run: reusing its memory (device blocks, parked
            // eager blocks, staging) could corrupt that run, so all of it is kept.
            self.pool.leaked.store(true, Ordering::Release);
            eprintln!(
                "burn-ascend: a graph on {} could not be destroyed ({e}); its {} bytes of device \
                 memory and its page-locked staging stay allocated",
                self.ctx.device(),
                self.pool_bytes()
            );
            return;
        }
        self.pool.free_pinned(api);
        self.pool.release_parked();
    }
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}
