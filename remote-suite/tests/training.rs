//! A Burn 0.22 program trains the same model on a burn-ascend-server device and on Burn's own
//! CPU backend in this process: the losses agree step by step.

use burn::tensor::Device;
use burn_ascend_remote_suite::programs::{train, Mlp};
use burn_ascend_remote_suite::LocalServer;

const STEPS: usize = 8;

/// Relative loss difference allowed per step. The served backend is the emulated NPU, whose
/// f32 matmuls and reductions accumulate in another order than burn-flex's; over these 8 Adam
/// steps the losses differed by at most 1.2e-7 (one f32 ulp at 1; the test prints it), so
/// this leaves a margin of about eight, far below what a wrong gradient moves (1e-3 and more).
const TOLERANCE: f32 = 1e-6;

#[test]
fn mlp_training_on_the_remote_device_matches_the_cpu_backend() {
    let server = LocalServer::start();
    let reference = Device::flex().autodiff();
    let model = Mlp::new(&reference);

    let remote = train(model.clone(), &server.device(), STEPS);
    let local = train(model, &reference, STEPS);

    assert_eq!(remote.len(), STEPS);
    let worst = remote
        .iter()
        .zip(&local)
        .map(|(r, l)| (r - l).abs() / l.abs().max(1.0))
        .fold(0.0, f32::max);
    println!("largest relative loss difference: {worst:e}");
    for (step, (r, l)) in remote.iter().zip(&local).enumerate() {
        assert!(
            (r - l).abs() <= TOLERANCE * l.abs().max(1.0),
            "step {step}: remote loss {r}, CPU loss {l} (all: remote {remote:?}, CPU {local:?})"
        );
    }
    // The losses are a training run's, not a constant: Adam lowers them.
    assert!(
        local[STEPS - 1] < local[0] * 0.9,
        "training did not lower the loss: {local:?}"
    );
}
