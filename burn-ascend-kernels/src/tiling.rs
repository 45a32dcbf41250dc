//! Tiling: how each kernel splits its work over the vector cores (blocks) and the unified
//! buffer (tiles), as pure functions of the shapes and the device's properties. Tiling never
//! depends on values held in device tensors, so a launch never waits for the host.
//!
//! The structs mirror the kernels' tiling structs field for field (`#[repr(C)]`, fixed-width
//! fields), because the launch passes them by value to the kernel.

/// The device properties tiling depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceProps {
    /// Vector cores (AIV) a vector kernel can use in parallel.
    pub vector_cores: u32,
    /// Unified buffer per vector core, bytes.
    pub ub_bytes: u32,
}

impl DeviceProps {
    /// Atlas A2 (Ascend910B1/B2): 48 vector cores, 192 KiB unified buffer each.
    pub const ATLAS_A2: Self = Self {
        vector_cores: 48,
        ub_bytes: 192 << 10,
    };
}

/// Unified-buffer addresses and DataCopy lengths are multiples of this many bytes.
pub const UB_ALIGN: u64 = 32;

/// Buffers per queue: two, so the copy of tile i+1 overlaps the compute of tile i.
pub const DOUBLE_BUFFER: u64 = 2;

/// A kernel launch: how many blocks, and the tiling passed to each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan<T> {
    /// Blocks to launch (at most the vector core count).
    pub block_dim: u32,
    /// The kernel's tiling argument.
    pub tiling: T,
}

/// Element types `vector_add` computes on the vector unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum AddType {
    /// f32
    F32 = 0,
    /// f16
    F16 = 1,
    /// bf16 (widened to f32 on the vector unit, which has no bf16 arithmetic)
    BF16 = 2,
    /// i32
    I32 = 3,
    /// i16
    I16 = 4,
}

impl AddType {
    /// Bytes per element in global memory.
    pub fn bytes(self) -> u64 {
        match self {
            AddType::F32 | AddType::I32 => 4,
            AddType::F16 | AddType::BF16 | AddType::I16 => 2,
        }
    }

    /// Unified-buffer bytes per tile element: three double-buffered queues, plus two f32
    /// widening buffers for bf16.
    fn ub_bytes_per_element(self) -> u64 {
        3 * DOUBLE_BUFFER * self.bytes() + if self == AddType::BF16 { 2 * 4 } else { 0 }
    }
}

/// Mirrors `VectorAddTiling` in `kernels/vector_add.cpp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VectorAddTiling {
    /// Elements in each tensor.
    pub total: u64,
    /// Elements per block (the last block may have fewer).
    pub per_core: u32,
    /// Elements per tile, a multiple of 32 bytes.
    pub tile: u32,
    /// The element type ([`AddType`]).
    pub dtype: u32,
}

/// Splits `len` elements evenly over the vector cores in whole 32-byte units, and each block's
/// share into the largest tiles the unified buffer holds.
pub fn vector_add(len: u64, dtype: AddType, props: &DeviceProps) -> Plan<VectorAddTiling> {
    let align = UB_ALIGN / dtype.bytes();
    let per_core = len
        .div_ceil(props.vector_cores as u64)
        .div_ceil(align)
        .max(1)
        * align;
    let block_dim = len.div_ceil(per_core).max(1);
    let max_tile = props.ub_bytes as u64 / dtype.ub_bytes_per_element() / align * align;
    let tile = per_core.min(max_tile);
    Plan {
        block_dim: block_dim as u32,
        tiling: VectorAddTiling {
            total: len,
            per_core: per_core as u32,
            tile: tile as u32,
            dtype: dtype as u32,
        },
    }
}

/// Float types `layer_norm` takes (statistics are f32 whatever the input).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum NormType {
    /// f32
    F32 = 0,
    /// f16
    F16 = 1,
    /// bf16
    BF16 = 2,
}

impl NormType {
    /// Bytes per element in global memory.
    pub fn bytes(self) -> u64 {
        match self {
            NormType::F32 => 4,
            NormType::F16 | NormType::BF16 => 2,
        }
    }

    /// Unified-buffer bytes per chunk element: input and output queues, f32 work and square
    /// buffers, f32 gamma and beta, and a staging buffer for narrow types.
    fn ub_bytes_per_element(self) -> u64 {
        let staged = if self == NormType::F32 {
            0
        } else {
            self.bytes()
        };
        2 * self.bytes() + 4 + 4 + 8 + staged
    }
}

/// Mirrors `LayerNormTiling` in `kernels/layer_norm.cpp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerNormTiling {
    /// Rows (M).
    pub rows: u32,
    /// Columns (N).
    pub cols: u32,
    /// Rows per block (the last block may have fewer).
    pub rows_per_core: u32,
    /// Elements per unified-buffer chunk: N when a row fits, else fewer (three passes per row).
    pub chunk: u32,
    /// Rows whose statistics are stored together (a multiple of 8).
    pub stat_rows: u32,
    /// 1 if gamma is given.
    pub has_gamma: u32,
    /// 1 if beta is given.
    pub has_beta: u32,
    /// The element type ([`NormType`]).
    pub dtype: u32,
    /// Added to the variance.
    pub eps: f32,
}

/// Rows per block below which each block's own copy of gamma and beta would cost more than
/// 2.5 % of its row traffic.
const AFFINE_ROWS: u64 = 40;
/// Most rows whose statistics a block buffers before storing them.
const MAX_STAT_ROWS: u64 = 256;

/// Rows evenly over the vector cores (each block keeping at least [`AFFINE_ROWS`] rows when
/// gamma or beta must be loaded per block), and the largest chunk of a row the unified buffer
/// holds with every buffer of the kernel.
pub fn layer_norm(
    rows: u64,
    cols: u64,
    dtype: NormType,
    has_gamma: bool,
    has_beta: bool,
    eps: f32,
    props: &DeviceProps,
) -> Plan<LayerNormTiling> {
    let min_rows = if has_gamma || has_beta {
        AFFINE_ROWS.min(rows.max(1))
    } else {
        1
    };
    let rows_per_core = rows
        .div_ceil(props.vector_cores as u64)
        .max(min_rows)
        .max(1);
    let block_dim = rows.div_ceil(rows_per_core).max(1);
    let stat_rows = rows_per_core.min(MAX_STAT_ROWS).div_ceil(8) * 8;
    let fixed = 2 * stat_rows * 4 + 32 + UB_ALIGN * 8;
    let per_element = dtype.ub_bytes_per_element();
    // ReduceSum's shared buffer needs one f32 per 64 elements, a small share of each element.
    let budget = (props.ub_bytes as u64).saturating_sub(fixed) * 64 / (64 * per_element + 4);
    let align = UB_ALIGN / 2;
    let chunk = if cols <= budget {
        cols
    } else {
        budget / align * align
    };
    Plan {
        block_dim: block_dim as u32,
        tiling: LayerNormTiling {
            rows: rows as u32,
            cols: cols as u32,
            rows_per_core: rows_per_core as u32,
            chunk: chunk as u32,
            stat_rows: stat_rows as u32,
            has_gamma: has_gamma as u32,
            has_beta: has_beta as u32,
            dtype: dtype as u32,
            eps,
        },
    }
}

/// The unified-buffer bytes `layer_norm`'s kernel allocates for a tiling (its `InitBuffer`s).
pub fn layer_norm_ub_bytes(t: &LayerNormTiling, dtype: NormType) -> u64 {
    let a = |b: u64| b.div_ceil(UB_ALIGN) * UB_ALIGN;
    let c = t.chunk as u64;
    let reduce = c.div_ceil(64).div_ceil(8) * 8 * 4;
    let staged = if dtype == NormType::F32 {
        0
    } else {
        a(c * dtype.bytes())
    };
    2 * a(c * dtype.bytes())
        + 2 * a(c * 4)
        + 2 * a(c * 4)
        + a(reduce)
        + 32
        + 2 * t.stat_rows as u64 * 4
        + staged
}

/// Mirrors `RowGatherTiling` in `kernels/row_gather.h` (moe_gather, token_rearrange).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowGatherTiling {
    /// Rows of the output.
    pub out_rows: u32,
    /// Rows of the source.
    pub src_rows: u32,
    /// Elements per row.
    pub cols: u32,
    /// Output rows per block.
    pub rows_per_core: u32,
    /// Elements per copy, a multiple of 32 bytes.
    pub chunk: u32,
    /// Indices loaded at a time, a multiple of 8.
    pub idx_chunk: u32,
    /// Source row = index / divisor.
    pub divisor: u32,
    /// Bytes per element (2 or 4).
    pub elem_bytes: u32,
    /// Bytes per index (4 or 8).
    pub index_bytes: u32,
}

/// Most indices a gather block loads at once.
const MAX_IDX_CHUNK: u64 = 1024;

/// Output rows evenly over the vector cores; rows move in two ping-pong buffers of the largest
/// chunk the unified buffer holds beside the index buffer.
pub fn row_gather(
    out_rows: u64,
    src_rows: u64,
    cols: u64,
    elem_bytes: u64,
    index_bytes: u64,
    divisor: u64,
    props: &DeviceProps,
) -> Plan<RowGatherTiling> {
    let rows_per_core = out_rows.div_ceil(props.vector_cores as u64).max(1);
    let block_dim = out_rows.div_ceil(rows_per_core).max(1);
    let idx_chunk = rows_per_core.min(MAX_IDX_CHUNK).div_ceil(8) * 8;
    let idx_bytes = (idx_chunk * index_bytes).div_ceil(UB_ALIGN) * UB_ALIGN;
    let align = UB_ALIGN / elem_bytes;
    let max_chunk = (props.ub_bytes as u64 - idx_bytes) / (2 * elem_bytes) / align * align;
    let chunk = cols
        .div_ceil(align)
        .max(1)
        .saturating_mul(align)
        .min(max_chunk);
    Plan {
        block_dim: block_dim as u32,
        tiling: RowGatherTiling {
            out_rows: out_rows as u32,
            src_rows: src_rows as u32,
            cols: cols as u32,
            rows_per_core: rows_per_core as u32,
            chunk: chunk as u32,
            idx_chunk: idx_chunk as u32,
            divisor: divisor.max(1) as u32,
            elem_bytes: elem_bytes as u32,
            index_bytes: index_bytes as u32,
        },
    }
}

/// Mirrors `MoeScatterTiling` in `kernels/moe_scatter.cpp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeScatterTiling {
    /// Tokens (T).
    pub tokens: u32,
    /// Top-k (K).
    pub top_k: u32,
    /// Hidden size (H).
    pub cols: u32,
    /// Tokens per block.
    pub tokens_per_core: u32,
    /// Columns per pass, a multiple of 32 bytes.
    pub chunk: u32,
    /// Tokens whose routing is loaded at a time.
    pub idx_tokens: u32,
    /// 1 if weights are given.
    pub has_weights: u32,
    /// The element type ([`NormType`] codes: 0 f32, 1 f16, 2 bf16).
    pub dtype: u32,
}

/// Tokens evenly over the vector cores; each pass holds a column chunk of one input row (double
/// buffered), the output row, and the f32 accumulator and term.
pub fn moe_scatter(
    tokens: u64,
    top_k: u64,
    cols: u64,
    dtype: NormType,
    has_weights: bool,
    props: &DeviceProps,
) -> Plan<MoeScatterTiling> {
    let tokens_per_core = tokens.div_ceil(props.vector_cores as u64).max(1);
    let block_dim = tokens.div_ceil(tokens_per_core).max(1);
    let idx_tokens = tokens_per_core.min((MAX_IDX_CHUNK / top_k.max(1)).max(1));
    let slots = idx_tokens * top_k.max(1);
    let routing = [4, dtype.bytes(), 4]
        .iter()
        .map(|b| (slots * b).div_ceil(UB_ALIGN) * UB_ALIGN)
        .sum::<u64>();
    let per_col = 3 * dtype.bytes() + 8;
    let align = UB_ALIGN / dtype.bytes();
    let max_chunk = (props.ub_bytes as u64 - routing) / per_col / align * align;
    let chunk = cols
        .div_ceil(align)
        .max(1)
        .saturating_mul(align)
        .min(max_chunk);
    Plan {
        block_dim: block_dim as u32,
        tiling: MoeScatterTiling {
            tokens: tokens as u32,
            top_k: top_k as u32,
            cols: cols as u32,
            tokens_per_core: tokens_per_core as u32,
            chunk: chunk as u32,
            idx_tokens: idx_tokens as u32,
            has_weights: has_weights as u32,
            dtype: dtype as u32,
        },
    }
}

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
    /// Slots written at a time.
    pub slot_chunk: u32,
    /// Bytes per index (4 or 8).
    pub index_bytes: u32,
}

/// Requests round-robin over at most `batch` blocks; the per-request lengths live in the
/// unified buffer, so the batch is bounded by it.
pub fn alloc_extend(
    batch: u64,
    free_pages: u64,
    page_size: u64,
    out_slots: u64,
    index_bytes: u64,
    props: &DeviceProps,
) -> Option<Plan<AllocExtendTiling>> {
    let lens = 3 * (batch * index_bytes).div_ceil(UB_ALIGN) * UB_ALIGN;
    let slot_chunk = 2048u64;
    let need = lens + slot_chunk * index_bytes + UB_ALIGN;
    (need <= props.ub_bytes as u64 && page_size > 0).then(|| Plan {
        block_dim: batch.clamp(1, props.vector_cores as u64) as u32,
        tiling: AllocExtendTiling {
            batch: batch as u32,
            free_pages: free_pages as u32,
            page_size: page_size as u32,
            out_slots: out_slots as u32,
            slot_chunk: slot_chunk as u32,
            index_bytes: index_bytes as u32,
        },
    })
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
    /// Keys per tile.
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
    /// 1 to write the merged log-sum-exp.
    pub with_lse: u32,
    /// Element type of the output ([`NormType`] codes).
    pub dtype: u32,
}

/// Query heads per key/value head the stage-1 kernel handles at once.
pub const MAX_GROUP: u64 = 64;

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

/// Stage 1: units (request, key/value head, split) round-robin over the vector cores, keys in
/// the largest tile the unified buffer holds beside the group's queries and accumulators.
/// Stage 2: (request, head) pairs round-robin. `None` when one group does not fit.
pub fn decode_attention(
    s: &DecodeShape,
    dtype: NormType,
    scale: f32,
    logit_cap: f32,
    with_lse: bool,
    props: &DeviceProps,
) -> Option<(Plan<DecodeStage1Tiling>, Plan<DecodeStage2Tiling>)> {
    let group = s.q_heads / s.kv_heads.max(1);
    let a8 = |n: u64| n.div_ceil(8) * 8;
    let (dk, dv) = (a8(s.head_dim_k), a8(s.head_dim_v));
    let fixed =
        4 * group * (dk + dv) + dk.max(dv) * dtype.bytes() + 4 * dk + 4 * a8(dk / 64 + 8) + 256;
    let per_key = 4 * dk + if s.value_from_key { 0 } else { 4 * dv } + 4 + 4 + 4;
    let room = (props.ub_bytes as u64).checked_sub(fixed)?;
    let key_tile = (room / per_key).min(256) / 8 * 8;
    let stage2 =
        4 * s.max_splits * dv + 4 * a8(s.max_splits) + 4 * dv + dv * dtype.bytes() + 32 + 64;
    if key_tile == 0 || group == 0 || group > MAX_GROUP || stage2 > props.ub_bytes as u64 {
        return None;
    }
    let units = s.batch * s.kv_heads * s.max_splits;
    let pairs = s.batch * s.q_heads;
    let cores = props.vector_cores as u64;
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
                key_tile: key_tile as u32,
                value_from_key: s.value_from_key as u32,
                dtype: dtype as u32,
                scale,
                logit_cap,
            },
        },
        Plan {
            block_dim: pairs.clamp(1, cores) as u32,
            tiling: DecodeStage2Tiling {
                pairs: pairs as u32,
                max_splits: s.max_splits as u32,
                head_dim_v: s.head_dim_v as u32,
                with_lse: with_lse as u32,
                dtype: dtype as u32,
            },
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TYPES: [AddType; 5] = [
        AddType::F32,
        AddType::F16,
        AddType::BF16,
        AddType::I32,
        AddType::I16,
    ];

    fn lengths() -> impl Iterator<Item = u64> {
        [
            1u64,
            7,
            8,
            16,
            31,
            48,
            1000,
            16384,
            16385,
            1 << 20,
            3_000_017,
        ]
        .into_iter()
    }

    #[test]
    fn vector_add_covers_every_element_exactly_once() {
        for dtype in TYPES {
            for len in lengths() {
                let p = vector_add(len, dtype, &DeviceProps::ATLAS_A2);
                let per = p.tiling.per_core as u64;
                let covered: u64 = (0..p.block_dim as u64)
                    .map(|b| (b * per).min(len)..((b + 1) * per).min(len))
                    .map(|r| r.end - r.start)
                    .sum();
                assert_eq!(covered, len, "{dtype:?} len {len}");
                assert!(
                    (p.block_dim as u64 - 1) * per < len,
                    "no idle block: {dtype:?} len {len}"
                );
            }
        }
    }

    #[test]
    fn vector_add_fits_the_unified_buffer_and_aligns() {
        for dtype in TYPES {
            for len in lengths() {
                let p = vector_add(len, dtype, &DeviceProps::ATLAS_A2);
                let t = p.tiling;
                assert!(
                    t.tile as u64 * dtype.ub_bytes_per_element()
                        <= DeviceProps::ATLAS_A2.ub_bytes as u64
                );
                assert_eq!(t.tile as u64 * dtype.bytes() % UB_ALIGN, 0);
                assert_eq!(t.per_core as u64 * dtype.bytes() % UB_ALIGN, 0);
                assert!(p.block_dim <= DeviceProps::ATLAS_A2.vector_cores);
            }
        }
    }

    #[test]
    fn layer_norm_covers_rows_and_fits_the_unified_buffer() {
        for dtype in [NormType::F32, NormType::F16, NormType::BF16] {
            for (m, n) in [
                (1, 1),
                (256, 128),
                (256, 1536),
                (33, 4096),
                (7, 8192),
                (3, 100_000),
                (4096, 64),
            ] {
                let p = layer_norm(m, n, dtype, true, true, 1e-6, &DeviceProps::ATLAS_A2);
                let t = p.tiling;
                let covered: u64 = (0..p.block_dim as u64)
                    .map(|b| {
                        ((b + 1) * t.rows_per_core as u64).min(m)
                            - (b * t.rows_per_core as u64).min(m)
                    })
                    .sum();
                assert_eq!(covered, m, "{dtype:?} {m}x{n}");
                assert!(
                    layer_norm_ub_bytes(&t, dtype) <= DeviceProps::ATLAS_A2.ub_bytes as u64,
                    "{dtype:?} {m}x{n}: {t:?}"
                );
                assert!(
                    t.chunk as u64 == n
                        || (t.chunk as u64) < n
                            && (t.chunk as u64 * dtype.bytes()).is_multiple_of(UB_ALIGN)
                );
                assert!(p.block_dim <= DeviceProps::ATLAS_A2.vector_cores);
            }
        }
    }

    #[test]
    fn layer_norm_keeps_rows_resident_when_they_fit() {
        let p = layer_norm(
            256,
            4096,
            NormType::F32,
            true,
            true,
            1e-6,
            &DeviceProps::ATLAS_A2,
        );
        assert_eq!(p.tiling.chunk, 4096);
        let wide = layer_norm(
            4,
            100_000,
            NormType::F32,
            true,
            true,
            1e-6,
            &DeviceProps::ATLAS_A2,
        );
        assert!(wide.tiling.chunk < 100_000);
    }

    #[test]
    fn gathers_cover_rows_and_fit_the_unified_buffer() {
        for (rows, cols, eb) in [
            (4096u64, 1536u64, 2u64),
            (1, 1, 4),
            (1024, 32, 4),
            (5, 100_000, 2),
            (100_000, 8, 2),
        ] {
            let p = row_gather(rows, rows, cols, eb, 4, 1, &DeviceProps::ATLAS_A2);
            let t = p.tiling;
            assert!(
                (p.block_dim as u64 - 1) * (t.rows_per_core as u64) < rows
                    && p.block_dim as u64 * t.rows_per_core as u64 >= rows
            );
            let idx = (t.idx_chunk as u64 * 4).div_ceil(32) * 32;
            assert!(
                idx + 2 * t.chunk as u64 * eb <= DeviceProps::ATLAS_A2.ub_bytes as u64,
                "{t:?}"
            );
            assert_eq!(t.chunk as u64 * eb % UB_ALIGN, 0);
            let s = moe_scatter(
                rows,
                4,
                cols,
                if eb == 2 {
                    NormType::F16
                } else {
                    NormType::F32
                },
                true,
                &DeviceProps::ATLAS_A2,
            );
            assert!(s.block_dim as u64 * s.tiling.tokens_per_core as u64 >= rows);
            assert!(s.tiling.chunk >= 1 && s.tiling.idx_tokens >= 1);
        }
    }

    #[test]
    fn decode_attention_fits_the_seed_layouts() {
        let mla = DecodeShape {
            batch: 1,
            q_heads: 32,
            kv_heads: 1,
            head_dim_k: 576,
            head_dim_v: 512,
            max_splits: 4,
            slots: 128,
            indices: 128,
            value_from_key: true,
        };
        let gqa = DecodeShape {
            batch: 32,
            q_heads: 32,
            kv_heads: 8,
            head_dim_k: 128,
            head_dim_v: 128,
            max_splits: 4,
            slots: 4096 * 32,
            indices: 4096 * 32,
            value_from_key: false,
        };
        for s in [mla, gqa] {
            for dtype in [NormType::F32, NormType::F16, NormType::BF16] {
                let (one, two) =
                    decode_attention(&s, dtype, 0.1, 0.0, true, &DeviceProps::ATLAS_A2)
                        .expect("seed layouts fit");
                assert!(one.tiling.key_tile >= 8 && one.block_dim <= 48 && two.block_dim <= 48);
            }
        }
    }

    #[test]
    fn vector_add_balances_the_cores() {
        let p = vector_add(16384, AddType::I32, &DeviceProps::ATLAS_A2);
        assert_eq!(p.block_dim, 48);
        let share =
            |b: u64| ((b + 1) * p.tiling.per_core as u64).min(16384) - b * p.tiling.per_core as u64;
        let (first, last) = (share(0), share(p.block_dim as u64 - 1));
        assert!(first - last < first, "every block has work");
        assert!(
            first <= 16384 / 48 + 8,
            "a block holds at most one 32-byte unit over the mean"
        );
    }
}
