//! The arrays `aclGetViewShape` returns: nnopbase allocates them with C++ `new[]` and the
//! caller frees them with `delete[]` (acl-abi.md 6.2), which Rust reaches through a small C++
//! helper compiled with the crate.

extern "C" {
    fn ascend_acl_new_i64_array(n: usize) -> *mut i64;
    fn ascend_acl_delete_i64_array(p: *mut i64);
    fn ascend_acl_i64_arrays_live() -> usize;
}

/// An array of `n` `int64_t` allocated with `new[]`, as nnopbase allocates it (for an
/// implementation of nnopbase, such as the emulated one).
pub fn new_array(n: usize) -> *mut i64 {
    // SAFETY: plain allocation.
    unsafe { ascend_acl_new_i64_array(n) }
}

/// Frees an array nnopbase returned.
///
/// # Safety
/// `p` came from `aclGetViewShape` (or [`new_array`]) and is freed once.
pub unsafe fn delete_array(p: *mut i64) {
    // SAFETY: the caller's contract.
    unsafe { ascend_acl_delete_i64_array(p) }
}

/// Arrays allocated by [`new_array`] and not yet freed (a leak check for the emulated runtime,
/// whose arrays all come from it).
pub fn live_arrays() -> usize {
    // SAFETY: plain query.
    unsafe { ascend_acl_i64_arrays_live() }
}
