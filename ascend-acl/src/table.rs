//! The function table: typed pointers to every AscendCL/aclnn function the backend calls,
//! filled from a [`SymbolSource`] (CANN's libraries or the emulated runtime).

use std::ffi::{c_void, CStr};
use std::sync::OnceLock;

use super::error::{AclError, AclResult};
use super::types::*;

/// Where the table's symbols come from.
pub trait SymbolSource: Send + Sync {
    /// Looks up an exported function by its C name.
    fn lookup(&self, name: &str) -> Option<*const c_void>;
    /// Which implementation this is, for `Ascend::name` and messages.
    fn describe(&self) -> String;
}

fn require(source: &dyn SymbolSource, name: &str) -> AclResult<*const c_void> {
    source.lookup(name).ok_or_else(|| {
        AclError::Load(format!(
            "{} does not export the required function {name}",
            source.describe()
        ))
    })
}

/// Phase two of every aclnn operator: launch the executor on a stream.
pub type Phase2Fn =
    unsafe extern "C" fn(*mut c_void, u64, *mut aclOpExecutor, aclrtStream) -> aclnnStatus;

/// An aclnn operator's two entry points, resolved on first use.
pub struct LazyOp<F> {
    cell: OnceLock<Option<(F, Phase2Fn)>>,
}

impl<F> Default for LazyOp<F> {
    fn default() -> Self {
        Self {
            cell: OnceLock::new(),
        }
    }
}

impl<F: Copy> LazyOp<F> {
    /// Resolves (once) and returns the phase-one and phase-two functions.
    ///
    /// # Safety
    /// `F` must be the exact C signature of `phase1` as the source exports it; the generated
    /// table guarantees this.
    pub unsafe fn resolve(
        &self,
        source: &dyn SymbolSource,
        op: &'static str,
        phase1: &'static str,
    ) -> AclResult<(F, Phase2Fn)> {
        let found = self.cell.get_or_init(|| {
            let p1 = source.lookup(phase1)?;
            let p2 = source.lookup(op)?;
            // SAFETY: both are function pointers exported under these names with these
            // signatures (the caller's contract); data and function pointers share a size here.
            unsafe {
                Some((
                    std::mem::transmute_copy::<*const c_void, F>(&p1),
                    std::mem::transmute::<*const c_void, Phase2Fn>(p2),
                ))
            }
        });
        found.ok_or(AclError::MissingOp { op, symbol: phase1 })
    }
}

macro_rules! define_table {
    (
        runtime { $(fn $rname:ident($($rarg:ident: $rty:ty),*) -> $rret:ty;)* }
        nnopbase { $(fn $bname:ident($($barg:ident: $bty:ty),*) -> $bret:ty;)* }
        optional { $(fn $xname:ident($($xarg:ident: $xty:ty),*) -> $xret:ty;)* }
        graph { $(fn $gname:ident($($garg:ident: $gty:ty),*) -> $gret:ty;)* }
        ops { $($op:ident / $ws:ident($($oarg:ident: $oty:ty),*);)* }
    ) => {
        /// Runtime (`libascendcl`) and descriptor (`libnnopbase`) functions, resolved at load.
        #[allow(non_snake_case, missing_docs)]
        pub struct CoreFns {
            $(pub $rname: unsafe extern "C" fn($($rty),*) -> $rret,)*
            $(pub $bname: unsafe extern "C" fn($($bty),*) -> $bret,)*
        }

        impl CoreFns {
            fn resolve(source: &dyn SymbolSource) -> AclResult<Self> {
                // SAFETY: each symbol is transmuted to the signature the function list declares.
                unsafe {
                    Ok(Self {
                        $($rname: std::mem::transmute::<*const c_void, unsafe extern "C" fn($($rty),*) -> $rret>(require(source, stringify!($rname))?),)*
                        $($bname: std::mem::transmute::<*const c_void, unsafe extern "C" fn($($bty),*) -> $bret>(require(source, stringify!($bname))?),)*
                    })
                }
            }
        }

        /// Functions a library may lack, resolved at load (`None` when missing).
        #[allow(non_snake_case, missing_docs)]
        pub struct OptionalFns {
            $(pub $xname: Option<unsafe extern "C" fn($($xty),*) -> $xret>,)*
        }

        impl OptionalFns {
            fn resolve(source: &dyn SymbolSource) -> Self {
                // SAFETY: each symbol is transmuted to the signature the function list declares.
                unsafe {
                    Self {
                        $($xname: source.lookup(stringify!($xname)).map(|p| std::mem::transmute::<*const c_void, unsafe extern "C" fn($($xty),*) -> $xret>(p)),)*
                    }
                }
            }
        }

        /// The ACL graph functions (stream capture and replay), all present or none usable.
        #[allow(non_snake_case, missing_docs)]
        pub struct GraphFns {
            $(pub $gname: unsafe extern "C" fn($($gty),*) -> $gret,)*
        }

        impl GraphFns {
            /// The group, or the names the source lacks.
            fn resolve(source: &dyn SymbolSource) -> Result<Self, String> {
                let missing: Vec<&str> = [$(stringify!($gname)),*]
                    .into_iter()
                    .filter(|name| source.lookup(name).is_none())
                    .collect();
                if !missing.is_empty() {
                    return Err(format!(
                        "{} does not export {} (ACL graph capture needs CANN 8.1.RC1 or later)",
                        source.describe(),
                        missing.join(", ")
                    ));
                }
                // SAFETY: each symbol exists (checked above) and is transmuted to the signature
                // the function list declares.
                unsafe {
                    Ok(Self {
                        $($gname: std::mem::transmute::<*const c_void, unsafe extern "C" fn($($gty),*) -> $gret>(source.lookup(stringify!($gname)).expect("checked above")),)*
                    })
                }
            }
        }

        /// aclnn operators (phase one), each resolved on first use.
        #[allow(non_snake_case, missing_docs)]
        #[derive(Default)]
        pub struct OpFns {
            $(pub $op: LazyOp<unsafe extern "C" fn($($oty,)* *mut u64, *mut *mut aclOpExecutor) -> aclnnStatus>,)*
        }
    };
}
crate::acl_function_list!(define_table);

/// The emulated runtime's debug hook (not a CANN function, so CANN's libraries lack it): a
/// caching allocator reports a block it took back for reuse without `aclrtFree`, so that a graph
/// replay still addressing it is caught as a use of a freed buffer.
pub const DEBUG_BLOCK_FREED: &str = "ascendEmuDebugBlockFreed";

/// The C type of [`DEBUG_BLOCK_FREED`].
pub type DebugBlockFreedFn = unsafe extern "C" fn(ptr: *mut c_void) -> aclError;

/// The loaded table: one per process and implementation.
pub struct AclApi {
    source: Box<dyn SymbolSource>,
    /// Functions resolved at load.
    pub core: CoreFns,
    /// Functions resolved at load if the source has them.
    pub optional: OptionalFns,
    /// The ACL graph functions, or why the source has no graph support (names it lacks).
    pub graph: Result<GraphFns, String>,
    /// Operators resolved lazily.
    pub ops: OpFns,
    /// [`DEBUG_BLOCK_FREED`] where the source has it (the emulated runtime).
    pub debug_block_freed: Option<DebugBlockFreedFn>,
}

impl AclApi {
    /// Resolves the required functions of `source`.
    pub fn new(source: Box<dyn SymbolSource>) -> AclResult<Self> {
        let core = CoreFns::resolve(&*source)?;
        let optional = OptionalFns::resolve(&*source);
        let graph = GraphFns::resolve(&*source);
        let debug_block_freed = source.lookup(DEBUG_BLOCK_FREED).map(|p| {
            // SAFETY: a source that exports the name gives it this signature.
            unsafe { std::mem::transmute::<*const c_void, DebugBlockFreedFn>(p) }
        });
        Ok(Self {
            source,
            core,
            optional,
            graph,
            ops: OpFns::default(),
            debug_block_freed,
        })
    }

    /// The symbol source, for lazy operator resolution.
    pub fn source(&self) -> &dyn SymbolSource {
        &*self.source
    }

    /// Which implementation fills this table.
    pub fn describe(&self) -> String {
        self.source.describe()
    }

    /// The runtime's explanation of the last failure on this thread.
    pub fn recent_error_message(&self) -> String {
        // SAFETY: aclGetRecentErrMsg returns NULL or a NUL-terminated string that stays valid
        // until the next ACL call on this thread; it is copied at once.
        unsafe {
            let p = (self.core.aclGetRecentErrMsg)();
            if p.is_null() {
                String::new()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        }
    }

    /// Turns a status into a result, collecting the error message on failure.
    pub fn check(&self, code: i32, function: &str) -> AclResult<()> {
        if code == status::ACL_SUCCESS {
            Ok(())
        } else {
            Err(AclError::Call {
                code,
                function: function.to_string(),
                message: self.recent_error_message(),
                context: None,
            })
        }
    }
}
