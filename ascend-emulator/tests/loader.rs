//! The real loader against a shared library: proves that the symbol names and C signatures the
//! loader resolves ([`CannLibraries`] + [`AclApi`]) match the ones this crate exports with its
//! `cann-exports` feature, by building it as a shared library, installing it under CANN's
//! library names and running a whole `aclnnAdd`, and an HCCL all-reduce between two NPUs,
//! through the `dlopen`ed tables.
//!
//! The three names are symlinks to one file, so the dynamic loader maps a single copy and the
//! "libraries" share the emulated runtime's state, as CANN's libraries share one runtime.
#![cfg(target_os = "linux")]

use std::ffi::{c_void, CStr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use ascend_acl::hccl::data_type::HCCL_DATA_TYPE_FP32;
use ascend_acl::hccl::reduce_op::HCCL_REDUCE_SUM;
use ascend_acl::hccl::{HcclApi, HcclLibraries};
use ascend_acl::loader::CannLibraries;
use ascend_acl::types::dtype::{ACL_DOUBLE, ACL_FLOAT};
use ascend_acl::types::format::ACL_FORMAT_ND;
use ascend_acl::types::memcpy_kind::{ACL_MEMCPY_DEVICE_TO_HOST, ACL_MEMCPY_HOST_TO_DEVICE};
use ascend_acl::types::status::ACL_SUCCESS;
use ascend_acl::types::{aclScalar, aclTensor, aclrtStream, ACL_MEM_MALLOC_HUGE_FIRST};
use ascend_acl::{AclApi, AclError};

/// The shared library `cargo rustc -p ascend-emulator --crate-type cdylib` builds.
const EMULATED_CANN: &str = "libascend_emulator.so";
/// The names the loader opens.
const CANN_LIBRARIES: [&str; 4] = [
    "libascendcl.so",
    "libnnopbase.so",
    "libopapi.so",
    "libhccl.so",
];

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

/// The profile directory this test binary was built into: it lives in `<profile dir>/deps/`,
/// and `<profile dir>` is `<target dir>/<profile>`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("path of the test binary");
    let deps = exe.parent().expect("the test binary has a directory");
    assert_eq!(
        deps.file_name().and_then(|n| n.to_str()),
        Some("deps"),
        "expected the test binary in <target>/<profile>/deps, found {}",
        exe.display()
    );
    deps.parent().expect("deps has a parent").to_path_buf()
}

/// Builds this crate as a shared library exporting CANN's names (feature `cann-exports`), with
/// this test's profile, into this test's target directory, and returns its path.
fn build_emulated_cann() -> PathBuf {
    let profile_dir = profile_dir();
    let target_dir = profile_dir
        .parent()
        .expect("the profile directory has a parent");
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .args([
            "rustc",
            "--quiet",
            "-p",
            "ascend-emulator",
            "--lib",
            "--features",
            "cann-exports",
            "--crate-type",
            "cdylib",
            "--target-dir",
        ])
        .arg(target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => {}
        Some("release") => {
            cargo.arg("--release");
        }
        Some(custom) => {
            cargo.args(["--profile", custom]);
        }
        None => panic!("unexpected profile directory {}", profile_dir.display()),
    }
    let output = cargo.output().expect("run cargo");
    assert!(
        output.status.success(),
        "building the emulated CANN library failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let library = profile_dir.join(EMULATED_CANN);
    assert!(library.is_file(), "cargo built no {}", library.display());
    library
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> Self {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let name = format!(
            "burn-ascend-{label}-{}-{nanos}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let path = std::env::temp_dir().join(name);
        std::fs::create_dir(&path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
        Self(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A directory laid out like CANN's `lib64`: each library name is a symlink to `library`.
fn fake_cann_dir(library: &Path) -> TempDir {
    let dir = TempDir::new("fake-cann");
    for name in CANN_LIBRARIES {
        let link = dir.path().join(name);
        std::os::unix::fs::symlink(library, &link)
            .unwrap_or_else(|e| panic!("symlink {} -> {}: {e}", link.display(), library.display()));
    }
    dir
}

/// The ACL and HCCL tables loaded from the emulated CANN library, once per process, with
/// `aclInit` done.
fn tables() -> &'static (AclApi, HcclApi) {
    static TABLES: OnceLock<(AclApi, HcclApi)> = OnceLock::new();
    TABLES.get_or_init(|| {
        let dir = fake_cann_dir(&build_emulated_cann());
        let libraries = CannLibraries::open_in(Some(dir.path()))
            .unwrap_or_else(|e| panic!("open the emulated CANN libraries: {e}"));
        let api =
            AclApi::new(Box::new(libraries)).unwrap_or_else(|e| panic!("load the table: {e}"));
        let described = api.describe();
        assert!(
            described.contains(&dir.path().join("libascendcl.so").display().to_string()),
            "the table should describe the opened library, got {described:?}"
        );
        // SAFETY: NULL means no configuration file.
        check(
            &api,
            unsafe { (api.core.aclInit)(std::ptr::null()) },
            "aclInit",
        );
        let hccl = HcclLibraries::open_in(Some(dir.path()))
            .and_then(|l| HcclApi::new(Box::new(l)))
            .unwrap_or_else(|e| panic!("load the HCCL table: {e}"));
        // `dir` is removed here: the libraries stay mapped, and operators are looked up through
        // the open handles, not by path.
        (api, hccl)
    })
}

fn api() -> &'static AclApi {
    &tables().0
}

// ---------------------------------------------------------------------------------------------
// Calls through the loaded table
// ---------------------------------------------------------------------------------------------

/// Panics with the runtime's explanation unless `code` is success.
fn check(api: &AclApi, code: i32, function: &str) {
    if let Err(e) = api.check(code, function) {
        panic!("{e}");
    }
}

fn set_device(api: &AclApi, device: i32) {
    // SAFETY: plain value argument.
    check(
        api,
        unsafe { (api.core.aclrtSetDevice)(device) },
        "aclrtSetDevice",
    );
}

fn create_stream(api: &AclApi) -> aclrtStream {
    let mut stream = std::ptr::null_mut();
    // SAFETY: `stream` is a valid out pointer.
    check(
        api,
        unsafe { (api.core.aclrtCreateStream)(&mut stream) },
        "aclrtCreateStream",
    );
    assert!(
        !stream.is_null(),
        "aclrtCreateStream succeeded but gave NULL"
    );
    stream
}

fn malloc(api: &AclApi, bytes: usize) -> *mut c_void {
    let mut ptr = std::ptr::null_mut();
    // SAFETY: `ptr` is a valid out pointer.
    let code = unsafe { (api.core.aclrtMalloc)(&mut ptr, bytes, ACL_MEM_MALLOC_HUGE_FIRST) };
    check(api, code, "aclrtMalloc");
    assert!(!ptr.is_null(), "aclrtMalloc succeeded but gave NULL");
    ptr
}

fn free(api: &AclApi, ptr: *mut c_void) {
    // SAFETY: `ptr` came from aclrtMalloc and is freed once.
    check(api, unsafe { (api.core.aclrtFree)(ptr) }, "aclrtFree");
}

fn upload(api: &AclApi, device: *mut c_void, device_bytes: usize, data: &[f32]) {
    let bytes = std::mem::size_of_val(data);
    // SAFETY: `data` is valid for `bytes`; the runtime checks the device range.
    let code = unsafe {
        (api.core.aclrtMemcpy)(
            device,
            device_bytes,
            data.as_ptr().cast(),
            bytes,
            ACL_MEMCPY_HOST_TO_DEVICE,
        )
    };
    check(api, code, "aclrtMemcpy (host to device)");
}

fn download(api: &AclApi, device: *const c_void, len: usize) -> Vec<f32> {
    let mut data = vec![f32::NAN; len];
    let bytes = std::mem::size_of_val(data.as_slice());
    // SAFETY: `data` is valid for `bytes`; the runtime checks the device range.
    let code = unsafe {
        (api.core.aclrtMemcpy)(
            data.as_mut_ptr().cast(),
            bytes,
            device,
            bytes,
            ACL_MEMCPY_DEVICE_TO_HOST,
        )
    };
    check(api, code, "aclrtMemcpy (device to host)");
    data
}

/// A contiguous f32 `shape` view at offset 0 of the `numel`-element allocation at `base`.
fn f32_tensor(api: &AclApi, shape: &[i64], base: *mut c_void) -> *mut aclTensor {
    let mut strides = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    let storage = [shape.iter().product::<i64>()];
    // SAFETY: the arrays are valid for the lengths passed and copied by the callee.
    let tensor = unsafe {
        (api.core.aclCreateTensor)(
            shape.as_ptr(),
            shape.len() as u64,
            ACL_FLOAT,
            strides.as_ptr(),
            0,
            ACL_FORMAT_ND,
            storage.as_ptr(),
            storage.len() as u64,
            base,
        )
    };
    assert!(
        !tensor.is_null(),
        "aclCreateTensor failed: {}",
        api.recent_error_message()
    );
    tensor
}

fn f64_scalar(api: &AclApi, mut value: f64) -> *mut aclScalar {
    // SAFETY: `value` is an f64, as ACL_DOUBLE says; the callee copies it.
    let scalar = unsafe { (api.core.aclCreateScalar)((&mut value as *mut f64).cast(), ACL_DOUBLE) };
    assert!(
        !scalar.is_null(),
        "aclCreateScalar failed: {}",
        api.recent_error_message()
    );
    scalar
}

fn destroy_tensor(api: &AclApi, tensor: *mut aclTensor) {
    // SAFETY: created by aclCreateTensor and destroyed once.
    check(
        api,
        unsafe { (api.core.aclDestroyTensor)(tensor) },
        "aclDestroyTensor",
    );
}

fn destroy_scalar(api: &AclApi, scalar: *mut aclScalar) {
    // SAFETY: created by aclCreateScalar and destroyed once.
    check(
        api,
        unsafe { (api.core.aclDestroyScalar)(scalar) },
        "aclDestroyScalar",
    );
}

/// `out = self + alpha * other` by both phases of `aclnnAdd`, resolved through the table.
fn add(
    api: &AclApi,
    stream: aclrtStream,
    lhs: *const aclTensor,
    rhs: *const aclTensor,
    alpha: *const aclScalar,
    out: *mut aclTensor,
) {
    // SAFETY: the table types aclnnAdd with its declared C signature.
    let (phase1, phase2) = unsafe {
        api.ops
            .aclnnAdd
            .resolve(api.source(), "aclnnAdd", "aclnnAddGetWorkspaceSize")
    }
    .unwrap_or_else(|e| panic!("{e}"));
    let mut workspace_size = 0u64;
    let mut executor = std::ptr::null_mut();
    // SAFETY: live descriptors and valid out pointers.
    let code = unsafe { phase1(lhs, rhs, alpha, out, &mut workspace_size, &mut executor) };
    check(api, code, "aclnnAddGetWorkspaceSize");
    assert!(
        !executor.is_null(),
        "aclnnAddGetWorkspaceSize succeeded but gave no executor"
    );
    let workspace = match workspace_size {
        0 => std::ptr::null_mut(),
        bytes => malloc(api, bytes as usize),
    };
    // SAFETY: the executor comes from phase one and is consumed here; the workspace is as large
    // as phase one asked.
    check(
        api,
        unsafe { phase2(workspace, workspace_size, executor, stream) },
        "aclnnAdd",
    );
    // SAFETY: a live stream.
    check(
        api,
        unsafe { (api.core.aclrtSynchronizeStream)(stream) },
        "aclrtSynchronizeStream",
    );
    if !workspace.is_null() {
        free(api, workspace);
    }
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[test]
fn add_runs_through_the_loaded_libraries() {
    let api = api();
    set_device(api, 0);
    let stream = create_stream(api);

    const SHAPE: [i64; 2] = [2, 3];
    const LEN: usize = 6;
    const BYTES: usize = LEN * std::mem::size_of::<f32>();
    let lhs: Vec<f32> = (0..LEN).map(|i| 1.0 + 0.5 * i as f32).collect();
    let rhs: Vec<f32> = (0..LEN).map(|i| 10.0 * i as f32).collect();

    let buffers = [malloc(api, BYTES), malloc(api, BYTES), malloc(api, BYTES)];
    upload(api, buffers[0], BYTES, &lhs);
    upload(api, buffers[1], BYTES, &rhs);
    let tensors = buffers.map(|b| f32_tensor(api, &SHAPE, b));
    let alpha = f64_scalar(api, 1.0);

    add(api, stream, tensors[0], tensors[1], alpha, tensors[2]);
    let sum = download(api, buffers[2], LEN);

    // lhs[i] + 1.0 * rhs[i] = 1 + 10.5 i, exact in f32.
    let expected: Vec<f32> = (0..LEN).map(|i| 1.0 + 10.5 * i as f32).collect();
    assert_eq!(sum, expected);

    destroy_scalar(api, alpha);
    for (tensor, buffer) in tensors.into_iter().zip(buffers) {
        destroy_tensor(api, tensor);
        free(api, buffer);
    }
    // SAFETY: created above; all work on it has completed.
    check(
        api,
        unsafe { (api.core.aclrtDestroyStream)(stream) },
        "aclrtDestroyStream",
    );
}

#[test]
fn a_failed_call_leaves_a_recent_error_message() {
    let api = api();
    // The message is per thread: a fresh thread starts with none, so a non-empty message after
    // the call can only come from that call.
    let checker = std::thread::spawn(move || {
        assert_eq!(
            api.recent_error_message(),
            "",
            "a fresh thread has no recent error"
        );
        let bogus = 0x1234usize as *mut c_void;
        // SAFETY: the runtime must reject a pointer it did not allocate.
        let code = unsafe { (api.core.aclrtFree)(bogus) };
        assert_ne!(code, ACL_SUCCESS, "aclrtFree of a bogus pointer succeeded");
        let message = api.recent_error_message();
        assert!(
            !message.is_empty(),
            "aclrtFree failed with {code} but left no message"
        );
        match api.check(code, "aclrtFree") {
            Err(AclError::Call {
                code: c,
                function,
                message: m,
                ..
            }) => {
                assert_eq!(
                    (c, function.as_str(), m.as_str()),
                    (code, "aclrtFree", message.as_str())
                );
            }
            other => panic!("expected a call error, got {other:?}"),
        }
    });
    if let Err(panic) = checker.join() {
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn a_missing_library_directory_is_a_load_error_naming_the_path() {
    let dir = TempDir::new("no-cann");
    let missing = dir.path().join("lib64");
    match CannLibraries::open_in(Some(&missing)) {
        Ok(_) => panic!(
            "opened CANN from {}, which does not exist",
            missing.display()
        ),
        Err(AclError::Load(message)) => {
            let looked_at = missing.join(CANN_LIBRARIES[0]);
            assert!(
                message.contains(&looked_at.display().to_string()),
                "the load error should name {}, got {message:?}",
                looked_at.display()
            );
        }
        Err(other) => panic!("expected AclError::Load, got {other:?}"),
    }
}

/// A function that returns a C string, rather than a status, through the loaded table.
#[test]
fn soc_name_is_read_through_the_loaded_table() {
    let api = api();
    // SAFETY: aclrtGetSocName returns NULL or a static NUL-terminated string.
    let name = unsafe { (api.core.aclrtGetSocName)() };
    assert!(!name.is_null(), "aclrtGetSocName gave NULL");
    // SAFETY: checked non-NULL above.
    let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
    assert!(name.starts_with("Ascend"), "unexpected SoC name {name:?}");
}

/// HCCL through `libhccl.so`: a communicator of both NPUs and an all-reduce, checked through the
/// ACL table of the same library (one runtime behind both).
#[test]
fn hccl_all_reduce_through_the_loaded_library() {
    let (api, hccl) = tables();
    let init = hccl
        .optional
        .HcclCommInitAll
        .expect("the emulated HCCL has HcclCommInitAll");
    let mut devices = [0i32, 1];
    let mut comms = [std::ptr::null_mut(); 2];
    // SAFETY: both arrays hold two entries.
    let code = unsafe { init(2, devices.as_mut_ptr(), comms.as_mut_ptr()) };
    hccl.check(code, "HcclCommInitAll").unwrap();
    // HCCL requires one issuing thread per device for an HcclCommInitAll communicator: each
    // rank's first transfer waits for the others' (hccl-abi.md §6 rule 5).
    let comms = comms.map(|c| c as usize);
    std::thread::scope(|scope| {
        for (i, &comm) in comms.iter().enumerate() {
            scope.spawn(move || {
                set_device(api, i as i32);
                let stream = create_stream(api);
                let buf = malloc(api, 16);
                let values = [i as f32 + 1.0; 4];
                // SAFETY: `buf` holds 16 bytes.
                let code = unsafe {
                    (api.core.aclrtMemcpy)(
                        buf,
                        16,
                        values.as_ptr() as _,
                        16,
                        ACL_MEMCPY_HOST_TO_DEVICE,
                    )
                };
                check(api, code, "aclrtMemcpy");
                // SAFETY: a live buffer of 4 floats on the rank's device and its stream.
                let code = unsafe {
                    (hccl.fns.HcclAllReduce)(
                        buf,
                        buf,
                        4,
                        HCCL_DATA_TYPE_FP32,
                        HCCL_REDUCE_SUM,
                        comm as _,
                        stream,
                    )
                };
                hccl.check(code, "HcclAllReduce").unwrap();
                // SAFETY: the stream is live.
                check(
                    api,
                    unsafe { (api.core.aclrtSynchronizeStream)(stream) },
                    "sync",
                );
                let mut out = [0f32; 4];
                // SAFETY: `out` holds 16 bytes.
                let code = unsafe {
                    (api.core.aclrtMemcpy)(
                        out.as_mut_ptr() as _,
                        16,
                        buf,
                        16,
                        ACL_MEMCPY_DEVICE_TO_HOST,
                    )
                };
                check(api, code, "aclrtMemcpy");
                assert_eq!(out, [3.0; 4], "rank {i}");
            });
        }
    });
}

/// A CANN without HCCL: the ACL table loads from the same directory and runs single-device
/// work, and opening HCCL (what the first multi-device call does) is an error naming the
/// library and where it was looked for.
#[test]
fn without_libhccl_the_acl_table_works_and_hccl_is_a_clear_error() {
    let library = build_emulated_cann();
    let dir = TempDir::new("cann-without-hccl");
    for name in CANN_LIBRARIES.iter().filter(|n| **n != "libhccl.so") {
        std::os::unix::fs::symlink(&library, dir.path().join(name)).unwrap();
    }
    // Kept mapped for the process, as the other tests' table is: the runtime's threads live on.
    let api: &'static AclApi = Box::leak(Box::new(
        CannLibraries::open_in(Some(dir.path()))
            .and_then(|l| AclApi::new(Box::new(l)))
            .unwrap_or_else(|e| panic!("the ACL table loads without libhccl.so: {e}")),
    ));
    // SAFETY: NULL means no configuration file (another test may have initialised already).
    let status = unsafe { (api.core.aclInit)(std::ptr::null()) };
    assert!(
        status == 0 || status == ascend_acl::types::status::ACL_ERROR_REPEAT_INITIALIZE,
        "aclInit: {status}"
    );
    set_device(api, 0);
    let buf = malloc(api, 16);
    let values = [1.5f32, -2.0, 3.0, 4.25];
    let mut back = [0f32; 4];
    // SAFETY: `buf` holds 16 bytes, as do both host arrays.
    unsafe {
        check(
            api,
            (api.core.aclrtMemcpy)(buf, 16, values.as_ptr() as _, 16, ACL_MEMCPY_HOST_TO_DEVICE),
            "aclrtMemcpy",
        );
        check(
            api,
            (api.core.aclrtMemcpy)(
                back.as_mut_ptr() as _,
                16,
                buf,
                16,
                ACL_MEMCPY_DEVICE_TO_HOST,
            ),
            "aclrtMemcpy",
        );
    }
    assert_eq!(back, values);
    let e = match HcclLibraries::open_in(Some(dir.path())) {
        Err(e) => e,
        Ok(_) => panic!("HCCL must not load from a directory without libhccl.so"),
    };
    let text = e.to_string();
    assert!(
        matches!(e, AclError::Load(_))
            && text.contains("HCCL is needed for work across NPUs")
            && text.contains("libhccl.so"),
        "{text}"
    );
}
