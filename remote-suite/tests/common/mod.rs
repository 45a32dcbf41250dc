//! Test data the remote-suite tests share.

use burn::tensor::TensorData;

/// `shape`'s values from a smooth formula, rounded to multiples of 1/64 (exact in f32 on every
/// backend) within `[-amplitude / 64, amplitude / 64]`; `seed` shifts the pattern.
pub fn floats(shape: &[usize], seed: f32, amplitude: f32) -> TensorData {
    let n = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| ((i as f32 * 0.37 + seed).sin() * amplitude).round() / 64.0)
        .collect();
    TensorData::new(v, shape.to_vec())
}
