//! A caching allocator of device memory: freed blocks are kept per size class and handed out
//! again in stream order (all work of a device context runs on one stream, so a block freed
//! after its last use was queued can serve any later work on that stream).
//!
//! On an allocation failure the device context releases the caches of all its pools (after a
//! stream synchronisation, since `aclrtFree` is not stream-ordered) and retries once.

use std::collections::HashMap;
use std::ffi::c_void;

use crate::acl::types::status::{
    ACL_ERROR_BAD_ALLOC, ACL_ERROR_RT_DEVICE_OOM, ACL_ERROR_RT_MEMORY_ALLOCATION,
};
use crate::acl::types::ACL_MEM_MALLOC_HUGE_FIRST;
use crate::acl::{AclApi, AclError, AclResult};

/// Requests under this size are rounded up to 512 bytes, larger ones to whole MiB.
const SMALL_LIMIT: usize = 1 << 20;
const SMALL_GRANULE: usize = 512;

/// The size class (bytes actually reserved) of a request.
pub fn size_class(bytes: usize) -> usize {
    let granule = if bytes < SMALL_LIMIT {
        SMALL_GRANULE
    } else {
        SMALL_LIMIT
    };
    bytes.max(1).div_ceil(granule) * granule
}

/// Allocator statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes of blocks held by live tensors or workspaces (size classes).
    pub bytes_in_use: usize,
    /// Bytes obtained from the device: in use plus cached.
    pub bytes_reserved: usize,
    /// Highest `bytes_in_use` seen.
    pub peak_bytes_in_use: usize,
    /// Number of `aclrtMalloc` calls that succeeded.
    pub device_allocations: usize,
    /// Number of `aclrtFree` calls.
    pub device_frees: usize,
    /// Times the cache was released (to satisfy an allocation, or on request).
    pub cache_flushes: usize,
}

/// A device pointer handed out by the allocator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// Device address (never dereferenced on the host).
    pub ptr: *mut c_void,
    /// Size class in bytes.
    pub size: usize,
}

// SAFETY: a device address is plain data on the host.
unsafe impl Send for Block {}
unsafe impl Sync for Block {}

/// The cache of one device context.
#[derive(Default)]
pub struct CachingAllocator {
    free: HashMap<usize, Vec<*mut c_void>>,
    stats: MemoryStats,
}

// SAFETY: holds device addresses only.
unsafe impl Send for CachingAllocator {}

impl CachingAllocator {
    /// Current statistics.
    pub fn stats(&self) -> MemoryStats {
        self.stats
    }

    /// Starts the peak over from the bytes in use now.
    pub fn reset_peak(&mut self) {
        self.stats.peak_bytes_in_use = self.stats.bytes_in_use;
    }

    /// Takes a cached block of the request's class, or allocates one. An out-of-memory
    /// error (see [`is_out_of_memory`]) leaves the retry to the caller, which can release
    /// other pools too.
    pub fn alloc(&mut self, api: &AclApi, bytes: usize) -> AclResult<Block> {
        let size = size_class(bytes);
        let ptr = match self.free.get_mut(&size).and_then(Vec::pop) {
            Some(ptr) => ptr,
            None => {
                let ptr = malloc(api, size)?;
                self.stats.device_allocations += 1;
                self.stats.bytes_reserved += size;
                ptr
            }
        };
        self.stats.bytes_in_use += size;
        self.stats.peak_bytes_in_use = self.stats.peak_bytes_in_use.max(self.stats.bytes_in_use);
        Ok(Block { ptr, size })
    }

    /// Returns a block to the cache.
    pub fn free(&mut self, block: Block) {
        self.stats.bytes_in_use -= block.size;
        self.free.entry(block.size).or_default().push(block.ptr);
    }

    /// Frees every cached block. The caller has synchronised the stream. A failing
    /// `aclrtFree` does not stop the others; the first failure is returned, and the statistics
    /// count only the blocks that were freed.
    pub fn release_cache(&mut self, api: &AclApi) -> AclResult<()> {
        self.stats.cache_flushes += 1;
        let mut first_error = None;
        for (size, ptrs) in self.free.drain() {
            for ptr in ptrs {
                // SAFETY: a block from aclrtMalloc that no tensor holds.
                match api.check(unsafe { (api.core.aclrtFree)(ptr) }, "aclrtFree") {
                    Ok(()) => {
                        self.stats.bytes_reserved -= size;
                        self.stats.device_frees += 1;
                    }
                    Err(e) => {
                        // The block's state is unknown: it is neither cached nor counted free.
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Takes over the blocks of `other` (a graph's pool whose graph and tensors are gone): its
    /// cached blocks become ours, counted as reserved here.
    pub fn absorb(&mut self, other: CachingAllocator) {
        debug_assert_eq!(
            other.stats.bytes_in_use, 0,
            "no block of the pool is in use"
        );
        self.stats.bytes_reserved += other.stats.bytes_reserved;
        self.stats.device_allocations += other.stats.device_allocations;
        for (size, ptrs) in other.free {
            self.free.entry(size).or_default().extend(ptrs);
        }
    }

    /// The error of an allocation that failed again after every cache was released.
    pub fn out_of_memory(&self, api: &AclApi, bytes: usize, cause: AclError) -> AclError {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers; failure leaves them 0, which the message shows.
        unsafe {
            (api.core.aclrtGetMemInfo)(crate::acl::types::ACL_HBM_MEM, &mut free, &mut total)
        };
        let in_use = self.stats.bytes_in_use;
        let cause = cause.with_context(|| {
            format!(
                "allocating {bytes} bytes (size class {}): {in_use} bytes in use by tensors, cache released; device reports {free} of {total} bytes free",
                size_class(bytes),
            )
        });
        AclError::OutOfMemory {
            requested: bytes,
            in_use,
            free,
            capacity: total,
            cause: Box::new(cause),
        }
    }
}

/// Whether `e` is the device running out of memory (worth releasing caches and retrying).
pub fn is_out_of_memory(e: &AclError) -> bool {
    e.code().is_some_and(is_out_of_memory_status)
}

/// The statuses CANN reports an exhausted device memory with: which one depends on the CANN
/// version and the path that failed (`../shared/ascend/acl-abi.md` §5.1, §5.2), so all count.
pub fn is_out_of_memory_status(code: i32) -> bool {
    matches!(
        code,
        ACL_ERROR_RT_MEMORY_ALLOCATION | ACL_ERROR_RT_DEVICE_OOM | ACL_ERROR_BAD_ALLOC
    )
}

fn malloc(api: &AclApi, size: usize) -> AclResult<*mut c_void> {
    let mut ptr = std::ptr::null_mut();
    // SAFETY: `ptr` is a valid out-pointer.
    let status = unsafe { (api.core.aclrtMalloc)(&mut ptr, size, ACL_MEM_MALLOC_HUGE_FIRST) };
    api.check(status, "aclrtMalloc")?;
    Ok(ptr)
}
