//! A checkpoint at Qwen3-30B-A3B's real layer shapes (its published config.json, two of its 48
//! layers, random bf16 weights: 3.7 GB in three shards), loaded and served as a user's: in the
//! checkpoint's own dtype, each weight from the file's map to the device, no copy of the model
//! on the host. A counting allocator (this binary only) measures the host heap; the emulated
//! NPU's memory is mapped outside it, and the checkpoint's pages are the file cache's.
//!
//! Every test is `serial`: the allocator counts the whole process.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use burn::tensor::DType;
use burn_ascend::runtime::DeviceContext;
use burn_ascend::{Ascend, AscendDevice};
use burn_ascend_llm::engine::serve::{Request, ServeConfig, Server};
use burn_ascend_llm::families::blocks::quant::Quantize;
use burn_ascend_llm::families::{self, Decoder, LoadError, LoadOptions, ToServe};
use burn_ascend_llm::hf::dummy::{Precision, Written};
use burn_ascend_llm::hf::Checkpoint;
use burn_ascend_suite::real_checkpoint::{self, Published};
use serial_test::serial;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Ordering::SeqCst) + bytes;
    PEAK.fetch_max(live, Ordering::SeqCst);
}

// SAFETY: every call is forwarded to the system allocator unchanged; only sizes are counted.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        System.dealloc(p, layout);
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let q = System.realloc(p, layout, new_size);
        if !q.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
            grew(new_size);
        }
        q
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const GIB: u64 = 1 << 30;
const LAYERS: usize = 2;

/// The checkpoint, written once per run (in shards of at most 2 GB, so that it has an index)
/// under cargo's directory for test files: a static's temporary directory is never removed, and
/// each run would leave 3.7 GB behind.
fn checkpoint() -> &'static Written {
    static WRITTEN: OnceLock<Written> = OnceLock::new();
    WRITTEN.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("real_size_qwen3_30b_a3b");
        // Whatever an interrupted run left is written anew.
        let _ = std::fs::remove_dir_all(&dir);
        real_checkpoint::write(Published::Qwen3_30bA3b, LAYERS, &dir, 2_000_000_000, 7)
            .expect("the checkpoint is written")
    })
}

/// The host memory a run may take: a quarter of the checkpoint and 1 GiB.
fn host_budget(written: &Written) -> u64 {
    written.tensor_bytes / 4 + GIB
}

/// Runs `f` and returns its result and the peak of the host heap it added.
fn host_peak<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let base = LIVE.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    let out = f();
    (out, (PEAK.load(Ordering::SeqCst) - base) as u64)
}

fn device() -> AscendDevice {
    AscendDevice::default()
}

fn serve_config() -> ServeConfig {
    ServeConfig {
        pages: 32,
        page_size: 16,
        max_seq: 256,
        max_kv_splits: 4,
        step_tokens: 64,
        max_waiting: 16,
        record_logits: false,
    }
}

fn requests() -> Vec<Request> {
    (0..2u32)
        .map(|r| {
            Request::greedy(
                (0..24)
                    .map(|i| (r * 7919 + i * 104_729) % 151_936)
                    .collect(),
                4,
            )
        })
        .collect()
}

fn tokens(server: &mut Server<Ascend, Decoder<Ascend>>) -> Vec<Vec<u32>> {
    let out = server.generate(&requests());
    out.results
        .iter()
        .map(|r| r.as_ref().expect("served").tokens.clone())
        .collect()
}

fn gb(bytes: u64) -> f64 {
    bytes as f64 / 1e9
}

#[test]
#[serial]
fn the_writer_draws_weights_as_transformers_initialises_them() {
    let written = checkpoint();
    assert!(written.shards >= 2, "2 GB shards of 3.7 GB of weights");
    let checkpoint = Checkpoint::open(&written.dir).unwrap();
    assert_eq!(checkpoint.dtype().unwrap(), Some(DType::BF16));
    let values = |name: &str| -> Vec<f32> {
        checkpoint
            .read(name, DType::F32)
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
    };
    let gate = values("model.layers.1.mlp.gate.weight");
    assert_eq!(gate.len(), 128 * 2048);
    let mean = gate.iter().sum::<f32>() / gate.len() as f32;
    let std = (gate.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / gate.len() as f32).sqrt();
    assert!(mean.abs() < 1e-3, "mean {mean}");
    assert!(
        (std - 0.02).abs() < 0.001,
        "std {std}, initializer_range 0.02"
    );
    assert!(values("model.norm.weight").iter().all(|&v| v == 1.0));
}

#[test]
#[serial]
fn loads_and_serves_in_its_own_dtype_within_a_quarter_of_its_size_of_host_memory() {
    let written = checkpoint();
    let budget = host_budget(written);
    let device = device();
    let ((sizing, tokens, load, used), peak) = host_peak(|| {
        let checkpoint = Arc::new(Checkpoint::open(&written.dir).unwrap());
        let ToServe {
            model,
            reload,
            report: load,
        } = families::load_to_serve::<Ascend>(checkpoint, LoadOptions::default(), &device)
            .expect("the checkpoint loads");
        assert_eq!(model.dtype(), DType::BF16, "config.json's torch_dtype");
        let mut server = Server::with_reload(model, serve_config(), &device, reload).unwrap();
        let sizing = server.fit_cache_to_memory(0.9).expect("the cache is sized");
        let tokens = tokens(&mut server);
        let (free, total) = burn_ascend::runtime::device::memory_info(&device.into()).unwrap();
        (sizing, tokens, load, (total - free) as f64 / total as f64)
    });
    eprintln!(
        "{} layers of {} ({:.2} GB): loaded at {:.2} GB/s; host heap peak {:.2} GB (budget \
         {:.2}); KV cache {} pages ({} tokens) beside {:.2} GB in use, a step's workspace {:.3} GB",
        LAYERS,
        Published::Qwen3_30bA3b.name(),
        gb(written.tensor_bytes),
        load.gb_per_s(),
        gb(peak),
        gb(budget),
        sizing.pages,
        sizing.tokens,
        gb(sizing.in_use_bytes),
        gb(sizing.workspace_bytes),
    );
    assert_eq!(load.read_bytes, written.tensor_bytes);
    assert!(
        peak <= budget,
        "loading and serving took {peak} bytes of host memory, over {budget}"
    );
    assert!(tokens.iter().all(|t| t.len() == 4));
    // The cache took what the weights and the step left of 0.9 of the device, and serving
    // stayed within it, but for the caching allocator's rounding of the blocks a served step
    // holds beyond the probe's (a few MB of 64 GB).
    assert!(
        sizing.in_use_bytes >= written.tensor_bytes,
        "the weights are in use"
    );
    assert!(
        (0.85..=0.902).contains(&used),
        "{used} of the device in use after sizing the cache at 0.9 and serving"
    );
}

/// The same model stored W8A8 as LLM Compressor writes it: loaded as stored (its format read
/// from config.json, its dtype bf16), served, within the same host budget (a quarter of its
/// own, smaller, size and 1 GiB), holding on the device little more than its files' bytes.
#[test]
#[serial]
fn a_pre_quantized_w8a8_checkpoint_serves_within_a_quarter_of_its_size_of_host_memory() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let written = real_checkpoint::write_as(
        Published::Qwen3_30bA3b,
        LAYERS,
        dir.path(),
        2_000_000_000,
        7,
        Precision::W8A8,
    )
    .expect("the checkpoint is written");
    let float = checkpoint();
    // The layers' half in int8; the embedding and LM head (a third of two layers' bytes) bf16.
    assert!(
        written.tensor_bytes < float.tensor_bytes * 7 / 10,
        "int8 layers: {} bytes against {} in bf16",
        written.tensor_bytes,
        float.tensor_bytes
    );
    let budget = host_budget(&written);
    let device = device();
    let ctx = DeviceContext::get(&device.into()).unwrap();
    ctx.release_cache().unwrap();
    let before = ctx.memory_stats().bytes_in_use as u64;
    let ((tokens, format, on_device, load), peak) = host_peak(|| {
        let checkpoint = Arc::new(Checkpoint::open(&written.dir).unwrap());
        let ToServe {
            model,
            reload,
            report,
        } = families::load_to_serve::<Ascend>(checkpoint, LoadOptions::default(), &device)
            .expect("the checkpoint loads as stored");
        assert_eq!(model.dtype(), DType::BF16, "config.json's torch_dtype");
        assert_eq!(model.quantized(), Some(Quantize::W8A8));
        ctx.synchronize().unwrap();
        let on_device = ctx.memory_stats().bytes_in_use as u64 - before;
        let format = model.prequantized().map(str::to_string);
        let mut server = Server::with_reload(model, serve_config(), &device, reload).unwrap();
        (tokens(&mut server), format, on_device, report)
    });
    eprintln!(
        "W8A8 as stored ({:.2} GB): loaded at {:.2} GB/s, {:.2} GB on the device, host heap \
         peak {:.2} GB (budget {:.2})",
        gb(written.tensor_bytes),
        load.gb_per_s(),
        gb(on_device),
        gb(peak),
        gb(budget)
    );
    assert!(format.is_some_and(|f| f.contains("compressed-tensors")));
    assert_eq!(load.read_bytes, written.tensor_bytes);
    assert!(peak <= budget, "{peak} bytes of host memory, over {budget}");
    assert!(tokens.iter().all(|t| t.len() == 4));
    // The weights as stored (scales widened to f32 beside them), not a float copy.
    assert!(
        on_device < written.tensor_bytes * 12 / 10,
        "{on_device} bytes on the device for {} of files",
        written.tensor_bytes
    );
}

#[test]
#[serial]
fn quantized_as_it_loads_the_float_model_is_never_on_the_device_whole() {
    let written = checkpoint();
    let budget = host_budget(written);
    let device = device();
    let ctx = DeviceContext::get(&device.into()).unwrap();
    ctx.release_cache().unwrap();
    let before = ctx.memory_stats().bytes_in_use as u64;
    ctx.reset_peak_memory();
    let options = LoadOptions {
        dtype: None,
        quantize: Some(Quantize::W8A8),
    };
    let ((model, quantized_bytes), peak) = host_peak(|| {
        let model = families::load::<Ascend>(&written.dir, options, &device)
            .expect("the checkpoint loads quantized")
            .model;
        ctx.synchronize().unwrap();
        let bytes = ctx.memory_stats().bytes_in_use as u64 - before;
        (model, bytes)
    });
    let device_peak = ctx.memory_stats().peak_bytes_in_use as u64 - before;
    eprintln!(
        "W8A8 as loaded: {:.2} GB on the device (bf16 checkpoint {:.2} GB), device peak {:.2} GB, \
         host heap peak {:.2} GB",
        gb(quantized_bytes),
        gb(written.tensor_bytes),
        gb(device_peak),
        gb(peak)
    );
    assert_eq!(model.quantized(), Some(Quantize::W8A8));
    assert!(peak <= budget, "{peak} bytes of host memory, over {budget}");
}

#[test]
#[serial]
fn quantized_as_it_loads_the_device_holds_one_float_layer_at_most() {
    // Many small layers, so that one layer and the whole float model differ by far.
    let mut config = Published::Qwen3_30bA3b.config(12);
    for (key, value) in [
        ("vocab_size", 512),
        ("hidden_size", 256),
        ("num_experts", 16),
        ("moe_intermediate_size", 256),
        ("head_dim", 64),
    ] {
        config[key] = value.into();
    }
    let dir = tempfile::tempdir().unwrap();
    let written = burn_ascend_llm::hf::dummy::write(&config, dir.path(), u64::MAX, 3).unwrap();
    let layer = (written.tensor_bytes - 2 * 512 * 256 * 2) / 12;
    let device = device();
    let ctx = DeviceContext::get(&device.into()).unwrap();
    let load = |quantize| {
        ctx.release_cache().unwrap();
        let before = ctx.memory_stats().bytes_in_use as u64;
        ctx.reset_peak_memory();
        let options = LoadOptions {
            dtype: None,
            quantize,
        };
        let model = families::load::<Ascend>(dir.path(), options, &device).unwrap();
        ctx.synchronize().unwrap();
        let stats = ctx.memory_stats();
        let held = stats.bytes_in_use as u64 - before;
        drop(model);
        (held, stats.peak_bytes_in_use as u64 - before)
    };
    let (float_held, float_peak) = load(None);
    let (int8_held, int8_peak) = load(Some(Quantize::W8A8));
    eprintln!(
        "12 layers of {layer} bytes: float {float_held} held ({float_peak} peak); W8A8 \
         {int8_held} held ({int8_peak} peak)"
    );
    assert!(int8_held < float_held * 3 / 4, "the int8 model is smaller");
    // The peak is the int8 model and one float layer with its quantization's temporaries.
    assert!(
        int8_peak <= int8_held + 2 * layer,
        "loading W8A8 peaked at {int8_peak} bytes: more than the int8 model ({int8_held}) and \
         two float layers ({layer} each)"
    );
    assert!(
        int8_peak < float_held,
        "never the float model whole ({float_held})"
    );
}

#[test]
#[serial]
fn after_a_device_fault_the_weights_come_back_from_the_files() {
    let written = checkpoint();
    let budget = host_budget(written);
    let device = device();
    let (outcome, peak) = host_peak(|| {
        let checkpoint = Arc::new(Checkpoint::open(&written.dir).unwrap());
        let ToServe { model, reload, .. } =
            families::load_to_serve::<Ascend>(checkpoint, LoadOptions::default(), &device).unwrap();
        let mut server = Server::with_reload(model, serve_config(), &device, reload).unwrap();
        let before = tokens(&mut server);
        server.inject_fault();
        let failed = server.generate(&requests());
        let after = tokens(&mut server);
        (before, failed, after)
    });
    let (before, failed, after) = outcome;
    assert!(
        failed.results.iter().all(|r| r.is_err()),
        "the faulted step fails its requests"
    );
    assert_eq!(before, after, "the reloaded weights give the same tokens");
    assert!(
        peak <= budget,
        "{peak} bytes of host memory with a recovery, over {budget}"
    );
}

#[test]
#[serial]
fn a_checkpoint_that_cannot_fit_the_device_is_refused_before_anything_is_allocated() {
    let written = checkpoint();
    let device = device();
    let ctx = DeviceContext::get(&device.into()).unwrap();
    ctx.release_cache().unwrap();
    let before = ctx.memory_stats();
    // f32 doubles the weights: the test fills the device so that bf16 would fit and f32 not.
    let (free, _) = burn_ascend::runtime::device::memory_info(&device.into()).unwrap();
    let ballast_bytes = free as u64 - written.tensor_bytes * 3 / 2;
    let ballast = burn::tensor::Tensor::<Ascend, 1>::zeros(
        [(ballast_bytes / 4) as usize],
        (&device, DType::F32),
    );
    let err = families::load::<Ascend>(&written.dir, DType::F32, &device)
        .err()
        .expect("an f32 load that cannot fit is refused");
    match &err {
        LoadError::DoesNotFit { needed, free, .. } => {
            assert_eq!(*needed, written.tensor_bytes * 2);
            assert!(needed > free);
        }
        other => panic!("expected DoesNotFit, got {other}"),
    }
    let message = err.to_string();
    assert!(
        message.contains(&Path::new(&written.dir).display().to_string()),
        "{message}"
    );
    drop(ballast);
    ctx.release_cache().unwrap();
    assert_eq!(
        ctx.memory_stats().bytes_in_use,
        before.bytes_in_use,
        "nothing left allocated"
    );
}
