//! The `moe_decoder` example's command line: every bad option is a clear error before the
//! device is opened or training starts; `--load` says what is wrong with a file; a loss that
//! becomes NaN stops the run without saving; and a tiny run trains, saves, reloads and serves.
//!
//! The example's own `run` is called (its source is compiled into this test), so no binary has
//! to be built first. The test that sets `BURN_ASCEND_DEVICE` and the one that serves (with
//! captured decode) run alone (`serial`).

mod common;

#[allow(dead_code)]
#[path = "../examples/moe_decoder/main.rs"]
mod example;

use std::path::PathBuf;

use clap::Parser;
use serial_test::{parallel, serial};

/// The example's `run` on these options (after the program name).
fn run(options: &[&str]) -> Result<Vec<example::Outcome>, String> {
    let args = std::iter::once("moe_decoder").chain(options.iter().copied());
    example::run(example::Args::try_parse_from(args).expect("options that parse"))
}

/// Runs the example on a model small enough to train in a moment, on the suite's device, with
/// `extra` options (pairs of option and value) added or replacing its own.
fn run_tiny(extra: &[&str]) -> Result<Vec<example::Outcome>, String> {
    let device = common::device().to_string();
    let tiny = [
        "--device",
        &device,
        "--hidden",
        "8",
        "--layers",
        "1",
        "--q-heads",
        "2",
        "--kv-heads",
        "1",
        "--experts",
        "2",
        "--top-k",
        "1",
        "--expert-hidden",
        "8",
        "--batch",
        "1",
        "--seq-len",
        "8",
        "--new-tokens",
        "2",
    ];
    // Options given in `extra` replace the tiny run's own (and may repeat, as --prompt does).
    let mut options: Vec<&[&str]> = tiny
        .chunks(2)
        .filter(|o| !extra.chunks(2).any(|pair| pair[0] == o[0]))
        .collect();
    options.extend(extra.chunks(2));
    run(&options.concat())
}

/// A fresh directory for this test's files.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("moe_example-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

fn fails_saying(options: &[&str], says: &str) {
    let err = run(options).expect_err("a bad option");
    assert!(
        err.contains(says),
        "{options:?}: {err:?} should say {says:?}"
    );
}

#[test]
#[parallel]
fn zero_sizes_and_bad_numbers_are_rejected_before_anything_runs() {
    for (options, says) in [
        (&["--seq-len", "0"][..], "seq_len must be at least 1"),
        (&["--batch", "0"], "batch must be at least 1"),
        (
            &["--lr", "nan"],
            "learning rate NaN must be positive and finite",
        ),
        (
            &["--lr", "-0.1"],
            "learning rate -0.1 must be positive and finite",
        ),
        (
            &["--lr", "inf"],
            "learning rate inf must be positive and finite",
        ),
        (&["--hidden", "0"], "must be positive"),
        (&["--layers", "0"], "layers"),
        (&["--experts", "0"], "top_k 2 must be in 1..=0"),
        (&["--top-k", "0"], "top_k 0 must be in 1..=8"),
        (&["--expert-hidden", "0"], "expert_hidden"),
        (
            &["--q-heads", "6"],
            "hidden 256 is not a multiple of q_heads 6",
        ),
        (&["--pages", "0"], "pages must be at least 1"),
        (&["--page-size", "0"], "page_size must be at least 1"),
        (&["--step-tokens", "0"], "step_tokens must be at least 1"),
        (&["--new-tokens", "0"], "new_tokens is 0"),
        (
            &["--new-tokens", "500"],
            "exceeds the maximum sequence of 512",
        ),
        (
            &["--pages", "2"],
            "max_seq 512 exceeds the 32 tokens the cache holds (2 pages of 16 slots)",
        ),
        (
            &["--temperature", "nan"],
            "temperature NaN must be positive and finite",
        ),
        (
            &["--temperature", "-1"],
            "temperature -1 must be positive and finite",
        ),
        (
            &["--temperature", "1", "--top-k-sampling", "0"],
            "top_k is 0",
        ),
        (
            &["--device", "gpu"],
            "--device \"gpu\" is not npu, npu:N, emulated or emulated:N",
        ),
    ] {
        fails_saying(options, says);
    }
}

#[test]
#[parallel]
fn a_save_path_that_cannot_be_written_fails_before_training() {
    let dir = scratch("save");
    // A regular file where the save path needs a directory.
    let file = dir.join("not-a-directory");
    std::fs::write(&file, "text").unwrap();
    let save = file.join("weights");
    let err = run_tiny(&["--save", save.to_str().unwrap()]).expect_err("an unwritable path");
    assert!(err.contains("--save: cannot write"), "{err}");
    assert!(
        err.contains("weights.bin"),
        "the file the recorder would write: {err}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
#[parallel]
fn load_says_what_is_wrong_with_the_file() {
    let dir = scratch("load");
    let missing = dir.join("missing");
    let err = run_tiny(&["--steps", "0", "--load", missing.to_str().unwrap()]).unwrap_err();
    assert!(err.contains("missing.bin: no such file"), "{err}");
    // An existing file the recorder would not even read (it reads <path>.bin).
    let text = dir.join("notes.txt");
    std::fs::write(&text, "not weights").unwrap();
    let err = run_tiny(&["--steps", "0", "--load", text.to_str().unwrap()]).unwrap_err();
    assert!(
        err.contains("not a weights record: records are the .bin files"),
        "{err}"
    );
    // A .bin file that is not a record.
    let garbage = dir.join("garbage.bin");
    std::fs::write(&garbage, "not weights").unwrap();
    let err = run_tiny(&["--steps", "0", "--load", garbage.to_str().unwrap()]).unwrap_err();
    assert!(
        err.contains("not a weights record of this example"),
        "{err}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

// Alone: it serves with captured decode (the default), and a capture forbids the other tests'
// synchronisations on the device while it lasts.
#[test]
#[serial]
fn a_tiny_run_trains_saves_and_serves_and_its_record_loads_only_at_its_sizes() {
    let dir = scratch("roundtrip");
    let save = dir.join("weights");
    let save = save.to_str().unwrap();
    run_tiny(&["--steps", "2", "--save", save]).expect("a tiny run");
    assert!(dir.join("weights.bin").is_file());
    run_tiny(&["--steps", "0", "--load", save]).expect("its record loads");
    let err = run_tiny(&["--steps", "0", "--load", save, "--experts", "3"]).unwrap_err();
    assert!(err.contains("pass the sizes it was trained with"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
#[parallel]
fn a_loss_that_becomes_nan_stops_the_run_without_saving() {
    let dir = scratch("nan");
    let save = dir.join("weights");
    let err = run_tiny(&[
        "--steps",
        "3",
        "--lr",
        "1e30",
        "--save",
        save.to_str().unwrap(),
    ])
    .expect_err("a ruined model");
    assert!(
        err.contains("the loss became") && err.contains("nothing was saved"),
        "{err}"
    );
    assert!(!dir.join("weights.bin").exists());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
#[serial]
fn a_bad_burn_ascend_device_is_a_clear_error() {
    std::env::set_var(burn_ascend::runtime::device::ENV_DEVICE, "tpu:0");
    let err = run(&["--steps", "0"]).expect_err("not a device");
    std::env::remove_var(burn_ascend::runtime::device::ENV_DEVICE);
    assert!(
        err.contains("BURN_ASCEND_DEVICE \"tpu:0\" is not npu, npu:N, emulated or emulated:N"),
        "{err}"
    );
}

/// `--devices 2`: data-parallel training, then expert-parallel serving, which the run checks
/// against the first NPU alone (it fails on other tokens); a ruined data-parallel run stops
/// without saving; more NPUs than the machine has is an error naming the option.
#[test]
#[parallel]
fn two_npus_train_data_parallel_and_serve_the_tokens_of_one() {
    let (first, second) = (common::device(), common::second_device());
    if second.index() != first.index() + 1 {
        eprintln!("two_npus_train_data_parallel_and_serve_the_tokens_of_one: skipped: no NPU after {first}");
        return;
    }
    let dir = scratch("two-npus");
    let save = dir.join("weights");
    run_tiny(&[
        "--devices",
        "2",
        "--batch",
        "2",
        "--steps",
        "2",
        "--save",
        save.to_str().unwrap(),
    ])
    .expect("a run on two NPUs");
    assert!(dir.join("weights.bin").is_file());
    // Data-parallel training stops at a loss that is not finite, as one NPU's does.
    let err = run_tiny(&[
        "--devices",
        "2",
        "--batch",
        "2",
        "--steps",
        "3",
        "--lr",
        "1e30",
        "--save",
        dir.join("ruined").to_str().unwrap(),
    ])
    .unwrap_err();
    assert!(
        err.contains("the loss became") && err.contains("nothing was saved"),
        "{err}"
    );
    assert!(!dir.join("ruined.bin").exists());
    let err = run_tiny(&["--devices", "64", "--steps", "0"]).unwrap_err();
    assert!(
        err.contains("--devices 64") && err.contains("needs"),
        "{err}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
#[serial]
fn prompts_given_on_the_command_line_are_served_and_reported_as_json() {
    let out = run_tiny(&[
        "--steps",
        "1",
        "--save",
        scratch("json").join("w").to_str().unwrap(),
        "--prompt",
        "ab",
        "--prompt",
        "Xyz",
        "--new-tokens",
        "3",
        "--json",
    ])
    .expect("a tiny run");
    assert_eq!(out.len(), 2, "one object per --prompt: {out:?}");
    for (o, prompt) in out.iter().zip(["ab", "Xyz"]) {
        assert_eq!(o["prompt"], prompt);
        let ids: Vec<u64> = prompt.bytes().map(u64::from).collect();
        assert_eq!(o["prompt_token_ids"], serde_json::json!(ids));
        let generated: Vec<u8> = o["token_ids"]
            .as_array()
            .expect("token ids")
            .iter()
            .map(|t| t.as_u64().expect("an id") as u8)
            .collect();
        assert_eq!(generated.len(), 3);
        assert_eq!(o["text"], String::from_utf8_lossy(&generated).as_ref());
        assert_eq!(o["finish_reason"], "length");
    }
}

/// A fixture checkpoint's directory and its transformers reference.
fn fixture(name: &str) -> (String, serde_json::Value) {
    let dir = format!("{}/tests/fixtures/hf/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(format!("{dir}/reference.json")).expect("reference.json");
    (dir, serde_json::from_str(&text).expect("JSON"))
}

#[test]
#[serial]
fn a_checkpoint_given_with_model_generates_what_transformers_generates_and_stops_at_eos() {
    let (dir, reference) = fixture("mixtral");
    let prompts = reference["prompts"].as_array().expect("prompts");
    let device = common::device().to_string();
    let mut options = vec!["--device", &device, "--model", &dir, "--new-tokens", "32"];
    for p in prompts {
        options.extend(["--prompt", p["text"].as_str().expect("text")]);
    }
    options.push("--json");
    let out = run(&options).expect("the checkpoint serves");
    assert_eq!(out.len(), prompts.len());
    let mut stopped = 0;
    for (o, p) in out.iter().zip(prompts) {
        assert_eq!(
            o["prompt_token_ids"], p["ids"],
            "the checkpoint's tokenizer"
        );
        let greedy: Vec<u64> = p["greedy"]
            .as_array()
            .expect("greedy")
            .iter()
            .map(|t| t.as_u64().expect("an id"))
            .collect();
        let got: Vec<u64> = o["token_ids"]
            .as_array()
            .expect("token ids")
            .iter()
            .map(|t| t.as_u64().expect("an id"))
            .collect();
        // Mixtral's EOS is </s> (id 2): transformers' greedy tokens run on past it, the
        // example stops there, keeping it.
        match greedy.iter().position(|&t| t == 2) {
            Some(at) => {
                assert_eq!(got, greedy[..=at], "{}", p["text"]);
                assert_eq!(o["finish_reason"], "stop");
                stopped += 1;
            }
            None => {
                assert_eq!(got, greedy, "{}", p["text"]);
                assert_eq!(o["finish_reason"], "length");
            }
        }
    }
    assert_eq!(stopped, 1, "the fixture's second prompt generates EOS");
}

#[test]
#[parallel]
fn bad_checkpoint_options_are_named_before_the_device_is_used() {
    let (dir, _) = fixture("qwen3_moe");
    fails_saying(
        &["--train-steps", "2"],
        "--train-steps fine-tunes a --model",
    );
    fails_saying(&["--model", "/nonexistent/model"], "/nonexistent/model");
    fails_saying(&["--model", &dir, "--dtype", "f64"], "--dtype \"f64\"");
    fails_saying(
        &["--model", &dir, "--devices", "3"],
        "cannot split over 3 NPUs",
    );
    fails_saying(
        &["--model", &dir, "--max-seq", "100000"],
        "exceeds the 512 positions",
    );
    let scratch = scratch("unknown_family");
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        std::fs::copy(format!("{dir}/{f}"), scratch.join(f)).expect("a copy");
    }
    let config = std::fs::read_to_string(scratch.join("config.json")).unwrap();
    std::fs::write(
        scratch.join("config.json"),
        config.replace("\"qwen3_moe\"", "\"llama4\""),
    )
    .unwrap();
    fails_saying(
        &["--model", scratch.to_str().unwrap()],
        "model_type \"llama4\"",
    );
}

#[test]
#[serial]
fn a_fine_tuned_checkpoint_is_saved_and_serves_again_as_it_served_after_training() {
    let (dir, _) = fixture("qwen3_moe");
    let saved = scratch("fine_tuned").join("qwen3");
    let device = common::device().to_string();
    let serve = |model: &str, extra: &[&str]| {
        let mut options = vec!["--device", &device, "--model", model, "--new-tokens", "6"];
        options.extend(extra);
        options.extend(["--prompt", "The sea", "--prompt", "café", "--json"]);
        run(&options).expect("the checkpoint serves")
    };
    let before = serve(&dir, &[]);
    let tuned = serve(
        &dir,
        &[
            "--train-steps",
            "3",
            "--batch",
            "2",
            "--seq-len",
            "16",
            "--lr",
            "0.01",
            "--save-model",
            saved.to_str().unwrap(),
        ],
    );
    assert_ne!(before, tuned, "fine-tuning changed the generations");
    let again = serve(saved.to_str().unwrap(), &[]);
    assert_eq!(tuned, again, "the saved checkpoint is the fine-tuned model");
}

/// A pre-quantized checkpoint (msModelSlim's layout: W8A16 attention, W8A8_DYNAMIC experts)
/// serves as stored with no option naming its format: the reference's greedy tokens (its
/// dequantized model in transformers) up to its first near tie or EOS. Quantizing it again and
/// fine-tuning it are refused before the device is used.
#[test]
#[serial]
fn a_pre_quantized_checkpoint_serves_as_stored_and_refuses_quantize_and_training() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/prequant/modelslim_w8a16_mixtral")
        .display()
        .to_string();
    let text = std::fs::read_to_string(format!("{dir}/reference.json")).expect("reference.json");
    let reference: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let prompts = reference["prompts"].as_array().expect("prompts");
    let device = common::device().to_string();
    // A cache of one longest request's pages, not sized from the device's memory.
    let mut options = vec![
        "--device",
        &device,
        "--model",
        &dir,
        "--new-tokens",
        "32",
        "--pages",
        "64",
    ];
    for p in prompts {
        options.extend(["--prompt", p["text"].as_str().expect("text")]);
    }
    options.push("--json");
    let out = run(&options).expect("the pre-quantized checkpoint serves");
    let mut compared = 0;
    for (o, p) in out.iter().zip(prompts) {
        let want: Vec<u64> = p["greedy"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap())
            .collect();
        let got: Vec<u64> = o["token_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap())
            .collect();
        // Up to the first step the reference decides by less than 0.5 (a near tie the int8
        // arithmetic may decide either way), and up to Mixtral's EOS (id 2), kept.
        let tie = p["margins"]
            .as_array()
            .unwrap()
            .iter()
            .position(|m| m.as_f64().unwrap() < 0.5)
            .unwrap_or(want.len());
        let eos = want
            .iter()
            .position(|&t| t == 2)
            .map_or(want.len(), |e| e + 1);
        let n = tie.min(eos);
        assert_eq!(got[..n], want[..n], "{}", p["text"]);
        compared += n;
    }
    assert!(compared >= 24, "{compared} tokens compared");
    fails_saying(
        &["--model", &dir, "--quantize", "w8a8"],
        "already quantized",
    );
    fails_saying(&["--model", &dir, "--train-steps", "2"], "stored int8");
}

#[test]
#[parallel]
fn quantize_options_are_checked_before_anything_runs() {
    let err = example::Args::try_parse_from(["moe_decoder", "--quantize", "w4a8"])
        .map(|_| ())
        .expect_err("an unknown scheme")
        .to_string();
    assert!(err.contains("expected w8a16 or w8a8"), "{err}");
    let (dir, _) = fixture("qwen3_moe");
    fails_saying(
        &["--model", &dir, "--train-steps", "2", "--quantize", "w8a8"],
        "--quantize w8a8 with --train-steps",
    );
    fails_saying(
        &["--devices", "2", "--quantize", "w8a16"],
        "serves on one NPU",
    );
}

/// The generated token ids of each outcome.
fn generated(out: &[example::Outcome]) -> Vec<Vec<u64>> {
    out.iter()
        .map(|o| {
            o["token_ids"]
                .as_array()
                .expect("token ids")
                .iter()
                .map(|t| t.as_u64().expect("an id"))
                .collect()
        })
        .collect()
}

#[test]
#[serial]
fn a_quantized_checkpoint_serves_with_captured_decode_on_the_int8_operators() {
    use burn_ascend::emulator::aclnn_launches_of;
    let (dir, _) = fixture("mixtral");
    let device = common::device().to_string();
    let serve = |extra: &[&str]| {
        let mut options = vec![
            "--device",
            &device,
            "--model",
            &dir,
            "--dtype",
            "bf16",
            "--new-tokens",
            "8",
        ];
        options.extend(extra);
        options.extend([
            "--prompt",
            "The sea was",
            "--prompt",
            "She counted",
            "--json",
        ]);
        run(&options).expect("the checkpoint serves")
    };
    let float = generated(&serve(&[]));
    for (mode, op) in [
        ("w8a16", "aclnnWeightQuantBatchMatmulV2"),
        ("w8a8", "aclnnQuantMatmulV4"),
    ] {
        let before = aclnn_launches_of(op);
        let quantized = generated(&serve(&["--quantize", mode]));
        assert!(aclnn_launches_of(op) > before, "{mode}: {op} ran");
        // Every prompt gets its tokens. How closely the quantized model follows the float one
        // is measured over many positions in tests/quantized_models.rs: a single token of a
        // tiny random model can sit on a near tie that int8 rounding flips.
        assert_eq!(quantized.len(), float.len());
        for q in &quantized {
            assert!((1..=8).contains(&q.len()), "{mode}: {quantized:?}");
        }
    }
}

#[test]
#[serial]
fn the_built_in_model_trains_then_serves_quantized() {
    let dir = scratch("quantized");
    let save = dir.join("weights");
    let save = save.to_str().unwrap();
    for mode in ["w8a16", "w8a8"] {
        let out = run_tiny(&["--steps", "2", "--save", save, "--quantize", mode, "--json"])
            .expect("a quantized run");
        assert_eq!(out.len(), 4, "the four prompts");
        for o in &out {
            assert_eq!(
                o["token_ids"].as_array().expect("ids").len(),
                2,
                "{mode}: {o}"
            );
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}
