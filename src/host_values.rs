//! Deterministic test inputs drawn on the host, shared by the tests and the benchmarks so every
//! backend and every run sees the same values.

use burn::tensor::TensorData;

/// f32 values of `shape`, multiples of 1/250 in [-4, 4], from a hash of (index, seed).
pub fn host_values(shape: Vec<usize>, seed: u64) -> TensorData {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n as u64)
        .map(|i| {
            let h = (i
                .wrapping_mul(6364136223846793005)
                .wrapping_add(seed.wrapping_mul(1442695040888963407))
                >> 33)
                % 2001;
            h as f32 / 250.0 - 4.0
        })
        .collect();
    TensorData::new(v, shape)
}
