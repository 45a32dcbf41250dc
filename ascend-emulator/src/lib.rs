//! ascend-emulator: an emulated Ascend NPU, modelled on an Atlas A2 (Ascend910B2) device.
//!
//! - The emulated runtime: AscendCL, the aclnn object layer and the aclnn operators the backend
//!   calls, implemented in-process with CANN's C signatures and documented semantics. It is
//!   reached only through `ascend-acl`'s function table, exactly like CANN: [`EmulatedRuntime`]
//!   is a [`SymbolSource`] whose symbols are generated from the same function list as the table.
//! - The host emulation of the Ascend C API (`ascendc/`, C++): kernels written against the real
//!   API compile unchanged against its `kernel_operator.h`; its runner enforces the hardware's
//!   rules. [`kernel_runner`] binds a kernel library built that way to the emulated machine.
//! - The emulated HCCL ([`hccl`]): collectives between the emulated NPUs of a process, or of
//!   several processes through a root-info hub, reached through `ascend-acl`'s HCCL table.
//! - With the `cann-exports` feature, every function of the list is also exported under its C
//!   name, so the crate built as a shared library stands in for CANN's libraries (the loader
//!   test opens it through the real loader).
#![warn(missing_docs)]

#[cfg(feature = "cann-exports")]
mod cann_exports;
mod counters;
mod elementwise;
mod fault;
mod fia;
mod flash;
mod gating;
mod graph;
mod grouped;
pub mod hccl;
mod index;
pub mod kernel_runner;
mod kernels;
mod kv_cache;
mod machine;
mod memory;
mod meta;
mod nn;
mod norm;
mod numerics;
mod objects;
pub(crate) mod ops;
mod quant;
mod random;
mod reduce;
mod rope;
mod routing;
mod runtime_api;
mod sample;
mod stream;
mod swiglu;
mod view;

use std::ffi::c_void;

pub use counters::{
    aclnn_launches_by_op, aclnn_launches_of, device_to_host_copies, host_to_device_copies,
};
pub use counters::{work_counters, WorkCounters};
pub use machine::{
    set_device_memory_limit, set_out_of_memory_status, DEFAULT_CANN, ENV_CANN, ENV_DEVICES,
    ENV_HBM_MIB, ENV_THREADS,
};

use ascend_acl::release::{introduced_in, CannRelease};
use ascend_acl::table::SymbolSource;

/// The emulated functions under their C names, with their C signatures, for the emulated CANN
/// shared library built from the same list.
pub mod exports {
    pub use super::elementwise::*;
    pub use super::fia::*;
    pub use super::flash::*;
    pub use super::gating::*;
    pub use super::graph::*;
    pub use super::grouped::*;
    pub use super::index::*;
    pub use super::kv_cache::*;
    pub use super::nn::*;
    pub use super::norm::*;
    pub use super::ops::*;
    pub use super::quant::*;
    pub use super::random::*;
    pub use super::reduce::*;
    pub use super::rope::*;
    pub use super::routing::*;
    pub use super::runtime_api::*;
    pub use super::sample::*;
    pub use super::swiglu::*;
}

/// Page-locked host buffers (`aclrtMallocHost`) allocated and not freed, so that tests can see
/// a leak.
pub fn pinned_host_buffers() -> usize {
    machine::machine().pinned.live()
}

/// Events created (`aclrtCreateEvent`, `aclrtCreateEventWithFlag`) and not destroyed, so that
/// tests can see a leak.
pub fn live_events() -> usize {
    machine::machine().events.lock().unwrap().len()
}

/// The emulated runtime as a symbol source for the function table: the functions of the CANN
/// release [`ENV_CANN`] names (default [`DEFAULT_CANN`]).
pub struct EmulatedRuntime;

/// The emulated runtime standing for one CANN release: exports only the functions that release
/// declares (`ascend_acl::release::introduced_in`).
pub struct EmulatedRelease(pub CannRelease);

macro_rules! emulated_symbols {
    (
        runtime { $(fn $rname:ident($($rarg:ident: $rty:ty),*) -> $rret:ty;)* }
        nnopbase { $(fn $bname:ident($($barg:ident: $bty:ty),*) -> $bret:ty;)* }
        optional { $(fn $xname:ident($($xarg:ident: $xty:ty),*) -> $xret:ty;)* }
        graph { $(fn $gname:ident($($garg:ident: $gty:ty),*) -> $gret:ty;)* }
        ops { $($op:ident / $ws:ident($($oarg:ident: $oty:ty),*);)* }
    ) => {
        #[allow(unused_imports)]
        fn emulated_symbol(name: &str) -> Option<*const c_void> {
            use ascend_acl::types::*;
            use ascend_acl::table::Phase2Fn;
            // Each entry is first bound to its declared signature, so a mismatch between the
            // list and the emulation fails to compile.
            Some(match name {
                $(stringify!($rname) => { let f: unsafe extern "C" fn($($rty),*) -> $rret = exports::$rname; f as *const c_void })*
                $(stringify!($bname) => { let f: unsafe extern "C" fn($($bty),*) -> $bret = exports::$bname; f as *const c_void })*
                $(stringify!($xname) => { let f: unsafe extern "C" fn($($xty),*) -> $xret = exports::$xname; f as *const c_void })*
                $(stringify!($gname) => { let f: unsafe extern "C" fn($($gty),*) -> $gret = exports::$gname; f as *const c_void })*
                $(stringify!($ws) => { let f: unsafe extern "C" fn($($oty,)* *mut u64, *mut *mut aclOpExecutor) -> aclnnStatus = exports::$ws; f as *const c_void })*
                $(stringify!($op) => { let f: Phase2Fn = exports::$op; f as *const c_void })*
                _ => return None,
            })
        }
    };
}
ascend_acl::acl_function_list!(emulated_symbols);

impl SymbolSource for EmulatedRuntime {
    fn lookup(&self, name: &str) -> Option<*const c_void> {
        EmulatedRelease(machine::machine().cann).lookup(name)
    }

    fn describe(&self) -> String {
        format!(
            "emulated Atlas A2 ({})",
            machine::machine().soc.name.to_string_lossy()
        )
    }
}

impl SymbolSource for EmulatedRelease {
    fn lookup(&self, name: &str) -> Option<*const c_void> {
        if name == ascend_acl::table::DEBUG_BLOCK_FREED {
            let f: ascend_acl::table::DebugBlockFreedFn = exports::ascendEmuDebugBlockFreed;
            return Some(f as *const c_void);
        }
        (introduced_in(name) <= self.0)
            .then(|| emulated_symbol(name))
            .flatten()
    }

    fn describe(&self) -> String {
        format!(
            "emulated Atlas A2 ({}, CANN {})",
            machine::machine().soc.name.to_string_lossy(),
            self.0
        )
    }
}
