//! Tiling of the row gathers (`moe_gather`, `token_rearrange`), `moe_scatter` (with the
//! inverse permutation it is given, `moe_scatter_inverse`) and the grouped router
//! `moe_group_topk`.

use super::{
    align8, even_split, reduce_tmp_bytes, ub_align, DeviceProps, NormType, Plan, UB_ALIGN,
};

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
    /// 1: also check that the indices are a permutation of `0..out_rows` (every block reads
    /// them all; [`crate::checks`]).
    pub validate: u32,
}

/// Most indices a gather block loads at once.
const MAX_IDX_CHUNK: u64 = 1024;

/// Bytes of the `seen` bit map a validating gather block keeps (`SeenWords` in
/// `kernels/row_gather.h`): a bit per row of the block, in whole 32-byte blocks.
fn seen_bytes(rows_per_core: u64) -> u64 {
    rows_per_core.div_ceil(32).div_ceil(8) * 8 * 4
}

/// Output rows evenly over the vector cores; rows move in two ping-pong buffers of the largest
/// chunk the unified buffer holds beside the index buffer (and, when validating, the bit map).
#[allow(clippy::too_many_arguments)]
pub fn row_gather(
    out_rows: u64,
    src_rows: u64,
    cols: u64,
    elem_bytes: u64,
    index_bytes: u64,
    divisor: u64,
    validate: bool,
    props: &DeviceProps,
) -> Plan<RowGatherTiling> {
    let (rows_per_core, block_dim) = even_split(out_rows, props);
    let idx_chunk = rows_per_core.min(MAX_IDX_CHUNK).div_ceil(8) * 8;
    let idx_bytes = ub_align(idx_chunk * index_bytes);
    let seen = if validate {
        seen_bytes(rows_per_core)
    } else {
        0
    };
    let align = UB_ALIGN / elem_bytes;
    let max_chunk = (props.ub_bytes as u64 - idx_bytes - seen) / (2 * elem_bytes) / align * align;
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
            validate: validate as u32,
        },
    }
}

/// Mirrors `MoeInverseTiling` in `kernels/moe_scatter_inverse.cpp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeInverseTiling {
    /// Entries of the permutation (T*K).
    pub slots: u32,
    /// Positions per block.
    pub per_core: u32,
    /// Positions loaded and staged at a time, a multiple of 8.
    pub idx_chunk: u32,
}

/// Most positions an inverse block stages at once (32 bytes each in the unified buffer).
const MAX_INVERSE_CHUNK: u64 = 1024;

/// Positions evenly over the vector cores; each block stages `idx_chunk` of them at a time.
pub fn moe_scatter_inverse(slots: u64, props: &DeviceProps) -> Plan<MoeInverseTiling> {
    let (per_core, block_dim) = even_split(slots, props);
    Plan {
        block_dim: block_dim as u32,
        tiling: MoeInverseTiling {
            slots: slots as u32,
            per_core: per_core as u32,
            idx_chunk: (per_core.min(MAX_INVERSE_CHUNK).div_ceil(8) * 8) as u32,
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
    let (tokens_per_core, block_dim) = even_split(tokens, props);
    let idx_tokens = tokens_per_core.min((MAX_IDX_CHUNK / top_k.max(1)).max(1));
    let slots = idx_tokens * top_k.max(1);
    let routing = [4, dtype.bytes(), 4]
        .iter()
        .map(|b| ub_align(slots * b))
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

/// Mirrors `BurnMoeGroupTopkTiling` in `kernels/moe_group_topk.cpp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoeGroupTopkTiling {
    /// Tokens (T).
    pub tokens: u32,
    /// Experts (E).
    pub experts: u32,
    /// Experts chosen per token.
    pub top_k: u32,
    /// Groups of experts (G, dividing E).
    pub groups: u32,
    /// Groups kept per token.
    pub keep_groups: u32,
    /// 1: a group scores the sum of its two best experts; 0: its best.
    pub group_top_two: u32,
    /// 1: sigmoid scores; 0: softmax.
    pub sigmoid: u32,
    /// 1: a selection bias `[E]` is given.
    pub has_bias: u32,
    /// 1: the weights are the chosen experts' unbiased scores; 0: their selection values.
    pub gather_scores: u32,
    /// 1: the weights are divided by their sum (+ 1e-20).
    pub renorm: u32,
    /// Factor on the weights.
    pub scale: f32,
    /// Tokens per block.
    pub rows_per_core: u32,
    /// E rounded up to whole 32-byte blocks of f32.
    pub row_elems: u32,
    /// G rounded up to whole 32-byte blocks of f32.
    pub group_elems: u32,
    /// top-k rounded up to whole 32-byte blocks of f32.
    pub top_k_elems: u32,
    /// The weights' type.
    pub weight_type: NormType,
}

/// How `moe_group_topk` chooses (the router's settings).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupTopkChoice {
    /// Experts chosen per token.
    pub top_k: u64,
    /// Groups of experts.
    pub groups: u64,
    /// Groups kept per token.
    pub keep_groups: u64,
    /// A group scores the sum of its two best experts (else its best).
    pub group_top_two: bool,
    /// Sigmoid scores (else softmax).
    pub sigmoid: bool,
    /// The weights are the chosen experts' unbiased scores (else their selection values).
    pub gather_scores: bool,
    /// The weights are divided by their sum.
    pub renorm: bool,
    /// Factor on the weights.
    pub scale: f32,
}

/// Tokens evenly over the vector cores; each block holds one token's row at a time.
pub fn moe_group_topk(
    tokens: u64,
    experts: u64,
    has_bias: bool,
    choice: &GroupTopkChoice,
    weight_type: NormType,
    props: &DeviceProps,
) -> Plan<MoeGroupTopkTiling> {
    let (rows_per_core, block_dim) = even_split(tokens, props);
    Plan {
        block_dim: block_dim as u32,
        tiling: MoeGroupTopkTiling {
            tokens: tokens as u32,
            experts: experts as u32,
            top_k: choice.top_k as u32,
            groups: choice.groups as u32,
            keep_groups: choice.keep_groups as u32,
            group_top_two: choice.group_top_two as u32,
            sigmoid: choice.sigmoid as u32,
            has_bias: has_bias as u32,
            gather_scores: choice.gather_scores as u32,
            renorm: choice.renorm as u32,
            scale: choice.scale,
            rows_per_core: rows_per_core as u32,
            row_elems: align8(experts) as u32,
            group_elems: align8(choice.groups) as u32,
            top_k_elems: align8(choice.top_k) as u32,
            weight_type,
        },
    }
}

/// The unified-buffer bytes `moe_group_topk`'s kernel allocates for a tiling (its `InitBuffer`s).
pub fn moe_group_topk_ub_bytes(t: &MoeGroupTopkTiling) -> u64 {
    let row = t.row_elems as u64 * 4;
    let rows = if t.has_bias == 1 { 4 } else { 3 };
    rows * row
        + reduce_tmp_bytes(t.experts as u64)
        + 32
        + ub_align(t.group_elems as u64 * 4)
        + 2 * ub_align(t.top_k_elems as u64 * 4)
        + ub_align(t.top_k_elems as u64 * t.weight_type.bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathers_cover_rows_and_fit_the_unified_buffer() {
        for (rows, cols, eb) in [
            (4096u64, 1536u64, 2u64),
            (1, 1, 4),
            (1024, 32, 4),
            (5, 100_000, 2),
            (100_000, 8, 2),
        ] {
            for validate in [false, true] {
                let p = row_gather(rows, rows, cols, eb, 4, 1, validate, &DeviceProps::ATLAS_A2);
                let t = p.tiling;
                assert!(
                    (p.block_dim as u64 - 1) * (t.rows_per_core as u64) < rows
                        && p.block_dim as u64 * t.rows_per_core as u64 >= rows
                );
                let idx = (t.idx_chunk as u64 * 4).div_ceil(32) * 32;
                let seen = if validate {
                    seen_bytes(t.rows_per_core as u64)
                } else {
                    0
                };
                assert!(!validate || seen * 8 >= t.rows_per_core as u64);
                assert_eq!(seen % UB_ALIGN, 0);
                assert!(
                    idx + seen + 2 * t.chunk as u64 * eb <= DeviceProps::ATLAS_A2.ub_bytes as u64,
                    "{t:?}"
                );
                assert_eq!(t.chunk as u64 * eb % UB_ALIGN, 0);
                assert_eq!(t.validate, validate as u32);
            }
            let inv = moe_scatter_inverse(rows * 4, &DeviceProps::ATLAS_A2);
            let t = inv.tiling;
            assert!(inv.block_dim as u64 * t.per_core as u64 >= rows * 4);
            assert!(t.idx_chunk.is_multiple_of(8) && t.idx_chunk >= 1);
            assert!(t.idx_chunk as u64 * (4 + 32) <= DeviceProps::ATLAS_A2.ub_bytes as u64);
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
    fn the_grouped_router_fits_the_unified_buffer_up_to_its_expert_limit() {
        for (tokens, experts, groups, top_k) in [
            (1u64, 256u64, 8u64, 8u64),
            (4096, 4096, 64, 64),
            (3, 6, 1, 6),
        ] {
            let choice = GroupTopkChoice {
                top_k,
                groups,
                keep_groups: groups.div_ceil(2),
                group_top_two: true,
                sigmoid: true,
                gather_scores: true,
                renorm: true,
                scale: 2.5,
            };
            let p = moe_group_topk(
                tokens,
                experts,
                true,
                &choice,
                NormType::BF16,
                &DeviceProps::ATLAS_A2,
            );
            let t = p.tiling;
            assert!(p.block_dim <= DeviceProps::ATLAS_A2.vector_cores, "{t:?}");
            assert!(
                p.block_dim as u64 * t.rows_per_core as u64 >= tokens,
                "{t:?}"
            );
            assert!(
                moe_group_topk_ub_bytes(&t) <= DeviceProps::ATLAS_A2.ub_bytes as u64,
                "{t:?}"
            );
            assert!(
                t.row_elems as u64 >= experts && t.row_elems.is_multiple_of(8),
                "{t:?}"
            );
        }
    }
}
