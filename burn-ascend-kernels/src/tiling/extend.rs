//! Tiling of `extend_attention` (paged prefill): on the cube (half, bf16) scores, online softmax
//! and values per window of key positions (`kernels/extend_attention_*.cpp`), the softmax kernel
//! folding each window's value product into a rescaled accumulator; in float decode_attention's
//! stage 1 in its extend form and its stage 2; and the device model's estimate of them and of
//! the FIA operator, from which the backend picks one.

use super::paged::{
    align16, equal_tiles, estimate as decode_estimate, launch_seconds, mmad_cycles, repeats,
    vector_plans, CubeBuffers, DecodeShape, DecodeStage1Tiling, DecodeStage2Tiling, CUBE_K_STEP,
    L0AB_BYTES, L0C_BYTES, L1_BYTES, MAX_CUBE_KEY_TILE,
};
use super::{reduce_tmp_bytes, ub_align, DeviceProps, NormType, Plan};

/// Mirrors `BurnExtendScoresTiling` in `kernels/extend_attention_scores.cpp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtendScoresTiling {
    /// Requests (rows of the block table).
    pub requests: u32,
    /// Rows of q (T).
    pub tokens: u32,
    /// Query heads (HQ).
    pub q_heads: u32,
    /// Key/value heads (HKV).
    pub kv_heads: u32,
    /// Key head dim (Dk).
    pub head_dim_k: u32,
    /// Rows of the caches.
    pub slots: u32,
    /// Slots per page.
    pub page_size: u32,
    /// Pages per block-table row.
    pub width: u32,
    /// Key positions per pass: the workspaces' row pitch.
    pub window: u32,
    /// The pass this launch computes (set per launch).
    pub pass: u32,
    /// Query heads per unit.
    pub head_tile: u32,
    /// Chunk rows per unit (1 when the group is cut into head tiles).
    pub token_tile: u32,
    /// Keys per Mmad (n), a multiple of 16.
    pub key_tile: u32,
    /// Dk columns per L0 load, a multiple of 16.
    pub k_step: u32,
    /// Element type ([`NormType`] codes: half or bf16).
    pub dtype: u32,
}

/// Mirrors `BurnExtendSoftmaxTiling` in `kernels/extend_attention_softmax.cpp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExtendSoftmaxTiling {
    /// Requests.
    pub requests: u32,
    /// Rows of q (T).
    pub tokens: u32,
    /// Query heads (HQ).
    pub q_heads: u32,
    /// Value head dim (Dv).
    pub head_dim_v: u32,
    /// Pages per block-table row x page size: the most tokens a request caches.
    pub capacity: u32,
    /// Key positions per pass.
    pub window: u32,
    /// The pass this launch computes (set per launch); `passes`: the finishing launch.
    pub pass: u32,
    /// Passes in all.
    pub passes: u32,
    /// Element type of the probabilities and the output ([`NormType`] codes).
    pub dtype: u32,
    /// Softmax scale.
    pub scale: f32,
}

/// Mirrors `BurnExtendValuesTiling` in `kernels/extend_attention_values.cpp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtendValuesTiling {
    /// Requests.
    pub requests: u32,
    /// Rows of q (T).
    pub tokens: u32,
    /// Query heads (HQ).
    pub q_heads: u32,
    /// Key/value heads (HKV).
    pub kv_heads: u32,
    /// Elements per head of the rows values are read from: Dk (MLA, the key rows) or Dv.
    pub row_dim: u32,
    /// Value head dim (Dv).
    pub head_dim_v: u32,
    /// Rows of the caches.
    pub slots: u32,
    /// Slots per page.
    pub page_size: u32,
    /// Pages per block-table row.
    pub width: u32,
    /// Key positions per pass.
    pub window: u32,
    /// The pass this launch computes (set per launch).
    pub pass: u32,
    /// Query heads per unit.
    pub head_tile: u32,
    /// Chunk rows per unit.
    pub token_tile: u32,
    /// Keys per Mmad (k), a multiple of 16.
    pub key_tile: u32,
    /// Element type ([`NormType`] codes: half or bf16).
    pub dtype: u32,
}

/// The sizes of an extend-attention call.
#[derive(Debug, Clone, PartialEq)]
pub struct ExtendShape {
    /// Per request, (chunk rows, cached tokens with the chunk): the scheduler's host lengths.
    pub lens: Vec<(u64, u64)>,
    /// Query heads.
    pub q_heads: u64,
    /// Key/value heads.
    pub kv_heads: u64,
    /// Key head dim.
    pub head_dim_k: u64,
    /// Value head dim.
    pub head_dim_v: u64,
    /// Rows of the caches.
    pub slots: u64,
    /// Slots per page.
    pub page_size: u64,
    /// Pages per block-table row.
    pub width: u64,
    /// Values are the first Dv dims of the key rows (MLA).
    pub value_from_key: bool,
}

impl ExtendShape {
    fn tokens(&self) -> u64 {
        self.lens.iter().map(|l| l.0).sum()
    }
}

/// Each path's modelled time for a call (seconds, launch latency included), from
/// [`DeviceProps`] as decode_attention's estimate: per launch the slower of the GM traffic and
/// the busiest core's compute. The lengths are host values, so the cube kernels' and FIA's are
/// summed over the actual units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExtendEstimate {
    /// The extend kernels the plan launches: on the cube 3 launches per window and a finishing
    /// one (scores and probabilities make a round trip through GM); on the vector path (f32)
    /// decode_attention's stage 1 in its extend form and stage 2.
    pub kernels_s: f64,
    /// `aclnnFusedInferAttentionScoreV3` (one launch; scores stay on chip), where it could run
    /// the call's sizes: modelled as the same two products on the cube cores per tile of 128
    /// query rows of one KV head, with the softmax on the two vector cores beside each,
    /// overlapped. The caller knows whether the operator takes the call.
    pub fia_s: f64,
}

/// The cube path's launches: per window of key positions scores, softmax and values, then the
/// softmax kernel once more to fold the last window and normalise.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExtendCubePlans {
    /// `extend_attention_scores` (cube cores).
    pub scores: Plan<ExtendScoresTiling>,
    /// `extend_attention_softmax` (vector cores).
    pub softmax: Plan<ExtendSoftmaxTiling>,
    /// `extend_attention_values` (cube cores).
    pub values: Plan<ExtendValuesTiling>,
    /// f32 elements of the scores workspace `[T, HQ, window]`.
    pub scores_elems: u64,
    /// Elements (q's dtype) of the probabilities workspace `[T, HQ, window]`.
    pub probs_elems: u64,
    /// f32 elements of the running statistics `[T, HQ, 8]` (m, l, alpha).
    pub stats_elems: u64,
    /// f32 elements of the accumulator and of the value product, each `[T, HQ, Dv]`.
    pub acc_elems: u64,
}

/// The kernels a plan launches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ExtendKernels {
    /// Half and bf16: online softmax over windows of key positions on the cube.
    Cube(ExtendCubePlans),
    /// Float: `decode_attention_stage1` in its extend form (keys through the block table), its
    /// splits merged by `decode_attention_stage2`.
    Vector {
        /// The per-split results.
        stage1: Plan<DecodeStage1Tiling>,
        /// The merge over `[T, HQ, passes, Dv]`.
        stage2: Plan<DecodeStage2Tiling>,
    },
}

/// An extend-attention launch plan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExtendPlan {
    /// The kernels.
    pub kernels: ExtendKernels,
    /// Windows of key positions (cube path) or splits of each row's keys (vector path).
    pub passes: u32,
    /// The modelled times.
    pub estimate: ExtendEstimate,
}

impl ExtendPlan {
    /// The kernels the plan launches.
    pub fn kernels(&self) -> &'static [&'static str] {
        match self.kernels {
            ExtendKernels::Cube(_) => &[
                "extend_attention_scores",
                "extend_attention_softmax",
                "extend_attention_values",
            ],
            ExtendKernels::Vector { .. } => &["decode_attention_stage1", "decode_attention_stage2"],
        }
    }
}

/// Most rows (tokens x heads) per unit: an Mmad's m.
const MAX_UNIT_ROWS: u64 = 128;
/// Most key positions per window: the softmax kernel holds a row's window in the unified buffer.
const MAX_WINDOW: u64 = 8192;
/// Fewest key positions per window.
const MIN_WINDOW: u64 = 128;
/// The bytes of the scores and probabilities workspaces the window is sized for.
const WORKSPACE_BYTES: u64 = 256 << 20;

/// The unified-buffer bytes of the softmax kernel (its `InitBuffer`s).
pub fn extend_softmax_ub_bytes(dtype: NormType, head_dim_v: u64, window: u64) -> u64 {
    window * 4
        + 2 * ub_align(window * dtype.bytes())
        + 2 * reduce_tmp_bytes(window)
        + 2 * 32
        + 2 * ub_align(head_dim_v * 4)
        + ub_align(head_dim_v * dtype.bytes())
}

/// The local memory `extend_attention_scores` plans: the unit's queries and a key tile in L1,
/// a k step of each in L0A/L0B, the scores (16 rows more for the per-token Fixpipe views) in L0C.
pub fn extend_scores_cube_bytes(t: &ExtendScoresTiling, dtype: NormType) -> CubeBuffers {
    let eb = dtype.bytes();
    let mp = align16((t.token_tile * t.head_tile) as u64);
    let (np, kp, step) = (
        t.key_tile as u64,
        align16(t.head_dim_k as u64),
        t.k_step as u64,
    );
    CubeBuffers {
        l1: (mp + np) * kp * eb,
        l0a: mp * step * eb,
        l0b: step * np * eb,
        l0c: (mp + 16) * np * 4,
    }
}

/// The local memory `extend_attention_values` plans: the unit's probabilities and a key tile of
/// value rows in L1 and again in L0A/L0B, the Dv accumulators (16 rows more) in L0C.
pub fn extend_values_cube_bytes(t: &ExtendValuesTiling, dtype: NormType) -> CubeBuffers {
    let eb = dtype.bytes();
    let mp = align16((t.token_tile * t.head_tile) as u64);
    let (kr, np) = (t.key_tile as u64, align16(t.head_dim_v as u64));
    CubeBuffers {
        l1: (mp * kr + kr * np) * eb,
        l0a: mp * kr * eb,
        l0b: kr * np * eb,
        l0c: (mp + 16) * np * 4,
    }
}

/// (token tile, head tile) for units of at most `rows` rows of a group of `group` heads: whole
/// groups of several tokens, or equal head tiles of one token.
fn unit_tiles(group: u64, rows: u64, max_rows: u64) -> (u64, u64) {
    if group <= rows {
        (rows.min(max_rows.max(1) * group) / group, group)
    } else {
        let (_, per) = equal_tiles(group, rows, 1).unwrap_or((group, 1));
        (1, per)
    }
}

/// Plans the extend kernels for a call (half and bf16 on the cube, float on the vector path as
/// decode_attention keeps it there: float values as k x n rows cannot be loaded into L0B) and
/// estimates them and the FIA operator (see [`ExtendEstimate`]). Err says why the kernels
/// cannot run it.
pub fn extend_attention(
    s: &ExtendShape,
    dtype: NormType,
    scale: f32,
    props: &DeviceProps,
) -> Result<ExtendPlan, String> {
    let fia_s = fia_seconds(s, dtype, props);
    if !matches!(dtype, NormType::F16 | NormType::BF16) {
        return vector_plan(s, dtype, scale, fia_s, props);
    }
    let eb = dtype.bytes();
    let (hq, hkv, dk, dv) = (s.q_heads, s.kv_heads, s.head_dim_k, s.head_dim_v);
    let group = hq / hkv.max(1);
    let kp = align16(dk);
    let np_v = align16(dv);
    let row = |d: u64| hkv * d;
    if hkv == 0
        || group == 0
        || row(dk) > u16::MAX as u64
        || row(if s.value_from_key { dk } else { dv }) > u16::MAX as u64
    {
        return Err(format!(
            "the extend kernels need HKV x Dk and HKV x Dv below 65536 (ND->NZ copy pitch), got HKV {hkv}, Dk {dk}, Dv {dv}"
        ));
    }
    let tokens = s.tokens();
    let max_rows = s.lens.iter().map(|l| l.0).max().unwrap_or(0).max(1);
    let max_kv = s.lens.iter().map(|l| l.1).max().unwrap_or(0).max(1);
    if tokens * hq > u32::MAX as u64 || s.slots > u32::MAX as u64 {
        return Err("the extend kernels need T x HQ and the cache rows below 2^32".into());
    }
    // Scores: the largest unit and key tile that fit L1, L0A/L0B and L0C.
    let mut scores = None;
    'search: for key_tile in (16..=MAX_CUBE_KEY_TILE).rev().step_by(16) {
        for rows in (16..=MAX_UNIT_ROWS).rev().step_by(16) {
            let (tt, ht) = unit_tiles(group, rows, max_rows);
            let t = ExtendScoresTiling {
                requests: s.lens.len() as u32,
                tokens: tokens as u32,
                q_heads: hq as u32,
                kv_heads: hkv as u32,
                head_dim_k: dk as u32,
                slots: s.slots as u32,
                page_size: s.page_size as u32,
                width: s.width as u32,
                window: 0,
                pass: 0,
                head_tile: ht as u32,
                token_tile: tt as u32,
                key_tile: key_tile as u32,
                k_step: CUBE_K_STEP.min(kp) as u32,
                dtype: dtype as u32,
            };
            if extend_scores_cube_bytes(&t, dtype).fit() {
                scores = Some(t);
                break 'search;
            }
        }
    }
    let mut scores = scores.ok_or_else(|| {
        format!("the extend kernels need 16 rows and 16 keys of Dk = {dk} to fit L1")
    })?;
    // Values: a key tile of value rows in L0B, the unit's Dv accumulators in L0C.
    let v_key_tile = (L0AB_BYTES / (np_v * eb) / 16 * 16).min(MAX_CUBE_KEY_TILE);
    let v_rows = ((L0C_BYTES / (np_v * 4)).saturating_sub(16))
        .min(L0AB_BYTES / (v_key_tile.max(1) * eb))
        .min(L1_BYTES.saturating_sub(v_key_tile * np_v * eb) / (v_key_tile.max(1) * eb))
        .min(MAX_UNIT_ROWS)
        / 16
        * 16;
    if v_key_tile < 16 || v_rows < 16 {
        return Err(format!(
            "the extend kernels need 16 rows of Dv = {dv} accumulators to fit L0C beside the key tile"
        ));
    }
    let (v_tt, v_ht) = unit_tiles(group, v_rows, max_rows);
    // The window: the whole context when its scores and probabilities fit the workspace
    // budget, else as many positions as do (at least MIN_WINDOW). The accumulator is Dv f32 per
    // row however many windows there are.
    let per_position = tokens.max(1) * hq * (4 + eb);
    let window = align16(
        max_kv
            .min(MAX_WINDOW)
            .min((WORKSPACE_BYTES / per_position).max(MIN_WINDOW)),
    );
    if extend_softmax_ub_bytes(dtype, dv, window) > props.ub_bytes as u64 {
        return Err("the extend softmax kernel does not fit the unified buffer".into());
    }
    let passes = max_kv.div_ceil(window);
    scores.window = window as u32;
    let cube = props.cube_cores as u64;
    let units = |tt: u64, ht: u64| -> u64 {
        s.lens.iter().map(|l| l.0.div_ceil(tt)).sum::<u64>() * hkv * group.div_ceil(ht)
    };
    let values = ExtendValuesTiling {
        requests: s.lens.len() as u32,
        tokens: tokens as u32,
        q_heads: hq as u32,
        kv_heads: hkv as u32,
        row_dim: if s.value_from_key { dk } else { dv } as u32,
        head_dim_v: dv as u32,
        slots: s.slots as u32,
        page_size: s.page_size as u32,
        width: s.width as u32,
        window: window as u32,
        pass: 0,
        head_tile: v_ht as u32,
        token_tile: v_tt as u32,
        key_tile: v_key_tile as u32,
        dtype: dtype as u32,
    };
    let softmax = ExtendSoftmaxTiling {
        requests: s.lens.len() as u32,
        tokens: tokens as u32,
        q_heads: hq as u32,
        head_dim_v: dv as u32,
        capacity: (s.width * s.page_size).min(u32::MAX as u64) as u32,
        window: window as u32,
        pass: 0,
        passes: passes as u32,
        dtype: dtype as u32,
        scale,
    };
    let cube = ExtendCubePlans {
        scores: Plan {
            block_dim: units(scores.token_tile as u64, scores.head_tile as u64).clamp(1, cube)
                as u32,
            tiling: scores,
        },
        softmax: Plan {
            block_dim: (tokens * hq).clamp(1, props.vector_cores as u64) as u32,
            tiling: softmax,
        },
        values: Plan {
            block_dim: units(v_tt, v_ht).clamp(1, cube) as u32,
            tiling: values,
        },
        scores_elems: tokens * hq * window,
        probs_elems: tokens * hq * window,
        stats_elems: tokens * hq * 8,
        acc_elems: tokens * hq * dv,
    };
    Ok(ExtendPlan {
        kernels: ExtendKernels::Cube(cube),
        passes: passes as u32,
        estimate: ExtendEstimate {
            kernels_s: cube_seconds(s, dtype, &cube, passes, props),
            fia_s,
        },
    })
}

/// Most splits of a row's keys on the vector path.
const MAX_VECTOR_SPLITS: u64 = 16;
/// Fewest keys per split the vector path cuts a row's keys into.
const MIN_SPLIT_KEYS: u64 = 64;

/// The vector path: decode_attention's stage 1 in its extend form over the T query tokens,
/// each row's keys cut into splits so that every vector core has work, and its stage 2.
fn vector_plan(
    s: &ExtendShape,
    dtype: NormType,
    scale: f32,
    fia_s: f64,
    props: &DeviceProps,
) -> Result<ExtendPlan, String> {
    let tokens = s.tokens();
    let max_kv = s.lens.iter().map(|l| l.1).max().unwrap_or(0).max(1);
    let splits = (2 * props.vector_cores as u64)
        .div_ceil((tokens * s.kv_heads).max(1))
        .min(max_kv.div_ceil(MIN_SPLIT_KEYS))
        .clamp(1, MAX_VECTOR_SPLITS);
    // Every row's positions: the keys a decode call would list for the same tokens.
    let keys: u64 = s
        .lens
        .iter()
        .map(|&(rows, kv)| (kv - rows + 1..=kv).sum::<u64>())
        .sum();
    let shape = DecodeShape {
        batch: tokens,
        q_heads: s.q_heads,
        kv_heads: s.kv_heads,
        head_dim_k: s.head_dim_k,
        head_dim_v: s.head_dim_v,
        max_splits: splits,
        slots: s.slots,
        indices: keys.max(1),
        value_from_key: s.value_from_key,
    };
    let (mut one, two) = vector_plans(&shape, dtype, scale, 0.0, props).ok_or_else(|| {
        format!(
            "one head's rows (Dk = {}, Dv = {}) must fit a vector core's unified buffer with a tile of 8 keys",
            s.head_dim_k, s.head_dim_v
        )
    })?;
    one.tiling.indices = 0;
    one.tiling.page_size = s.page_size as u32;
    one.tiling.width = s.width as u32;
    one.tiling.requests = s.lens.len() as u32;
    let estimate = decode_estimate(&shape, dtype, 0.0, Some(&(one, two)), None, props);
    Ok(ExtendPlan {
        kernels: ExtendKernels::Vector {
            stage1: one,
            stage2: two,
        },
        passes: splits as u32,
        estimate: ExtendEstimate {
            kernels_s: estimate.vector_s.unwrap_or(f64::INFINITY),
            fia_s,
        },
    })
}

/// Per unit of `tt` chunk rows of each request (for every KV head and head tile): the keys its
/// last row sees, summed with `f(rows of the unit, keys)`.
fn over_units(s: &ExtendShape, tt: u64, mut f: impl FnMut(u64, u64) -> (u64, u64)) -> (u64, u64) {
    let (mut units, mut total) = (0, 0);
    for &(rows, kv) in &s.lens {
        let mut i0 = 0;
        while i0 < rows {
            let toks = tt.min(rows - i0);
            let (u, t) = f(toks, kv - rows + i0 + toks);
            units += u;
            total += t;
            i0 += toks;
        }
    }
    (units, total)
}

/// One launch of `units` units with these totals, as decode's model spreads them: the mean unit
/// on the busiest core.
fn launch_of(props: &DeviceProps, units: u64, blocks: u32, bytes: u64, cycles: u64) -> f64 {
    let u = units.max(1);
    launch_seconds(
        props,
        u,
        blocks as u64,
        bytes.div_ceil(u),
        cycles.div_ceil(u),
    )
}

/// The extend kernels' modelled time (see [`ExtendEstimate`]).
fn cube_seconds(
    s: &ExtendShape,
    dtype: NormType,
    p: &ExtendCubePlans,
    passes: u64,
    props: &DeviceProps,
) -> f64 {
    let eb = dtype.bytes();
    let (hq, hkv, dk, dv) = (s.q_heads, s.kv_heads, s.head_dim_k, s.head_dim_v);
    let group = hq / hkv.max(1);
    let latency = props.launch_latency_ns as f64 * 1e-9;
    let extra = (passes as f64 - 1.0) * latency;
    let t = &p.scores.tiling;
    let tiles = group.div_ceil(t.head_tile as u64) * hkv;
    let heads = (t.head_tile as u64).min(group);
    let (units, (bytes, cycles)) = {
        let mut bytes = 0;
        let (units, cycles) = over_units(s, t.token_tile as u64, |toks, keys| {
            let m = toks * heads;
            bytes += tiles * (keys * dk * eb + m * dk * eb + m * keys * 4);
            (tiles, tiles * mmad_cycles(m, keys, dk))
        });
        (units, (bytes, cycles))
    };
    let scores = launch_of(props, units, p.scores.block_dim, bytes, cycles) + extra;
    let rate = props.vector_repeats_per_cycle.max(1);
    let (rows, (bytes, cycles)) = {
        let mut bytes = 0;
        let (rows, cycles) = over_units(s, 1, |_, keys| {
            // The window's scores and probabilities, the statistics, the fold of the value
            // product into the accumulator.
            bytes += hq * (keys * (4 + eb) + 64 + 3 * dv * 4);
            (
                hq,
                hq * (repeats(keys) * 6 + repeats(dv) * 2).div_ceil(rate),
            )
        });
        (rows, (bytes, cycles))
    };
    let softmax = launch_of(props, rows, p.softmax.block_dim, bytes, cycles) + extra;
    let v = &p.values.tiling;
    let tiles = group.div_ceil(v.head_tile as u64) * hkv;
    let heads = (v.head_tile as u64).min(group);
    let (units, (bytes, cycles)) = {
        let mut bytes = 0;
        let (units, cycles) = over_units(s, v.token_tile as u64, |toks, keys| {
            let m = toks * heads;
            bytes += tiles * (m * keys * eb + keys * dv * eb + m * dv * 4);
            (tiles, tiles * mmad_cycles(m, dv, keys))
        });
        (units, (bytes, cycles))
    };
    let values = launch_of(props, units, p.values.block_dim, bytes, cycles) + extra;
    // The finishing launch: the last fold and the normalisation of every row.
    let rows = s.tokens() * hq;
    let finish = launch_of(
        props,
        rows,
        p.softmax.block_dim,
        rows * (3 * dv * 4 + dv * eb + 32),
        rows * repeats(dv) * 4,
    );
    scores + softmax + values + finish
}

/// The FIA operator's modelled time (see [`ExtendEstimate`]).
fn fia_seconds(s: &ExtendShape, dtype: NormType, props: &DeviceProps) -> f64 {
    let eb = dtype.bytes();
    let (hq, hkv, dk, dv) = (s.q_heads, s.kv_heads, s.head_dim_k, s.head_dim_v);
    let group = hq / hkv.max(1);
    // Tiles of 128 query rows (tokens x heads of one KV head).
    let tt = (MAX_UNIT_ROWS / group).max(1);
    let heads = group.min(MAX_UNIT_ROWS);
    let tiles = group.div_ceil(heads) * hkv;
    let rate = props.vector_repeats_per_cycle.max(1);
    let mut bytes = 0;
    let (units, cycles) = over_units(s, tt, |toks, keys| {
        let m = toks * heads;
        bytes += tiles * (keys * (dk + dv) * eb + m * (dk + dv) * eb);
        let cube = mmad_cycles(m, keys, dk) + mmad_cycles(m, dv, keys);
        // The softmax and rescaling on the two vector cores beside the cube core.
        let vector = (m * (repeats(keys) * 6 + repeats(dv) * 2)).div_ceil(2 * rate);
        (tiles, tiles * cube.max(vector))
    });
    launch_of(
        props,
        units,
        units.clamp(1, props.cube_cores as u64) as u32,
        bytes,
        cycles,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(lens: &[(u64, u64)], hq: u64, hkv: u64, dk: u64, dv: u64, mla: bool) -> ExtendShape {
        ExtendShape {
            lens: lens.to_vec(),
            q_heads: hq,
            kv_heads: hkv,
            head_dim_k: dk,
            head_dim_v: dv,
            slots: 1 << 20,
            page_size: 128,
            width: 1 << 10,
            value_from_key: mla,
        }
    }

    #[test]
    fn extend_plans_fit_every_buffer() {
        let a2 = DeviceProps::ATLAS_A2;
        for s in [
            shape(&[(7, 130)], 8, 2, 128, 128, false),
            shape(&[(1, 1), (300, 4000)], 32, 8, 128, 128, false),
            shape(&[(128, 128)], 128, 1, 576, 512, true),
            shape(&[(64, 20000)], 16, 1, 192, 128, false),
            shape(&[(9, 9)], 4, 4, 64, 64, false),
        ] {
            for dtype in [NormType::F16, NormType::BF16] {
                let p = extend_attention(&s, dtype, 0.1, &a2).expect("plans");
                let ExtendKernels::Cube(c) = p.kernels else {
                    panic!("half types take the cube")
                };
                let (t, v) = (c.scores.tiling, c.values.tiling);
                assert!(extend_scores_cube_bytes(&t, dtype).fit(), "{t:?}");
                assert!(extend_values_cube_bytes(&v, dtype).fit(), "{v:?}");
                assert!(t.token_tile * t.head_tile <= 128 && v.token_tile * v.head_tile <= 128);
                assert!(t.head_tile as u64 == s.q_heads / s.kv_heads || t.token_tile == 1);
                assert!(
                    extend_softmax_ub_bytes(dtype, s.head_dim_v, t.window as u64)
                        <= a2.ub_bytes as u64
                );
                let max_kv = s.lens.iter().map(|l| l.1).max().unwrap();
                assert!(p.passes as u64 * t.window as u64 >= max_kv);
                assert!(p.estimate.kernels_s > 0.0 && p.estimate.fia_s > 0.0);
            }
            let p = extend_attention(&s, NormType::F32, 0.1, &a2).expect("plans");
            let ExtendKernels::Vector { stage1: one, .. } = p.kernels else {
                panic!("float takes the vector path")
            };
            assert!(one.tiling.page_size == 128 && one.tiling.max_splits == p.passes);
        }
    }

    #[test]
    fn long_prefills_keep_the_workspaces_linear_in_the_chunk() {
        // 8192 rows of 128 MLA heads over 16384 positions: the window is cut to the workspace
        // budget; with the accumulator and value product (Dv f32 each) every row holds a fixed
        // amount, far below the chunk x context scores (4 bytes x 2^37).
        let s = shape(&[(8192, 16384)], 128, 1, 576, 512, true);
        let p = extend_attention(&s, NormType::BF16, 0.1, &DeviceProps::ATLAS_A2).unwrap();
        let ExtendKernels::Cube(c) = p.kernels else {
            panic!("bf16 takes the cube")
        };
        let rows = 8192 * 128;
        let bytes =
            c.scores_elems * 4 + c.probs_elems * 2 + c.stats_elems * 4 + 2 * c.acc_elems * 4;
        assert!(bytes / rows <= 8 << 10, "{} bytes per row", bytes / rows);
        assert!(p.passes as u64 * c.scores.tiling.window as u64 >= 16384);
    }

    #[test]
    fn the_device_model_prefers_the_fused_operator_for_long_contexts() {
        // FIA keeps scores on chip: with a long context the kernels' workspace round trips
        // cost more; a one-token chunk over a short context is launch-bound either way.
        let a2 = DeviceProps::ATLAS_A2;
        let long = extend_attention(
            &shape(&[(512, 8192)], 32, 8, 128, 128, false),
            NormType::BF16,
            0.1,
            &a2,
        )
        .unwrap();
        assert!(
            long.estimate.fia_s < long.estimate.kernels_s,
            "{:?}",
            long.estimate
        );
    }
}
