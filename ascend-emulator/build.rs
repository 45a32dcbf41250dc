//! Publishes where the Ascend C emulation lives, for the packages that build kernels against it
//! (`links = "ascendc_emu"`): `DEP_ASCENDC_EMU_INCLUDE` (the directory holding the emulated
//! `kernel_operator.h`) and `DEP_ASCENDC_EMU_RUNNER` (the block runner's source).

use std::path::PathBuf;

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let ascendc = root.join("ascendc");
    println!("cargo:rerun-if-changed=ascendc");
    println!("cargo:include={}", ascendc.join("include").display());
    println!("cargo:runner={}", ascendc.join("src/runner.cpp").display());
}
