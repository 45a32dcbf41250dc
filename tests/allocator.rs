//! The caching allocator under a repeated workload: device allocations stop growing once the
//! cache is warm, and dropping every tensor returns the bytes in use to zero.

mod common;

use burn::tensor::Tensor;
use burn_ascend::{Ascend, AscendDevice};
use common::device;
use serial_test::serial;

fn step(device: &AscendDevice) -> f32 {
    let a = Tensor::<Ascend, 2>::ones([64, 64], device);
    let b = a.clone() * 2.0 + a.clone();
    let c = b.clone().matmul(b.transpose()).slice([0..8, 0..8]);
    let v: Vec<f32> = c.into_data().to_vec().unwrap();
    v[0]
}

// Serial: the device's allocator statistics are shared by the tests of this file.
#[test]
#[serial]
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

/// `Ascend::float_from_bytes` copies with a blocking `aclrtMemcpy`, which is not ordered with
/// stream work, into a block the cache hands out again: a block whose last reader is still
/// queued. The reader must see the old contents (the upload drains the stream first), however
/// long the queue in front of it.
#[test]
#[serial]
fn a_blocking_upload_into_a_reused_block_waits_for_its_queued_readers() {
    let device = device();
    let n = 512;
    for round in 0..4 {
        // A queue of matmuls in front of the reader keeps the stream busy.
        let mut busy = Tensor::<Ascend, 2>::ones([n, n], &device) / n as f64;
        for _ in 0..8 {
            busy = busy.clone().matmul(busy);
        }
        let old = Tensor::<Ascend, 2>::full([n, n], 1.0 + round as f32, &device);
        let read = old.clone() * 2.0;
        drop(old);
        let new_bytes: Vec<u8> = (0..n * n).flat_map(|_| (-7.0f32).to_le_bytes()).collect();
        let new = Ascend::float_from_bytes(&new_bytes, [n, n], burn::tensor::DType::F32, &device);
        let read: Vec<f32> = read.into_data().to_vec().unwrap();
        assert!(
            read.iter().all(|&v| v == 2.0 * (1.0 + round as f32)),
            "round {round}: the queued reader saw the upload's bytes"
        );
        let new: Vec<f32> = new.into_data().to_vec().unwrap();
        assert!(new.iter().all(|&v| v == -7.0));
        drop(busy);
    }
}
