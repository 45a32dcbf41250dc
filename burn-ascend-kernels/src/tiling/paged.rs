//! Tiling of the paged-KV kernels: `alloc_extend`, `kv_cache_write` and split-KV
//! `decode_attention`.

use super::{align8, align_type, even_split, ub_align, DeviceProps, NormType, Plan};

/// Mirrors `AllocExtendTiling` in `kernels/alloc_extend.cpp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocExtendTiling {
    /// Requests (B).
    pub batch: u32,
    /// Entries of the free-page list.
    pub free_pages: u32,
    /// Slots per page.
    pub page_size: u32,
    /// Slots to allocate (the sum of the extensions, known to the scheduler).
    pub out_slots: u32,
    /// Output positions per block (a multiple of 8).
    pub slots_per_core: u32,
    /// Slots staged in the unified buffer per store (a multiple of 8).
    pub slot_tile: u32,
    /// Requests whose lengths are loaded at a time (a multiple of 8).
    pub len_tile: u32,
    /// Free-list entries loaded at a time (a multiple of 8).
    pub page_tile: u32,
    /// Bytes per index (4 or 8).
    pub index_bytes: u32,
}

/// Fewest output positions per `alloc_extend` block: every block scans the lengths of the
/// requests before its range on the scalar unit, which costs about as much as filling a few
/// hundred slots, so smaller shares would not finish sooner.
const MIN_SLOTS_PER_CORE: u64 = 256;
/// Most slots an `alloc_extend` block stages per store.
const MAX_SLOT_TILE: u64 = 2048;
/// Most requests whose lengths an `alloc_extend` block loads at a time.
const MAX_LEN_TILE: u64 = 1024;
/// Most free-list entries an `alloc_extend` block loads at a time.
const MAX_PAGE_TILE: u64 = 256;

/// Output positions in equal ranges over the vector cores (at least 256 each); lengths,
/// free-list entries and slots move through the unified buffer in tiles, so any batch, free
/// list and output size fits.
pub fn alloc_extend(
    batch: u64,
    free_pages: u64,
    page_size: u64,
    out_slots: u64,
    index_bytes: u64,
    props: &DeviceProps,
) -> Plan<AllocExtendTiling> {
    let page_size = page_size.max(1);
    let slots_per_core = align8(
        out_slots
            .div_ceil(props.vector_cores as u64)
            .max(MIN_SLOTS_PER_CORE),
    );
    Plan {
        block_dim: out_slots.div_ceil(slots_per_core).max(1) as u32,
        tiling: AllocExtendTiling {
            batch: batch as u32,
            free_pages: free_pages as u32,
            page_size: page_size as u32,
            out_slots: out_slots as u32,
            slots_per_core: slots_per_core as u32,
            slot_tile: slots_per_core.min(MAX_SLOT_TILE) as u32,
            len_tile: align8(batch.max(1)).min(MAX_LEN_TILE) as u32,
            page_tile: align8(slots_per_core / page_size + 2).min(MAX_PAGE_TILE) as u32,
            index_bytes: index_bytes as u32,
        },
    }
}

/// The unified-buffer bytes `alloc_extend`'s kernel allocates for a tiling (its `InitBuffer`s).
pub fn alloc_extend_ub_bytes(t: &AllocExtendTiling) -> u64 {
    let a = |elems: u32| ub_align(elems as u64 * t.index_bytes as u64);
    3 * a(t.len_tile) + a(t.page_tile) + 2 * a(t.slot_tile) + 32
}

/// Mirrors `BurnKvCacheWriteTiling` in `kernels/kv_cache_write.cpp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvCacheWriteTiling {
    /// Tokens (rows of each source, entries of the slots).
    pub tokens: u32,
    /// Parts written: 1 (keys) or 2 (keys and values).
    pub parts: u32,
    /// Tokens per block.
    pub rows_per_core: u32,
    /// Elements per copy, a multiple of 32 bytes.
    pub chunk: u32,
    /// Slots loaded at a time, a multiple of 8.
    pub idx_chunk: u32,
    /// Bytes per element (2 or 4).
    pub elem_bytes: u32,
    /// Bytes per slot (4 or 8).
    pub index_bytes: u32,
    /// Rows (slots) of each part's cache.
    pub cache_rows: [u32; 2],
    /// Elements per cache row of each part.
    pub stride: [u32; 2],
    /// First column each part writes.
    pub offset: [u32; 2],
    /// Elements each part writes per token.
    pub cols: [u32; 2],
}

/// One part of a `kv_cache_write`: a cache of `cache_rows` rows of `stride` elements, of which
/// each token writes `cols` from column `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachePart {
    /// Rows (slots) of the cache.
    pub cache_rows: u64,
    /// Elements per cache row.
    pub stride: u64,
    /// First column written.
    pub offset: u64,
    /// Elements written per token.
    pub cols: u64,
}

/// Most slots a `kv_cache_write` block loads at once.
const MAX_SLOT_CHUNK: u64 = 1024;

/// Tokens evenly over the vector cores; each part's row moves through two ping-pong buffers of
/// the largest chunk the unified buffer holds beside the slots (a decode step's rows, a few KB,
/// move in one piece). `parts` holds one or two parts.
pub fn kv_cache_write(
    tokens: u64,
    parts: &[CachePart],
    elem_bytes: u64,
    index_bytes: u64,
    props: &DeviceProps,
) -> Plan<KvCacheWriteTiling> {
    let (rows_per_core, block_dim) = even_split(tokens, props);
    let idx_chunk = align8(rows_per_core.min(MAX_SLOT_CHUNK));
    let align = super::UB_ALIGN / elem_bytes;
    let max_chunk =
        (props.ub_bytes as u64 - ub_align(idx_chunk * index_bytes)) / (2 * elem_bytes) / align
            * align;
    let widest = parts.iter().map(|p| p.cols).max().unwrap_or(0);
    let field = |f: fn(&CachePart) -> u64| {
        let mut out = [0u32; 2];
        for (o, p) in out.iter_mut().zip(parts) {
            *o = f(p) as u32;
        }
        out
    };
    Plan {
        block_dim: block_dim as u32,
        tiling: KvCacheWriteTiling {
            tokens: tokens as u32,
            parts: parts.len() as u32,
            rows_per_core: rows_per_core as u32,
            chunk: align_type(widest.max(1), elem_bytes).min(max_chunk) as u32,
            idx_chunk: idx_chunk as u32,
            elem_bytes: elem_bytes as u32,
            index_bytes: index_bytes as u32,
            cache_rows: field(|p| p.cache_rows),
            stride: field(|p| p.stride),
            offset: field(|p| p.offset),
            cols: field(|p| p.cols),
        },
    }
}

/// The unified-buffer bytes `kv_cache_write`'s kernel allocates for a tiling (its `InitBuffer`s).
pub fn kv_cache_write_ub_bytes(t: &KvCacheWriteTiling) -> u64 {
    ub_align(t.idx_chunk as u64 * t.index_bytes as u64)
        + ub_align(2 * t.chunk as u64 * t.elem_bytes as u64)
}

/// Mirrors `DecodeStage1Tiling` in `kernels/decode_attention_stage1.cpp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodeStage1Tiling {
    /// Requests (B).
    pub batch: u32,
    /// Query heads (HQ).
    pub q_heads: u32,
    /// Key/value heads (HKV).
    pub kv_heads: u32,
    /// Key head dim (Dk).
    pub head_dim_k: u32,
    /// Value head dim (Dv).
    pub head_dim_v: u32,
    /// Splits per request, at most.
    pub max_splits: u32,
    /// Rows of the caches.
    pub slots: u32,
    /// Entries of kv_indices.
    pub indices: u32,
    /// Query heads (of one group) per unit of work.
    pub head_tile: u32,
    /// Keys per tile (a multiple of 8).
    pub key_tile: u32,
    /// 1: values are the first Dv dims of the key rows (MLA layouts).
    pub value_from_key: u32,
    /// Element type of q, k, v ([`NormType`] codes).
    pub dtype: u32,
    /// Softmax scale.
    pub scale: f32,
    /// Logit soft cap; 0 for none.
    pub logit_cap: f32,
    /// 0: keys listed by kv_indices (decode); else the page size of the extend form (the
    /// vector path of `extend_attention`: `batch` query tokens, keys through the block table).
    pub page_size: u32,
    /// Extend form: pages per block-table row.
    pub width: u32,
    /// Extend form: rows of the block table.
    pub requests: u32,
}

/// Mirrors `DecodeStage2Tiling` in `kernels/decode_attention_stage2.cpp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeStage2Tiling {
    /// Request-head pairs (B * HQ).
    pub pairs: u32,
    /// Splits per request, at most.
    pub max_splits: u32,
    /// Value head dim (Dv).
    pub head_dim_v: u32,
    /// Pairs per block.
    pub pairs_per_core: u32,
    /// Pairs merged at a time.
    pub pair_tile: u32,
    /// Columns per pass: Dv, or a multiple of 16 when a pair's rows do not fit.
    pub col_tile: u32,
    /// Element type of the output ([`NormType`] codes).
    pub dtype: u32,
}

/// The shape of a decode-attention launch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodeShape {
    /// Requests.
    pub batch: u64,
    /// Query heads.
    pub q_heads: u64,
    /// Key/value heads.
    pub kv_heads: u64,
    /// Key head dim.
    pub head_dim_k: u64,
    /// Value head dim.
    pub head_dim_v: u64,
    /// Splits per request, at most.
    pub max_splits: u64,
    /// Rows of the caches.
    pub slots: u64,
    /// Entries of kv_indices.
    pub indices: u64,
    /// Values are the first Dv dims of the key rows.
    pub value_from_key: bool,
}

/// Most keys per stage-1 tile.
const MAX_KEY_TILE: u64 = 256;
/// Fewest keys per stage-1 tile the head tile is shrunk for: below it the per-tile waits
/// dominate.
const MIN_KEY_TILE: u64 = 16;
/// Most rows one DataCopyPad moves (its blockCount).
const MAX_COPY_ROWS: u64 = 4095;
/// Most pairs stage 2 merges at a time.
const MAX_PAIR_TILE: u64 = 64;
/// Stage-2 column chunks are whole 32-byte blocks of f32 parts and of 2-byte outputs.
const COL_ALIGN: u64 = 16;

/// The unified-buffer bytes of stage 1 with `heads` query heads and `keys` keys per tile (its
/// `InitBuffer`s).
pub fn decode_stage1_ub_bytes(
    s: &DecodeShape,
    dtype: NormType,
    heads: u64,
    keys: u64,
    capped: bool,
) -> u64 {
    let eb = dtype.bytes();
    let narrow = eb < 4;
    let (row_k, row_v) = (align_type(s.head_dim_k, eb), align_type(s.head_dim_v, eb));
    let score = heads * align8(keys + 1) * 4;
    let reduce = align8(s.head_dim_k.div_ceil(64).max(2 * keys.div_ceil(64))) * 4;
    let mut bytes = heads * row_k * 4
        + heads * align8(s.head_dim_v) * 4
        + 2 * keys * row_k * eb
        + score
        + row_k.max(row_v) * 4
        + reduce
        + 5 * align8(heads + 1) * 4
        + heads * 8 * 4
        + align8(keys) * 4;
    if !s.value_from_key {
        bytes += 2 * keys * row_v * eb;
    }
    if narrow {
        bytes += heads * row_k * eb + keys * row_k * 4;
        if !s.value_from_key {
            bytes += keys * row_v * 4;
        }
    }
    if capped {
        bytes += score;
    }
    bytes
}

/// The unified-buffer bytes of stage 2 with `pairs` pairs and `cols` columns per pass.
pub fn decode_stage2_ub_bytes(max_splits: u64, dtype: NormType, pairs: u64, cols: u64) -> u64 {
    let eb = dtype.bytes();
    let acc = if eb < 4 {
        pairs * align_type(cols, eb) * 4
    } else {
        0
    };
    align8(pairs * max_splits) * 4
        + pairs * align8(max_splits) * 4
        + 3 * align8(pairs) * 4
        + 2 * pairs * max_splits * align8(cols) * 4
        + 2 * pairs * align_type(cols, eb) * eb
        + acc
}

/// Stage 1: units (request, key/value head, head tile, split) round-robin over the vector
/// cores. A group of query heads is cut into head tiles only when the units would not occupy
/// every core, or when the whole group does not fit the unified buffer beside a key tile of
/// 16 keys; the key tile is then the largest that fits (at most 256).
/// Stage 2: (request, head) pairs in equal ranges over the vector cores, merged in tiles; a
/// pair's rows are cut into column chunks when they do not fit. `None` when one head with a
/// tile of 8 keys does not fit (Dk = Dv over about 1400), or max_splits exceeds 4095.
pub(super) fn vector_plans(
    s: &DecodeShape,
    dtype: NormType,
    scale: f32,
    logit_cap: f32,
    props: &DeviceProps,
) -> Option<(Plan<DecodeStage1Tiling>, Plan<DecodeStage2Tiling>)> {
    let ub = props.ub_bytes as u64;
    let cores = props.vector_cores as u64;
    let capped = logit_cap > 0.0;
    let group = s.q_heads / s.kv_heads.max(1);
    if group == 0 || s.max_splits == 0 || s.max_splits > MAX_COPY_ROWS {
        return None;
    }
    let fits = |heads: u64, keys: u64| decode_stage1_ub_bytes(s, dtype, heads, keys, capped) <= ub;
    // Head tiles: enough units for every core, then as many heads as fit beside a useful tile.
    let base_units = (s.batch * s.kv_heads * s.max_splits).max(1);
    let wanted = cores.div_ceil(base_units).clamp(1, group);
    let mut heads = group.div_ceil(wanted).min(MAX_COPY_ROWS);
    while heads > 1 && !fits(heads, MIN_KEY_TILE) {
        heads -= 1;
    }
    if !fits(heads, 8) {
        return None;
    }
    // Equal head tiles: the same number of tiles, spread evenly.
    heads = group.div_ceil(group.div_ceil(heads));
    let key_tile = (8..=MAX_KEY_TILE)
        .rev()
        .step_by(8)
        .find(|&k| fits(heads, k))?;
    let units = s.batch * s.kv_heads * group.div_ceil(heads) * s.max_splits;

    let pairs = s.batch * s.q_heads;
    let pairs_per_core = pairs.div_ceil(cores).max(1);
    let col_tile = if decode_stage2_ub_bytes(s.max_splits, dtype, 1, s.head_dim_v) <= ub {
        s.head_dim_v
    } else {
        let mut cols = s.head_dim_v / COL_ALIGN * COL_ALIGN;
        while cols > COL_ALIGN && decode_stage2_ub_bytes(s.max_splits, dtype, 1, cols) > ub {
            cols -= COL_ALIGN;
        }
        cols
    };
    if decode_stage2_ub_bytes(s.max_splits, dtype, 1, col_tile) > ub {
        return None;
    }
    let mut pair_tile = pairs_per_core
        .min(MAX_PAIR_TILE)
        .min(MAX_COPY_ROWS / s.max_splits)
        .max(1);
    while pair_tile > 1 && decode_stage2_ub_bytes(s.max_splits, dtype, pair_tile, col_tile) > ub {
        pair_tile -= 1;
    }
    Some((
        Plan {
            block_dim: units.clamp(1, cores) as u32,
            tiling: DecodeStage1Tiling {
                batch: s.batch as u32,
                q_heads: s.q_heads as u32,
                kv_heads: s.kv_heads as u32,
                head_dim_k: s.head_dim_k as u32,
                head_dim_v: s.head_dim_v as u32,
                max_splits: s.max_splits as u32,
                slots: s.slots as u32,
                indices: s.indices as u32,
                head_tile: heads as u32,
                key_tile: key_tile as u32,
                value_from_key: s.value_from_key as u32,
                dtype: dtype as u32,
                scale,
                logit_cap,
                page_size: 0,
                width: 0,
                requests: 0,
            },
        },
        Plan {
            block_dim: pairs.div_ceil(pairs_per_core).max(1) as u32,
            tiling: DecodeStage2Tiling {
                pairs: pairs as u32,
                max_splits: s.max_splits as u32,
                head_dim_v: s.head_dim_v as u32,
                pairs_per_core: pairs_per_core as u32,
                pair_tile: pair_tile as u32,
                col_tile: col_tile as u32,
                dtype: dtype as u32,
            },
        },
    ))
}

/// Mirrors `BurnDecodeScoresTiling` in `kernels/decode_attention_scores.cpp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeScoresTiling {
    /// Requests (B).
    pub batch: u32,
    /// Query heads (HQ).
    pub q_heads: u32,
    /// Key/value heads (HKV).
    pub kv_heads: u32,
    /// Key head dim (Dk).
    pub head_dim_k: u32,
    /// Splits per request, at most.
    pub max_splits: u32,
    /// Rows of the caches.
    pub slots: u32,
    /// Entries of kv_indices: the workspaces' row pitch.
    pub indices: u32,
    /// Query heads per unit (Mmad's m, at least 2).
    pub head_tile: u32,
    /// Keys per Mmad (n), a multiple of 16.
    pub key_tile: u32,
    /// Dk columns per L0 load, a multiple of 16.
    pub k_step: u32,
    /// Element type of q and k ([`NormType`] codes: half or bf16).
    pub dtype: u32,
}

/// Mirrors `BurnDecodeSoftmaxTiling` in `kernels/decode_attention_softmax.cpp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodeSoftmaxTiling {
    /// Requests (B).
    pub batch: u32,
    /// Query heads (HQ).
    pub q_heads: u32,
    /// Value head dim (Dv): the zero rows of empty splits.
    pub head_dim_v: u32,
    /// Splits per request, at most.
    pub max_splits: u32,
    /// Entries of kv_indices: the workspaces' row pitch.
    pub indices: u32,
    /// Scores per pass, a multiple of 64.
    pub chunk: u32,
    /// Element type of the probabilities (q's, [`NormType`] codes).
    pub dtype: u32,
    /// Softmax scale.
    pub scale: f32,
    /// Logit soft cap; 0 for none.
    pub logit_cap: f32,
}

/// Mirrors `BurnDecodeValuesTiling` in `kernels/decode_attention_values.cpp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeValuesTiling {
    /// Requests (B).
    pub batch: u32,
    /// Query heads (HQ).
    pub q_heads: u32,
    /// Key/value heads (HKV).
    pub kv_heads: u32,
    /// Elements per head of the rows values are read from: Dk (MLA, the key rows) or Dv.
    pub row_dim: u32,
    /// Value head dim (Dv).
    pub head_dim_v: u32,
    /// Splits per request, at most.
    pub max_splits: u32,
    /// Rows of the caches.
    pub slots: u32,
    /// Entries of kv_indices: the probabilities' row pitch.
    pub indices: u32,
    /// Query heads per unit (Mmad's m, at least 2).
    pub head_tile: u32,
    /// Keys per Mmad (k), a multiple of 16.
    pub key_tile: u32,
    /// Element type ([`NormType`] codes: half or bf16).
    pub dtype: u32,
}

/// The kernels that compute decode attention's per-split results (stage 2 is common).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodePath {
    /// `decode_attention_stage1`: scores, softmax and values on the vector cores.
    Vector,
    /// `decode_attention_scores` (cube), `decode_attention_softmax` (vector) and
    /// `decode_attention_values` (cube), through two workspaces.
    Cube,
}

impl DecodePath {
    /// The kernels the path launches, stage 2 included, in launch order.
    pub fn kernels(self) -> &'static [&'static str] {
        match self {
            Self::Vector => &["decode_attention_stage1", "decode_attention_stage2"],
            Self::Cube => &[
                "decode_attention_scores",
                "decode_attention_softmax",
                "decode_attention_values",
                "decode_attention_stage2",
            ],
        }
    }
}

/// The cube path's three launches; stage 2 follows as on the vector path.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodeCubePlans {
    /// `decode_attention_scores` (cube cores).
    pub scores: Plan<DecodeScoresTiling>,
    /// `decode_attention_softmax` (vector cores).
    pub softmax: Plan<DecodeSoftmaxTiling>,
    /// `decode_attention_values` (cube cores).
    pub values: Plan<DecodeValuesTiling>,
    /// f32 elements of the scores workspace `[HQ, T]`.
    pub scores_elems: u64,
    /// Elements (q's dtype) of the probabilities workspace `[HQ, T]`.
    pub probs_elems: u64,
}

/// The per-split kernels a plan launches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DecodeStage1 {
    /// One vector kernel.
    Vector(Plan<DecodeStage1Tiling>),
    /// Three kernels, two on the cube cores.
    Cube(DecodeCubePlans),
}

/// Each path's modelled time for a shape (seconds, launch latency included; `None` where the
/// path cannot run the shape), from the device model's rates in [`DeviceProps`]: per launch the
/// slower of the GM traffic (at HBM bandwidth, and the busiest core's at its own rate) and the
/// busiest core's compute (vector repeats, or Mmad cycles ceil(m/16) ceil(n/16) ceil(k/16)),
/// plus `launch_latency_ns`. Lengths are read on the device, so the model assumes the entries of
/// kv_indices are spread evenly over the requests and each request over its max_kv_splits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodeEstimate {
    /// The vector path (2 launches).
    pub vector_s: Option<f64>,
    /// The cube path (4 launches).
    pub cube_s: Option<f64>,
}

/// A decode-attention launch plan: the per-split kernels, stage 2, and the estimate the path
/// was chosen from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodePlan {
    /// The per-split kernels.
    pub stage1: DecodeStage1,
    /// The merge.
    pub stage2: Plan<DecodeStage2Tiling>,
    /// Both paths' modelled times.
    pub estimate: DecodeEstimate,
}

impl DecodePlan {
    /// The path the plan takes.
    pub fn path(&self) -> DecodePath {
        match self.stage1 {
            DecodeStage1::Vector(_) => DecodePath::Vector,
            DecodeStage1::Cube(_) => DecodePath::Cube,
        }
    }
}

/// L1 bytes a cube kernel may allocate: 512 KiB less the 128 B CANN keeps for KFC
/// (cube-api.md §7, the stricter budget).
pub(super) const L1_BYTES: u64 = (512 << 10) - 128;
/// L0A and L0B bytes each.
pub(super) const L0AB_BYTES: u64 = 64 << 10;
/// L0C bytes.
pub(super) const L0C_BYTES: u64 = 128 << 10;
/// Most keys per Mmad in the cube kernels.
pub(super) const MAX_CUBE_KEY_TILE: u64 = 128;
/// Dk columns per L0 load of the scores kernel: 128 x 128 half operands fill half of L0A/L0B,
/// and (128 / 16)^2 = 64 fractals stay within LoadData's 255 repeats.
pub(super) const CUBE_K_STEP: u64 = 128;
/// Most heads per Mmad (m): with the key tile and k step above, L0A holds 256 rows.
const MAX_CUBE_HEAD_TILE: u64 = 256;
/// Most scores the softmax kernel holds per pass.
const SOFTMAX_CHUNK: u64 = 8192;
/// Largest Fixpipe nSize (Dv of the value product).
pub(super) const MAX_FIXPIPE_N: u64 = 4095;

pub(super) fn align16(n: u64) -> u64 {
    n.div_ceil(16) * 16
}

/// `count` items in equal tiles of at most `max` (the last at least `min`): (tiles, per tile).
pub(super) fn equal_tiles(count: u64, max: u64, min: u64) -> Option<(u64, u64)> {
    let tiles = count.div_ceil(max.max(1));
    let per = count.div_ceil(tiles);
    (count - (tiles - 1) * per >= min).then_some((tiles, per))
}

/// The unified-buffer bytes of the softmax kernel (its `InitBuffer`s).
pub fn decode_softmax_ub_bytes(dtype: NormType, head_dim_v: u64, chunk: u64, capped: bool) -> u64 {
    let reduce = 2 * align8(chunk.div_ceil(64)) * 4;
    chunk * 4 * (1 + capped as u64)
        + ub_align(chunk * dtype.bytes())
        + reduce
        + 32
        + ub_align(head_dim_v * 4)
}

/// Bytes a cube kernel plans in each local memory of a cube core (its `InitBuffer`s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CubeBuffers {
    /// L1 (A1/B1 queues).
    pub l1: u64,
    /// L0A (A2).
    pub l0a: u64,
    /// L0B (B2).
    pub l0b: u64,
    /// L0C (CO1).
    pub l0c: u64,
}

impl CubeBuffers {
    /// Every memory within its budget (cube-api.md §7; L1 less CANN's KFC reserve).
    pub fn fit(&self) -> bool {
        self.l1 <= L1_BYTES
            && self.l0a <= L0AB_BYTES
            && self.l0b <= L0AB_BYTES
            && self.l0c <= L0C_BYTES
    }
}

/// The local memory `decode_attention_scores` plans for a tiling: the head tile's queries and a
/// key tile in L1, a k step of each in L0A/L0B, the scores in L0C (all already 32-byte multiples).
pub fn decode_scores_cube_bytes(t: &DecodeScoresTiling, dtype: NormType) -> CubeBuffers {
    let eb = dtype.bytes();
    let (mp, np) = (align16(t.head_tile as u64), t.key_tile as u64);
    let (kp, step) = (align16(t.head_dim_k as u64), t.k_step as u64);
    CubeBuffers {
        l1: (mp + np) * kp * eb,
        l0a: mp * step * eb,
        l0b: step * np * eb,
        l0c: mp * np * 4,
    }
}

/// The local memory `decode_attention_values` plans for a tiling: the head tile's probabilities
/// and a key tile of value rows in L1 and again in L0A/L0B, the head tile's Dv accumulators in L0C.
pub fn decode_values_cube_bytes(t: &DecodeValuesTiling, dtype: NormType) -> CubeBuffers {
    let eb = dtype.bytes();
    let (mp, kr, np) = (
        align16(t.head_tile as u64),
        t.key_tile as u64,
        align16(t.head_dim_v as u64),
    );
    CubeBuffers {
        l1: (mp * kr + kr * np) * eb,
        l0a: mp * kr * eb,
        l0b: kr * np * eb,
        l0c: mp * np * 4,
    }
}

/// The cube path's plans, or why it cannot run the shape.
fn cube_plans(
    s: &DecodeShape,
    dtype: NormType,
    scale: f32,
    logit_cap: f32,
    props: &DeviceProps,
) -> Result<DecodeCubePlans, &'static str> {
    if !matches!(dtype, NormType::F16 | NormType::BF16) {
        return Err("it takes half and bf16 only: float values as k x n rows cannot be loaded into L0B (no LoadDataWithTranspose)");
    }
    let group = s.q_heads / s.kv_heads.max(1);
    if group < 2 {
        return Err(
            "it needs at least 2 query heads per key/value head (an Mmad with m = 1 is a GEMV)",
        );
    }
    let np_v = align16(s.head_dim_v);
    if s.head_dim_v > MAX_FIXPIPE_N || 16 * np_v * 2 > L0AB_BYTES || s.head_dim_k > u16::MAX as u64
    {
        return Err("it needs Dv at most 2048 and Dk below 65536");
    }
    if s.indices == 0 || s.q_heads * s.indices > u32::MAX as u64 {
        return Err("it needs kv_indices to hold 1 to 2^32 / HQ entries");
    }
    let eb = dtype.bytes();
    let kp = align16(s.head_dim_k);
    // Scores: the group's queries and a key tile side by side in L1.
    let (mut key_tile, mut heads) = (MAX_CUBE_KEY_TILE, None);
    while key_tile >= 16 {
        let max_heads =
            ((L1_BYTES / (kp * eb)).saturating_sub(key_tile) / 16 * 16).min(MAX_CUBE_HEAD_TILE);
        if max_heads >= 16 {
            heads = equal_tiles(group, max_heads, 2);
            if heads.is_some() {
                break;
            }
        }
        key_tile -= 16;
    }
    let (tiles, head_tile) = heads.ok_or("it needs a head tile and 16 key rows of Dk to fit L1")?;
    // Values: L0B holds a key tile of value rows; L0C the head tile's Dv accumulators, L0A its
    // probabilities of the key tile, L1 both operands.
    let v_key_tile = (L0AB_BYTES / (np_v * eb) / 16 * 16).min(MAX_CUBE_KEY_TILE);
    let v_max_heads = (L0C_BYTES / (np_v * 4))
        .min(L0AB_BYTES / (v_key_tile * eb))
        .min(L1_BYTES.saturating_sub(v_key_tile * np_v * eb) / (v_key_tile * eb))
        / 16
        * 16;
    let (v_tiles, v_head_tile) = equal_tiles(group, v_max_heads, 2)
        .ok_or("it needs a tile of at least 2 heads' Dv accumulators to fit L0C")?;
    let chunk = SOFTMAX_CHUNK;
    if decode_softmax_ub_bytes(dtype, s.head_dim_v, chunk, logit_cap > 0.0) > props.ub_bytes as u64
    {
        return Err("its softmax kernel does not fit the unified buffer");
    }
    let cube = props.cube_cores as u64;
    let units = |t: u64| (s.batch * s.kv_heads * t * s.max_splits).clamp(1, cube) as u32;
    Ok(DecodeCubePlans {
        scores: Plan {
            block_dim: units(tiles),
            tiling: DecodeScoresTiling {
                batch: s.batch as u32,
                q_heads: s.q_heads as u32,
                kv_heads: s.kv_heads as u32,
                head_dim_k: s.head_dim_k as u32,
                max_splits: s.max_splits as u32,
                slots: s.slots as u32,
                indices: s.indices as u32,
                head_tile: head_tile as u32,
                key_tile: key_tile as u32,
                k_step: CUBE_K_STEP as u32,
                dtype: dtype as u32,
            },
        },
        softmax: Plan {
            block_dim: (s.batch * s.q_heads * s.max_splits).clamp(1, props.vector_cores as u64)
                as u32,
            tiling: DecodeSoftmaxTiling {
                batch: s.batch as u32,
                q_heads: s.q_heads as u32,
                head_dim_v: s.head_dim_v as u32,
                max_splits: s.max_splits as u32,
                indices: s.indices as u32,
                chunk: chunk as u32,
                dtype: dtype as u32,
                scale,
                logit_cap,
            },
        },
        values: Plan {
            block_dim: units(v_tiles),
            tiling: DecodeValuesTiling {
                batch: s.batch as u32,
                q_heads: s.q_heads as u32,
                kv_heads: s.kv_heads as u32,
                row_dim: if s.value_from_key {
                    s.head_dim_k
                } else {
                    s.head_dim_v
                } as u32,
                head_dim_v: s.head_dim_v as u32,
                max_splits: s.max_splits as u32,
                slots: s.slots as u32,
                indices: s.indices as u32,
                head_tile: v_head_tile as u32,
                key_tile: v_key_tile as u32,
                dtype: dtype as u32,
            },
        },
        scores_elems: s.q_heads * s.indices,
        probs_elems: s.q_heads * s.indices,
    })
}

/// One launch of the model: `units` equal units over `blocks` cores, each moving `bytes` and
/// costing `cycles` of its core's compute.
pub(super) fn launch_seconds(
    props: &DeviceProps,
    units: u64,
    blocks: u64,
    bytes: u64,
    cycles: u64,
) -> f64 {
    let busiest = units.div_ceil(blocks.max(1));
    let compute = (busiest * cycles) as f64 / props.clock_hz as f64;
    props
        .gm_seconds(units * bytes, busiest * bytes)
        .max(compute)
        + props.launch_latency_ns as f64 * 1e-9
}

/// 256-byte vector repeats of one pass over `n` f32.
pub(super) fn repeats(n: u64) -> u64 {
    (n * 4).div_ceil(256)
}

/// Mmad cycles of an m x k by k x n product.
pub(super) fn mmad_cycles(m: u64, n: u64, k: u64) -> u64 {
    m.div_ceil(16) * n.div_ceil(16) * k.div_ceil(16)
}

/// Both paths' modelled times (see [`DecodeEstimate`]).
pub(super) fn estimate(
    s: &DecodeShape,
    dtype: NormType,
    logit_cap: f32,
    vector: Option<&(Plan<DecodeStage1Tiling>, Plan<DecodeStage2Tiling>)>,
    cube: Option<&DecodeCubePlans>,
    props: &DeviceProps,
) -> DecodeEstimate {
    let eb = dtype.bytes();
    let (dk, dv, splits) = (s.head_dim_k, s.head_dim_v, s.max_splits);
    let group = s.q_heads / s.kv_heads.max(1);
    // Keys per split, the entries spread evenly.
    let keys = s
        .indices
        .div_ceil(s.batch.max(1))
        .div_ceil(splits.max(1))
        .max(1);
    let cap_passes = if logit_cap > 0.0 { 9 } else { 0 };
    let stage2 = |p: &Plan<DecodeStage2Tiling>| {
        let pairs = s.batch * s.q_heads;
        let bytes = splits * (dv + 1) * 4 + dv * eb + 4;
        launch_seconds(
            props,
            pairs,
            p.block_dim as u64,
            bytes,
            splits * repeats(dv) * 3,
        )
    };
    let vector_s = vector.map(|(one, two)| {
        let heads = one.tiling.head_tile as u64;
        let units = s.batch * s.kv_heads * group.div_ceil(heads) * splits;
        let values = if s.value_from_key { 0 } else { dv };
        let bytes = keys * ((dk + values) * eb + 4) + heads * dk * eb + heads * (dv + 1) * 4;
        // Per (head, key): Mul and ReduceSum over Dk, Axpy over Dv; per key the widening
        // casts; per head and key the softmax passes.
        let widen = if eb < 4 {
            repeats(dk) + repeats(values)
        } else {
            0
        };
        let cycles = heads * keys * (2 * repeats(dk) + repeats(dv))
            + keys * widen
            + heads * repeats(keys) * (6 + cap_passes);
        let rate = props.vector_repeats_per_cycle.max(1);
        launch_seconds(
            props,
            units,
            one.block_dim as u64,
            bytes,
            cycles.div_ceil(rate),
        ) + stage2(two)
    });
    let cube_s = cube.zip(vector).map(|(c, (_, two))| {
        let t = &c.scores.tiling;
        let heads = t.head_tile as u64;
        let units = s.batch * s.kv_heads * group.div_ceil(heads) * splits;
        let bytes = keys * (dk * eb + 4) + heads * dk * eb + heads * keys * 4;
        let scores = launch_seconds(
            props,
            units,
            c.scores.block_dim as u64,
            bytes,
            mmad_cycles(heads, keys, dk),
        );
        let passes = if keys <= c.softmax.tiling.chunk as u64 {
            1
        } else {
            3
        };
        let rate = props.vector_repeats_per_cycle.max(1);
        let softmax = launch_seconds(
            props,
            s.batch * s.q_heads * splits,
            c.softmax.block_dim as u64,
            keys * (4 * passes + eb) + 16,
            (repeats(keys) * passes * (6 + cap_passes)).div_ceil(rate),
        );
        let v = &c.values.tiling;
        let heads = v.head_tile as u64;
        let units = s.batch * s.kv_heads * group.div_ceil(heads) * splits;
        let bytes = heads * keys * eb + keys * (dv * eb + 4) + heads * dv * 4;
        let values = launch_seconds(
            props,
            units,
            c.values.block_dim as u64,
            bytes,
            mmad_cycles(heads, dv, keys),
        );
        scores + softmax + values + stage2(two)
    });
    DecodeEstimate { vector_s, cube_s }
}

/// Plans both paths that can run the shape, estimates them (see [`DecodeEstimate`]), and takes
/// `path` when given, else the faster one. The vector path: see `vector_plans`. The cube path
/// (half and bf16, at least 2 query heads per key/value head): scores by Mmad into an `[HQ, T]`
/// f32 workspace, softmax into an `[HQ, T]` workspace of probabilities, values by Mmad into
/// part_out; the whole group is one head tile when it fits. Stage 2 is the same for both. Err
/// says why the shape (or the asked path) cannot run.
pub fn decode_attention(
    s: &DecodeShape,
    dtype: NormType,
    scale: f32,
    logit_cap: f32,
    path: Option<DecodePath>,
    props: &DeviceProps,
) -> Result<DecodePlan, String> {
    let vector = vector_plans(s, dtype, scale, logit_cap, props);
    let Some(vector) = vector else {
        return Err(format!(
            "one head's rows (Dk = {}, Dv = {}) must fit a vector core's unified buffer with a \
             tile of 8 keys, and max_kv_splits ({}) must be at most 4095",
            s.head_dim_k, s.head_dim_v, s.max_splits
        ));
    };
    let cube = cube_plans(s, dtype, scale, logit_cap, props);
    let estimate = estimate(
        s,
        dtype,
        logit_cap,
        Some(&vector),
        cube.as_ref().ok(),
        props,
    );
    let take_cube = match path {
        Some(DecodePath::Vector) => false,
        Some(DecodePath::Cube) => true,
        None => matches!(estimate, DecodeEstimate { vector_s: Some(v), cube_s: Some(c) } if c < v),
    };
    let stage1 = if take_cube {
        DecodeStage1::Cube(cube.map_err(|why| format!("the cube path was asked for, but {why}"))?)
    } else {
        DecodeStage1::Vector(vector.0)
    };
    Ok(DecodePlan {
        stage1,
        stage2: vector.1,
        estimate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_cache_write_fits_the_unified_buffer_and_covers_every_token() {
        let a2 = DeviceProps::ATLAS_A2;
        let gqa = |cols| CachePart {
            cache_rows: 1 << 20,
            stride: cols,
            offset: 0,
            cols,
        };
        let mla = [
            CachePart {
                cache_rows: 4096,
                stride: 576,
                offset: 0,
                cols: 512,
            },
            CachePart {
                cache_rows: 4096,
                stride: 576,
                offset: 512,
                cols: 64,
            },
        ];
        let cases: [(u64, Vec<CachePart>); 4] = [
            (1, vec![gqa(512), gqa(512)]),
            (8192, vec![gqa(1024), gqa(1024)]),
            (33, mla.to_vec()),
            (5, vec![gqa(1 << 20)]),
        ];
        for (tokens, parts) in cases {
            for (elem, index) in [(2, 4), (4, 8)] {
                let plan = kv_cache_write(tokens, &parts, elem, index, &a2);
                let t = plan.tiling;
                assert!(plan.block_dim <= a2.vector_cores, "{t:?}");
                assert!(
                    plan.block_dim as u64 * t.rows_per_core as u64 >= tokens,
                    "{t:?}"
                );
                assert_eq!((t.chunk as u64 * elem) % 32, 0, "{t:?}");
                assert_eq!(t.idx_chunk % 8, 0, "{t:?}");
                assert!(kv_cache_write_ub_bytes(&t) <= a2.ub_bytes as u64, "{t:?}");
                assert_eq!(
                    t.cols[..parts.len()],
                    parts.iter().map(|p| p.cols as u32).collect::<Vec<_>>()[..]
                );
            }
        }
    }

    fn decode_shape(
        batch: u64,
        q_heads: u64,
        kv_heads: u64,
        dims: (u64, u64),
        max_splits: u64,
        value_from_key: bool,
    ) -> DecodeShape {
        DecodeShape {
            batch,
            q_heads,
            kv_heads,
            head_dim_k: dims.0,
            head_dim_v: dims.1,
            max_splits,
            slots: 1 << 20,
            indices: 1 << 20,
            value_from_key,
        }
    }

    #[test]
    fn decode_attention_fits_the_unified_buffer_and_covers_every_head() {
        let a2 = DeviceProps::ATLAS_A2;
        let shapes = [
            decode_shape(1, 32, 1, (576, 512), 4, true),
            decode_shape(8, 128, 1, (576, 512), 4, true),
            decode_shape(1, 16, 1, (288, 256), 8, true),
            decode_shape(32, 32, 8, (128, 128), 4, false),
            decode_shape(1, 32, 8, (128, 128), 4, false),
            decode_shape(3, 7, 7, (80, 72), 3, false),
            decode_shape(2, 4, 1, (1024, 1024), 64, false),
            decode_shape(1, 2, 1, (64, 1024), 256, false),
        ];
        for s in shapes {
            for dtype in [NormType::F32, NormType::F16, NormType::BF16] {
                for cap in [0.0, 30.0] {
                    let (one, two) = vector_plans(&s, dtype, 0.1, cap, &a2)
                        .unwrap_or_else(|| panic!("{s:?} {dtype:?} fits"));
                    let (t1, t2) = (one.tiling, two.tiling);
                    let group = s.q_heads / s.kv_heads;
                    assert!(t1.head_tile >= 1 && t1.head_tile as u64 <= group, "{t1:?}");
                    assert!(t1.key_tile >= 8 && t1.key_tile % 8 == 0, "{t1:?}");
                    let ub = decode_stage1_ub_bytes(
                        &s,
                        dtype,
                        t1.head_tile as u64,
                        t1.key_tile as u64,
                        cap > 0.0,
                    );
                    assert!(
                        ub <= a2.ub_bytes as u64,
                        "{s:?} {dtype:?}: stage 1 needs {ub}"
                    );
                    let ub2 = decode_stage2_ub_bytes(
                        s.max_splits,
                        dtype,
                        t2.pair_tile as u64,
                        t2.col_tile as u64,
                    );
                    assert!(
                        ub2 <= a2.ub_bytes as u64,
                        "{s:?} {dtype:?}: stage 2 needs {ub2}"
                    );
                    assert!(
                        t2.col_tile == t2.head_dim_v || t2.col_tile % 16 == 0,
                        "{t2:?}"
                    );
                    assert!(t2.pair_tile as u64 * s.max_splits <= MAX_COPY_ROWS);
                    let pairs = s.batch * s.q_heads;
                    let per = t2.pairs_per_core as u64;
                    assert!(
                        two.block_dim as u64 * per >= pairs
                            && (two.block_dim as u64 - 1) * per < pairs,
                        "{t2:?}"
                    );
                    assert!(one.block_dim <= 48 && two.block_dim <= 48);
                }
            }
        }
    }

    #[test]
    fn decode_attention_occupies_the_cores_for_one_request() {
        // The MLA seed (B=1, HKV=1, 4 splits) has 4 units per group: the group is cut into
        // head tiles so that every core has work.
        let s = decode_shape(1, 32, 1, (576, 512), 4, true);
        let (one, _) =
            vector_plans(&s, NormType::BF16, 0.1, 0.0, &DeviceProps::ATLAS_A2).expect("fits");
        let tiles = 32u64.div_ceil(one.tiling.head_tile as u64);
        assert!(tiles * 4 >= 40, "{:?}", one.tiling);
        // A batch that fills the cores keeps whole groups, so keys are read once per group.
        let s = decode_shape(32, 32, 8, (128, 128), 4, false);
        let (one, _) =
            vector_plans(&s, NormType::F16, 0.1, 0.0, &DeviceProps::ATLAS_A2).expect("fits");
        assert_eq!(one.tiling.head_tile, 4);
    }

    #[test]
    fn decode_attention_rejects_what_cannot_fit() {
        let a2 = DeviceProps::ATLAS_A2;
        let wide = decode_shape(1, 1, 1, (8192, 8192), 1, false);
        assert!(decode_attention(&wide, NormType::F32, 0.1, 0.0, None, &a2).is_err());
        let splits = decode_shape(1, 1, 1, (64, 64), 5000, false);
        assert!(decode_attention(&splits, NormType::F32, 0.1, 0.0, None, &a2).is_err());
    }

    #[test]
    fn alloc_extend_splits_the_output_evenly_and_fits() {
        let a2 = DeviceProps::ATLAS_A2;
        for (batch, free, page, out, ib) in [
            (2u64, 2048u64, 128u64, 2500u64, 4u64),
            (2, 2048, 128, 2500, 8),
            (256, 4096, 16, 256, 4),
            (1, 1, 1, 0, 4),
            (0, 0, 64, 0, 8),
            (100_000, 1 << 20, 1, 3_000_000, 8),
        ] {
            let p = alloc_extend(batch, free, page, out, ib, &a2);
            let t = p.tiling;
            let per = t.slots_per_core as u64;
            assert!(per.is_multiple_of(8) && per >= MIN_SLOTS_PER_CORE, "{t:?}");
            assert!(p.block_dim as u64 * per >= out, "{t:?}");
            assert!(
                out == 0 || (p.block_dim as u64 - 1) * per < out,
                "no idle block: {t:?}"
            );
            assert!(p.block_dim >= 1 && p.block_dim <= a2.vector_cores);
            for tile in [t.slot_tile, t.len_tile, t.page_tile] {
                assert!(tile >= 8 && tile % 8 == 0, "{t:?}");
            }
            assert!(alloc_extend_ub_bytes(&t) <= a2.ub_bytes as u64, "{t:?}");
        }
    }

    /// A shape with `len` keys per request.
    fn with_keys(mut s: DecodeShape, len: u64) -> DecodeShape {
        s.indices = s.batch * len;
        s
    }

    #[test]
    fn decode_attention_takes_the_path_the_model_finds_faster() {
        let a2 = DeviceProps::ATLAS_A2;
        let mla = |batch, len| with_keys(decode_shape(batch, 32, 1, (576, 512), 4, true), len);
        // The seed: four launches' latency outweighs the vector work.
        let seed = decode_attention(&mla(1, 128), NormType::BF16, 0.1, 0.0, None, &a2).unwrap();
        let (v, c) = (
            seed.estimate.vector_s.unwrap(),
            seed.estimate.cube_s.unwrap(),
        );
        assert!(v < c, "{:?}", seed.estimate);
        assert_eq!(seed.path(), DecodePath::Vector);
        // Longer and wider batches: the vector unit's (head, key) work dominates.
        for (batch, len) in [(8, 1024), (32, 4096)] {
            let p =
                decode_attention(&mla(batch, len), NormType::BF16, 0.1, 0.0, None, &a2).unwrap();
            let (v, c) = (p.estimate.vector_s.unwrap(), p.estimate.cube_s.unwrap());
            assert!(c < v, "B{batch} S{len}: {:?}", p.estimate);
            assert_eq!(p.path(), DecodePath::Cube);
        }
        // Float, and one query head per key/value head, stay on the vector path.
        let float = decode_attention(&mla(8, 1024), NormType::F32, 0.1, 0.0, None, &a2).unwrap();
        assert_eq!(
            (float.path(), float.estimate.cube_s),
            (DecodePath::Vector, None)
        );
        let mha = with_keys(decode_shape(8, 8, 8, (128, 128), 4, false), 1024);
        let err = decode_attention(&mha, NormType::F16, 0.1, 0.0, Some(DecodePath::Cube), &a2);
        assert!(err.unwrap_err().contains("at least 2 query heads"));
        // Asking for a path takes it.
        let forced = decode_attention(
            &mla(1, 128),
            NormType::F16,
            0.1,
            0.0,
            Some(DecodePath::Cube),
            &a2,
        );
        assert_eq!(forced.unwrap().path(), DecodePath::Cube);
    }

    #[test]
    fn cube_plans_fit_the_cube_buffers() {
        let a2 = DeviceProps::ATLAS_A2;
        for s in [
            decode_shape(8, 128, 1, (576, 512), 4, true),
            decode_shape(1, 16, 1, (288, 256), 8, true),
            decode_shape(32, 32, 8, (128, 128), 4, false),
            decode_shape(3, 6, 2, (72, 40), 3, false),
            decode_shape(2, 64, 1, (2048, 2048), 2, false),
            // Two value head tiles of 33 and 32 heads (Dv 512): their L0C layouts differ.
            decode_shape(1, 65, 1, (576, 512), 2, true),
            // Past 256 heads per score tile; values' L0A bounds their head tile (Dv 64).
            decode_shape(1, 257, 1, (64, 64), 2, false),
            // Narrow values: L0C would hold 2048 heads, L0A only 256 with 128 keys.
            decode_shape(1, 600, 1, (32, 16), 1, false),
        ] {
            let s = with_keys(s, 100);
            let c = cube_plans(&s, NormType::BF16, 0.1, 30.0, &a2)
                .unwrap_or_else(|e| panic!("{s:?}: {e}"));
            let (t, v) = (c.scores.tiling, c.values.tiling);
            let kt = t.key_tile as u64;
            let scores = decode_scores_cube_bytes(&t, NormType::BF16);
            assert!(scores.fit(), "{t:?}: {scores:?}");
            assert!((CUBE_K_STEP / 16) * (kt / 16) <= 255, "{t:?}");
            let values = decode_values_cube_bytes(&v, NormType::BF16);
            assert!(values.fit(), "{v:?}: {values:?}");
            let ktv = v.key_tile as u64;
            assert!(ktv >= 16 && ktv.is_multiple_of(16), "{v:?}");
            let group = s.q_heads / s.kv_heads;
            for tile in [t.head_tile as u64, v.head_tile as u64] {
                let tiles = group.div_ceil(tile);
                assert!(tile >= 2 && group - (tiles - 1) * tile >= 2, "{s:?}");
            }
            assert!(c.scores.block_dim <= a2.cube_cores && c.values.block_dim <= a2.cube_cores);
            assert!(c.softmax.block_dim <= a2.vector_cores);
        }
    }
}
