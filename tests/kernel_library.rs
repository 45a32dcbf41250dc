//! Each device opens its fused-kernel library at run time: the emulated NPU the kernels built
//! against the Ascend C emulation, an NPU the library CANN built. A device without a library
//! (here: the emulated NPU with `BURN_ASCEND_EMU_KERNELS=off`, as an NPU without one) runs the
//! composed defaults of the fused ops, with results equal to the reference, launches no kernel
//! and says once per kernel what is missing.
//!
//! The device without a library lives in a child process (the variable is read when the library
//! is first wanted, once per process): the child is the ignored test below, run by its parent.

mod common;

use std::process::Command;

use burn::tensor::{DType, Int, Tensor, TensorData};
use burn_ascend::emulator::kernel_runner::{clear_launch_log, launch_log};
use burn_ascend::fused;
use burn_ascend_suite::host_values::host_values;
use burn_fusion::Fusion;
use common::*;

/// The fused ops the child runs without kernels, on `B` (the reference's results are equal).
fn fused_ops<B: burn_ascend::FusedOps>(d: &B::Device) -> Vec<TensorData> {
    let x = Tensor::<B, 2>::from_data(host_values(vec![6, 16], 1), (d, DType::F32));
    let perm = TensorData::new(vec![5i32, 0, 3, 1, 4, 2], [6]);
    let idx = Tensor::<B, 1, Int>::from_data(perm, (d, DType::I32));
    let gathered = fused::moe_gather(x.clone(), idx.clone(), 1);
    let scattered = fused::moe_scatter(gathered.clone(), idx, None, 1);
    let (y, mean, rstd) = fused::layer_norm(x.clone(), None, None, 1e-5);
    // An element-wise chain: on Fusion it would be one elementwise_program launch.
    let chain = (x.clone() * 2.0 + 1.0).exp().sqrt() - x.clone();
    // DeepSeek-V3's router over the rows as logits: 16 experts in 4 groups.
    let choice = fused::GroupTopk {
        top_k: 3,
        groups: 4,
        keep_groups: 2,
        group_top_two: true,
        sigmoid: true,
        gather_scores: true,
        renormalize: true,
        scale: 2.5,
    };
    let routed = B::moe_group_topk(x.into_primitive().tensor(), None, choice, DType::BF16);
    let routed =
        Tensor::<B, 2>::from_primitive(burn::tensor::TensorPrimitive::Float(routed.weights));
    [gathered, scattered, y, chain, routed]
        .into_iter()
        .map(|t| t.into_data())
        .chain([mean.into_data(), rstd.into_data()])
        .collect()
}

const CHILD_TEST: &str = "child_runs_fused_ops_without_kernels";

#[test]
#[ignore = "run by a_device_without_a_kernel_library_runs_the_composed_defaults"]
fn child_runs_fused_ops_without_kernels() {
    let device = AscendDevice::Emulated(0);
    clear_launch_log();
    let want = fused_ops::<Flex>(&Default::default());
    for (backend, got) in [
        ("Ascend", fused_ops::<Ascend>(&device)),
        ("Fusion<Ascend>", fused_ops::<Fusion<Ascend>>(&device)),
    ] {
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            g.assert_approx_eq::<f32>(w, burn::tensor::Tolerance::absolute(1e-4));
            println!("{backend} output {i} equals the reference");
        }
    }
    // The KV-cache write (Ascend only: it writes in place) joins MLA-like pieces and writes them
    // with aclnnInplaceIndexCopy.
    let pieces = |d: &_| {
        let piece = |width, seed| {
            Tensor::<Ascend, 3>::from_data(host_values(vec![2, 1, width], seed), (d, DType::F32))
        };
        [piece(4, 2), piece(2, 3)]
    };
    let cache = Tensor::<Ascend, 3>::zeros([4, 1, 6], &device);
    let slots = Tensor::<Ascend, 1, Int>::from_data(
        TensorData::new(vec![3i32, 0], [2]),
        (&device, DType::I32),
    );
    let rows = pieces(&device);
    burn_ascend::graph::write_cache(
        &slots,
        &[burn_ascend::graph::CacheWrite {
            cache: &cache,
            rows: &rows,
        }],
    );
    let joined = Tensor::<Flex, 3>::from_data(
        Tensor::cat(rows.to_vec(), 2).into_data(),
        &Default::default(),
    );
    let want = Tensor::<Flex, 3>::zeros([4, 1, 6], &Default::default()).scatter_nd(
        Tensor::<Flex, 2, Int>::from_ints([[3], [0]], &Default::default()),
        joined,
        burn::tensor::IndexingUpdateOp::Assign,
    );
    cache.into_data().assert_eq(&want.into_data(), true);
    println!("the cache write equals the reference");
    assert!(
        launch_log().is_empty(),
        "no kernel may run without a library: {:?}",
        launch_log()
    );
}

#[test]
fn a_device_without_a_kernel_library_runs_the_composed_defaults() {
    if skipped_on_npu("a_device_without_a_kernel_library_runs_the_composed_defaults") {
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", CHILD_TEST, "--nocapture"])
        .env("BURN_ASCEND_EMU_KERNELS", "off")
        .env("BURN_ASCEND_DEVICE", "emulated")
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child failed:\n{stdout}\n{stderr}"
    );
    for kernel in [
        "moe_gather",
        "moe_scatter",
        "layer_norm",
        "elementwise_program",
        "kv_cache_write",
        "moe_group_topk",
    ] {
        let notice = format!(
            "emulated:0 cannot run the fused kernel {kernel}: it has no kernel library: the \
             emulated kernel library is switched off (BURN_ASCEND_EMU_KERNELS=off)"
        );
        assert_eq!(
            stderr.matches(&notice).count(),
            1,
            "one notice for {kernel}:\n{stderr}"
        );
    }
}

#[test]
fn the_emulated_npu_runs_the_fused_ops_from_its_run_time_library() {
    if skipped_on_npu("the_emulated_npu_runs_the_fused_ops_from_its_run_time_library") {
        return;
    }
    let library = burn_ascend_kernels::library::emulated().expect("the emulated library opens");
    assert!(
        library
            .describe()
            .starts_with("emulated Ascend C kernels (")
            && library.describe().ends_with(".so)"),
        "{}",
        library.describe()
    );
    assert_eq!(library.missing(), Vec::<&str>::new());
    let device = AscendDevice::Emulated(0);
    let got = fused_ops::<Ascend>(&device);
    let want = fused_ops::<Flex>(&Default::default());
    for (g, w) in got.iter().zip(&want) {
        g.assert_approx_eq::<f32>(w, burn::tensor::Tolerance::absolute(1e-4));
    }
    let log = launch_log();
    for kernel in ["moe_gather", "moe_scatter", "layer_norm"] {
        assert!(
            log.iter().any(|l| l.kernel == kernel),
            "{kernel} ran from the library: {log:?}"
        );
    }
}
