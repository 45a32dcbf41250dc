//! Host memory the emulated NPU uses per operator: at most twice the bytes of the operator's
//! operands (its inputs and outputs), the target of the numerics rework, and, for the kernels
//! that stream their views, a fixed budget whatever the tensors' size. A counting global
//! allocator (this test binary only) measures the peak of live host allocations during each
//! op; the emulated HBM the op allocates for its outputs is mapped outside the host heap (it is
//! the emulated NPU's memory), so the allocator counts host memory only.
//!
//! Sizes: 2^22-element operands for the ordinary ops and the slice_assign probe scaled
//! from 2^31 to 2^28 f16 elements (512 MiB of emulated HBM per tensor), so the binary runs in
//! about 15 seconds in a debug build on two cores.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use burn::tensor::module::conv2d;
use burn::tensor::ops::ConvOptions;
use burn::tensor::{s, DType, Distribution, Int, Tensor};
use burn_ascend::runtime::DeviceContext;
use burn_ascend::Ascend;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Ordering::SeqCst) + bytes;
    PEAK.fetch_max(live, Ordering::SeqCst);
}

// SAFETY: every call is forwarded to the system allocator unchanged; only sizes are counted.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        System.dealloc(p, layout);
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let q = System.realloc(p, layout, new_size);
        if !q.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
            grew(new_size);
        }
        q
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const MIB: usize = 1 << 20;
/// Host memory a streaming kernel may use whatever its operands' size: its walkers and a
/// chunk of values, plus the op path's descriptors and executors.
const STREAM_BUDGET: usize = 4 * MIB;
const N: usize = 1 << 22;

/// Runs `op` (synchronised) and returns the peak host memory it used.
fn host_bytes_of(ctx: &DeviceContext, op: impl FnOnce()) -> usize {
    ctx.synchronize().unwrap();
    let live = LIVE.load(Ordering::SeqCst);
    PEAK.store(live, Ordering::SeqCst);
    op();
    ctx.synchronize().unwrap();
    PEAK.load(Ordering::SeqCst) - live
}

/// Checks one op: host memory within twice `operands` bytes, and within the streaming budget
/// when `streams`.
fn check(ctx: &DeviceContext, name: &str, operands: usize, streams: bool, op: impl FnOnce()) {
    let used = host_bytes_of(ctx, op);
    eprintln!(
        "{name}: {:.2} MiB of host memory for {:.1} MiB of operands",
        used as f64 / MIB as f64,
        operands as f64 / MIB as f64
    );
    assert!(
        used <= 2 * operands,
        "{name}: {used} bytes of host memory exceed twice the operands' {operands} bytes"
    );
    if streams {
        assert!(
            used <= STREAM_BUDGET,
            "{name}: {used} bytes of host memory for a streaming kernel (budget {STREAM_BUDGET})"
        );
    }
}

#[test]
fn emulated_ops_use_at_most_twice_their_operands_in_host_memory() {
    if common::skipped_on_npu("emulated_ops_use_at_most_twice_their_operands_in_host_memory") {
        return;
    }
    let device = common::device();
    let ctx = DeviceContext::get(&device.into()).unwrap();
    let uniform = Distribution::Uniform(-1.0, 1.0);
    let (rows, cols) = (N / 4096, 4096);
    let a = Tensor::<Ascend, 2>::random([rows, cols], uniform, &device);
    let row = Tensor::<Ascend, 2>::random([1, cols], uniform, &device);
    let half = a.clone().cast(DType::F16);
    let f32s = N * 4;

    check(&ctx, "add (broadcast row)", 2 * f32s, true, || {
        drop(a.clone() + row.clone())
    });
    check(&ctx, "exp F16", 2 * N * 2, true, || {
        drop(half.clone().exp())
    });
    check(&ctx, "cast F16 to F32", N * 2 + f32s, true, || {
        drop(half.clone().cast(DType::F32))
    });
    check(&ctx, "sum over rows", f32s, true, || {
        drop(a.clone().sum_dim(0))
    });
    check(&ctx, "softmax F16", 2 * N * 2, true, || {
        drop(burn::tensor::activation::softmax(half.clone(), 1))
    });
    check(&ctx, "cumsum", 2 * f32s, true, || drop(a.clone().cumsum(0)));
    let index = Tensor::<Ascend, 2, Int>::zeros([rows, cols], &device);
    check(&ctx, "gather", 3 * f32s + N * 8, true, || {
        drop(a.clone().gather(1, index.clone()))
    });
    check(&ctx, "transpose copy", 2 * f32s, true, || {
        drop(a.clone().transpose().reshape([N]))
    });
    check(&ctx, "sort (one lane held)", 2 * f32s, false, || {
        drop(a.clone().sort(1))
    });
    let x = Tensor::<Ascend, 4>::random([1, 8, 256, 256], uniform, &device);
    let w = Tensor::<Ascend, 4>::random([8, 8, 3, 3], uniform, &device);
    let conv_bytes = 2 * x.shape().num_elements() * 4 + w.shape().num_elements() * 4;
    check(&ctx, "conv2d 3x3", conv_bytes, false, || {
        drop(conv2d(
            x.clone(),
            w.clone(),
            None,
            ConvOptions::new([1, 1], [1, 1], [1, 1], 1),
        ))
    });
    drop((a, row, half, index, x, w));

    // The probe, scaled: slice_assign on a 2^28-element F16 tensor (512 MiB).
    let side = 1 << 14;
    let big = Tensor::<Ascend, 2>::zeros([side, side], (&device, DType::F16));
    let patch = Tensor::<Ascend, 2>::ones([16, side], (&device, DType::F16));
    let bytes = side * side * 2;
    let mut out = None;
    check(&ctx, "slice_assign 2^28 F16", 2 * bytes, true, || {
        out = Some(big.clone().slice_assign(s![8..24, ..], patch.clone()))
    });
    let out = out.unwrap();
    let corner = out.slice(s![6..10, 0..2]).into_data().convert::<f32>();
    assert_eq!(
        corner.to_vec::<f32>().unwrap(),
        [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    );
}
