//! Tiling of `layer_norm` and `layer_norm_backward`.

use super::{reduce_tmp_bytes, ub_align, DeviceProps, NormType, Plan, UB_ALIGN};

/// `n` rounded up to a multiple of `a`.
fn align_up(n: u64, a: u64) -> u64 {
    n.div_ceil(a) * a
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
    /// Elements per unified-buffer chunk: N when a row fits whole with every buffer at N.
    pub chunk: u32,
    /// 1: a row (widened to f32) and gamma/beta stay in the unified buffer, so x is read once;
    /// 0: rows wider than that make three passes over GM in chunks.
    pub row_resident: u32,
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

/// Most rows whose statistics a block buffers before storing them.
const MAX_STAT_ROWS: u64 = 256;
/// Smallest chunk worth keeping a row resident for (elements): below it the per-chunk
/// instructions dominate, and the chunked mode is used.
const MIN_RESIDENT_CHUNK: u64 = 256;

/// Rows per block for `rows` rows of `row_bytes` GM bytes each, when every block also moves
/// `per_block_bytes` of its own (its copy of gamma/beta, its column sums): of the splits the
/// device model ([`DeviceProps::gm_seconds`]) times within 1 % of the fastest, the one with the
/// most blocks. More blocks use more cores' GM rate but repeat the per-block bytes: at 256 rows
/// of 128 f32 with gamma and beta this picks 29 blocks of 9 rows (11 % more traffic than the
/// minimum, 4x the cores of the 40-row blocks a fixed traffic bound kept).
fn rows_per_block(rows: u64, row_bytes: u64, per_block_bytes: u64, props: &DeviceProps) -> u64 {
    let rows = rows.max(1);
    let busiest = |per: u64| per * row_bytes + per_block_bytes;
    let time = |per: u64| {
        props.gm_seconds(
            rows * row_bytes + rows.div_ceil(per) * per_block_bytes,
            busiest(per),
        )
    };
    let fewest = rows.div_ceil(props.vector_cores as u64);
    // The busiest core's term grows with the rows per block: past the best time, no larger split
    // can win, so the scan stops there.
    let core_alone = |per: u64| props.gm_seconds(0, busiest(per));
    let mut best = f64::INFINITY;
    for per in fewest..=rows {
        if core_alone(per) > best {
            break;
        }
        best = best.min(time(per));
    }
    // Within 1 % of the best, the most blocks: the model's differences there are a few per-block
    // copies, while shorter blocks keep the column sums' accumulation chains short.
    (fewest..=rows)
        .find(|&per| time(per) <= best * 1.01)
        .unwrap_or(rows)
}

/// Rows over the vector cores as the device model prefers (see `rows_per_block`), and how rows
/// meet the unified buffer: whole with every buffer at N; else resident (the f32 row and
/// gamma/beta at N, the queues and scratch at the largest chunk that fits beside them), so x
/// is read once; else chunked (three passes over GM).
pub fn layer_norm(
    rows: u64,
    cols: u64,
    dtype: NormType,
    has_gamma: bool,
    has_beta: bool,
    eps: f32,
    props: &DeviceProps,
) -> Plan<LayerNormTiling> {
    let affine_bytes = (has_gamma as u64 + has_beta as u64) * cols * dtype.bytes();
    let rows_per_core = rows_per_block(rows, cols * dtype.bytes() * 2 + 8, affine_bytes, props);
    let block_dim = rows.div_ceil(rows_per_core).max(1);
    let stat_rows = rows_per_core.min(MAX_STAT_ROWS).div_ceil(8) * 8;
    let fixed = 2 * stat_rows * 4 + 32 + UB_ALIGN * 8;
    let per_element = dtype.ub_bytes_per_element();
    let ub = props.ub_bytes as u64;
    // ReduceSum's shared buffer needs one f32 per 64 elements, a small share of each element.
    let chunk_for = |room: u64, per: u64| room * 64 / (64 * per + 4);
    let align = UB_ALIGN / 2;
    // Resident: the f32 row and f32 gamma/beta (12 bytes per column) stay; the rest per chunk.
    let resident_room = ub.saturating_sub(fixed + 12 * align_up(cols, 8));
    let resident_chunk = chunk_for(resident_room, per_element - 12) / align * align;
    let (chunk, row_resident) = if cols <= chunk_for(ub.saturating_sub(fixed), per_element) {
        (cols, true)
    } else if resident_chunk >= MIN_RESIDENT_CHUNK {
        (resident_chunk.min(cols), true)
    } else {
        (
            chunk_for(ub.saturating_sub(fixed), per_element) / align * align,
            false,
        )
    };
    Plan {
        block_dim: block_dim as u32,
        tiling: LayerNormTiling {
            rows: rows as u32,
            cols: cols as u32,
            rows_per_core: rows_per_core as u32,
            chunk: chunk as u32,
            row_resident: row_resident as u32,
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
    let c = t.chunk as u64;
    let held = if t.row_resident != 0 {
        t.cols as u64
    } else {
        c
    };
    let reduce = reduce_tmp_bytes(c);
    let staged = if dtype == NormType::F32 {
        0
    } else {
        ub_align(c * dtype.bytes())
    };
    2 * ub_align(c * dtype.bytes())
        + ub_align(held * 4)
        + ub_align(c * 4)
        + 2 * ub_align(held * 4)
        + reduce
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

/// Rows over the vector cores as the device model prefers (see `rows_per_block`: every block
/// adds full-width f32 column sums and reads its own gamma), and the largest chunk of a row the
/// unified buffer holds with every buffer of the kernel.
pub fn layer_norm_backward(
    rows: u64,
    cols: u64,
    dtype: NormType,
    has_gamma: bool,
    props: &DeviceProps,
) -> Plan<LayerNormBackwardTiling> {
    let per_block = 2 * cols * 4 + has_gamma as u64 * cols * dtype.bytes();
    let rows_per_core = rows_per_block(rows, 3 * cols * dtype.bytes() + 8, per_block, props);
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
    let c = t.chunk as u64;
    let reduce = reduce_tmp_bytes(c);
    let staged = if dtype == NormType::F32 {
        0
    } else {
        ub_align(c * dtype.bytes())
    };
    2 * ub_align(c * dtype.bytes())
        + 4 * ub_align(c * 4)
        + 2 * ub_align(c * 4)
        + reduce
        + 32
        + 4 * t.stat_rows as u64 * 4
        + staged
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn layer_norm_keeps_an_8192_row_resident_and_fills_the_cores_by_the_model() {
        // bf16 fits whole with every buffer at N; f32 keeps the row and gamma/beta in chunks.
        for dtype in [NormType::F32, NormType::BF16] {
            let p = layer_norm(256, 8192, dtype, true, true, 1e-6, &DeviceProps::ATLAS_A2);
            assert_eq!(p.tiling.row_resident, 1, "{dtype:?}");
            assert_eq!(
                p.tiling.chunk < 8192,
                dtype == NormType::F32,
                "{:?}",
                p.tiling
            );
        }
        // 256 short rows: more blocks than 40-row ones, and the model's time is no worse than
        // one block per core or 40-row blocks.
        let props = DeviceProps::ATLAS_A2;
        let p = layer_norm(256, 128, NormType::F32, true, true, 1e-6, &props);
        assert!(p.block_dim >= 24, "{p:?}");
        let time = |per: u64| {
            let blocks = 256u64.div_ceil(per);
            props.gm_seconds(256 * 1032 + blocks * 1024, per * 1032 + 1024)
        };
        let chosen = time(p.tiling.rows_per_core as u64);
        assert!(chosen <= time(6) && chosen <= time(40), "{p:?}");
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
}
