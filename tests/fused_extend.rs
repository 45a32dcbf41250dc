//! Paged extend attention (`fused::extend_attention`) by the Ascend C extend kernels on the
//! emulated NPU (scores and values on the cube, softmax on the vector cores, per window of key
//! positions, each window's value product folded into a rescaled accumulator): checked against dense causal
//! attention computed here on the host (f64, over each request's keys gathered by hand through
//! its block-table row) and against the composed default on burn-flex, for GQA ratios 1, 4 and
//! 8, the MLA layout (values = the leading dims of the key rows), chunks of 1, 7 and 130 rows,
//! prefixes ending inside a page, several requests of different lengths, page sizes of 1, 4,
//! 16 and 128, a context of several windows, f16 and bf16; f32 on the vector path
//! (decode_attention's stage 1 in its extend form).

mod common;

use burn::tensor::{DType, Int, Tensor, TensorData};
use burn_ascend::emulator::work_counters;
use burn_ascend::fused::{self, ExtendLens, ExtendPath};
use burn_ascend::{Ascend, AscendDevice};
use burn_flex::Flex;
use common::paged::{shuffled_block_table, values};
use serial_test::serial;

fn ascend() -> AscendDevice {
    common::device()
}

/// An extend call: requests `(prefix, chunk)` over a cache of `pages` pages of `page_size`;
/// `mla`: no value rows, the values are the first `dv` dims of the key rows.
#[derive(Clone)]
struct Case {
    requests: Vec<(usize, usize)>,
    q_heads: usize,
    kv_heads: usize,
    dk: usize,
    dv: usize,
    mla: bool,
    page_size: usize,
    pages: usize,
    dtype: DType,
    /// Multiplies the softmax scale: peaked scores make each window's max matter.
    gain: f32,
}

struct Inputs {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    table: Vec<i32>,
    width: usize,
    q_lens: Vec<usize>,
    kv_lens: Vec<usize>,
}

impl Case {
    fn tokens(&self) -> usize {
        self.requests.iter().map(|r| r.1).sum()
    }

    /// Values rounded to the case's dtype (both sides read the same numbers), pages handed out
    /// in a shuffled order.
    fn inputs(&self) -> Inputs {
        let round = |v: Vec<f32>| -> Vec<f32> {
            TensorData::new(v.clone(), [v.len()])
                .convert_dtype(self.dtype)
                .convert::<f32>()
                .to_vec()
                .unwrap()
        };
        let slots = self.pages * self.page_size;
        let (hq, hkv) = (self.q_heads, self.kv_heads);
        let q = round(values(self.tokens() * hq * self.dk, 1));
        let k = round(values(slots * hkv * self.dk, 2));
        let v = round(values(slots * hkv * self.dv, 3));
        let (table, width) = shuffled_block_table(&self.requests, self.page_size, self.pages);
        Inputs {
            q,
            k,
            v,
            table,
            width,
            q_lens: self.requests.iter().map(|r| r.1).collect(),
            kv_lens: self.requests.iter().map(|r| r.0 + r.1).collect(),
        }
    }

    fn scale(&self) -> f32 {
        self.gain / (self.dk as f32).sqrt()
    }

    /// Value `c` of the cached token at `slot` for kv head `kh`.
    fn value(&self, x: &Inputs, slot: usize, kh: usize, c: usize) -> f32 {
        if self.mla {
            x.k[(slot * self.kv_heads + kh) * self.dk + c]
        } else {
            x.v[(slot * self.kv_heads + kh) * self.dv + c]
        }
    }

    /// Dense causal attention of each chunk over its request's keys, in f64.
    fn reference(&self, x: &Inputs) -> Vec<f64> {
        let (hq, hkv, dk, ps) = (self.q_heads, self.kv_heads, self.dk, self.page_size);
        let mut out = Vec::new();
        let mut row = 0;
        for (r, &(prefix, chunk)) in self.requests.iter().enumerate() {
            let slot = |j: usize| x.table[r * x.width + j / ps] as usize * ps + j % ps;
            for i in 0..chunk {
                let seen = prefix + i + 1;
                for h in 0..hq {
                    let kh = h / (hq / hkv);
                    let qr = &x.q[((row + i) * hq + h) * dk..][..dk];
                    let scores: Vec<f64> = (0..seen)
                        .map(|j| {
                            let kr = &x.k[(slot(j) * hkv + kh) * dk..][..dk];
                            qr.iter().zip(kr).map(|(a, b)| (a * b) as f64).sum::<f64>()
                                * self.scale() as f64
                        })
                        .collect();
                    let top = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
                    let z: f64 = e.iter().sum();
                    for c in 0..self.dv {
                        out.push(
                            (0..seen)
                                .map(|j| e[j] * self.value(x, slot(j), kh, c) as f64)
                                .sum::<f64>()
                                / z,
                        );
                    }
                }
            }
            row += chunk;
        }
        out
    }

    fn run<B: burn_ascend::FusedOps>(
        &self,
        x: &Inputs,
        dtype: DType,
        d: &B::Device,
        path: Option<ExtendPath>,
    ) -> Vec<f64> {
        let slots = self.pages * self.page_size;
        let float = |v: &[f32], shape: [usize; 3]| {
            Tensor::<B, 3>::from_data(TensorData::new(v.to_vec(), shape), (d, DType::F32))
                .cast(dtype)
        };
        let out = fused::extend_attention(
            float(&x.q, [self.tokens(), self.q_heads, self.dk]),
            float(&x.k, [slots, self.kv_heads, self.dk]),
            (!self.mla).then(|| float(&x.v, [slots, self.kv_heads, self.dv])),
            Tensor::<B, 2, Int>::from_data(
                TensorData::new(x.table.clone(), [self.requests.len(), x.width]),
                (d, DType::I32),
            ),
            ExtendLens {
                q_lens: &x.q_lens,
                kv_lens: &x.kv_lens,
                page_size: self.page_size,
                value_dim: self.dv,
            },
            self.scale(),
            path,
        );
        assert_eq!(out.dims(), [self.tokens(), self.q_heads, self.dv]);
        assert_eq!(out.dtype(), dtype);
        out.cast(DType::F32).into_data().iter::<f64>().collect()
    }

    /// The kernels and the composed default on burn-flex against the dense reference.
    fn check(&self) {
        self.check_on(&self.inputs());
    }

    fn check_on(&self, x: &Inputs) {
        let want = self.reference(x);
        let got = self.run::<Ascend>(x, self.dtype, &ascend(), Some(ExtendPath::Kernels));
        let composed = self.run::<Flex>(x, DType::F32, &Default::default(), None);
        // The probabilities enter the value product in f16/bf16, the output is written in it:
        // a few units of its last place on outputs below 1.
        let tol = match self.dtype {
            DType::BF16 => 2e-2,
            DType::F16 => 3e-3,
            _ => 1e-4,
        };
        for (what, got, tol) in [
            ("Ascend", &got, tol),
            ("composed on burn-flex", &composed, 1e-5),
        ] {
            assert_eq!(got.len(), want.len(), "{what}");
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (a - b).abs() <= tol,
                    "{what}, {:?} {:?} HQ {} HKV {} Dk {} Dv {} pages of {}: element {i} is {a}, dense attention gives {b}",
                    self.dtype,
                    self.requests,
                    self.q_heads,
                    self.kv_heads,
                    self.dk,
                    self.dv,
                    self.page_size
                );
            }
        }
    }
}

fn gqa(
    requests: &[(usize, usize)],
    q_heads: usize,
    kv_heads: usize,
    page_size: usize,
    dtype: DType,
) -> Case {
    let slots: usize = requests
        .iter()
        .map(|&(p, c)| (p + c).div_ceil(page_size) + 1)
        .sum();
    Case {
        requests: requests.to_vec(),
        q_heads,
        kv_heads,
        dk: 32,
        dv: 32,
        mla: false,
        page_size,
        pages: slots,
        dtype,
        gain: 1.0,
    }
}

#[test]
#[serial]
fn extend_kernels_match_dense_causal_attention_for_gqa_ratios_1_4_8() {
    // First chunks, a chunk after a prefix ending inside a page, a one-token chunk, a chunk of
    // more than 128 rows, in one call.
    let requests = [(0, 7), (125, 9), (256, 1), (40, 130)];
    for dtype in [DType::F16, DType::BF16] {
        for (hq, hkv) in [(2, 2), (8, 2), (8, 1)] {
            gqa(&requests, hq, hkv, 128, dtype).check();
        }
    }
}

#[test]
#[serial]
fn extend_kernels_take_any_page_size() {
    // Pages of 4 and 16: key tiles span several pages; prefixes end inside a page.
    for page in [4, 16] {
        gqa(&[(5, 7), (0, 1), (33, 20)], 4, 1, page, DType::F16).check();
    }
    gqa(&[(9, 3)], 4, 2, 1, DType::BF16).check();
}

#[test]
#[serial]
fn extend_kernels_take_odd_head_dims_groups_and_empty_chunks() {
    // Head dims off the 16-element fractal, a group of 3, a request without rows in the step.
    for dtype in [DType::F16, DType::F32] {
        Case {
            dk: 24,
            dv: 24,
            ..gqa(&[(5, 7), (3, 0), (20, 13)], 6, 2, 4, dtype)
        }
        .check();
    }
}

#[test]
#[serial]
fn extend_kernels_take_the_mla_layout() {
    // DeepSeek's fixture dims (kv_lora_rank 32 + rope 16: key rows of 48, values the first 32)
    // and its real dims (576 / 512), one KV head.
    for (hq, dk, dv, page) in [(4, 48, 32, 4), (16, 576, 512, 128), (3, 48, 32, 16)] {
        for dtype in [DType::F16, DType::BF16] {
            Case {
                requests: vec![(3, 7), (0, 1), (130, 2)],
                q_heads: hq,
                kv_heads: 1,
                dk,
                dv,
                mla: true,
                page_size: page,
                pages: 140usize.div_ceil(page) + 6,
                dtype,
                gain: 1.0,
            }
            .check();
        }
    }
}

#[test]
#[serial]
fn extend_kernels_merge_several_windows_of_a_long_context() {
    // A window holds at most 8192 positions: 16400 cached tokens take three, folded into the
    // accumulator one after another; the short request has keys in the first window only.
    let c = Case {
        gain: 4.0,
        ..gqa(&[(16390, 10), (3, 2)], 2, 1, 128, DType::F16)
    };
    let mut x = c.inputs();
    // Keys of the second window twice, of the third four times the first's (exact in f16): each
    // window raises the running max, so the accumulator is rescaled at each fold.
    for pos in 8192..16400 {
        let slot = x.table[pos / 128] as usize * 128 + pos % 128;
        let factor = if pos < 16384 { 2.0 } else { 4.0 };
        for e in &mut x.k[slot * 32..(slot + 1) * 32] {
            *e *= factor;
        }
    }
    c.check_on(&x);
}

#[test]
#[serial]
fn extend_kernels_in_f32_take_the_vector_path() {
    // decode_attention's stage 1 in its extend form: each row's keys through the block table,
    // cut into splits (one long row over 300 positions takes several), merged by stage 2.
    gqa(&[(5, 7), (0, 3), (300, 1)], 4, 2, 16, DType::F32).check();
    gqa(&[(40, 130)], 8, 1, 128, DType::F32).check();
    Case {
        requests: vec![(5, 4)],
        q_heads: 4,
        kv_heads: 1,
        dk: 48,
        dv: 32,
        mla: true,
        page_size: 4,
        pages: 4,
        dtype: DType::F32,
        gain: 1.0,
    }
    .check();
}

/// Ascend C kernels and aclnn operators one call launches on the emulated NPU.
fn launches(f: impl FnOnce()) -> (u64, u64) {
    use burn::tensor::backend::Backend;
    Ascend::sync(&ascend()).unwrap();
    let before = work_counters();
    f();
    Ascend::sync(&ascend()).unwrap();
    let w = work_counters().since(&before);
    (w.kernel_launches, w.aclnn_launches)
}

#[test]
#[serial]
fn the_device_model_chooses_between_the_operator_and_the_kernels() {
    if common::skipped_on_npu("the_device_model_chooses_between_the_operator_and_the_kernels") {
        return;
    }
    // Where both can run (GQA f16, pages of 128) the result is the same either way, and left to
    // itself the call takes the path the device model finds faster: here the operator, which
    // keeps the scores on chip (no kernel launched).
    let c = gqa(&[(125, 9), (0, 7)], 8, 2, 128, DType::F16);
    let x = c.inputs();
    let want = c.reference(&x);
    let plan = {
        let d = ascend();
        let float = |v: &[f32], shape: [usize; 3]| {
            Tensor::<Ascend, 3>::from_data(TensorData::new(v.to_vec(), shape), (&d, DType::F32))
                .cast(DType::F16)
                .into_primitive()
                .tensor()
        };
        let slots = c.pages * c.page_size;
        burn_ascend::ops::fused::extend_attention_plan(
            &float(&x.q, [c.tokens(), c.q_heads, c.dk]),
            &float(&x.k, [slots, c.kv_heads, c.dk]),
            Some(&float(&x.v, [slots, c.kv_heads, c.dv])),
            &Tensor::<Ascend, 2, Int>::from_data(
                TensorData::new(x.table.clone(), [c.requests.len(), x.width]),
                (&d, DType::I32),
            )
            .into_primitive(),
            &ExtendLens {
                q_lens: &x.q_lens,
                kv_lens: &x.kv_lens,
                page_size: c.page_size,
                value_dim: c.dv,
            },
            c.scale(),
        )
        .unwrap()
        .unwrap()
    };
    assert!(
        plan.estimate.fia_s < plan.estimate.kernels_s,
        "{:?}",
        plan.estimate
    );
    for (path, kernels) in [
        (None, 0),
        (Some(ExtendPath::Fused), 0),
        (Some(ExtendPath::Kernels), 4),
    ] {
        let mut got = Vec::new();
        let (k, aclnn) = launches(|| got = c.run::<Ascend>(&x, DType::F16, &ascend(), path));
        assert_eq!(k, kernels, "{path:?}: kernels launched");
        assert!(kernels > 0 || aclnn > 0, "{path:?}: the operator ran");
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() <= 3e-3, "{path:?}: {a} vs {b}");
        }
    }
    // MLA (the operator takes no cache without value rows) and f32 go to the kernels: scores,
    // softmax and values on the cube plus the finishing softmax; stage 1 and stage 2 on the
    // vector cores.
    let mla = Case {
        mla: true,
        kv_heads: 1,
        dv: 16,
        ..gqa(&[(3, 2)], 4, 1, 4, DType::F16)
    };
    let y = mla.inputs();
    let (k, _) = launches(|| drop(mla.run::<Ascend>(&y, DType::F16, &ascend(), None)));
    assert_eq!(k, 4, "MLA: kernels launched");
    let f32 = gqa(&[(5, 7)], 4, 2, 128, DType::F32);
    let z = f32.inputs();
    let (k, _) = launches(|| drop(f32.run::<Ascend>(&z, DType::F32, &ascend(), None)));
    assert_eq!(k, 2, "f32: kernels launched");
    let err = std::panic::catch_unwind(|| {
        mla.run::<Ascend>(&y, DType::F16, &ascend(), Some(ExtendPath::Fused));
    })
    .expect_err("the operator takes no MLA cache");
    let text = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        text.contains("extend_attention") && text.contains("MLA"),
        "{text}"
    );
}

#[test]
#[serial(fault_device)]
fn a_block_table_entry_outside_the_cache_is_a_device_error() {
    let c = gqa(&[(10, 6)], 4, 2, 16, DType::F16);
    let mut x = c.inputs();
    x.table[0] = c.pages as i32;
    common::reset_fault_device();
    let d = common::fault_device();
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        c.run::<Ascend>(&x, DType::F16, &d, Some(ExtendPath::Kernels));
    }))
    .expect_err("must fail");
    common::reset_fault_device();
    let text = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        text.contains("AICORE")
            && (matches!(common::device(), AscendDevice::Npu(_))
                || text.contains(&format!("blockTable[0][0] = {}", c.pages))),
        "{text}"
    );
}

#[test]
#[serial]
fn extend_attention_refuses_a_bad_call_naming_it() {
    let c = gqa(&[(10, 6)], 4, 2, 16, DType::F16);
    let x = c.inputs();
    // Chunk longer than its cached length.
    let bad = Case {
        requests: vec![(0, 6)],
        ..c.clone()
    };
    let mut y = bad.inputs();
    y.kv_lens = vec![5];
    y.table = x.table.clone();
    y.width = x.width;
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        bad.run::<Ascend>(&y, DType::F16, &ascend(), None);
    }))
    .expect_err("must fail");
    let text = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        text.contains("extend_attention") && text.contains("chunk at most its cached length"),
        "{text}"
    );
}

/// A prefill step's device memory does not grow with the square of its context (issue 23): a
/// chunk of 16 rows after 32752 cached tokens (4 query heads over one kv head, f16) runs through
/// the extend kernels (windows of 8192 positions, an accumulator per row) under a 10 MiB cap that
/// the composed path, which gathers every request's keys and values and materialises its
/// `[chunk, heads, context]` scores, exceeds; then both agree with the cap lifted.
#[test]
#[serial(fault_device)]
fn a_long_prefill_step_fits_a_memory_cap_the_composed_path_exceeds() {
    use burn_ascend::emulator::set_device_memory_limit;
    use burn_ascend::runtime::DeviceContext;
    if common::skipped_on_npu("a_long_prefill_step_fits_a_memory_cap_the_composed_path_exceeds") {
        return;
    }
    const CAP: u64 = 10 << 20;
    // The fault device, freshly reset: its own memory cap and a peak counted from zero, with
    // the tests that fault it kept off (`serial(fault_device)`).
    common::reset_fault_device();
    let device = common::fault_device();
    /// Gives the device back its capacity, even if an assertion failed.
    struct Restore(usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            set_device_memory_limit(self.0, 64 << 30);
        }
    }
    let _restore = Restore(device.index());
    let ctx = DeviceContext::get(&device.into()).unwrap();
    let case = gqa(&[(32752, 16)], 4, 1, 128, DType::F16);
    let x = case.inputs();
    let slots = case.pages * case.page_size;
    // Uploaded as f16 (no f32 copies): the device's peak is the inputs' and the calls'.
    let float = |v: &[f32], shape: [usize; 3]| {
        Tensor::<Ascend, 3>::from_data(
            TensorData::new(v.to_vec(), shape).convert_dtype(DType::F16),
            (&device, DType::F16),
        )
    };
    let q = float(&x.q, [case.tokens(), case.q_heads, case.dk]);
    let k = float(&x.k, [slots, case.kv_heads, case.dk]);
    let v = float(&x.v, [slots, case.kv_heads, case.dv]);
    let table = Tensor::<Ascend, 2, Int>::from_data(
        TensorData::new(x.table.clone(), [1, x.width]),
        (&device, DType::I32),
    );
    let lens = ExtendLens {
        q_lens: &x.q_lens,
        kv_lens: &x.kv_lens,
        page_size: case.page_size,
        value_dim: case.dv,
    };
    let composed = || {
        let out = fused::composed::extend_attention::<Ascend>(
            q.clone().into_primitive().tensor(),
            k.clone().into_primitive().tensor(),
            Some(v.clone().into_primitive().tensor()),
            table.clone().into_primitive(),
            lens,
            case.scale(),
        );
        Tensor::<Ascend, 3>::from_primitive(burn::tensor::TensorPrimitive::Float(out))
            .cast(DType::F32)
            .into_data()
    };
    ctx.release_cache().unwrap();
    set_device_memory_limit(device.index(), CAP);
    let got = fused::extend_attention(
        q.clone(),
        k.clone(),
        Some(v.clone()),
        table.clone(),
        lens,
        case.scale(),
        Some(ExtendPath::Kernels),
    )
    .cast(DType::F32)
    .into_data();
    let peak = ctx.memory_stats().peak_bytes_in_use as u64;
    assert!(peak < CAP, "peak {peak} bytes");
    ctx.release_cache().unwrap();
    let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(composed))
        .expect_err("the composed path fits the cap");
    let message = refused
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        message.contains("207001"),
        "not an allocation failure: {message}"
    );
    ctx.release_cache().unwrap();
    set_device_memory_limit(device.index(), 64 << 30);
    let want = composed();
    let worst = got
        .iter::<f32>()
        .zip(want.iter::<f32>())
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst < 2e-2, "worst difference {worst}");
}
