//! Tiling of `layer_norm` and `layer_norm_backward`.

use super::{reduce_tmp_bytes, ub_align, DeviceProps, NormType, Plan, UB_ALIGN};

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
    let c = t.chunk as u64;
    let reduce = reduce_tmp_bytes(c);
    let staged = if dtype == NormType::F32 {
        0
    } else {
        ub_align(c * dtype.bytes())
    };
    2 * ub_align(c * dtype.bytes())
        + 2 * ub_align(c * 4)
        + 2 * ub_align(c * 4)
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
