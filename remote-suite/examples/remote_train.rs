//! Trains the suite's MLP on `Device::default()` and prints the losses. Run against a server:
//!
//! ```text
//! cargo run -p burn-ascend-server -- --port 3000
//! BURN_DEVICE=remote BURN_REMOTE_ADDRESS=ws://127.0.0.1:3000 \
//!     cargo run -p burn-ascend-remote-suite --example remote_train
//! ```
//!
//! Without `BURN_DEVICE=remote` it trains on Burn's CPU backend (flex), for comparison.

use burn::tensor::Device;
use burn_ascend_remote_suite::programs::{train, Mlp};

fn main() {
    let device = Device::default();
    println!("device: {device:?}");
    // The same initial weights wherever it trains (a formula, not a random draw).
    let model = Mlp::new(&Device::flex().autodiff());
    for (step, loss) in train(model, &device, 20).iter().enumerate() {
        println!("step {step:2}: loss {loss:.6}");
    }
}
