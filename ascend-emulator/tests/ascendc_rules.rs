//! Runs the C++ test program of the Ascend C emulation (`ascendc/tests/rules_test.cpp`): each
//! hardware rule the emulation enforces is broken on purpose by a small kernel and must be
//! reported with its message, and a correct double-buffered kernel must compute the right
//! values and counters.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn every_emulated_hardware_rule_triggers() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let exe = std::env::temp_dir().join(format!("burn_ascend_rules_test_{}", std::process::id()));
    let compiler = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let build = Command::new(&compiler)
        .args(["-std=c++17", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(root.join("ascendc/include"))
        .arg(root.join("ascendc/src/runner.cpp"))
        .arg(root.join("ascendc/tests/rules_test.cpp"))
        .arg(root.join("ascendc/tests/fake_host.cpp"))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("a C++ compiler is installed");
    assert!(
        build.status.success(),
        "building the rules test failed:\n{}",
        String::from_utf8_lossy(&build.stderr)
    );
    let run = Command::new(&exe).output().expect("the rules test runs");
    let _ = std::fs::remove_file(&exe);
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && out.contains("0 failed"),
        "{out}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
}
