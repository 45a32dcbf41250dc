//! The fused operations on the emulated NPU (Ascend C kernels run by the emulation) against
//! their composed defaults on burn-flex (the reference formulas), at the seed sizes of the
//! fused-ops specification and at edge sizes, for every dtype; plus the global-memory traffic
//! the kernels' counters report, against the minimum their contracts require.

mod common;

use burn::tensor::{DType, Distribution, Int, Tensor, TensorData};
use burn_ascend::emulator::kernel_runner::{clear_launch_log, launch_log, LaunchStats};
use burn_ascend::fused;
use burn_ascend_suite::host_values::host_values;
use common::*;
use serial_test::serial;

fn ascend() -> AscendDevice {
    device()
}

fn flex() -> burn_flex::FlexDevice {
    Default::default()
}

fn float<B: burn::tensor::backend::Backend, const D: usize>(
    data: &TensorData,
    dtype: DType,
    d: &B::Device,
) -> Tensor<B, D> {
    Tensor::from_data(data.clone().convert_dtype(dtype), (d, dtype))
}

/// A permutation of 0..n (a stable argsort of pseudo-random expert ids, as routing produces).
fn routing_permutation(n: usize, experts: usize, seed: u64) -> TensorData {
    let mut keyed: Vec<(usize, i32)> = (0..n)
        .map(|i| {
            (
                ((i as u64 * 2654435761 + seed) % experts as u64) as usize,
                i as i32,
            )
        })
        .collect();
    keyed.sort_by_key(|k| k.0);
    TensorData::new(keyed.into_iter().map(|k| k.1).collect::<Vec<i32>>(), [n])
}

fn assert_close(what: &str, got: TensorData, want: TensorData, tol: f64) {
    common::assert_close(what, &got, &want, Tolerance::everywhere(tol));
}

fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2e-3,
        DType::BF16 => 1e-2,
        _ => 1e-5,
    }
}

/// The last launch of `kernel` in the log.
fn stats(kernel: &str) -> LaunchStats {
    launch_log()
        .into_iter()
        .rev()
        .find(|s| s.kernel == kernel)
        .unwrap_or_else(|| panic!("no {kernel} launch recorded"))
}

fn traffic(s: &LaunchStats) -> u64 {
    s.gm_bytes_read + s.gm_bytes_written
}

#[test]
fn vector_add_matches_the_reference_for_every_dtype() {
    for len in [1usize, 7, 1000, 16384, 100_003] {
        for dtype in [DType::F32, DType::F16, DType::BF16, DType::F64] {
            let (x, y) = (host_values(vec![len], 1), host_values(vec![len], 2));
            let got = fused::vector_add(
                float::<Ascend, 1>(&x, dtype, &ascend()),
                float(&y, dtype, &ascend()),
            );
            let want = fused::vector_add(
                float::<Flex, 1>(&x, dtype, &flex()),
                float(&y, dtype, &flex()),
            );
            assert_close(
                &format!("vector_add {dtype:?} len {len}"),
                got.into_data(),
                want.into_data(),
                tolerance(dtype),
            );
        }
        for dtype in [DType::I32, DType::I16, DType::I64, DType::I8] {
            let ints = |seed: i64| {
                TensorData::new(
                    (0..len as i64)
                        .map(|i| (i * 7 + seed) % 50 - 25)
                        .collect::<Vec<i64>>(),
                    [len],
                )
                .convert_dtype(dtype)
            };
            let a = Tensor::<Ascend, 1, Int>::from_data(ints(3), (&ascend(), dtype));
            let b = Tensor::<Ascend, 1, Int>::from_data(ints(11), (&ascend(), dtype));
            let want: Vec<i64> = (0..len as i64)
                .map(|i| (i * 7 + 3) % 50 - 25 + (i * 7 + 11) % 50 - 25)
                .collect();
            let got = fused::int_vector_add(a, b)
                .into_data()
                .convert::<i64>()
                .to_vec::<i64>()
                .unwrap();
            assert_eq!(got, want, "int_vector_add {dtype:?} len {len}");
        }
    }
}

#[test]
fn layer_norm_matches_the_reference() {
    let cases = [
        (256usize, 128usize, true, true),
        (1, 1536, true, false),
        (7, 4096, false, true),
        (3, 8192, true, true),
        (2, 12_000, false, true),
        (5, 100, true, true),
        (2, 100_000, true, true),
    ];
    for (m, n, g, b) in cases {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let x = host_values(vec![m, n], 3);
            let gamma = host_values(vec![n], 4);
            let beta = host_values(vec![n], 5);
            let run = |on_ascend: bool| -> (TensorData, TensorData, TensorData) {
                if on_ascend {
                    let (y, mu, r) = fused::layer_norm(
                        float::<Ascend, 2>(&x, dtype, &ascend()),
                        g.then(|| float(&gamma, dtype, &ascend())),
                        b.then(|| float(&beta, dtype, &ascend())),
                        1e-6,
                    );
                    (y.into_data(), mu.into_data(), r.into_data())
                } else {
                    let (y, mu, r) = fused::layer_norm(
                        float::<Flex, 2>(&x, dtype, &flex()),
                        g.then(|| float(&gamma, dtype, &flex())),
                        b.then(|| float(&beta, dtype, &flex())),
                        1e-6,
                    );
                    (y.into_data(), mu.into_data(), r.into_data())
                }
            };
            let (got, want) = (run(true), run(false));
            let what = format!("layer_norm {dtype:?} {m}x{n} gamma {g} beta {b}");
            assert_close(&format!("{what}: y"), got.0, want.0, tolerance(dtype) * 4.0);
            assert_close(&format!("{what}: mean"), got.1, want.1, 1e-4);
            assert_close(&format!("{what}: rstd"), got.2, want.2, 1e-4);
        }
    }
}

/// `layer_norm` of `x` with no columns on `B`: the shapes of `(y, mean, rstd)` and whether
/// every statistic is NaN.
fn empty_row_norm<B: burn_ascend::FusedOps>(
    shape: [usize; 3],
    d: &B::Device,
) -> ([usize; 3], [usize; 1], [usize; 1], bool) {
    let x = Tensor::<B, 3>::zeros(shape, d);
    let gamma = Tensor::<B, 1>::ones([0], d);
    let (y, mean, rstd) = fused::layer_norm(x, Some(gamma), None, 1e-6);
    let stats: Vec<f32> = [mean.clone(), rstd.clone()]
        .into_iter()
        .flat_map(|t| t.into_data().to_vec::<f32>().unwrap())
        .collect();
    (
        y.dims(),
        mean.dims(),
        rstd.dims(),
        stats.iter().all(|v| v.is_nan()),
    )
}

/// Rows of no columns still have one statistic each (`[M]`, as documented): the mean and rstd
/// of nothing, NaN, as the composed reference computes them.
#[test]
fn layer_norm_of_rows_without_columns_has_a_statistic_per_row() {
    let fusion = ascend();
    for shape in [[2usize, 3, 0], [1, 1, 0], [0, 4, 0]] {
        let rows = shape[0] * shape[1];
        let want = (shape, [rows], [rows], true);
        assert_eq!(
            empty_row_norm::<Ascend>(shape, &ascend()),
            want,
            "Ascend {shape:?}"
        );
        assert_eq!(
            empty_row_norm::<burn_fusion::Fusion<Ascend>>(shape, &fusion),
            want,
            "Fusion<Ascend> {shape:?}"
        );
        assert_eq!(
            empty_row_norm::<Flex>(shape, &flex()),
            want,
            "Flex {shape:?}"
        );
    }
}

#[test]
fn gather_scatter_and_rearrange_match_the_reference() {
    for (t, h, k, dtype) in [
        (1024usize, 1536usize, 4usize, DType::F16),
        (1, 100, 1, DType::F32),
        (37, 100, 2, DType::BF16),
        (5, 8, 3, DType::F32),
    ] {
        let x = host_values(vec![t, h], 6);
        let perm = routing_permutation(t * k, 8, 7);
        let idx =
            |d: &AscendDevice| Tensor::<Ascend, 1, Int>::from_data(perm.clone(), (d, DType::I32));
        let idx_ref = Tensor::<Flex, 1, Int>::from_data(perm.clone(), (&flex(), DType::I32));
        let what = format!("t {t} h {h} k {k} {dtype:?}");

        let got = fused::moe_gather(float::<Ascend, 2>(&x, dtype, &ascend()), idx(&ascend()), k);
        let want = fused::moe_gather(float::<Flex, 2>(&x, dtype, &flex()), idx_ref.clone(), k);
        assert_close(
            &format!("moe_gather {what}"),
            got.clone().into_data(),
            want.clone().into_data(),
            0.0,
        );

        let w = host_values(vec![t * k], 8);
        let got_s = fused::moe_scatter(got, idx(&ascend()), Some(float(&w, dtype, &ascend())), k);
        let want_s = fused::moe_scatter(want, idx_ref.clone(), Some(float(&w, dtype, &flex())), k);
        assert_close(
            &format!("moe_scatter {what}"),
            got_s.into_data(),
            want_s.into_data(),
            tolerance(dtype) * 4.0,
        );
    }
    for (s, d, index) in [(1024usize, 32usize, DType::I32), (17, 5, DType::I64)] {
        let x = host_values(vec![s, d], 9);
        let perm = routing_permutation(s, 5, 3).convert_dtype(index);
        let got = fused::token_rearrange(
            float::<Ascend, 2>(&x, DType::F32, &ascend()),
            Tensor::from_data(perm.clone(), (&ascend(), index)),
        );
        let want = fused::token_rearrange(
            float::<Flex, 2>(&x, DType::F32, &flex()),
            Tensor::from_data(perm, (&flex(), index)),
        );
        assert_close(
            &format!("token_rearrange {s}x{d} {index:?}"),
            got.into_data(),
            want.into_data(),
            0.0,
        );
    }
}

#[test]
#[serial]
fn kernels_move_at_most_five_percent_over_the_minimum_bytes() {
    if common::skipped_on_npu("kernels_move_at_most_five_percent_over_the_minimum_bytes") {
        return;
    }
    let d = ascend();
    clear_launch_log();
    let (m, n) = (256usize, 128usize);
    let x = float::<Ascend, 2>(&host_values(vec![m, n], 1), DType::F32, &d);
    let gamma = float::<Ascend, 1>(&host_values(vec![n], 2), DType::F32, &d);
    let beta = float::<Ascend, 1>(&host_values(vec![n], 3), DType::F32, &d);
    let _ = fused::layer_norm(x, Some(gamma), Some(beta), 1e-6)
        .0
        .into_data();
    // Each block reads its own gamma and beta: the tiling spreads short rows over more blocks
    // when the device model says the cores' GM rate gains more than the copies cost, so the
    // bound allows one copy per block and 5 % on top.
    let s = stats("layer_norm");
    let minimum = (2 * m * n * 4 + s.block_dim as usize * 2 * n * 4 + 2 * m * 4) as f64;
    assert!(
        s.block_dim > 7,
        "256 short rows use more cores than 40-row blocks: {s:?}"
    );
    assert!(
        traffic(&s) as f64 <= 1.05 * minimum,
        "layer_norm moved {} bytes, minimum {minimum}: {s:?}",
        traffic(&s)
    );
    // An f32 row of 8192 stays in the unified buffer between passes: x is read once.
    let (m, n) = (16usize, 8192usize);
    let x = float::<Ascend, 2>(&host_values(vec![m, n], 1), DType::F32, &d);
    let gamma = float::<Ascend, 1>(&host_values(vec![n], 2), DType::F32, &d);
    let beta = float::<Ascend, 1>(&host_values(vec![n], 3), DType::F32, &d);
    let _ = fused::layer_norm(x, Some(gamma), Some(beta), 1e-6)
        .0
        .into_data();
    let s = stats("layer_norm");
    let minimum = (2 * m * n * 4 + s.block_dim as usize * 2 * n * 4 + 2 * m * 4) as f64;
    assert!(
        traffic(&s) as f64 <= 1.05 * minimum,
        "layer_norm {m}x{n} moved {} bytes, minimum {minimum}: {s:?}",
        traffic(&s)
    );

    let (t, h, k) = (1024usize, 1536usize, 4usize);
    let x = float::<Ascend, 2>(&host_values(vec![t, h], 4), DType::F16, &d);
    let idx =
        Tensor::<Ascend, 1, Int>::from_data(routing_permutation(t * k, 64, 5), (&d, DType::I32));
    let gathered = fused::moe_gather(x, idx.clone(), k);
    let w = float::<Ascend, 1>(&host_values(vec![t * k], 6), DType::F16, &d);
    let _ = fused::moe_scatter(gathered, idx, Some(w), k).into_data();
    let g = stats("moe_gather");
    let gather_min = (2 * t * k * h * 2 + t * k * 4) as f64;
    assert!(
        traffic(&g) as f64 <= 1.05 * gather_min,
        "moe_gather moved {} bytes, minimum {gather_min}: {g:?}",
        traffic(&g)
    );
    let s = stats("moe_scatter");
    let scatter_min = (t * k * h * 2 + t * h * 2 + t * k * (4 + 2)) as f64;
    assert!(
        traffic(&s) as f64 <= 1.05 * scatter_min,
        "moe_scatter moved {} bytes, minimum {scatter_min}: {s:?}",
        traffic(&s)
    );

    let (rows, cols) = (1024usize, 32usize);
    let x = float::<Ascend, 2>(&host_values(vec![rows, cols], 7), DType::F32, &d);
    let perm =
        Tensor::<Ascend, 1, Int>::from_data(routing_permutation(rows, 7, 1), (&d, DType::I32));
    let _ = fused::token_rearrange(x, perm).into_data();
    let r = stats("token_rearrange");
    let rearrange_min = (2 * rows * cols * 4 + rows * 4) as f64;
    assert!(
        traffic(&r) as f64 <= 1.05 * rearrange_min,
        "token_rearrange moved {} bytes, minimum {rearrange_min}: {r:?}",
        traffic(&r)
    );
}

#[test]
#[serial(fault_device)]
fn bad_inputs_are_clear_errors() {
    // The index past x faults its device, which stays stopped until reset: a device of its own.
    common::reset_fault_device();
    let d = common::fault_device();
    let x = Tensor::<Ascend, 2>::random([4, 8], Distribution::Default, &d);
    let wrong = Tensor::<Ascend, 1, Int>::from_data(
        TensorData::new(vec![0i64, 1, 2], [3]),
        (&d, DType::I64),
    );
    let message = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        fused::moe_gather(x.clone(), wrong, 1)
    }))
    .expect_err("wrong index length and dtype");
    let text = message
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        text.contains("moe_gather") && text.contains("indices must be [4] int32"),
        "{text}"
    );

    let out_of_range = Tensor::<Ascend, 1, Int>::from_data(
        TensorData::new(vec![0i32, 1, 2, 99], [4]),
        (&d, DType::I32),
    );
    let gathered = fused::moe_gather(x, out_of_range, 1);
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| gathered.into_data()))
        .expect_err("an index past x faults on the device");
    let text = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(text.contains("moe_gather"), "{text}");
    common::reset_fault_device();
}

/// Router logits `[t, e]` with distinct values per row (no ties to break), drawn on the host.
fn router_logits(t: usize, e: usize, seed: u64) -> TensorData {
    let values: Vec<f32> = (0..t * e)
        .map(|i| {
            let x = (i as u64 * 2654435761 + seed * 97) % 10007;
            (x as f32 / 10007.0 - 0.5) * 6.0 + (i % e) as f32 * 1e-3
        })
        .collect();
    TensorData::new(values, [t, e])
}

/// A softmax router's choice in one launch (aclnnMoeGatingTopKSoftmaxV2) equals transformers'
/// composition on burn-flex: the same experts in the same order, weights and probabilities
/// within the dtype's tolerance, with and without renormalisation.
#[test]
#[serial]
fn moe_gating_softmax_is_one_launch_and_matches_the_composition() {
    use burn_ascend::emulator::aclnn_launches_of;
    use burn_ascend::FusedOps;
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for (t, e, k) in [(1, 8, 2), (7, 64, 6), (33, 128, 8), (5, 60, 4)] {
            for renormalize in [false, true] {
                let logits = router_logits(t, e, (t * e + k) as u64);
                // The reference routes the logits as the device holds them (rounded to dtype).
                let rounded = logits.clone().convert_dtype(dtype);
                let want = burn_flex::Flex::moe_gating_softmax(
                    float::<burn_flex::Flex, 2>(&rounded, dtype, &flex())
                        .into_primitive()
                        .tensor(),
                    k,
                    renormalize,
                );
                let before = aclnn_launches_of("aclnnMoeGatingTopKSoftmaxV2");
                let got = Ascend::moe_gating_softmax(
                    float::<Ascend, 2>(&rounded, dtype, &ascend())
                        .into_primitive()
                        .tensor(),
                    k,
                    renormalize,
                );
                assert_eq!(
                    aclnn_launches_of("aclnnMoeGatingTopKSoftmaxV2") - before,
                    1,
                    "{dtype:?} [{t}, {e}] top {k}"
                );
                let case = format!("{dtype:?} [{t}, {e}] top {k} renormalised {renormalize}");
                assert_eq!(
                    int_data::<Ascend>(got.ids),
                    int_data::<burn_flex::Flex>(want.ids),
                    "{case}: experts"
                );
                let (gw, ww) = (
                    float_data::<Ascend>(got.weights),
                    float_data::<burn_flex::Flex>(want.weights),
                );
                assert_eq!(gw.dtype, dtype, "{case}: weights keep the logits' dtype");
                assert_close(&format!("{case}: weights"), gw, ww, tolerance(dtype));
                let want = float_data::<burn_flex::Flex>(want.probs.expect("composed probs"));
                // Renormalising, the operator writes no softmax (§3.2): none is computed.
                match (got.probs, renormalize) {
                    (None, true) => {}
                    (Some(gp), false) => {
                        let gp = float_data::<Ascend>(gp);
                        assert_eq!(gp.dtype, DType::F32, "{case}: probabilities in f32");
                        assert_close(&format!("{case}: probabilities"), gp, want, 1e-6);
                    }
                    (got, _) => panic!("{case}: probabilities given: {}", got.is_some()),
                }
            }
        }
    }
}

/// Logits that are not `[T, E]` or a top-k past the experts are refused at the call, with an
/// error naming the op and the shape.
#[test]
fn moe_gating_softmax_refuses_bad_input_naming_the_shape() {
    use burn::tensor::TensorPrimitive;
    use burn_ascend::FusedOps;
    let logits = router_logits(4, 8, 1);
    let message = panic_message(|| {
        Ascend::moe_gating_softmax(
            float::<Ascend, 2>(&logits, DType::F32, &ascend())
                .into_primitive()
                .tensor(),
            9,
            true,
        )
    });
    assert!(
        message.contains("moe_gating_softmax")
            && message.contains("[4, 8]")
            && message.contains("top_k 9"),
        "{message}"
    );
    let message = panic_message(|| {
        let t: Tensor<Ascend, 1> =
            Tensor::from_data(TensorData::new(vec![0.0f32; 8], [8]), &ascend());
        match t.into_primitive() {
            TensorPrimitive::Float(p) => Ascend::moe_gating_softmax(p, 2, false),
            TensorPrimitive::QFloat(_) => unreachable!(),
        }
    });
    assert!(
        message.contains("moe_gating_softmax") && message.contains("[8]"),
        "{message}"
    );
}

/// A grouped router's choice in one kernel launch (`moe_group_topk`) equals transformers'
/// composition on burn-flex for DeepSeek-V3's `noaux_tc` (256 experts in 8 groups, sigmoid
/// scores, a selection bias), DeepSeek-V2's `group_limited_greedy` (160 in 8, softmax) and an
/// ungrouped sigmoid router: the same experts in the same order, weights and scores within f32
/// rounding, for f32 and bf16 logits (the latter cast to f32 first, as the composition does),
/// the weights given in the logits' dtype.
#[test]
#[serial]
fn moe_group_topk_is_one_launch_and_matches_the_composition() {
    use burn::tensor::backend::Backend;
    use burn_ascend::emulator::work_counters;
    use burn_ascend::fused::GroupTopk;
    use burn_ascend::FusedOps;
    let v3 = GroupTopk {
        top_k: 8,
        groups: 8,
        keep_groups: 4,
        group_top_two: true,
        sigmoid: true,
        gather_scores: true,
        renormalize: true,
        scale: 2.5,
    };
    let v2 = GroupTopk {
        top_k: 6,
        groups: 8,
        keep_groups: 3,
        group_top_two: false,
        sigmoid: false,
        gather_scores: false,
        renormalize: false,
        scale: 16.0,
    };
    let ungrouped = GroupTopk {
        top_k: 6,
        groups: 1,
        keep_groups: 1,
        ..v3
    };
    let cases = [(256, v3, true), (160, v2, false), (64, ungrouped, true)];
    for (e, choice, biased) in cases {
        for t in [1, 37] {
            for dtype in [DType::F32, DType::BF16] {
                let case = format!("{dtype:?} [{t}, {e}] {choice:?}");
                let logits = router_logits(t, e, (t * e) as u64).convert_dtype(dtype);
                let bias = biased.then(|| {
                    let values: Vec<f32> = waves(e, 3).iter().map(|v| v * 0.1).collect();
                    TensorData::new(values, [e])
                });
                let want = burn_flex::Flex::moe_group_topk(
                    float::<burn_flex::Flex, 2>(&logits, dtype, &flex())
                        .into_primitive()
                        .tensor(),
                    bias.as_ref().map(|b| {
                        float::<burn_flex::Flex, 1>(b, DType::F32, &flex())
                            .into_primitive()
                            .tensor()
                    }),
                    choice,
                    dtype,
                );
                let (logits, bias) = (
                    float::<Ascend, 2>(&logits, dtype, &ascend())
                        .into_primitive()
                        .tensor(),
                    bias.as_ref().map(|b| {
                        float::<Ascend, 1>(b, DType::F32, &ascend())
                            .into_primitive()
                            .tensor()
                    }),
                );
                Ascend::sync(&ascend()).unwrap();
                let before = work_counters();
                clear_launch_log();
                let got = Ascend::moe_group_topk(logits, bias, choice, dtype);
                Ascend::sync(&ascend()).unwrap();
                let counted = work_counters().since(&before);
                let casts = u64::from(dtype != DType::F32);
                assert_eq!(
                    (counted.aclnn_launches, counted.kernel_launches),
                    (casts, 1),
                    "{case}: one kernel launch (and the logits' cast): {:?}",
                    launch_log()
                );
                assert_eq!(launch_log()[0].kernel, "moe_group_topk", "{case}");
                assert_eq!(
                    int_data::<Ascend>(got.ids),
                    int_data::<burn_flex::Flex>(want.ids),
                    "{case}: experts"
                );
                let weights = float_data::<Ascend>(got.weights);
                assert_eq!(weights.dtype, dtype, "{case}: weights in the asked dtype");
                assert_close(
                    &format!("{case}: weights"),
                    weights,
                    float_data::<burn_flex::Flex>(want.weights),
                    tolerance(dtype),
                );
                assert_close(
                    &format!("{case}: scores"),
                    float_data::<Ascend>(got.probs.expect("scores")),
                    float_data::<burn_flex::Flex>(want.probs.expect("scores")),
                    1e-6,
                );
            }
        }
    }
}

/// Groups that do not split the experts, a top-k past the kept groups' experts, too many
/// experts and a bias of another length are refused at the call, naming the op and the shapes.
#[test]
fn moe_group_topk_refuses_bad_input_naming_the_shapes() {
    use burn_ascend::fused::GroupTopk;
    use burn_ascend::FusedOps;
    let choice = GroupTopk {
        top_k: 4,
        groups: 4,
        keep_groups: 2,
        group_top_two: true,
        sigmoid: true,
        gather_scores: true,
        renormalize: true,
        scale: 1.0,
    };
    let refuse = |e: usize, bias: Option<usize>, choice: GroupTopk, needle: &str| {
        let message = panic_message(|| {
            let logits = float::<Ascend, 2>(&router_logits(3, e, 1), DType::F32, &ascend());
            let bias = bias.map(|n| {
                Tensor::<Ascend, 1>::zeros([n], &ascend())
                    .into_primitive()
                    .tensor()
            });
            Ascend::moe_group_topk(logits.into_primitive().tensor(), bias, choice, DType::F32)
        });
        assert!(
            message.contains("moe_group_topk")
                && message.contains(&format!("[3, {e}]"))
                && message.contains(needle),
            "{needle}: {message}"
        );
    };
    refuse(30, None, choice, "groups must split the 30 experts");
    refuse(
        32,
        None,
        GroupTopk {
            top_k: 17,
            ..choice
        },
        "top_k must be in 1..=16",
    );
    refuse(
        8192,
        None,
        GroupTopk {
            groups: 8,
            ..choice
        },
        "E must be in 1..=4096",
    );
    refuse(32, Some(31), choice, "the bias must be [32] f32");
    refuse(
        8,
        None,
        GroupTopk {
            groups: 8,
            ..choice
        },
        "groups of at least 2",
    );
}

fn int_data<B: burn::tensor::backend::Backend>(p: B::IntTensorPrimitive) -> TensorData {
    Tensor::<B, 2, Int>::from_primitive(p)
        .into_data()
        .convert::<i64>()
}

fn float_data<B: burn::tensor::backend::Backend>(p: B::FloatTensorPrimitive) -> TensorData {
    Tensor::<B, 2>::from_primitive(burn::tensor::TensorPrimitive::Float(p)).into_data()
}

/// `[n]` values in about [-1, 1), deterministic in `seed`.
fn waves(n: usize, seed: u64) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as u64 * 2654435761 + seed * 40503) % 20011) as f32 / 10005.5 - 1.0)
        .collect()
}

/// A cos/sin table `[p, d]` of positions `0..p`: each row the cosines of its `d / 2` angles
/// (`theta` 10000's frequencies), then their sines, rounded to `dtype`.
fn cos_sin_table(p: usize, d: usize, dtype: DType) -> TensorData {
    let half = d / 2;
    let mut v = Vec::with_capacity(p * d);
    for pos in 0..p {
        let angle = |i: usize| pos as f32 * 10000f32.powf(-(2.0 * i as f32) / d as f32);
        v.extend((0..half).map(|i| angle(i).cos()));
        v.extend((0..half).map(|i| angle(i).sin()));
    }
    TensorData::new(v, [p, d]).convert_dtype(dtype)
}

/// q and k turned in one aclnnRopeWithSinCosCache where it takes the head dim (and composed,
/// with no launch of it, where it does not), equal to burn-flex's composition in every float
/// type, rotate-half and interleaved; tokens pick their rows in any order, repeats included.
#[test]
fn rotary_embedding_is_one_launch_where_it_fits_and_matches_the_composition() {
    use burn_ascend::emulator::aclnn_launches_of;
    for (dtype, interleaved) in [DType::F32, DType::F16, DType::BF16]
        .into_iter()
        .flat_map(|d| [(d, false), (d, true)])
    {
        for (t, nq, nk, d, p) in [
            (1, 4, 1, 128, 9),
            (7, 8, 2, 64, 7),
            (5, 2, 2, 32, 40),
            (3, 2, 1, 8, 5),
        ] {
            let q = TensorData::new(waves(t * nq * d, 1), [t, nq, d]).convert_dtype(dtype);
            let k = TensorData::new(waves(t * nk * d, 2), [t, nk, d]).convert_dtype(dtype);
            let table = cos_sin_table(p, d, dtype);
            let rows: Vec<i64> = (0..t).map(|i| ((i * 5 + 3) % p) as i64).collect();
            let rows = TensorData::new(rows, [t]);
            let want = fused::rotary_embedding::<burn_flex::Flex>(
                float(&q, dtype, &flex()),
                float(&k, dtype, &flex()),
                float(&table, dtype, &flex()),
                Tensor::from_data(rows.clone(), &flex()),
                interleaved,
            );
            let before = aclnn_launches_of("aclnnRopeWithSinCosCache");
            let got = fused::rotary_embedding::<Ascend>(
                float(&q, dtype, &ascend()),
                float(&k, dtype, &ascend()),
                float(&table, dtype, &ascend()),
                Tensor::from_data(rows, &ascend()),
                interleaved,
            );
            let case = format!("{dtype:?} t {t}, heads {nq}/{nk}, dim {d}, {interleaved}");
            let fits = d % if dtype == DType::F32 { 16 } else { 32 } == 0;
            assert_eq!(
                aclnn_launches_of("aclnnRopeWithSinCosCache") - before,
                if fits { 1 } else { 0 },
                "{case}"
            );
            for (name, g, w) in [("q", got.0, want.0), ("k", got.1, want.1)] {
                let g = g.into_data();
                assert_eq!(g.dtype, dtype, "{case}: {name} keeps its dtype");
                assert_close(
                    &format!("{case}: {name}"),
                    g,
                    w.into_data(),
                    tolerance(dtype),
                );
            }
        }
    }
}

/// Operands that disagree are refused at the call, naming the op and the shapes.
#[test]
fn rotary_embedding_refuses_operands_that_disagree_naming_the_shapes() {
    let (q, k) = (
        Tensor::<Ascend, 3>::zeros([2, 4, 64], &ascend()),
        Tensor::<Ascend, 3>::zeros([2, 1, 32], &ascend()),
    );
    let table = Tensor::<Ascend, 2>::zeros([8, 64], &ascend());
    let rows = Tensor::<Ascend, 1, Int>::zeros([2], &ascend());
    let message = panic_message(|| fused::rotary_embedding(q, k, table, rows, false));
    assert!(
        message.contains("rotary_embedding")
            && message.contains("[2, 4, 64]")
            && message.contains("[2, 1, 32]"),
        "{message}"
    );
}

/// SwiGLU of gate and up features side by side is one aclnnSwiGlu, equal to burn-flex's
/// composition in every float type, on a strided input too (a transposed matmul result).
#[test]
fn swiglu_is_one_launch_and_matches_the_composition() {
    use burn_ascend::emulator::aclnn_launches_of;
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for (rows, n) in [(1, 2 * 768), (5, 2 * 96), (3, 2)] {
            // Values up to about 6 in magnitude: silu's curve and its saturation both show.
            let x: Vec<f32> = waves(rows * n, 3).into_iter().map(|v| 6.0 * v).collect();
            let x = TensorData::new(x, [rows, n]).convert_dtype(dtype);
            let want = fused::swiglu(float::<burn_flex::Flex, 2>(&x, dtype, &flex()));
            let before = aclnn_launches_of("aclnnSwiGlu");
            let got = fused::swiglu(float::<Ascend, 2>(&x, dtype, &ascend()));
            let case = format!("{dtype:?} [{rows}, {n}]");
            assert_eq!(aclnn_launches_of("aclnnSwiGlu") - before, 1, "{case}");
            let got = got.into_data();
            assert_eq!(got.dtype, dtype, "{case}: keeps its dtype");
            assert_eq!(got.shape.to_vec(), vec![rows, n / 2], "{case}");
            assert_close(&case, got, want.into_data(), tolerance(dtype));
        }
        // `[n, rows]` transposed: the operator takes contiguous operands, the op copies first.
        let x = TensorData::new(waves(64 * 3, 4), [64, 3]).convert_dtype(dtype);
        let want = fused::swiglu(float::<burn_flex::Flex, 2>(&x, dtype, &flex()).transpose());
        let got = fused::swiglu(float::<Ascend, 2>(&x, dtype, &ascend()).transpose());
        assert_close(
            &format!("{dtype:?} transposed"),
            got.into_data(),
            want.into_data(),
            tolerance(dtype),
        );
    }
}

/// An odd feature count cannot be split into gate and up halves: refused at the call, naming
/// the op and the shape.
#[test]
fn swiglu_refuses_an_odd_last_dim_naming_the_shape() {
    let x = Tensor::<Ascend, 2>::zeros([2, 7], &ascend());
    let message = panic_message(|| fused::swiglu(x));
    assert!(
        message.contains("swiglu") && message.contains("[2, 7]"),
        "{message}"
    );
}
