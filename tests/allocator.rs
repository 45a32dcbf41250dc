//! The caching allocator under a repeated workload: device allocations stop growing once the
//! cache is warm, and dropping every tensor returns the bytes in use to zero.

mod common;

use burn::tensor::Tensor;
use burn_ascend::{Ascend, AscendDevice};
use common::device;

fn step(device: &AscendDevice) -> f32 {
    let a = Tensor::<Ascend, 2>::ones([64, 64], device);
    let b = a.clone() * 2.0 + a.clone();
    let c = b.clone().matmul(b.transpose()).slice([0..8, 0..8]);
    let v: Vec<f32> = c.into_data().to_vec().unwrap();
    v[0]
}

#[test]
fn allocations_plateau_and_bytes_return_to_zero() {
    let device = device();
    assert_eq!(step(&device), 64.0 * 9.0);
    step(&device);
    let warm = Ascend::memory_stats(&device);
    for _ in 0..10 {
        step(&device);
    }
    let later = Ascend::memory_stats(&device);
    assert_eq!(
        later.device_allocations, warm.device_allocations,
        "{later:?}"
    );
    assert_eq!(later.bytes_in_use, 0, "every tensor was dropped: {later:?}");
    assert!(
        later.bytes_reserved > 0 && later.peak_bytes_in_use > 0,
        "{later:?}"
    );
}
