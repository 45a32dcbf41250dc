//! The emulated `kernel_operator.h` puts in scope the names of the real one that kernels have
//! collided with (`ascendc/include/ascendc_emu/real_names.h`), so such a clash fails on the host
//! as it does under CANN:
//! * a kernel's own global `struct LayerNormTiling` (the real header exports the high-level API's
//!   tiling structs to the global namespace);
//! * its own class template `LayerNorm` used unqualified under a file-scope
//!   `using namespace AscendC;` (ambiguous with the high-level `AscendC::LayerNorm`);
//! * its own unscoped enumerator `MAX` used likewise (ambiguous with `AscendC::MAX` of the
//!   CPU-debug `AtomicType`).
//!
//! Each of these must fail with a first error that names the clashing identifier, and the same
//! kernel written the project's way (own namespace with the using-directive inside it, tiling
//! struct global with the `Burn` prefix) must compile, so the failures come from the clash alone.
//!
//! Finally every kernel of `burn-ascend-kernels/kernels` compiles cleanly under the emulation.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn include_dir() -> PathBuf {
    manifest().join("ascendc/include")
}

/// The C++ compiler, in the C locale so its messages are in English with ASCII quotes.
fn compiler() -> Command {
    let mut cmd = Command::new(std::env::var("CXX").unwrap_or_else(|_| "c++".into()));
    cmd.env("LC_ALL", "C").env("LANG", "C");
    cmd
}

/// Checks the syntax of a kernel given as source text.
fn check_snippet(source: &str) -> Output {
    let mut child = compiler()
        .args(["-std=c++17", "-fsyntax-only", "-I"])
        .arg(include_dir())
        .args(["-x", "c++", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("a C++ compiler is installed ($CXX or c++)");
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(source.as_bytes())
        .expect("the compiler reads the kernel");
    child.wait_with_output().expect("the compiler runs")
}

/// Asserts that `source` does not compile and that its first error names `identifier` (and
/// contains `also`, e.g. "ambiguous", when given).
fn assert_clash(source: &str, identifier: &str, also: Option<&str>) {
    let out = check_snippet(source);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "expected a clash on `{identifier}`, but the kernel compiled:\n{source}"
    );
    let first = stderr
        .lines()
        .find(|l| l.contains("error"))
        .unwrap_or_else(|| panic!("the compiler failed without an error line:\n{stderr}"));
    assert!(
        first.contains(identifier) && also.is_none_or(|word| first.contains(word)),
        "the first error should be the clash on `{identifier}`{}, got:\n{stderr}",
        also.map(|w| format!(" ({w})")).unwrap_or_default()
    );
}

fn assert_compiles(source: &str) {
    let out = check_snippet(source);
    assert!(
        out.status.success(),
        "expected the kernel to compile:\n{source}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn global_tiling_struct_named_like_a_real_one_fails() {
    assert_clash(
        r#"
#include "kernel_operator.h"

struct LayerNormTiling { uint32_t n; };

extern "C" __global__ __aicore__ void k(GM_ADDR x, LayerNormTiling tiling)
{
    (void)x;
    (void)tiling.n;
}
"#,
        "LayerNormTiling",
        None,
    );
}

#[test]
fn own_class_named_like_a_high_level_api_fails_under_file_scope_using() {
    assert_clash(
        r#"
#include "kernel_operator.h"

using namespace AscendC;

template <typename T>
class LayerNorm {
public:
    __aicore__ inline void Process() {}
};

extern "C" __global__ __aicore__ void k(GM_ADDR x)
{
    (void)x;
    LayerNorm<float> op;
    op.Process();
}
"#,
        "LayerNorm",
        Some("ambiguous"),
    );
}

#[test]
fn own_unscoped_max_fails_under_file_scope_using() {
    assert_clash(
        r#"
#include "kernel_operator.h"

using namespace AscendC;

enum Op : uint32_t { ADD = 0, MAX, MIN };

extern "C" __global__ __aicore__ void k(GM_ADDR x, uint32_t op)
{
    (void)x;
    switch (op) {
        case ADD: break;
        case MAX: break;
        default: break;
    }
}
"#,
        "MAX",
        Some("ambiguous"),
    );
}

#[test]
fn the_same_kernels_in_the_project_layout_compile() {
    // The names of the three failing kernels are kept (LayerNorm, MAX, MIN, and a struct
    // LayerNormTiling of the kernel's own) to show that the namespace alone resolves them; only
    // the by-value tiling struct, which must stay global, takes the prefix.
    assert_compiles(
        r#"
#include "kernel_operator.h"

struct BurnLayerNormTiling { uint32_t n; };

namespace burn_ascend {

using namespace AscendC;

struct LayerNormTiling { uint32_t unused; };

template <typename T>
class LayerNorm {
public:
    __aicore__ inline void Process() {}
};

enum Op : uint32_t { ADD = 0, MAX, MIN };

__aicore__ inline void Run(const BurnLayerNormTiling& tiling, uint32_t op)
{
    (void)tiling.n;
    LayerNorm<float> norm;
    norm.Process();
    switch (op) {
        case ADD: break;
        case MAX: break;
        case MIN: break;
        default: break;
    }
}

}  // namespace burn_ascend

extern "C" __global__ __aicore__ void k(GM_ADDR x, uint32_t op, BurnLayerNormTiling tiling)
{
    (void)x;
    burn_ascend::Run(tiling, op);
}
"#,
    );
}

#[test]
fn every_kernel_compiles_under_the_emulation() {
    let kernels = manifest().join("../burn-ascend-kernels/kernels");
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&kernels)
        .unwrap_or_else(|e| panic!("{}: {e}", kernels.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "cpp"))
        .collect();
    sources.sort();
    assert!(!sources.is_empty(), "no kernels in {}", kernels.display());
    let failures: Vec<String> = sources
        .iter()
        .filter_map(|source| compile_kernel(source, &kernels))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Checks one kernel source with warnings as errors; the failure message, if any.
fn compile_kernel(source: &Path, kernels: &Path) -> Option<String> {
    let out = compiler()
        .args([
            "-std=c++17",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-fsyntax-only",
            "-I",
        ])
        .arg(include_dir())
        .arg("-I")
        .arg(kernels)
        .arg(source)
        .output()
        .expect("a C++ compiler is installed ($CXX or c++)");
    (!out.status.success()).then(|| {
        format!(
            "{} does not compile:\n{}",
            source.display(),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}
