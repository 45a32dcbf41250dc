//! The example model as the decode benches serve it: its serving settings, its fresh weights
//! (recorded once so that every server loads the same), the benches' prompts, and a server
//! kept decoding a steady batch.

use std::time::Instant;

use burn::module::Module;
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn_ascend::emulator::{work_counters, WorkCounters};
use burn_ascend::FusedOps;
use burn_ascend_llm::engine::serve::{Request, ServeConfig, Server, StepReport};
use burn_ascend_llm::moe::config::MoeConfig;
use burn_ascend_llm::moe::model::MoeDecoder;
use burn_ascend_perf::a2::ModelledClock;
use burn_flex::Flex;

/// The example's serving settings.
pub const SERVE: ServeConfig = ServeConfig {
    pages: 128,
    page_size: 16,
    max_seq: 512,
    max_kv_splits: 4,
    step_tokens: 64,
    max_waiting: 1024,
    record_logits: false,
};

/// Prompt length of every request.
pub const PROMPT: usize = 8;

/// The `n`th request's prompt: the same in every bench and run.
pub fn prompt(n: usize, vocab: usize) -> Vec<u32> {
    (0..PROMPT)
        .map(|i| ((n * 31 + i * 7 + 1) % vocab) as u32)
        .collect()
}

/// A fresh model as bytes: Burn initialises parameters lazily, so two fresh models (or one on
/// each backend) would draw different weights; every server loads these.
pub fn weights(cfg: &MoeConfig) -> Vec<u8> {
    let model = MoeDecoder::<Flex>::new(cfg, &Default::default()).expect("a valid config");
    BinBytesRecorder::<FullPrecisionSettings>::default()
        .record(model.into_record(), ())
        .expect("record")
}

/// The model of [`weights`] on `device`.
pub fn model<B: FusedOps>(cfg: &MoeConfig, weights: &[u8], device: &B::Device) -> MoeDecoder<B> {
    let record = BinBytesRecorder::<FullPrecisionSettings>::default()
        .load(weights.to_vec(), device)
        .expect("load");
    MoeDecoder::<B>::new(cfg, device)
        .expect("a valid config")
        .load_record(record)
}

/// One step of a [`SteadyBatch`] in which every request decoded a token.
pub struct SteadyStep {
    /// The server's report of the step.
    pub report: StepReport,
    /// Modelled Atlas A2 device seconds of the step's work.
    pub modelled: f64,
    /// What the step put on the device.
    pub work: WorkCounters,
    /// Wall seconds of `Server::step`.
    pub wall: f64,
}

/// A server kept decoding `batch` requests: a finished request is replaced by the next prompt
/// (its prefill steps run, unmeasured).
pub struct SteadyBatch<B: FusedOps> {
    server: Server<B, MoeDecoder<B>>,
    batch: usize,
    vocab: usize,
    /// Tokens each request generates.
    new: usize,
    next: usize,
    clock: ModelledClock,
}

impl<B: FusedOps> SteadyBatch<B> {
    /// Keeps `server` at `batch` requests of `new` tokens each.
    pub fn new(server: Server<B, MoeDecoder<B>>, batch: usize, vocab: usize, new: usize) -> Self {
        Self {
            server,
            batch,
            vocab,
            new,
            next: 0,
            clock: ModelledClock::start(),
        }
    }

    fn refill(&mut self) {
        while self.server.pending() < self.batch {
            let prompt = prompt(self.next, self.vocab);
            self.next += 1;
            self.server
                .submit(Request::greedy(prompt, self.new))
                .expect("a valid request");
        }
    }

    /// The next step in which every request of the batch decodes one token.
    pub fn step(&mut self) -> SteadyStep {
        loop {
            self.refill();
            let before = work_counters();
            self.clock.lap();
            let start = Instant::now();
            let report = self.server.step();
            let wall = start.elapsed().as_secs_f64();
            let modelled = self.clock.lap();
            let work = work_counters().since(&before);
            assert!(
                report.finished.iter().all(|(_, r)| r.is_ok()),
                "a request failed"
            );
            if report.decode_only && report.sampled.len() == self.batch {
                return SteadyStep {
                    report,
                    modelled,
                    work,
                    wall,
                };
            }
        }
    }
}
