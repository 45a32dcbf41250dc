//! The MoE decoder beyond one NPU, on the emulated machine's two NPUs: expert-parallel serving
//! (each layer's experts split across the NPUs, rows moved by all-to-all) gives the tokens and
//! logits of one NPU; the expert-parallel layer with tokens on both NPUs gives each NPU's
//! single-device output; data-parallel training (replicas on both NPUs, gradients all-reduced)
//! follows single-device training on the whole batches.

mod common;

use burn::module::{Module, ModuleVisitor, Param};
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor};
use burn_ascend::{Ascend, AscendDevice, FusedOps};
use burn_ascend_llm::engine::serve::{Request, ServeConfig, Server};
use burn_ascend_llm::moe::config::MoeConfig;
use burn_ascend_llm::moe::corpus;
use burn_ascend_llm::moe::data_parallel::train_data_parallel;
use burn_ascend_llm::moe::expert_parallel::ExpertParallel;
use burn_ascend_llm::moe::model::MoeDecoder;
use burn_ascend_llm::moe::train::{train, TrainConfig};
use burn_autodiff::Autodiff;
use common::{device, second_device, Flex};
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

/// The two devices, or `None` (after saying so) on a one-NPU machine.
fn pair(test: &str) -> Option<[AscendDevice; 2]> {
    let devices = [device(), second_device()];
    if devices[0] == devices[1] {
        eprintln!("{test}: skipped: the machine has one NPU");
        return None;
    }
    Some(devices)
}

/// A fresh model's weights as bytes (loaded by every side: parameters initialise lazily).
fn weights(cfg: &MoeConfig) -> Vec<u8> {
    let model = MoeDecoder::<Flex>::new(cfg, &Default::default()).expect("a valid config");
    BinBytesRecorder::<FullPrecisionSettings>::default()
        .record(model.into_record(), ())
        .expect("record")
}

fn load<B: FusedOps>(cfg: &MoeConfig, weights: &[u8], device: &B::Device) -> MoeDecoder<B> {
    let record = BinBytesRecorder::<FullPrecisionSettings>::default()
        .load(weights.to_vec(), device)
        .expect("load");
    MoeDecoder::<B>::new(cfg, device)
        .expect("a valid config")
        .load_record(record)
}

fn serve_config() -> ServeConfig {
    ServeConfig {
        pages: 64,
        page_size: 4,
        max_seq: 48,
        max_kv_splits: 3,
        // Smaller than the prompts: they are prefilled in chunks beside the others' decode.
        step_tokens: 8,
        max_waiting: 1024,
        record_logits: true,
    }
}

fn prompt(text: &str) -> Vec<u32> {
    text.bytes().map(u32::from).collect()
}

#[test]
#[serial]
fn expert_parallel_serving_gives_the_tokens_of_one_npu() {
    let Some(devices) = pair("expert_parallel_serving_gives_the_tokens_of_one_npu") else {
        return;
    };
    let cfg = small();
    let bytes = weights(&cfg);
    let requests: Vec<Request> = ["The keeper", "tide turned.", "S"]
        .into_iter()
        .map(|p| Request::greedy(prompt(p), 6))
        .collect();
    let one = Server::new(
        load::<Ascend>(&cfg, &bytes, &devices[0]),
        serve_config(),
        &devices[0],
    )
    .expect("a valid server")
    .generate(&requests);
    let sharded = ExpertParallel::shard(load::<Ascend>(&cfg, &bytes, &devices[0]), &devices)
        .expect("4 experts split over 2 NPUs");
    let two = Server::new(sharded, serve_config(), &devices[0])
        .expect("a valid server")
        .generate(&requests);
    assert_eq!(two.completed, requests.len());
    for (a, b) in one.results.iter().zip(&two.results) {
        let (a, b) = (a.as_ref().unwrap(), b.as_ref().unwrap());
        assert_eq!(a.tokens, b.tokens);
        for (la, lb) in a.logits.iter().zip(&b.logits) {
            for (x, y) in la.iter().zip(lb) {
                assert!((x - y).abs() <= 1e-5 * y.abs().max(1.0), "logit {x} vs {y}");
            }
        }
    }
}

/// The tokens of each result (empty for a failed request).
fn tokens_of(report: &burn_ascend_llm::engine::workload::ServingReport) -> Vec<Vec<u32>> {
    report
        .results
        .iter()
        .map(|r| r.as_ref().map_or_else(|_| Vec::new(), |g| g.tokens.clone()))
        .collect()
}

#[test]
#[serial]
fn expert_parallel_serving_recovers_from_a_fault_on_either_npu() {
    let test = "expert_parallel_serving_recovers_from_a_fault_on_either_npu";
    let Some(devices) = pair(test) else {
        return;
    };
    if common::skipped_on_npu(test) {
        return;
    }
    // A fault on one NPU leaves the other waiting in the step's collective until
    // HCCL_EXEC_TIMEOUT (as on an NPU, hccl-abi.md), and the recovery's reset of that NPU waits
    // for it: the communicators this test builds wait 20 s, not HCCL's default half hour.
    let _timeout = ExecTimeout::set("20");
    // The communicator of these NPUs, if an earlier test built it, has the default timeout: the
    // resets destroy it, so sharding builds one with the short timeout.
    for d in &devices {
        burn_ascend::reset_device(d).expect("a healthy device resets");
    }
    let cfg = small();
    let bytes = weights(&cfg);
    let requests: Vec<Request> = ["The keeper", "tide turned.", "S"]
        .into_iter()
        .map(|p| Request::greedy(prompt(p), 6))
        .collect();
    let want = tokens_of(
        &Server::new(
            load::<Ascend>(&cfg, &bytes, &devices[0]),
            serve_config(),
            &devices[0],
        )
        .expect("a valid server")
        .generate(&requests),
    );
    let sharded = ExpertParallel::shard(load::<Ascend>(&cfg, &bytes, &devices[0]), &devices)
        .expect("4 experts split over 2 NPUs");
    let mut server = Server::new(sharded, serve_config(), &devices[0]).expect("a valid server");
    // A fault on the first NPU (the server's): its step's requests fail, with the fault.
    server.inject_fault();
    let faulted = server.generate(&requests);
    assert!(faulted.failed > 0, "the injected fault fails its step");
    for result in faulted.results.iter().filter_map(|r| r.as_ref().err()) {
        assert!(result.to_string().contains("decode_attention"), "{result}");
    }
    // The communicator and the experts' shards were rebuilt: the next requests are served.
    let after = server.generate(&requests);
    assert_eq!(tokens_of(&after), want, "after a fault on {}", devices[0]);
    // A fault on the second NPU (where half the experts run) fails the next step; the server
    // resets that NPU too, and serves the requests after it.
    drop(common::provoke_fault(&devices[1]));
    // Reached before the step, so the step sees the fault when it checks its ranks.
    let second = burn_ascend::runtime::DeviceContext::get(&devices[1].into()).expect("a context");
    assert!(second.synchronize().is_err(), "{} faulted", devices[1]);
    let faulted = server.generate(&requests);
    assert!(
        faulted.failed > 0,
        "the fault on {} fails a step",
        devices[1]
    );
    let after = server.generate(&requests);
    assert_eq!(tokens_of(&after), want, "after a fault on {}", devices[1]);
    assert_eq!(server.pool().free_pages(), serve_config().pages);
    // The communicator with the short timeout goes with the server and the resets.
    drop(server);
    for d in &devices {
        burn_ascend::reset_device(d).expect("a healthy device resets");
    }
}

/// Sets `HCCL_EXEC_TIMEOUT` for the communicators created until it is dropped.
struct ExecTimeout(Option<String>);

impl ExecTimeout {
    const VAR: &str = "HCCL_EXEC_TIMEOUT";

    fn set(seconds: &str) -> Self {
        let old = std::env::var(Self::VAR).ok();
        std::env::set_var(Self::VAR, seconds);
        Self(old)
    }
}

impl Drop for ExecTimeout {
    fn drop(&mut self) {
        match &self.0 {
            Some(v) => std::env::set_var(Self::VAR, v),
            None => std::env::remove_var(Self::VAR),
        }
    }
}

fn host<B: Backend>(t: Tensor<B, 2>) -> Vec<f32> {
    t.into_data().to_vec().unwrap()
}

#[test]
#[serial]
fn expert_parallel_layer_with_tokens_on_both_npus() {
    let Some(devices) = pair("expert_parallel_layer_with_tokens_on_both_npus") else {
        return;
    };
    let cfg = small();
    let bytes = weights(&cfg);
    let reference = load::<Ascend>(&cfg, &bytes, &devices[0]);
    let sharded =
        ExpertParallel::shard(load::<Ascend>(&cfg, &bytes, &devices[0]), &devices).unwrap();
    let moe = &sharded.blocks[1].moe;
    let ep = moe
        .parallel
        .get::<ExpertParallel<Ascend>>()
        .expect("the layer is expert-parallel");
    let dims = *reference.dims();
    let x0 = Tensor::<Ascend, 2>::random([5, 64], Distribution::Normal(0.0, 1.0), &devices[0]);
    let x1 = Tensor::<Ascend, 2>::random([3, 64], Distribution::Normal(0.0, 1.0), &devices[1]);
    let out = ep.forward_ranks(vec![Some(x0.clone()), Some(x1.clone())], &dims);
    let want = |x: Tensor<Ascend, 2>| {
        reference.blocks[1]
            .moe
            .forward(x.to_device(&devices[0]), &dims)
    };
    for ((got, x), device) in out.into_iter().zip([x0, x1]).zip(devices) {
        let (y, aux) = got.expect("both ranks hold tokens");
        assert_eq!(y.device(), device);
        let (y_ref, aux_ref) = want(x);
        for (a, b) in host(y).iter().zip(host(y_ref)) {
            assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{a} vs {b}");
        }
        let (a, b): (Vec<f32>, Vec<f32>) = (
            aux.into_data().to_vec().unwrap(),
            aux_ref.into_data().to_vec().unwrap(),
        );
        assert!((a[0] - b[0]).abs() <= 1e-5, "aux {a:?} vs {b:?}");
    }
}

/// Every float parameter's values, in visiting order.
struct Values(Vec<f32>);

impl<B: Backend> ModuleVisitor<B> for Values {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.0.extend(
            param
                .val()
                .into_data()
                .convert::<f32>()
                .to_vec::<f32>()
                .unwrap(),
        );
    }
}

fn values<B: Backend, M: Module<B>>(m: &M) -> Vec<f32> {
    let mut v = Values(Vec::new());
    m.visit(&mut v);
    v.0
}

#[test]
#[serial]
fn data_parallel_training_follows_one_npu() {
    let Some(devices) = pair("data_parallel_training_follows_one_npu") else {
        return;
    };
    let cfg = small();
    let bytes = weights(&cfg);
    let train_cfg = TrainConfig {
        steps: 3,
        batch: 4,
        seq_len: 16,
        learning_rate: 1e-2,
        aux_weight: 0.01,
    };
    type B = Autodiff<Ascend>;
    let tokens = corpus::tokens();
    let mut one_losses = Vec::new();
    let one = train(
        load::<B>(&cfg, &bytes, &devices[0]),
        &tokens,
        &train_cfg,
        &devices[0],
        |r| one_losses.push((r.loss, r.aux)),
    )
    .expect("finite losses");
    let mut two_losses = Vec::new();
    let two = train_data_parallel(
        load::<B>(&cfg, &bytes, &devices[0]),
        &tokens,
        &train_cfg,
        &devices,
        |r| two_losses.push((r.loss, r.aux)),
    )
    .expect("a batch of 4 splits over 2 NPUs");
    for ((l1, a1), (l2, a2)) in one_losses.iter().zip(&two_losses) {
        assert!((l1 - l2).abs() <= 1e-4 * l1.abs(), "loss {l1} vs {l2}");
        assert!((a1 - a2).abs() <= 1e-4 * a1.abs(), "aux {a1} vs {a2}");
    }
    let (w1, w2) = (values(&one), values(&two));
    assert_eq!(w1.len(), w2.len());
    let worst = w1
        .iter()
        .zip(&w2)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    // Three Adam steps of 1e-2 move weights by up to 3e-2; the replicas differ from one NPU by
    // summation order only.
    assert!(worst <= 1e-4, "largest weight difference {worst}");
}

#[test]
#[serial]
fn parallel_setups_that_cannot_work_are_refused() {
    let Some(devices) = pair("parallel_setups_that_cannot_work_are_refused") else {
        return;
    };
    let cfg = small();
    let bytes = weights(&cfg);
    let on_second = load::<Ascend>(&cfg, &bytes, &devices[1]);
    let err =
        ExpertParallel::shard(on_second, &devices).expect_err("the model is on the wrong NPU");
    assert!(err.to_string().contains("must be on"), "{err}");
    let one_expert = small().with_experts(1).with_top_k(1);
    let model = load::<Ascend>(&one_expert, &weights(&one_expert), &devices[0]);
    let err = ExpertParallel::shard(model, &devices).expect_err("more NPUs than experts");
    assert!(err.to_string().contains("2 NPUs for 1 experts"), "{err}");
    let train_cfg = TrainConfig {
        steps: 1,
        batch: 3,
        seq_len: 8,
        learning_rate: 1e-2,
        aux_weight: 0.01,
    };
    let model = load::<Autodiff<Ascend>>(&cfg, &bytes, &devices[0]);
    let err = train_data_parallel(model, &corpus::tokens(), &train_cfg, &devices, |_| {})
        .expect_err("3 sequences over 2 NPUs");
    assert!(err.contains("does not split evenly"), "{err}");
}
