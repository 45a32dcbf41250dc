//! Which kernel library serves a device, opened at run time through [`KernelApi`].
//!
//! - NPUs: the library CANN built (`CMakeLists.txt`, by `build.rs` when it found CANN), or the
//!   one [`ENV_KERNELS_LIB`] names (a library built on the NPU machine).
//! - The emulated NPU (feature `emulated`): the kernels compiled against the Ascend C emulation,
//!   embedded in this crate and bound to the emulated machine; [`ENV_EMULATED_KERNELS`] can
//!   name another such library, or `off` to run the emulated NPU as an NPU without a kernel
//!   library runs.
//!
//! A device without a library runs the composed defaults of the fused ops; the backend says so
//! once, naming what is missing.

use std::path::PathBuf;
use std::sync::OnceLock;

use ascend_acl::loader::SharedLibrary;
use ascend_acl::{AclError, AclResult};

use crate::launch::KernelApi;

/// Environment variable: the path of the NPU kernel library (`libburn_ascend_kernels.so`).
pub const ENV_KERNELS_LIB: &str = "BURN_ASCEND_KERNELS_LIB";

/// Environment variable: `off` (the emulated NPU runs without kernels) or the path of a kernel
/// library built against the Ascend C emulation.
pub const ENV_EMULATED_KERNELS: &str = "BURN_ASCEND_EMU_KERNELS";

/// The NPU kernel library (opened once).
pub fn npu() -> AclResult<&'static KernelApi> {
    static API: OnceLock<AclResult<KernelApi>> = OnceLock::new();
    API.get_or_init(|| {
        let path = match std::env::var_os(ENV_KERNELS_LIB) {
            Some(path) => PathBuf::from(path),
            None => match option_env!("BURN_ASCEND_NPU_KERNELS_BUILT") {
                Some(built) => PathBuf::from(built),
                None => {
                    return Err(AclError::Library(format!(
                        "no NPU kernel library: burn-ascend-kernels was built without CANN and \
                         {ENV_KERNELS_LIB} is not set (build the library with \
                         burn-ascend-kernels/CMakeLists.txt on the NPU machine, see the README)"
                    )))
                }
            },
        };
        let lib = SharedLibrary::open(&path)?;
        Ok(KernelApi::new(Box::new(lib)))
    })
    .as_ref()
    .map_err(AclError::clone)
}

/// The emulated kernel library (opened and bound to the emulated machine once).
#[cfg(feature = "emulated")]
pub fn emulated() -> AclResult<&'static KernelApi> {
    use ascend_emulator::kernel_runner::EmulatedKernelLibrary;

    static API: OnceLock<AclResult<KernelApi>> = OnceLock::new();
    API.get_or_init(|| {
        let path = match std::env::var(ENV_EMULATED_KERNELS) {
            Ok(v) if v.trim().eq_ignore_ascii_case("off") => {
                return Err(AclError::Library(format!(
                    "the emulated kernel library is switched off ({ENV_EMULATED_KERNELS}=off)"
                )))
            }
            Ok(v) => PathBuf::from(v),
            Err(_) => embedded::extract()?,
        };
        Ok(KernelApi::new(Box::new(EmulatedKernelLibrary::open(
            &path,
        )?)))
    })
    .as_ref()
    .map_err(AclError::clone)
}

/// The emulated kernel library carried in the binary, so that it runs wherever it is copied.
#[cfg(feature = "emulated")]
mod embedded {
    use std::hash::Hasher;
    use std::path::PathBuf;

    use ascend_acl::{AclError, AclResult};

    static LIBRARY: &[u8] = include_bytes!(env!("BURN_ASCEND_EMULATED_KERNELS_SO"));

    /// Writes the library to the temporary directory (once per content: the name carries its
    /// hash) and returns its path; `dlopen` needs a file.
    pub(super) fn extract() -> AclResult<PathBuf> {
        let mut hash = std::collections::hash_map::DefaultHasher::new();
        hash.write(LIBRARY);
        let path = std::env::temp_dir().join(format!(
            "burn-ascend-emulated-kernels-{:016x}.so",
            hash.finish()
        ));
        let present = std::fs::metadata(&path).is_ok_and(|m| m.len() == LIBRARY.len() as u64);
        if !present {
            // Written under a private name and renamed, so a concurrent process never opens a
            // partly written file.
            let partial = path.with_extension(format!("{}.partial", std::process::id()));
            std::fs::write(&partial, LIBRARY)
                .and_then(|()| std::fs::rename(&partial, &path))
                .map_err(|e| {
                    AclError::Library(format!(
                        "cannot write the emulated kernel library to {}: {e}",
                        path.display()
                    ))
                })?;
        }
        Ok(path)
    }
}
