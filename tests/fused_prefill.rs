//! Paged prefill attention (`fused::paged_prefill_attention`) on the emulated NPU, where it runs
//! `aclnnFusedInferAttentionScoreV3` over a block table: checked against dense causal attention
//! computed here on the host (f64, over each request's keys gathered by hand) and against the
//! composed default on burn-flex, on several requests with different prefix and chunk lengths
//! and GQA ratios, in f16 and bf16. Then the operator's refusals: through the mapping (a clear
//! error naming the rule) and each rule of the emulated operator by a raw aclnn call.

mod common;

use common::panic_message;

use std::ffi::CStr;

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Int, Tensor, TensorData};
use burn_ascend::acl::aclnn;
use burn_ascend::acl::handles::{Absent, IntArrayDesc, TensorListDesc};
use burn_ascend::acl::AclError;
use burn_ascend::emulator::{aclnn_launches_of, host_to_device_copies, work_counters};
use burn_ascend::fused::{self, PrefillLens};
use burn_ascend::{Ascend, AscendDevice, AscendTensor};
use burn_flex::Flex;
use common::paged::{shuffled_block_table, values};
use serial_test::serial;

fn ascend() -> AscendDevice {
    common::device()
}

/// A prefill call: requests `(prefix, chunk)` over a cache of `pages` pages of `page_size`.
struct Case {
    requests: Vec<(usize, usize)>,
    q_heads: usize,
    kv_heads: usize,
    dim: usize,
    page_size: usize,
    pages: usize,
    dtype: DType,
}

type Operands<B> = (Tensor<B, 3>, Tensor<B, 3>, Tensor<B, 3>, Tensor<B, 2, Int>);

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
        let (hq, hkv, d) = (self.q_heads, self.kv_heads, self.dim);
        let q = round(values(self.tokens() * hq * d, 1));
        let k = round(values(slots * hkv * d, 2));
        let v = round(values(slots * hkv * d, 3));
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
        1.0 / (self.dim as f32).sqrt()
    }

    /// Dense causal attention of each chunk over its request's keys, in f64.
    fn reference(&self, x: &Inputs) -> Vec<f64> {
        let (hq, hkv, d, ps) = (self.q_heads, self.kv_heads, self.dim, self.page_size);
        let mut out = Vec::new();
        let mut row = 0;
        for (r, &(prefix, chunk)) in self.requests.iter().enumerate() {
            let slot = |j: usize| x.table[r * x.width + j / ps] as usize * ps + j % ps;
            for i in 0..chunk {
                let seen = prefix + i + 1;
                for h in 0..hq {
                    let kh = h / (hq / hkv);
                    let qr = &x.q[((row + i) * hq + h) * d..][..d];
                    let scores: Vec<f64> = (0..seen)
                        .map(|j| {
                            let kr = &x.k[(slot(j) * hkv + kh) * d..][..d];
                            qr.iter().zip(kr).map(|(a, b)| (a * b) as f64).sum::<f64>()
                                * self.scale() as f64
                        })
                        .collect();
                    let top = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
                    let z: f64 = e.iter().sum();
                    for c in 0..d {
                        out.push(
                            (0..seen)
                                .map(|j| e[j] * x.v[(slot(j) * hkv + kh) * d + c] as f64)
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

    /// q, the key and value caches and the block table on `d`.
    fn operands<B: burn_ascend::FusedOps>(
        &self,
        x: &Inputs,
        dtype: DType,
        d: &B::Device,
    ) -> Operands<B> {
        let slots = self.pages * self.page_size;
        let float = |v: &[f32], shape: [usize; 3]| {
            Tensor::<B, 3>::from_data(TensorData::new(v.to_vec(), shape), (d, DType::F32))
                .cast(dtype)
        };
        (
            float(&x.q, [self.tokens(), self.q_heads, self.dim]),
            float(&x.k, [slots, self.kv_heads, self.dim]),
            float(&x.v, [slots, self.kv_heads, self.dim]),
            Tensor::<B, 2, Int>::from_data(
                TensorData::new(x.table.clone(), [self.requests.len(), x.width]),
                (d, DType::I32),
            ),
        )
    }

    fn call<B: burn_ascend::FusedOps>(&self, x: &Inputs, o: &Operands<B>) -> Tensor<B, 3> {
        fused::paged_prefill_attention(
            o.0.clone(),
            o.1.clone(),
            o.2.clone(),
            o.3.clone(),
            PrefillLens {
                q_lens: &x.q_lens,
                kv_lens: &x.kv_lens,
                page_size: self.page_size,
            },
            self.scale(),
        )
    }

    fn run<B: burn_ascend::FusedOps>(&self, x: &Inputs, dtype: DType, d: &B::Device) -> Vec<f64> {
        let out = self.call(x, &self.operands::<B>(x, dtype, d));
        assert_eq!(out.dims(), [self.tokens(), self.q_heads, self.dim]);
        out.cast(DType::F32).into_data().iter::<f64>().collect()
    }

    fn check(&self) {
        let x = self.inputs();
        let want = self.reference(&x);
        let got = self.run::<Ascend>(&x, self.dtype, &ascend());
        let composed = self.run::<Flex>(&x, DType::F32, &Default::default());
        // The operator takes probabilities in f16/bf16 before the second matmul and writes in
        // that type: a few units of its last place on outputs below 1.
        let tol = if self.dtype == DType::BF16 {
            2e-2
        } else {
            3e-3
        };
        for (what, got) in [("Ascend", &got), ("composed on burn-flex", &composed)] {
            assert_eq!(got.len(), want.len(), "{what}");
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                let tol = if what == "Ascend" { tol } else { 1e-5 };
                assert!(
                    (a - b).abs() <= tol,
                    "{what}, {:?} {:?}: element {i} is {a}, dense attention gives {b}",
                    self.dtype,
                    self.requests
                );
            }
        }
    }
}

fn case(requests: &[(usize, usize)], q_heads: usize, kv_heads: usize, dtype: DType) -> Case {
    Case {
        requests: requests.to_vec(),
        q_heads,
        kv_heads,
        dim: 16,
        page_size: 128,
        pages: 12,
        dtype,
    }
}

#[test]
#[serial]
fn paged_prefill_matches_dense_causal_attention_over_the_pages() {
    // First chunks, chunks after a prefix inside a page and across pages, a one-token chunk.
    let requests = [(0, 7), (125, 9), (256, 1), (40, 150)];
    for dtype in [DType::F16, DType::BF16] {
        for (hq, hkv) in [(4, 2), (8, 2), (2, 2), (4, 1)] {
            case(&requests, hq, hkv, dtype).check();
        }
    }
}

#[test]
#[serial]
fn paged_prefill_takes_pages_of_256_and_head_dims_of_64() {
    Case {
        requests: vec![(300, 20), (0, 33)],
        q_heads: 4,
        kv_heads: 2,
        dim: 64,
        page_size: 256,
        pages: 4,
        dtype: DType::F16,
    }
    .check();
}

/// The compressed causal mask is a device constant: after the device's first paged prefill, a
/// call uploads nothing and launches the operator alone (it once built the mask on every call).
#[test]
#[serial]
fn the_causal_mask_is_built_once_per_device() {
    if common::skipped_on_npu("the_causal_mask_is_built_once_per_device") {
        return;
    }
    const FIA: &str = "aclnnFusedInferAttentionScoreV3";
    let (d, c) = (ascend(), case(&[(125, 9), (0, 7)], 4, 2, DType::F16));
    let x = c.inputs();
    let o = c.operands::<Ascend>(&x, DType::F16, &d);
    let first = c.call(&x, &o);
    Ascend::sync(&d).unwrap();
    let (uploads, work, fia) = (
        host_to_device_copies(),
        work_counters(),
        aclnn_launches_of(FIA),
    );
    let (second, third) = (c.call(&x, &o), c.call(&x, &o));
    Ascend::sync(&d).unwrap();
    let uploaded = host_to_device_copies().1 - uploads.1;
    let launched = work_counters().since(&work).aclnn_launches;
    assert_eq!(uploaded, 0, "bytes uploaded by two calls");
    assert_eq!(aclnn_launches_of(FIA) - fia, 2, "{FIA} launches");
    assert_eq!(launched, 2, "aclnn launches of two calls");
    for later in [second, third] {
        assert_eq!(later.into_data(), first.clone().into_data());
    }
}

#[test]
#[serial]
fn paged_prefill_refuses_what_the_operator_refuses() {
    let base = || case(&[(10, 6), (0, 4)], 4, 2, DType::F16);
    let run = |c: Case, dtype: DType| {
        let x = c.inputs();
        panic_message(move || {
            c.run::<Ascend>(&x, dtype, &ascend());
        })
    };
    let f32 = run(base(), DType::F32);
    assert!(
        f32.contains("paged_prefill_attention") && f32.contains("f16 or bf16"),
        "{f32}"
    );
    let small_pages = run(
        Case {
            page_size: 64,
            pages: 24,
            ..base()
        },
        DType::F16,
    );
    assert!(small_pages.contains("page size 64"), "{small_pages}");
    let narrow = run(Case { dim: 8, ..base() }, DType::F16);
    assert!(narrow.contains("head dim 8"), "{narrow}");
}

#[test]
#[serial(fault_device)]
fn a_block_table_entry_outside_the_cache_is_a_device_error() {
    let c = case(&[(10, 6)], 4, 2, DType::F16);
    let mut x = c.inputs();
    x.table[0] = c.pages as i32;
    // The fault stops its device until reset: a device of its own, reset after.
    common::reset_fault_device();
    let d = common::fault_device();
    let err = panic_message(|| {
        c.run::<Ascend>(&x, DType::F16, &d);
    });
    common::reset_fault_device();
    assert!(
        err.contains("AICORE")
            && (matches!(common::device(), AscendDevice::Npu(_))
                || err.contains("blockTable[0][0] = 12")),
        "{err}"
    );
}

// ---- the emulated operator's rules, by raw calls ----

/// A raw aclnnFusedInferAttentionScoreV3 call, valid as built by [`Raw::new`]; each rule test
/// changes one thing.
struct Raw {
    q: AscendTensor,
    k: AscendTensor,
    v: AscendTensor,
    mask: AscendTensor,
    table: AscendTensor,
    out: AscendTensor,
    q_ends: Vec<i64>,
    kv_lens: Vec<i64>,
    layout: &'static CStr,
    sparse_mode: i64,
    inner_precise: i64,
    block_size: i64,
    heads: i64,
    kv_heads: i64,
    lse: bool,
}

fn float_tensor(shape: [usize; 3], dtype: DType) -> AscendTensor {
    let n = shape.iter().product();
    Tensor::<Ascend, 3>::from_data(
        TensorData::new(values(n, 9), shape),
        (&ascend(), DType::F32),
    )
    .cast(dtype)
    .into_primitive()
    .tensor()
}

impl Raw {
    /// Two requests (chunks of 3 and 2 over 5 and 130 keys), 2 pages of 128, 4 query and 2 kv
    /// heads of 16.
    fn new(dtype: DType) -> Self {
        let d = ascend();
        let i = Tensor::<Ascend, 1, Int>::arange(0..2048, &d);
        let mask = i
            .clone()
            .unsqueeze_dim::<2>(0)
            .expand([2048, 2048])
            .greater(i.unsqueeze_dim::<2>(1).expand([2048, 2048]))
            .into_primitive();
        let table = Tensor::<Ascend, 2, Int>::from_data(
            TensorData::new(vec![2i32, 0, 1, 3], [2, 2]),
            (&d, DType::I32),
        )
        .into_primitive();
        Self {
            q: float_tensor([5, 4, 16], dtype),
            k: float_tensor([4, 128, 32], dtype),
            v: float_tensor([4, 128, 32], dtype),
            out: float_tensor([5, 4, 16], dtype),
            mask,
            table,
            q_ends: vec![3, 5],
            kv_lens: vec![5, 130],
            layout: c"TND",
            sparse_mode: 3,
            inner_precise: 0,
            block_size: 128,
            heads: 4,
            kv_heads: 2,
            lse: false,
        }
    }

    fn call(&self) -> Result<(), AclError> {
        let ctx = self.q.ctx();
        let api = ctx.bind();
        let keys = TensorListDesc::new(api, vec![self.k.desc_owned()?])?;
        let values = TensorListDesc::new(api, vec![self.v.desc_owned()?])?;
        let (ends, kv) = (
            IntArrayDesc::new(api, &self.q_ends)?,
            IntArrayDesc::new(api, &self.kv_lens)?,
        );
        aclnn!(
            &**ctx,
            aclnnFusedInferAttentionScoreV3(
                self.q.desc()?,
                &keys,
                &values,
                Absent,
                self.mask.desc()?,
                &ends,
                &kv,
                Absent,
                Absent,
                Absent,
                Absent,
                Absent,
                Absent,
                Absent,
                self.table.desc()?,
                Absent,
                Absent,
                Absent,
                Absent,
                Absent,
                Absent,
                Absent,
                Absent,
                Absent,
                Absent,
                Absent,
                Absent,
                self.heads,
                0.25f64,
                2147483647i64,
                0i64,
                self.layout,
                self.kv_heads,
                self.sparse_mode,
                self.inner_precise,
                self.block_size,
                0i64,
                self.lse,
                0i64,
                0i64,
                self.out.desc()?,
                Absent
            )
        )
    }

    fn refused(self, needle: &str) {
        let err = self
            .call()
            .expect_err("the operator refuses it")
            .to_string();
        assert!(
            err.contains("aclnnFusedInferAttentionScoreV3") && err.contains(needle),
            "{err}"
        );
    }
}

#[test]
#[serial]
fn the_emulated_operator_runs_the_valid_call() {
    Raw::new(DType::F16).call().expect("a valid call");
    Raw::new(DType::BF16).call().expect("a valid call");
}

#[test]
#[serial]
fn the_emulated_operator_enforces_its_rules() {
    Raw::new(DType::F32).refused("query dtype");
    Raw {
        layout: c"BSH",
        ..Raw::new(DType::F16)
    }
    .refused("inputLayout");
    Raw {
        sparse_mode: 0,
        ..Raw::new(DType::F16)
    }
    .refused("sparseMode 0");
    Raw {
        inner_precise: 2,
        ..Raw::new(DType::F16)
    }
    .refused("innerPrecise 2");
    Raw {
        lse: true,
        ..Raw::new(DType::F16)
    }
    .refused("softmaxLseFlag");
    // blockSize 64 with caches of 64-slot pages: 16-aligned, but not the 128 multiple.
    Raw {
        block_size: 64,
        k: float_tensor([8, 64, 32], DType::F16),
        v: float_tensor([8, 64, 32], DType::F16),
        ..Raw::new(DType::F16)
    }
    .refused("blockSize 64");
    Raw {
        block_size: 256,
        ..Raw::new(DType::F16)
    }
    .refused("blockSize 256");
    Raw {
        heads: 3,
        ..Raw::new(DType::F16)
    }
    .refused("numHeads 3");
    Raw {
        kv_heads: 3,
        ..Raw::new(DType::F16)
    }
    .refused("numKeyValueHeads 3");
    Raw {
        q: float_tensor([5, 4, 8], DType::F16),
        out: float_tensor([5, 4, 8], DType::F16),
        k: float_tensor([4, 128, 16], DType::F16),
        v: float_tensor([4, 128, 16], DType::F16),
        ..Raw::new(DType::F16)
    }
    .refused("head dim 8");
    Raw {
        q_ends: vec![3, 4],
        ..Raw::new(DType::F16)
    }
    .refused("actualSeqLengths ends at 4");
    Raw {
        kv_lens: vec![2, 130],
        ..Raw::new(DType::F16)
    }
    .refused("request 0");
    Raw {
        kv_lens: vec![5, 257],
        ..Raw::new(DType::F16)
    }
    .refused("request 1");
    Raw {
        q_ends: vec![3],
        ..Raw::new(DType::F16)
    }
    .refused("one entry per blockTable row");
    let mut wide = Raw::new(DType::F16);
    wide.mask =
        Tensor::<Ascend, 2, burn::tensor::Bool>::empty([1024, 1024], &ascend()).into_primitive();
    wide.refused("compressed [2048, 2048] mask");
    let mut f16_table = Raw::new(DType::F16);
    f16_table.table = float_tensor([2, 2, 1], DType::F16);
    f16_table.refused("blockTableOptional");
    let mut mixed = Raw::new(DType::F16);
    mixed.v = float_tensor([4, 128, 32], DType::BF16);
    mixed.refused("must share one type");
}
