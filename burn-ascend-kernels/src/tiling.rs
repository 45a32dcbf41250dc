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

/// Rows evenly over the vector cores (each block keeping at least `AFFINE_ROWS` rows when
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

/// Mirrors `LayerNormBackwardTiling` in `kernels/layer_norm_backward.cpp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerNormBackwardTiling {
    /// Rows (M).
    pub rows: u32,
    /// Columns (N).
    pub cols: u32,
    /// Rows per block (the last block may have fewer).
    pub rows_per_core: u32,
    /// Elements per unified-buffer chunk: N when a row fits, else fewer (two passes per row).
    pub chunk: u32,
    /// Rows whose statistics are loaded together (a multiple of 8).
    pub stat_rows: u32,
    /// 1 if gamma is given.
    pub has_gamma: u32,
    /// The element type ([`NormType`]).
    pub dtype: u32,
}

/// Rows per block below which each block's atomic adds of the two column sums (and its own copy
/// of gamma) would cost more than a few percent of its row traffic.
const COLUMN_SUM_ROWS: u64 = 40;

/// Unified-buffer bytes per chunk element of `layer_norm_backward`: input and output queues,
/// f32 xhat, g, scratch and gamma, the two f32 column sums, and a staging buffer for narrow
/// types.
fn backward_bytes_per_element(dtype: NormType) -> u64 {
    let staged = if dtype == NormType::F32 {
        0
    } else {
        dtype.bytes()
    };
    2 * dtype.bytes() + 4 * 4 + 2 * 4 + staged
}

/// Rows evenly over the vector cores (each block keeping at least `COLUMN_SUM_ROWS` rows, as
/// every block adds full-width column sums), and the largest chunk of a row the unified buffer
/// holds with every buffer of the kernel.
pub fn layer_norm_backward(
    rows: u64,
    cols: u64,
    dtype: NormType,
    has_gamma: bool,
    props: &DeviceProps,
) -> Plan<LayerNormBackwardTiling> {
    let rows_per_core = rows
        .div_ceil(props.vector_cores as u64)
        .max(COLUMN_SUM_ROWS.min(rows))
        .max(1);
    let block_dim = rows.div_ceil(rows_per_core).max(1);
    let stat_rows = rows_per_core.min(MAX_STAT_ROWS).div_ceil(8) * 8;
    // Statistics, the reduction result, and the 32-byte rounding of ten buffers.
    let fixed = 4 * stat_rows * 4 + 32 + UB_ALIGN * 10;
    let per_element = backward_bytes_per_element(dtype);
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
        tiling: LayerNormBackwardTiling {
            rows: rows as u32,
            cols: cols as u32,
            rows_per_core: rows_per_core as u32,
            chunk: chunk as u32,
            stat_rows: stat_rows as u32,
            has_gamma: has_gamma as u32,
            dtype: dtype as u32,
        },
    }
}

/// The unified-buffer bytes `layer_norm_backward`'s kernel allocates for a tiling.
pub fn layer_norm_backward_ub_bytes(t: &LayerNormBackwardTiling, dtype: NormType) -> u64 {
    let a = |b: u64| b.div_ceil(UB_ALIGN) * UB_ALIGN;
    let c = t.chunk as u64;
    let reduce = c.div_ceil(64).div_ceil(8) * 8 * 4;
    let staged = if dtype == NormType::F32 {
        0
    } else {
        a(c * dtype.bytes())
    };
    2 * a(c * dtype.bytes())
        + 4 * a(c * 4)
        + 2 * a(c * 4)
        + a(reduce)
        + 32
        + 4 * t.stat_rows as u64 * 4
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

fn align8(n: u64) -> u64 {
    n.div_ceil(8) * 8
}

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
    let a = |elems: u32| (elems as u64 * t.index_bytes as u64).div_ceil(UB_ALIGN) * UB_ALIGN;
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

/// Elements of a `bytes`-wide type rounded up to whole 32-byte blocks.
fn align_type(n: u64, bytes: u64) -> u64 {
    let per = UB_ALIGN / bytes;
    n.div_ceil(per) * per
}

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
    fn layer_norm_backward_covers_rows_and_fits_the_unified_buffer() {
        for dtype in [NormType::F32, NormType::F16, NormType::BF16] {
            for (m, n) in [
                (1, 1),
                (256, 128),
                (256, 1536),
                (33, 4096),
                (7, 8192),
                (3, 100_000),
                (4096, 64),
                (100_000, 16),
            ] {
                let p = layer_norm_backward(m, n, dtype, true, &DeviceProps::ATLAS_A2);
                let t = p.tiling;
                let covered: u64 = (0..p.block_dim as u64)
                    .map(|b| {
                        ((b + 1) * t.rows_per_core as u64).min(m)
                            - (b * t.rows_per_core as u64).min(m)
                    })
                    .sum();
                assert_eq!(covered, m, "{dtype:?} {m}x{n}");
                assert!(
                    layer_norm_backward_ub_bytes(&t, dtype)
                        <= DeviceProps::ATLAS_A2.ub_bytes as u64,
                    "{dtype:?} {m}x{n}: {t:?}"
                );
                assert!(
                    t.chunk as u64 == n
                        || (t.chunk as u64) < n
                            && (t.chunk as u64 * dtype.bytes()).is_multiple_of(UB_ALIGN)
                );
                assert!(t.stat_rows.is_multiple_of(8) && t.stat_rows as u64 <= MAX_STAT_ROWS);
                assert!(p.block_dim <= DeviceProps::ATLAS_A2.vector_cores);
            }
        }
    }

    #[test]
    fn layer_norm_backward_keeps_rows_resident_when_they_fit() {
        let p = layer_norm_backward(256, 4096, NormType::F32, true, &DeviceProps::ATLAS_A2);
        assert_eq!(p.tiling.chunk, 4096);
        // The seed width 8192 does not fit in f32: its rows go in chunks.
        let wide = layer_norm_backward(3, 8192, NormType::F32, true, &DeviceProps::ATLAS_A2);
        assert!(wide.tiling.chunk < 8192);
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
