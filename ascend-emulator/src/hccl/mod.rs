//! The emulated HCCL: collectives and point-to-point transfers between the emulated NPUs of this
//! process (`HcclCommInitAll`), or between processes through the root's hub
//! (`HcclGetRootInfo`/`HcclCommInitRootInfo`), with HCCL's C signatures.
//!
//! - `api.rs`: the C functions: argument checks with HCCL's result codes, then the rank's part
//!   queued on its stream (asynchronous, as on the device).
//! - `comm.rs`: communicators, the connection of `HcclCommInitAll` ranks at their first
//!   transfers, the matching of parts by sequence number, the in-process rendezvous and
//!   `HCCL_EXEC_TIMEOUT`.
//! - `semantics.rs`: what each transfer computes, Atlas A2's dtype and reduce-op support, the
//!   check that the ranks' parameters match, and the link traffic of each algorithm.
//! - `net.rs`: the hub and links of root-info communicators (TCP on `HCCL_IF_IP`).
//! - `traffic.rs`: the traffic counters ([`hccl_counters`]).

mod api;
mod comm;
mod net;
mod semantics;
mod traffic;

use std::ffi::c_void;

use ascend_acl::table::SymbolSource;

pub use semantics::{Kind, Traffic};
pub use traffic::{hccl_counters, HcclCounters, KindTraffic};

/// The emulated HCCL functions under their C names.
pub mod exports {
    pub use super::api::*;
}

/// The emulated HCCL as a symbol source for `ascend_acl::hccl::HcclApi`.
pub struct EmulatedHccl;

macro_rules! emulated_hccl_symbols {
    (
        required { $(fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)* }
        optional { $(fn $oname:ident($($oarg:ident: $oty:ty),*) -> $oret:ty;)* }
    ) => {
        fn emulated_symbol(name: &str) -> Option<*const c_void> {
            // Each entry is bound to its declared signature first, so a mismatch between the
            // list and the emulation fails to compile.
            Some(match name {
                $(stringify!($name) => { let f: unsafe extern "C" fn($($ty),*) -> $ret = exports::$name; f as *const c_void })*
                $(stringify!($oname) => { let f: unsafe extern "C" fn($($oty),*) -> $oret = exports::$oname; f as *const c_void })*
                _ => return None,
            })
        }
    };
}
ascend_acl::hccl_function_list!(emulated_hccl_symbols);

impl SymbolSource for EmulatedHccl {
    fn lookup(&self, name: &str) -> Option<*const c_void> {
        emulated_symbol(name)
    }

    fn describe(&self) -> String {
        "emulated HCCL".into()
    }
}
