//! Burn's `attention` on the emulated Ascend: the flash path (aclnnFlashAttentionScore, what
//! `ModuleOps::attention` runs when the call fits) against the composed path
//! (`burn_ascend::ops::attention::attention`, the dozen aclnn operators over the `[B, H, S, S]`
//! score matrix), B = 1, H = 8, D = 128, f16 and bf16, causal and with a boolean mask, and a
//! grouped-query row (2 key/value heads, `fused::flash_attention`; the composed path over the
//! key/value heads repeated). Then one paged prefill step (`fused::paged_prefill_attention`,
//! a chunk after cached tokens, pages of 128) against `decode_attention` over per-token key
//! lists, as the server attended prefill chunks before; and the extend kernels on the same
//! step, and on an MLA step (DeepSeek's dims) against its key lists. Per call: modelled Atlas A2
//! time (`a2::ModelledClock`), the roofline, their ratio, and the peak device memory. Last, one
//! training step of the MoE example model (`MoeDecoder`, default config, f32, on
//! `Autodiff<Ascend>`) over one long sequence, its attention through `fused::flash_attention`
//! (aclnnFlashAttentionScore and its grad) against its default composition: modelled time and
//! peak device memory (sizes: `BURN_ASCEND_BENCH_TRAIN_SIZES`, default 2048,4096).
//!
//! Sizes: `BURN_ASCEND_BENCH_ATTENTION_SIZES` (comma-separated sequence lengths, default
//! 512,2048,8192); each 4x in S costs the emulation about 16x (one S = 8192 call takes about a
//! minute here). Above [`FULL_GRID_MAX_S`] only the f16 causal flash call runs: the emulated
//! HBM is host memory, and the composed path's score matrices at S = 16384 (about 13 GiB,
//! 4x the measured S = 8192 peak) do not fit this shared host.

mod common;

use std::time::Instant;

use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::Backend;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Bool, DType, Int, Tensor, TensorData};
use burn_ascend::acl::types::status::ACL_ERROR_RT_MEMORY_ALLOCATION;
use burn_ascend::fused::{self, DecodeAttentionOptions, ExtendLens, ExtendPath, PrefillLens};
use burn_ascend::ops::attention::{attention as composed, AttentionOptions};
use burn_ascend::{reset_device, Ascend, AscendDevice, AscendTensor};
use burn_ascend_llm::moe::config::MoeConfig;
use burn_ascend_llm::moe::model::MoeDecoder;
use burn_ascend_llm::moe::train::{batch, TrainConfig};
use burn_ascend_perf::a2::{self, ModelledClock};
use burn_autodiff::Autodiff;
use common::{publish, Table};
use criterion::{criterion_group, criterion_main, Criterion};

type B = Ascend;

const HEADS: usize = 8;
const KV_HEADS_GQA: usize = 2;
const HEAD_DIM: usize = 128;
const MIB: f64 = (1u64 << 20) as f64;
/// The prefill step: a chunk after cached tokens, pages of this many slots.
const CHUNK: usize = 512;
const CACHED: usize = 1536;
const PAGE: usize = 128;
/// decode_attention's splits as the example's server picks them: one per 32 keys, at most 16.
const MAX_KV_SPLITS: usize = 16;
/// The largest S measured in full (both dtypes and maskings, GQA, the composed path).
const FULL_GRID_MAX_S: usize = 8192;

fn sizes() -> Vec<usize> {
    std::env::var("BURN_ASCEND_BENCH_ATTENTION_SIZES")
        .unwrap_or_else(|_| "512,2048,8192".into())
        .split(',')
        .map(|s| s.trim().parse().expect("sequence lengths, comma-separated"))
        .collect()
}

#[derive(Clone, Copy, PartialEq)]
enum Masking {
    Causal,
    /// A `[1, 1, S, S]` boolean mask (about a fifth masked, the diagonal never).
    Bool,
}

#[derive(Clone, Copy)]
struct Case {
    s: usize,
    dtype: DType,
    masking: Masking,
    kv_heads: usize,
}

impl Case {
    fn name(&self) -> String {
        format!(
            "S={} {:?} {}{}",
            self.s,
            self.dtype,
            match self.masking {
                Masking::Causal => "causal",
                Masking::Bool => "mask",
            },
            if self.kv_heads < HEADS {
                format!(" GQA {HEADS}:{}", self.kv_heads)
            } else {
                String::new()
            }
        )
    }

    /// The roofline: max(cube FLOPs at the cube peak, q/k/v/o bytes at HBM bandwidth).
    fn roofline(&self) -> f64 {
        let (s, h, d) = (self.s as f64, HEADS as f64, HEAD_DIM as f64);
        let mut flops = 4.0 * h * s * s * d;
        if self.masking == Masking::Causal {
            flops /= 2.0;
        }
        let elems = 2.0 * h * s * d + 2.0 * self.kv_heads as f64 * s * d;
        let bytes = elems * self.dtype.size() as f64;
        (flops / a2::cube_flops_per_s()).max(bytes / a2::HBM_BYTES_PER_S)
    }
}

/// One call's figures.
struct Measured {
    modelled: f64,
    wall: f64,
    peak: usize,
    inputs: usize,
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn float<const D: usize>(
    shape: [usize; D],
    dtype: DType,
    seed: u64,
    d: &AscendDevice,
) -> Tensor<B, D> {
    let data = TensorData::new(values(shape.iter().product(), seed), shape);
    Tensor::from_data(data.convert_dtype(dtype), (d, dtype))
}

fn bool_mask(s: usize, d: &AscendDevice) -> Tensor<B, 4, Bool> {
    let v: Vec<bool> = (0..s * s)
        .map(|i| {
            let (r, c) = (i / s, i % s);
            r != c && (r * 7 + c * 13) % 5 == 0
        })
        .collect();
    Tensor::from_data(TensorData::new(v, [1, 1, s, s]), d)
}

fn prim(t: &Tensor<B, 4>) -> AscendTensor {
    t.clone().into_primitive().tensor()
}

/// Runs `call` on a freshly reset device (so the allocator's peak is this call's), after
/// `inputs` made its operands: modelled A2 time, wall time, peak and input bytes in use.
/// `None` when the call ran out of device memory.
fn measure<T>(
    device: &AscendDevice,
    inputs: impl FnOnce() -> T,
    call: impl FnOnce(&T) -> Option<()>,
) -> Option<Measured> {
    reset_device(device).unwrap();
    let operands = inputs();
    B::sync(device).unwrap();
    let in_use = B::memory_stats(device).bytes_in_use;
    let mut clock = ModelledClock::start();
    let start = Instant::now();
    let done = call(&operands);
    B::sync(device).unwrap();
    let wall = start.elapsed().as_secs_f64();
    let modelled = clock.lap();
    let peak = B::memory_stats(device).peak_bytes_in_use;
    drop(operands);
    done.map(|()| Measured {
        modelled,
        wall,
        peak,
        inputs: in_use,
    })
}

/// An out-of-memory error is the figure; anything else is a failure of the bench.
fn unless_oom<T>(r: burn_ascend::acl::AclResult<T>) -> Option<T> {
    match r {
        Ok(t) => Some(t),
        Err(e) if e.code() == Some(ACL_ERROR_RT_MEMORY_ALLOCATION) => None,
        Err(e) => panic!("composed attention failed: {e}"),
    }
}

type Operands = (
    Tensor<B, 4>,
    Tensor<B, 4>,
    Tensor<B, 4>,
    Option<Tensor<B, 4, Bool>>,
);

fn operands(c: Case, d: &AscendDevice) -> Operands {
    let q = float([1, HEADS, c.s, HEAD_DIM], c.dtype, 1, d);
    let k = float([1, c.kv_heads, c.s, HEAD_DIM], c.dtype, 2, d);
    let v = float([1, c.kv_heads, c.s, HEAD_DIM], c.dtype, 3, d);
    let mask = (c.masking == Masking::Bool).then(|| bool_mask(c.s, d));
    (q, k, v, mask)
}

fn module_options(c: Case) -> AttentionModuleOptions {
    AttentionModuleOptions {
        scale: None,
        softcap: None,
        is_causal: c.masking == Masking::Causal,
    }
}

/// The flash path: Burn's `attention` (it fits the operator), or `fused::flash_attention` for
/// grouped-query heads (Burn's `attention` takes equal head counts).
fn flash(c: Case, (q, k, v, mask): &Operands) -> Tensor<B, 4> {
    if c.kv_heads < HEADS {
        fused::flash_attention(
            q.clone(),
            k.clone(),
            v.clone(),
            mask.clone(),
            module_options(c),
        )
    } else {
        attention(
            q.clone(),
            k.clone(),
            v.clone(),
            mask.clone(),
            None,
            module_options(c),
        )
    }
}

/// The composed path: `burn_ascend::ops::attention::attention`, the function Burn's `attention`
/// keeps for calls the operator does not take; grouped heads repeated to the query heads first.
fn composed_path(c: Case, (q, k, v, mask): &Operands) -> Option<AscendTensor> {
    let repeat = |t: &Tensor<B, 4>| {
        let g = HEADS / c.kv_heads;
        let [b, h, s, d] = t.dims();
        t.clone()
            .unsqueeze_dim::<5>(2)
            .repeat_dim(2, g)
            .reshape([b, h * g, s, d])
    };
    let (k, v) = if c.kv_heads < HEADS {
        (repeat(k), repeat(v))
    } else {
        (k.clone(), v.clone())
    };
    let mask = mask.as_ref().map(|m| m.clone().into_primitive());
    let options = AttentionOptions {
        scale: None,
        softcap: None,
        is_causal: c.masking == Masking::Causal,
    };
    unless_oom(
        composed(
            &prim(q),
            &prim(&k),
            &prim(&v),
            mask.as_deref(),
            None,
            options,
        )
        .map(Into::into),
    )
}

fn cases() -> Vec<Case> {
    let mut all = Vec::new();
    for s in sizes() {
        if s > FULL_GRID_MAX_S {
            all.push(Case {
                s,
                dtype: DType::F16,
                masking: Masking::Causal,
                kv_heads: HEADS,
            });
            continue;
        }
        for dtype in [DType::F16, DType::BF16] {
            for masking in [Masking::Causal, Masking::Bool] {
                all.push(Case {
                    s,
                    dtype,
                    masking,
                    kv_heads: HEADS,
                });
            }
        }
        all.push(Case {
            s,
            dtype: DType::F16,
            masking: Masking::Causal,
            kv_heads: KV_HEADS_GQA,
        });
    }
    all
}

fn ms(secs: f64) -> String {
    format!("{:.3}", secs * 1e3)
}

fn mib(bytes: usize) -> String {
    format!("{:.1}", bytes as f64 / MIB)
}

/// The prefill step's operands: q `[CHUNK, H, D]`, the caches `[pages * PAGE, KVH, D]` holding
/// the request's CACHED + CHUNK tokens in shuffled pages, its block table.
struct Prefill {
    q: Tensor<B, 3>,
    k: Tensor<B, 3>,
    v: Tensor<B, 3>,
    table: Vec<i32>,
}

fn prefill_operands(d: &AscendDevice) -> Prefill {
    let pages = (CACHED + CHUNK).div_ceil(PAGE);
    let slots = pages * PAGE;
    let dt = DType::F16;
    let float3 = |shape: [usize; 3], seed| float(shape, dt, seed, d);
    Prefill {
        q: float3([CHUNK, HEADS, HEAD_DIM], 4),
        k: float3([slots, KV_HEADS_GQA, HEAD_DIM], 5),
        v: float3([slots, KV_HEADS_GQA, HEAD_DIM], 6),
        // Pages out of order, as a cache hands them out.
        table: (0..pages as i32).rev().collect(),
    }
}

fn prefill_roofline() -> f64 {
    let keys: f64 = (0..CHUNK).map(|i| (CACHED + i + 1) as f64).sum();
    let flops = 4.0 * HEADS as f64 * HEAD_DIM as f64 * keys;
    let elems = 2 * CHUNK * HEADS * HEAD_DIM + 2 * (CACHED + CHUNK) * KV_HEADS_GQA * HEAD_DIM;
    (flops / a2::cube_flops_per_s()).max(elems as f64 * 2.0 / a2::HBM_BYTES_PER_S)
}

fn paged_prefill(p: &Prefill, d: &AscendDevice) -> Tensor<B, 3> {
    let table = Tensor::<B, 2, Int>::from_data(
        TensorData::new(p.table.clone(), [1, p.table.len()]),
        (d, DType::I32),
    );
    fused::paged_prefill_attention(
        p.q.clone(),
        p.k.clone(),
        p.v.clone(),
        table,
        PrefillLens {
            q_lens: &[CHUNK],
            kv_lens: &[CACHED + CHUNK],
            page_size: PAGE,
        },
        1.0 / (HEAD_DIM as f32).sqrt(),
    )
}

fn prefill_table(p: &Prefill, d: &AscendDevice) -> Tensor<B, 2, Int> {
    Tensor::<B, 2, Int>::from_data(
        TensorData::new(p.table.clone(), [1, p.table.len()]),
        (d, DType::I32),
    )
}

const EXTEND_LENS: ExtendLens<'static> = ExtendLens {
    q_lens: &[CHUNK],
    kv_lens: &[CACHED + CHUNK],
    page_size: PAGE,
    value_dim: HEAD_DIM,
};

/// The step through the extend kernels on the cube (`fused::extend_attention`, path asked).
fn extend_kernels(p: &Prefill, d: &AscendDevice) -> Tensor<B, 3> {
    fused::extend_attention(
        p.q.clone(),
        p.k.clone(),
        Some(p.v.clone()),
        prefill_table(p, d),
        EXTEND_LENS,
        1.0 / (HEAD_DIM as f32).sqrt(),
        Some(ExtendPath::Kernels),
    )
}

/// The device model's estimates of both paths for the step (what `extend_attention` chooses
/// from): (kernels, FIA) seconds.
fn extend_estimates(p: &Prefill, d: &AscendDevice) -> (f64, f64) {
    let plan = burn_ascend::ops::fused::extend_attention_plan(
        &p.q.clone().into_primitive().tensor(),
        &p.k.clone().into_primitive().tensor(),
        Some(&p.v.clone().into_primitive().tensor()),
        &prefill_table(p, d).into_primitive(),
        &EXTEND_LENS,
        1.0 / (HEAD_DIM as f32).sqrt(),
    )
    .expect("the extend kernels plan the step")
    .expect("a non-empty step");
    (plan.estimate.kernels_s, plan.estimate.fia_s)
}

/// The chunk as decode rows: token i lists the slots of positions 0..=CACHED + i (the server's
/// per-token key lists before paged prefill), split one way per 32 keys, at most 16.
fn decode_rows(p: &Prefill, d: &AscendDevice) -> Tensor<B, 3> {
    let slot = |pos: usize| p.table[pos / PAGE] * PAGE as i32 + (pos % PAGE) as i32;
    let (mut indptr, mut indices, mut splits) = (vec![0i32], Vec::new(), Vec::new());
    for i in 0..CHUNK {
        let keys = CACHED + i + 1;
        indices.extend((0..keys).map(slot));
        indptr.push(indices.len() as i32);
        splits.push(keys.div_ceil(32).clamp(1, MAX_KV_SPLITS) as i32);
    }
    let ints = |v: Vec<i32>| {
        let n = v.len();
        Tensor::<B, 1, Int>::from_data(TensorData::new(v, [n]), (d, DType::I32))
    };
    fused::decode_attention(
        p.q.clone(),
        p.k.clone(),
        Some(p.v.clone()),
        ints(indptr),
        ints(indices),
        ints(splits),
        DecodeAttentionOptions {
            max_kv_splits: MAX_KV_SPLITS,
            sm_scale: 1.0 / (HEAD_DIM as f32).sqrt(),
            logit_cap: None,
            value_dim: HEAD_DIM,
            path: None,
        },
    )
    .0
}

type AdB = Autodiff<Ascend>;

fn train_sizes() -> Vec<usize> {
    std::env::var("BURN_ASCEND_BENCH_TRAIN_SIZES")
        .unwrap_or_else(|_| "2048,4096".into())
        .split(',')
        .map(|s| s.trim().parse().expect("sequence lengths, comma-separated"))
        .collect()
}

/// The example model (its parameters initialised) and one batch of `s` tokens.
struct TrainStep {
    model: MoeDecoder<AdB>,
    inputs: Tensor<AdB, 2, Int>,
    targets: Tensor<AdB, 2, Int>,
}

const LEARNING_RATE: f64 = 1e-3;
const AUX_WEIGHT: f64 = 0.01;

fn train_step_inputs(s: usize, flash: bool, d: &AscendDevice) -> TrainStep {
    // The same weights on both paths: a fixed seed, the parameters drawn in the same order.
    B::seed(d, 23);
    let model = MoeDecoder::<AdB>::new(&MoeConfig::new(), d).expect("the default config");
    let tokens: Vec<u32> = (0..s as u32 + 1).map(|i| (i * 131 + i / 7) % 256).collect();
    let cfg = TrainConfig {
        steps: 1,
        batch: 1,
        seq_len: s,
        learning_rate: LEARNING_RATE,
        aux_weight: AUX_WEIGHT,
    };
    let (inputs, targets) = batch::<AdB>(&tokens, &cfg, 0, d);
    // The parameters are initialised lazily: at their first use, not in the measured step.
    let _ = model.forward(inputs.clone().narrow(1, 0, 1));
    TrainStep {
        model: model.with_flash_attention(flash),
        inputs,
        targets,
    }
}

/// Forward, cross-entropy + weighted load-balancing loss, backward, one Adam update (as
/// `moe::train::train` steps): the loss.
fn train_step(t: &TrainStep, d: &AscendDevice) -> f32 {
    let (logits, aux) = t.model.forward(t.inputs.clone());
    let [b, s, v] = logits.dims();
    let ce = CrossEntropyLossConfig::new().init(d).forward(
        logits.reshape([b * s, v]),
        t.targets.clone().reshape([b * s]),
    );
    let loss = ce + aux * AUX_WEIGHT;
    let value = loss
        .clone()
        .into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .unwrap()[0];
    let grads = GradientsParams::from_grads(loss.backward(), &t.model);
    let mut optim = AdamConfig::new().init();
    let _updated = optim.step(LEARNING_RATE, t.model.clone(), grads);
    value
}

fn training_table(device: &AscendDevice) -> Table {
    let mut table = Table::new(
        "Training step of the MoE example model (default config: hidden 256, 4 layers, 8 query / \
         2 key-value heads, D = 32, 8 experts top-2; f32, batch 1): attention through \
         fused::flash_attention against the default composition over the [B, H, S, S] scores",
        &[
            "S",
            "flash modelled (ms)",
            "composed modelled (ms)",
            "composed / flash",
            "flash peak (MiB)",
            "composed peak (MiB)",
            "composed / flash peak",
            "loss flash / composed",
            "emulated wall flash / composed (s)",
        ],
    );
    for s in train_sizes() {
        let run = |flash: bool| {
            let mut loss = 0.0;
            let m = measure(
                device,
                || train_step_inputs(s, flash, device),
                |t| {
                    loss = train_step(t, device);
                    Some(())
                },
            )
            .expect("a training step panics rather than returning out of memory");
            (m, loss)
        };
        let (f, f_loss) = run(true);
        let (c, c_loss) = run(false);
        table.row(vec![
            s.to_string(),
            ms(f.modelled),
            ms(c.modelled),
            format!("{:.2}x", c.modelled / f.modelled),
            mib(f.peak),
            mib(c.peak),
            format!("{:.2}x", c.peak as f64 / f.peak as f64),
            format!("{f_loss:.4} / {c_loss:.4}"),
            format!("{:.2} / {:.2}", f.wall, c.wall),
        ]);
    }
    table
}

/// The MLA prefill step (DeepSeek's dims): 16 query heads over one latent key row of 576 per
/// token, the values its first 512; no FIA form (the cache has no value rows).
const MLA_HEADS: usize = 16;
const MLA_DK: usize = 576;
const MLA_DV: usize = 512;

struct MlaPrefill {
    q: Tensor<B, 3>,
    k: Tensor<B, 3>,
    table: Vec<i32>,
}

fn mla_operands(d: &AscendDevice) -> MlaPrefill {
    let pages = (CACHED + CHUNK).div_ceil(PAGE);
    MlaPrefill {
        q: float([CHUNK, MLA_HEADS, MLA_DK], DType::BF16, 7, d),
        k: float([pages * PAGE, 1, MLA_DK], DType::BF16, 8, d),
        table: (0..pages as i32).rev().collect(),
    }
}

fn mla_roofline() -> f64 {
    let keys: f64 = (0..CHUNK).map(|i| (CACHED + i + 1) as f64).sum();
    let flops = 2.0 * MLA_HEADS as f64 * (MLA_DK + MLA_DV) as f64 * keys;
    let elems = CHUNK * MLA_HEADS * (MLA_DK + MLA_DV) + (CACHED + CHUNK) * MLA_DK;
    (flops / a2::cube_flops_per_s()).max(elems as f64 * 2.0 / a2::HBM_BYTES_PER_S)
}

/// The MLA step through `fused::extend_attention` (the device model has only the kernels).
fn mla_extend(p: &MlaPrefill, d: &AscendDevice) -> Tensor<B, 3> {
    fused::extend_attention(
        p.q.clone(),
        p.k.clone(),
        None,
        Tensor::<B, 2, Int>::from_data(
            TensorData::new(p.table.clone(), [1, p.table.len()]),
            (d, DType::I32),
        ),
        ExtendLens {
            value_dim: MLA_DV,
            ..EXTEND_LENS
        },
        1.0 / (MLA_DK as f32).sqrt(),
        None,
    )
}

/// The MLA chunk as decode rows over per-token key lists (the server's MLA prefill before).
fn mla_decode_rows(p: &MlaPrefill, d: &AscendDevice) -> Tensor<B, 3> {
    let slot = |pos: usize| p.table[pos / PAGE] * PAGE as i32 + (pos % PAGE) as i32;
    let (mut indptr, mut indices, mut splits) = (vec![0i32], Vec::new(), Vec::new());
    for i in 0..CHUNK {
        let keys = CACHED + i + 1;
        indices.extend((0..keys).map(slot));
        indptr.push(indices.len() as i32);
        splits.push(keys.div_ceil(32).clamp(1, MAX_KV_SPLITS) as i32);
    }
    let ints = |v: Vec<i32>| {
        let n = v.len();
        Tensor::<B, 1, Int>::from_data(TensorData::new(v, [n]), (d, DType::I32))
    };
    fused::decode_attention(
        p.q.clone(),
        p.k.clone(),
        None,
        ints(indptr),
        ints(indices),
        ints(splits),
        DecodeAttentionOptions {
            max_kv_splits: MAX_KV_SPLITS,
            sm_scale: 1.0 / (MLA_DK as f32).sqrt(),
            logit_cap: None,
            value_dim: MLA_DV,
            path: None,
        },
    )
    .0
}

fn bench(c: &mut Criterion) {
    let device = AscendDevice::default();
    let mut table = Table::new(
        "Attention, B = 1, H = 8, D = 128: modelled A2 time against the roofline, peak device \
         memory (flash: aclnnFlashAttentionScore; composed: the aclnn sequence over the score \
         matrix)",
        &[
            "case",
            "roofline (ms)",
            "flash modelled (ms)",
            "flash / roofline",
            "composed modelled (ms)",
            "composed / roofline",
            "composed / flash",
            "inputs (MiB)",
            "flash peak (MiB)",
            "composed peak (MiB)",
            "emulated wall flash / composed (s)",
        ],
    );
    for case in cases() {
        let flash_m = measure(
            &device,
            || operands(case, &device),
            |o| {
                flash(case, o);
                Some(())
            },
        )
        .expect("the flash path ran out of device memory");
        let comp_m = (case.s <= FULL_GRID_MAX_S).then(|| {
            measure(
                &device,
                || operands(case, &device),
                |o| composed_path(case, o).map(drop),
            )
        });
        let roof = case.roofline();
        let (cm, cr, cf, cp, cw) = match &comp_m {
            Some(Some(m)) => (
                ms(m.modelled),
                format!("{:.2}x", m.modelled / roof),
                format!("{:.2}x", m.modelled / flash_m.modelled),
                mib(m.peak),
                format!("{:.2}", m.wall),
            ),
            Some(None) => {
                let oom = "out of memory".to_string();
                (oom.clone(), "-".into(), "-".into(), oom, "-".into())
            }
            None => {
                let skipped = "not run (host memory)".to_string();
                (skipped.clone(), "-".into(), "-".into(), skipped, "-".into())
            }
        };
        table.row(vec![
            case.name(),
            ms(roof),
            ms(flash_m.modelled),
            format!("{:.2}x", flash_m.modelled / roof),
            cm,
            cr,
            cf,
            mib(flash_m.inputs),
            mib(flash_m.peak),
            cp,
            format!("{:.2} / {cw}", flash_m.wall),
        ]);
    }

    let mut prefill = Table::new(
        &format!(
            "Paged prefill step: a chunk of {CHUNK} after {CACHED} cached tokens, pages of \
             {PAGE}, f16, 8 query / 2 key-value heads, D = 128"
        ),
        &[
            "path",
            "modelled (ms)",
            "roofline (ms)",
            "modelled / roofline",
            "vs paged prefill",
            "inputs (MiB)",
            "peak (MiB)",
            "emulated wall (s)",
        ],
    );
    let roof = prefill_roofline();
    let paged = measure(
        &device,
        || prefill_operands(&device),
        |p| {
            paged_prefill(p, &device);
            Some(())
        },
    )
    .expect("paged prefill ran out of device memory");
    let listed = measure(
        &device,
        || prefill_operands(&device),
        |p| {
            decode_rows(p, &device);
            Some(())
        },
    )
    .expect("decode_attention ran out of device memory");
    let kernels = measure(
        &device,
        || prefill_operands(&device),
        |p| {
            extend_kernels(p, &device);
            Some(())
        },
    )
    .expect("the extend kernels ran out of device memory");
    let (kernels_est, fia_est) = extend_estimates(&prefill_operands(&device), &device);
    for (name, m) in [
        (
            "fused::paged_prefill_attention (FIA V3, block table)",
            &paged,
        ),
        (
            "fused::extend_attention, extend kernels (cube, block table)",
            &kernels,
        ),
        ("decode_attention over per-token key lists", &listed),
    ] {
        prefill.row(vec![
            name.into(),
            ms(m.modelled),
            ms(roof),
            format!("{:.2}x", m.modelled / roof),
            format!("{:.2}x", m.modelled / paged.modelled),
            mib(m.inputs),
            mib(m.peak),
            format!("{:.2}", m.wall),
        ]);
    }

    let mut mla = Table::new(
        &format!(
            "MLA paged prefill step (DeepSeek's dims): a chunk of {CHUNK} after {CACHED} cached \
             tokens, pages of {PAGE}, bf16, 16 query heads over one latent row of 576 (values: \
             its first 512)"
        ),
        &[
            "path",
            "modelled (ms)",
            "roofline (ms)",
            "modelled / roofline",
            "vs extend kernels",
            "inputs (MiB)",
            "peak (MiB)",
            "emulated wall (s)",
        ],
    );
    let roof = mla_roofline();
    let extend = measure(
        &device,
        || mla_operands(&device),
        |p| {
            mla_extend(p, &device);
            Some(())
        },
    )
    .expect("the MLA extend kernels ran out of device memory");
    let listed = measure(
        &device,
        || mla_operands(&device),
        |p| {
            mla_decode_rows(p, &device);
            Some(())
        },
    )
    .expect("MLA decode_attention ran out of device memory");
    for (name, m) in [
        ("fused::extend_attention (extend kernels, cube)", &extend),
        ("decode_attention over per-token key lists", &listed),
    ] {
        mla.row(vec![
            name.into(),
            ms(m.modelled),
            ms(roof),
            format!("{:.2}x", m.modelled / roof),
            format!("{:.2}x", m.modelled / extend.modelled),
            mib(m.inputs),
            mib(m.peak),
            format!("{:.2}", m.wall),
        ]);
    }
    let training = training_table(&device);

    // Criterion's wall time of the smallest size only: the tables above are one call each.
    let small = Case {
        s: 512,
        dtype: DType::F16,
        masking: Masking::Causal,
        kv_heads: HEADS,
    };
    reset_device(&device).unwrap();
    let o = operands(small, &device);
    c.bench_function("attention/flash/S=512 F16 causal", |b| {
        b.iter(|| {
            flash(small, &o);
            B::sync(&device).unwrap();
        })
    });
    c.bench_function("attention/composed/S=512 F16 causal", |b| {
        b.iter(|| {
            composed_path(small, &o);
            B::sync(&device).unwrap();
        })
    });

    publish(
        "attention",
        &[table, prefill, mla, training],
        &[
            "Modelled: `a2::ModelledClock` over one call on a freshly reset device. It models \
             each aclnn operator at its tensor arguments' bytes over 1.6 TB/s and no compute, so \
             the flash operator's figure is its q/k/v/o (+ mask, softmax statistics) traffic: \
             below a FLOP-bound roofline (a ratio under 1 says the model leaves the cube out, \
             not that the operator beats the roofline). The composed path's figure is its score \
             matrix traffic over the dozen operators.",
            "Roofline: max(4·B·H·S²·D FLOPs (halved for causal) at the cube peak of the \
             modelled SoC, q/k/v/o bytes at 1.6 TB/s); the boolean mask's S² bytes are not in \
             it.",
            "Peak: the tensor allocator's highest bytes in use during the call, inputs included \
             (the inputs column: q, k, v and the [1, 1, S, S] mask); aclnn workspaces are a \
             separate pool, not counted.",
            "Emulated wall: this machine's time for the call (the emulated operators run on the \
             host), not NPU speed.",
            &format!(
                "Paged prefill, the device model's choice (`tiling::extend_attention` estimates, \
                 what `fused::extend_attention` picks from on its own): extend kernels {} ms, \
                 FIA {} ms.",
                ms(kernels_est),
                ms(fia_est)
            ),
            "Training step: one forward, loss, backward and Adam update on a freshly reset \
             device, parameters initialised before; peak includes the weights, the Adam state \
             is created by the step. The same weights and tokens on both paths (the losses \
             agree to rounding).",
        ],
    );
}

criterion_group! {
    name = benches;
    config = common::criterion();
    targets = bench
}
criterion_main!(benches);
