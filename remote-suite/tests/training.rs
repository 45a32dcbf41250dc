//! A Burn 0.22 program trains the same model on a burn-ascend-server device and on Burn's own
//! CPU backend in this process: the losses agree step by step.

use burn::tensor::Device;
use burn_ascend_remote_suite::programs::{train, Mlp};
use burn_ascend_remote_suite::LocalServer;

const STEPS: usize = 8;

#[test]
fn mlp_training_on_the_remote_device_matches_the_cpu_backend() {
    let server = LocalServer::start();
    let reference = Device::flex().autodiff();
    let model = Mlp::new(&reference);

    let remote = train(model.clone(), &server.device(), STEPS);
    let local = train(model, &reference, STEPS);

    assert_eq!(remote.len(), STEPS);
    for (step, (r, l)) in remote.iter().zip(&local).enumerate() {
        assert!(
            (r - l).abs() <= 1e-5 * l.abs().max(1.0),
            "step {step}: remote loss {r}, CPU loss {l} (all: remote {remote:?}, CPU {local:?})"
        );
    }
    // The losses are a training run's, not a constant: Adam lowers them.
    assert!(
        local[STEPS - 1] < local[0] * 0.9,
        "training did not lower the loss: {local:?}"
    );
}
