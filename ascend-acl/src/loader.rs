//! Fills the function table from CANN's shared libraries, loaded at run time.
//!
//! Nothing is linked at build time, so the crate builds and tests without CANN. The libraries
//! are searched in `$ASCEND_HOME_PATH/lib64`, `$ASCEND_TOOLKIT_HOME/lib64`, the usual toolkit
//! install paths, and finally by bare name through the dynamic loader's own path.

use std::ffi::c_void;
use std::path::{Path, PathBuf};

use libloading::Library;

use super::error::{AclError, AclResult};
use super::table::SymbolSource;

/// The libraries that together export the table, in lookup order. Newer CANN releases spread
/// aclnn operators over `libopapi_*.so` beside `libopapi.so`; those are searched too.
const LIBRARIES: [&str; 3] = ["libascendcl.so", "libnnopbase.so", "libopapi.so"];

/// The directories searched for CANN's libraries, most specific first.
pub fn search_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for var in ["ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"] {
        if let Some(home) = std::env::var_os(var) {
            dirs.push(PathBuf::from(home).join("lib64"));
        }
    }
    for fixed in [
        "/usr/local/Ascend/ascend-toolkit/latest/lib64",
        "/usr/local/Ascend/cann/lib64",
        "/usr/local/Ascend/latest/lib64",
    ] {
        dirs.push(PathBuf::from(fixed));
    }
    dirs
}

/// One shared library opened with `dlopen`, as a symbol source of its own.
pub struct SharedLibrary {
    path: PathBuf,
    lib: Library,
}

impl SharedLibrary {
    /// Opens the library at `path` (a bare file name goes through the loader path).
    pub fn open(path: &Path) -> AclResult<Self> {
        // SAFETY: loading a library runs its initialisers, which is what using it means.
        let lib = unsafe { Library::new(path) }
            .map_err(|e| AclError::Library(format!("cannot open {}: {e}", path.display())))?;
        Ok(Self {
            path: path.to_path_buf(),
            lib,
        })
    }

    /// Where the library was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl SymbolSource for SharedLibrary {
    fn lookup(&self, name: &str) -> Option<*const c_void> {
        // SAFETY: only the address is taken here; the caller gives it its declared type.
        unsafe { self.lib.get::<*const c_void>(name.as_bytes()) }
            .ok()
            .map(|s| *s)
            .filter(|p| !p.is_null())
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }
}

/// CANN's libraries, opened with `dlopen`.
pub struct CannLibraries {
    libs: Vec<SharedLibrary>,
}

impl CannLibraries {
    /// Opens the libraries from the first directory of [`search_dirs`] that holds
    /// `libascendcl.so`, else through the loader path.
    pub fn open() -> AclResult<Self> {
        let dirs = search_dirs();
        let dir = dirs.iter().find(|d| d.join(LIBRARIES[0]).is_file());
        Self::open_in(dir.map(PathBuf::as_path)).map_err(|e| match (dir, e) {
            // Extend the reason rather than nest the error, so "cannot load CANN" is said once.
            (None, AclError::Load(reason)) => AclError::Load(format!(
                "{reason}; looked in {} and the loader path (LD_LIBRARY_PATH). Source CANN's set_env.sh or set ASCEND_HOME_PATH",
                dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
            )),
            (_, e) => e,
        })
    }

    /// Opens the libraries from `dir`, or by bare name through the loader path.
    pub fn open_in(dir: Option<&Path>) -> AclResult<Self> {
        let mut libs = Vec::new();
        for name in LIBRARIES {
            let path = dir.map_or_else(|| PathBuf::from(name), |d| d.join(name));
            libs.push(SharedLibrary::open(&path).map_err(as_load)?);
        }
        if let Some(dir) = dir {
            let mut extra: Vec<PathBuf> = std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("libopapi_") && n.ends_with(".so"))
                })
                .collect();
            extra.sort();
            for path in extra {
                libs.push(SharedLibrary::open(&path).map_err(as_load)?);
            }
        }
        Ok(Self { libs })
    }
}

/// A library of CANN's that cannot be opened means CANN cannot be loaded.
fn as_load(e: AclError) -> AclError {
    match e {
        AclError::Library(reason) => AclError::Load(reason),
        other => other,
    }
}

impl SymbolSource for CannLibraries {
    fn lookup(&self, name: &str) -> Option<*const c_void> {
        self.libs.iter().find_map(|lib| lib.lookup(name))
    }

    fn describe(&self) -> String {
        match self.libs.first() {
            Some(lib) => format!("CANN ({})", lib.path().display()),
            None => "CANN".into(),
        }
    }
}
