//! Tiling of the paged-KV kernels: `alloc_extend` and split-KV `decode_attention`.

use super::{align8, align_type, ub_align, DeviceProps, NormType, Plan};

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
        + align8(keys) * 4
        + 64;
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
pub fn decode_attention(
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

#[cfg(test)]
mod tests {
    use super::*;

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
                    let (one, two) = decode_attention(&s, dtype, 0.1, cap, &a2)
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
            decode_attention(&s, NormType::BF16, 0.1, 0.0, &DeviceProps::ATLAS_A2).expect("fits");
        let tiles = 32u64.div_ceil(one.tiling.head_tile as u64);
        assert!(tiles * 4 >= 40, "{:?}", one.tiling);
        // A batch that fills the cores keeps whole groups, so keys are read once per group.
        let s = decode_shape(32, 32, 8, (128, 128), 4, false);
        let (one, _) =
            decode_attention(&s, NormType::F16, 0.1, 0.0, &DeviceProps::ATLAS_A2).expect("fits");
        assert_eq!(one.tiling.head_tile, 4);
    }

    #[test]
    fn decode_attention_rejects_what_cannot_fit() {
        let a2 = DeviceProps::ATLAS_A2;
        let wide = decode_shape(1, 1, 1, (8192, 8192), 1, false);
        assert!(decode_attention(&wide, NormType::F32, 0.1, 0.0, &a2).is_none());
        let splits = decode_shape(1, 1, 1, (64, 64), 5000, false);
        assert!(decode_attention(&splits, NormType::F32, 0.1, 0.0, &a2).is_none());
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
}
