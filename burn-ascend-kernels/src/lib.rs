//! burn-ascend-kernels: the custom fused operations of burn-ascend, written in Ascend C.
//!
//! - `kernels/*.cpp`: the Ascend C sources, one kernel per file, written against the real
//!   Ascend C API. `build.rs` builds them into shared libraries opened at run time: with CANN's
//!   toolchain for NPUs (`CMakeLists.txt`, also usable without cargo), and, with the `emulated`
//!   feature, with the host C++ compiler against `ascend-emulator`'s Ascend C emulation.
//! - [`tiling`]: how each kernel splits its work over the vector cores and the unified buffer,
//!   as pure functions of the shapes and the device's properties.
//! - [`program`]: the programs of the interpreted element-wise kernel (`elementwise_program`):
//!   instructions over f32 tile registers, register allocation, operand layout, encoding.
//! - [`checks`]: the kernels' device-side checks and the switch for the costly ones.
//! - [`launch`]: the launch table ([`launch::KernelApi`]), typed from one list of the
//!   `aclrtlaunch_<kernel>` prototypes, and safe launchers over it.
//! - [`library`]: which library serves which kind of device.
//!
//! This crate knows nothing of Burn; `burn-ascend` exposes the operations to Burn models.
#![warn(missing_docs)]

pub mod checks;
pub mod launch;
pub mod library;
pub mod program;
#[cfg(test)]
mod signature;
pub mod tiling;

pub use launch::{KernelApi, LaunchError};

#[cfg(test)]
mod tests {
    use crate::launch::KERNELS;
    use crate::signature::{kernels_in, ParamKind};

    /// The launch table's list states each kernel's prototype as its source declares it: same
    /// kernels, same global-memory parameters in order, the tiling struct last.
    #[test]
    fn launch_list_matches_the_kernel_sources() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
        let sources = kernels_in(&dir).unwrap();
        let mut listed: Vec<&str> = KERNELS.iter().map(|k| k.name).collect();
        let mut found: Vec<&str> = sources.iter().map(|k| k.name.as_str()).collect();
        listed.sort_unstable();
        found.sort_unstable();
        assert_eq!(listed, found, "kernels in the list vs in kernels/*.cpp");
        for k in KERNELS {
            let src = sources.iter().find(|s| s.name == k.name).unwrap();
            let (last, globals) = src.params.split_last().unwrap();
            assert!(
                globals.iter().all(|p| p.kind == ParamKind::Global),
                "{}: only GM_ADDR parameters before the tiling",
                k.name
            );
            let names: Vec<String> = globals.iter().map(|p| snake(&p.name)).collect();
            assert_eq!(names, k.globals, "{}: global-memory parameters", k.name);
            assert_eq!(last.kind, ParamKind::Struct, "{}: tiling last", k.name);
            assert_eq!(
                last.ty,
                format!("Burn{}", k.tiling),
                "{}: the tiling struct the kernel takes",
                k.name
            );
        }
    }

    /// `kvIndices` -> `kv_indices`.
    fn snake(name: &str) -> String {
        let mut out = String::new();
        for c in name.chars() {
            if c.is_ascii_uppercase() {
                out.push('_');
                out.push(c.to_ascii_lowercase());
            } else {
                out.push(c);
            }
        }
        out
    }
}
