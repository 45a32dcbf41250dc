//! The quantised MoE expert path (issue 24) on the emulated NPU: aclnnMoeInitRoutingQuantV2
//! (`fused::moe_gather_quant`) and aclnnGroupedMatmulV4's A8W8 and A16W8 forms
//! (`fused::grouped_matmul_quant`, `fused::grouped_matmul_antiquant`) against the same integer
//! math composed of Burn ops on burn-flex; the refusals of the emulated operators, called
//! directly; and the quantised expert pipeline against the float one and against itself on
//! burn-flex.

mod common;

use common::panic_message;

use burn::tensor::activation::softmax;
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Int, Tensor, TensorData};
use burn_ascend::acl::aclnn;
use burn_ascend::acl::handles::{Absent, TensorListDesc};
use burn_ascend::acl::types::status::*;
use burn_ascend::acl::AclError;
use burn_ascend::emulator::work_counters;
use burn_ascend::ops::AscendTensor;
use burn_ascend::{fused, Ascend, AscendDevice};
use burn_ascend_llm::families::blocks::quant::Quantize;
use burn_ascend_llm::moe::model::{
    gate_up, routed_experts, routed_experts_quantized, QuantizedExperts, Routing,
};
use burn_ascend_suite::host_values::host_values;
use burn_flex::{Flex, FlexDevice};
use serial_test::serial;

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
    dtype: DType,
    d: &B::Device,
) -> Tensor<B, D, Int> {
    Tensor::from_data(
        TensorData::new(v.to_vec(), shape).convert_dtype(dtype),
        (d, dtype),
    )
}

/// Deterministic int8 values over the whole range.
fn int8s(n: usize, seed: u64) -> Vec<i32> {
    (0..n as u64)
        .map(|i| {
            let h = i.wrapping_mul(6364136223846793005) ^ seed.wrapping_mul(1442695040888963407);
            ((h >> 29) % 256) as i32 - 128
        })
        .collect()
}

fn to_f64(d: TensorData) -> Vec<f64> {
    d.convert::<f64>().to_vec::<f64>().unwrap()
}

fn to_i64(d: TensorData) -> Vec<i64> {
    d.convert::<i64>().to_vec::<i64>().unwrap()
}

/// The distance in units in the last place of `dtype` between two values of that dtype.
fn ulps(a: f64, b: f64, dtype: DType) -> u64 {
    let key = |v: f64| -> i64 {
        let bits = match dtype {
            DType::F32 => (v as f32).to_bits() as i64,
            DType::F16 => half::f16::from_f64(v).to_bits() as i64,
            DType::BF16 => half::bf16::from_f64(v).to_bits() as i64,
            other => panic!("no ulps for {other:?}"),
        };
        let sign = match dtype {
            DType::F32 => 1i64 << 31,
            _ => 1i64 << 15,
        };
        if bits & sign != 0 {
            -(bits & (sign - 1))
        } else {
            bits
        }
    };
    key(a).abs_diff(key(b))
}

fn assert_ulps(what: &str, got: TensorData, want: TensorData, dtype: DType, max: u64) {
    assert_eq!(got.shape, want.shape, "{what}: shape");
    for (i, (a, b)) in to_f64(got).iter().zip(&to_f64(want)).enumerate() {
        assert!(
            ulps(*a, *b, dtype) <= max,
            "{what}: element {i} is {a}, the reference gives {b}"
        );
    }
}

/// Token-major expert ids `[T*K]`, distinct per token, leaving expert `E - 1` without rows.
fn expert_ids(tokens: usize, top_k: usize, experts: usize) -> Vec<i32> {
    (0..tokens)
        .flat_map(|t| {
            let base = (t * 7 + t / 3) % (experts - 1);
            (0..top_k).map(move |k| ((base + k * 2) % (experts - 1)) as i32)
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// moe_gather_quant (aclnnMoeInitRoutingQuantV2)
// ---------------------------------------------------------------------------------------------

#[test]
#[serial]
fn moe_gather_quant_equals_the_composed_default_on_flex() {
    let (t, h, k, e) = (9, 24, 2, 5);
    let ids = expert_ids(t, k, e);
    let mut x = host_values(vec![t, h], 11).to_vec::<f32>().unwrap();
    // An all-zero token: scale 0, values 0.
    x[3 * h..4 * h].fill(0.0);
    let x = TensorData::new(x, [t, h]);
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let on_npu = fused::moe_gather_quant(
            float::<Ascend, 2>(&x, dtype, &ascend()),
            ints(&ids, [t * k], DType::I32, &ascend()),
            k,
            e,
        );
        let reference = fused::moe_gather_quant(
            float::<Flex, 2>(&x, dtype, &flex()),
            ints(&ids, [t * k], DType::I64, &flex()),
            k,
            e,
        );
        let what = |p: &str| format!("{dtype:?} {p}");
        assert_eq!(on_npu.rows.dtype(), DType::I8, "{}", what("rows dtype"));
        let (rows, scales) = (on_npu.rows.into_data(), on_npu.scales.into_data());
        assert_eq!(
            to_i64(rows.clone()),
            to_i64(reference.rows.into_data()),
            "{}",
            what("rows")
        );
        assert_ulps(
            &what("scales"),
            scales.clone(),
            reference.scales.into_data(),
            DType::F32,
            1,
        );
        assert_eq!(
            to_i64(on_npu.row_idx.into_data()),
            to_i64(reference.row_idx.into_data()),
            "{}",
            what("row index")
        );
        let sizes = to_i64(on_npu.group_sizes.into_data());
        assert_eq!(sizes, to_i64(reference.group_sizes.into_data()));
        assert_eq!(sizes[e - 1], 0, "the last expert has no rows");
        assert_eq!(sizes.iter().sum::<i64>(), (t * k) as i64);

        // Independently of the composition: every row dequantises to its token within half a
        // step, and the all-zero token's rows are zero with scale 0.
        let (rows, scales) = (to_i64(rows), to_f64(scales));
        let xs = to_f64(x.clone().convert_dtype(dtype));
        let mut order: Vec<usize> = (0..t * k).collect();
        order.sort_by_key(|&s| ids[s]);
        for (r, &slot) in order.iter().enumerate() {
            let token = slot / k;
            for j in 0..h {
                let (q, v) = (rows[r * h + j] as f64, xs[token * h + j]);
                assert!(q.abs() <= 127.0);
                assert!(
                    (q * scales[r] - v).abs() <= scales[r] * 0.5 * (1.0 + 1e-5),
                    "{}: row {r} col {j}: {q} * {} vs {v}",
                    what("dequantised"),
                    scales[r]
                );
            }
            if token == 3 {
                assert_eq!(scales[r], 0.0);
            }
        }
    }
}

#[test]
#[serial]
fn moe_gather_quant_is_one_operator_reading_the_tokens_once() {
    let (t, h, k, e) = (16, 64, 4, 8);
    let ids = expert_ids(t, k, e);
    let d = ascend();
    let x = float::<Ascend, 2>(&host_values(vec![t, h], 3), DType::BF16, &d);
    let ids = ints(&ids, [t * k], DType::I32, &d);
    let _ = Ascend::sync(&d);
    let before = work_counters();
    let r = fused::moe_gather_quant(x, ids, k, e);
    let _ = r.rows.into_data();
    let work = work_counters().since(&before);
    // The counts' zero fill, then aclnnMoeInitRoutingQuantV2; no kernel, no separate quantise.
    assert_eq!(work.kernel_launches, 0, "{work:?}");
    assert_eq!(work.aclnn_launches, 2, "{work:?}");
    // Tokens read once (bf16); ids read, int8 rows, scales, row index and counts written once
    // each; the counts' zero fill.
    let minimum = t * h * 2 + t * k * h + t * k * (4 + 4 + 4) + e * 4;
    assert!(
        work.aclnn_bytes as usize <= minimum + e * 4,
        "moved {} bytes, minimum {minimum}: {work:?}",
        work.aclnn_bytes
    );
}

// ---------------------------------------------------------------------------------------------
// grouped_matmul_quant (A8W8) and grouped_matmul_antiquant (A16W8)
// ---------------------------------------------------------------------------------------------

struct Case {
    m: usize,
    k: usize,
    n: usize,
    sizes: Vec<i32>,
}

fn cases() -> Vec<Case> {
    vec![
        // Uneven groups, an empty expert and two rows past the groups.
        Case {
            m: 12,
            k: 40,
            n: 6,
            sizes: vec![3, 0, 5, 2],
        },
        // K long enough that the int32 sums pass 2^24 (an f32 accumulator would round).
        Case {
            m: 3,
            k: 1100,
            n: 5,
            sizes: vec![1, 2],
        },
    ]
}

#[test]
#[serial]
fn grouped_matmul_quant_equals_the_integer_math_on_flex() {
    for (c, case) in cases().into_iter().enumerate() {
        let e = case.sizes.len();
        let (m, k, n) = (case.m, case.k, case.n);
        let mut xq = int8s(m * k, 1 + c as u64);
        let mut wq = int8s(e * k * n, 2 + c as u64);
        if c == 1 {
            // Row 0 and column 0 of expert 0 at the extreme: a sum of 1100 * 127^2.
            xq[..k].fill(127);
            (0..k).for_each(|kk| wq[kk * n] = 127);
        }
        let w_scale = host_values(vec![e, n], 5 + c as u64)
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| (v.abs() + 0.5) * 1e-4)
            .collect::<Vec<f32>>();
        let w_scale = TensorData::new(w_scale, [e, n]);
        let x_scale = TensorData::new(
            (0..m).map(|i| 0.01 + i as f32 * 1e-3).collect::<Vec<f32>>(),
            [m],
        );
        for out in [DType::BF16, DType::F16] {
            for with_x_scale in [true, false] {
                let run = |b: bool| -> (TensorData, TensorData) {
                    let a = fused::grouped_matmul_quant(
                        ints::<Ascend, 2>(&xq, [m, k], DType::I8, &ascend()),
                        ints(&wq, [e, k, n], DType::I8, &ascend()),
                        float(&w_scale, DType::F32, &ascend()),
                        b.then(|| float(&x_scale, DType::F32, &ascend())),
                        ints(&case.sizes, [e], DType::I32, &ascend()),
                        out,
                    );
                    let f = fused::grouped_matmul_quant(
                        ints::<Flex, 2>(&xq, [m, k], DType::I8, &flex()),
                        ints(&wq, [e, k, n], DType::I8, &flex()),
                        float(&w_scale, DType::F32, &flex()),
                        b.then(|| float(&x_scale, DType::F32, &flex())),
                        ints(&case.sizes, [e], DType::I64, &flex()),
                        out,
                    );
                    assert_eq!(a.dtype(), out);
                    (a.into_data(), f.into_data())
                };
                let (got, want) = run(with_x_scale);
                let what = format!("case {c}, {out:?} out, x_scale {with_x_scale}");
                // The same f32 products rounded once: bit-exact.
                assert_ulps(&what, got.clone(), want, out, 0);
                // Independently: the exact integer sum, scaled in f64, within the out type's
                // rounding (half an ulp, plus the f32 steps and the bf16 weight scale).
                let got = to_f64(got);
                let (ws, xs) = (to_f64(w_scale.clone()), to_f64(x_scale.clone()));
                let mut start = 0;
                for (g, &size) in case.sizes.iter().enumerate() {
                    for r in start..start + size as usize {
                        for j in 0..n {
                            let acc: i64 = (0..k)
                                .map(|kk| xq[r * k + kk] as i64 * wq[(g * k + kk) * n + j] as i64)
                                .sum();
                            let s = if out == DType::BF16 {
                                half::bf16::from_f64(ws[g * n + j]).to_f64()
                            } else {
                                ws[g * n + j]
                            };
                            let t = if with_x_scale { xs[r] } else { 1.0 };
                            let exact = acc as f64 * s * t;
                            let rel = if out == DType::BF16 {
                                2f64.powi(-8)
                            } else {
                                2f64.powi(-11)
                            };
                            assert!(
                                (got[r * n + j] - exact).abs() <= exact.abs() * rel * 1.01 + 1e-30,
                                "{what}: row {r} col {j}: {} vs exact {exact}",
                                got[r * n + j]
                            );
                        }
                    }
                    start += size as usize;
                }
                for (i, v) in got.iter().enumerate().skip(start * n) {
                    assert_eq!(*v, 0.0, "{what}: element {i} past the groups");
                }
            }
        }
    }
}

/// The device model's cube term for the expert products, group by group, whole fractals:
/// 16x32x16 per cycle in int8 (A8W8), 16x16x16 in bf16 (the float and the antiquant forms);
/// empty experts cost nothing (hardware-atlas-a2.md §4.1).
#[test]
#[serial]
fn the_cube_term_counts_each_expert_group_at_its_operand_rate() {
    let (k, n, sizes) = (96, 40, [20, 0, 12]);
    let (e, m) = (sizes.len(), sizes.iter().sum::<i32>() as usize);
    // Groups of 20 and 12 rows: 2 + 1 row fractals, 3 column fractals, k in 6 (half) or 3
    // (int8) steps.
    let (half, int8) = (3 * 3 * 6, 3 * 3 * 3);
    let cycles = |f: &dyn Fn() -> Tensor<Ascend, 2>| {
        let before = work_counters();
        f().into_data();
        work_counters().since(&before).aclnn_cube_cycles
    };
    let group_sizes = || ints::<Ascend, 1>(&sizes, [e], DType::I32, &ascend());
    let wq = || ints::<Ascend, 3>(&int8s(e * k * n, 3), [e, k, n], DType::I8, &ascend());
    let scale = TensorData::new(vec![1e-3f32; e * n], [e, n]);
    let x = host_values(vec![m, k], 4);
    let a8w8 = cycles(&|| {
        fused::grouped_matmul_quant(
            ints::<Ascend, 2>(&int8s(m * k, 5), [m, k], DType::I8, &ascend()),
            wq(),
            float(&scale, DType::F32, &ascend()),
            None,
            group_sizes(),
            DType::BF16,
        )
    });
    let a16w8 = cycles(&|| {
        fused::grouped_matmul_antiquant(
            float::<Ascend, 2>(&x, DType::BF16, &ascend()),
            wq(),
            float(&scale, DType::BF16, &ascend()),
            None,
            group_sizes(),
        )
    });
    let bf16 = cycles(&|| {
        fused::grouped_matmul(
            float::<Ascend, 2>(&x, DType::BF16, &ascend()),
            float(&host_values(vec![e, k, n], 6), DType::BF16, &ascend()),
            group_sizes(),
        )
    });
    assert_eq!((a8w8, a16w8, bf16), (int8, half, half));
}

/// The device model reads an expert's per-channel scales, like its weights, only when the
/// group list gives it rows: experts with no rows cost their group-list entries and nothing
/// more, in both quantised forms (a decode step touches a few experts of many).
#[test]
#[serial]
fn empty_experts_cost_no_weight_or_scale_bytes() {
    let (m, k, n) = (4, 64, 64);
    let bytes = |experts: usize, antiquant: bool| {
        let mut sizes = vec![0i32; experts];
        sizes[0] = m as i32;
        let d = ascend();
        let wq = ints::<Ascend, 3>(&int8s(experts * k * n, 3), [experts, k, n], DType::I8, &d);
        let scale = TensorData::new(vec![1e-3f32; experts * n], [experts, n]);
        let list = ints::<Ascend, 1>(&sizes, [experts], DType::I32, &d);
        let xq = ints::<Ascend, 2>(&int8s(m * k, 5), [m, k], DType::I8, &d);
        let x = float::<Ascend, 2>(&host_values(vec![m, k], 4), DType::BF16, &d);
        let scale_bf16 = float::<Ascend, 2>(&scale, DType::BF16, &d);
        let _ = Ascend::sync(&d);
        let before = work_counters();
        let out = if antiquant {
            fused::grouped_matmul_antiquant(x, wq, scale_bf16, None, list)
        } else {
            // The scales in the type the operator reads for a BF16 out (no cast per call).
            fused::grouped_matmul_quant(xq, wq, scale_bf16, None, list, DType::BF16)
        };
        let _ = out.into_data();
        work_counters().since(&before).aclnn_bytes
    };
    for antiquant in [false, true] {
        let (two, eight) = (bytes(2, antiquant), bytes(8, antiquant));
        // Six more empty experts: six more group-list entries (i32 in, at most i64 copies
        // written and read), against 6 * n * 4 bytes of their scales and 6 * k * n of weights.
        assert!(
            eight - two <= 6 * (4 + 8 + 8),
            "antiquant {antiquant}: six empty experts moved {} bytes",
            eight - two
        );
    }
}

#[test]
#[serial]
fn grouped_matmul_antiquant_equals_the_dequantised_math_on_flex() {
    let case = &cases()[0];
    let e = case.sizes.len();
    let (m, k, n) = (case.m, case.k, case.n);
    let wq = int8s(e * k * n, 9);
    let x = host_values(vec![m, k], 4);
    let scale = TensorData::new(
        host_values(vec![e, n], 6)
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| (v.abs() + 0.5) * 2e-3)
            .collect::<Vec<f32>>(),
        [e, n],
    );
    let offset = host_values(vec![e, n], 8);
    for dtype in [DType::F16, DType::BF16] {
        for with_offset in [false, true] {
            let a = fused::grouped_matmul_antiquant(
                float::<Ascend, 2>(&x, dtype, &ascend()),
                ints(&wq, [e, k, n], DType::I8, &ascend()),
                float(&scale, dtype, &ascend()),
                with_offset.then(|| float(&offset, dtype, &ascend())),
                ints(&case.sizes, [e], DType::I32, &ascend()),
            );
            assert_eq!(a.dtype(), dtype);
            // The reference dequantises on flex in x's type, then multiplies in f32.
            let fx = float::<Flex, 2>(&x, dtype, &flex());
            let mut w = ints::<Flex, 3>(&wq, [e, k, n], DType::I8, &flex())
                .float()
                .cast(dtype);
            if with_offset {
                w = w + float::<Flex, 2>(&offset, dtype, &flex()).unsqueeze_dim(1);
            }
            let w =
                (w * float::<Flex, 2>(&scale, dtype, &flex()).unsqueeze_dim(1)).cast(DType::F32);
            let want = fused::grouped_matmul(
                fx.cast(DType::F32),
                w,
                ints(&case.sizes, [e], DType::I64, &flex()),
            )
            .cast(dtype);
            // f32 sums in another order may round to the neighbouring value.
            assert_ulps(
                &format!("{dtype:?}, offset {with_offset}"),
                a.into_data(),
                want.into_data(),
                dtype,
                1,
            );
            let composed = fused::grouped_matmul_antiquant(
                float::<Flex, 2>(&x, dtype, &flex()),
                ints(&wq, [e, k, n], DType::I8, &flex()),
                float(&scale, dtype, &flex()),
                with_offset.then(|| float(&offset, dtype, &flex())),
                ints(&case.sizes, [e], DType::I64, &flex()),
            );
            assert_eq!(composed.dtype(), dtype);
        }
    }
}

#[test]
#[serial]
fn quantised_expert_ops_refuse_what_their_contracts_exclude() {
    let d = ascend();
    let (m, k, n, e) = (4, 8, 3, 2);
    let x = || ints::<Ascend, 2>(&int8s(m * k, 1), [m, k], DType::I8, &d);
    let w = || ints::<Ascend, 3>(&int8s(e * k * n, 2), [e, k, n], DType::I8, &d);
    let sizes = || ints::<Ascend, 1>(&[2, 2], [e], DType::I32, &d);
    let scale = |dtype| float::<Ascend, 2>(&host_values(vec![e, n], 3), dtype, &d);
    let text = panic_message(|| {
        fused::grouped_matmul_quant(x(), w(), scale(DType::F32), None, sizes(), DType::F32)
    });
    assert!(
        text.contains("grouped_matmul_quant") && text.contains("F16 or BF16 out"),
        "{text}"
    );
    let text = panic_message(|| {
        fused::grouped_matmul_quant(x(), w(), scale(DType::F16), None, sizes(), DType::BF16)
    });
    assert!(text.contains("f32 or bf16 w_scale"), "{text}");
    let text = panic_message(|| {
        let xf = float::<Ascend, 2>(&host_values(vec![m, k], 1), DType::F32, &d);
        fused::grouped_matmul_antiquant(xf, w(), scale(DType::F32), None, sizes())
    });
    assert!(text.contains("grouped_matmul_antiquant"), "{text}");
    let text = panic_message(|| {
        let x = float::<Ascend, 2>(&host_values(vec![m, k], 1), DType::F32, &d);
        fused::moe_gather_quant(x, ints(&[0, 1, 0], [3], DType::I32, &d), 2, e)
    });
    assert!(text.contains("moe_gather_quant"), "{text}");
}

#[test]
#[serial(fault_device)]
fn an_expert_id_past_the_experts_is_an_operator_fault() {
    // The ids live on the device: the operator finds the bad one, reported at the next read.
    common::reset_fault_device();
    let d = common::fault_device();
    let x = float::<Ascend, 2>(&host_values(vec![2, 8], 1), DType::F32, &d);
    let r = fused::moe_gather_quant(x, ints(&[0, 5], [2], DType::I32, &d), 1, 2);
    let text = panic_message(|| r.rows.into_data());
    assert!(
        text.contains("aclnnMoeInitRoutingQuantV2") && text.contains("expertIdx[1] = 5"),
        "{text}"
    );
    common::reset_fault_device();
}

// ---------------------------------------------------------------------------------------------
// The emulated operators' refusals, called directly
// ---------------------------------------------------------------------------------------------

/// aclnnGroupedMatmulV4 along M on single tensors with the given quantisation parameters.
fn gmm_quant(
    x: &AscendTensor,
    weight: &AscendTensor,
    [scale, per_token, aq_scale, aq_offset]: [Option<&AscendTensor>; 4],
    group_list: &AscendTensor,
    out: &AscendTensor,
    group_type: i64,
) -> Result<(), AclError> {
    let ctx = x.ctx();
    let api = ctx.bind();
    let list = |t: &AscendTensor| TensorListDesc::new(api, vec![t.desc_owned()?]);
    let opt = |t: Option<&AscendTensor>| t.map(list).transpose();
    let (xs, ws, outs) = (list(x)?, list(weight)?, list(out)?);
    let (s, p, a, o) = (
        opt(scale)?,
        opt(per_token)?,
        opt(aq_scale)?,
        opt(aq_offset)?,
    );
    let gl = group_list.desc()?;
    aclnn!(
        &**ctx,
        aclnnGroupedMatmulV4(
            &xs, &ws, Absent, &s, Absent, &a, &o, &p, &gl, Absent, Absent, Absent, 3, group_type,
            1, 0, &outs, Absent, Absent
        )
    )
}

#[test]
#[serial]
fn emulated_quantised_grouped_matmul_refuses_what_a2_refuses() {
    if common::skipped_on_npu("emulated_quantised_grouped_matmul_refuses_what_a2_refuses") {
        return;
    }
    let d = ascend();
    let (m, k, n, e) = (4, 8, 3, 2);
    let p = |t: Tensor<Ascend, 2>| -> AscendTensor { t.into_primitive().tensor().into_inner() };
    let i8x = ints::<Ascend, 2>(&int8s(m * k, 1), [m, k], DType::I8, &d).into_primitive();
    let i8w = ints::<Ascend, 3>(&int8s(e * k * n, 2), [e, k, n], DType::I8, &d).into_primitive();
    let list = ints::<Ascend, 1>(&[2, 2], [e], DType::I64, &d).into_primitive();
    let t = |shape: Vec<usize>, dtype| p(float::<Ascend, 2>(&host_values(shape, 3), dtype, &d));
    let out = |dtype| p(Tensor::<Ascend, 2>::zeros([m, n], (&d, dtype)));
    let (bf, f32_, f16) = (DType::BF16, DType::F32, DType::F16);
    let invalid = |r: Result<(), AclError>, why: &str| {
        let e = r.expect_err(why);
        assert_eq!(e.code(), Some(ACLNN_ERR_PARAM_INVALID), "{why}: {e}");
    };
    let tok: AscendTensor = Tensor::<Ascend, 1>::ones([m], (&d, f32_))
        .into_primitive()
        .tensor()
        .into_inner();
    // The accepted forms.
    gmm_quant(
        &i8x,
        &i8w,
        [Some(&t(vec![e, n], bf)), Some(&tok), None, None],
        &list,
        &out(bf),
        0,
    )
    .expect("A8W8, bf16 out, bf16 scale, per-token scale");
    gmm_quant(
        &i8x,
        &i8w,
        [Some(&t(vec![e, n], f32_)), None, None, None],
        &list,
        &out(f16),
        0,
    )
    .expect("A8W8, f16 out, f32 scale");
    let hx = t(vec![m, k], f16);
    gmm_quant(
        &hx,
        &i8w,
        [
            None,
            None,
            Some(&t(vec![e, n], f16)),
            Some(&t(vec![e, n], f16)),
        ],
        &list,
        &out(f16),
        0,
    )
    .expect("A16W8 with offset");

    let cases: Vec<(&str, Result<(), AclError>)> = vec![
        (
            "an f32 out of int8 x",
            gmm_quant(
                &i8x,
                &i8w,
                [Some(&t(vec![e, n], f32_)), None, None, None],
                &list,
                &out(f32_),
                0,
            ),
        ),
        (
            "an f32 scale with a bf16 out (ND weight)",
            gmm_quant(
                &i8x,
                &i8w,
                [Some(&t(vec![e, n], f32_)), None, None, None],
                &list,
                &out(bf),
                0,
            ),
        ),
        (
            "a bf16 scale with an f16 out",
            gmm_quant(
                &i8x,
                &i8w,
                [Some(&t(vec![e, n], bf)), None, None, None],
                &list,
                &out(f16),
                0,
            ),
        ),
        (
            "a scale not [E, N]",
            gmm_quant(
                &i8x,
                &i8w,
                [Some(&t(vec![1, n], bf)), None, None, None],
                &list,
                &out(bf),
                0,
            ),
        ),
        (
            "A8W8 without a scale",
            gmm_quant(&i8x, &i8w, [None, None, None, None], &list, &out(bf), 0),
        ),
        (
            "a per-token scale not [M] f32",
            gmm_quant(
                &i8x,
                &i8w,
                [
                    Some(&t(vec![e, n], bf)),
                    Some(&t(vec![m, 1], f32_)),
                    None,
                    None,
                ],
                &list,
                &out(bf),
                0,
            ),
        ),
        (
            "antiquant parameters with int8 x",
            gmm_quant(
                &i8x,
                &i8w,
                [
                    Some(&t(vec![e, n], bf)),
                    None,
                    Some(&t(vec![e, n], bf)),
                    None,
                ],
                &list,
                &out(bf),
                0,
            ),
        ),
        (
            "A16W8 with a scale for int8 x",
            gmm_quant(
                &hx,
                &i8w,
                [
                    Some(&t(vec![e, n], f32_)),
                    None,
                    Some(&t(vec![e, n], f16)),
                    None,
                ],
                &list,
                &out(f16),
                0,
            ),
        ),
        (
            "A16W8 without antiquant scale",
            gmm_quant(&hx, &i8w, [None, None, None, None], &list, &out(f16), 0),
        ),
        (
            "an antiquant scale not of x's type",
            gmm_quant(
                &hx,
                &i8w,
                [None, None, Some(&t(vec![e, n], f32_)), None],
                &list,
                &out(f16),
                0,
            ),
        ),
        (
            "an antiquant offset not [E, N]",
            gmm_quant(
                &hx,
                &i8w,
                [
                    None,
                    None,
                    Some(&t(vec![e, n], f16)),
                    Some(&t(vec![1, n], f16)),
                ],
                &list,
                &out(f16),
                0,
            ),
        ),
        (
            "an A16W8 out not of x's type",
            gmm_quant(
                &hx,
                &i8w,
                [None, None, Some(&t(vec![e, n], f16)), None],
                &list,
                &out(bf),
                0,
            ),
        ),
        (
            "f32 x with an int8 weight",
            gmm_quant(
                &t(vec![m, k], f32_),
                &i8w,
                [None, None, Some(&t(vec![e, n], f32_)), None],
                &list,
                &out(f32_),
                0,
            ),
        ),
    ];
    for (why, r) in cases {
        invalid(r, why);
    }
    // Quantised forms group along M only.
    let dw = p(Tensor::<Ascend, 3>::zeros([e, k, n], (&d, bf)).reshape([e * k, n]));
    let r = gmm_quant(
        &i8x,
        &i8w,
        [Some(&t(vec![e, n], bf)), None, None, None],
        &list,
        &dw,
        2,
    );
    invalid(r, "a quantised form grouped along K");
}

/// aclnnMoeInitRoutingQuantV2 over 4 tokens, top-2 of 3 experts, with the MoE path's
/// arguments but the ones given.
fn init_routing_quant(
    quant_mode: i64,
    drop_pad_mode: i64,
    expanded_int8: bool,
    with_scale_out: bool,
    with_smooth_scale: bool,
) -> Result<(), AclError> {
    use burn_ascend::acl::DataType as Dt;
    let d = ascend();
    let (t, h, k, e) = (4, 8, 2, 3);
    let x: AscendTensor = float::<Ascend, 2>(&host_values(vec![t, h], 1), DType::F32, &d)
        .into_primitive()
        .tensor()
        .into_inner();
    let ids = ints::<Ascend, 2>(&[0, 1, 2, 0, 1, 2, 0, 1], [t, k], DType::I32, &d).into_primitive();
    let ctx = x.ctx();
    let mk = |shape: Vec<usize>, dt| AscendTensor::empty(ctx, shape, dt);
    let expanded = if drop_pad_mode == 1 {
        mk(vec![e, 2, h], Dt::I8)?
    } else {
        mk(vec![t * k, h], if expanded_int8 { Dt::I8 } else { Dt::F32 })?
    };
    let (row_idx, counts) = (mk(vec![t * k], Dt::I32)?, mk(vec![e], Dt::I32)?);
    let (scales, smooth) = (mk(vec![t * k], Dt::F32)?, mk(vec![1, h], Dt::F32)?);
    let scale_out = with_scale_out.then(|| scales.desc()).transpose()?;
    let smooth = with_smooth_scale.then(|| smooth.desc()).transpose()?;
    aclnn!(
        &**ctx,
        aclnnMoeInitRoutingQuantV2(
            x.desc()?,
            ids.desc()?,
            &smooth,
            Absent,
            0,
            if drop_pad_mode == 1 { 2 } else { 0 },
            e as i64,
            drop_pad_mode,
            if drop_pad_mode == 1 { 0 } else { 2 },
            false,
            quant_mode,
            expanded.desc()?,
            row_idx.desc()?,
            &(drop_pad_mode == 0).then(|| counts.desc()).transpose()?,
            Absent,
            &scale_out
        )
    )
}

#[test]
#[serial]
fn emulated_init_routing_quant_refuses_what_it_does_not_emulate() {
    if common::skipped_on_npu("emulated_init_routing_quant_refuses_what_it_does_not_emulate") {
        return;
    }
    init_routing_quant(1, 0, true, true, false).expect("dynamic, dropless");
    let code = |r: Result<(), AclError>, why: &str| r.expect_err(why).code();
    let invalid = Some(ACLNN_ERR_PARAM_INVALID);
    assert_eq!(
        code(
            init_routing_quant(0, 0, true, true, false),
            "static quantMode"
        ),
        invalid
    );
    assert_eq!(
        code(init_routing_quant(1, 1, true, true, false), "drop/pad"),
        invalid
    );
    assert_eq!(
        code(init_routing_quant(1, 0, true, true, true), "a smooth scale"),
        invalid
    );
    assert_eq!(
        code(
            init_routing_quant(1, 0, false, true, false),
            "an f32 expandedXOut"
        ),
        invalid
    );
    assert_eq!(
        code(init_routing_quant(2, 0, true, true, false), "quantMode 2"),
        Some(ACLNN_ERR_INNER_TILING_ERROR)
    );
    assert_eq!(
        code(
            init_routing_quant(1, 0, true, false, false),
            "no dynamicQuantScaleOut"
        ),
        Some(ACLNN_ERR_PARAM_NULLPTR)
    );
}

// ---------------------------------------------------------------------------------------------
// The quantised expert pipeline
// ---------------------------------------------------------------------------------------------

/// A routing of `t` tokens to `k` of `e` experts, from router logits `host_values`.
fn routing<B: Backend>(t: usize, e: usize, k: usize, d: &B::Device) -> Routing<B> {
    let logits = float::<B, 2>(&host_values(vec![t, e], 21), DType::F32, d);
    let probs = softmax(logits, 1);
    let (top, ids) = probs.clone().topk_with_indices(k, 1);
    let weights = top.clone() / top.sum_dim(1);
    Routing::from_choices(probs, ids, weights)
}

/// Relative Frobenius distance `|a - b| / |b|`.
fn relative(a: TensorData, b: TensorData) -> f64 {
    let (a, b) = (to_f64(a), to_f64(b));
    let num: f64 = a.iter().zip(&b).map(|(x, y)| (x - y).powi(2)).sum();
    let den: f64 = b.iter().map(|y| y * y).sum();
    (num / den).sqrt()
}

/// Expert weights `[gate, up, down]` of `e` experts, hidden `h`, expert hidden `f`, std
/// `fan_in^-1/2`.
fn expert_weights<B: Backend>(e: usize, h: usize, f: usize, d: &B::Device) -> [Tensor<B, 3>; 3] {
    let w = |shape: Vec<usize>, fan_in: usize, seed| {
        float::<B, 3>(&host_values(shape, seed), DType::F32, d) * (0.5 / (fan_in as f64).sqrt())
    };
    [
        w(vec![e, h, f], h, 31),
        w(vec![e, h, f], h, 32),
        w(vec![e, f, h], f, 33),
    ]
}

#[test]
#[serial]
fn quantised_experts_follow_the_float_experts_within_the_quantisation_error() {
    let (t, h, f, e, k) = (12, 64, 48, 6, 2);
    let d = ascend();
    let x = float::<Ascend, 2>(&host_values(vec![t, h], 41), DType::F32, &d);
    let r = routing::<Ascend>(t, e, k, &d);
    let weights = expert_weights::<Ascend>(e, h, f, &d);
    let [gate, up, down] = weights.clone();
    let reference = routed_experts(x.clone(), &r, k, [gate_up(gate, up), down], None).into_data();
    // Error budget, relative to the output's norm: each int8 quantisation of a row or channel
    // with max |v| errs by at most max|v| / 254 per element, for these near-uniform values a
    // relative RMS error of at most (1/254) * (max / rms) ~ 0.7%; bf16 rounds each of the
    // about six steps by at most 2^-9 (0.2%). W8A8 quantises four operands (two per matmul
    // stage, errors adding in quadrature at best, linearly at worst): under 4 * 0.7% + 6 *
    // 0.2% = 4%. W8A16 quantises only the two weights: under 2 * 0.7% + 1.2% = 2.6%.
    for (mode, bound) in [(Quantize::W8A8, 0.04), (Quantize::W8A16, 0.026)] {
        let q = QuantizedExperts::quantize(weights.clone(), mode);
        let got = routed_experts_quantized(x.clone(), &r, k, &q, None);
        assert_eq!(got.dtype(), DType::F32);
        let err = relative(got.into_data(), reference.clone());
        assert!(err < bound, "{mode:?}: relative error {err} over {bound}");
        // And the quantisation is doing something: not the float result to the last bit.
        assert!(err > 1e-4, "{mode:?}: relative error {err}");
    }
}

#[test]
#[serial]
fn quantised_experts_on_the_npu_equal_their_composition_on_flex() {
    let (t, h, f, e, k) = (10, 32, 24, 5, 2);
    let run = |mode| {
        let d = ascend();
        let x = float::<Ascend, 2>(&host_values(vec![t, h], 51), DType::BF16, &d);
        let q = QuantizedExperts::quantize(expert_weights::<Ascend>(e, h, f, &d), mode);
        let npu = routed_experts_quantized(x, &routing::<Ascend>(t, e, k, &d), k, &q, None);
        let fd = flex();
        let x = float::<Flex, 2>(&host_values(vec![t, h], 51), DType::BF16, &fd);
        let q = QuantizedExperts::quantize(expert_weights::<Flex>(e, h, f, &fd), mode);
        let reference = routed_experts_quantized(x, &routing::<Flex>(t, e, k, &fd), k, &q, None);
        (npu.into_data(), reference.into_data())
    };
    // The same integer math; only bf16 roundings of the float steps in another order: the
    // NPU's SwiGLU (aclnnSwiGlu) rounds once from f32 where the composition rounds the silu and
    // the product, and the weighted sum. W8A8 then quantises the SwiGLU's output per row: an
    // element a bf16 ulp (2^-8) moved across a rounding boundary moves one int8 step, 1/127 of
    // its row's largest, which with these near-uniform rows errs by up to about 1% at worst.
    for (mode, bound) in [(Quantize::W8A8, 1e-2), (Quantize::W8A16, 4e-3)] {
        let (got, want) = run(mode);
        let err = relative(got, want);
        eprintln!("{mode:?}: relative difference {err}");
        assert!(err < bound, "{mode:?}: relative difference {err}");
    }
}

#[test]
#[serial]
fn quantised_weights_are_made_on_the_device_within_half_a_step() {
    let (e, kk, n) = (3, 16, 5);
    let d = ascend();
    let mut w = host_values(vec![e, kk, n], 61).to_vec::<f32>().unwrap();
    // A zero channel: scale 0, int8 zeros.
    (0..kk).for_each(|i| w[i * n + 2] = 0.0);
    let w = TensorData::new(w, [e, kk, n]);
    let (q, s) =
        fused::quantize_weight_per_channel::<_, 3, 2>(float::<Ascend, 3>(&w, DType::F32, &d));
    let (fq, fs) =
        fused::quantize_weight_per_channel::<_, 3, 2>(float::<Flex, 3>(&w, DType::F32, &flex()));
    assert_eq!(q.dtype(), DType::I8);
    let (q, s) = (q.into_data(), s.into_data());
    assert_eq!(to_i64(q.clone()), to_i64(fq.into_data()));
    assert_ulps("weight scales", s.clone(), fs.into_data(), DType::F32, 0);
    let (q, s, w) = (to_i64(q), to_f64(s), to_f64(w));
    assert_eq!(s[2], 0.0);
    for g in 0..e {
        for c in 0..n {
            let max = (0..kk)
                .map(|i| w[(g * kk + i) * n + c].abs())
                .fold(0.0, f64::max);
            assert!((s[g * n + c] - max / 127.0).abs() <= max / 127.0 * 1e-6);
            for i in 0..kk {
                let o = (g * kk + i) * n + c;
                assert!(
                    (q[o] as f64 * s[g * n + c] - w[o]).abs() <= s[g * n + c] * 0.5 * (1.0 + 1e-5)
                );
            }
        }
    }
}

#[test]
#[serial]
fn quantised_experts_on_fusion_run_the_same_operators() {
    type Fused = burn_fusion::Fusion<Ascend>;
    let (t, h, f, e, k) = (8, 32, 16, 4, 2);
    let d = ascend();
    for mode in [Quantize::W8A8, Quantize::W8A16] {
        let x = float::<Ascend, 2>(&host_values(vec![t, h], 71), DType::F16, &d);
        let q = QuantizedExperts::quantize(expert_weights::<Ascend>(e, h, f, &d), mode);
        let direct = routed_experts_quantized(x, &routing::<Ascend>(t, e, k, &d), k, &q, None);
        let x = float::<Fused, 2>(&host_values(vec![t, h], 71), DType::F16, &d);
        let q = QuantizedExperts::quantize(expert_weights::<Fused>(e, h, f, &d), mode);
        let fused = routed_experts_quantized(x, &routing::<Fused>(t, e, k, &d), k, &q, None);
        // The same quantised operators; Fusion may fuse the SwiGLU's element-wise steps
        // (without rounding to f16 between them), which moves results by an f16 ulp or so.
        let err = relative(fused.into_data(), direct.into_data());
        assert!(
            err < 2e-3,
            "{mode:?} on Fusion<Ascend>: relative difference {err}"
        );
    }
}
