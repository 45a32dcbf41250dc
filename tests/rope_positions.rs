//! Rotary position embedding at positions f16 and bf16 cannot hold exactly (above 2048 and 256):
//! the angles come from the f32 positions, so a half-precision model rotates each token by its
//! own position, against the closed form computed in f64.

mod common;

use burn::tensor::{DType, Tensor, TensorData};
use burn_ascend_llm::moe::model::rope;
use burn_ascend_suite::host_values::host_values;
use common::*;

const THETA: f64 = 10_000.0;

/// `rope` of `x [1, S, H, D]` at `positions` in closed form: each pair `(x[j], x[j + D/2])`
/// turned by `p * THETA^(-2j/D)`.
fn closed_form(x: &[f64], positions: &[f32], heads: usize, d: usize) -> Vec<f64> {
    let half = d / 2;
    let mut out = vec![0.0; x.len()];
    for (s, &p) in positions.iter().enumerate() {
        for h in 0..heads {
            let row = (s * heads + h) * d;
            for j in 0..half {
                let angle = p as f64 * THETA.powf(-(2.0 * j as f64) / d as f64);
                let (x1, x2) = (x[row + j], x[row + half + j]);
                out[row + j] = x1 * angle.cos() - x2 * angle.sin();
                out[row + half + j] = x2 * angle.cos() + x1 * angle.sin();
            }
        }
    }
    out
}

#[test]
fn rope_rotates_half_precision_tokens_by_their_exact_position() {
    // Neither f16 (spacing 2 above 2048, 4 above 4096, 32 above 32768) nor bf16 (spacing 16
    // above 2048) holds these positions; f32 does.
    let positions: Vec<f32> = vec![0.0, 3.0, 2049.0, 2051.0, 4097.0, 8191.0, 30_001.0, 60_003.0];
    let (s, heads, d) = (positions.len(), 2, 8);
    let device = device();
    for (dtype, tolerance) in [(DType::F16, 4e-3), (DType::BF16, 3e-2), (DType::F32, 1e-4)] {
        let x = Tensor::<Ascend, 4>::from_data(
            host_values(vec![1, s, heads, d], 11).convert_dtype(dtype),
            (&device, dtype),
        );
        // The reference rotates the values x holds (already rounded to its dtype).
        let x_held: Vec<f64> = x.to_data().convert::<f64>().to_vec().unwrap();
        let pos = Tensor::<Ascend, 1>::from_data(
            TensorData::new(positions.clone(), [s]),
            (&device, DType::F32),
        );
        let got = rope(x, pos, THETA);
        assert_eq!(got.dtype(), dtype);
        let got: Vec<f64> = got.into_data().convert::<f64>().to_vec().unwrap();
        let want = closed_form(&x_held, &positions, heads, d);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let p = positions[i / (heads * d)];
            // f32 angles carry a rounding error of about p * 2^-24 (radians), times |x| <= 4
            // per term, on top of the dtype's rounding of cos, sin and the result.
            let angle_error = 8.0 * p as f64 * f64::powi(2.0, -23);
            assert!(
                (g - w).abs() <= tolerance * (1.0 + w.abs()) + angle_error,
                "{dtype:?} at position {p}, element {i}: got {g}, closed form {w}"
            );
        }
    }
}
