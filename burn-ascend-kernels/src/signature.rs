//! Reads a kernel's entry point from its Ascend C source. Shared by `build.rs` (which generates
//! the emulated launch stubs from it) and the crate's tests (which check the launch table
//! against the sources).

use std::path::{Path, PathBuf};

/// A kernel's entry point as declared in its source:
/// `extern "C" __global__ __aicore__ void name(params)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSource {
    /// The kernel (`aclrtlaunch_<name>` is its launch entry point).
    pub name: String,
    /// The source file.
    pub source: PathBuf,
    /// Its parameters, in order.
    pub params: Vec<Param>,
}

/// One kernel parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    /// Its name.
    pub name: String,
    /// Its C++ type as written.
    pub ty: String,
    /// How the launch ABI passes it.
    pub kind: ParamKind,
}

/// How CANN's generated launch entry point passes a kernel parameter (ascendc-api.md §1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    /// `GM_ADDR`: a device pointer, `void*` on the host.
    Global,
    /// A fundamental scalar, passed by value.
    Scalar,
    /// A POD struct passed by value to the kernel, by host pointer to the launcher.
    Struct,
}

const SCALARS: [&str; 12] = [
    "int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t", "uint32_t", "int64_t", "uint64_t",
    "float", "double", "bool", "half",
];

/// The kernels of every `*.cpp` in `dir`, by file name.
pub fn kernels_in(dir: &Path) -> Result<Vec<KernelSource>, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "cpp"))
        .collect();
    files.sort();
    files.iter().map(|f| parse(f)).collect()
}

/// Finds `extern "C" __global__ __aicore__ void name(params)` in a kernel source.
pub fn parse(source: &Path) -> Result<KernelSource, String> {
    let text = std::fs::read_to_string(source).map_err(|e| format!("{}: {e}", source.display()))?;
    let marker = "extern \"C\" __global__ __aicore__ void ";
    let start = text
        .find(marker)
        .ok_or_else(|| format!("{}: no `{marker}` entry point", source.display()))?
        + marker.len();
    let open = start
        + text[start..]
            .find('(')
            .ok_or_else(|| format!("{}: no parameter list", source.display()))?;
    let close = open
        + text[open..]
            .find(')')
            .ok_or_else(|| format!("{}: unterminated parameter list", source.display()))?;
    let mut params = Vec::new();
    for p in text[open + 1..close]
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let split = p
            .rfind(|c: char| c.is_whitespace() || c == '*')
            .ok_or_else(|| format!("{}: untyped parameter `{p}`", source.display()))?;
        let (ty, name) = (
            p[..=split].trim().to_string(),
            p[split + 1..].trim().to_string(),
        );
        let kind = if ty == "GM_ADDR" {
            ParamKind::Global
        } else if SCALARS.contains(&ty.as_str()) {
            ParamKind::Scalar
        } else {
            ParamKind::Struct
        };
        params.push(Param { name, ty, kind });
    }
    Ok(KernelSource {
        name: text[start..open].trim().to_string(),
        source: source.to_path_buf(),
        params,
    })
}
