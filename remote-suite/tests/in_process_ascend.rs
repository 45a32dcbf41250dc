//! The remote route's in-process reference is the same program on the same device: the suite's
//! MLP trained through the server (Burn 0.22, b22 adapter) and in process on Burn 0.21's
//! `Autodiff<Ascend>` (src/programs_burn021.rs) gets the same losses, step by step. Both run the
//! emulated NPU's aclnn ops; what differs is the Burn version (its nn, autodiff and Adam code)
//! and the adapter: a cross-version consistency check of the two adapters, and the check that the
//! bench's in-process Ascend figures are of the same computation as its remote ones.

#[path = "../src/programs_burn021.rs"]
mod programs_burn021;

use burn::tensor::Device;
use burn021::backend::Autodiff;
use burn_ascend::{Ascend, AscendDevice};
use burn_ascend_remote_suite::programs::{train, Mlp};
use burn_ascend_remote_suite::LocalServer;

const STEPS: usize = 8;

/// Relative loss difference allowed per step: as remote-suite/tests/training.rs (one f32 ulp at 1
/// with a margin), far below what a wrong gradient or Adam step moves (1e-3 and more). Measured:
/// none (the same aclnn ops in the same order: the losses agree to the bit).
const TOLERANCE: f32 = 1e-6;

#[test]
fn mlp_training_remote_matches_burn_021_ascend_in_process() {
    let server = LocalServer::start();
    let remote = train(
        Mlp::new(&Device::flex().autodiff()),
        &server.device(),
        STEPS,
    );
    // The device the server serves (its default, emulated:0), in process.
    let in_process = programs_burn021::train::<Autodiff<Ascend>>(&AscendDevice::Emulated(0), STEPS);

    assert_eq!(remote.len(), STEPS);
    assert_eq!(in_process.len(), STEPS);
    let worst = remote
        .iter()
        .zip(&in_process)
        .map(|(r, l)| (r - l).abs() / l.abs().max(1.0))
        .fold(0.0, f32::max);
    println!("largest relative loss difference: {worst:e}");
    for (step, (r, l)) in remote.iter().zip(&in_process).enumerate() {
        assert!(
            (r - l).abs() <= TOLERANCE * l.abs().max(1.0),
            "step {step}: remote loss {r}, in-process Ascend loss {l} \
             (all: remote {remote:?}, in process {in_process:?})"
        );
    }
    assert!(
        in_process[STEPS - 1] < in_process[0] * 0.9,
        "training did not lower the loss: {in_process:?}"
    );
}
