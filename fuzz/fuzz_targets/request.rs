#![no_main]

// Each target uses one function of the shared harness.
#[allow(dead_code)]
#[path = "../../tests/fuzz/harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(
    // libfuzzer-sys's panic hook aborts on every panic, even one the code under test catches
    // (the tokenizers library's, made an error of the file): the default hook is put back. A
    // panic that reaches libfuzzer-sys still aborts, a crash.
    init: drop(std::panic::take_hook()),
    |data: &[u8]| {
        let _ = harness::request(data);
    }
);
