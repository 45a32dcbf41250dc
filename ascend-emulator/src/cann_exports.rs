//! The emulated runtime under CANN's symbol names (feature `cann-exports`), so that the crate
//! built as a shared library (`cargo rustc --crate-type cdylib --features cann-exports`) stands
//! in for CANN's libraries.
//!
//! Every AscendCL, nnopbase and aclnn function in `ascend_acl::acl_function_list!` is exported
//! here under its C name and with its C signature, and forwards to the same function in
//! [`crate::exports`]; so is every HCCL function of `ascend_acl::hccl_function_list!` (to the
//! emulated HCCL), for the library's use as `libhccl.so`. Symlinked as `libascendcl.so`, `libnnopbase.so` and `libopapi.so`, the
//! library lets CI exercise the real loader (`dlopen` and symbol lookup by name,
//! `ascend_acl::loader::CannLibraries`) without a CANN installation; see `tests/loader.rs`.
//!
//! A feature, not always on: an application that links the emulator and later opens real CANN
//! must not offer CANN's libraries these names.
//!
//! The wrappers are generated from the same list as the function table, and each one calls the
//! emulated function with the list's argument types and return type, so a name or signature
//! that differs between the list and the emulation fails to compile.
//!
//! The library carries its own copy of the emulated runtime's state: all three library names
//! must resolve to this one file so that the dynamic loader maps it once and they share it.
#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]

use ascend_acl::types::*;

macro_rules! export_cann_symbols {
    (
        runtime { $(fn $rname:ident($($rarg:ident: $rty:ty),*) -> $rret:ty;)* }
        nnopbase { $(fn $bname:ident($($barg:ident: $bty:ty),*) -> $bret:ty;)* }
        optional { $(fn $xname:ident($($xarg:ident: $xty:ty),*) -> $xret:ty;)* }
        graph { $(fn $gname:ident($($garg:ident: $gty:ty),*) -> $gret:ty;)* }
        ops { $($op:ident / $ws:ident($($oarg:ident: $oty:ty),*);)* }
    ) => {
        $(
            #[doc = concat!("`", stringify!($rname), "` (libascendcl), forwarded to the emulated runtime.")]
            #[no_mangle]
            pub unsafe extern "C" fn $rname($($rarg: $rty),*) -> $rret {
                crate::exports::$rname($($rarg),*)
            }
        )*
        $(
            #[doc = concat!("`", stringify!($bname), "` (libnnopbase), forwarded to the emulated runtime.")]
            #[no_mangle]
            pub unsafe extern "C" fn $bname($($barg: $bty),*) -> $bret {
                crate::exports::$bname($($barg),*)
            }
        )*
        $(
            #[doc = concat!("`", stringify!($xname), "` (libnnopbase), forwarded to the emulated runtime.")]
            #[no_mangle]
            pub unsafe extern "C" fn $xname($($xarg: $xty),*) -> $xret {
                crate::exports::$xname($($xarg),*)
            }
        )*
        $(
            #[doc = concat!("`", stringify!($gname), "` (libascendcl), forwarded to the emulated runtime.")]
            #[no_mangle]
            pub unsafe extern "C" fn $gname($($garg: $gty),*) -> $gret {
                crate::exports::$gname($($garg),*)
            }
        )*
        $(
            #[doc = concat!("`", stringify!($ws), "` (libopapi): phase one of `", stringify!($op), "`, forwarded to the emulated runtime.")]
            #[no_mangle]
            pub unsafe extern "C" fn $ws(
                $($oarg: $oty,)*
                workspace_size: *mut u64,
                executor: *mut *mut aclOpExecutor,
            ) -> aclnnStatus {
                crate::exports::$ws($($oarg,)* workspace_size, executor)
            }

            #[doc = concat!("`", stringify!($op), "` (libopapi): phase two, forwarded to the emulated runtime.")]
            #[no_mangle]
            pub unsafe extern "C" fn $op(
                workspace: *mut ::std::ffi::c_void,
                workspace_size: u64,
                executor: *mut aclOpExecutor,
                stream: aclrtStream,
            ) -> aclnnStatus {
                crate::exports::$op(workspace, workspace_size, executor, stream)
            }
        )*
    };
}

ascend_acl::acl_function_list!(export_cann_symbols);

macro_rules! export_hccl_symbols {
    (
        required { $(fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)* }
        optional { $(fn $oname:ident($($oarg:ident: $oty:ty),*) -> $oret:ty;)* }
    ) => {
        $(
            #[doc = concat!("`", stringify!($name), "` (libhccl), forwarded to the emulated HCCL.")]
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
                crate::hccl::exports::$name($($arg),*)
            }
        )*
        $(
            #[doc = concat!("`", stringify!($oname), "` (libhccl), forwarded to the emulated HCCL.")]
            #[no_mangle]
            pub unsafe extern "C" fn $oname($($oarg: $oty),*) -> $oret {
                crate::hccl::exports::$oname($($oarg),*)
            }
        )*
    };
}

ascend_acl::hccl_function_list!(export_hccl_symbols);

/// The emulation's allocator debug hook (`ascend_acl::table::DEBUG_BLOCK_FREED`), which CANN's
/// libraries do not export.
#[no_mangle]
pub unsafe extern "C" fn ascendEmuDebugBlockFreed(ptr: *mut std::ffi::c_void) -> aclError {
    crate::exports::ascendEmuDebugBlockFreed(ptr)
}
