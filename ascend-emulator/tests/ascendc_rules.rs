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

/// A vector kernel calling `call` (on `t`, an int32 tensor; `u` uint32; `mask` uint8): the
/// compiler's output, in the C locale, and whether it compiled.
fn compile_vector_call(call: &str) -> (bool, String) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let source = std::env::temp_dir().join(format!(
        "burn_ascend_dtype_{}_{}.cpp",
        std::process::id(),
        call.split('(').next().unwrap_or("call")
    ));
    std::fs::write(
        &source,
        format!(
            "#include \"kernel_operator.h\"\nusing namespace AscendC;\n\
             extern \"C\" __global__ __aicore__ void k(GM_ADDR)\n{{\n    TPipe pipe;\n    \
             TBuf<TPosition::VECCALC> b;\n    pipe.InitBuffer(b, 4096);\n    \
             LocalTensor<int32_t> t = b.Get<int32_t>();\n    \
             LocalTensor<uint32_t> u = b.Get<uint32_t>();\n    \
             LocalTensor<uint8_t> mask = b.Get<uint8_t>();\n    {call};\n}}\n"
        ),
    )
    .expect("the temporary directory is writable");
    let out = Command::new(std::env::var("CXX").unwrap_or_else(|_| "c++".into()))
        .env("LC_ALL", "C")
        .args(["-std=c++17", "-fsyntax-only", "-I"])
        .arg(root.join("ascendc/include"))
        .arg(&source)
        .output()
        .expect("a C++ compiler is installed");
    let _ = std::fs::remove_file(&source);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Each vector API is refused at compile time on a dtype its A2 instruction lacks
/// (`../shared/ascend/vector-intrinsics-910b.md`), and the compiler names the instruction.
#[test]
fn vector_apis_refuse_dtypes_their_instruction_lacks_naming_it() {
    for (call, instruction) in [
        ("Div(t, t, t, 64)", "vdiv<T>"),
        ("Exp(t, t, 64)", "vexp<T>"),
        ("Sqrt(t, t, 64)", "vsqrt<T>"),
        ("ReduceSum(t, t, t, 64)", "vcadd<T>"),
        ("ReduceMax(t, t, t, 64)", "vcmax<T>"),
        (
            "Select(t, mask, t, t, SELMODE::VSEL_TENSOR_TENSOR_MODE, 64)",
            "vsel<T>",
        ),
        ("And(t, t, t, 64)", "vand<T>"),
        ("Or(u, u, u, 64)", "vor<T>"),
        ("Not(t, t, 64)", "vnot<T>"),
    ] {
        let (compiled, text) = compile_vector_call(call);
        let api = call.split('(').next().unwrap();
        assert!(
            !compiled
                && text.contains(&format!("no matching function for call to '{api}("))
                && text.contains(instruction),
            "{call} on int32/uint32 must not compile, naming {instruction}:\n{text}"
        );
    }
    // The same calls on a dtype the instruction has compile.
    let (compiled, text) = compile_vector_call(
        "LocalTensor<float> f = b.Get<float>(); Div(f, f, f, 64); ReduceSum(f, f, f, 64); \
         LocalTensor<int16_t> s = b.Get<int16_t>(); And(s, s, s, 64)",
    );
    assert!(compiled, "{text}");
}
