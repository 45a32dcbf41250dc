//! Emulated HBM: a virtual device address space with a capacity, backed by host memory.
//!
//! The backing is mapped from the operating system (anonymous, zero-filled, committed only as
//! it is touched), not taken from the host heap: device memory is not host memory, and a
//! program's host allocations (what a loader or a server keeps on the host) can then be
//! measured apart from the emulated device's own.
//!
//! Device addresses are non-canonical on every 64-bit host (the top bits are neither all zero
//! nor all one), so host code that dereferences one by accident faults at once instead of
//! reading plausible data. Freed ranges are never handed out again, so any later use of a freed
//! buffer is detected and reported.
//!
//! A caching allocator above the runtime reuses a block without `aclrtFree`, which the rule above
//! cannot see. Its frees are reported through a debug hook ([`DeviceMemory::logical_free`]):
//! a graph replay's task that touches a block freed that way after the task was recorded reads
//! or writes memory that now belongs to someone else, and faults as a freed buffer does.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use super::fault::{fault, Fault};
use ascend_acl::types::status::*;

/// Base of the emulated address space; each device gets its own 2^40-byte window.
const ADDRESS_BASE: u64 = 0x0A5C_0000_0000_0000;
/// aclrtMalloc rounds sizes up to 32 bytes and pads by 32 (CANN header); blocks start on 512.
const ALLOC_GRANULE: u64 = 32;
const BLOCK_ALIGN: u64 = 512;

/// One allocation: its address range and its host backing.
pub(crate) struct Block {
    pub base: u64,
    pub len: usize,
    charged: u64,
    data: Backing,
    /// The [`free_clock`] tick of the latest logical free by a caching allocator (0: none).
    logically_freed: AtomicU64,
}

/// Ticks once per logical free of any block; a recorded task remembers the tick it was recorded
/// at, so a later logical free of a block it touches is recognised.
static FREE_CLOCK: AtomicU64 = AtomicU64::new(0);

/// The current tick of the logical-free clock.
pub(crate) fn free_clock() -> u64 {
    FREE_CLOCK.load(Ordering::SeqCst)
}

// SAFETY: the backing is plain memory; concurrent access follows the device's rules (stream
// order), exactly as with real device memory.
unsafe impl Send for Block {}
unsafe impl Sync for Block {}

impl Block {
    /// Raw host address of byte `offset` of this block.
    pub fn host_ptr(&self, offset: usize) -> *mut u8 {
        debug_assert!(offset <= self.len);
        // SAFETY: offset is within the allocation.
        unsafe { self.data.ptr.add(offset) }
    }
}

/// Zero-filled host memory backing one block, 8-byte aligned at least (kernels read it as
/// words).
struct Backing {
    ptr: *mut u8,
    len: usize,
}

impl Backing {
    /// `len` (> 0) zero bytes, or `None` when the host has no room for them.
    #[cfg(unix)]
    fn zeroed(len: usize) -> Option<Self> {
        // SAFETY: an anonymous private mapping of a non-zero length; no file, no fixed address.
        // MAP_NORESERVE: like calloc, the pages cost host memory only once touched (an emulated
        // KV cache is mostly untouched).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        (ptr != libc::MAP_FAILED).then_some(Self {
            ptr: ptr as *mut u8,
            len,
        })
    }

    #[cfg(not(unix))]
    fn zeroed(len: usize) -> Option<Self> {
        let layout = std::alloc::Layout::from_size_align(len, 8).ok()?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        (!ptr.is_null()).then_some(Self { ptr, len })
    }
}

impl Drop for Backing {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `len` are those of the mapping (allocation) made in `zeroed`,
        // released once, here.
        #[cfg(unix)]
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len);
        }
        #[cfg(not(unix))]
        unsafe {
            std::alloc::dealloc(
                self.ptr,
                std::alloc::Layout::from_size_align_unchecked(self.len, 8),
            );
        }
    }
}

struct State {
    blocks: BTreeMap<u64, Arc<Block>>,
    next: u64,
    used: u64,
    capacity: u64,
    /// The status an allocation beyond the capacity fails with (see [`set_oom_status`]).
    oom_status: i32,
}

/// The HBM of one emulated device.
pub(crate) struct DeviceMemory {
    device: i32,
    state: RwLock<State>,
}

impl DeviceMemory {
    pub fn new(device: i32, capacity: u64) -> Self {
        Self {
            device,
            state: RwLock::new(State {
                blocks: BTreeMap::new(),
                next: ADDRESS_BASE + ((device as u64) << 40),
                used: 0,
                capacity,
                oom_status: ACL_ERROR_RT_MEMORY_ALLOCATION,
            }),
        }
    }

    /// The device this memory belongs to.
    pub fn device(&self) -> i32 {
        self.device
    }

    pub fn set_capacity(&self, capacity: u64) {
        self.state.write().unwrap().capacity = capacity;
    }

    /// Which out-of-memory status `malloc` returns: CANN reports an exhausted HBM as
    /// `ACL_ERROR_RT_MEMORY_ALLOCATION` (207001), `ACL_ERROR_RT_DEVICE_OOM` (207018) or
    /// `ACL_ERROR_BAD_ALLOC` (200000) depending on its version and the path that failed
    /// (`../shared/ascend/acl-abi.md` §5.1, §5.2); the emulation can give each.
    pub fn set_oom_status(&self, status: i32) {
        self.state.write().unwrap().oom_status = status;
    }

    /// (free, total) bytes, as `aclrtGetMemInfo` reports them.
    pub fn info(&self) -> (u64, u64) {
        let s = self.state.read().unwrap();
        (s.capacity.saturating_sub(s.used), s.capacity)
    }

    pub fn malloc(&self, size: usize) -> Result<u64, Fault> {
        if size == 0 {
            return Err(fault(
                ACL_ERROR_RT_PARAM_INVALID,
                "aclrtMalloc: size must be greater than 0",
            ));
        }
        let charged = (size as u64).div_ceil(ALLOC_GRANULE) * ALLOC_GRANULE + ALLOC_GRANULE;
        let mut s = self.state.write().unwrap();
        if s.used + charged > s.capacity {
            return Err(fault(
                s.oom_status,
                format!(
                    "out of device memory on emulated npu:{}: cannot allocate {size} bytes, {} of {} bytes in use",
                    self.device, s.used, s.capacity
                ),
            ));
        }
        let data = Backing::zeroed(charged as usize).ok_or_else(|| {
            fault(
                s.oom_status,
                format!(
                    "emulated npu:{}: the host cannot back {size} more bytes of emulated HBM",
                    self.device
                ),
            )
        })?;
        advise_huge_pages(data.ptr, data.len);
        let base = s.next;
        s.next += charged.div_ceil(BLOCK_ALIGN) * BLOCK_ALIGN;
        s.used += charged;
        s.blocks.insert(
            base,
            Arc::new(Block {
                base,
                len: size,
                charged,
                data,
                logically_freed: AtomicU64::new(0),
            }),
        );
        Ok(base)
    }

    /// Frees every allocation (a device reset releases its context's memory); kernels still
    /// holding a block keep its backing until they finish.
    pub fn release_all(&self) {
        let mut s = self.state.write().unwrap();
        s.blocks.clear();
        s.used = 0;
    }

    pub fn free(&self, addr: u64) -> Result<(), Fault> {
        let mut s = self.state.write().unwrap();
        match s.blocks.remove(&addr) {
            Some(block) => {
                s.used -= block.charged;
                Ok(())
            }
            None => Err(fault(
                ACL_ERROR_RT_MEMORY_FREE,
                format!(
                    "aclrtFree: 0x{addr:x} is not the start of a live allocation on emulated npu:{} (double free?)",
                    self.device
                ),
            )),
        }
    }

    /// A caching allocator has taken the block at `addr` back for reuse (it stays allocated):
    /// tasks recorded before now must not touch it any more.
    pub fn logical_free(&self, addr: u64) -> Result<(), Fault> {
        let s = self.state.read().unwrap();
        let block = s.blocks.get(&addr).ok_or_else(|| {
            fault(
                ACL_ERROR_RT_PARAM_INVALID,
                format!(
                    "logical free: 0x{addr:x} is not the start of a live allocation on emulated npu:{}",
                    self.device
                ),
            )
        })?;
        let tick = FREE_CLOCK.fetch_add(1, Ordering::SeqCst) + 1;
        block.logically_freed.store(tick, Ordering::SeqCst);
        Ok(())
    }

    /// The block holding `[addr, addr + len)`, and the offset of `addr` in it.
    pub fn resolve(&self, addr: u64, len: usize) -> Result<(Arc<Block>, usize), Fault> {
        self.locate(addr, len, |b, offset| (b.clone(), offset))
    }

    /// The host address of `[addr, addr + len)` (without holding its block: the caller's stream
    /// order keeps it alive, and every access asks again). `recorded_at`: the access is made by
    /// a graph replay's task recorded at that [`free_clock`] tick (see [`DeviceMemory::resolve`]).
    pub fn host_ptr(
        &self,
        addr: u64,
        len: usize,
        recorded_at: Option<u64>,
    ) -> Result<*mut u8, Fault> {
        self.locate_at(addr, len, recorded_at, |b, offset| b.host_ptr(offset))
    }

    /// Whether `[addr, addr + len)` is live memory of one allocation (without holding it).
    pub fn check(&self, addr: u64, len: usize) -> Result<(), Fault> {
        self.locate(addr, len, |_, _| ())
    }

    /// [`DeviceMemory::locate_at`] for the calling thread: the recorded task it runs, if it
    /// runs a graph replay.
    fn locate<R>(
        &self,
        addr: u64,
        len: usize,
        found: impl FnOnce(&Arc<Block>, usize) -> R,
    ) -> Result<R, Fault> {
        self.locate_at(addr, len, super::graph::replaying(), found)
    }

    fn locate_at<R>(
        &self,
        addr: u64,
        len: usize,
        recorded_at: Option<u64>,
        found: impl FnOnce(&Arc<Block>, usize) -> R,
    ) -> Result<R, Fault> {
        let s = self.state.read().unwrap();
        match s.blocks.range(..=addr).next_back().map(|(_, b)| b) {
            Some(b)
                if addr + len as u64 <= b.base + b.len as u64
                    && recorded_at
                        .is_some_and(|at| b.logically_freed.load(Ordering::SeqCst) > at) =>
            {
                Err(fault(
                    ACL_ERROR_RT_AICORE_EXCEPTION,
                    format!(
                        "graph replay: access to 0x{addr:x} (+{len} bytes), in the block at 0x{:x} \
                         that the caching allocator freed after the graph recorded this task (a \
                         freed buffer: a later allocation may hold other data there; \
                         aclgraph-abi.md §5: memory a graph uses must stay allocated while it lives)",
                        b.base
                    ),
                ))
            }
            Some(b) if addr + len as u64 <= b.base + b.len as u64 => {
                Ok(found(b, (addr - b.base) as usize))
            }
            Some(b) if addr < b.base + b.len as u64 => Err(fault(
                ACL_ERROR_RT_AICORE_EXCEPTION,
                format!(
                    "out-of-bounds global memory access: [0x{addr:x}, +{len}) runs past the end of the {}-byte allocation at 0x{:x}",
                    b.len, b.base
                ),
            )),
            _ => Err(fault(
                ACL_ERROR_RT_AICORE_EXCEPTION,
                format!(
                    "access to 0x{addr:x} (+{len} bytes), which is not live device memory on emulated npu:{} (freed, or never allocated)",
                    self.device
                ),
            )),
        }
    }

    /// Whether `addr` lies in this device's address window.
    pub fn owns(&self, addr: u64) -> bool {
        let lo = ADDRESS_BASE + ((self.device as u64) << 40);
        (lo..lo + (1 << 40)).contains(&addr)
    }
}

/// Sets `len` bytes of device memory at `start` to zero. Whole pages are handed back to the
/// operating system, which maps them as zero pages again (the same contents, no host memory):
/// zeroing a KV cache of tens of GB, which an NPU does in milliseconds, then costs the host
/// nothing until the cache is written.
///
/// # Safety
/// `start..start + len` lies inside one block's backing (an anonymous private mapping).
pub(crate) unsafe fn zero_device_bytes(start: *mut u8, len: usize) {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let first = (start as usize).div_ceil(PAGE) * PAGE;
        let end = (start as usize + len) / PAGE * PAGE;
        if end > first {
            // SAFETY: [first, end) is whole pages inside the caller's range of a private
            // anonymous mapping, which MADV_DONTNEED leaves reading as zeros.
            let done = unsafe {
                libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_DONTNEED)
            } == 0;
            if done {
                // SAFETY: the head and tail lie inside the caller's range.
                unsafe {
                    std::ptr::write_bytes(start, 0, first - start as usize);
                    std::ptr::write_bytes(end as *mut u8, 0, start as usize + len - end);
                }
                return;
            }
        }
    }
    // SAFETY: the caller's range.
    unsafe { std::ptr::write_bytes(start, 0, len) };
}

/// Backs the whole pages of `len` bytes of device memory at `start` before a copy writes them:
/// a copy that takes its page faults one by one runs at a fraction of the speed of one that
/// finds its pages present (measured on this project's VMs: 1.2 GB/s against 2.2 GB/s for
/// faulting first, then copying), and uploading a model's weights is one such copy per tensor.
/// A hint: nothing changes but speed, and a kernel without MADV_POPULATE_WRITE ignores it.
///
/// # Safety
/// `start..start + len` lies inside one block's backing.
pub(crate) unsafe fn prefault(start: *mut u8, len: usize) {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        const WORTH_IT: usize = 1 << 20;
        let first = (start as usize).div_ceil(PAGE) * PAGE;
        let end = (start as usize + len) / PAGE * PAGE;
        if end > first && end - first >= WORTH_IT {
            // SAFETY: whole pages inside the caller's range of a private anonymous mapping;
            // populating them for writing changes no contents.
            unsafe {
                libc::madvise(
                    first as *mut libc::c_void,
                    end - first,
                    libc::MADV_POPULATE_WRITE,
                )
            };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (start, len);
}

/// Asks Linux to back a large allocation with huge pages: kernels read emulated HBM in scattered
/// rows (a paged KV cache), and with 4 KiB pages most of that time went to TLB misses. A hint
/// only; ignored where transparent huge pages are off.
#[cfg(target_os = "linux")]
fn advise_huge_pages(data: *mut u8, len: usize) {
    const HUGE: usize = 2 << 20;
    const PAGE: usize = 4096;
    if len < 2 * HUGE {
        return;
    }
    let start = (data as usize).div_ceil(PAGE) * PAGE;
    let end = (data as usize + len) / PAGE * PAGE;
    // SAFETY: [start, end) lies inside the allocation just made; MADV_HUGEPAGE changes no
    // contents, only how the kernel backs the pages.
    unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_data: *mut u8, _len: usize) {}

/// Page-locked host memory (`aclrtMallocHost`): the regions handed out, so that asynchronous
/// copies can insist on them and notice one freed before its copy ran.
#[derive(Default)]
pub(crate) struct PinnedHost {
    regions: std::sync::Mutex<BTreeMap<usize, std::alloc::Layout>>,
}

/// `aclrtMallocHost` aligns to 64 bytes (acl-abi.md 3.3).
const PINNED_ALIGN: usize = 64;

impl PinnedHost {
    pub fn alloc(&self, size: usize) -> Result<usize, Fault> {
        let layout =
            std::alloc::Layout::from_size_align(size.max(1), PINNED_ALIGN).map_err(|_| {
                fault(
                    ACL_ERROR_RT_PARAM_INVALID,
                    format!("aclrtMallocHost: {size} bytes is too large"),
                )
            })?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        if p.is_null() {
            return Err(fault(
                ACL_ERROR_RT_MEMORY_ALLOCATION,
                format!("aclrtMallocHost: cannot allocate {size} bytes of page-locked memory"),
            ));
        }
        self.regions.lock().unwrap().insert(p as usize, layout);
        Ok(p as usize)
    }

    pub fn free(&self, p: usize) -> Result<(), Fault> {
        let layout = self.regions.lock().unwrap().remove(&p).ok_or_else(|| {
            fault(
                ACL_ERROR_RT_PARAM_INVALID,
                format!("aclrtFreeHost: 0x{p:x} is not the start of live aclrtMallocHost memory (double free?)"),
            )
        })?;
        // SAFETY: allocated in `alloc` with this layout, freed once (removed above).
        unsafe { std::alloc::dealloc(p as *mut u8, layout) };
        Ok(())
    }

    /// Regions allocated and not freed.
    pub fn live(&self) -> usize {
        self.regions.lock().unwrap().len()
    }

    /// Whether `[p, p + len)` lies in one live region.
    pub fn check(&self, p: usize, len: usize) -> Result<(), Fault> {
        let regions = self.regions.lock().unwrap();
        match regions.range(..=p).next_back() {
            Some((&start, layout)) if p + len <= start + layout.size() => Ok(()),
            _ => Err(fault(
                ACL_ERROR_RT_PARAM_INVALID,
                format!(
                    "aclrtMemcpyAsync: host range [0x{p:x}, +{len}) is not page-locked memory from \
                     aclrtMallocHost; asynchronous host copies need it (acl-abi.md 3.3, trap 14)"
                ),
            )),
        }
    }
}
