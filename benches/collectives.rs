//! Collectives across the emulated NPUs: what each moves over the HCCS links against the
//! minimum, a modelled Atlas A2 time for it, and the work of a training step of the example
//! model on one NPU against two (data-parallel), by the emulation's counters.

mod common;

use std::time::Instant;

use burn::module::Module;
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::{Distribution, Int, Tensor};
use burn_ascend::collective::{self, Communicator, Reduce};
use burn_ascend::emulator::hccl::{hccl_counters, HcclCounters, Kind, KindTraffic};
use burn_ascend::emulator::{work_counters, WorkCounters, ENV_DEVICES};
use burn_ascend::{Ascend, AscendDevice, FusedOps};
use burn_ascend_llm::moe::config::MoeConfig;
use burn_ascend_llm::moe::corpus;
use burn_ascend_llm::moe::data_parallel::train_data_parallel;
use burn_ascend_llm::moe::expert_parallel::{dispatch_rows, ExpertParallel};
use burn_ascend_llm::moe::model::MoeDecoder;
use burn_ascend_llm::moe::train::{train, TrainConfig};
use burn_ascend_perf::a2;
use burn_autodiff::Autodiff;
use burn_flex::Flex;
use common::{mean, publish, Table};
use criterion::{criterion_group, criterion_main, Criterion};

/// Ranks of the largest communicator measured (the emulated machine gets this many NPUs).
const MAX_RANKS: usize = 4;
/// Elements of the buffers of the generic collectives (1 MiB of f32).
const ELEMS: usize = 1 << 18;

fn devices(n: usize) -> Vec<AscendDevice> {
    (0..n).map(AscendDevice::Emulated).collect()
}

fn sync(devices: &[AscendDevice]) {
    for d in devices {
        <Ascend as burn::tensor::backend::Backend>::sync(d).expect("the device ran its work");
    }
}

/// `f` run once, its collectives' traffic, and its wall time.
fn measured(devices: &[AscendDevice], f: impl FnOnce()) -> (HcclCounters, f64) {
    sync(devices);
    let before = hccl_counters();
    let start = Instant::now();
    f();
    sync(devices);
    (
        hccl_counters().since(&before),
        start.elapsed().as_secs_f64(),
    )
}

/// The modelled HCCS time of some transfers: their busiest link's bytes at the assumed link
/// bandwidth (a model, not a measurement; each round's latency is not modelled).
fn hccs_us(t: &KindTraffic) -> f64 {
    t.traffic.critical_bytes as f64 / a2::HCCS_LINK_BYTES_PER_S * 1e6
}

fn traffic_row(
    table: &mut Table,
    what: &str,
    ranks: usize,
    kind: Kind,
    c: &HcclCounters,
    wall: f64,
) {
    let t = c.of(kind);
    table.row(vec![
        what.into(),
        ranks.to_string(),
        t.calls.to_string(),
        t.traffic.rounds.to_string(),
        t.traffic.link_bytes.to_string(),
        t.traffic.min_link_bytes.to_string(),
        format!(
            "{:.2}",
            t.traffic.link_bytes as f64 / t.traffic.min_link_bytes.max(1) as f64
        ),
        format!("{:.1}", hccs_us(&t)),
        format!("{:.0}", wall * 1e6),
    ]);
}

fn ones(device: &AscendDevice, n: usize) -> Tensor<Ascend, 1> {
    Tensor::ones([n], device)
}

/// The generic collectives on 2 and 4 ranks.
fn generic(table: &mut Table) {
    for n in [2, MAX_RANKS] {
        let d = devices(n);
        let comm = Communicator::local(&d).expect("a communicator");
        let inputs = || d.iter().map(|dev| ones(dev, ELEMS)).collect::<Vec<_>>();
        let (c, wall) = measured(&d, || {
            collective::all_reduce(&comm, inputs(), Reduce::Sum);
        });
        traffic_row(table, "all_reduce 1 MiB", n, Kind::AllReduce, &c, wall);
        let (c, wall) = measured(&d, || {
            collective::broadcast(&comm, inputs(), 0);
        });
        traffic_row(table, "broadcast 1 MiB", n, Kind::Broadcast, &c, wall);
        let (c, wall) = measured(&d, || {
            collective::all_gather(&comm, inputs());
        });
        traffic_row(
            table,
            "all_gather 1 MiB per rank",
            n,
            Kind::AllGather,
            &c,
            wall,
        );
        let (c, wall) = measured(&d, || {
            collective::reduce_scatter(&comm, inputs(), Reduce::Sum);
        });
        traffic_row(
            table,
            "reduce_scatter 1 MiB",
            n,
            Kind::ReduceScatter,
            &c,
            wall,
        );
    }
}

/// The example model's configuration.
fn example() -> MoeConfig {
    MoeConfig::new()
}

fn weights(cfg: &MoeConfig) -> Vec<u8> {
    let model = MoeDecoder::<Flex>::new(cfg, &Default::default()).expect("a valid config");
    BinBytesRecorder::<FullPrecisionSettings>::default()
        .record(model.into_record(), ())
        .expect("record")
}

fn load<B: FusedOps>(cfg: &MoeConfig, bytes: &[u8], device: &B::Device) -> MoeDecoder<B> {
    let record = BinBytesRecorder::<FullPrecisionSettings>::default()
        .load(bytes.to_vec(), device)
        .expect("load");
    MoeDecoder::<B>::new(cfg, device)
        .expect("a valid config")
        .load_record(record)
}

const STEP: TrainConfig = TrainConfig {
    steps: 1,
    batch: 4,
    seq_len: 32,
    learning_rate: 3e-3,
    aux_weight: 0.01,
};

/// One training step of the example model on one NPU and data-parallel on two: the gradient
/// all-reduce's traffic, and the work of the step by the emulation's counters.
fn training(traffic: &mut Table, work: &mut Table, bytes: &[u8]) {
    let cfg = example();
    let tokens = corpus::tokens();
    type B = Autodiff<Ascend>;
    let one = devices(1);
    let two = devices(2);
    // A step each to warm up (plans, caches), then the measured step.
    for _ in 0..2 {
        let _ = train(
            load::<B>(&cfg, bytes, &one[0]),
            &tokens,
            &STEP,
            &one[0],
            |_| {},
        );
        let _ = train_data_parallel(
            load::<B>(&cfg, bytes, &one[0]),
            &tokens,
            &STEP,
            &two,
            |_| {},
        );
    }
    let model = load::<B>(&cfg, bytes, &one[0]);
    sync(&two);
    let w = work_counters();
    let _ = train(model, &tokens, &STEP, &one[0], |_| {});
    sync(&one);
    let single = work_counters().since(&w);
    let model = load::<B>(&cfg, bytes, &one[0]);
    sync(&two);
    let w = work_counters();
    let (c, wall) = measured(&two, || {
        let _ = train_data_parallel(model, &tokens, &STEP, &two, |_| {});
    });
    let parallel = work_counters().since(&w);
    traffic_row(
        traffic,
        "gradients of the example model (one bucket)",
        2,
        Kind::AllReduce,
        &c,
        wall,
    );
    let params = load::<Ascend>(&cfg, bytes, &one[0]).num_params();
    let grads = c.of(Kind::AllReduce);
    let per_device = |w: &WorkCounters, n: u64| {
        (
            (w.launches() / n).to_string(),
            format!("{:.1}", w.bytes() as f64 / n as f64 / 1e6),
            format!(
                "{:.1}",
                w.bytes() as f64 / n as f64 / a2::HBM_BYTES_PER_S * 1e6
            ),
        )
    };
    let (l1, b1, t1) = per_device(&single, 1);
    let (l2, b2, t2) = per_device(&parallel, 2);
    work.row(vec!["1 NPU".into(), l1, b1, t1, "0".into(), "0".into()]);
    // The all-reduce's link bytes are what each rank sends; the fraction all-reduces of the
    // load-balancing loss are 8 floats per layer.
    work.row(vec![
        "2 NPUs, data-parallel".into(),
        l2,
        b2,
        t2,
        format!("{:.1}", grads.traffic.link_bytes as f64 / 2.0 / 1e6),
        format!("{:.1}", hccs_us(&grads)),
    ]);
    work.row(vec![
        format!("ratio per NPU (2 / 1); {params} parameters"),
        format!(
            "{:.2}",
            parallel.launches() as f64 / 2.0 / single.launches() as f64
        ),
        format!(
            "{:.2}",
            parallel.bytes() as f64 / 2.0 / single.bytes() as f64
        ),
        "-".into(),
        "-".into(),
        "-".into(),
    ]);
}

/// One MoE layer of the example model, expert-parallel on two NPUs, over a decode batch.
fn expert_parallel(traffic: &mut Table, dispatch: &mut Table, bytes: &[u8]) {
    let cfg = example();
    let two = devices(2);
    let model = load::<Ascend>(&cfg, bytes, &two[0]);
    let dims = *model.dims();
    let reference = model.blocks[0].moe.clone();
    let sharded = ExpertParallel::shard(model, &two).expect("8 experts over 2 NPUs");
    let layer = sharded.blocks[0]
        .moe
        .parallel
        .get::<ExpertParallel<Ascend>>()
        .expect("an expert-parallel layer");
    for tokens in [8usize, 32] {
        let x = Tensor::<Ascend, 2>::random(
            [tokens, cfg.hidden],
            Distribution::Normal(0.0, 1.0),
            &two[0],
        );
        let ids: Vec<u32> = reference
            .route(x.clone(), &dims)
            .ids
            .into_data()
            .convert::<i64>()
            .to_vec::<i64>()
            .unwrap()
            .into_iter()
            .map(|i| i as u32)
            .collect();
        let (sent, minimum) = dispatch_rows(&ids, cfg.top_k, cfg.experts, two.len());
        let (c, wall) = measured(&two, || {
            layer.forward_ranks(vec![Some(x), None], &dims);
        });
        traffic_row(
            traffic,
            &format!("MoE layer all-to-alls, {tokens} tokens (rows, ids, rows back)"),
            2,
            Kind::AlltoAllV,
            &c,
            wall,
        );
        let t = c.of(Kind::AlltoAllV).traffic;
        let row = (cfg.hidden * 4) as u64;
        dispatch.row(vec![
            tokens.to_string(),
            sent.to_string(),
            minimum.to_string(),
            format!("{:.2}", sent as f64 / minimum.max(1) as f64),
            t.link_bytes.to_string(),
            (2 * minimum as u64 * row).to_string(),
            format!(
                "{:.2}",
                t.link_bytes as f64 / (2 * minimum as u64 * row).max(1) as f64
            ),
        ]);
    }
}

fn bench(c: &mut Criterion) {
    // The emulated machine is sized on its first use, which is below.
    if std::env::var_os(ENV_DEVICES).is_none() {
        std::env::set_var(ENV_DEVICES, MAX_RANKS.to_string());
    }
    let d = devices(2);
    let comm = Communicator::local(&d).expect("a communicator");
    let mut g = c.benchmark_group("collectives");
    g.bench_function("all_reduce_1MiB_2_npus", |b| {
        let inputs: Vec<_> = d.iter().map(|dev| ones(dev, ELEMS)).collect();
        common::timed(
            b,
            "all_reduce",
            || {
                collective::all_reduce(&comm, inputs.clone(), Reduce::Mean);
            },
            || sync(&d),
        );
    });
    g.bench_function("all_gather_int_2_npus", |b| {
        let inputs: Vec<_> = d
            .iter()
            .map(|dev| Tensor::<Ascend, 1, Int>::zeros([8], dev))
            .collect();
        common::timed(
            b,
            "all_gather_int",
            || {
                collective::all_gather_int(&comm, inputs.clone());
            },
            || sync(&d),
        );
    });
    g.finish();

    let mut traffic = Table::new(
        "Link traffic per collective against the minimum, modelled A2 time over HCCS",
        &[
            "transfer",
            "ranks",
            "calls",
            "rounds",
            "link bytes",
            "minimum",
            "ratio",
            "modelled HCCS µs",
            "emulation wall µs",
        ],
    );
    generic(&mut traffic);
    let bytes = weights(&example());
    let mut dispatch = Table::new(
        "Expert-parallel dispatch (example model, 2 NPUs, tokens on the first)",
        &[
            "tokens",
            "rows sent to the other NPU",
            "(token, NPU) pairs",
            "ratio",
            "all-to-all link bytes",
            "minimum (pairs, both ways)",
            "ratio",
        ],
    );
    expert_parallel(&mut traffic, &mut dispatch, &bytes);
    let mut work = Table::new(
        "A training step of the example model (batch 4 x 32 tokens): work per NPU",
        &[
            "setup",
            "launches",
            "HBM MB (counters)",
            "modelled HBM µs",
            "gradient MB sent",
            "modelled HCCS µs",
        ],
    );
    training(&mut traffic, &mut work, &bytes);
    let timing = format!(
        "emulation wall time per call: all_reduce of 1 MiB on 2 NPUs {} µs, all_gather of 8 ints {} µs (host memcpy, not NPU speed)",
        common::us(mean("all_reduce")),
        common::us(mean("all_gather_int")),
    );
    publish(
        "collectives",
        &[traffic, dispatch, work],
        &[
            &timing,
            "link bytes: bytes sent from one NPU to another, counted by the emulated HCCL under the algorithm it models on a full mesh (two-shot all-reduce: reduce-scatter then all-gather; one-shot broadcast, all-gather, reduce-scatter and all-to-all); minimum: the fewest bytes any algorithm must send for the same result",
            "modelled HCCS µs (a model, not a measurement): the busiest link's bytes per round, summed over rounds, at 56 GB/s per link and direction (ASSUMED: the fact sheets give no HCCS bandwidth; 56 GB/s per link, 7 links per 910B in an 8-NPU full-mesh server, is the commonly quoted third-party figure, UNCERTAIN); one latency per round is not modelled",
            "modelled HBM µs: the step's global-memory bytes per NPU at 1.6 TB/s (hardware-atlas-a2.md, UNCERTAIN)",
        ],
    );
}

criterion_group! {
    name = benches;
    config = common::criterion();
    targets = bench
}

criterion_main!(benches);
