//! The paged KV-cache ops on the emulated NPU (their Ascend C kernels run by the emulation):
//! `alloc_extend`, the cache write `kv_cache_write` (against burn-flex's scatter of the joined
//! rows) and split-KV `decode_attention`, the first and last checked three ways on the same inputs:
//! the kernels on `Ascend`, the composed defaults on burn-flex, and a closed-form reference
//! computed here on the host (contract 4's per-token slot formula; dense softmax attention over
//! the gathered keys, and contract 5's per-split formula for stage 1). Seed sizes of the
//! fused-ops specification, the edge cases of both contracts, and the errors on bad inputs.
//!
//! Every test is serial (one lock, the fault-device tests too): the counting tests read the
//! global launch log and work counters, which the other tests would otherwise add to
//! concurrently.

mod common;

use common::panic_message;

use burn::tensor::{DType, Int, Tensor, TensorData, TensorPrimitive};
use burn_ascend::emulator::kernel_runner::{clear_launch_log, launch_log};
use burn_ascend::fused::{self, DecodeAttentionOptions, DecodePath};
use burn_ascend::{Ascend, AscendDevice, FusedOps};
use burn_ascend_suite::host_values::host_values;
use burn_flex::Flex;
use serial_test::serial;

fn ascend() -> AscendDevice {
    common::device()
}

fn flex() -> burn_flex::FlexDevice {
    Default::default()
}

/// A pseudo-random permutation of `0..n`.
fn permutation(n: usize, seed: u64) -> Vec<i64> {
    let mut keyed: Vec<(u64, i64)> = (0..n as u64)
        .map(|i| {
            (
                (i.wrapping_mul(2654435761) ^ seed).wrapping_mul(0x9E3779B97F4A7C15) >> 17,
                i as i64,
            )
        })
        .collect();
    keyed.sort();
    keyed.into_iter().map(|k| k.1).collect()
}

fn ints<B: burn::tensor::backend::Backend>(
    v: &[i64],
    dtype: DType,
    d: &B::Device,
) -> Tensor<B, 1, Int> {
    Tensor::from_data(
        TensorData::new(v.to_vec(), [v.len()]).convert_dtype(dtype),
        (d, dtype),
    )
}

fn floats(data: TensorData) -> Vec<f64> {
    data.iter::<f64>().collect()
}

fn to_i64(data: TensorData) -> Vec<i64> {
    data.convert::<i64>().to_vec::<i64>().unwrap()
}

/// `got` equals `want` within `tol * max(|want|, 1)`; infinities must match exactly.
fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        let ok = if b.is_infinite() {
            a == b
        } else {
            (a - b).abs() <= tol * b.abs().max(1.0)
        };
        assert!(ok, "{what}: element {i} is {a}, the reference gives {b}");
    }
}

// ---- alloc_extend ----

struct AllocCase {
    name: &'static str,
    prefix: Vec<i64>,
    seq: Vec<i64>,
    last: Vec<i64>,
    free: Vec<i64>,
    page_size: usize,
}

impl AllocCase {
    fn total(&self) -> usize {
        self.seq
            .iter()
            .zip(&self.prefix)
            .map(|(s, p)| (s - p) as usize)
            .sum()
    }

    /// Contract 4, token by token: `(out_slots, [pages needed, tokens extended])`.
    fn reference(&self) -> (Vec<i64>, Vec<i64>) {
        let ps = self.page_size as i64;
        let (mut slots, mut page_base) = (Vec::new(), 0i64);
        for b in 0..self.prefix.len() {
            let (p, s) = (self.prefix[b], self.seq[b]);
            let filled = (p + ps - 1) / ps;
            for j in p..s {
                slots.push(if j < filled * ps {
                    self.last[b] + 1 + (j - p)
                } else {
                    let at = page_base + j / ps - filled;
                    match self.free.get(at as usize) {
                        Some(page) => page * ps + j % ps,
                        None => -1,
                    }
                });
            }
            page_base += (s + ps - 1) / ps - filled;
        }
        (slots, vec![page_base, self.total() as i64])
    }

    fn run<B: FusedOps>(&self, dtype: DType, d: &B::Device) -> (Vec<i64>, Vec<i64>) {
        let out = fused::alloc_extend(
            ints::<B>(&self.prefix, dtype, d),
            ints::<B>(&self.seq, dtype, d),
            ints::<B>(&self.last, dtype, d),
            ints::<B>(&self.free, dtype, d),
            self.page_size,
            self.total(),
        );
        assert_eq!(out.slots.dtype(), dtype, "{}: slots dtype", self.name);
        (
            to_i64(out.slots.into_data()),
            to_i64(out.totals.into_data()),
        )
    }

    fn check(&self, dtype: DType) {
        let want = self.reference();
        let got = self.run::<Ascend>(dtype, &ascend());
        let composed = self.run::<Flex>(dtype, &flex());
        let what = format!("alloc_extend {} {dtype:?}", self.name);
        assert_eq!(got.0, want.0, "{what}: kernel slots vs the contract");
        assert_eq!(got.1, want.1, "{what}: kernel totals vs the contract");
        assert_eq!(composed.0, want.0, "{what}: composed slots vs the contract");
        assert_eq!(
            composed.1, want.1,
            "{what}: composed totals vs the contract"
        );
    }
}

fn shuffled_pages(n: usize, seed: u64) -> Vec<i64> {
    permutation(n, seed)
}

#[test]
#[serial]
fn alloc_extend_matches_the_contract_at_the_seed_size() {
    let case = AllocCase {
        name: "seed",
        prefix: vec![0, 0],
        seq: vec![1000, 1500],
        last: vec![0, 0],
        free: shuffled_pages(2048, 1),
        page_size: 128,
    };
    for dtype in [DType::I32, DType::I64] {
        case.check(dtype);
    }
}

#[test]
#[serial]
fn alloc_extend_covers_partial_whole_and_new_pages() {
    // Request 0 fills its partly filled last page (5..16 after last_loc), then takes a whole
    // page (16..32) and a new partial page (32..40); request 1's last page is full, so all its
    // tokens go to new pages; request 2 starts empty with a partial page; request 3 does not
    // grow.
    let case = AllocCase {
        name: "partial, whole and new pages",
        prefix: vec![5, 16, 0, 33],
        seq: vec![40, 20, 3, 33],
        last: vec![62 * 16 + 4, 77 * 16 + 15, 0, 9 * 16],
        free: shuffled_pages(40, 2),
        page_size: 16,
    };
    case.check(DType::I32);
    case.check(DType::I64);
}

#[test]
#[serial]
fn alloc_extend_decodes_one_token_per_request() {
    // s = p + 1 for 300 requests: some at page boundaries (a new page), most inside a page;
    // 300 slots spread over two blocks.
    let ps = 8i64;
    let prefix: Vec<i64> = (0..300).map(|b| (b * 37 % 97) as i64).collect();
    let case = AllocCase {
        name: "decode",
        seq: prefix.iter().map(|p| p + 1).collect(),
        last: prefix
            .iter()
            .enumerate()
            .map(|(b, p)| (b as i64 * 1000 + p - 1).max(0))
            .collect(),
        prefix,
        free: shuffled_pages(500, 3),
        page_size: ps as usize,
    };
    let (want, totals) = case.reference();
    assert!(
        totals[0] > 0 && totals[0] < 300,
        "some requests need a page, some do not"
    );
    assert!(want.iter().all(|&s| s >= 0));
    case.check(DType::I32);
}

#[test]
#[serial]
fn alloc_extend_reads_the_free_list_in_windows() {
    // Page size 1: every token takes a page, so a block walks hundreds of free-list entries.
    let case = AllocCase {
        name: "page size 1",
        prefix: vec![0, 3, 0],
        seq: vec![300, 13, 400],
        last: vec![0, 41, 0],
        free: shuffled_pages(800, 4),
        page_size: 1,
    };
    case.check(DType::I32);
}

#[test]
#[serial]
fn alloc_extend_computes_int64_slots_beyond_2_pow_31() {
    // Pages of 2^20 slots with page ids up to 4095: slots up to 2^32, only int64 holds them.
    let case = AllocCase {
        name: "int64 slots",
        prefix: vec![(1 << 20) - 2, 0],
        seq: vec![(1 << 20) + 3, 5],
        last: vec![(3i64 << 31) + (1 << 20) - 3, 0],
        free: vec![4095, 2049, 7],
        page_size: 1 << 20,
    };
    let (want, _) = case.reference();
    assert!(want.iter().any(|&s| s > i32::MAX as i64));
    case.check(DType::I64);
}

/// Ascend's kernel rejects what the contract rules out (an AI Core error naming the bad value,
/// see tests/kernel_checks.rs); the composed default computes the formula regardless and writes
/// -1 where it has no slot. Both are documented on `FusedOps::alloc_extend`.
fn kernel_rejects_composed_marks(case: &AllocCase, total: usize, want: Vec<i64>, needle: &str) {
    // The fault stops its device until reset: a device of its own, reset after.
    common::reset_fault_device();
    let d = common::fault_device();
    let got = fused::alloc_extend(
        ints::<Ascend>(&case.prefix, DType::I32, &d),
        ints::<Ascend>(&case.seq, DType::I32, &d),
        ints::<Ascend>(&case.last, DType::I32, &d),
        ints::<Ascend>(&case.free, DType::I32, &d),
        case.page_size,
        total,
    );
    let err = format!(
        "{:?}",
        got.slots
            .try_into_data()
            .expect_err(&format!("{}: the kernel rejects it", case.name))
    );
    common::reset_fault_device();
    assert!(
        err.contains("AICORE")
            && (matches!(common::device(), AscendDevice::Npu(_)) || err.contains(needle)),
        "{}: {err}",
        case.name
    );
    let composed = fused::alloc_extend(
        ints::<Flex>(&case.prefix, DType::I32, &flex()),
        ints::<Flex>(&case.seq, DType::I32, &flex()),
        ints::<Flex>(&case.last, DType::I32, &flex()),
        ints::<Flex>(&case.free, DType::I32, &flex()),
        case.page_size,
        total,
    );
    assert_eq!(
        to_i64(composed.slots.into_data()),
        want,
        "{}: composed",
        case.name
    );
}

#[test]
#[serial]
fn alloc_extend_rejects_lengths_short_of_extend_total() {
    // extend_total larger than the lengths add up to: the composed default writes -1 past them.
    let case = AllocCase {
        name: "short lengths",
        prefix: vec![2, 0],
        seq: vec![9, 4],
        last: vec![49, 0],
        free: shuffled_pages(8, 6),
        page_size: 4,
    };
    let (mut want, _) = case.reference();
    want.extend([-1; 300]);
    kernel_rejects_composed_marks(
        &case,
        case.total() + 300,
        want,
        "alloc_extend: the lengths add up to 11 new tokens, but out_slots holds 311",
    );
}

#[test]
#[serial]
fn alloc_extend_rejects_a_batch_past_the_free_list() {
    // 5 new pages needed, 3 in the list: the composed default marks the last two pages' slots
    // -1 and reports the need in its totals.
    let case = AllocCase {
        name: "shortage",
        prefix: vec![0, 0],
        seq: vec![6, 9],
        last: vec![0, 0],
        free: vec![10, 11, 12],
        page_size: 4,
    };
    let (want, totals) = case.reference();
    assert_eq!(totals, vec![5, 15]);
    assert_eq!(want.iter().filter(|&&s| s == -1).count(), 5);
    kernel_rejects_composed_marks(
        &case,
        case.total(),
        want,
        "alloc_extend: request 1 needs free-list entry 3, but free_pages lists 3 pages",
    );
    let empty = AllocCase {
        name: "no free pages",
        free: vec![],
        ..case
    };
    let (want, _) = empty.reference();
    kernel_rejects_composed_marks(
        &empty,
        empty.total(),
        want,
        "alloc_extend: request 0 needs free-list entry 0, but free_pages lists 0 pages",
    );
}

// ---- decode_attention ----

#[derive(Clone)]
struct DecodeCase {
    name: &'static str,
    lens: Vec<usize>,
    q_heads: usize,
    kv_heads: usize,
    dim_k: usize,
    dim_v: usize,
    /// No v_cache: values are the first dim_v dims of the key rows (MLA).
    mla: bool,
    dtype: DType,
    max_splits: usize,
    splits: Vec<i64>,
    cap: Option<f32>,
    /// The kernels to run (`None`: the device model's choice).
    path: Option<DecodePath>,
}

/// Stage 1's per-split results and stage 2's merged ones, as host vectors.
struct DecodeResult {
    out: Vec<f64>,
    lse: Vec<f64>,
    part_out: Vec<f64>,
    part_lse: Vec<f64>,
}

/// The inputs of a case: tensors' data (before the dtype conversion) and the index vectors.
struct DecodeInputs {
    q: TensorData,
    k: TensorData,
    v: Option<TensorData>,
    indptr: Vec<i64>,
    indices: Vec<i64>,
}

impl DecodeCase {
    fn batch(&self) -> usize {
        self.lens.len()
    }

    fn options(&self) -> DecodeAttentionOptions {
        DecodeAttentionOptions {
            max_kv_splits: self.max_splits,
            sm_scale: (self.dim_k as f32).powf(-0.5),
            logit_cap: self.cap,
            value_dim: self.dim_v,
            path: self.path,
        }
    }

    fn inputs(&self) -> DecodeInputs {
        let keys: usize = self.lens.iter().sum();
        // Cache rows beyond the keys, and the keys scattered over them.
        let slots = keys + 37;
        let mut indptr = vec![0i64];
        for l in &self.lens {
            indptr.push(indptr.last().unwrap() + *l as i64);
        }
        let b = self.batch();
        DecodeInputs {
            q: host_values(vec![b, self.q_heads, self.dim_k], 11),
            k: host_values(vec![slots, self.kv_heads, self.dim_k], 12),
            v: (!self.mla).then(|| host_values(vec![slots, self.kv_heads, self.dim_v], 13)),
            indptr,
            indices: permutation(slots, 5).into_iter().take(keys).collect(),
        }
    }

    fn run<B: FusedOps>(&self, inputs: &DecodeInputs, d: &B::Device) -> DecodeResult {
        let tensor = |data: &TensorData| -> TensorPrimitive<B> {
            Tensor::<B, 3>::from_data(data.clone().convert_dtype(self.dtype), (d, self.dtype))
                .into_primitive()
        };
        let out = B::decode_attention(
            tensor(&inputs.q).tensor(),
            tensor(&inputs.k).tensor(),
            inputs.v.as_ref().map(|v| tensor(v).tensor()),
            ints::<B>(&inputs.indptr, DType::I32, d).into_primitive(),
            ints::<B>(&inputs.indices, DType::I32, d).into_primitive(),
            ints::<B>(&self.splits, DType::I32, d).into_primitive(),
            self.options(),
        );
        let result = DecodeResult {
            out: floats(
                Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(out.out)).into_data(),
            ),
            lse: floats(
                Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(out.lse)).into_data(),
            ),
            part_out: floats(
                Tensor::<B, 4>::from_primitive(TensorPrimitive::Float(out.part_out)).into_data(),
            ),
            part_lse: floats(
                Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(out.part_lse)).into_data(),
            ),
        };
        let (b, h, s) = (self.batch(), self.q_heads, self.max_splits);
        assert_eq!(result.out.len(), b * h * self.dim_v);
        assert_eq!(result.part_out.len(), b * h * s * self.dim_v);
        assert_eq!(
            (result.lse.len(), result.part_lse.len()),
            (b * h, b * h * s)
        );
        result
    }

    /// Dense softmax attention over the gathered keys (out, lse) and contract 5's stage-1
    /// formula per split, in f64 from the inputs as the device holds them (in the case's dtype).
    fn reference(&self, inputs: &DecodeInputs) -> DecodeResult {
        let rounded = |d: &TensorData| floats(d.clone().convert_dtype(self.dtype));
        let (q, k) = (rounded(&inputs.q), rounded(&inputs.k));
        let v = inputs.v.as_ref().map(rounded);
        let (hq, hkv, dk, dv, s) = (
            self.q_heads,
            self.kv_heads,
            self.dim_k,
            self.dim_v,
            self.max_splits,
        );
        let scale = self.options().sm_scale as f64;
        let mut r = DecodeResult {
            out: vec![],
            lse: vec![],
            part_out: vec![],
            part_lse: vec![],
        };
        for b in 0..self.batch() {
            let keys = &inputs.indices[inputs.indptr[b] as usize..inputs.indptr[b + 1] as usize];
            for h in 0..hq {
                let kvh = h / (hq / hkv);
                let qv = &q[(b * hq + h) * dk..][..dk];
                let key = |slot: i64| &k[(slot as usize * hkv + kvh) * dk..][..dk];
                let value = |slot: i64| match &v {
                    Some(v) => &v[(slot as usize * hkv + kvh) * dv..][..dv],
                    None => &key(slot)[..dv],
                };
                let scores: Vec<f64> = keys
                    .iter()
                    .map(|&slot| {
                        let dot = scale * qv.iter().zip(key(slot)).map(|(a, b)| a * b).sum::<f64>();
                        self.cap.map_or(dot, |c| c as f64 * (dot / c as f64).tanh())
                    })
                    .collect();
                // No key (an empty split): zeros and -inf.
                let softmax = |range: std::ops::Range<usize>| -> (Vec<f64>, f64) {
                    if range.is_empty() {
                        return (vec![0.0; dv], f64::NEG_INFINITY);
                    }
                    let m = scores[range.clone()]
                        .iter()
                        .cloned()
                        .fold(f64::NEG_INFINITY, f64::max);
                    let z: f64 = scores[range.clone()].iter().map(|x| (x - m).exp()).sum();
                    let mut o = vec![0.0; dv];
                    for j in range {
                        let p = (scores[j] - m).exp() / z;
                        for (acc, x) in o.iter_mut().zip(value(keys[j])) {
                            *acc += p * x;
                        }
                    }
                    (o, m + z.ln())
                };
                let (o, l) = softmax(0..keys.len());
                r.out.extend(o);
                r.lse.push(l);
                let n = self.splits[b] as usize;
                let per = keys.len().div_ceil(n);
                for c in 0..s {
                    let (from, to) = ((c * per).min(keys.len()), ((c + 1) * per).min(keys.len()));
                    let (o, l) = softmax(if c < n { from..to } else { 0..0 });
                    r.part_out.extend(o);
                    r.part_lse.push(l);
                }
            }
        }
        r
    }

    /// The path `decode_attention` takes for these inputs on `Ascend`: its public plan.
    fn ascend_path(&self, inputs: &DecodeInputs) -> DecodePath {
        let d = ascend();
        let tensor = |data: &TensorData| {
            Tensor::<Ascend, 3>::from_data(data.clone().convert_dtype(self.dtype), (&d, self.dtype))
                .into_primitive()
                .tensor()
        };
        let int = |v: &[i64]| ints::<Ascend>(v, DType::I32, &d).into_primitive();
        let plan = burn_ascend::ops::fused::decode_attention_plan(
            &tensor(&inputs.q),
            &tensor(&inputs.k),
            inputs.v.as_ref().map(tensor).as_deref(),
            &int(&inputs.indptr),
            &int(&inputs.indices),
            &int(&self.splits),
            &self.options(),
        )
        .expect("a valid call has a plan");
        plan.map_or(DecodePath::Vector, |p| p.path())
    }

    fn check(&self) {
        self.check_with(&self.inputs());
    }

    fn check_with(&self, inputs: &DecodeInputs) {
        let want = self.reference(inputs);
        let path = self.ascend_path(inputs);
        let got = self.run::<Ascend>(inputs, &ascend());
        let composed = self.run::<Flex>(inputs, &flex());
        let what = format!("decode_attention {} {:?}", self.name, self.dtype);
        let out_tol = match self.dtype {
            DType::BF16 => 1e-2,
            DType::F16 => 2e-3,
            _ => 2e-5,
        };
        // f32 statistics: the kernel accumulates each dot product and the softmax in f32 like
        // the reference's rounding allows; burn-flex's blocked f32 matmul drifts a little more.
        // The cube path's value product takes the probabilities in q's dtype: each is off by
        // its rounding (relative 2^-9 for bf16, 2^-12 for half), so part_out = sum p v is off
        // by at most that times max |v| (allowed twice over).
        let max_v = floats(inputs.v.clone().unwrap_or_else(|| inputs.k.clone()))
            .iter()
            .fold(1.0f64, |m, x| m.max(x.abs()));
        let part_tol = match (path, self.dtype) {
            (DecodePath::Cube, DType::BF16) => 2f64.powi(-8) * max_v,
            (DecodePath::Cube, _) => 2f64.powi(-11) * max_v,
            (DecodePath::Vector, _) => 1e-4,
        };
        // out adds its own rounding to q's dtype to part_out's error.
        let kernel_out_tol = match path {
            DecodePath::Cube => out_tol + part_tol,
            DecodePath::Vector => out_tol,
        };
        for (side, r, tol, part_tol, out_tol) in [
            ("kernel", &got, 1e-4, part_tol, kernel_out_tol),
            ("composed", &composed, 5e-4, 5e-4, out_tol),
        ] {
            let what = format!("{what} ({path:?} path)");
            assert_close(&format!("{what}: {side} out"), &r.out, &want.out, out_tol);
            assert_close(&format!("{what}: {side} lse"), &r.lse, &want.lse, tol);
            let part_out = format!("{what}: {side} part_out");
            assert_close(&part_out, &r.part_out, &want.part_out, part_tol);
            let part_lse = format!("{what}: {side} part_lse");
            assert_close(&part_lse, &r.part_lse, &want.part_lse, tol);
        }
        assert_close(
            &format!("{what}: kernel vs composed out"),
            &got.out,
            &composed.out,
            kernel_out_tol,
        );
    }
}

fn gqa(name: &'static str, batch: usize, len: usize, dtype: DType) -> DecodeCase {
    DecodeCase {
        name,
        lens: vec![len; batch],
        q_heads: 32,
        kv_heads: 8,
        dim_k: 128,
        dim_v: 128,
        mla: false,
        dtype,
        max_splits: 4,
        splits: vec![4; batch],
        cap: None,
        path: None,
    }
}

#[test]
#[serial]
fn decode_attention_matches_dense_attention_for_the_mla_seed() {
    DecodeCase {
        name: "MLA 576/512 seed",
        lens: vec![128],
        q_heads: 32,
        kv_heads: 1,
        dim_k: 576,
        dim_v: 512,
        mla: true,
        dtype: DType::BF16,
        max_splits: 4,
        splits: vec![4],
        cap: None,
        path: None,
    }
    .check();
}

#[test]
#[serial]
fn decode_attention_matches_dense_attention_for_the_gqa_seeds() {
    gqa("GQA B=1 S=128", 1, 128, DType::BF16).check();
    gqa("GQA B=8 S=128", 8, 128, DType::BF16).check();
    gqa("GQA B=1 S=1024", 1, 1024, DType::F16).check();
    gqa("GQA B=8 S=1024", 8, 1024, DType::BF16).check();
}

#[test]
#[serial]
fn decode_attention_handles_mha_mla_288_and_every_dtype() {
    let mha = DecodeCase {
        name: "MHA",
        lens: vec![5, 17, 1],
        q_heads: 4,
        kv_heads: 4,
        dim_k: 64,
        dim_v: 64,
        mla: false,
        dtype: DType::F32,
        max_splits: 2,
        splits: vec![2, 2, 2],
        cap: None,
        path: None,
    };
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        DecodeCase {
            dtype,
            ..mha.clone()
        }
        .check();
    }
    DecodeCase {
        name: "MLA 288/256",
        lens: vec![33, 70],
        q_heads: 16,
        kv_heads: 1,
        dim_k: 288,
        dim_v: 256,
        mla: true,
        dtype: DType::F16,
        max_splits: 8,
        splits: vec![8, 3],
        cap: None,
        path: None,
    }
    .check();
    // Rows of 64 splits x 1024 values do not fit the unified buffer: stage 2 merges them in
    // column chunks.
    DecodeCase {
        name: "wide rows, many splits",
        lens: vec![200],
        q_heads: 2,
        kv_heads: 1,
        dim_k: 64,
        dim_v: 1024,
        mla: false,
        dtype: DType::F32,
        max_splits: 64,
        splits: vec![64],
        cap: None,
        path: None,
    }
    .check();
    // Head dims that are not whole 32-byte blocks: the rows move with padded copies.
    DecodeCase {
        name: "unaligned head dims",
        lens: vec![19, 4],
        q_heads: 6,
        kv_heads: 2,
        dim_k: 72,
        dim_v: 40,
        mla: false,
        dtype: DType::F16,
        max_splits: 3,
        splits: vec![3, 1],
        cap: None,
        path: None,
    }
    .check();
}

#[test]
#[serial]
fn decode_attention_handles_short_empty_and_uneven_splits() {
    let base = DecodeCase {
        name: "one key, three empty splits",
        lens: vec![1],
        q_heads: 8,
        kv_heads: 2,
        dim_k: 64,
        dim_v: 64,
        mla: false,
        dtype: DType::F32,
        max_splits: 4,
        splits: vec![4],
        cap: None,
        path: None,
    };
    base.check();
    // 10 keys in 3 splits: 4, 4, 2; 5 keys in 4 splits: 2, 2, 1 and an empty one; 23 keys in
    // 4 splits of 6; 7 keys in one split.
    DecodeCase {
        name: "uneven splits",
        lens: vec![10, 5, 23, 7],
        splits: vec![3, 4, 4, 1],
        ..base.clone()
    }
    .check();
    let empty = DecodeCase {
        name: "empty split",
        lens: vec![5],
        ..base.clone()
    };
    let r = empty.run::<Ascend>(&empty.inputs(), &ascend());
    assert_eq!(
        r.part_lse[3],
        f64::NEG_INFINITY,
        "split 3 of 5 keys in 4 splits is empty"
    );
    assert!(r.part_out[3 * 64..4 * 64].iter().all(|&x| x == 0.0));
}

#[test]
#[serial]
fn decode_attention_stays_finite_across_large_score_gaps() {
    // The first key scores 160 and the rest about 30 at most: key tiles after the first have
    // maxima more than 88 below the running one, where exp(m_old - m_tile) would overflow f32.
    let case = DecodeCase {
        name: "large score gaps",
        lens: vec![600],
        q_heads: 1,
        kv_heads: 1,
        dim_k: 8,
        dim_v: 8,
        mla: false,
        dtype: DType::F32,
        max_splits: 1,
        splits: vec![1],
        cap: None,
        path: None,
    };
    let mut inputs = case.inputs();
    inputs.q = TensorData::new(vec![1.0f32; 8], [1, 1, 8]);
    let mut k: Vec<f32> = inputs.k.to_vec().unwrap();
    let first = inputs.indices[0] as usize;
    // q . k = 8x, scaled by 8^-0.5: a score of 160 for x = 160 / sqrt(8).
    k[first * 8..][..8].fill(160.0 / 8f32.sqrt());
    inputs.k = TensorData::new(k, inputs.k.shape.clone());
    let want = case.reference(&inputs);
    assert!(
        want.lse[0] > 150.0,
        "the first key dominates: {}",
        want.lse[0]
    );
    case.check_with(&inputs);
}

#[test]
#[serial]
fn decode_attention_applies_the_logit_cap() {
    let capped = DecodeCase {
        name: "logit cap",
        lens: vec![40, 9],
        q_heads: 8,
        kv_heads: 2,
        dim_k: 128,
        dim_v: 128,
        mla: false,
        dtype: DType::F32,
        max_splits: 2,
        splits: vec![2, 2],
        cap: Some(2.0),
        path: None,
    };
    capped.check();
    DecodeCase {
        dtype: DType::BF16,
        ..capped.clone()
    }
    .check();
    // The cap changes the result: the uncapped reference differs.
    let inputs = capped.inputs();
    let uncapped = DecodeCase {
        cap: None,
        path: None,
        ..capped.clone()
    }
    .reference(&inputs);
    let got = capped.run::<Ascend>(&inputs, &ascend());
    let gap = got
        .lse
        .iter()
        .zip(&uncapped.lse)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(gap > 0.5, "a cap of 2 must change the scores (gap {gap})");
}

/// MLA 576/512 over two requests of 37 and 5 keys: 10, 10, 10 and 7 keys in 4 splits, and 3
/// and 2 keys with two splits past the request's count.
fn mla_cube(dtype: DType) -> DecodeCase {
    DecodeCase {
        name: "MLA 576/512 cube",
        lens: vec![37, 5],
        q_heads: 16,
        kv_heads: 1,
        dim_k: 576,
        dim_v: 512,
        mla: true,
        dtype,
        max_splits: 4,
        splits: vec![4, 2],
        cap: None,
        path: Some(DecodePath::Cube),
    }
}

#[test]
#[serial]
fn decode_attention_cube_path_matches_dense_attention() {
    for dtype in [DType::BF16, DType::F16] {
        mla_cube(dtype).check();
    }
    // MLA 288/256 with the logit cap, 8 splits of a short and a long request.
    DecodeCase {
        name: "MLA 288/256 cube, capped",
        lens: vec![33, 70],
        q_heads: 16,
        kv_heads: 1,
        dim_k: 288,
        dim_v: 256,
        mla: true,
        dtype: DType::F16,
        max_splits: 8,
        splits: vec![8, 3],
        cap: Some(2.0),
        path: Some(DecodePath::Cube),
    }
    .check();
    // GQA (4 heads per group, values from v_cache) with uneven splits: 5 keys in 4 splits are
    // 2, 2, 1 and an empty one; 150 keys cross the key tiles of both cube kernels.
    let gqa_cube = DecodeCase {
        name: "GQA cube, uneven splits",
        lens: vec![5, 150, 10],
        splits: vec![4, 3, 1],
        cap: Some(30.0),
        path: Some(DecodePath::Cube),
        ..gqa("", 3, 0, DType::BF16)
    };
    gqa_cube.check();
    // Head dims that are not whole fractals.
    DecodeCase {
        name: "unaligned head dims cube",
        lens: vec![19, 4],
        q_heads: 6,
        kv_heads: 2,
        dim_k: 72,
        dim_v: 40,
        mla: false,
        dtype: DType::F16,
        max_splits: 3,
        splits: vec![3, 1],
        cap: None,
        path: Some(DecodePath::Cube),
    }
    .check();
    // kv_indices past Nd2NzParams' uint16 source pitch (the entries after the requests' are
    // never read): the value product copies the probabilities one head row at a time.
    let long = DecodeCase {
        name: "cube, 70000 entries of kv_indices",
        lens: vec![20, 7],
        q_heads: 4,
        kv_heads: 1,
        dim_k: 32,
        dim_v: 32,
        mla: false,
        dtype: DType::F16,
        max_splits: 2,
        splits: vec![2, 1],
        cap: None,
        path: Some(DecodePath::Cube),
    };
    let mut inputs = long.inputs();
    inputs.indices.resize(70_000, 0);
    long.check_with(&inputs);
    // The empty split within the count: lse -inf and zeros, as on the vector path.
    let r = gqa_cube.run::<Ascend>(&gqa_cube.inputs(), &ascend());
    let dv = 128;
    assert_eq!(
        r.part_lse[3],
        f64::NEG_INFINITY,
        "split 3 of request 0 is empty"
    );
    assert!(r.part_out[3 * dv..4 * dv].iter().all(|&x| x == 0.0));
}

/// 65 heads per group, Dv 512: the value product's L0C holds 64 heads' accumulators, so two head
/// tiles of 33 and 32 heads. Mmad lays each tile's result out in L0C by its own head count
/// rounded up to 16 (48 and 32 rows), and Fixpipe must read the second so.
#[test]
#[serial]
fn decode_attention_cube_path_reads_a_short_last_head_tile_by_its_layout() {
    DecodeCase {
        name: "MLA 576/512 cube, 65 heads per group",
        lens: vec![21, 9],
        q_heads: 65,
        kv_heads: 1,
        dim_k: 576,
        dim_v: 512,
        mla: true,
        dtype: DType::BF16,
        max_splits: 2,
        splits: vec![2, 1],
        cap: None,
        path: Some(DecodePath::Cube),
    }
    .check();
}

/// 257 heads per group: the scores take at most 256 heads per tile (tiles of 129 and 128, whose
/// L0C layouts differ), and the value product's tile must fit L0A (256 heads' probabilities of a
/// 128-key tile) and L1 as well as L0B and L0C.
#[test]
#[serial]
fn decode_attention_cube_path_fits_every_buffer_past_256_heads() {
    DecodeCase {
        name: "GQA cube, 257 heads per group",
        lens: vec![40, 7],
        q_heads: 257,
        kv_heads: 1,
        dim_k: 64,
        dim_v: 64,
        mla: false,
        dtype: DType::F16,
        max_splits: 2,
        splits: vec![2, 1],
        cap: None,
        path: Some(DecodePath::Cube),
    }
    .check();
}

/// The child test of [`decode_attention_launches_one_block_per_core_of_the_soc`].
const SOC_CHILD: &str = "child_decode_attention_fills_the_cores_of_the_soc";

/// Run in a process whose emulated NPUs model the SoC `BURN_ASCEND_EMU_SOC` names: a cube-path
/// decode with more units than cores launches one block per core of that SoC, as many as
/// `EXPECT_CUBE_CORES` and `EXPECT_VECTOR_CORES` say.
#[test]
#[ignore = "run by decode_attention_launches_one_block_per_core_of_the_soc in its own process"]
fn child_decode_attention_fills_the_cores_of_the_soc() {
    let want = |var: &str| -> u32 { std::env::var(var).unwrap().parse().unwrap() };
    // 2 requests x 2 key/value heads x 8 splits: 32 units of each cube kernel, and 128
    // (request, head, split) rows of the softmax kernel.
    let case = DecodeCase {
        name: "GQA cube, 32 units",
        lens: vec![40, 33],
        q_heads: 8,
        kv_heads: 2,
        dim_k: 64,
        dim_v: 64,
        mla: false,
        dtype: DType::F16,
        max_splits: 8,
        splits: vec![8, 8],
        cap: None,
        path: Some(DecodePath::Cube),
    };
    clear_launch_log();
    case.check();
    let log = launch_log();
    let blocks: Vec<(String, u32)> = log
        .iter()
        .map(|s| (s.kernel.clone(), s.block_dim))
        .collect();
    let (cube, vector) = (want("EXPECT_CUBE_CORES"), want("EXPECT_VECTOR_CORES"));
    let expected = [
        ("decode_attention_scores", cube),
        ("decode_attention_softmax", vector),
        ("decode_attention_values", cube),
    ];
    for (kernel, n) in expected {
        assert!(
            blocks.iter().any(|(k, b)| k == kernel && *b == n),
            "{kernel} should run on {n} blocks: {blocks:?}"
        );
    }
    // The device-time model counts the same cores.
    use burn_ascend_perf::a2;
    assert_eq!((a2::cube_cores(), a2::vector_cores()), (cube, vector));
    println!("fills the cores");
}

/// The tiling and the device-time model read the core counts of the device's SoC
/// (`aclrtGetSocName`): a 910B3 has 20 AI cores (40 vector cores), not the 910B2's 24.
#[test]
#[serial]
fn decode_attention_launches_one_block_per_core_of_the_soc() {
    if common::skipped_on_npu("decode_attention_launches_one_block_per_core_of_the_soc") {
        return;
    }
    let child = |soc: &str, cube: &str, vector: &str| {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", SOC_CHILD, "--nocapture"])
            .env("BURN_ASCEND_EMU_SOC", soc)
            .env("EXPECT_CUBE_CORES", cube)
            .env("EXPECT_VECTOR_CORES", vector)
            .output()
            .expect("the test binary runs");
        let text = format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (
            out.status.success() && text.contains("fills the cores"),
            text,
        )
    };
    for (soc, cube, vector) in [("Ascend910B3", "20", "40"), ("Ascend910B2", "24", "48")] {
        let (ok, text) = child(soc, cube, vector);
        assert!(ok, "child on an emulated {soc}:\n{text}");
    }
    // A chip the emulation does not know is a clear error naming the variable.
    let (ok, text) = child("Ascend910X", "24", "48");
    assert!(
        !ok && text.contains("BURN_ASCEND_EMU_SOC=\"Ascend910X\" is not an emulated chip: give one of Ascend910B2, Ascend910B1, Ascend910B3"),
        "child with an unknown SoC:\n{text}"
    );
}

#[test]
#[serial]
fn decode_attention_cube_path_runs_its_kernels_where_asked_or_modelled() {
    if common::skipped_on_npu("decode_attention_cube_path_runs_its_kernels_where_asked_or_modelled")
    {
        return;
    }
    let kernels = |case: &DecodeCase| {
        clear_launch_log();
        let _ = case.run::<Ascend>(&case.inputs(), &ascend());
        launch_log()
    };
    let names = |log: &[burn_ascend::emulator::kernel_runner::LaunchStats]| {
        log.iter().map(|s| s.kernel.clone()).collect::<Vec<_>>()
    };
    let cube = mla_cube(DType::BF16);
    let log = kernels(&cube);
    assert_eq!(names(&log), DecodePath::Cube.kernels(), "{log:?}");
    use burn_ascend::emulator::kernel_runner::CoreKind;
    let kinds: Vec<CoreKind> = log.iter().map(|s| s.cores).collect();
    assert_eq!(
        kinds,
        [
            CoreKind::Cube,
            CoreKind::Vector,
            CoreKind::Cube,
            CoreKind::Vector
        ]
    );
    // Scores: 16 heads x 42 keys; the value product: 16 x 512 per non-empty split (6).
    let (scores, values) = (&log[0], &log[2]);
    assert!(scores.cube_cycles > 0 && values.cube_cycles > 0, "{log:?}");
    assert_eq!(scores.gm_bytes_written, 16 * 42 * 4, "{scores:?}");
    assert_eq!(values.gm_bytes_written, 6 * 16 * 512 * 4, "{values:?}");
    // The model keeps the MLA seed size on the vector path.
    let seed = DecodeCase {
        lens: vec![128],
        q_heads: 32,
        splits: vec![4],
        path: None,
        ..cube.clone()
    };
    assert_eq!(names(&kernels(&seed)), DecodePath::Vector.kernels());
    // Asking for the cube path where it cannot run is a clear error.
    let float = DecodeCase {
        dtype: DType::F32,
        ..cube
    };
    let text = panic_message(|| {
        let _ = float.run::<Ascend>(&float.inputs(), &ascend());
    });
    assert!(
        text.contains("the cube path was asked for, but it takes half and bf16 only"),
        "{text}"
    );
}

#[test]
#[serial]
fn paged_kernels_write_each_output_once_and_use_every_core() {
    if common::skipped_on_npu("paged_kernels_write_each_output_once_and_use_every_core") {
        return;
    }
    clear_launch_log();
    let case = AllocCase {
        name: "seed",
        prefix: vec![0, 0],
        seq: vec![1000, 1500],
        last: vec![0, 0],
        free: shuffled_pages(2048, 1),
        page_size: 128,
    };
    let _ = case.run::<Ascend>(DType::I32, &ascend());
    let mla = DecodeCase {
        name: "MLA seed",
        lens: vec![128],
        q_heads: 32,
        kv_heads: 1,
        dim_k: 576,
        dim_v: 512,
        mla: true,
        dtype: DType::BF16,
        max_splits: 4,
        splits: vec![4],
        cap: None,
        path: None,
    };
    let _ = mla.run::<Ascend>(&mla.inputs(), &ascend());
    let log = launch_log();
    let find = |k: &str| log.iter().rev().find(|s| s.kernel == k).cloned().unwrap();
    let alloc = find("alloc_extend");
    assert_eq!(alloc.gm_bytes_written, (2500 + 2) * 4, "{alloc:?}");
    assert!(
        alloc.block_dim >= 8,
        "2500 slots spread over the cores: {alloc:?}"
    );
    let one = find("decode_attention_stage1");
    let two = find("decode_attention_stage2");
    let (hq, s, dv) = (32u64, 4u64, 512u64);
    assert_eq!(one.gm_bytes_written, hq * s * (dv + 1) * 4, "{one:?}");
    assert!(
        one.block_dim >= 40,
        "one request still occupies the cores: {one:?}"
    );
    assert!(one.per_block_gm_bytes.iter().all(|&b| b > 0), "{one:?}");
    assert_eq!(two.gm_bytes_read, hq * s * (dv + 1) * 4, "{two:?}");
    assert_eq!(two.gm_bytes_written, hq * (dv * 2 + 4), "{two:?}");
}

#[test]
#[serial]
fn bad_inputs_are_clear_errors() {
    let d = ascend();
    let i32s = |v: &[i64]| ints::<Ascend>(v, DType::I32, &d);
    let text = panic_message(|| {
        let _ = fused::alloc_extend(
            i32s(&[0]),
            i32s(&[4]),
            ints::<Ascend>(&[0], DType::I64, &d),
            i32s(&[1]),
            4,
            4,
        );
    });
    assert!(
        text.contains("alloc_extend")
            && text.contains("all int32 or all int64")
            && text.contains("DT_INT64"),
        "{text}"
    );
    let text = panic_message(|| {
        let _ = fused::alloc_extend(i32s(&[0, 1]), i32s(&[4]), i32s(&[0]), i32s(&[1]), 4, 4);
    });
    assert!(
        text.contains("must be [B]") && text.contains("[2]"),
        "{text}"
    );
    let text = panic_message(|| {
        let _ = fused::alloc_extend(i32s(&[0]), i32s(&[4]), i32s(&[0]), i32s(&[1]), 0, 4);
    });
    assert!(text.contains("page_size"), "{text}");

    let float3 = |shape: [usize; 3], dtype: DType| {
        Tensor::<Ascend, 3>::from_data(
            host_values(shape.to_vec(), 1).convert_dtype(dtype),
            (&d, dtype),
        )
    };
    let options = DecodeAttentionOptions {
        max_kv_splits: 2,
        sm_scale: 0.1,
        logit_cap: None,
        value_dim: 64,
        path: None,
    };
    let decode = |q: Tensor<Ascend, 3>,
                  k: Tensor<Ascend, 3>,
                  v: Option<Tensor<Ascend, 3>>,
                  indptr: Tensor<Ascend, 1, Int>,
                  options: DecodeAttentionOptions| {
        panic_message(|| {
            let _ = fused::decode_attention(q, k, v, indptr, i32s(&[0, 1]), i32s(&[1]), options);
        })
    };
    let f32s = DType::F32;
    let text = decode(
        float3([1, 6, 64], f32s),
        float3([4, 4, 64], f32s),
        Some(float3([4, 4, 64], f32s)),
        i32s(&[0, 2]),
        options,
    );
    assert!(
        text.contains("decode_attention")
            && text.contains("HQ = 6 must be a multiple of HKV = 4")
            && text.contains("[1, 6, 64]"),
        "{text}"
    );
    let text = decode(
        float3([1, 4, 64], f32s),
        float3([4, 4, 32], f32s),
        Some(float3([4, 4, 64], f32s)),
        i32s(&[0, 2]),
        options,
    );
    assert!(
        text.contains("head dim 32 must equal q's Dk = 64"),
        "{text}"
    );
    let text = decode(
        float3([1, 4, 64], f32s),
        float3([4, 4, 64], f32s),
        Some(float3([4, 4, 48], f32s)),
        i32s(&[0, 2]),
        options,
    );
    assert!(
        text.contains("v_cache must be [4, 4, Dv] with Dv = value_dim = 64"),
        "{text}"
    );
    let text = decode(
        float3([1, 4, 64], f32s),
        float3([4, 4, 64], f32s),
        None,
        i32s(&[0, 2]),
        DecodeAttentionOptions {
            value_dim: 65,
            path: None,
            ..options
        },
    );
    assert!(
        text.contains("value_dim = 65 must be at most Dk = 64"),
        "{text}"
    );
    let text = decode(
        float3([1, 4, 64], f32s),
        float3([4, 4, 64], DType::F16),
        None,
        i32s(&[0, 2]),
        options,
    );
    assert!(
        text.contains("one dtype") && text.contains("DT_FLOAT16"),
        "{text}"
    );
    let text = decode(
        float3([1, 4, 64], f32s),
        float3([4, 4, 64], f32s),
        None,
        ints::<Ascend>(&[0, 2], DType::I64, &d),
        options,
    );
    assert!(text.contains("kv_indptr must be [2] int32"), "{text}");
    let text = decode(
        float3([1, 4, 64], f32s),
        float3([4, 4, 64], f32s),
        None,
        i32s(&[0, 2]),
        DecodeAttentionOptions {
            logit_cap: Some(-1.0),
            ..options
        },
    );
    assert!(text.contains("logit_cap must be positive"), "{text}");
}

/// A KV-cache write case: caches `[slots, heads, width]` and, per cache, the widths of the row
/// tensors that make up its rows side by side.
struct CacheCase {
    name: &'static str,
    slots: usize,
    heads: usize,
    caches: Vec<Vec<usize>>,
    written: Vec<i64>,
}

/// Each cache and the row tensors that make up its rows.
type CacheWrites<B> = Vec<(Tensor<B, 3>, Vec<Tensor<B, 3>>)>;

impl CacheCase {
    /// The caches after `write`, which either writes them in place (returning `None`) or returns
    /// the written copies.
    fn run<B: burn::tensor::backend::Backend>(
        &self,
        dtype: DType,
        index: DType,
        d: &B::Device,
        write: impl FnOnce(&Tensor<B, 1, Int>, &CacheWrites<B>) -> Option<Vec<Tensor<B, 3>>>,
    ) -> Vec<Vec<f64>> {
        let t = self.written.len();
        let float3 = |shape: [usize; 3], seed| {
            Tensor::<B, 3>::from_data(
                host_values(shape.to_vec(), seed).convert_dtype(dtype),
                (d, dtype),
            )
        };
        let writes: CacheWrites<B> = self
            .caches
            .iter()
            .enumerate()
            .map(|(c, widths)| {
                let width = widths.iter().sum();
                let cache = float3([self.slots, self.heads, width], 10 + c as u64);
                let rows = widths
                    .iter()
                    .enumerate()
                    .map(|(i, &w)| float3([t, self.heads, w], 20 + (c * 4 + i) as u64))
                    .collect();
                (cache, rows)
            })
            .collect();
        let caches = write(&ints::<B>(&self.written, index, d), &writes)
            .unwrap_or_else(|| writes.into_iter().map(|(cache, _)| cache).collect());
        caches.into_iter().map(|c| floats(c.into_data())).collect()
    }
}

fn cache_cases() -> Vec<CacheCase> {
    vec![
        CacheCase {
            name: "GQA keys and values, 7 tokens",
            slots: 40,
            heads: 2,
            caches: vec![vec![64], vec![64]],
            written: vec![5, 39, 0, 17, 18, 3, 22],
        },
        CacheCase {
            // 20 and 12 elements a row: tails of less than 32 bytes, rows that start mid-block.
            name: "narrow rows",
            slots: 9,
            heads: 1,
            caches: vec![vec![20], vec![12]],
            written: vec![8, 2],
        },
        CacheCase {
            // 33 tokens over 33 slots in a shuffled order: several tokens per block.
            name: "MLA latent and rotary rows side by side",
            slots: 33,
            heads: 1,
            caches: vec![vec![512, 64]],
            written: (0..33).map(|i| (i * 7 % 33) as i64).collect(),
        },
        CacheCase {
            name: "keys only, rows wider than the unified buffer",
            slots: 3,
            heads: 4,
            caches: vec![vec![16_384]],
            written: vec![2, 0],
        },
    ]
}

#[test]
#[serial]
fn kv_cache_write_writes_every_part_in_place_in_one_launch() {
    use burn::tensor::backend::Backend;
    use burn::tensor::IndexingUpdateOp;
    use burn_ascend::emulator::work_counters;
    use burn_ascend::graph::{self, CacheWrite};
    for case in cache_cases() {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for index in [DType::I32, DType::I64] {
                let what = format!("{} ({dtype:?}, {index:?} slots)", case.name);
                let mut counted = None;
                let got = case.run::<Ascend>(dtype, index, &ascend(), |slots, writes| {
                    let writes: Vec<CacheWrite<'_>> = writes
                        .iter()
                        .map(|(cache, rows)| CacheWrite { cache, rows })
                        .collect();
                    let before = work_counters();
                    clear_launch_log();
                    graph::write_cache(slots, &writes);
                    // The counters count work the stream has run.
                    Ascend::sync(&ascend()).unwrap();
                    counted = Some((work_counters().since(&before), launch_log()));
                    None
                });
                let (counted, log) = counted.unwrap();
                // The reference: the rows joined, then scattered into a copy on burn-flex.
                let want = case.run::<Flex>(dtype, index, &flex(), |slots, writes| {
                    let n = slots.dims()[0];
                    let index = slots.clone().reshape([n, 1]);
                    let written = writes.iter().map(|(cache, rows)| {
                        let rows = Tensor::cat(rows.clone(), 2);
                        cache
                            .clone()
                            .scatter_nd(index.clone(), rows, IndexingUpdateOp::Assign)
                    });
                    Some(written.collect())
                });
                assert_eq!(got, want, "{what}");
                if common::skipped_on_npu("kv_cache_write's launch count") {
                    continue;
                }
                assert_eq!(
                    (counted.aclnn_launches, counted.kernel_launches),
                    (0, 1),
                    "{what}: one kernel launch and no operator: {log:?}"
                );
                assert_eq!(log[0].kernel, "kv_cache_write", "{what}");
                let moved: u64 = case.caches.iter().flatten().sum::<usize>() as u64
                    * (case.heads * case.written.len()) as u64
                    * dtype.size() as u64;
                assert_eq!(
                    log[0].gm_bytes_written, moved,
                    "{what}: only the rows written move"
                );
            }
        }
    }
}

#[test]
#[serial]
fn kv_cache_write_traps_on_a_slot_outside_the_cache_and_on_a_slot_written_twice() {
    use burn_ascend::graph::{self, CacheWrite};
    for (slots, needle) in [
        (
            vec![3i64, 9],
            "kv_cache_write: slots[1] = 9 is outside [0, 9)",
        ),
        (
            vec![3i64, -1],
            "kv_cache_write: slots[1] = -1 is outside [0, 9)",
        ),
        // 96 tokens over the cores, two each, into 9 slots: blocks write the same rows.
        ((0..96).map(|i| i % 9).collect(), "race between blocks"),
    ] {
        common::reset_fault_device();
        let d = common::fault_device();
        let cache = Tensor::<Ascend, 3>::zeros([9, 1, 16], &d);
        let rows = [Tensor::<Ascend, 3>::ones([slots.len(), 1, 16], &d)];
        let err = burn_ascend::try_run(|| {
            graph::write_cache(
                &ints::<Ascend>(&slots, DType::I32, &d),
                &[CacheWrite {
                    cache: &cache,
                    rows: &rows,
                }],
            );
            cache.clone().into_data()
        })
        .expect_err("the kernel refuses it");
        common::reset_fault_device();
        let err = err.to_string();
        assert!(
            err.contains("AICORE")
                && (matches!(common::device(), AscendDevice::Npu(_)) || err.contains(needle)),
            "{needle}: {err}"
        );
    }
}

#[test]
#[serial]
fn kv_cache_write_refuses_rows_that_do_not_make_up_the_cache_rows() {
    use burn_ascend::graph::{self, CacheWrite};
    use burn_ascend::ops::fused::{kv_cache_write, CachePart};
    let d = ascend();
    let slots = ints::<Ascend>(&[1, 2], DType::I32, &d);
    let cache = Tensor::<Ascend, 3>::zeros([4, 1, 16], &d);
    let short = [Tensor::<Ascend, 3>::zeros([2, 1, 12], &d)];
    let text = panic_message(|| {
        graph::write_cache(
            &slots,
            &[CacheWrite {
                cache: &cache,
                rows: &short,
            }],
        );
    });
    assert!(
        text.contains("write_cache") && text.contains("[2, 1, 12]") && text.contains("[4, 1, 16]"),
        "{text}"
    );
    // The kernel's own contract, below the Burn API: caches of one type, columns apart.
    let core = |t: &Tensor<Ascend, 2>| t.clone().into_primitive().tensor().into_inner();
    let (cache, slots) = (
        core(&Tensor::zeros([4, 16], &d)),
        slots.into_primitive().into_inner(),
    );
    let rows = core(&Tensor::zeros([2, 10], &d));
    let overlapping = [
        CachePart {
            cache: &cache,
            rows: &rows,
            offset: 0,
        },
        CachePart {
            cache: &cache,
            rows: &rows,
            offset: 6,
        },
    ];
    let err = kv_cache_write(&slots, &overlapping).expect_err("columns 6..10 twice");
    assert!(
        err.to_string().contains("kv_cache_write") && err.to_string().contains("columns apart"),
        "{err}"
    );
    let half = core(&Tensor::<Ascend, 2>::zeros([4, 16], &d).cast(DType::F16));
    let mixed = [
        CachePart {
            cache: &cache,
            rows: &rows,
            offset: 0,
        },
        CachePart {
            cache: &half,
            rows: &rows,
            offset: 0,
        },
    ];
    let err = kv_cache_write(&slots, &mixed).expect_err("caches of two types");
    assert!(
        err.to_string().contains("one type") && err.to_string().contains("DT_FLOAT16"),
        "{err}"
    );
}
