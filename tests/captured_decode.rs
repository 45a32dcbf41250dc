//! The MoE server's captured decode (`Server::enable_captured_decode`) against eager decode on
//! the same weights: the same tokens (and logits) for every request, with requests joining and
//! leaving between steps so that decode batches go through several buckets, padded; batches no
//! bucket holds run eagerly; a device fault in a replayed step fails that step only, and the
//! server captures again and goes on; the captured buckets hold no copy of the cache (the KV
//! write is in place).
//!
//! A capture forbids synchronising anything on its device, so these tests run one at a time.

mod common;

use std::collections::{BTreeSet, HashMap};

use burn::module::Module;
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn_ascend::Ascend;
use burn_ascend_llm::engine::decode_graph::DECODE_BUCKETS;
use burn_ascend_llm::engine::scheduler::RequestId;
use burn_ascend_llm::engine::serve::{Generation, Request, Sampling, ServeConfig, Server};
use burn_ascend_llm::moe::config::MoeConfig;
use burn_ascend_llm::moe::expert_parallel::ExpertParallel;
use burn_ascend_llm::moe::model::MoeDecoder;
use burn_flex::Flex;
use common::device;
use serial_test::serial;

fn small() -> MoeConfig {
    MoeConfig::new()
        .with_hidden(64)
        .with_layers(2)
        .with_q_heads(4)
        .with_kv_heads(2)
        .with_experts(4)
        .with_top_k(2)
        .with_expert_hidden(64)
        .with_max_seq(48)
}

fn serve_config() -> ServeConfig {
    ServeConfig {
        pages: 96,
        page_size: 4,
        max_seq: 48,
        max_kv_splits: 3,
        step_tokens: 24,
        max_waiting: 1024,
        record_logits: true,
    }
}

fn model(cfg: &MoeConfig) -> MoeDecoder<Ascend> {
    let fresh = MoeDecoder::<Flex>::new(cfg, &Default::default()).expect("a valid config");
    let bytes = BinBytesRecorder::<FullPrecisionSettings>::default()
        .record(fresh.into_record(), ())
        .expect("record");
    let record = BinBytesRecorder::<FullPrecisionSettings>::default()
        .load(bytes, &device())
        .expect("load");
    MoeDecoder::new(cfg, &device())
        .expect("a valid config")
        .load_record(record)
}

/// Request `i`: prompts of 1 to 9 tokens, 2 to 12 new tokens, one in four sampled at random.
fn request(i: usize) -> Request {
    let prompt = (0..1 + i * 5 % 9)
        .map(|j| ((i * 31 + j * 7) % 250) as u32)
        .collect();
    let sampling = if i % 4 == 3 {
        Sampling::Random {
            temperature: 0.8,
            top_k: 5,
            top_p: 1.0,
            min_p: 0.0,
            seed: i as u64,
        }
    } else {
        Sampling::Greedy
    };
    Request {
        prompt,
        new_tokens: 2 + i * 7 % 11,
        sampling,
        stop: Vec::new(),
    }
}

/// Serves `arrivals` (step, request) step by step: each request's generation and the bucket
/// each step replayed (`None`: eager).
fn drive(
    server: &mut Server<Ascend, MoeDecoder<Ascend>>,
    arrivals: &[(usize, Request)],
) -> (Vec<Generation>, Vec<Option<usize>>) {
    let mut ids: HashMap<RequestId, usize> = HashMap::new();
    let mut done = HashMap::new();
    let mut buckets = Vec::new();
    let mut step = 0;
    while done.len() < arrivals.len() {
        for (i, (at, r)) in arrivals.iter().enumerate() {
            if *at == step {
                ids.insert(server.submit(r.clone()).expect("a valid request"), i);
            }
        }
        let report = server.step();
        buckets.push(report.captured);
        for (id, result) in report.finished {
            done.insert(ids[&id], result.expect("the request is served"));
        }
        step += 1;
        assert!(step < 500, "the server stalls");
    }
    (
        (0..arrivals.len()).map(|i| done[&i].clone()).collect(),
        buckets,
    )
}

/// Requests arriving over the first steps, in waves, so the decode batch grows and shrinks.
fn arrivals(count: usize) -> Vec<(usize, Request)> {
    (0..count)
        .map(|i| ((i % 5) * (i / 5) + i / 3, request(i)))
        .collect()
}

fn assert_same_generations(eager: &[Generation], captured: &[Generation]) {
    for (i, (e, c)) in eager.iter().zip(captured).enumerate() {
        assert_eq!(e.tokens, c.tokens, "request {i}: tokens");
        for (t, (le, lc)) in e.logits.iter().zip(&c.logits).enumerate() {
            let worst = le
                .iter()
                .zip(lc)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(
                worst <= 1e-4,
                "request {i}, token {t}: logits differ by {worst}"
            );
        }
    }
}

#[test]
#[serial(graph)]
fn captured_decode_gives_the_tokens_of_eager_decode_as_requests_join_and_leave() {
    let cfg = small();
    let m = model(&cfg);
    let arrivals = arrivals(14);
    let mut eager = Server::new(m.clone(), serve_config(), &device()).unwrap();
    let (want, eager_steps) = drive(&mut eager, &arrivals);
    assert!(eager_steps.iter().all(Option::is_none));

    let mut server = Server::new(m, serve_config(), &device()).unwrap();
    server.enable_captured_decode(&DECODE_BUCKETS).unwrap();
    assert_eq!(server.captured_buckets(), DECODE_BUCKETS);
    assert!(server.eager_buckets().is_empty());
    let (got, steps) = drive(&mut server, &arrivals);
    assert_same_generations(&want, &got);
    let used: BTreeSet<usize> = steps.iter().flatten().copied().collect();
    assert!(
        used.len() >= 3,
        "decode batches went through buckets {used:?}"
    );
    assert!(
        steps.iter().any(Option::is_none),
        "prefill steps run eagerly"
    );
    assert_eq!(server.pool().free_pages(), serve_config().pages);
}

#[test]
#[serial(graph)]
fn batches_above_the_largest_bucket_run_eagerly_with_the_same_tokens() {
    let cfg = small();
    let m = model(&cfg);
    let arrivals: Vec<(usize, Request)> = (0..5).map(|i| (0, request(i))).collect();
    let mut eager = Server::new(m.clone(), serve_config(), &device()).unwrap();
    let (want, _) = drive(&mut eager, &arrivals);
    let mut server = Server::new(m, serve_config(), &device()).unwrap();
    server.enable_captured_decode(&[1, 2]).unwrap();
    assert_eq!(server.captured_buckets(), [1, 2]);
    let (got, steps) = drive(&mut server, &arrivals);
    assert_same_generations(&want, &got);
    let used: BTreeSet<Option<usize>> = steps.into_iter().collect();
    assert!(used.contains(&None) && used.contains(&Some(2)), "{used:?}");
}

#[test]
#[serial(graph)]
fn captured_decode_is_refused_off_ascend_and_on_a_busy_server() {
    let cfg = small();
    let flex = MoeDecoder::<Flex>::new(&cfg, &Default::default()).unwrap();
    let mut server = Server::new(flex, serve_config(), &Default::default()).unwrap();
    let why = server.enable_captured_decode(&DECODE_BUCKETS).unwrap_err();
    assert!(why.contains("Ascend backend"), "{why}");
    assert!(server.captured_buckets().is_empty());

    let mut busy = Server::new(model(&cfg), serve_config(), &device()).unwrap();
    busy.submit(request(0)).unwrap();
    let why = busy.enable_captured_decode(&DECODE_BUCKETS).unwrap_err();
    assert!(why.contains("before any request"), "{why}");
    let why = Server::new(model(&cfg), serve_config(), &device())
        .unwrap()
        .enable_captured_decode(&[0, 4])
        .unwrap_err();
    assert!(why.contains("at least 1"), "{why}");
}

#[test]
#[serial(graph)]
fn a_fault_in_a_replayed_step_fails_that_step_and_the_server_captures_again() {
    let cfg = small();
    let m = model(&cfg);
    let requests: Vec<Request> = (0..3)
        .map(|i| Request::greedy(request(i).prompt, 6))
        .collect();
    let mut eager = Server::new(m.clone(), serve_config(), &device()).unwrap();
    let want = eager.generate(&requests);
    let mut server = Server::new(m, serve_config(), &device()).unwrap();
    server.enable_captured_decode(&DECODE_BUCKETS).unwrap();
    for r in &requests {
        server.submit(r.clone()).unwrap();
    }
    assert_eq!(server.step().captured, None, "the prefill runs eagerly");
    server.inject_fault();
    let faulted = server.step();
    assert_eq!(faulted.captured, None, "a failed step reports no replay");
    assert_eq!(faulted.finished.len(), 3);
    for (_, result) in &faulted.finished {
        let err = result.as_ref().expect_err("the step faulted").to_string();
        assert!(err.contains("decode_attention"), "{err}");
    }
    assert_eq!(server.captured_buckets(), DECODE_BUCKETS, "captured again");
    let again = server.generate(&requests);
    for (i, (w, g)) in want.results.iter().zip(&again.results).enumerate() {
        assert_eq!(
            w.as_ref().unwrap().tokens,
            g.as_ref().unwrap().tokens,
            "request {i} after the fault"
        );
    }
}

#[test]
#[serial(graph)]
fn captured_decode_of_an_expert_parallel_model_is_refused_and_it_decodes_eagerly() {
    let devices = [device(), common::second_device()];
    if devices[0] == devices[1] {
        eprintln!("skipped: the machine has one NPU");
        return;
    }
    let cfg = small();
    let weights = model(&cfg);
    let sharded = ExpertParallel::shard(weights.clone(), &devices).expect("4 experts over 2 NPUs");
    let mut server = Server::new(sharded, serve_config(), &devices[0]).unwrap();
    let why = server.enable_captured_decode(&DECODE_BUCKETS).unwrap_err();
    assert!(
        why.contains("across NPUs") && why.contains("collectives"),
        "{why}"
    );
    assert!(server.captured_buckets().is_empty());
    // It serves eagerly, with the tokens of the same model on one NPU.
    let arrivals = arrivals(4);
    let (sharded_out, buckets) = drive(&mut server, &arrivals);
    assert!(buckets.iter().all(Option::is_none));
    let mut one = Server::new(weights, serve_config(), &devices[0]).unwrap();
    let (one_out, _) = drive(&mut one, &arrivals);
    assert_same_generations(&one_out, &sharded_out);
}

/// A decode step has at most `step_tokens` requests: buckets past the first that holds them
/// would never run, so they are not captured and hold no memory.
#[test]
#[serial(graph)]
fn buckets_a_step_can_never_fill_are_not_captured() {
    let cfg = small();
    let m = model(&cfg);
    let config = ServeConfig {
        step_tokens: 6,
        ..serve_config()
    };
    let mut server = Server::new(m, config, &device()).unwrap();
    server.enable_captured_decode(&DECODE_BUCKETS).unwrap();
    assert_eq!(server.captured_buckets(), [1, 2, 4, 8]);
    assert!(server.eager_buckets().is_empty());
    // It serves, every decode step in a captured bucket.
    let (_, steps) = drive(&mut server, &arrivals(10));
    assert!(steps.iter().flatten().all(|&b| b <= 8), "{steps:?}");
    assert!(steps.iter().flatten().count() > 0, "{steps:?}");
}

/// Device bytes a server with `pages` cache pages holds once its decode buckets are captured:
/// its cache and what the graphs keep.
fn captured_server_bytes(model: &MoeDecoder<Ascend>, pages: usize) -> usize {
    let ctx = burn_ascend::runtime::DeviceContext::get(&device().into()).expect("a context");
    let used = || {
        ctx.release_cache().expect("release the cache");
        let (free, total) =
            burn_ascend::runtime::device::memory_info(&device().into()).expect("info");
        total - free
    };
    let before = used();
    let cfg = ServeConfig {
        pages,
        ..serve_config()
    };
    let mut server = Server::new(model.clone(), cfg, &device()).expect("a valid config");
    server
        .enable_captured_decode(&[1, 2, 4])
        .expect("captured decode");
    assert_eq!(server.captured_buckets(), vec![1, 2, 4]);
    used() - before
}

#[test]
#[serial(graph)]
fn captured_buckets_hold_no_copy_of_the_cache() {
    let cfg = small();
    let model = model(&cfg);
    let small_cache = captured_server_bytes(&model, 64);
    let large_cache = captured_server_bytes(&model, 64 * 64);
    // Keys and values of every layer, f32 (each in its allocator size class), over the pages
    // and one scratch page per row of the largest bucket: what the larger cache adds.
    let tensor = |pages: usize| {
        let slot_bytes = cfg.kv_heads * (cfg.hidden / cfg.q_heads) * 4;
        burn_ascend::runtime::allocator::size_class((pages + 4) * 4 * slot_bytes)
    };
    let cache = cfg.layers * 2 * (tensor(64 * 64) - tensor(64));
    assert!(
        large_cache - small_cache <= cache + cache / 8,
        "the cache grew by {cache} bytes, the captured server by {}",
        large_cache - small_cache
    );
}
