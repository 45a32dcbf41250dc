//! HCCL, CANN's collective communication library, through a table of C functions loaded at run
//! time (`../shared/ascend/hccl-abi.md`), like the ACL table: from `libhccl.so` (and, on CANN
//! 9.x, `libhcomm.so`, which took over communicator management) or from any in-process
//! [`SymbolSource`] (the emulated HCCL of `ascend-emulator`).
//!
//! HCCL is optional: a process that never builds a communicator never opens it, and a machine
//! without it runs single-device work as before; multi-device work then fails with
//! [`AclError::Load`] naming what is missing.
//!
//! - [`hccl_function_list!`](crate::hccl_function_list): every HCCL function the backend calls,
//!   with its C signature; the table and the emulator's symbol map are generated from it.
//! - [`HcclApi`]: the typed table; [`HcclApi::check`] turns an `HcclResult` into an
//!   [`AclError::Hccl`] carrying `HcclGetErrorString`'s text.
//! - [`CommConfig`]: `HcclCommConfig`, written the way the library's own inline initialiser
//!   does (the library does not export it), avoiding the traps of older parsers.

use std::ffi::{c_void, CStr};
use std::path::{Path, PathBuf};

use crate::dtype::DataType;
use crate::error::{AclError, AclResult};
use crate::loader::{search_dirs, SharedLibrary};
use crate::table::SymbolSource;

/// `HcclComm`: an opaque communicator handle.
#[allow(non_camel_case_types)]
pub type HcclComm = *mut c_void;
/// `HcclResult` (a C enum): status of every HCCL call.
pub type HcclResult = i32;

/// Size of `HcclRootInfo`, the same from CANN 6.3.RC1 to 9.x.
pub const HCCL_ROOT_INFO_BYTES: usize = 4108;

/// `HcclRootInfo`: the opaque bytes the root rank hands every other rank out of band.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct HcclRootInfo {
    /// The bytes, to be copied unchanged between processes.
    pub internal: [u8; HCCL_ROOT_INFO_BYTES],
}

impl Default for HcclRootInfo {
    fn default() -> Self {
        Self {
            internal: [0; HCCL_ROOT_INFO_BYTES],
        }
    }
}

impl std::fmt::Debug for HcclRootInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HcclRootInfo({} bytes)", HCCL_ROOT_INFO_BYTES)
    }
}

/// `HcclResult` values (those of CANN 8.0.0; later releases add codes after 21).
#[allow(missing_docs)]
pub mod result {
    pub const HCCL_SUCCESS: i32 = 0;
    pub const HCCL_E_PARA: i32 = 1;
    pub const HCCL_E_PTR: i32 = 2;
    pub const HCCL_E_MEMORY: i32 = 3;
    pub const HCCL_E_INTERNAL: i32 = 4;
    pub const HCCL_E_NOT_SUPPORT: i32 = 5;
    pub const HCCL_E_NOT_FOUND: i32 = 6;
    pub const HCCL_E_UNAVAIL: i32 = 7;
    pub const HCCL_E_SYSCALL: i32 = 8;
    pub const HCCL_E_TIMEOUT: i32 = 9;
    pub const HCCL_E_OPEN_FILE_FAILURE: i32 = 10;
    pub const HCCL_E_TCP_CONNECT: i32 = 11;
    pub const HCCL_E_ROCE_CONNECT: i32 = 12;
    pub const HCCL_E_TCP_TRANSFER: i32 = 13;
    pub const HCCL_E_ROCE_TRANSFER: i32 = 14;
    pub const HCCL_E_RUNTIME: i32 = 15;
    pub const HCCL_E_DRV: i32 = 16;
    pub const HCCL_E_PROFILING: i32 = 17;
    pub const HCCL_E_CCE: i32 = 18;
    pub const HCCL_E_NETWORK: i32 = 19;
    pub const HCCL_E_AGAIN: i32 = 20;
    pub const HCCL_E_REMOTE: i32 = 21;

    /// The header name of a result code, for messages (codes added after 8.0.0, whose values
    /// moved between releases, are not named).
    pub fn name(code: i32) -> &'static str {
        const NAMES: [&str; 22] = [
            "HCCL_SUCCESS",
            "HCCL_E_PARA",
            "HCCL_E_PTR",
            "HCCL_E_MEMORY",
            "HCCL_E_INTERNAL",
            "HCCL_E_NOT_SUPPORT",
            "HCCL_E_NOT_FOUND",
            "HCCL_E_UNAVAIL",
            "HCCL_E_SYSCALL",
            "HCCL_E_TIMEOUT",
            "HCCL_E_OPEN_FILE_FAILURE",
            "HCCL_E_TCP_CONNECT",
            "HCCL_E_ROCE_CONNECT",
            "HCCL_E_TCP_TRANSFER",
            "HCCL_E_ROCE_TRANSFER",
            "HCCL_E_RUNTIME",
            "HCCL_E_DRV",
            "HCCL_E_PROFILING",
            "HCCL_E_CCE",
            "HCCL_E_NETWORK",
            "HCCL_E_AGAIN",
            "HCCL_E_REMOTE",
        ];
        usize::try_from(code)
            .ok()
            .and_then(|i| NAMES.get(i))
            .copied()
            .unwrap_or("unnamed HcclResult")
    }
}

/// `HcclDataType` values (those present in every release from 6.3.RC1).
#[allow(missing_docs)]
pub mod data_type {
    pub const HCCL_DATA_TYPE_INT8: i32 = 0;
    pub const HCCL_DATA_TYPE_INT16: i32 = 1;
    pub const HCCL_DATA_TYPE_INT32: i32 = 2;
    pub const HCCL_DATA_TYPE_FP16: i32 = 3;
    pub const HCCL_DATA_TYPE_FP32: i32 = 4;
    pub const HCCL_DATA_TYPE_INT64: i32 = 5;
    pub const HCCL_DATA_TYPE_UINT64: i32 = 6;
    pub const HCCL_DATA_TYPE_UINT8: i32 = 7;
    pub const HCCL_DATA_TYPE_UINT16: i32 = 8;
    pub const HCCL_DATA_TYPE_UINT32: i32 = 9;
    pub const HCCL_DATA_TYPE_FP64: i32 = 10;
    pub const HCCL_DATA_TYPE_BFP16: i32 = 11;

    /// (code, bytes per element, header name), for the emulation and messages.
    pub const ALL: [(i32, usize, &str); 12] = [
        (HCCL_DATA_TYPE_INT8, 1, "HCCL_DATA_TYPE_INT8"),
        (HCCL_DATA_TYPE_INT16, 2, "HCCL_DATA_TYPE_INT16"),
        (HCCL_DATA_TYPE_INT32, 4, "HCCL_DATA_TYPE_INT32"),
        (HCCL_DATA_TYPE_FP16, 2, "HCCL_DATA_TYPE_FP16"),
        (HCCL_DATA_TYPE_FP32, 4, "HCCL_DATA_TYPE_FP32"),
        (HCCL_DATA_TYPE_INT64, 8, "HCCL_DATA_TYPE_INT64"),
        (HCCL_DATA_TYPE_UINT64, 8, "HCCL_DATA_TYPE_UINT64"),
        (HCCL_DATA_TYPE_UINT8, 1, "HCCL_DATA_TYPE_UINT8"),
        (HCCL_DATA_TYPE_UINT16, 2, "HCCL_DATA_TYPE_UINT16"),
        (HCCL_DATA_TYPE_UINT32, 4, "HCCL_DATA_TYPE_UINT32"),
        (HCCL_DATA_TYPE_FP64, 8, "HCCL_DATA_TYPE_FP64"),
        (HCCL_DATA_TYPE_BFP16, 2, "HCCL_DATA_TYPE_BFP16"),
    ];

    /// Bytes per element and header name of a code, if it is one.
    pub fn facts(code: i32) -> Option<(usize, &'static str)> {
        ALL.iter()
            .find(|(c, _, _)| *c == code)
            .map(|&(_, size, name)| (size, name))
    }
}

/// `HcclReduceOp` values.
#[allow(missing_docs)]
pub mod reduce_op {
    pub const HCCL_REDUCE_SUM: i32 = 0;
    pub const HCCL_REDUCE_PROD: i32 = 1;
    pub const HCCL_REDUCE_MAX: i32 = 2;
    pub const HCCL_REDUCE_MIN: i32 = 3;

    /// The header name of an op, for messages.
    pub fn name(op: i32) -> &'static str {
        match op {
            HCCL_REDUCE_SUM => "HCCL_REDUCE_SUM",
            HCCL_REDUCE_PROD => "HCCL_REDUCE_PROD",
            HCCL_REDUCE_MAX => "HCCL_REDUCE_MAX",
            HCCL_REDUCE_MIN => "HCCL_REDUCE_MIN",
            _ => "unknown HcclReduceOp",
        }
    }
}

/// The HCCL type of a device element type. There is no bool: torch_npu sends bools as UINT8,
/// which is also how this backend stores them.
pub fn hccl_data_type(dtype: DataType) -> i32 {
    use data_type::*;
    match dtype {
        DataType::F64 => HCCL_DATA_TYPE_FP64,
        DataType::F32 => HCCL_DATA_TYPE_FP32,
        DataType::F16 => HCCL_DATA_TYPE_FP16,
        DataType::BF16 => HCCL_DATA_TYPE_BFP16,
        DataType::I64 => HCCL_DATA_TYPE_INT64,
        DataType::I32 => HCCL_DATA_TYPE_INT32,
        DataType::I16 => HCCL_DATA_TYPE_INT16,
        DataType::I8 => HCCL_DATA_TYPE_INT8,
        DataType::U64 => HCCL_DATA_TYPE_UINT64,
        DataType::U32 => HCCL_DATA_TYPE_UINT32,
        DataType::U16 => HCCL_DATA_TYPE_UINT16,
        DataType::U8 | DataType::Bool => HCCL_DATA_TYPE_UINT8,
    }
}

/// Environment variables HCCL reads (and the emulated HCCL with it).
pub mod env {
    /// Seconds a rank waits for its peers inside a collective; 0 waits forever (default 1836).
    pub const HCCL_EXEC_TIMEOUT: &str = "HCCL_EXEC_TIMEOUT";
    /// Seconds ranks wait for each other while a communicator is built, in [120, 7200]
    /// (default 120).
    pub const HCCL_CONNECT_TIMEOUT: &str = "HCCL_CONNECT_TIMEOUT";
    /// The host address the root rank listens on for the others (root-info initialisation).
    pub const HCCL_IF_IP: &str = "HCCL_IF_IP";
    /// First of the 32 host ports root-info initialisation may use.
    pub const HCCL_IF_BASE_PORT: &str = "HCCL_IF_BASE_PORT";
    /// Size in MB of each of the two staging buffers a communicator reserves (default 200).
    pub const HCCL_BUFFSIZE: &str = "HCCL_BUFFSIZE";
}

/// `HcclCommConfig` as version 5 lays it out (size 300, 8.1.RC1's header): a v5 struct works
/// on every release that has the `*Config` initialisers, since the library copies
/// `min(size, its own size)` bytes and reads only the fields the given version defines.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct CommConfig {
    bytes: [u8; CommConfig::SIZE],
}

impl CommConfig {
    const SIZE: usize = 300;
    const MAGIC: u32 = 0xF0F0_F0F0;
    const VERSION: u32 = 5;
    /// Offsets of the fields (LP64, `hccl-abi.md` §2.1).
    const BUFFER_SIZE: usize = 24;
    const DETERMINISTIC: usize = 28;
    const COMM_NAME: usize = 32;
    /// `HcclGetCommConfigCapability` values below this lack the name field; torch_npu then
    /// declares the struct 32 bytes long so that very old parsers accept it.
    const CAPABILITY_COMM_NAME: u32 = 2;

    /// A configuration with every field explicitly set, as torch_npu writes it: parsers older
    /// than 8.2.RC1 take the "not set" marker (0xFFFFFFFF) literally, so the buffer size is
    /// always given and deterministic is 0 or 1. `capability` is what
    /// `HcclGetCommConfigCapability` returned (0 when the library lacks it).
    pub fn new(buffer_mb: u32, deterministic: bool, name: &str, capability: u32) -> Self {
        let mut c = Self {
            bytes: [0; Self::SIZE],
        };
        let size = if capability < Self::CAPABILITY_COMM_NAME {
            32
        } else {
            Self::SIZE as u64
        };
        c.put_u64(0, size);
        c.put_u32(8, Self::MAGIC);
        c.put_u32(12, Self::VERSION);
        c.put_u32(Self::BUFFER_SIZE, buffer_mb);
        c.put_u32(Self::DETERMINISTIC, deterministic as u32);
        // Fields of versions 3 to 5 keep the values the inline initialiser gives them.
        c.put_u32(292, u32::MAX);
        c.put_u32(296, u32::MAX);
        let name = name.as_bytes();
        let n = name.len().min(127);
        c.bytes[Self::COMM_NAME..Self::COMM_NAME + n].copy_from_slice(&name[..n]);
        c
    }

    fn put_u32(&mut self, at: usize, v: u32) {
        self.bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }

    fn put_u64(&mut self, at: usize, v: u64) {
        self.bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }

    /// The bytes as the library reads them.
    pub fn as_ptr(&self) -> *const c_void {
        self.bytes.as_ptr() as *const c_void
    }
}

/// A parsed `HcclCommConfig`, as a library reads one (the emulated HCCL uses it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedCommConfig {
    /// The declared size.
    pub size: u64,
    /// The declared version.
    pub version: u32,
    /// `hcclBufferSize` in MB (0xFFFFFFFF = not set).
    pub buffer_mb: u32,
    /// `hcclDeterministic` (0xFFFFFFFF = not set).
    pub deterministic: u32,
    /// `hcclCommName` (version 2 on), empty when unset.
    pub name: String,
}

impl ParsedCommConfig {
    /// Reads the header and the fields of versions 1 and 2 from `ptr`; `None` if the magic is
    /// wrong.
    ///
    /// # Safety
    /// `ptr` points to at least 32 readable bytes, and to `size` bytes as the header declares.
    pub unsafe fn read(ptr: *const u8) -> Option<Self> {
        let u32_at = |at: usize| unsafe { (ptr.add(at) as *const u32).read_unaligned() };
        let size = unsafe { (ptr as *const u64).read_unaligned() };
        if u32_at(8) != CommConfig::MAGIC {
            return None;
        }
        let version = u32_at(12);
        let name = if version >= 2 && size >= 160 {
            let raw = unsafe { std::slice::from_raw_parts(ptr.add(CommConfig::COMM_NAME), 128) };
            let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
            String::from_utf8_lossy(&raw[..end]).into_owned()
        } else {
            String::new()
        };
        Some(Self {
            size,
            version,
            buffer_mb: u32_at(CommConfig::BUFFER_SIZE),
            deterministic: u32_at(CommConfig::DETERMINISTIC),
            name,
        })
    }
}

/// Calls `$callback!` with the HCCL function list: `required` functions exist in every release
/// from 6.3.RC1 and are resolved when the table loads; `optional` ones appeared later (the
/// release is noted) and are probed, as torch_npu does.
#[macro_export]
#[doc(hidden)]
macro_rules! hccl_function_list {
    ($callback:ident) => {
        $callback! {
            required {
                fn HcclGetRootInfo(root_info: *mut $crate::hccl::HcclRootInfo) -> i32;
                fn HcclCommInitRootInfo(n_ranks: u32, root_info: *const $crate::hccl::HcclRootInfo, rank: u32, comm: *mut $crate::hccl::HcclComm) -> i32;
                fn HcclCommDestroy(comm: $crate::hccl::HcclComm) -> i32;
                fn HcclAllReduce(send_buf: *mut ::std::ffi::c_void, recv_buf: *mut ::std::ffi::c_void, count: u64, data_type: i32, op: i32, comm: $crate::hccl::HcclComm, stream: $crate::types::aclrtStream) -> i32;
                fn HcclBroadcast(buf: *mut ::std::ffi::c_void, count: u64, data_type: i32, root: u32, comm: $crate::hccl::HcclComm, stream: $crate::types::aclrtStream) -> i32;
                fn HcclAllGather(send_buf: *mut ::std::ffi::c_void, recv_buf: *mut ::std::ffi::c_void, send_count: u64, data_type: i32, comm: $crate::hccl::HcclComm, stream: $crate::types::aclrtStream) -> i32;
                fn HcclReduceScatter(send_buf: *mut ::std::ffi::c_void, recv_buf: *mut ::std::ffi::c_void, recv_count: u64, data_type: i32, op: i32, comm: $crate::hccl::HcclComm, stream: $crate::types::aclrtStream) -> i32;
                fn HcclAlltoAllV(send_buf: *const ::std::ffi::c_void, send_counts: *const ::std::ffi::c_void, sdispls: *const ::std::ffi::c_void, send_type: i32, recv_buf: *const ::std::ffi::c_void, recv_counts: *const ::std::ffi::c_void, rdispls: *const ::std::ffi::c_void, recv_type: i32, comm: $crate::hccl::HcclComm, stream: $crate::types::aclrtStream) -> i32;
                fn HcclSend(send_buf: *mut ::std::ffi::c_void, count: u64, data_type: i32, dest_rank: u32, comm: $crate::hccl::HcclComm, stream: $crate::types::aclrtStream) -> i32;
                fn HcclRecv(recv_buf: *mut ::std::ffi::c_void, count: u64, data_type: i32, src_rank: u32, comm: $crate::hccl::HcclComm, stream: $crate::types::aclrtStream) -> i32;
            }
            optional {
                // 8.0.RC3
                fn HcclCommInitAll(ndev: u32, devices: *mut i32, comms: *mut $crate::hccl::HcclComm) -> i32;
                // 8.0.RC3
                fn HcclGetCommConfigCapability() -> u32;
                // 8.0.RC1
                fn HcclGetCommAsyncError(comm: $crate::hccl::HcclComm, async_error: *mut i32) -> i32;
                // 8.1.RC1
                fn HcclCommInitRootInfoConfig(n_ranks: u32, root_info: *const $crate::hccl::HcclRootInfo, rank: u32, config: *const ::std::ffi::c_void, comm: *mut $crate::hccl::HcclComm) -> i32;
                // 8.1.RC1
                fn HcclGetRankSize(comm: $crate::hccl::HcclComm, rank_size: *mut u32) -> i32;
                // 8.1.RC1
                fn HcclGetRankId(comm: $crate::hccl::HcclComm, rank: *mut u32) -> i32;
                // 8.1.RC1
                fn HcclGetErrorString(code: i32) -> *const ::std::ffi::c_char;
            }
        }
    };
}

macro_rules! define_hccl_table {
    (
        required { $(fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)* }
        optional { $(fn $oname:ident($($oarg:ident: $oty:ty),*) -> $oret:ty;)* }
    ) => {
        /// HCCL functions present in every supported release, resolved at load.
        #[allow(non_snake_case, missing_docs)]
        pub struct HcclFns {
            $(pub $name: unsafe extern "C" fn($($ty),*) -> $ret,)*
        }

        /// HCCL functions of later releases (`None` when the library lacks them).
        #[allow(non_snake_case, missing_docs)]
        pub struct HcclOptionalFns {
            $(pub $oname: Option<unsafe extern "C" fn($($oty),*) -> $oret>,)*
        }

        fn resolve(source: &dyn SymbolSource) -> AclResult<(HcclFns, HcclOptionalFns)> {
            let require = |name: &str| {
                source.lookup(name).ok_or_else(|| {
                    AclError::Load(format!(
                        "{} does not export the HCCL function {name}",
                        source.describe()
                    ))
                })
            };
            // SAFETY: each symbol is transmuted to the signature the function list declares.
            unsafe {
                Ok((
                    HcclFns {
                        $($name: std::mem::transmute::<*const c_void, unsafe extern "C" fn($($ty),*) -> $ret>(require(stringify!($name))?),)*
                    },
                    HcclOptionalFns {
                        $($oname: source.lookup(stringify!($oname)).map(|p| std::mem::transmute::<*const c_void, unsafe extern "C" fn($($oty),*) -> $oret>(p)),)*
                    },
                ))
            }
        }
    };
}
crate::hccl_function_list!(define_hccl_table);

/// The loaded HCCL table: one per process and implementation.
pub struct HcclApi {
    source: Box<dyn SymbolSource>,
    /// Functions resolved at load.
    pub fns: HcclFns,
    /// Functions of later releases, if the library has them.
    pub optional: HcclOptionalFns,
}

impl HcclApi {
    /// Resolves the functions of `source`.
    pub fn new(source: Box<dyn SymbolSource>) -> AclResult<Self> {
        let (fns, optional) = resolve(&*source)?;
        Ok(Self {
            source,
            fns,
            optional,
        })
    }

    /// Which implementation fills this table.
    pub fn describe(&self) -> String {
        self.source.describe()
    }

    /// The library's text for a result code (`HcclGetErrorString`, or the header name when the
    /// library predates it).
    pub fn error_string(&self, code: HcclResult) -> String {
        let text = self.optional.HcclGetErrorString.and_then(|f| {
            // SAFETY: returns NULL or a static NUL-terminated string.
            let p = unsafe { f(code) };
            (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        });
        text.unwrap_or_else(|| result::name(code).to_string())
    }

    /// Turns a result into an error naming the function and the library's explanation.
    pub fn check(&self, code: HcclResult, function: &str) -> AclResult<()> {
        if code == result::HCCL_SUCCESS {
            Ok(())
        } else {
            Err(AclError::Hccl {
                code,
                function: function.to_string(),
                message: self.error_string(code),
                context: None,
            })
        }
    }

    /// An optional function, or an error naming it and the release that added it.
    pub fn require<F>(&self, f: Option<F>, name: &str, since: &str) -> AclResult<F> {
        f.ok_or_else(|| {
            AclError::Load(format!(
                "{} has no {name} (added in CANN {since}); upgrade CANN",
                self.describe()
            ))
        })
    }
}

/// HCCL's libraries, opened with `dlopen`: `libhccl.so`, and `libhcomm.so` beside it on CANN
/// 9.x, where communicator management moved (a symbol missing from the first is looked up in
/// the second).
pub struct HcclLibraries {
    libs: Vec<SharedLibrary>,
}

impl HcclLibraries {
    /// Opens the libraries from the first of [`search_dirs`] that holds `libhccl.so`, else
    /// through the loader path.
    pub fn open() -> AclResult<Self> {
        let dir = search_dirs()
            .into_iter()
            .find(|d| d.join("libhccl.so").is_file());
        Self::open_in(dir.as_deref())
    }

    /// Opens the libraries from `dir`, or by bare name through the loader path.
    pub fn open_in(dir: Option<&Path>) -> AclResult<Self> {
        let path = |name: &str| dir.map_or_else(|| PathBuf::from(name), |d| d.join(name));
        let hccl = SharedLibrary::open(&path("libhccl.so")).map_err(|e| {
            AclError::Load(format!(
                "HCCL is needed for work across NPUs: {e} (looked in {} and the loader path)",
                search_dirs()
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        let mut libs = vec![hccl];
        libs.extend(SharedLibrary::open(&path("libhcomm.so")).ok());
        Ok(Self { libs })
    }
}

impl SymbolSource for HcclLibraries {
    fn lookup(&self, name: &str) -> Option<*const c_void> {
        self.libs.iter().find_map(|lib| lib.lookup(name))
    }

    fn describe(&self) -> String {
        match self.libs.first() {
            Some(lib) => format!("HCCL ({})", lib.path().display()),
            None => "HCCL".into(),
        }
    }
}
