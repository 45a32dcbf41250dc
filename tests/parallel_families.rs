//! The Hugging Face families split across NPUs (`burn_ascend_llm::families::parallel`):
//! - every fixture served on 2 and 4 NPUs gives the greedy tokens of one NPU, in f32 and bf16,
//!   up to the first position where the one-NPU run's two best logits are nearly tied (the
//!   split sums partial outputs in another order, which may decide a near tie; the positions
//!   compared must be most of them), with the logits of one NPU before it;
//! - each NPU holds its share of the weights: measured in each NPU's memory, the routed experts
//!   fall as 1/N, and no NPU's memory peaks above what it keeps (nothing of another NPU's passes
//!   through it);
//! - each NPU reads only its part of the files: the bytes read on two NPUs are the checkpoint's
//!   plus one more copy of the tensors every NPU holds whole (norms, routers, MLA's latent
//!   projections), nothing else;
//! - a fault on either NPU fails the step's requests, and the server resets both, loads the
//!   weights again from the files and serves the next requests with the same tokens;
//! - two processes of two NPUs each (the example's `--nodes 2`), meeting at an authenticated
//!   rendezvous, give the tokens of one process with four NPUs, and agree on their caches' pages
//!   though their NPUs' memories differ.
//!
//! The emulated machine's size (`BURN_ASCEND_EMU_DEVICES`, `BURN_ASCEND_EMU_HBM_MIB`) is read
//! when it starts, so those tests run in child processes of this binary started with it.

mod common;

#[allow(dead_code)]
#[path = "../examples/moe_decoder/main.rs"]
mod example;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use burn::tensor::DType;
use burn_ascend::runtime::DeviceContext;
use burn_ascend::{Ascend, AscendDevice};
use burn_ascend_llm::engine::serve::{Generation, Request, ServeConfig, Server};
use burn_ascend_llm::engine::step::StepModel;
use burn_ascend_llm::families::parallel::{self, Placement};
use burn_ascend_llm::families::{self, LoadOptions};
use burn_ascend_llm::hf::Checkpoint;
use burn_ascend_llm::moe::expert_parallel::experts_of;
use burn_ascend_suite::real_checkpoint::Published;
use clap::Parser;
use serial_test::serial;

const FAMILIES: [&str; 6] = [
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "qwen3_moe_fused",
    "deepseek_v2",
    "deepseek_v3",
];

const ENV_DEVICES: &str = "BURN_ASCEND_EMU_DEVICES";
const ENV_HBM: &str = "BURN_ASCEND_EMU_HBM_MIB";
const ENV_NODE: &str = "BURN_ASCEND_TEST_NODE";
const ENV_ADDRESS: &str = "BURN_ASCEND_TEST_RENDEZVOUS";
const SECRET: &str = "the secret of this test's two nodes";

/// A family fixture (`tests/fixtures/hf/NAME`), or another by its path under
/// `tests/fixtures` (`prequant/NAME`).
fn fixture(name: &str) -> PathBuf {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    match name.contains('/') {
        true => fixtures.join(name),
        false => fixtures.join("hf").join(name),
    }
}

/// `n` NPUs of the suite's kind from its device on, or `None` (after saying so) when the machine
/// has fewer.
fn npus(test: &str, n: usize) -> Option<Vec<AscendDevice>> {
    let first = common::device();
    let count = burn_ascend::runtime::device::device_count(&first.into()).unwrap_or(1);
    if first.index() + n > count {
        eprintln!("{test}: skipped: it needs {n} NPUs from {first}, the machine has {count}");
        return None;
    }
    Some(
        (first.index()..first.index() + n)
            .map(|i| match first {
                AscendDevice::Npu(_) => AscendDevice::Npu(i),
                AscendDevice::Emulated(_) => AscendDevice::Emulated(i),
            })
            .collect(),
    )
}

/// Starts the ignored test `test` of this binary in a child process with `env` set.
fn start(test: &str, env: &[(&str, String)]) -> std::process::Child {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            test,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    command.spawn().expect("the test binary starts")
}

/// The child's output, once it passed.
fn passed(test: &str, child: std::process::Child) -> Output {
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{test} failed:\n{stdout}\n{stderr}"
    );
    out
}

/// Runs the ignored test `test` in a child process on four emulated NPUs (with `env` too).
fn on_four(test: &str, env: &[(&str, String)]) -> Output {
    let mut env = env.to_vec();
    env.push((ENV_DEVICES, "4".into()));
    passed(test, start(test, &env))
}

/// The reference prompts of a fixture and the length of transformers' greedy continuation.
fn requests(name: &str) -> Vec<Request> {
    let text = std::fs::read_to_string(fixture(name).join("reference.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let ids = |v: &serde_json::Value| -> Vec<u32> {
                v.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap() as u32)
                    .collect()
            };
            Request::greedy(ids(&p["ids"]), ids(&p["greedy"]).len())
        })
        .collect()
}

fn serve_config() -> ServeConfig {
    // Pages of 4 slots and steps of 8 tokens: prompts cross pages and are prefilled in chunks
    // beside the others' decode.
    ServeConfig {
        pages: 64,
        page_size: 4,
        max_seq: 64,
        max_kv_splits: 3,
        step_tokens: 8,
        max_waiting: 64,
        record_logits: true,
    }
}

/// Serves `requests` with `server` to the end: each request's generation.
fn generate<M: StepModel<Ascend>>(
    mut server: Server<Ascend, M>,
    requests: &[Request],
) -> Vec<Generation> {
    let report = server.generate(requests);
    report
        .results
        .into_iter()
        .map(|r| r.unwrap_or_else(|e| panic!("a request failed: {e}")))
        .collect()
}

/// `name` in `dtype` on `devices` (one: the whole decoder; several: split across them).
fn served(name: &str, dtype: DType, devices: &[AscendDevice]) -> Vec<Generation> {
    let checkpoint = Checkpoint::open(fixture(name)).unwrap();
    let requests = requests(name);
    if devices.len() == 1 {
        let model = families::load_from::<Ascend>(&checkpoint, dtype, &devices[0]).unwrap();
        return generate(
            Server::new(model, serve_config(), &devices[0]).unwrap(),
            &requests,
        );
    }
    let placement = Placement::local(devices);
    let model = parallel::load_parallel::<Ascend>(&checkpoint, dtype, &placement)
        .unwrap_or_else(|e| panic!("{name} on {}: {e}", placement.names()));
    generate(
        Server::new(model, serve_config(), &devices[0]).unwrap(),
        &requests,
    )
}

/// The top two values of `row`.
fn top_two(row: &[f32]) -> (f32, f32) {
    row.iter().fold((f32::MIN, f32::MIN), |(a, b), &x| {
        if x > a {
            (x, a)
        } else {
            (a, b.max(x))
        }
    })
}

/// Compares a split run's generation `got` with the one-NPU run's `want`, position by position,
/// up to the first whose two best logits (in `want`) are within `tie`: the same token, and
/// logits within `tolerance` of `want`'s. `strict` (f32) asserts both at every position
/// compared; otherwise (bf16) only the first position's (the prefill's) logits are asserted,
/// and the comparison also ends where the runs part: a bf16 rounding that tips a router's
/// near tie sends a token to other experts, which moves its logits by whole units without
/// either run being wrong, so how far the runs agree is counted by the caller. Returns the
/// positions compared and the largest logit difference.
fn compare(
    what: &str,
    want: &Generation,
    got: &Generation,
    tie: f32,
    tolerance: f32,
    strict: bool,
) -> (usize, f32) {
    let mut worst = 0f32;
    for (i, (w, g)) in want.tokens.iter().zip(&got.tokens).enumerate() {
        let (first, second) = top_two(&want.logits[i]);
        if first - second < tie {
            return (i, worst);
        }
        let diff = want.logits[i]
            .iter()
            .zip(&got.logits[i])
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        if strict || i == 0 {
            assert_eq!(w, g, "{what}: token {i} (margin {})", first - second);
            assert!(
                diff <= tolerance,
                "{what}: logits of token {i} differ by {diff}"
            );
        } else if w != g || diff > tolerance {
            return (i, worst);
        }
        worst = worst.max(diff);
    }
    assert_eq!(want.tokens.len(), got.tokens.len(), "{what}: lengths");
    (want.tokens.len(), worst)
}

#[test]
#[serial]
fn every_family_split_over_two_and_four_npus_gives_the_tokens_of_one() {
    on_four("split_tokens", &[]);
}

/// Child of [`every_family_split_over_two_and_four_npus_gives_the_tokens_of_one`].
#[test]
#[ignore = "run by every_family_split_over_two_and_four_npus_gives_the_tokens_of_one"]
fn split_tokens() {
    let Some(devices) = npus("split_tokens", 4) else {
        return;
    };
    // f32: the split differs from one NPU by the order of f32 sums (~1e-6 of a logit); bf16:
    // the partial outputs are summed in bf16, each rounded once more than one NPU rounds them.
    for (dtype, tie, tolerance, share) in [
        (DType::F32, 1e-3, 1e-3, 0.95),
        (DType::BF16, 0.25, 0.5, 0.6),
    ] {
        let (mut compared, mut total) = (0, 0);
        for name in FAMILIES {
            let one = served(name, dtype, &devices[..1]);
            for n in [2, 4] {
                let split = served(name, dtype, &devices[..n]);
                for (i, (want, got)) in one.iter().zip(&split).enumerate() {
                    let what = format!("{name} in {dtype:?} on {n} NPUs, prompt {i}");
                    let strict = dtype == DType::F32;
                    let (same, worst) = compare(&what, want, got, tie, tolerance, strict);
                    eprintln!(
                        "{what}: {same} of {} tokens compared, logits within {worst}",
                        want.tokens.len()
                    );
                    compared += same;
                    total += want.tokens.len();
                }
            }
        }
        // Most positions are compared: near ties are rare.
        assert!(
            compared as f64 >= share * total as f64,
            "{dtype:?}: only {compared} of {total} positions agree before a near tie"
        );
    }
}

/// Pre-quantized checkpoints split too: their int8 layers are cut as float ones are (a static
/// W8A8 layer's `quant_bias` added by the first row-parallel shard only), FP8 ones dequantized
/// and cut on the device. Split in bf16, each shard quantizes its own activations, so the
/// runs are compared as bf16 ones are.
#[test]
fn pre_quantized_checkpoints_split_over_two_npus_give_the_tokens_of_one() {
    let Some(devices) = npus(
        "pre_quantized_checkpoints_split_over_two_npus_give_the_tokens_of_one",
        2,
    ) else {
        return;
    };
    let (mut compared, mut total) = (0, 0);
    for name in [
        "prequant/modelslim_w8a8_deepseek_v3",
        "prequant/modelslim_w8a16_mixtral",
        "prequant/ct_w8a8_qwen3_moe",
        "prequant/ct_w8a16_qwen2_moe",
        "prequant/fp8_deepseek_v3",
    ] {
        let one = served(name, DType::BF16, &devices[..1]);
        let two = served(name, DType::BF16, &devices);
        for (i, (want, got)) in one.iter().zip(&two).enumerate() {
            let what = format!("{name} on 2 NPUs, prompt {i}");
            let (same, worst) = compare(&what, want, got, 0.25, 0.5, false);
            eprintln!(
                "{what}: {same} of {} tokens agree, logits within {worst}",
                want.tokens.len()
            );
            compared += same;
            total += want.tokens.len();
        }
    }
    assert!(
        compared as f64 >= 0.6 * total as f64,
        "only {compared} of {total} positions agree before a near tie"
    );
}

/// A Qwen3-MoE checkpoint whose routed experts are most of its bytes (2 layers, 16 experts of
/// 512 on a width of 256, bf16), written into `dir`: `(bytes of the experts, of the rest)`.
fn expert_heavy(dir: &Path) -> (u64, u64) {
    let mut config = Published::Qwen3_30bA3b.config(2);
    for (key, value) in [
        ("vocab_size", 512),
        ("hidden_size", 256),
        ("num_experts", 16),
        ("moe_intermediate_size", 512),
        ("head_dim", 64),
    ] {
        config[key] = value.into();
    }
    let written = burn_ascend_llm::hf::dummy::write(&config, dir, u64::MAX, 5).unwrap();
    let experts = 2 * 16 * 3 * 256 * 512 * 2;
    (experts, written.tensor_bytes - experts)
}

#[test]
#[serial]
fn each_npu_holds_its_share_and_the_experts_fall_as_one_over_n() {
    on_four("split_memory", &[]);
}

/// Child of [`each_npu_holds_its_share_and_the_experts_fall_as_one_over_n`].
#[test]
#[ignore = "run by each_npu_holds_its_share_and_the_experts_fall_as_one_over_n"]
fn split_memory() {
    let Some(devices) = npus("split_memory", 4) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (experts, rest) = expert_heavy(dir.path());
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let contexts: Vec<_> = devices
        .iter()
        .map(|d| DeviceContext::get(&(*d).into()).unwrap())
        .collect();
    // Each NPU's bytes in use after loading on `n` NPUs (the weights), and its peak above them.
    let held = |n: usize| -> Vec<(u64, u64)> {
        let before: Vec<u64> = contexts[..n]
            .iter()
            .map(|c| {
                c.release_cache().unwrap();
                c.reset_peak_memory();
                c.memory_stats().bytes_in_use as u64
            })
            .collect();
        let model: Box<dyn std::any::Any> = if n == 1 {
            Box::new(
                families::load_from::<Ascend>(&checkpoint, LoadOptions::default(), &devices[0])
                    .unwrap(),
            )
        } else {
            let placement = Placement::local(&devices[..n]);
            Box::new(
                parallel::load_parallel::<Ascend>(&checkpoint, LoadOptions::default(), &placement)
                    .unwrap(),
            )
        };
        let out = contexts[..n]
            .iter()
            .zip(before)
            .map(|(c, before)| {
                c.synchronize().unwrap();
                let stats = c.memory_stats();
                let held = stats.bytes_in_use as u64 - before;
                (held, stats.peak_bytes_in_use as u64 - before - held)
            })
            .collect();
        drop(model);
        out
    };
    let whole = held(1)[0].0;
    eprintln!(
        "weights {} bytes: experts {experts}, the rest {rest}; one NPU holds {whole}",
        experts + rest
    );
    assert!(whole >= experts + rest, "one NPU holds the whole model");
    for n in [2, 4] {
        for (r, (bytes, above)) in held(n).into_iter().enumerate() {
            let mine = experts * experts_of(r, n, 16).len() as u64 / 16;
            eprintln!(
                "{n} NPUs, rank {r}: {bytes} bytes ({:.3} of one NPU's), {mine} of them its \
                 experts; peak {above} above",
                bytes as f64 / whole as f64
            );
            // Its experts are there, and no others: even with everything else whole it holds
            // less than the experts of two ranks.
            assert!(bytes >= mine, "{n} NPUs, rank {r}: {bytes} bytes");
            assert!(
                bytes <= experts / n as u64 + rest,
                "{n} NPUs, rank {r}: {bytes} bytes"
            );
            // The attention, MLP and vocabulary split too: the rest is not whole on every rank.
            assert!(
                bytes < experts / n as u64 + rest * 3 / 4,
                "{n} NPUs, rank {r}: {bytes} bytes"
            );
            // Nothing passed through it beyond one upload of its own at a time.
            assert!(
                above <= bytes / 2,
                "{n} NPUs, rank {r}: peaked {above} above {bytes}"
            );
        }
    }
}

/// Tensors every NPU of a split holds whole: norms, routers (and DeepSeek's correction bias),
/// Qwen2-MoE's shared-expert gate, MLA's latent projections.
fn replicated(name: &str) -> bool {
    [
        "layernorm.weight",
        "model.norm.weight",
        "_norm.weight",
        ".gate.weight",
        "e_score_correction_bias",
        "shared_expert_gate.weight",
        "q_a_proj.weight",
        "kv_a_proj_with_mqa.weight",
    ]
    .iter()
    .any(|s| name.ends_with(s))
}

#[test]
#[serial]
fn each_npu_reads_only_its_part_of_the_files() {
    let Some(devices) = npus("each_npu_reads_only_its_part_of_the_files", 2) else {
        return;
    };
    for name in FAMILIES {
        let checkpoint = Arc::new(Checkpoint::open(fixture(name)).unwrap());
        let (mut stored, mut whole) = (0, 0);
        for n in checkpoint.names().collect::<Vec<_>>() {
            let (_, bytes) = checkpoint.bytes(n).unwrap();
            stored += bytes.len() as u64;
            if replicated(n) {
                whole += bytes.len() as u64;
            }
        }
        let loaded = parallel::load_parallel_to_serve::<Ascend>(
            checkpoint.clone(),
            LoadOptions::default(),
            &Placement::local(&devices),
        )
        .unwrap();
        assert_eq!(
            loaded.report.read_bytes,
            stored + whole,
            "{name}: the checkpoint's {stored} bytes and {whole} held by both NPUs"
        );
    }
}

#[test]
#[serial]
fn a_fault_on_either_npu_fails_the_step_and_both_recover_from_the_files() {
    // A peer waits in a collective for a faulted one until HCCL_EXEC_TIMEOUT: short here.
    on_four("split_recovery", &[("HCCL_EXEC_TIMEOUT", "20".into())]);
}

/// Child of [`a_fault_on_either_npu_fails_the_step_and_both_recover_from_the_files`].
#[test]
#[ignore = "run by a_fault_on_either_npu_fails_the_step_and_both_recover_from_the_files"]
fn split_recovery() {
    let Some(devices) = npus("split_recovery", 2) else {
        return;
    };
    let name = "qwen2_moe";
    let requests = requests(name);
    let tokens = |r: &burn_ascend_llm::engine::workload::ServingReport| -> Vec<Vec<u32>> {
        r.results
            .iter()
            .map(|g| g.as_ref().map_or_else(|_| Vec::new(), |g| g.tokens.clone()))
            .collect()
    };
    let placement = Placement::local(&devices);
    let loaded = parallel::load_parallel_to_serve::<Ascend>(
        Arc::new(Checkpoint::open(fixture(name)).unwrap()),
        LoadOptions::default(),
        &placement,
    )
    .unwrap();
    let mut server =
        Server::with_reload(loaded.model, serve_config(), &devices[0], loaded.reload).unwrap();
    let want = tokens(&server.generate(&requests));
    assert!(want.iter().all(|t| !t.is_empty()));
    // A fault in the step's attention on every NPU (the server's fault injection): the step's
    // requests fail with it.
    server.inject_fault();
    let faulted = server.generate(&requests);
    assert!(faulted.failed > 0, "the injected fault fails its step");
    for e in faulted.results.iter().filter_map(|r| r.as_ref().err()) {
        assert!(e.to_string().contains("attention"), "{e}");
    }
    assert_eq!(tokens(&server.generate(&requests)), want, "after the fault");
    // A fault on the second NPU alone: the next step fails, both NPUs are reset and the
    // weights loaded again.
    drop(common::provoke_fault(&devices[1]));
    let second = DeviceContext::get(&devices[1].into()).unwrap();
    assert!(second.synchronize().is_err(), "{} faulted", devices[1]);
    let faulted = server.generate(&requests);
    assert!(
        faulted.failed > 0,
        "the fault on {} fails a step",
        devices[1]
    );
    assert_eq!(
        tokens(&server.generate(&requests)),
        want,
        "after a fault on {}",
        devices[1]
    );
    assert_eq!(server.pool().free_pages(), serve_config().pages);
}

/// The example's options serving `fixture` on `devices` NPUs with the test's prompts, greedily,
/// the cache sized from the NPUs' memory.
fn example_options(name: &str, devices: usize) -> Vec<String> {
    let mut options: Vec<String> = [
        "moe_decoder",
        "--device",
        "emulated:0",
        "--model",
        fixture(name).to_str().unwrap(),
        "--json",
        "--eager-decode",
        "--new-tokens",
        "16",
        "--max-seq",
        "128",
        "--page-size",
        "4",
        "--step-tokens",
        "8",
        "--devices",
        &devices.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for prompt in [
        "The lighthouse keeper",
        "She counted",
        "In the evenings the keeper",
    ] {
        options.extend(["--prompt".to_string(), prompt.to_string()]);
    }
    options
}

/// The JSON outcomes a child printed (one line each) and the pages its cache was sized to.
fn outcomes(out: &Output) -> (Vec<serde_json::Value>, usize) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let json = stdout
        .lines()
        // With one test thread, libtest's "test NAME ... " starts the first line.
        .filter_map(|l| l.find("{\"").map(|at| &l[at..]))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let pages = stderr
        .lines()
        .find_map(|l| {
            let at = l.find(" pages, ")?;
            l[..at].rsplit(' ').next()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no cache sizing in:\n{stderr}"));
    (json, pages)
}

#[test]
#[serial]
fn two_processes_of_two_npus_give_the_tokens_of_one_process_of_four() {
    if common::skipped_on_npu("two_processes_of_two_npus_give_the_tokens_of_one_process_of_four") {
        return;
    }
    let address = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    // The two machines' NPUs differ in memory, so their caches would differ in pages: they
    // agree on the smaller.
    let nodes: Vec<_> = [(0, "256"), (1, "320")]
        .into_iter()
        .map(|(node, hbm)| {
            start(
                "example_node",
                &[
                    (ENV_NODE, node.to_string()),
                    (ENV_ADDRESS, address.clone()),
                    (ENV_HBM, hbm.into()),
                    (burn_ascend::runtime::ENV_RENDEZVOUS_SECRET, SECRET.into()),
                    ("HCCL_IF_IP", "127.0.0.1".into()),
                    ("HCCL_EXEC_TIMEOUT", "60".into()),
                    // 2 x 200 MB of staging by default: more than these small NPUs hold.
                    ("HCCL_BUFFSIZE", "16".into()),
                ],
            )
        })
        .collect();
    let nodes: Vec<_> = nodes
        .into_iter()
        .map(|c| outcomes(&passed("example_node", c)))
        .collect();
    let (one, one_pages) = outcomes(&on_four(
        "example_four",
        &[(ENV_HBM, "256".into()), ("HCCL_BUFFSIZE", "16".into())],
    ));
    assert_eq!(one.len(), 3, "{one:?}");
    let tokens = |o: &[serde_json::Value]| -> Vec<serde_json::Value> {
        o.iter().map(|v| v["token_ids"].clone()).collect()
    };
    for (node, (out, pages)) in nodes.iter().enumerate() {
        assert_eq!(
            tokens(out),
            tokens(&one),
            "node {node} against one process of four"
        );
        assert!(
            out.iter()
                .all(|o| o["token_ids"].as_array().unwrap().len() == 16),
            "{out:?}"
        );
        // Sized from the smaller (256 MB) NPUs, as one process of four such NPUs is, but for
        // what each process's own communicator and step take.
        let near = (*pages as f64 - one_pages as f64).abs() <= 0.001 * one_pages as f64;
        assert!(
            near,
            "node {node}: {pages} pages, one process of four: {one_pages}"
        );
    }
    assert_eq!(
        nodes[0].1, nodes[1].1,
        "the nodes agree on their caches' pages"
    );
}

/// One node of [`two_processes_of_two_npus_give_the_tokens_of_one_process_of_four`]: the
/// example on two NPUs as node `BURN_ASCEND_TEST_NODE` of two.
#[test]
#[ignore = "run by two_processes_of_two_npus_give_the_tokens_of_one_process_of_four"]
fn example_node() {
    let (Ok(node), Ok(address)) = (std::env::var(ENV_NODE), std::env::var(ENV_ADDRESS)) else {
        panic!("started by two_processes_of_two_npus_give_the_tokens_of_one_process_of_four");
    };
    let mut options = example_options("deepseek_v2", 2);
    options.extend(
        [
            "--nodes",
            "2",
            "--node-rank",
            &node,
            "--rendezvous",
            &address,
        ]
        .map(String::from),
    );
    example::run(example::Args::try_parse_from(options).unwrap()).unwrap();
}

/// The reference of [`two_processes_of_two_npus_give_the_tokens_of_one_process_of_four`]: the
/// example on four NPUs of one process.
#[test]
#[ignore = "run by two_processes_of_two_npus_give_the_tokens_of_one_process_of_four"]
fn example_four() {
    let options = example_options("deepseek_v2", 4);
    example::run(example::Args::try_parse_from(options).unwrap()).unwrap();
}

/// Splits that cannot work are refused before anything is allocated, naming the size.
#[test]
fn splits_that_do_not_divide_are_refused_by_name() {
    let config = |name: &str, edit: &[(&str, serde_json::Value)]| {
        let mut c = Checkpoint::open(fixture(name)).unwrap().config().clone();
        for (k, v) in edit {
            c[*k] = v.clone();
        }
        families::spec_of(&c).unwrap()
    };
    let refused = |spec: families::DecoderSpec, ranks: usize, words: &[&str]| {
        let err = spec.check_split(ranks).unwrap_err().to_string();
        assert!(
            words.iter().all(|w| err.contains(w)),
            "{err} (expected {words:?})"
        );
    };
    refused(
        config("mixtral", &[]),
        3,
        &["cannot split over 3 NPUs", "4 attention heads"],
    );
    refused(
        config("mixtral", &[("num_local_experts", 2.into())]),
        4,
        &["2 routed experts"],
    );
    refused(
        config(
            "qwen3_moe",
            &[
                ("num_attention_heads", 6.into()),
                ("num_key_value_heads", 3.into()),
                ("head_dim", 16.into()),
            ],
        ),
        2,
        &["3 key/value heads"],
    );
    refused(
        config(
            "qwen2_moe",
            &[("shared_expert_intermediate_size", 50.into())],
        ),
        4,
        &["shared expert of 50"],
    );
    // Two key/value heads over four NPUs: each pair of NPUs holds one.
    assert!(config("qwen2_moe", &[]).check_split(4).is_ok());
}
