//! Loading a checkpoint at real size: one decoder layer of Qwen3-30B-A3B (its published
//! config.json, random bf16 weights, 2.5 GB in two shards) from the page cache onto the
//! emulated NPU, in its own dtype (bf16: no conversion), converted to f32 on the device, and
//! quantized to W8A8 as it loads. Throughput in GB/s of checkpoint read, beside the reference
//! measured in the same run: copying the same bytes out of the files' maps once (what any
//! loader must at least do).

mod common;

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use burn::tensor::DType;
use burn_ascend::{Ascend, AscendDevice};
use burn_ascend_llm::families::blocks::quant::Quantize;
use burn_ascend_llm::families::{self, LoadOptions};
use burn_ascend_llm::hf::Checkpoint;
use burn_ascend_suite::real_checkpoint::{self, Published};
use common::{mean, publish, record, Table};
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};

const LAYERS: usize = 1;

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let written = real_checkpoint::write(Published::Qwen3_30bA3b, LAYERS, dir.path(), 2 << 30, 1)
        .expect("the checkpoint is written");
    let checkpoint = Arc::new(Checkpoint::open(dir.path()).unwrap());
    let names: Vec<String> = checkpoint.names().map(str::to_string).collect();
    let device = AscendDevice::default();
    let cases: [(&str, LoadOptions); 3] = [
        ("bf16 (its own)", LoadOptions::default()),
        ("f32 (cast on the device)", DType::F32.into()),
        (
            "W8A8 (quantized as it loads)",
            LoadOptions {
                dtype: None,
                quantize: Some(Quantize::W8A8),
            },
        ),
    ];
    let mut group = c.benchmark_group("load");
    group.sampling_mode(SamplingMode::Flat).sample_size(10);
    // The reference: every tensor's bytes copied out of the maps (the first pass also brings
    // the files into the page cache).
    group.bench_function("copy out of the maps", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                for name in &names {
                    let (_, bytes) = checkpoint.bytes(name).unwrap();
                    black_box(bytes.to_vec());
                }
            }
            let took = start.elapsed();
            record("copy", took, iters);
            took
        })
    });
    for (name, options) in cases {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut took = std::time::Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    let loaded =
                        families::load_to_serve::<Ascend>(checkpoint.clone(), options, &device)
                            .expect("the checkpoint loads");
                    took += start.elapsed();
                    drop(loaded);
                }
                record(name, took, iters);
                took
            })
        });
    }
    group.finish();

    let gb = written.tensor_bytes as f64 / 1e9;
    let reference = mean("copy").map(|s| gb / s);
    let mut table = Table::new(
        &format!(
            "{} layer of {} ({gb:.2} GB of bf16) from the page cache to the emulated NPU",
            LAYERS,
            Published::Qwen3_30bA3b.name()
        ),
        &["load", "GB/s", "x the copy out of the maps"],
    );
    if let Some(r) = reference {
        table.row(vec![
            "copy out of the maps (reference)".into(),
            format!("{r:.2}"),
            "1.00".into(),
        ]);
    }
    for (name, _) in cases {
        if let Some(s) = mean(name) {
            let rate = gb / s;
            table.row(vec![
                name.into(),
                format!("{rate:.2}"),
                reference.map_or("-".into(), |r| format!("{:.2}", rate / r)),
            ]);
        }
    }
    publish(
        "load",
        &[table],
        &[
            "GB/s of checkpoint bytes read; each load ends with the device synchronised",
            "target: 1 GB/s or more in the checkpoint's own dtype (issue 34)",
        ],
    );
}

criterion_group! {
    name = benches;
    config = common::criterion();
    targets = bench
}
criterion_main!(benches);
