//! Grouped matmul (aclnnGroupedMatmulV4 on the emulated NPU) against a host reference and its
//! composed default on burn-flex; CANN's own MoE routing ops (aclnnMoeInitRoutingV2,
//! aclnnMoeTokenUnpermute, aclnnMoeFinalizeRoutingV2) against `moe_gather`/`moe_scatter` and a
//! host formula on the same routing; the checks
//! the emulated operators make, called directly; the gradients `Autodiff<Ascend>` takes through
//! the fused ops, against their adjoints and against `Autodiff<Flex>` on compositions of
//! standard Burn ops; and the `layer_norm_backward` kernel against its composed default.

mod common;

use common::panic_message;

use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{s, DType, IndexingUpdateOp, Int, Tensor, TensorData, TensorPrimitive};
use burn_ascend::acl::aclnn;
use burn_ascend::acl::handles::{Absent, TensorListDesc};
use burn_ascend::acl::types::status::*;
use burn_ascend::acl::{AclError, DataType};
use burn_ascend::emulator::kernel_runner::{clear_launch_log, launch_log};
use burn_ascend::ops::fused as device;
use burn_ascend::ops::AscendTensor;
use burn_ascend::{fused, Ascend, AscendDevice, FusedOps};
use burn_ascend_suite::host_values::host_values;
use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use serial_test::serial;

type AdAscend = Autodiff<Ascend>;
type AdFlex = Autodiff<Flex>;

fn ascend() -> AscendDevice {
    common::device()
}

fn flex() -> FlexDevice {
    Default::default()
}

fn float<B: Backend, const D: usize>(
    data: &TensorData,
    dtype: DType,
    d: &B::Device,
) -> Tensor<B, D> {
    Tensor::from_data(data.clone().convert_dtype(dtype), (d, dtype))
}

fn ints<B: Backend, const D: usize>(
    v: &[i32],
    shape: [usize; D],
    d: &B::Device,
) -> Tensor<B, D, Int> {
    Tensor::from_data(TensorData::new(v.to_vec(), shape), (d, DType::I32))
}

fn to_f64(d: TensorData) -> Vec<f64> {
    d.convert::<f64>().to_vec::<f64>().unwrap()
}

fn to_i64(d: TensorData) -> Vec<i64> {
    d.convert::<i64>().to_vec::<i64>().unwrap()
}

fn primitive<const D: usize>(t: Tensor<Ascend, D>) -> AscendTensor {
    t.into_primitive().tensor().into_inner()
}

fn tensor<const D: usize>(t: AscendTensor) -> Tensor<Ascend, D> {
    Tensor::from_primitive(TensorPrimitive::Float(t.into()))
}

/// Asserts that `got` matches `want` in shape and values, relative to `max(|want|, 1)`.
fn assert_close(what: &str, got: TensorData, want: TensorData, tol: f64) {
    assert_eq!(got.shape, want.shape, "{what}: shape");
    for (i, (a, b)) in to_f64(got).iter().zip(&to_f64(want)).enumerate() {
        assert!(
            (a - b).abs() <= tol * b.abs().max(1.0),
            "{what}: element {i} is {a}, the reference gives {b}"
        );
    }
}

fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 4e-3,
        DType::BF16 => 2e-2,
        _ => 2e-5,
    }
}

// ---------------------------------------------------------------------------------------------
// Grouped matmul
// ---------------------------------------------------------------------------------------------

/// `[R, N]` on the host: `x[r] @ w[e]` for the rows of group `e`, zero past the last group.
fn host_grouped_matmul(x: &[f64], w: &[f64], sizes: &[usize], k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; x.len() / k.max(1) * n];
    let mut start = 0;
    for (e, &size) in sizes.iter().enumerate() {
        for r in start..start + size {
            for j in 0..n {
                out[r * n + j] = (0..k).map(|p| x[r * k + p] * w[(e * k + p) * n + j]).sum();
            }
        }
        start += size;
    }
    out
}

/// `[E, K, N]` on the host: `x_e^T @ dy_e` over the rows of each group.
fn host_weight_grad(x: &[f64], dy: &[f64], sizes: &[usize], k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; sizes.len() * k * n];
    let mut start = 0;
    for (e, &size) in sizes.iter().enumerate() {
        for p in 0..k {
            for j in 0..n {
                out[(e * k + p) * n + j] = (start..start + size)
                    .map(|r| x[r * k + p] * dy[r * n + j])
                    .sum();
            }
        }
        start += size;
    }
    out
}

/// `(rows, k, n, group sizes)`: empty groups, rows past the last group, a single group, one
/// row, and a MoE layer of 128 tokens routed top-4 over 64 experts (a quarter of them idle).
fn grouped_cases() -> Vec<(usize, usize, usize, Vec<usize>)> {
    let moe: Vec<usize> = (0..64).map(|e| [4, 12, 16, 0][e % 4]).collect();
    vec![
        (64, 32, 48, vec![10, 0, 30, 24]),
        (50, 16, 8, vec![7, 20, 0, 0, 3]),
        (9, 5, 3, vec![9]),
        (1, 7, 2, vec![0, 1]),
        (512, 96, 64, moe),
    ]
}

fn sizes_i32(sizes: &[usize]) -> Vec<i32> {
    sizes.iter().map(|&s| s as i32).collect()
}

#[test]
fn grouped_matmul_matches_the_host_and_the_default() {
    for (case, (rows, k, n, sizes)) in grouped_cases().into_iter().enumerate() {
        let (groups, list) = (sizes.len(), sizes_i32(&sizes));
        let x = host_values(vec![rows, k], 1 + case as u64);
        let w = host_values(vec![groups, k, n], 2 + case as u64);
        let host = host_grouped_matmul(&to_f64(x.clone()), &to_f64(w.clone()), &sizes, k, n);
        let host = TensorData::new(host, [rows, n]);
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let what = format!("grouped_matmul [{rows}, {k}] by [{groups}, {k}, {n}] {dtype:?}");
            // Accumulated in f32 (against f64 on the host); the inputs and the result are rounded.
            let rounded_x = float::<Flex, 2>(&x, dtype, &flex()).into_data();
            let rounded_w = float::<Flex, 3>(&w, dtype, &flex()).into_data();
            let want = host_grouped_matmul(&to_f64(rounded_x), &to_f64(rounded_w), &sizes, k, n);
            let want = TensorData::new(want, [rows, n]);
            let got = fused::grouped_matmul(
                float::<Ascend, 2>(&x, dtype, &ascend()),
                float(&w, dtype, &ascend()),
                ints(&list, [groups], &ascend()),
            )
            .into_data();
            let tol = if dtype == DType::F32 {
                2e-4
            } else {
                tolerance(dtype)
            };
            assert_close(&what, got.clone(), want, tol);
            // The same weights stored as [E, N, K], passed as a view with its dims swapped.
            let stored = float::<Ascend, 3>(&w, dtype, &ascend())
                .swap_dims(1, 2)
                .into_data();
            let view = Tensor::<Ascend, 3>::from_data(stored, (&ascend(), dtype)).swap_dims(1, 2);
            let via_view = fused::grouped_matmul(
                float::<Ascend, 2>(&x, dtype, &ascend()),
                view,
                ints(&list, [groups], &ascend()),
            );
            assert_close(
                &format!("{what}, transposed weights"),
                via_view.into_data(),
                got,
                0.0,
            );
        }
        // The composed default (burn-flex accumulates in the input type, so f32 only).
        let default = fused::grouped_matmul(
            float::<Flex, 2>(&x, DType::F32, &flex()),
            float(&w, DType::F32, &flex()),
            ints(&list, [groups], &flex()),
        );
        let what =
            format!("grouped_matmul [{rows}, {k}] by [{groups}, {k}, {n}]: default on burn-flex");
        assert_close(&what, default.into_data(), host, 1e-4);
    }
}

#[test]
fn grouped_matmul_weight_grad_matches_the_host_and_the_default() {
    for (case, (rows, k, n, sizes)) in grouped_cases().into_iter().enumerate() {
        let (groups, list) = (sizes.len(), sizes_i32(&sizes));
        let x = host_values(vec![rows, k], 3 + case as u64);
        let dy = host_values(vec![rows, n], 4 + case as u64);
        let want = host_weight_grad(&to_f64(x.clone()), &to_f64(dy.clone()), &sizes, k, n);
        let want = TensorData::new(want, [groups, k, n]);
        let what = format!(
            "grouped_matmul_weight_grad [{rows}, {k}] and [{rows}, {n}] in {groups} groups"
        );
        let got = fused::grouped_matmul_weight_grad(
            float::<Ascend, 2>(&x, DType::F32, &ascend()),
            float(&dy, DType::F32, &ascend()),
            ints(&list, [groups], &ascend()),
        );
        assert_close(&what, got.into_data(), want.clone(), 2e-5);
        let default = fused::grouped_matmul_weight_grad(
            float::<Flex, 2>(&x, DType::F32, &flex()),
            float(&dy, DType::F32, &flex()),
            ints(&list, [groups], &flex()),
        );
        assert_close(
            &format!("{what}: default on burn-flex"),
            default.into_data(),
            want,
            1e-4,
        );
    }
}

#[test]
#[serial]
fn grouped_matmul_bad_inputs_are_clear_errors() {
    if common::skipped_on_npu("grouped_matmul_bad_inputs_are_clear_errors") {
        return;
    }
    // The faults this test provokes stop their device until it is reset: it runs on a device
    // of its own and resets it.
    common::reset_fault_device();
    let d = common::fault_device();
    let x = || float::<Ascend, 2>(&host_values(vec![6, 4], 1), DType::F32, &d);
    let w = || float::<Ascend, 3>(&host_values(vec![2, 4, 3], 2), DType::F32, &d);

    let text = panic_message(|| fused::grouped_matmul(x(), w(), ints(&[6], [1], &d)));
    assert!(text.contains("group_sizes must be [2]"), "{text}");

    let text = panic_message(|| {
        fused::grouped_matmul(
            x().cast(DType::F64),
            w().cast(DType::F64),
            ints(&[3, 3], [2], &d),
        )
    });
    assert!(text.contains("takes f32, f16 or bf16"), "{text}");

    // The sizes live on the device: a bad list is found by the kernel, reported at the next sync.
    let past = fused::grouped_matmul(x(), w(), ints(&[4, 3], [2], &d));
    let text = panic_message(|| past.into_data());
    assert!(
        text.contains("aclnnGroupedMatmulV4") && text.contains("cover 7 rows"),
        "{text}"
    );
    common::reset_fault_device();
    let negative = fused::grouped_matmul(x(), w(), ints(&[-1, 3], [2], &d));
    let text = panic_message(|| negative.into_data());
    assert!(text.contains("group 0 has size -1"), "{text}");
    common::reset_fault_device();
}

/// aclnnGroupedMatmulV4 on single tensors, called directly.
fn gmm_v4(
    x: &AscendTensor,
    weight: &AscendTensor,
    group_list: &AscendTensor,
    out: &AscendTensor,
    (group_type, group_list_type, act_type): (i64, i64, i64),
) -> Result<(), AclError> {
    let ctx = x.ctx();
    let api = ctx.bind();
    let xs = TensorListDesc::new(api, vec![x.desc()?])?;
    let ws = TensorListDesc::new(api, vec![weight.desc()?])?;
    let outs = TensorListDesc::new(api, vec![out.desc()?])?;
    let list = group_list.desc()?;
    aclnn!(
        &**ctx,
        aclnnGroupedMatmulV4(
            &xs,
            &ws,
            Absent,
            Absent,
            Absent,
            Absent,
            Absent,
            Absent,
            &list,
            Absent,
            Absent,
            Absent,
            3,
            group_type,
            group_list_type,
            act_type,
            &outs,
            Absent,
            Absent
        )
    )
}

fn i64s(v: &[i64]) -> AscendTensor {
    Tensor::<Ascend, 1, Int>::from_data(
        TensorData::new(v.to_vec(), [v.len()]),
        (&ascend(), DType::I64),
    )
    .into_primitive()
    .into_inner()
}

#[test]
fn emulated_grouped_matmul_checks_what_the_operator_checks() {
    if common::skipped_on_npu("emulated_grouped_matmul_checks_what_the_operator_checks") {
        return;
    }
    let d = ascend();
    let weights = |dtype| {
        primitive(float::<Ascend, 3>(
            &host_values(vec![2, 4, 3], 2),
            dtype,
            &d,
        ))
    };
    let matrix = |rows: usize, cols: usize, seed| {
        primitive(float::<Ascend, 2>(
            &host_values(vec![rows, cols], seed),
            DType::F32,
            &d,
        ))
    };
    let (x, w) = (matrix(6, 4, 1), weights(DType::F32));
    let out = || primitive(Tensor::<Ascend, 2>::zeros([6, 3], &d));
    let invalid = |r: Result<(), AclError>, why: &str| {
        let e = r.expect_err(why);
        assert_eq!(e.code(), Some(ACLNN_ERR_PARAM_INVALID), "{why}: {e}");
    };

    // Totals (groupListType 0) and sizes (1) describe the same groups.
    let (by_totals, by_sizes) = (out(), out());
    gmm_v4(&x, &w, &i64s(&[2, 6]), &by_totals, (0, 0, 0)).unwrap();
    gmm_v4(&x, &w, &i64s(&[2, 4]), &by_sizes, (0, 1, 0)).unwrap();
    assert_close(
        "group list as totals and as sizes",
        tensor::<2>(by_totals).into_data(),
        tensor::<2>(by_sizes).into_data(),
        0.0,
    );

    invalid(
        gmm_v4(&x, &w, &i64s(&[2, 4]), &out(), (1, 1, 0)),
        "groups along N",
    );
    invalid(
        gmm_v4(&x, &w, &i64s(&[2, 4]), &out(), (0, 2, 0)),
        "key-value group lists of floats",
    );
    invalid(
        gmm_v4(&x, &w, &i64s(&[2, 4]), &out(), (0, 1, 1)),
        "a fused activation without quantisation",
    );
    invalid(
        gmm_v4(&x, &w, &i64s(&[2, 4, 0]), &out(), (0, 1, 0)),
        "a group list longer than the weights",
    );
    let i32_list = ints::<Ascend, 1>(&[2, 4], [2], &d).into_primitive();
    invalid(
        gmm_v4(&x, &w, &i32_list, &out(), (0, 1, 0)),
        "an INT32 group list",
    );
    let half_w = weights(DType::F16);
    invalid(
        gmm_v4(&x, &half_w, &i64s(&[2, 4]), &out(), (0, 1, 0)),
        "mixed float types",
    );
    let x_t = matrix(4, 6, 1);
    let x_t = x_t.with_layout(x_t.layout().swap_dims(0, 1));
    invalid(
        gmm_v4(&x_t, &w, &i64s(&[2, 4]), &out(), (0, 1, 0)),
        "a transposed x grouped along M",
    );
    // Grouping along K takes x transposed: a plain x is refused.
    let dw = primitive(Tensor::<Ascend, 3>::zeros([2, 4, 3], &d));
    let dy = matrix(6, 3, 3);
    invalid(
        gmm_v4(&matrix(4, 6, 1), &dy, &i64s(&[2, 4]), &dw, (2, 1, 0)),
        "a plain x grouped along K",
    );
    gmm_v4(
        &x.with_layout(x.layout().swap_dims(0, 1)),
        &dy,
        &i64s(&[2, 4]),
        &dw,
        (2, 1, 0),
    )
    .expect("x transposed, grouped along K");
}

// ---------------------------------------------------------------------------------------------
// CANN's routing ops against moe_gather / moe_scatter
// ---------------------------------------------------------------------------------------------

/// Top-k expert ids `[T, K]` (distinct per token), flattened token-major.
fn expert_ids(tokens: usize, top_k: usize, experts: usize, seed: u64) -> Vec<i32> {
    (0..tokens)
        .flat_map(|t| {
            let base = ((t as u64 * 2654435761 + seed) >> 7) as usize % experts;
            (0..top_k).map(move |k| ((base + k * 5) % experts) as i32)
        })
        .collect()
}

/// The stable argsort of the flat ids: row `i` of the expert-major order holds slot `order[i]`.
fn sort_order(ids: &[i32]) -> Vec<i32> {
    let mut order: Vec<i32> = (0..ids.len() as i32).collect();
    order.sort_by_key(|&slot| ids[slot as usize]);
    order
}

#[test]
fn cann_routing_agrees_with_moe_gather_and_moe_scatter() {
    for (t, h, e, k, dtype) in [
        (1024usize, 1536usize, 64usize, 4usize, DType::F16),
        (37, 100, 8, 2, DType::BF16),
        (5, 8, 3, 1, DType::F32),
        (16, 32, 16, 3, DType::F32),
    ] {
        let d = ascend();
        let what = format!("T {t} H {h} E {e} K {k} {dtype:?}");
        let ids = expert_ids(t, k, e, 11);
        let order = sort_order(&ids);
        let mut inverse = vec![0i64; t * k];
        for (row, &slot) in order.iter().enumerate() {
            inverse[slot as usize] = row as i64;
        }
        let mut counts = vec![0i64; e];
        for &id in &ids {
            counts[id as usize] += 1;
        }
        let x = float::<Ascend, 2>(&host_values(vec![t, h], 1), dtype, &d);
        let routing = device::cann_moe_init_routing(
            &primitive(x.clone()),
            &ints::<Ascend, 2>(&ids, [t, k], &d).into_primitive(),
            e,
            None,
        )
        .unwrap();
        let gathered = fused::moe_gather(x, ints(&order, [t * k], &d), k);
        assert_close(
            &format!("expanded x, {what}"),
            tensor::<2>(routing.expanded_x).into_data(),
            gathered.into_data(),
            0.0,
        );
        let row_idx =
            Tensor::<Ascend, 1, Int>::from_primitive(routing.expanded_row_idx.clone().into());
        assert_eq!(
            to_i64(row_idx.into_data()),
            inverse,
            "expanded row index, {what}"
        );
        let expert_tokens = Tensor::<Ascend, 1, Int>::from_primitive(routing.expert_tokens.into());
        assert_eq!(
            to_i64(expert_tokens.into_data()),
            counts,
            "expert tokens, {what}"
        );

        let y = float::<Ascend, 2>(&host_values(vec![t * k, h], 2), dtype, &d);
        let probs = float::<Ascend, 2>(&host_values(vec![t, k], 3), dtype, &d);
        let cann = device::cann_moe_token_unpermute(
            &primitive(y.clone()),
            &routing.expanded_row_idx,
            Some(&primitive(probs.clone())),
        )
        .unwrap();
        let ours = fused::moe_scatter(
            y.clone(),
            ints(&order, [t * k], &d),
            Some(probs.reshape([t * k])),
            k,
        );
        assert_close(
            &format!("token unpermute, {what}"),
            tensor::<2>(cann).into_data(),
            ours.into_data(),
            tolerance(dtype) * 4.0,
        );
        if k == 1 {
            let cann = device::cann_moe_token_unpermute(
                &primitive(y.clone()),
                &routing.expanded_row_idx,
                None,
            )
            .unwrap();
            let ours = fused::moe_scatter(y, ints(&order, [t], &d), None, 1);
            assert_close(
                &format!("unweighted unpermute, {what}"),
                tensor::<2>(cann).into_data(),
                ours.into_data(),
                0.0,
            );
        }
    }
}

/// aclnnMoeInitRoutingV2 called directly, dropless: `(expanded_x, expanded_row_idx)` or the
/// status.
fn init_routing_v2(
    x: &AscendTensor,
    ids: &AscendTensor,
    (active_num, drop_pad_mode, count_flag, experts): (i64, i64, i64, i64),
    rows_out: usize,
) -> Result<(AscendTensor, AscendTensor), AclError> {
    let ctx = x.ctx();
    let expanded = AscendTensor::empty(ctx, vec![rows_out, x.shape()[1]], x.dtype())?;
    let row_idx = AscendTensor::empty(ctx, vec![ids.layout().numel()], DataType::I32)?;
    let counts = AscendTensor::empty(ctx, vec![experts.max(0) as usize], DataType::I32)?;
    let counts = counts.desc()?;
    aclnn!(
        &**ctx,
        aclnnMoeInitRoutingV2(
            x.desc()?,
            ids.desc()?,
            active_num,
            0,
            experts,
            drop_pad_mode,
            count_flag,
            false,
            expanded.desc()?,
            row_idx.desc()?,
            &counts,
            Absent
        )
    )?;
    Ok((expanded, row_idx))
}

fn unpermute(
    permuted: &AscendTensor,
    rows: &AscendTensor,
    probs: &AscendTensor,
    padded: bool,
) -> Result<AscendTensor, AclError> {
    let ctx = permuted.ctx();
    let out = AscendTensor::empty(
        ctx,
        vec![probs.shape()[0], permuted.shape()[1]],
        permuted.dtype(),
    )?;
    aclnn!(
        &**ctx,
        aclnnMoeTokenUnpermute(
            permuted.desc()?,
            rows.desc()?,
            probs.desc()?,
            padded,
            Absent,
            out.desc()?
        )
    )?;
    Ok(out)
}

#[test]
fn emulated_routing_ops_check_what_the_operators_check() {
    if common::skipped_on_npu("emulated_routing_ops_check_what_the_operators_check") {
        return;
    }
    let (t, h, e, k, active) = (4usize, 6usize, 3usize, 2usize, 5usize);
    let d = ascend();
    let ids = expert_ids(t, k, e, 9);
    let order = sort_order(&ids);
    let x_data = host_values(vec![t, h], 1);
    let x = primitive(float::<Ascend, 2>(&x_data, DType::F32, &d));
    let id_tensor = ints::<Ascend, 2>(&ids, [t, k], &d).into_primitive();

    // Active mode: only the first activeNum rows of the expert-major order are expanded, and
    // unpermuting skips the slots whose row lies past them.
    let (expanded, row_idx) =
        init_routing_v2(&x, &id_tensor, (active as i64, 0, 1, e as i64), active).unwrap();
    let full = fused::moe_gather(tensor::<2>(x.clone()), ints(&order, [t * k], &d), k);
    assert_close(
        "active rows",
        tensor::<2>(expanded.clone()).into_data(),
        full.slice(s![0..active, ..]).into_data(),
        0.0,
    );
    let probs_data = host_values(vec![t, k], 2);
    let probs = primitive(float::<Ascend, 2>(&probs_data, DType::F32, &d));
    let got = unpermute(&expanded, &row_idx, &probs, false).unwrap();
    let (xv, pv) = (to_f64(x_data), to_f64(probs_data));
    let mut want = vec![0.0; t * h];
    for &slot in order.iter().take(active) {
        let token = slot as usize / k;
        for c in 0..h {
            want[token * h + c] += pv[slot as usize] * xv[token * h + c];
        }
    }
    assert_close(
        "unpermute of the active rows",
        tensor::<2>(got).into_data(),
        TensorData::new(want, [t, h]),
        1e-5,
    );

    let status = |r: Result<(AscendTensor, AscendTensor), AclError>, code: i32, why: &str| {
        let e = r.err().unwrap_or_else(|| panic!("{why} should fail"));
        assert_eq!(e.code(), Some(code), "{why}: {e}");
    };
    let slots = t * k;
    status(
        init_routing_v2(&x, &id_tensor, (0, 2, 0, e as i64), slots),
        ACLNN_ERR_INNER_TILING_ERROR,
        "dropPadMode 2",
    );
    status(
        init_routing_v2(&x, &id_tensor, (0, 0, 1, 0), slots),
        ACLNN_ERR_INNER_TILING_ERROR,
        "counts without experts",
    );
    status(
        init_routing_v2(&x, &id_tensor, (0, 0, 0, e as i64), slots + 1),
        ACLNN_ERR_PARAM_INVALID,
        "an expanded x of the wrong size",
    );
    let i64_ids = Tensor::<Ascend, 2, Int>::from_data(
        TensorData::new(ids.iter().map(|&i| i as i64).collect::<Vec<_>>(), [t, k]),
        (&d, DType::I64),
    );
    status(
        init_routing_v2(&x, &i64_ids.into_primitive(), (0, 0, 0, e as i64), slots),
        ACLNN_ERR_PARAM_INVALID,
        "INT64 expert ids",
    );

    let padded = unpermute(&expanded, &row_idx, &probs, true).expect_err("paddedMode true");
    assert_eq!(padded.code(), Some(ACLNN_ERR_PARAM_INVALID), "{padded}");
    let wide = 513;
    let many = primitive(float::<Ascend, 2>(
        &host_values(vec![wide, h], 3),
        DType::F32,
        &d,
    ));
    let rows: Vec<i32> = (0..wide as i32).collect();
    let probs = primitive(float::<Ascend, 2>(
        &host_values(vec![1, wide], 4),
        DType::F32,
        &d,
    ));
    let too_many = unpermute(
        &many,
        &ints::<Ascend, 1>(&rows, [wide], &d).into_primitive(),
        &probs,
        false,
    )
    .expect_err("top-k 513");
    assert_eq!(too_many.code(), Some(ACLNN_ERR_PARAM_INVALID), "{too_many}");
}

#[test]
fn cann_routing_with_a_capacity_drops_and_pads() {
    let (t, h, e, k, capacity) = (7usize, 5usize, 4usize, 2usize, 3usize);
    let d = ascend();
    let ids = expert_ids(t, k, e, 3);
    let order = sort_order(&ids);
    let x = host_values(vec![t, h], 4);
    let routing = device::cann_moe_init_routing(
        &primitive(float::<Ascend, 2>(&x, DType::F32, &d)),
        &ints::<Ascend, 2>(&ids, [t, k], &d).into_primitive(),
        e,
        Some(capacity),
    )
    .unwrap();
    let xv = to_f64(x);
    let mut expanded = vec![0.0; e * capacity * h];
    let mut row_idx = vec![-1i64; t * k];
    let mut counts = vec![0i64; e];
    for &slot in &order {
        let expert = ids[slot as usize] as usize;
        let rank = counts[expert] as usize;
        counts[expert] += 1;
        if rank < capacity {
            let row = expert * capacity + rank;
            let token = slot as usize / k;
            expanded[row * h..(row + 1) * h].copy_from_slice(&xv[token * h..(token + 1) * h]);
            row_idx[slot as usize] = row as i64;
        }
    }
    assert!(row_idx.contains(&-1), "the case must drop a slot");
    assert_close(
        "expanded x with a capacity",
        tensor::<3>(routing.expanded_x).into_data(),
        TensorData::new(expanded, [e, capacity, h]),
        0.0,
    );
    let got_rows = Tensor::<Ascend, 1, Int>::from_primitive(routing.expanded_row_idx.into());
    assert_eq!(
        to_i64(got_rows.into_data()),
        row_idx,
        "row index with a capacity"
    );
    let got_counts = Tensor::<Ascend, 1, Int>::from_primitive(routing.expert_tokens.into());
    assert_eq!(
        to_i64(got_counts.into_data()),
        counts,
        "tokens per expert before the capacity cut"
    );
}

// ---------------------------------------------------------------------------------------------
// Gradients through the fused ops
// ---------------------------------------------------------------------------------------------

/// Inputs of the gather/scatter gradient cases: `(tokens, hidden, top_k, order)`.
fn routing_case() -> (usize, usize, usize, Vec<i32>) {
    let (t, h, k) = (37, 24, 3);
    (t, h, k, sort_order(&expert_ids(t, k, 8, 5)))
}

/// Gradients of `sum(out * g)` through gather, weighted scatter and plain scatter: `[dx of the
/// gather, dy and dw of the weighted scatter, dy of the plain scatter]`. With `fused` false the
/// same functions are composed from standard Burn ops.
fn gather_scatter_grads<B: AutodiffBackend + FusedOps>(
    d: &B::Device,
    fused: bool,
) -> Vec<TensorData> {
    let (t, h, k, order) = routing_case();
    let idx = ints::<B, 1>(&order, [t * k], d);
    let token = idx.clone() / k as i64;
    let f32 = DType::F32;

    let x = float::<B, 2>(&host_values(vec![t, h], 1), f32, d).require_grad();
    let gathered = if fused {
        fused::moe_gather(x.clone(), idx.clone(), k)
    } else {
        x.clone().select(0, token.clone())
    };
    let grads = (gathered * float::<B, 2>(&host_values(vec![t * k, h], 2), f32, d))
        .sum()
        .backward();
    let dx = x.grad(&grads).unwrap().into_data();

    let g = || float::<B, 2>(&host_values(vec![t, h], 3), f32, d);
    let y = float::<B, 2>(&host_values(vec![t * k, h], 4), f32, d).require_grad();
    let w = float::<B, 1>(&host_values(vec![t * k], 5), f32, d).require_grad();
    let scattered = if fused {
        fused::moe_scatter(y.clone(), idx.clone(), Some(w.clone()), k)
    } else {
        let terms = y.clone() * w.clone().select(0, idx.clone()).unsqueeze_dim(1);
        Tensor::<B, 2>::zeros([t, h], d).select_assign(
            0,
            token.clone(),
            terms,
            IndexingUpdateOp::Add,
        )
    };
    let grads = (scattered * g()).sum().backward();
    let (dy, dw) = (
        y.grad(&grads).unwrap().into_data(),
        w.grad(&grads).unwrap().into_data(),
    );

    let y = float::<B, 2>(&host_values(vec![t * k, h], 6), f32, d).require_grad();
    let scattered = if fused {
        fused::moe_scatter(y.clone(), idx, None, k)
    } else {
        Tensor::<B, 2>::zeros([t, h], d).select_assign(0, token, y.clone(), IndexingUpdateOp::Add)
    };
    let grads = (scattered * g()).sum().backward();
    vec![dx, dy, dw, y.grad(&grads).unwrap().into_data()]
}

#[test]
fn moe_gather_and_moe_scatter_are_each_others_adjoints() {
    let got = gather_scatter_grads::<AdAscend>(&ascend(), true);
    let default = gather_scatter_grads::<AdFlex>(&flex(), true);
    let reference = gather_scatter_grads::<AdFlex>(&flex(), false);
    let names = [
        "gather dx",
        "scatter dy",
        "scatter dw",
        "unweighted scatter dy",
    ];
    for (i, name) in names.iter().enumerate() {
        assert_close(
            &format!("{name} on Ascend"),
            got[i].clone(),
            reference[i].clone(),
            1e-5,
        );
        assert_close(
            &format!("{name}, default on burn-flex"),
            default[i].clone(),
            reference[i].clone(),
            1e-5,
        );
    }

    // The adjoints themselves, as forward calls on the device.
    let (t, h, k, order) = routing_case();
    let d = ascend();
    let idx = || ints::<Ascend, 1>(&order, [t * k], &d);
    let f32 = DType::F32;
    let scatter_of_g = fused::moe_scatter(
        float(&host_values(vec![t * k, h], 2), f32, &d),
        idx(),
        None,
        k,
    );
    assert_close(
        "gather dx = scatter of the output gradient",
        got[0].clone(),
        scatter_of_g.into_data(),
        1e-6,
    );
    let g = || float::<Ascend, 2>(&host_values(vec![t, h], 3), f32, &d);
    let w = float::<Ascend, 1>(&host_values(vec![t * k], 5), f32, &d);
    let routed = fused::moe_gather(g(), idx(), k);
    let weighted = routed.clone() * w.select(0, idx()).unsqueeze_dim(1);
    assert_close(
        "scatter dy = gather of the output gradient times the weights",
        got[1].clone(),
        weighted.into_data(),
        1e-6,
    );
    assert_close(
        "unweighted scatter dy = gather of the output gradient",
        got[3].clone(),
        routed.into_data(),
        0.0,
    );
    // dw[slot] = <g[token of slot], y[row the slot lands on]>, on the host.
    let (gv, yv) = (
        to_f64(host_values(vec![t, h], 3)),
        to_f64(host_values(vec![t * k, h], 4)),
    );
    let mut dw = vec![0.0; t * k];
    for (row, &slot) in order.iter().enumerate() {
        let token = slot as usize / k;
        dw[slot as usize] = (0..h).map(|c| gv[token * h + c] * yv[row * h + c]).sum();
    }
    assert_close(
        "scatter dw on the host",
        got[2].clone(),
        TensorData::new(dw, [t * k]),
        1e-5,
    );
}

/// Gradient of `sum(token_rearrange(x, perm) * g)`, fused or as a plain row select.
fn rearrange_grad<B: AutodiffBackend + FusedOps>(
    d: &B::Device,
    perm: &[i32],
    cols: usize,
    fused: bool,
) -> TensorData {
    let rows = perm.len();
    let x = float::<B, 2>(&host_values(vec![rows, cols], 1), DType::F32, d).require_grad();
    let perm = ints::<B, 1>(perm, [rows], d);
    let out = if fused {
        fused::token_rearrange(x.clone(), perm)
    } else {
        x.clone().select(0, perm)
    };
    let grads = (out * float::<B, 2>(&host_values(vec![rows, cols], 2), DType::F32, d))
        .sum()
        .backward();
    x.grad(&grads).unwrap().into_data()
}

#[test]
fn token_rearrange_adjoint_is_the_inverse_permutation() {
    let (rows, cols) = (97usize, 12usize);
    let perm = sort_order(&expert_ids(rows, 1, 7, 2));
    let mut inverse = vec![0i32; rows];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p as usize] = i as i32;
    }
    let got = rearrange_grad::<AdAscend>(&ascend(), &perm, cols, true);
    let d = ascend();
    let want = fused::token_rearrange(
        float::<Ascend, 2>(&host_values(vec![rows, cols], 2), DType::F32, &d),
        ints(&inverse, [rows], &d),
    );
    assert_close(
        "token_rearrange dx = rearrange of the gradient by the inverse",
        got.clone(),
        want.into_data(),
        0.0,
    );
    let reference = rearrange_grad::<AdFlex>(&flex(), &perm, cols, false);
    assert_close(
        "token_rearrange dx against burn-flex",
        got,
        reference.clone(),
        0.0,
    );
    let default = rearrange_grad::<AdFlex>(&flex(), &perm, cols, true);
    assert_close(
        "token_rearrange dx, default on burn-flex",
        default,
        reference,
        0.0,
    );
}

/// `[y, dx, dgamma, dbeta]` of `sum(layer_norm(x, gamma, beta) * g)` (absent parameters give
/// empty gradients), fused or composed from standard ops.
fn layer_norm_grads<B: AutodiffBackend + FusedOps>(
    d: &B::Device,
    (m, n): (usize, usize),
    (with_gamma, with_beta): (bool, bool),
    fused: bool,
) -> Vec<TensorData> {
    let (f32, eps) = (DType::F32, 1e-6);
    let x = float::<B, 2>(&host_values(vec![m, n], 1), f32, d).require_grad();
    let gamma = float::<B, 1>(&host_values(vec![n], 2), f32, d).require_grad();
    let beta = float::<B, 1>(&host_values(vec![n], 3), f32, d).require_grad();
    let y = if fused {
        fused::layer_norm(
            x.clone(),
            with_gamma.then(|| gamma.clone()),
            with_beta.then(|| beta.clone()),
            eps,
        )
        .0
    } else {
        let centred = x.clone() - x.clone().mean_dim(1);
        let var = centred.clone().powi_scalar(2).mean_dim(1);
        let mut y = centred / (var + eps).sqrt();
        if with_gamma {
            y = y * gamma.clone().unsqueeze();
        }
        if with_beta {
            y = y + beta.clone().unsqueeze();
        }
        y
    };
    let grads = (y.clone() * float::<B, 2>(&host_values(vec![m, n], 4), f32, d))
        .sum()
        .backward();
    let grad = |t: &Tensor<B, 1>, given: bool| {
        if given {
            t.grad(&grads).unwrap().into_data()
        } else {
            TensorData::new(Vec::<f32>::new(), [0])
        }
    };
    vec![
        y.into_data(),
        x.grad(&grads).unwrap().into_data(),
        grad(&gamma, with_gamma),
        grad(&beta, with_beta),
    ]
}

// Serial with the kernel test below, which reads the launch log.
#[test]
#[serial]
fn layer_norm_gradients_match_the_backward_and_flex() {
    for shape in [(256usize, 128usize), (5, 100), (3, 1536)] {
        for params in [(true, true), (true, false), (false, true), (false, false)] {
            let what = format!("layer_norm {shape:?} gamma/beta {params:?}");
            let got = layer_norm_grads::<AdAscend>(&ascend(), shape, params, true);
            let reference = layer_norm_grads::<AdFlex>(&flex(), shape, params, false);
            let default = layer_norm_grads::<AdFlex>(&flex(), shape, params, true);
            for (i, name) in ["y", "dx", "dgamma", "dbeta"].iter().enumerate() {
                let tol = if i == 0 { 1e-4 } else { 2e-4 };
                assert_close(
                    &format!("{what}: {name} against burn-flex"),
                    got[i].clone(),
                    reference[i].clone(),
                    tol,
                );
                assert_close(
                    &format!("{what}: {name}, default on burn-flex"),
                    default[i].clone(),
                    reference[i].clone(),
                    tol,
                );
            }

            // The same gradients from `layer_norm_backward`, called directly on the device.
            let (d, (m, n)) = (ascend(), shape);
            let x = float::<Ascend, 2>(&host_values(vec![m, n], 1), DType::F32, &d);
            let gamma = params
                .0
                .then(|| float::<Ascend, 1>(&host_values(vec![n], 2), DType::F32, &d));
            let beta = params
                .1
                .then(|| float::<Ascend, 1>(&host_values(vec![n], 3), DType::F32, &d));
            let (_, mean, rstd) = fused::layer_norm(x.clone(), gamma.clone(), beta, 1e-6);
            let dy = float::<Ascend, 2>(&host_values(vec![m, n], 4), DType::F32, &d);
            let (dx, dgamma, dbeta) = fused::layer_norm_backward(dy, x, mean, rstd, gamma);
            assert_close(
                &format!("{what}: dx = layer_norm_backward"),
                got[1].clone(),
                dx.into_data(),
                1e-6,
            );
            // dgamma and dbeta are atomic sums of the blocks' partial sums, added in whatever
            // order the blocks finish (on the NPU as in the emulation): two launches agree to the
            // f32 rounding of that sum, not bit for bit.
            let atomic_tol = 1e-5;
            if params.0 {
                assert_close(
                    &format!("{what}: dgamma = layer_norm_backward"),
                    got[2].clone(),
                    dgamma.into_data(),
                    atomic_tol,
                );
            }
            if params.1 {
                assert_close(
                    &format!("{what}: dbeta = layer_norm_backward"),
                    got[3].clone(),
                    dbeta.into_data(),
                    atomic_tol,
                );
            }
        }
    }
}

/// `[out, dx, dw]` of `sum(grouped_matmul(x, w, sizes) * g)`, fused or as per-group slices and
/// matmuls (the sizes known on the host).
fn grouped_grads<B: AutodiffBackend + FusedOps>(
    d: &B::Device,
    (rows, k, n, sizes): &(usize, usize, usize, Vec<usize>),
    dtype: DType,
    fused: bool,
) -> Vec<TensorData> {
    let (rows, k, n, groups) = (*rows, *k, *n, sizes.len());
    let x = float::<B, 2>(&host_values(vec![rows, k], 1), dtype, d).require_grad();
    let w = float::<B, 3>(&host_values(vec![groups, k, n], 2), dtype, d).require_grad();
    let out = if fused {
        fused::grouped_matmul(x.clone(), w.clone(), ints(&sizes_i32(sizes), [groups], d))
    } else {
        let mut parts = Vec::new();
        let mut start = 0;
        for (e, &size) in sizes.iter().enumerate().filter(|(_, &s)| s > 0) {
            let w_e = w.clone().slice(s![e..e + 1, .., ..]).reshape([k, n]);
            parts.push(x.clone().slice(s![start..start + size, ..]).matmul(w_e));
            start += size;
        }
        if start < rows {
            parts.push(Tensor::zeros([rows - start, n], (d, dtype)));
        }
        Tensor::cat(parts, 0)
    };
    let grads = (out.clone() * float::<B, 2>(&host_values(vec![rows, n], 3), dtype, d))
        .sum()
        .backward();
    vec![
        out.into_data(),
        x.grad(&grads).unwrap().into_data(),
        w.grad(&grads).unwrap().into_data(),
    ]
}

#[test]
fn grouped_matmul_gradients_match_flex() {
    for case in grouped_cases() {
        for dtype in [DType::F32, DType::F16] {
            let what = format!("grouped_matmul {case:?} {dtype:?}");
            let got = grouped_grads::<AdAscend>(&ascend(), &case, dtype, true);
            let reference = grouped_grads::<AdFlex>(&flex(), &case, dtype, false);
            let default = grouped_grads::<AdFlex>(&flex(), &case, dtype, true);
            // Each gradient element sums over up to max(K, N, R) products.
            let tol = tolerance(dtype) * (case.0.max(case.1).max(case.2) as f64).sqrt();
            for (i, name) in ["out", "dx", "dw"].iter().enumerate() {
                assert_close(
                    &format!("{what}: {name} against burn-flex"),
                    got[i].clone(),
                    reference[i].clone(),
                    tol,
                );
                assert_close(
                    &format!("{what}: {name}, default on burn-flex"),
                    default[i].clone(),
                    reference[i].clone(),
                    tol,
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The layer_norm_backward kernel
// ---------------------------------------------------------------------------------------------

#[test]
#[serial]
fn layer_norm_backward_kernel_matches_the_default() {
    if common::skipped_on_npu("layer_norm_backward_kernel_matches_the_default") {
        return;
    }
    let cases = [
        (256usize, 128usize),
        (1, 1536),
        (7, 4096),
        (3, 8192),
        (5, 100),
        (2, 100_000),
        (20_000, 8),
    ];
    for (m, n) in cases {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for with_gamma in [true, false] {
                let what = format!("layer_norm_backward {m}x{n} {dtype:?} gamma {with_gamma}");
                let (x, dy, gamma) = (
                    host_values(vec![m, n], 1),
                    host_values(vec![m, n], 2),
                    host_values(vec![n], 3),
                );
                // The same statistics on both sides: the reference's forward.
                let (_, mean, rstd) = fused::layer_norm(
                    float::<Flex, 2>(&x, dtype, &flex()),
                    with_gamma.then(|| float(&gamma, dtype, &flex())),
                    None,
                    1e-6,
                );
                let (mean, rstd) = (mean.into_data(), rstd.into_data());
                fn run<B: FusedOps>(
                    d: &B::Device,
                    dtype: DType,
                    (dy, x, gamma): (&TensorData, &TensorData, Option<&TensorData>),
                    (mean, rstd): (&TensorData, &TensorData),
                ) -> [TensorData; 3] {
                    let (dx, dgamma, dbeta) = fused::layer_norm_backward(
                        float::<B, 2>(dy, dtype, d),
                        float(x, dtype, d),
                        float(mean, DType::F32, d),
                        float(rstd, DType::F32, d),
                        gamma.map(|g| float(g, dtype, d)),
                    );
                    [dx.into_data(), dgamma.into_data(), dbeta.into_data()]
                }
                let inputs = (&dy, &x, with_gamma.then_some(&gamma));
                let got = run::<Ascend>(&ascend(), dtype, inputs, (&mean, &rstd));
                let want = run::<Flex>(&flex(), dtype, inputs, (&mean, &rstd));
                let tol = if dtype == DType::F32 {
                    1e-4
                } else {
                    tolerance(dtype) * 2.0
                };
                for (i, name) in ["dx", "dgamma", "dbeta"].iter().enumerate() {
                    assert_eq!(got[i].dtype, want[i].dtype, "{what}: {name} dtype");
                    assert_close(
                        &format!("{what}: {name}"),
                        got[i].clone(),
                        want[i].clone(),
                        tol,
                    );
                }
            }
        }
    }

    // Global-memory traffic at the seed size against the minimum: dy and x read, dx written, the
    // statistics and gamma read, dgamma and dbeta written.
    let (m, n) = (256usize, 128usize);
    let d = ascend();
    clear_launch_log();
    let f32 = DType::F32;
    let _ = fused::layer_norm_backward(
        float::<Ascend, 2>(&host_values(vec![m, n], 2), f32, &d),
        float(&host_values(vec![m, n], 1), f32, &d),
        float(&host_values(vec![m], 4), f32, &d),
        float(&host_values(vec![m], 5), f32, &d),
        Some(float(&host_values(vec![n], 3), f32, &d)),
    )
    .0
    .into_data();
    let stats = launch_log()
        .into_iter()
        .rev()
        .find(|s| s.kernel == "layer_norm_backward")
        .expect("a layer_norm_backward launch");
    // Each block reads gamma and adds its own column sums into dgamma and dbeta: the tiling
    // spreads short rows over more blocks when the device model says the cores' GM rate gains
    // more than those per-block bytes cost, so the bound allows them once per block.
    assert!(
        stats.block_dim > 7,
        "256 short rows use more cores than 40-row blocks: {stats:?}"
    );
    let minimum = ((3 * m * n + 2 * m + stats.block_dim as usize * 3 * n) * 4) as f64;
    let moved = (stats.gm_bytes_read + stats.gm_bytes_written) as f64;
    assert!(
        moved <= 1.05 * minimum,
        "layer_norm_backward moved {moved} bytes, minimum {minimum}: {stats:?}"
    );
}

/// A routing's tokens grouped by expert in one aclnnMoeInitRoutingV2 (and its counts cast to
/// int64), weighted back in one aclnnMoeTokenUnpermute: equal to burn-flex's composition in
/// every float type, ties between a token's choices and empty experts included.
#[test]
#[serial]
fn moe_permute_and_unpermute_are_one_launch_each_and_match_the_composition() {
    use burn_ascend::emulator::aclnn_launches_of;
    let (t, h, k, e) = (7, 48, 3, 6);
    // Token-major choices; expert 4 is never chosen, expert 1 by most tokens.
    let ids = [
        1, 3, 0, 1, 5, 2, 3, 1, 0, 1, 2, 5, 0, 1, 3, 5, 1, 2, 1, 0, 3,
    ];
    let flex_ids = || ints::<Flex, 1>(&ids, [t * k], &flex());
    let npu_ids = || ints::<Ascend, 1>(&ids, [t * k], &ascend());
    let x = host_values(vec![t, h], 81);
    let w = host_values(vec![t * k], 82);
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let case = format!("{dtype:?}");
        let want = fused::moe_permute(float::<Flex, 2>(&x, dtype, &flex()), flex_ids(), k, e);
        let before = aclnn_launches_of("aclnnMoeInitRoutingV2");
        let got = fused::moe_permute(float::<Ascend, 2>(&x, dtype, &ascend()), npu_ids(), k, e);
        assert_eq!(
            aclnn_launches_of("aclnnMoeInitRoutingV2") - before,
            1,
            "{case}"
        );
        assert_eq!(
            got.group_sizes.dtype(),
            DType::I64,
            "{case}: the group list type"
        );
        assert_eq!(got.row_idx.dtype(), DType::I32, "{case}");
        assert_eq!(
            to_i64(got.group_sizes.into_data()),
            to_i64(want.group_sizes.into_data()),
            "{case}: rows per expert"
        );
        assert_eq!(
            to_i64(got.row_idx.clone().into_data()),
            to_i64(want.row_idx.clone().into_data()),
            "{case}: each slot's row (a stable sort)"
        );
        // A gather: bit-equal.
        assert_close(
            &case,
            got.rows.clone().into_data(),
            want.rows.clone().into_data(),
            0.0,
        );

        let before = aclnn_launches_of("aclnnMoeTokenUnpermute");
        let out = fused::moe_unpermute(
            got.rows.clone(),
            got.row_idx.clone(),
            float::<Ascend, 1>(&w, dtype, &ascend()),
            k,
            None,
        );
        assert_eq!(
            aclnn_launches_of("aclnnMoeTokenUnpermute") - before,
            1,
            "{case}"
        );
        let reference = fused::moe_unpermute(
            want.rows.clone(),
            want.row_idx.clone(),
            float::<Flex, 1>(&w, dtype, &flex()),
            k,
            None,
        );
        assert_eq!(out.dims(), [t, h]);
        assert_close(
            &case,
            out.into_data(),
            reference.into_data(),
            tolerance(dtype),
        );

        // With an addend (a shared expert's output): one aclnnMoeFinalizeRoutingV2 and nothing
        // else, summed in f32 with the routed rows as the composition does.
        let add = host_values(vec![t, h], 83);
        let (before, finalize) = (
            burn_ascend::emulator::work_counters(),
            aclnn_launches_of("aclnnMoeFinalizeRoutingV2"),
        );
        let out = fused::moe_unpermute(
            got.rows,
            got.row_idx,
            float::<Ascend, 1>(&w, dtype, &ascend()),
            k,
            Some(float::<Ascend, 2>(&add, dtype, &ascend())),
        );
        Ascend::sync(&ascend()).unwrap();
        assert_eq!(
            (
                aclnn_launches_of("aclnnMoeFinalizeRoutingV2") - finalize,
                burn_ascend::emulator::work_counters()
                    .since(&before)
                    .launches()
            ),
            (1, 1),
            "{case}: one launch with the addend"
        );
        let reference = fused::moe_unpermute(
            want.rows,
            want.row_idx,
            float::<Flex, 1>(&w, dtype, &flex()),
            k,
            Some(float::<Flex, 2>(&add, dtype, &flex())),
        );
        assert_close(
            &format!("{case} plus an addend"),
            out.into_data(),
            reference.into_data(),
            tolerance(dtype),
        );
    }
}

/// aclnnMoeFinalizeRoutingV2 on `[N*K, H]` expanded rows (row-major and column-major row
/// indices), two residuals and a per-expert bias equals the formula on the host; what it
/// refuses, it refuses with the status CANN gives, and a row index past the rows is an AI Core
/// error.
#[test]
#[serial]
fn emulated_finalize_routing_computes_and_checks_what_the_operator_does() {
    if common::skipped_on_npu(
        "emulated_finalize_routing_computes_and_checks_what_the_operator_does",
    ) {
        return;
    }
    let (n, k, h, e) = (3usize, 2usize, 5usize, 4usize);
    let d = ascend();
    let f32s = |shape: Vec<usize>, seed| {
        primitive(float::<Ascend, 2>(
            &host_values(shape, seed),
            DType::F32,
            &d,
        ))
    };
    let expanded = f32s(vec![n * k, h], 1);
    let (x1, x2, bias, scales) = (
        f32s(vec![n, h], 2),
        f32s(vec![n, h], 3),
        f32s(vec![e, h], 4),
        f32s(vec![n, k], 5),
    );
    let rows: Vec<i32> = vec![4, 0, 5, 2, 1, 3];
    let experts: Vec<i32> = vec![3, 0, 1, 1, 2, 0];
    let row_idx = ints::<Ascend, 1>(&rows, [n * k], &d).into_primitive();
    let expert_idx = ints::<Ascend, 2>(&experts, [n, k], &d).into_primitive();
    let finalize = |row_idx: &AscendTensor,
                    x1: Option<&AscendTensor>,
                    x2: Option<&AscendTensor>,
                    scales: &AscendTensor,
                    mode: i64|
     -> Result<AscendTensor, AclError> {
        let out = AscendTensor::empty(expanded.ctx(), vec![n, h], scales.dtype())?;
        let opt = |t: Option<&AscendTensor>| t.map(AscendTensor::desc).transpose();
        let (x1, x2) = (opt(x1)?, opt(x2)?);
        aclnn!(
            &**expanded.ctx(),
            aclnnMoeFinalizeRoutingV2(
                expanded.desc()?,
                row_idx.desc()?,
                &x1,
                &x2,
                bias.desc()?,
                scales.desc()?,
                expert_idx.desc()?,
                mode,
                out.desc()?
            )
        )?;
        Ok(out)
    };
    let values = |t: &AscendTensor| to_f64(tensor::<2>(t.clone()).into_data());
    let (xv, b, s) = (values(&expanded), values(&bias), values(&scales));
    let (r1, r2) = (values(&x1), values(&x2));
    for (mode, slot) in [
        (2i64, (|i, kk| i * 2 + kk) as fn(usize, usize) -> usize),
        (0, |i, kk| i + kk * 3),
    ] {
        let got = finalize(&row_idx, Some(&x1), Some(&x2), &scales, mode).unwrap();
        let mut want = vec![0.0; n * h];
        for i in 0..n {
            for j in 0..h {
                let mut v = r1[i * h + j] + r2[i * h + j];
                for kk in 0..k {
                    let row = rows[slot(i, kk)] as usize;
                    let expert = experts[i * k + kk] as usize;
                    v += s[i * k + kk] * (xv[row * h + j] + b[expert * h + j]);
                }
                want[i * h + j] = v;
            }
        }
        assert_close(
            &format!("dropPadMode {mode}"),
            tensor::<2>(got).into_data(),
            TensorData::new(want, [n, h]),
            1e-5,
        );
    }
    let status = |r: Result<AscendTensor, AclError>, code: i32, why: &str| {
        let e = r.err().unwrap_or_else(|| panic!("{why} should fail"));
        assert_eq!(e.code(), Some(code), "{why}: {e}");
    };
    status(
        finalize(&row_idx, None, Some(&x2), &scales, 2),
        ACLNN_ERR_PARAM_INVALID,
        "x2 without x1",
    );
    status(
        finalize(&row_idx, Some(&x1), None, &scales, 1),
        ACLNN_ERR_PARAM_INVALID,
        "a drop/pad mode",
    );
    let half = primitive(tensor::<2>(scales.clone()).cast(DType::F16));
    status(
        finalize(&row_idx, Some(&x1), None, &half, 2),
        ACLNN_ERR_PARAM_INVALID,
        "scales of another type",
    );
    // A row index past the rows faults the device: on a device of its own, reset after.
    common::reset_fault_device();
    let fd = common::fault_device();
    let on = |t: &AscendTensor| {
        primitive(float::<Ascend, 2>(
            &tensor::<2>(t.clone()).into_data(),
            DType::F32,
            &fd,
        ))
    };
    let (fx, fs) = (on(&expanded), on(&scales));
    let bad = ints::<Ascend, 1>(&[4, 0, 6, 2, 1, 3], [n * k], &fd).into_primitive();
    let out = AscendTensor::empty(fx.ctx(), vec![n, h], DataType::F32).unwrap();
    aclnn!(
        &**fx.ctx(),
        aclnnMoeFinalizeRoutingV2(
            fx.desc().unwrap(),
            bad.desc().unwrap(),
            Absent,
            Absent,
            Absent,
            fs.desc().unwrap(),
            Absent,
            2,
            out.desc().unwrap()
        )
    )
    .unwrap();
    let err = tensor::<2>(out)
        .try_into_data()
        .expect_err("a row past the rows faults");
    common::reset_fault_device();
    let err = format!("{err:?}");
    assert!(
        err.contains("expandedRowIdx[2] = 6 is outside [0, 6)"),
        "{err}"
    );
}

/// Operands that disagree are refused at the call, naming the op and the shapes.
#[test]
#[serial]
fn moe_permute_and_unpermute_refuse_operands_that_disagree_naming_the_shapes() {
    let x = Tensor::<Ascend, 2>::zeros([4, 16], &ascend());
    let ids = ints::<Ascend, 1>(&[0, 1, 2, 3, 0, 1, 2], [7], &ascend());
    let message = panic_message(|| fused::moe_permute(x, ids, 2, 4));
    assert!(
        message.contains("moe_permute") && message.contains("[4, 16]") && message.contains("[7]"),
        "{message}"
    );
    let rows = Tensor::<Ascend, 2>::zeros([8, 16], &ascend());
    let idx = ints::<Ascend, 1>(&[0, 1, 2, 3, 4, 5, 6, 7], [8], &ascend());
    let w = Tensor::<Ascend, 1>::zeros([6], &ascend());
    let message = panic_message(|| fused::moe_unpermute(rows, idx, w, 2, None));
    assert!(
        message.contains("moe_unpermute") && message.contains("[8]") && message.contains("[6]"),
        "{message}"
    );
}

/// Where the groups cover every row, the grouped matmul skips its output's zero fill and
/// gives the same result to the bit.
#[test]
#[serial]
fn a_covered_grouped_matmul_skips_the_fill_and_equals_the_plain_one() {
    use burn_ascend::emulator::aclnn_launches_of;
    let (e, kk, n) = (4, 32, 24);
    let sizes = [3, 0, 5, 2];
    let rows: i32 = sizes.iter().sum();
    let x = host_values(vec![rows as usize, kk], 91);
    let w = host_values(vec![e, kk, n], 92);
    let d = ascend();
    let run = |covered: bool| {
        let (x, w) = (
            float::<Ascend, 2>(&x, DType::BF16, &d),
            float::<Ascend, 3>(&w, DType::BF16, &d),
        );
        let sizes = ints::<Ascend, 1>(&sizes, [e], &d).cast(DType::I64);
        let zeros = aclnn_launches_of("aclnnInplaceZero");
        let y = match covered {
            true => fused::grouped_matmul_covered(x, w, sizes),
            false => fused::grouped_matmul(x, w, sizes),
        };
        (y.into_data(), aclnn_launches_of("aclnnInplaceZero") - zeros)
    };
    let (plain, plain_fills) = run(false);
    let (covered, covered_fills) = run(true);
    assert_eq!((plain_fills, covered_fills), (1, 0));
    assert_close("covered", covered, plain, 0.0);
}

/// What `grouped_matmul_covered` relies on (the sizes adding up to the rows exactly), checked
/// on the device: the check the backend runs under `BURN_ASCEND_VALIDATE=1` refuses a smaller
/// total, naming it.
#[test]
#[serial]
fn the_covered_grouped_matmuls_check_refuses_sizes_short_of_the_rows() {
    let d = ascend();
    let x = primitive(Tensor::<Ascend, 2>::zeros([10, 32], (&d, DType::BF16)));
    let w = primitive(Tensor::<Ascend, 3>::zeros([4, 32, 24], (&d, DType::BF16)));
    let sizes = |v: &[i32]| {
        ints::<Ascend, 1>(v, [4], &d)
            .cast(DType::I64)
            .into_primitive()
            .into_inner()
    };
    device::preflight::grouped_matmul_covered(&x, &w, &sizes(&[3, 0, 5, 2]))
        .expect("sizes adding up to the rows pass");
    let err = device::preflight::grouped_matmul_covered(&x, &w, &sizes(&[3, 0, 5, 1]))
        .expect_err("9 of 10 rows");
    let message = err.to_string();
    assert!(
        message.contains("grouped_matmul_covered")
            && message.contains("add up to exactly 10")
            && message.contains("[10, 32]"),
        "{message}"
    );
}
