//! Runs the C++ test programs of the Ascend C emulation: `ascendc/tests/rules_test.cpp` (vector
//! cores) and `ascendc/tests/cube_test.cpp` (cube cores). Each hardware rule the emulation
//! enforces is broken on purpose by a small kernel and must be reported with its message, and
//! correct kernels (a double-buffered vector kernel, a cube matmul) must compute the right values
//! and counters.

use std::path::PathBuf;
use std::process::Command;

/// Builds `ascendc/tests/<program>` with the runner and the fake host, runs it with `env` set,
/// and asserts that every check passed.
fn build_and_run(program: &str, env: &[(&str, &str)]) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let exe = std::env::temp_dir().join(format!(
        "burn_ascend_{}_{}",
        program.trim_end_matches(".cpp"),
        std::process::id()
    ));
    let compiler = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let build = Command::new(&compiler)
        .args(["-std=c++17", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(root.join("ascendc/include"))
        .arg(root.join("ascendc/src/runner.cpp"))
        .arg(root.join("ascendc/tests").join(program))
        .arg(root.join("ascendc/tests/fake_host.cpp"))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("a C++ compiler is installed");
    assert!(
        build.status.success(),
        "building {program} failed:\n{}",
        String::from_utf8_lossy(&build.stderr)
    );
    let run = Command::new(&exe)
        .envs(env.iter().copied())
        .output()
        .expect("the test program runs");
    let _ = std::fs::remove_file(&exe);
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && out.contains("0 failed"),
        "{out}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
}

#[test]
fn every_emulated_hardware_rule_triggers() {
    // Its block-order tests record, from the kernel bodies, the order the blocks ran in: that is
    // the launch's (shuffled) order only when one host thread runs them; with helper threads the
    // recording itself would race.
    build_and_run("rules_test.cpp", &[("BURN_ASCEND_EMU_THREADS", "1")]);
}

#[test]
fn every_emulated_cube_rule_triggers() {
    // Default block threads: its kernels share no host state, so the helper threads are exercised.
    build_and_run("cube_test.cpp", &[]);
}
