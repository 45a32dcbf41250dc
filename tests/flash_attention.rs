//! Burn's attention on aclnnFlashAttentionScore (and its backward on
//! aclnnFlashAttentionScoreGrad): forward and gradients against burn-flex's attention on
//! conformance shapes (boolean masks, causal with Sq below, equal to and above Sk, fully masked
//! rows, broadcast masks, grouped-query heads, size-1 and empty dims, more than one 128-row
//! tile) in f32, f16 and bf16; the operator count of one call (the fused path runs); a long
//! sequence under a device memory cap that the composed path exceeds; and the checks the
//! emulated operators make, called directly.
//!
//! Every test is serial: the launch counter is process-wide.

mod common;

use std::ffi::CString;

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Bool, DType, Int, Tensor, TensorData, TensorPrimitive};
use burn_ascend::acl::aclnn;
use burn_ascend::acl::handles::Absent;
use burn_ascend::acl::types::status::*;
use burn_ascend::acl::{AclError, DataType};
use burn_ascend::emulator::{
    aclnn_launches_of, host_to_device_copies, set_device_memory_limit, work_counters,
};
use burn_ascend::ops::attention::{attention as composed, AttentionOptions};
use burn_ascend::runtime::DeviceContext;
use burn_ascend::{fused, Ascend, AscendDevice, AscendTensor};
use burn_ascend_llm::moe::config::MoeConfig;
use burn_ascend_llm::moe::model::MoeDecoder;
use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use serial_test::serial;

type AdAscend = Autodiff<Ascend>;
type AdFlex = Autodiff<Flex>;

const HALVES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

fn ascend() -> AscendDevice {
    common::device()
}

fn flex() -> FlexDevice {
    Default::default()
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn data(shape: [usize; 4], seed: u64) -> TensorData {
    TensorData::new(values(shape.iter().product(), seed), shape)
}

fn float<B: Backend>(data: &TensorData, dtype: DType, d: &B::Device) -> Tensor<B, 4> {
    Tensor::from_data(data.clone().convert_dtype(dtype), (d, dtype))
}

/// A random mask (about a third masked) whose row 1 is fully masked: 0 there, not NaN.
fn mask_data(shape: [usize; 4], seed: u64) -> TensorData {
    let [_, _, sq, sk] = shape;
    let v: Vec<bool> = values(shape.iter().product(), seed)
        .iter()
        .enumerate()
        .map(|(i, &x)| x > 0.3 || (sq > 1 && (i / sk) % sq == 1))
        .collect();
    TensorData::new(v, shape)
}

fn mask<B: Backend>(data: &TensorData, d: &B::Device) -> Tensor<B, 4, Bool> {
    Tensor::from_data(data.clone(), d)
}

fn to_f64(d: TensorData) -> Vec<f64> {
    d.convert::<f64>().to_vec::<f64>().unwrap()
}

fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 1e-2,
        DType::BF16 => 4e-2,
        _ => 1e-4,
    }
}

/// `got` matches `want` in shape, dtype and values, relative to `max(|want|, 1)`; no NaN.
fn assert_close(what: &str, got: TensorData, want: TensorData, tol: f64) {
    assert_eq!(got.shape, want.shape, "{what}: shape");
    assert_eq!(got.dtype, want.dtype, "{what}: dtype");
    for (i, (a, b)) in to_f64(got).iter().zip(&to_f64(want)).enumerate() {
        assert!(
            (a - b).abs() <= tol * b.abs().max(1.0),
            "{what}: element {i} is {a}, burn-flex gives {b}"
        );
    }
}

/// One conformance call: q, k, v shapes, an optional mask (its data and the shape it is
/// expanded to), options.
struct Case {
    name: &'static str,
    q: [usize; 4],
    k: [usize; 4],
    dv: usize,
    mask: Option<[usize; 4]>,
    options: AttentionModuleOptions,
}

fn opts(scale: Option<f64>, is_causal: bool) -> AttentionModuleOptions {
    AttentionModuleOptions {
        scale,
        softcap: None,
        is_causal,
    }
}

fn cases() -> Vec<Case> {
    let case = |name, q, k, dv, mask, options| Case {
        name,
        q,
        k,
        dv,
        mask,
        options,
    };
    vec![
        case(
            "plain, Dv < D",
            [2, 2, 5, 8],
            [2, 2, 7, 8],
            6,
            None,
            opts(None, false),
        ),
        case(
            "causal Sq < Sk",
            [2, 2, 5, 8],
            [2, 2, 7, 8],
            8,
            None,
            opts(None, true),
        ),
        case(
            "causal Sq > Sk (rows without keys)",
            [1, 2, 7, 8],
            [1, 2, 4, 8],
            8,
            None,
            opts(None, true),
        ),
        case(
            "mask",
            [2, 2, 5, 8],
            [2, 2, 7, 8],
            8,
            Some([2, 2, 5, 7]),
            opts(Some(0.3), false),
        ),
        case(
            "mask and causal",
            [2, 2, 6, 8],
            [2, 2, 6, 8],
            8,
            Some([2, 2, 6, 6]),
            opts(None, true),
        ),
        case(
            "broadcast mask",
            [2, 3, 5, 8],
            [2, 3, 7, 8],
            8,
            Some([1, 1, 5, 7]),
            opts(None, false),
        ),
        case(
            "mask over batches",
            [2, 3, 5, 8],
            [2, 3, 7, 8],
            8,
            Some([2, 1, 5, 7]),
            opts(None, false),
        ),
        case(
            "size-1 dims",
            [1, 1, 1, 1],
            [1, 1, 1, 1],
            1,
            None,
            opts(None, true),
        ),
        case(
            "two tiles, causal",
            [1, 1, 200, 16],
            [1, 1, 200, 16],
            16,
            None,
            opts(None, true),
        ),
        case(
            "empty queries",
            [1, 2, 0, 8],
            [1, 2, 3, 8],
            8,
            None,
            opts(None, true),
        ),
        case(
            "empty keys",
            [1, 2, 3, 8],
            [1, 2, 0, 8],
            8,
            Some([1, 2, 3, 0]),
            opts(None, false),
        ),
    ]
}

/// The case's operands on backend `B` (the mask expanded to `[B, H, Sq, Sk]`).
#[allow(clippy::type_complexity)]
fn operands<B: Backend>(
    c: &Case,
    dtype: DType,
    d: &B::Device,
) -> (
    Tensor<B, 4>,
    Tensor<B, 4>,
    Tensor<B, 4>,
    Option<Tensor<B, 4, Bool>>,
) {
    let [b, h, sq, _] = c.q;
    let [_, hk, sk, _] = c.k;
    let v = [b, hk, sk, c.dv];
    // Burn refuses to expand to an empty dim: an empty mask comes in its full shape.
    let m = c.mask.map(|shape| {
        let m = mask::<B>(&mask_data(shape, 4), d);
        if shape == [b, h, sq, sk] {
            m
        } else {
            m.expand([b, h, sq, sk])
        }
    });
    (
        float::<B>(&data(c.q, 1), dtype, d),
        float::<B>(&data(c.k, 2), dtype, d),
        float::<B>(&data(v, 3), dtype, d),
        m,
    )
}

#[test]
#[serial]
fn attention_matches_flex_on_conformance_shapes() {
    for dtype in HALVES {
        for c in cases() {
            let what = format!("{} ({dtype:?})", c.name);
            let (q, k, v, m) = operands::<Ascend>(&c, dtype, &ascend());
            let got = attention(q, k, v, m, None, c.options).into_data();
            let (q, k, v, m) = operands::<Flex>(&c, dtype, &flex());
            let want = attention(q, k, v, m, None, c.options).into_data();
            assert_close(&what, got, want, tolerance(dtype));
        }
    }
}

/// Calls outside the flash contract (softcap, bias) take the composed path; with an empty query
/// or key dim they give burn-flex's output, its empty shape or zeros (rows without keys).
#[test]
#[serial]
fn composed_attention_with_softcap_or_bias_on_empty_dims_matches_flex() {
    let softcap = AttentionModuleOptions {
        scale: None,
        softcap: Some(20.0),
        is_causal: false,
    };
    for dtype in HALVES {
        for (q, k) in [([2, 2, 0, 8], [2, 2, 5, 8]), ([2, 2, 3, 8], [2, 2, 0, 8])] {
            let [b, h, sq, _] = q;
            let (sk, v) = (k[2], [k[0], k[1], k[2], 4]);
            for (with_bias, options) in [(false, softcap), (true, opts(None, true))] {
                let what = format!("q {q:?}, k {k:?}, bias {with_bias}, {options:?} ({dtype:?})");
                let bias = [b, h, sq, sk];
                let got = attention(
                    float::<Ascend>(&data(q, 1), dtype, &ascend()),
                    float::<Ascend>(&data(k, 2), dtype, &ascend()),
                    float::<Ascend>(&data(v, 3), dtype, &ascend()),
                    None,
                    with_bias.then(|| float::<Ascend>(&data(bias, 4), dtype, &ascend())),
                    options,
                );
                let want = attention(
                    float::<Flex>(&data(q, 1), dtype, &flex()),
                    float::<Flex>(&data(k, 2), dtype, &flex()),
                    float::<Flex>(&data(v, 3), dtype, &flex()),
                    None,
                    with_bias.then(|| float::<Flex>(&data(bias, 4), dtype, &flex())),
                    options,
                );
                assert_close(&what, got.into_data(), want.into_data(), tolerance(dtype));
            }
        }
    }
}

/// Collects the gradient of every float parameter of a module, in visiting order.
struct ParamGrads<'a> {
    grads: &'a <AdAscend as AutodiffBackend>::Gradients,
    found: Vec<TensorData>,
}

impl ModuleVisitor<AdAscend> for ParamGrads<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<AdAscend, D>>) {
        let g = param
            .val()
            .grad(self.grads)
            .expect("every parameter has a gradient");
        self.found.push(g.into_data());
    }
}

/// The MoE example model with its attention on `fused::flash_attention` computes the logits and
/// the parameter gradients of the composition it has by default (sequences of 150 tokens: two
/// 128-row tiles; grouped-query heads 4:2).
#[test]
#[serial]
fn the_moe_example_trains_through_flash_attention_as_through_the_composition() {
    let cfg = MoeConfig::new()
        .with_hidden(64)
        .with_layers(2)
        .with_q_heads(4)
        .with_kv_heads(2)
        .with_experts(4)
        .with_expert_hidden(64);
    let d = ascend();
    let ids: Vec<i32> = (0..2 * 150).map(|i| i * 37 % 256).collect();
    let tokens = Tensor::<AdAscend, 2, Int>::from_data(TensorData::new(ids, [2, 150]), &d);
    let composed_model = MoeDecoder::<AdAscend>::new(&cfg, &d).unwrap();
    // Parameters are initialised lazily, and a clone of an uninitialised one draws its own
    // values: one forward first, so that both models hold the same weights.
    let _ = composed_model.forward(tokens.clone().narrow(1, 0, 1));
    let flash_model = composed_model.clone().with_flash_attention(true);
    let run = |model: &MoeDecoder<AdAscend>| {
        let (logits, aux) = model.forward(tokens.clone());
        let n = logits.dims().iter().product();
        let w = Tensor::<AdAscend, 3>::from_data(TensorData::new(values(n, 9), logits.dims()), &d);
        let grads = ((logits.clone() * w).sum() + aux).backward();
        let mut visitor = ParamGrads {
            grads: &grads,
            found: Vec::new(),
        };
        model.visit(&mut visitor);
        (logits.into_data(), visitor.found)
    };
    let fused_ops = || {
        Ascend::sync(&d).unwrap();
        ["aclnnFlashAttentionScore", "aclnnFlashAttentionScoreGrad"].map(aclnn_launches_of)
    };
    let before = fused_ops();
    let (flash_logits, flash_grads) = run(&flash_model);
    let after = fused_ops();
    let (logits, grads) = run(&composed_model);
    if !common::skipped_on_npu("flash launches of the_moe_example_trains_through_flash_attention") {
        assert_eq!(
            [after[0] - before[0], after[1] - before[1]],
            [2, 2],
            "the flash operator and its grad, once per layer"
        );
        assert_eq!(fused_ops(), after, "the composition launches neither");
    }
    assert_close("logits", flash_logits, logits, 1e-4);
    assert_eq!(flash_grads.len(), grads.len());
    for (i, (g, want)) in flash_grads.into_iter().zip(grads).enumerate() {
        assert_close(&format!("gradient of parameter {i}"), g, want, 1e-3);
    }
}

/// Keys and values of `hk` heads repeated for `h` query heads (head i reads kv head i / (h/hk)).
fn repeat_heads<B: Backend>(t: Tensor<B, 4>, h: usize) -> Tensor<B, 4> {
    let [b, hk, s, d] = t.dims();
    t.reshape([b, hk, 1, s * d])
        .expand([b, hk, h / hk, s * d])
        .reshape([b, h, s, d])
}

#[test]
#[serial]
fn grouped_query_heads_match_flex_on_repeated_heads() {
    for dtype in HALVES {
        for (hk, causal) in [(1, false), (2, true), (4, false)] {
            let what = format!("4 query heads over {hk} ({dtype:?}, causal {causal})");
            let (q, k, v) = ([2, 4, 5, 8], [2, hk, 6, 8], [2, hk, 6, 4]);
            let options = opts(None, causal);
            let at = |s, seed| float::<Ascend>(&data(s, seed), dtype, &ascend());
            let got = fused::flash_attention(at(q, 1), at(k, 2), at(v, 3), None, options);
            let fl = |s, seed| float::<Flex>(&data(s, seed), dtype, &flex());
            let want = attention(
                fl(q, 1),
                repeat_heads(fl(k, 2), 4),
                repeat_heads(fl(v, 3), 4),
                None,
                None,
                options,
            );
            assert_close(&what, got.into_data(), want.into_data(), tolerance(dtype));
        }
    }
}

/// Gradients of `sum(attention(q, k, v) * w)` for q, k, v.
fn grads<B: AutodiffBackend + burn_ascend::FusedOps>(
    c: &Case,
    dtype: DType,
    d: &B::Device,
    fused_path: bool,
) -> [TensorData; 3] {
    let (q, k, v, m) = operands::<B>(c, dtype, d);
    let (q, k, v) = (q.require_grad(), k.require_grad(), v.require_grad());
    let out = if fused_path {
        fused::flash_attention(q.clone(), k.clone(), v.clone(), m, c.options)
    } else {
        attention(q.clone(), k.clone(), v.clone(), m, None, c.options)
    };
    let w = float::<B>(&data(out.dims(), 9), dtype, d);
    let g = (out * w).sum().backward();
    [q, k, v].map(|t| t.grad(&g).expect("a gradient").into_data())
}

#[test]
#[serial]
fn autodiff_gradients_match_flex() {
    for dtype in HALVES {
        for c in cases() {
            let got = grads::<AdAscend>(&c, dtype, &ascend(), true);
            let want = if c.k[2] == 0 {
                // burn-flex's backward cannot reduce over no keys; the output is the constant
                // 0 then, so every gradient is 0.
                got.clone().map(|g| {
                    let zeros = TensorData::zeros::<f32, _>(g.shape.clone());
                    zeros.convert_dtype(dtype)
                })
            } else {
                grads::<AdFlex>(&c, dtype, &flex(), false)
            };
            for (name, (g, w)) in ["dq", "dk", "dv"].iter().zip(got.into_iter().zip(want)) {
                let what = format!("{name} of {} ({dtype:?})", c.name);
                assert_close(&what, g, w, 2.0 * tolerance(dtype));
            }
        }
    }
}

#[test]
#[serial]
fn grouped_query_gradients_sum_over_the_group() {
    for dtype in HALVES {
        let (qs, ks, vs) = ([1, 4, 5, 8], [1, 2, 6, 8], [1, 2, 6, 8]);
        let options = opts(None, true);
        let run = |ascend_side: bool| -> [TensorData; 3] {
            if ascend_side {
                let at =
                    |s, seed| float::<AdAscend>(&data(s, seed), dtype, &ascend()).require_grad();
                let (q, k, v) = (at(qs, 1), at(ks, 2), at(vs, 3));
                let out = fused::flash_attention(q.clone(), k.clone(), v.clone(), None, options);
                let w = float::<AdAscend>(&data(out.dims(), 9), dtype, &ascend());
                let g = (out * w).sum().backward();
                [q, k, v].map(|t| t.grad(&g).unwrap().into_data())
            } else {
                let fl = |s, seed| float::<AdFlex>(&data(s, seed), dtype, &flex()).require_grad();
                let (q, k, v) = (fl(qs, 1), fl(ks, 2), fl(vs, 3));
                let out = attention(
                    q.clone(),
                    repeat_heads(k.clone(), 4),
                    repeat_heads(v.clone(), 4),
                    None,
                    None,
                    options,
                );
                let w = float::<AdFlex>(&data(out.dims(), 9), dtype, &flex());
                let g = (out * w).sum().backward();
                [q, k, v].map(|t| t.grad(&g).unwrap().into_data())
            }
        };
        for (name, (g, w)) in ["dq", "dk", "dv"]
            .iter()
            .zip(run(true).into_iter().zip(run(false)))
        {
            assert_close(&format!("{name} ({dtype:?})"), g, w, 2.0 * tolerance(dtype));
        }
    }
}

/// aclnn operators one call launches.
fn launches(f: impl FnOnce()) -> u64 {
    Ascend::sync(&ascend()).unwrap();
    let before = work_counters();
    f();
    Ascend::sync(&ascend()).unwrap();
    work_counters().since(&before).aclnn_launches
}

#[test]
#[serial]
fn attention_is_one_fused_operator_and_its_backward_one_more() {
    if common::skipped_on_npu("attention_is_one_fused_operator_and_its_backward_one_more") {
        return;
    }
    let d = ascend();
    let t = |s, seed| float::<Ascend>(&data(s, seed), DType::F16, &d);
    let (q, k, v) = (
        t([1, 2, 64, 16], 1),
        t([1, 2, 64, 16], 2),
        t([1, 2, 64, 16], 3),
    );
    for causal in [false, true] {
        let n = launches(|| {
            attention(
                q.clone(),
                k.clone(),
                v.clone(),
                None,
                None,
                opts(None, causal),
            );
        });
        assert_eq!(n, 1, "causal {causal}: aclnnFlashAttentionScore alone");
    }
    // The backward: the forward's one operator, then only the fused grad (plus the ops of the
    // loss and its seed gradient, counted on their own).
    let a = |s, seed| float::<AdAscend>(&data(s, seed), DType::F16, &d).require_grad();
    let (q, k, v) = (
        a([1, 2, 64, 16], 1),
        a([1, 2, 64, 16], 2),
        a([1, 2, 64, 16], 3),
    );
    let loss_only = launches(|| {
        let _ = q.clone().sum().backward();
    });
    let total = launches(|| {
        let out = fused::flash_attention(q.clone(), k.clone(), v.clone(), None, opts(None, true));
        let _ = out.sum().backward();
    });
    assert!(
        total <= loss_only + 2,
        "forward and backward launched {total} operators, the loss alone {loss_only}"
    );
}

/// The compressed `[2048, 2048]` causal mask is a device constant: after the device's first
/// causal call, a call uploads nothing (it once uploaded the 4 MiB mask on every call).
#[test]
#[serial]
fn the_compressed_causal_mask_is_uploaded_once_per_device() {
    if common::skipped_on_npu("the_compressed_causal_mask_is_uploaded_once_per_device") {
        return;
    }
    let d = ascend();
    let t = |s, seed| float::<Ascend>(&data(s, seed), DType::F16, &d);
    let (q, k, v) = (
        t([1, 2, 64, 16], 1),
        t([1, 2, 64, 16], 2),
        t([1, 2, 64, 16], 3),
    );
    let call = || {
        attention(
            q.clone(),
            k.clone(),
            v.clone(),
            None,
            None,
            opts(None, true),
        )
    };
    let first = call();
    Ascend::sync(&d).unwrap();
    let before = host_to_device_copies();
    let (second, third) = (call(), call());
    Ascend::sync(&d).unwrap();
    let after = host_to_device_copies();
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (0, 0),
        "host-to-device copies and bytes of two causal calls"
    );
    for later in [second, third] {
        assert_eq!(later.into_data(), first.clone().into_data());
    }
}

#[test]
#[serial]
fn long_causal_sequence_fits_a_memory_cap_the_composed_path_exceeds() {
    if common::skipped_on_npu("long_causal_sequence_fits_a_memory_cap_the_composed_path_exceeds") {
        return;
    }
    const MIB: u64 = 1 << 20;
    /// Gives NPU 1 back its capacity, even if an assertion failed.
    struct Restore;
    impl Drop for Restore {
        fn drop(&mut self) {
            set_device_memory_limit(1, 64 << 30);
        }
    }
    let _restore = Restore;
    let device = AscendDevice::Emulated(1);
    let ctx = DeviceContext::get(&device.into()).unwrap();
    // One f16 score matrix of S = 4096 is 32 MiB; q, k, v and the output are 256 KiB each.
    let shape = [1, 1, 4096, 32];
    let t = |seed| float::<Ascend>(&data(shape, seed), DType::F16, &device);
    let (q, k, v) = (t(1), t(2), t(3));
    ctx.release_cache().unwrap();
    set_device_memory_limit(1, 24 * MIB);
    let prim = |t: &Tensor<Ascend, 4>| t.clone().into_primitive().tensor();
    let options = AttentionOptions {
        scale: None,
        softcap: None,
        is_causal: true,
    };
    let err = composed(&prim(&q), &prim(&k), &prim(&v), None, None, options)
        .expect_err("the composed path's score matrix does not fit 24 MiB");
    assert_eq!(err.code(), Some(ACL_ERROR_RT_MEMORY_ALLOCATION), "{err}");
    ctx.release_cache().unwrap();
    let got = attention(q, k, v, None, None, opts(None, true)).into_data();
    let peak = ctx.memory_stats().peak_bytes_in_use as u64;
    assert!(peak < 24 * MIB, "peak {peak} bytes");
    let f = |seed| float::<Flex>(&data(shape, seed), DType::F16, &flex());
    let want = attention(f(1), f(2), f(3), None, None, opts(None, true)).into_data();
    assert_close("S = 4096", got, want, tolerance(DType::F16));
}

/// A dense device tensor of `shape` and `dtype` with deterministic values.
fn tensor(shape: &[usize], dtype: DataType) -> AscendTensor {
    let n: usize = shape.iter().product();
    let b = match dtype {
        DataType::F16 => DType::F16,
        DataType::BF16 => DType::BF16,
        DataType::F64 => DType::F64,
        _ => DType::F32,
    };
    let flat = if dtype == DataType::Bool {
        Tensor::<Ascend, 1, Int>::zeros([n], &ascend())
            .bool()
            .into_primitive()
    } else {
        let d = TensorData::new(values(n, 5), [n]).convert_dtype(b);
        Tensor::<Ascend, 1>::from_data(d, (&ascend(), b))
            .into_primitive()
            .tensor()
    };
    burn_ascend::ops::copy::reshape(&flat, shape.to_vec())
        .unwrap()
        .into()
}

/// One direct call's arguments, each a knob the checks test.
#[derive(Clone)]
struct Call {
    q: (Vec<usize>, DataType),
    k: (Vec<usize>, DataType),
    v: (Vec<usize>, DataType),
    mask: Option<(Vec<usize>, DataType)>,
    keep_prob: f64,
    head_num: i64,
    layout: &'static str,
    inner_precise: i64,
    sparse_mode: i64,
    stats: Vec<usize>,
    out: (Vec<usize>, DataType),
}

fn good() -> Call {
    Call {
        q: (vec![1, 4, 8, 16], DataType::F16),
        k: (vec![1, 2, 8, 16], DataType::F16),
        v: (vec![1, 2, 8, 16], DataType::F16),
        mask: None,
        keep_prob: 1.0,
        head_num: 4,
        layout: "BNSD",
        inner_precise: 0,
        sparse_mode: 0,
        stats: vec![1, 4, 8, 8],
        out: (vec![1, 4, 8, 16], DataType::F16),
    }
}

fn forward(c: &Call) -> Result<(), AclError> {
    let t = |(s, d): &(Vec<usize>, DataType)| tensor(s, *d);
    let (q, k, v, out) = (t(&c.q), t(&c.k), t(&c.v), t(&c.out));
    let mask = c.mask.as_ref().map(t);
    let (max, sum) = (
        tensor(&c.stats, DataType::F32),
        tensor(&c.stats, DataType::F32),
    );
    let mask = mask.as_ref().map(|m| m.desc()).transpose()?;
    let layout = CString::new(c.layout).expect("a layout without NUL");
    aclnn!(
        &**q.ctx(),
        aclnnFlashAttentionScore(
            q.desc()?,
            k.desc()?,
            v.desc()?,
            Absent,
            Absent,
            Absent,
            mask,
            Absent,
            0.25,
            c.keep_prob,
            2_147_483_647i64,
            2_147_483_647i64,
            c.head_num,
            layout.as_c_str(),
            c.inner_precise,
            c.sparse_mode,
            max.desc()?,
            sum.desc()?,
            Absent,
            out.desc()?
        )
    )
}

fn backward(c: &Call, with_stats: bool) -> Result<(), AclError> {
    let t = |(s, d): &(Vec<usize>, DataType)| tensor(s, *d);
    let (q, k, v, dy, o) = (t(&c.q), t(&c.k), t(&c.v), t(&c.out), t(&c.out));
    let (dq, dk, dv) = (t(&c.q), t(&c.k), t(&c.v));
    let (max, sum) = (
        tensor(&c.stats, DataType::F32),
        tensor(&c.stats, DataType::F32),
    );
    let (max, sum) = if with_stats {
        (Some(max.desc()?), Some(sum.desc()?))
    } else {
        (None, None)
    };
    let layout = CString::new(c.layout).expect("a layout without NUL");
    aclnn!(
        &**q.ctx(),
        aclnnFlashAttentionScoreGrad(
            q.desc()?,
            k.desc()?,
            v.desc()?,
            dy.desc()?,
            Absent,
            Absent,
            Absent,
            Absent,
            max,
            sum,
            Absent,
            o.desc()?,
            Absent,
            0.25,
            c.keep_prob,
            2_147_483_647i64,
            2_147_483_647i64,
            c.head_num,
            layout.as_c_str(),
            c.inner_precise,
            c.sparse_mode,
            dq.desc()?,
            dk.desc()?,
            dv.desc()?,
            Absent
        )
    )
}

#[test]
#[serial]
fn emulated_flash_attention_checks_what_the_operator_documents() {
    if common::skipped_on_npu("emulated_flash_attention_checks_what_the_operator_documents") {
        return;
    }
    let refused = |r: Result<(), AclError>, words: &[&str], why: &str| {
        let e = r.err().unwrap_or_else(|| panic!("{why} should be refused"));
        assert_eq!(e.code(), Some(ACLNN_ERR_PARAM_INVALID), "{why}: {e}");
        let text = e.to_string();
        assert!(text.contains("aclnnFlashAttentionScore"), "{why}: {text}");
        for w in words {
            assert!(text.contains(w), "{why}: {w:?} not in {text}");
        }
    };
    let g = good();
    forward(&g).unwrap();
    backward(&g, true).unwrap();
    let with = |f: &dyn Fn(&mut Call)| {
        let mut c = good();
        f(&mut c);
        c
    };
    // The documented alternatives the checks must let through: f32 and bf16, BSND, a [Sq, Sk]
    // mask, the compressed causal mask of sparseMode 3.
    forward(&with(&|c| {
        for t in [&mut c.q, &mut c.k, &mut c.v, &mut c.out] {
            t.1 = DataType::F32;
        }
    }))
    .unwrap();
    forward(&with(&|c| {
        c.layout = "BSND";
        c.q.0 = vec![1, 8, 4, 16];
        c.k.0 = vec![1, 8, 2, 16];
        c.v.0 = vec![1, 8, 2, 16];
        c.out.0 = vec![1, 8, 4, 16];
    }))
    .unwrap();
    forward(&with(&|c| c.mask = Some((vec![8, 8], DataType::Bool)))).unwrap();
    forward(&with(&|c| {
        c.mask = Some((vec![2048, 2048], DataType::Bool));
        c.sparse_mode = 3;
    }))
    .unwrap();

    let cases: Vec<(Call, &[&str], &str)> = vec![
        (
            with(&|c| {
                for t in [&mut c.q, &mut c.k, &mut c.v, &mut c.out] {
                    t.1 = DataType::F64;
                }
            }),
            &["query dtype DT_DOUBLE"],
            "an f64 query",
        ),
        (
            with(&|c| c.k.1 = DataType::BF16),
            &["share one dtype"],
            "mixed dtypes",
        ),
        (
            with(&|c| {
                c.q.0[3] = 769;
                c.k.0[3] = 769;
                c.v.0[3] = 769;
                c.out.0[3] = 769;
            }),
            &["D <= 768"],
            "a head dim of 769",
        ),
        (
            with(&|c| {
                c.v.0[3] = 32;
                c.out.0[3] = 32;
            }),
            &["qD == kD >= vD"],
            "vD above kD",
        ),
        (
            with(&|c| {
                c.k.0[1] = 3;
                c.v.0[1] = 3;
            }),
            &["multiple of the key/value heads"],
            "4 query heads over 3",
        ),
        (with(&|c| c.head_num = 2), &["headNum 2"], "headNum not N1"),
        (
            with(&|c| c.layout = "BSH"),
            &["BSH", "not implement"],
            "BSH layout",
        ),
        (with(&|c| c.layout = "NSBD"), &["NSBD"], "unknown layout"),
        (
            with(&|c| c.inner_precise = 2),
            &["innerPrecise 2"],
            "innerPrecise 2",
        ),
        (with(&|c| c.keep_prob = 0.5), &["dropout"], "keepProb 0.5"),
        (with(&|c| c.keep_prob = 0.0), &["(0, 1]"], "keepProb 0"),
        (
            with(&|c| {
                c.mask = Some((vec![8, 8], DataType::Bool));
                c.sparse_mode = 3;
            }),
            &["[2048, 2048]"],
            "sparseMode 3 without the compressed mask",
        ),
        (
            with(&|c| {
                c.mask = Some((vec![8, 8], DataType::Bool));
                c.sparse_mode = 4;
            }),
            &["sparseMode 4"],
            "band mode",
        ),
        (
            with(&|c| c.mask = Some((vec![1, 2, 8, 8], DataType::Bool))),
            &["attenMask"],
            "a mask of 2 heads for 4",
        ),
        (
            with(&|c| c.mask = Some((vec![8, 8], DataType::F16))),
            &["attenMask dtype"],
            "a float mask",
        ),
        (
            with(&|c| c.stats = vec![1, 4, 8, 1]),
            &["softmaxMaxOut"],
            "stats without 8 lanes",
        ),
        (
            with(&|c| c.out.1 = DataType::F32),
            &["attentionOutOut"],
            "out dtype",
        ),
        (
            with(&|c| {
                c.q.0[2] = 0;
                c.out.0[2] = 0;
            }),
            &["at least 1"],
            "an empty query sequence",
        ),
    ];
    for (c, words, why) in &cases {
        refused(forward(c), words, why);
    }
    refused(
        backward(&g, false),
        &["required"],
        "a backward without the saved statistics",
    );
    refused(
        backward(&with(&|c| c.inner_precise = 2), true),
        &["innerPrecise 2"],
        "a backward with innerPrecise 2",
    );
}

#[test]
#[serial]
fn compressed_causal_mask_is_read_as_the_hardware_reads_it() {
    if common::skipped_on_npu("compressed_causal_mask_is_read_as_the_hardware_reads_it") {
        return;
    }
    // sparseMode 3 with an all-false compressed mask computes every position: the unmasked
    // attention, not the causal one.
    let mut c = good();
    c.mask = Some((vec![2048, 2048], DataType::Bool));
    c.sparse_mode = 3;
    let q = tensor(&c.q.0, c.q.1);
    let k = tensor(&c.k.0, c.k.1);
    let v = tensor(&c.v.0, c.v.1);
    let out = tensor(&c.out.0, c.out.1);
    let zeros = tensor(&[2048, 2048], DataType::Bool);
    let (max, sum) = (
        tensor(&c.stats, DataType::F32),
        tensor(&c.stats, DataType::F32),
    );
    aclnn!(
        &**q.ctx(),
        aclnnFlashAttentionScore(
            q.desc().unwrap(),
            k.desc().unwrap(),
            v.desc().unwrap(),
            Absent,
            Absent,
            Absent,
            Some(zeros.desc().unwrap()),
            Absent,
            0.25,
            1.0,
            2_147_483_647i64,
            2_147_483_647i64,
            4i64,
            c"BNSD",
            0i64,
            3i64,
            max.desc().unwrap(),
            sum.desc().unwrap(),
            Absent,
            out.desc().unwrap()
        )
    )
    .unwrap();
    let got = Tensor::<Ascend, 4>::from_primitive(TensorPrimitive::Float(out)).into_data();
    let wrap = |t: AscendTensor| Tensor::<Ascend, 4>::from_primitive(TensorPrimitive::Float(t));
    let want = fused::flash_attention(wrap(q), wrap(k), wrap(v), None, opts(Some(0.25), false))
        .into_data();
    assert_close("all-false compressed mask", got, want, 0.0);
}
