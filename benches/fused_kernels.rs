//! The fused ops at the seed sizes of the fused-ops specification: the Ascend C kernel on the
//! emulated NPU beside its composed default (`burn_ascend::fused::composed`, the standard Burn
//! ops the trait defaults are made of) and, where CANN has one, CANN's own operator, all on the
//! same emulated NPU. Then, from one more launch of each kernel, the emulation counters, a
//! modelled Atlas A2 device time against the bandwidth limit, and what the kernels' always-on
//! device-side checks cost in that model.

mod common;

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Int, Tensor, TensorData};
use burn_ascend::emulator::kernel_runner::{clear_launch_log, launch_log, CoreKind, LaunchStats};
use burn_ascend::fused::{composed, DecodeAttentionOptions};
use burn_ascend::ops::fused as device;
use burn_ascend::{Ascend, AscendDevice, FusedOps};
use burn_ascend_kernels::tiling::{self, DecodeShape, DeviceProps, NormType};
use burn_ascend_perf::a2;
use burn_ascend_suite::host_values::host_values;
use common::{mean, publish, ratio, timed, us, Table};
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};

type Run = Box<dyn FnMut()>;

/// Which implementation of a fused op a case runs.
#[derive(Debug, Clone, Copy)]
enum Path {
    /// The backend's `FusedOps` method (on Ascend, the Ascend C kernel).
    Kernel,
    /// The composed default, on the same backend.
    Composed,
}

/// Calls fused op `$op` of backend `B` on primitives, by `$path`.
macro_rules! call {
    ($path:expr, $op:ident($($arg:expr),* $(,)?)) => {
        match $path {
            Path::Kernel => drop(<B as FusedOps>::$op($($arg),*)),
            Path::Composed => drop(composed::$op::<B>($($arg),*)),
        }
    };
}

fn prim<B: Backend, const D: usize>(t: Tensor<B, D>) -> burn::tensor::ops::FloatTensor<B> {
    t.into_primitive().tensor()
}

fn ascend() -> AscendDevice {
    AscendDevice::Emulated(0)
}

fn float<B: Backend, const D: usize>(
    shape: [usize; D],
    seed: u64,
    dtype: DType,
    d: &B::Device,
) -> Tensor<B, D> {
    Tensor::from_data(
        host_values(shape.to_vec(), seed).convert_dtype(dtype),
        (d, dtype),
    )
}

fn ints<B: Backend>(v: &[i32], d: &B::Device) -> Tensor<B, 1, Int> {
    Tensor::from_data(TensorData::new(v.to_vec(), [v.len()]), (d, DType::I32))
}

/// Top-k expert ids `[T*K]` (distinct per token) as routing would pick them.
fn expert_ids(tokens: usize, top_k: usize, experts: usize) -> Vec<i32> {
    (0..tokens)
        .flat_map(|t| {
            let base = ((t as u64 * 2654435761 + 11) >> 7) as usize % experts;
            (0..top_k).map(move |k| ((base + k * 5) % experts) as i32)
        })
        .collect()
}

/// The stable argsort of the ids: the expert-major permutation moe_gather/moe_scatter take.
fn sort_order(ids: &[i32]) -> Vec<i32> {
    let mut order: Vec<i32> = (0..ids.len() as i32).collect();
    order.sort_by_key(|&slot| ids[slot as usize]);
    order
}

/// A permutation of `0..n` that scatters neighbours far apart.
fn scattered(n: usize) -> Vec<i32> {
    let stride = (0..)
        .map(|k| n / 2 + 1 + k)
        .find(|s| gcd(*s, n) == 1)
        .unwrap();
    (0..n).map(|i| ((i * stride) % n) as i32).collect()
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// One fused op at one size: the kernel, its composed default and CANN's operator, if any.
struct Case {
    name: &'static str,
    size: String,
    fused: Run,
    composed: Run,
    cann: Option<(&'static str, Run)>,
    /// The least global-memory traffic the op's contract allows (inputs read once, outputs
    /// written once), bytes.
    min_bytes: u64,
    /// The kernels with always-on device-side checks, and how many values each launch checks
    /// (an index, a length pair, a page id: one `Require` each).
    checks: Vec<(&'static str, u64)>,
}

fn vector_add<B: FusedOps>(d: &B::Device, path: Path) -> Run {
    let n = 16384;
    let x = Tensor::<B, 1, Int>::arange(0..n, d).cast(DType::I32);
    let y = x.clone() * 3;
    let (x, y) = (x.into_primitive(), y.into_primitive());
    // The composed default of an integer vector add is the backend's own add.
    Box::new(move || match path {
        Path::Kernel => drop(B::int_vector_add(x.clone(), y.clone())),
        Path::Composed => drop(B::int_add(x.clone(), y.clone())),
    })
}

fn layer_norm<B: FusedOps>(m: usize, n: usize, d: &B::Device, path: Path) -> Run {
    let x = prim(float::<B, 2>([m, n], 1, DType::F32, d));
    let gamma = prim(float::<B, 1>([n], 2, DType::F32, d));
    let beta = prim(float::<B, 1>([n], 3, DType::F32, d));
    Box::new(move || {
        call!(
            path,
            layer_norm(x.clone(), Some(gamma.clone()), Some(beta.clone()), 1e-6)
        )
    })
}

fn layer_norm_backward<B: FusedOps>(d: &B::Device, path: Path) -> Run {
    let (m, n) = (256, 128);
    let dy = prim(float::<B, 2>([m, n], 1, DType::F32, d));
    let x = prim(float::<B, 2>([m, n], 2, DType::F32, d));
    let mean = prim(float::<B, 1>([m], 3, DType::F32, d));
    let rstd = prim(float::<B, 1>([m], 4, DType::F32, d).abs() + 0.5);
    let gamma = prim(float::<B, 1>([n], 5, DType::F32, d));
    Box::new(move || {
        call!(
            path,
            layer_norm_backward(
                dy.clone(),
                x.clone(),
                mean.clone(),
                rstd.clone(),
                Some(gamma.clone()),
            )
        )
    })
}

/// The MoE routing seed size: T=1024, H=1536, E=64, K=4, f16.
const MOE: (usize, usize, usize, usize) = (1024, 1536, 64, 4);

fn moe_gather<B: FusedOps>(d: &B::Device, path: Path) -> Run {
    let (t, h, e, k) = MOE;
    let x = prim(float::<B, 2>([t, h], 1, DType::F16, d));
    let idx = ints::<B>(&sort_order(&expert_ids(t, k, e)), d).into_primitive();
    Box::new(move || call!(path, moe_gather(x.clone(), idx.clone(), k)))
}

fn moe_scatter<B: FusedOps>(d: &B::Device, path: Path) -> Run {
    let (t, h, e, k) = MOE;
    let y = prim(float::<B, 2>([t * k, h], 1, DType::F16, d));
    let w = prim(float::<B, 1>([t * k], 2, DType::F16, d));
    let idx = ints::<B>(&sort_order(&expert_ids(t, k, e)), d).into_primitive();
    Box::new(move || {
        call!(
            path,
            moe_scatter(y.clone(), idx.clone(), Some(w.clone()), k)
        )
    })
}

/// aclnnMoeInitRoutingV2: routes from the expert ids, so it also sorts (our gather is given
/// the permutation).
fn cann_init_routing() -> Run {
    let (t, h, e, k) = MOE;
    let d = ascend();
    let x = float::<Ascend, 2>([t, h], 1, DType::F16, &d)
        .into_primitive()
        .tensor();
    let ids = Tensor::<Ascend, 2, Int>::from_data(
        TensorData::new(expert_ids(t, k, e), [t, k]),
        (&d, DType::I32),
    )
    .into_primitive();
    Box::new(move || drop(device::cann_moe_init_routing(&x, &ids, e, None).unwrap()))
}

/// aclnnMoeTokenUnpermute on the inverse permutation, weights `[T, K]`.
fn cann_token_unpermute() -> Run {
    let (t, h, e, k) = MOE;
    let d = ascend();
    let order = sort_order(&expert_ids(t, k, e));
    let mut inverse = vec![0i32; t * k];
    for (row, &slot) in order.iter().enumerate() {
        inverse[slot as usize] = row as i32;
    }
    let y = float::<Ascend, 2>([t * k, h], 1, DType::F16, &d)
        .into_primitive()
        .tensor();
    let probs = float::<Ascend, 2>([t, k], 2, DType::F16, &d)
        .into_primitive()
        .tensor();
    let rows = ints::<Ascend>(&inverse, &d).into_primitive();
    Box::new(move || drop(device::cann_moe_token_unpermute(&y, &rows, Some(&probs)).unwrap()))
}

fn token_rearrange<B: FusedOps>(d: &B::Device, path: Path) -> Run {
    let (s, dim) = (1024, 32);
    let x = prim(float::<B, 2>([s, dim], 1, DType::F32, d));
    let perm = ints::<B>(&scattered(s), d).into_primitive();
    Box::new(move || call!(path, token_rearrange(x.clone(), perm.clone())))
}

fn alloc_extend<B: FusedOps>(d: &B::Device, path: Path) -> Run {
    let free = ints::<B>(&scattered(2048), d).into_primitive();
    let (prefix, seq, last) = (
        ints::<B>(&[0, 0], d).into_primitive(),
        ints::<B>(&[1000, 1500], d).into_primitive(),
        ints::<B>(&[0, 0], d).into_primitive(),
    );
    Box::new(move || {
        call!(
            path,
            alloc_extend(
                prefix.clone(),
                seq.clone(),
                last.clone(),
                free.clone(),
                128,
                2500,
            )
        )
    })
}

/// Decode attention shape: batch, keys per request, q heads, kv heads, Dk, Dv, MLA.
struct Attn {
    batch: usize,
    len: usize,
    q_heads: usize,
    kv_heads: usize,
    dim_k: usize,
    dim_v: usize,
    mla: bool,
}

impl Attn {
    /// q, the keys (and values) read once, the indices, out and lse written once.
    const fn min_bytes(&self) -> usize {
        let keys = self.batch * self.len;
        let values = if self.mla {
            0
        } else {
            keys * self.kv_heads * self.dim_v * 2
        };
        self.batch * self.q_heads * self.dim_k * 2
            + keys * self.kv_heads * self.dim_k * 2
            + values
            + (keys + 2 * self.batch + 1) * 4
            + self.batch * self.q_heads * (self.dim_v * 2 + 4)
    }
}

const MLA: Attn = Attn {
    batch: 1,
    len: 128,
    q_heads: 32,
    kv_heads: 1,
    dim_k: 576,
    dim_v: 512,
    mla: true,
};
impl Attn {
    /// Values stage 1 checks per launch: five per unit (kv_indptr's pair, its order, the
    /// request's length, its split count) and one per key slot each unit reads.
    fn checks(&self) -> u64 {
        let shape = DecodeShape {
            batch: self.batch as u64,
            q_heads: self.q_heads as u64,
            kv_heads: self.kv_heads as u64,
            head_dim_k: self.dim_k as u64,
            head_dim_v: self.dim_v as u64,
            max_splits: 4,
            slots: (self.batch * self.len) as u64,
            indices: (self.batch * self.len) as u64,
            value_from_key: self.mla,
        };
        let plan = tiling::decode_attention(
            &shape,
            NormType::BF16,
            1.0,
            0.0,
            None,
            &DeviceProps::ATLAS_A2,
        )
        .expect("the seed shapes fit");
        // The model keeps both benched shapes on the vector path.
        let tiling::DecodeStage1::Vector(stage1) = plan.stage1 else {
            panic!("{shape:?} takes the vector path");
        };
        let group = (self.q_heads / self.kv_heads) as u64;
        let head_tiles = group.div_ceil(stage1.tiling.head_tile as u64);
        let units = shape.batch * shape.kv_heads * head_tiles * shape.max_splits;
        units * 5 + shape.batch * shape.kv_heads * head_tiles * self.len as u64
    }
}

/// MLA at a batch where the model takes the cube path (the seed stays on the vector path).
const MLA_B4: Attn = Attn {
    batch: 4,
    len: 512,
    ..MLA
};

const GQA: Attn = Attn {
    batch: 8,
    len: 1024,
    q_heads: 32,
    kv_heads: 8,
    dim_k: 128,
    dim_v: 128,
    mla: false,
};

fn decode_attention<B: FusedOps>(a: &'static Attn, d: &B::Device, path: Path) -> Run {
    let slots = a.batch * a.len;
    let dtype = DType::BF16;
    let tensor = |shape: [usize; 3], seed| {
        float::<B, 3>(shape, seed, dtype, d)
            .into_primitive()
            .tensor()
    };
    let q = tensor([a.batch, a.q_heads, a.dim_k], 1);
    let k = tensor([slots, a.kv_heads, a.dim_k], 2);
    let v = (!a.mla).then(|| tensor([slots, a.kv_heads, a.dim_v], 3));
    let indptr: Vec<i32> = (0..=a.batch).map(|b| (b * a.len) as i32).collect();
    let (indptr, indices) = (
        ints::<B>(&indptr, d).into_primitive(),
        ints::<B>(&scattered(slots), d).into_primitive(),
    );
    let splits = ints::<B>(&vec![4; a.batch], d).into_primitive();
    let options = DecodeAttentionOptions {
        max_kv_splits: 4,
        sm_scale: (a.dim_k as f32).powf(-0.5),
        logit_cap: None,
        value_dim: a.dim_v,
        path: None,
    };
    Box::new(move || {
        call!(
            path,
            decode_attention(
                q.clone(),
                k.clone(),
                v.clone(),
                indptr.clone(),
                indices.clone(),
                splits.clone(),
                options,
            )
        )
    })
}

/// No seed size in the specification: 8 experts of 128x128 over 512 rows, f32.
fn grouped_matmul<B: FusedOps>(d: &B::Device, path: Path) -> Run {
    let (rows, e, kn) = (512, 8, 128);
    let x = prim(float::<B, 2>([rows, kn], 1, DType::F32, d));
    let w = prim(float::<B, 3>([e, kn, kn], 2, DType::F32, d));
    let sizes = ints::<B>(&vec![(rows / e) as i32; e], d).into_primitive();
    Box::new(move || call!(path, grouped_matmul(x.clone(), w.clone(), sizes.clone())))
}

/// RMS norm over rows of a Llama/Mixtral-sized hidden dim (CANN's operators on Ascend).
fn rms_norm<B: FusedOps>(m: usize, n: usize, d: &B::Device, path: Path) -> Run {
    let x = prim(float::<B, 2>([m, n], 1, DType::F32, d));
    let gamma = prim(float::<B, 1>([n], 2, DType::F32, d));
    Box::new(move || call!(path, rms_norm(x.clone(), gamma.clone(), 1e-6)))
}

fn add_rms_norm<B: FusedOps>(m: usize, n: usize, d: &B::Device, path: Path) -> Run {
    let x1 = prim(float::<B, 2>([m, n], 1, DType::F32, d));
    let x2 = prim(float::<B, 2>([m, n], 3, DType::F32, d));
    let gamma = prim(float::<B, 1>([n], 2, DType::F32, d));
    Box::new(move || {
        call!(
            path,
            add_rms_norm(x1.clone(), x2.clone(), gamma.clone(), 1e-6)
        )
    })
}

fn rms_norm_backward<B: FusedOps>(m: usize, n: usize, d: &B::Device, path: Path) -> Run {
    let dy = prim(float::<B, 2>([m, n], 1, DType::F32, d));
    let x = prim(float::<B, 2>([m, n], 2, DType::F32, d));
    let rstd = prim(float::<B, 1>([m], 4, DType::F32, d).abs() + 0.5);
    let gamma = prim(float::<B, 1>([n], 5, DType::F32, d));
    Box::new(move || {
        call!(
            path,
            rms_norm_backward(dy.clone(), x.clone(), rstd.clone(), gamma.clone())
        )
    })
}

fn cases() -> Vec<Case> {
    let a = ascend();
    let case = |name, size: &str, fused: Run, composed: Run, cann, min_bytes| Case {
        name,
        size: size.to_string(),
        fused,
        composed,
        cann,
        min_bytes: min_bytes as u64,
        checks: vec![],
    };
    let checked = |c: Case, checks: Vec<(&'static str, u64)>| Case { checks, ..c };
    let (t, k) = (MOE.0 as u64, MOE.3 as u64);
    let aclnn_add: Run = {
        let x = Tensor::<Ascend, 1, Int>::arange(0..16384, &a).cast(DType::I32);
        let y = x.clone() * 3;
        Box::new(move || drop(x.clone() + y.clone()))
    };
    let mut v = vec![case(
        "vector_add",
        "16384 i32",
        vector_add::<Ascend>(&a, Path::Kernel),
        vector_add::<Ascend>(&a, Path::Composed),
        Some(("aclnnAdd", aclnn_add)),
        3 * 16384 * 4,
    )];
    for n in [128, 1536, 4096, 8192] {
        v.push(case(
            "layer_norm",
            &format!("256x{n} f32"),
            layer_norm::<Ascend>(256, n, &a, Path::Kernel),
            layer_norm::<Ascend>(256, n, &a, Path::Composed),
            None,
            (2 * 256 * n + 2 * n + 2 * 256) * 4,
        ));
    }
    v.push(case(
        "layer_norm_backward",
        "256x128 f32",
        layer_norm_backward::<Ascend>(&a, Path::Kernel),
        layer_norm_backward::<Ascend>(&a, Path::Composed),
        None,
        (3 * 256 * 128 + 2 * 256 + 3 * 128) * 4,
    ));
    v.push(checked(
        case(
            "moe_gather",
            "T1024 H1536 K4 f16",
            moe_gather::<Ascend>(&a, Path::Kernel),
            moe_gather::<Ascend>(&a, Path::Composed),
            Some(("aclnnMoeInitRoutingV2", cann_init_routing())),
            2 * 1024 * 4 * 1536 * 2 + 1024 * 4 * 4,
        ),
        vec![("moe_gather", t * k)],
    ));
    v.push(checked(
        case(
            "moe_scatter",
            "T1024 H1536 K4 f16",
            moe_scatter::<Ascend>(&a, Path::Kernel),
            moe_scatter::<Ascend>(&a, Path::Composed),
            Some(("aclnnMoeTokenUnpermute", cann_token_unpermute())),
            1024 * 4 * 1536 * 2 + 1024 * 1536 * 2 + 1024 * 4 * (4 + 2),
        ),
        vec![("moe_scatter_inverse", t * k), ("moe_scatter", t * k)],
    ));
    v.push(checked(
        case(
            "token_rearrange",
            "S1024 D32 f32",
            token_rearrange::<Ascend>(&a, Path::Kernel),
            token_rearrange::<Ascend>(&a, Path::Composed),
            None,
            2 * 1024 * 32 * 4 + 1024 * 4,
        ),
        vec![("token_rearrange", 1024)],
    ));
    // Per request: the length pair, the running total and last_loc; per page taken: its list
    // entry and its id (20 pages); the last block's sum.
    v.push(checked(
        case(
            "alloc_extend",
            "B2 page128 seq 1000,1500 i32",
            alloc_extend::<Ascend>(&a, Path::Kernel),
            alloc_extend::<Ascend>(&a, Path::Composed),
            None,
            (3 * 2 + 20 + 2500 + 2) * 4,
        ),
        vec![("alloc_extend", 3 * 2 + 2 * 20 + 1)],
    ));
    v.push(checked(
        case(
            "decode_attention",
            "MLA B1 S128 HQ32 Dk576 bf16",
            decode_attention::<Ascend>(&MLA, &a, Path::Kernel),
            decode_attention::<Ascend>(&MLA, &a, Path::Composed),
            None,
            MLA.min_bytes(),
        ),
        vec![("decode_attention_stage1", MLA.checks())],
    ));
    v.push(case(
        "decode_attention",
        "MLA B4 S512 HQ32 Dk576 bf16 (cube path)",
        decode_attention::<Ascend>(&MLA_B4, &a, Path::Kernel),
        decode_attention::<Ascend>(&MLA_B4, &a, Path::Composed),
        None,
        MLA_B4.min_bytes(),
    ));
    v.push(checked(
        case(
            "decode_attention",
            "GQA B8 S1024 HQ32 HKV8 D128 bf16",
            decode_attention::<Ascend>(&GQA, &a, Path::Kernel),
            decode_attention::<Ascend>(&GQA, &a, Path::Composed),
            None,
            GQA.min_bytes(),
        ),
        vec![("decode_attention_stage1", GQA.checks())],
    ));
    // aclnn operators: wall time only, the A2 model reads kernel launches.
    let (m, n) = (256, 4096);
    v.push(case(
        "rms_norm",
        "256x4096 f32",
        rms_norm::<Ascend>(m, n, &a, Path::Kernel),
        rms_norm::<Ascend>(m, n, &a, Path::Composed),
        None,
        (2 * m * n + n + m) * 4,
    ));
    v.push(case(
        "add_rms_norm",
        "256x4096 f32",
        add_rms_norm::<Ascend>(m, n, &a, Path::Kernel),
        add_rms_norm::<Ascend>(m, n, &a, Path::Composed),
        None,
        (4 * m * n + n + m) * 4,
    ));
    v.push(case(
        "rms_norm_backward",
        "256x4096 f32",
        rms_norm_backward::<Ascend>(m, n, &a, Path::Kernel),
        rms_norm_backward::<Ascend>(m, n, &a, Path::Composed),
        None,
        (3 * m * n + m + 2 * n) * 4,
    ));
    v.push(case(
        "grouped_matmul",
        "R512 E8 128x128 f32",
        grouped_matmul::<Ascend>(&a, Path::Kernel),
        grouped_matmul::<Ascend>(&a, Path::Composed),
        None,
        (2 * 512 * 128 + 8 * 128 * 128 + 8) * 4,
    ));
    v
}

fn sync_ascend() {
    Ascend::sync(&ascend()).unwrap();
}

/// Why an op's modelled time is above 1.2x the bandwidth limit of its minimum traffic, from
/// its launches' counters: extra traffic, or too few (or unbalanced) cores.
fn why(launches: &[LaunchStats], min_bytes: u64, modelled: f64) -> String {
    let limit = min_bytes as f64 / a2::HBM_BYTES_PER_S;
    if modelled <= 1.2 * limit {
        return "within 1.2x".into();
    }
    let mut reasons = Vec::new();
    let moved: u64 = launches
        .iter()
        .map(|s| s.gm_bytes_read + s.gm_bytes_written)
        .sum();
    if moved as f64 > 1.1 * min_bytes as f64 {
        reasons.push(format!(
            "moves {:.2}x the minimum traffic (re-reads or intermediates): fewer passes over GM",
            moved as f64 / min_bytes as f64
        ));
    }
    for s in launches {
        let m = a2::model(s);
        if m.bound == a2::Bound::Vector && m.roofline > 1.2 * m.limit {
            reasons.push(format!(
                "{} is vector-bound ({:.2} µs of vector repeats on the busiest core against \
                 {:.2} µs of bytes): fewer or wider vector instructions",
                s.kernel,
                m.vector * 1e6,
                m.limit * 1e6
            ));
        } else if m.bound == a2::Bound::Cube && m.roofline > 1.2 * m.limit {
            reasons.push(format!(
                "{} is cube-bound ({:.2} µs of Mmad cycles on the busiest cube core against \
                 {:.2} µs of bytes)",
                s.kernel,
                m.cube * 1e6,
                m.limit * 1e6
            ));
        } else if m.roofline > 1.2 * m.limit {
            let cores = match s.cores {
                CoreKind::Cube => a2::cube_cores(),
                CoreKind::Vector => a2::vector_cores(),
            };
            reasons.push(if s.block_dim < cores {
                format!(
                    "{} on {} of {} cores, one core's GM rate bounds it: more, smaller blocks",
                    s.kernel, s.block_dim, cores
                )
            } else {
                format!(
                    "{} blocks unbalanced ({:.2}x the mean): split the work finer",
                    s.kernel,
                    a2::balance(s)
                )
            });
        }
    }
    if limit < 1e-6 {
        reasons.push(format!(
            "the limit ({:.3} µs) is far below any launch latency: latency-bound at this size",
            limit * 1e6
        ));
    }
    reasons.join("; ")
}

fn fused_kernels(c: &mut Criterion) {
    let mut cases = cases();
    let key = |c: &Case, side: &str| format!("{}/{}/{side}", c.name, c.size);
    let mut g = c.benchmark_group("fused_kernels");
    // Each call moves megabytes through the emulation: the same iterations per sample keeps the
    // total short.
    g.sampling_mode(SamplingMode::Flat);
    for case in &mut cases {
        let id = format!("{}/{}", case.name, case.size);
        let k = key(case, "fused");
        g.bench_function(format!("{id}/ascend_fused"), |b| {
            timed(b, &k, &mut case.fused, sync_ascend);
            clear_launch_log();
        });
        let k = key(case, "composed");
        g.bench_function(format!("{id}/ascend_composed"), |b| {
            timed(b, &k, &mut case.composed, sync_ascend)
        });
        let k = key(case, "cann");
        if let Some((op, run)) = &mut case.cann {
            g.bench_function(format!("{id}/ascend_{op}"), |b| {
                timed(b, &k, &mut *run, sync_ascend)
            });
        }
    }
    g.finish();

    let mut wall = Table::new(
        "Fused ops: wall time per call on the emulated NPU: kernel vs composed default and \
         CANN's op",
        &[
            "op",
            "size",
            "fused, Ascend emul. (µs)",
            "composed, Ascend emul. (µs)",
            "fused / composed",
            "CANN op",
            "CANN, Ascend emul. (µs)",
            "fused / CANN",
        ],
    );
    let mut counters = Table::new(
        "Emulation counters, one call of each fused op",
        &[
            "op",
            "size",
            "kernel",
            "blocks",
            "GM read (B)",
            "GM written (B)",
            "data copies",
            "UB peak (B)",
            "busiest block / mean",
        ],
    );
    let mut model = Table::new(
        "MODELLED Atlas A2 (910B, 48 AIV, 1.6 TB/s) device time per launch - a roofline from \
         the counters, not a measurement",
        &[
            "op",
            "size",
            "kernel",
            "GM bytes",
            "vector instr. / repeats",
            "bytes / peak BW (µs)",
            "busiest core GM (µs)",
            "busiest core vector (µs)",
            "cores, Mmad calls / cycles",
            "busiest core cube (µs)",
            "bound",
            "roofline (µs)",
            "modelled, + launch (µs)",
            "roofline / limit",
        ],
    );
    let mut per_op = Table::new(
        "MODELLED Atlas A2 time per op against the bandwidth limit of the contract's minimum \
         traffic - a model, not a measurement",
        &[
            "op",
            "size",
            "GM bytes moved",
            "contract minimum",
            "bound (slowest launch)",
            "roofline (µs)",
            "limit at minimum (µs)",
            "roofline / limit",
            "modelled, + launches (µs)",
            "why not within 1.2x / what would close it",
        ],
    );
    let mut checks = Table::new(
        "MODELLED cost of the always-on device-side checks per op - the A2 model charges GM \
         bytes, and the checks read none; the scalar bound is an estimate outside the model",
        &[
            "op",
            "size",
            "kernels",
            "values checked",
            "GM bytes the checks read",
            "modelled (µs)",
            "checks / modelled (model)",
            "scalar bound, busiest blocks (µs)",
            "scalar bound / modelled",
        ],
    );
    for case in &mut cases {
        let (f, comp) = (mean(&key(case, "fused")), mean(&key(case, "composed")));
        let cann = case
            .cann
            .as_ref()
            .map(|(op, _)| (*op, mean(&key(case, "cann"))));
        wall.row(vec![
            case.name.into(),
            case.size.clone(),
            us(f),
            us(comp),
            ratio(f, comp),
            cann.map_or("-".into(), |c| c.0.into()),
            us(cann.and_then(|c| c.1)),
            ratio(f, cann.and_then(|c| c.1)),
        ]);
        sync_ascend();
        clear_launch_log();
        (case.fused)();
        sync_ascend();
        let log = launch_log();
        if log.is_empty() {
            counters.row(vec![
                case.name.into(),
                case.size.clone(),
                "(aclnn operator: no Ascend C counters)".into(),
            ]);
        }
        if !case.checks.is_empty() {
            // Each launch's busiest block checks its share of the values, scaled like its bytes.
            let bound: f64 = log
                .iter()
                .filter_map(|s| {
                    let values = case.checks.iter().find(|c| c.0 == s.kernel)?.1;
                    Some(values as f64 / s.block_dim as f64 * a2::balance(s))
                })
                .sum::<f64>()
                * a2::SCALAR_CYCLES_PER_CHECK
                / a2::clock_hz();
            let modelled: f64 = log.iter().map(|s| a2::model(s).modelled).sum();
            checks.row(vec![
                case.name.into(),
                case.size.clone(),
                case.checks
                    .iter()
                    .map(|c| c.0)
                    .collect::<Vec<_>>()
                    .join(", "),
                case.checks.iter().map(|c| c.1).sum::<u64>().to_string(),
                "0".into(),
                format!("{:.2}", modelled * 1e6),
                "0.00 %".into(),
                format!("{:.3}", bound * 1e6),
                format!("{:.2} %", 100.0 * bound / modelled),
            ]);
        }
        for s in &log {
            let m = a2::model(s);
            counters.row(vec![
                case.name.into(),
                case.size.clone(),
                s.kernel.clone(),
                s.block_dim.to_string(),
                s.gm_bytes_read.to_string(),
                s.gm_bytes_written.to_string(),
                s.data_copies.to_string(),
                s.ub_peak_bytes.to_string(),
                format!("{:.2}", a2::balance(s)),
            ]);
            model.row(vec![
                case.name.into(),
                case.size.clone(),
                s.kernel.clone(),
                (s.gm_bytes_read + s.gm_bytes_written).to_string(),
                format!("{} / {}", s.vector_instructions, s.vector_repeats),
                format!("{:.2}", m.limit * 1e6),
                format!("{:.2}", m.core_gm * 1e6),
                format!("{:.2}", m.vector * 1e6),
                match s.cores {
                    CoreKind::Cube => format!("cube, {} / {}", s.mmad_calls, s.cube_cycles),
                    CoreKind::Vector => "vector, 0 / 0".into(),
                },
                format!("{:.2}", m.cube * 1e6),
                m.bound.name().into(),
                format!("{:.2}", m.roofline * 1e6),
                format!("{:.2}", m.modelled * 1e6),
                format!("{:.2}x", m.roofline / m.limit.max(f64::MIN_POSITIVE)),
            ]);
        }
        if !log.is_empty() {
            let moved: u64 = log
                .iter()
                .map(|s| s.gm_bytes_read + s.gm_bytes_written)
                .sum();
            let models: Vec<a2::Model> = log.iter().map(a2::model).collect();
            let roofline: f64 = models.iter().map(|m| m.roofline).sum();
            let modelled: f64 = models.iter().map(|m| m.modelled).sum();
            let slowest = models
                .iter()
                .max_by(|a, b| a.roofline.total_cmp(&b.roofline))
                .map_or(a2::Bound::Hbm, |m| m.bound);
            let limit = case.min_bytes as f64 / a2::HBM_BYTES_PER_S;
            per_op.row(vec![
                case.name.into(),
                case.size.clone(),
                moved.to_string(),
                case.min_bytes.to_string(),
                slowest.name().into(),
                format!("{:.2}", roofline * 1e6),
                format!("{:.2}", limit * 1e6),
                format!("{:.2}x", roofline / limit),
                format!("{:.2}", modelled * 1e6),
                why(&log, case.min_bytes, roofline),
            ]);
        }
    }
    clear_launch_log();
    publish(
        "fused_kernels",
        &[wall, counters, model, per_op, checks],
        &[
            "Wall times are criterion's means in this run, all on the emulated NPU (kernels and \
             aclnn ops run on the host CPU); they compare code paths on this machine, not NPU \
             speed.",
            "The composed default is `burn_ascend::fused::composed` (what the `FusedOps` trait \
             defaults run) on the same device; vector_add's is the backend's add.",
            "aclnnMoeInitRoutingV2 also sorts the expert ids; moe_gather is given the permutation.",
            "No CANN baseline for layer norm: aclnnLayerNorm is not in the seam's function list.",
            "THE A2 TIMES ARE A MODEL, NOT A MEASUREMENT: a roofline per launch, max(all GM \
             bytes / 1.6 TB/s, busiest core's GM bytes / (32 B/cycle x 1.8 GHz), busiest core's \
             vector repeats / (1 repeat/cycle x 1.8 GHz), busiest cube core's Mmad cycles / \
             1.8 GHz), blocks dealt round-robin to 48 vector cores (24 cube cores for a cube \
             kernel), plus 3 µs of launch latency (ASSUMED: the fact sheets give none); launches \
             of one op add up. The emulation counts each vector API call as one instruction of \
             ceil(widest operand bytes / 256) repeats (a reduction as one pass: ASSUMED). The \
             vector rate is UNCERTAIN (the docs say 256 B per cycle; a Huawei example implies \
             about twice that): one repeat per cycle is the stricter choice. Each Mmad counts \
             ceil(m/16) ceil(n/16) ceil(k/16) cycles (half/bf16; four times that in f32), the \
             sheet's peak 16x16x16 MACs per cycle. The per-op ratio compares \
             the rooflines (without latency) with the contract minimum at peak bandwidth. It \
             ignores scalar work, burst rounding and L2 hits.",
            "The contract minimum is each input read once and each output written once; a \
             kernel moving more than that is charged for it in the per-op table.",
            "layer_norm(_backward): the block count is chosen per shape from the model (the \
             tiling's `DeviceProps::gm_seconds`): each block reads its own gamma/beta (and the \
             backward adds its own column sums), so more blocks cost traffic but use more \
             cores' GM rate; at 256 rows of 128 it picks 29 blocks (1.11x the minimum traffic, \
             which the traffic tests allow as one copy per block, not the old 1.05x of the \
             minimum). Rows whose f32 copy and gamma/beta fit the unified buffer stay there \
             between the passes (x read once at N = 8192); wider rows make three passes over GM.",
            "decode_attention: two stage-1 paths, chosen per shape from the model with launch \
             latency counted (tiling::decode_attention, DecodePlan::estimate). The vector path \
             runs every (head, key) pair through the vector unit (Mul + ReduceSum for the \
             score, one Axpy into the accumulator); the cube path (half/bf16) computes the \
             scores and P V by Mmad on the cube cores around a vector softmax (4 launches with \
             stage 2). GQA B8 S1024 stays on the vector path, within 1.2x. MLA B1 S128 (HQ 32 \
             over one KV head, Dk 576, the seed's 4 splits) stays on the vector path too (7.7 \
             us modelled against 15.3 us on the cube path: two more launch latencies), and \
             cannot come within 1.2x of its contract minimum (218 KB) under this model in any \
             design that honours the caller's splits: the partials stage 1 writes and stage 2 \
             reads (2 x 4 splits x 32 heads x 512 f32 = 512 KB) are 2.4x the minimum by \
             themselves, and one core's GM rate (32 B/cycle) needs 2.6 us for the 147 KB of \
             keys, so they must be spread over cores by head tiles (each re-reads its split's \
             keys; the tiling's 3-head tiles are the model's best). MLA B4 S512 takes the cube \
             path (20 us against 28 us): its 16 units (4 requests x 4 splits) run on 16 of the \
             24 cube cores and each reads its split's keys, so one core's GM rate bounds it; \
             more splits from the caller (max_kv_splits) would spread the keys over more \
             cores, head tiles would not (each re-reads its split's keys).",
            "Device-side checks: each kernel checks values its data path reads anyway (indices \
             loaded to address rows, lengths, page ids) on the scalar unit, so they add no GM \
             traffic: 0 % of the modelled time, which is GM bytes over bandwidth. The model has \
             no scalar term; the scalar bound charges 2 cycles per checked value (a compare and \
             a branch, ASSUMED: the fact sheets give no scalar timings) at 1.8 GHz on the \
             busiest block (its share of the values, scaled by its share of the bytes), as if \
             none of it overlapped the DMA the same scalar unit has queued. \
             BURN_ASCEND_VALIDATE=1 adds moe_gather's permutation check: every block reads all \
             T*K indices (+ blocks x T*K x 4 bytes).",
        ],
    );
}

criterion_group! {
    name = benches;
    config = common::criterion();
    targets = fused_kernels
}
criterion_main!(benches);
