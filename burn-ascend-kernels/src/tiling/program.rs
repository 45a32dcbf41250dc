//! Tiling of `elementwise_program`: tiles of whole rows (or of a row's columns when a row does
//! not fit), sized from the unified-buffer budget and the program's register count.

use super::{ub_align, DeviceProps, Plan, UB_ALIGN};
use crate::program::{Compiled, Grid, InputMode, MAX_RANK};

/// Mirrors `ElementwiseTiling` in `kernels/elementwise_program.cpp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElementwiseTiling {
    /// Rows of the grid.
    pub rows: u64,
    /// Tiles in the grid.
    pub units: u64,
    /// Outer dims, outermost first (`outer_rank` of them).
    pub outer: [u64; MAX_RANK],
    /// Outer dims used.
    pub outer_rank: u32,
    /// Elements per row.
    pub cols: u32,
    /// Columns per tile.
    pub chunk: u32,
    /// Unified-buffer row pitch, elements (`chunk` rounded up to 32).
    pub pitch: u32,
    /// Rows per tile.
    pub tile_rows: u32,
    /// Tiles across a row.
    pub col_chunks: u32,
    /// Tiles per block.
    pub units_per_block: u32,
    /// f32 elements per register.
    pub reg_elems: u32,
    /// Registers.
    pub regs: u32,
    /// Inputs.
    pub inputs: u32,
    /// Outputs.
    pub outputs: u32,
    /// Instructions.
    pub code: u32,
    /// Words of the program buffer.
    pub program_words: u32,
    /// 1 when the code compares or selects.
    pub needs_mask: u32,
}

/// Unified buffer that `Select` in tensor-scalar and tensor-tensor modes keeps for itself
/// (the top 8 KiB).
const SELECT_SCRATCH: u64 = 8 << 10;

/// Most rows one DataCopyPad moves (`blockCount` limit).
const MAX_TILE_ROWS: u64 = 4095;

/// Compare works on whole 256-byte repeats: registers hold a multiple of 64 f32.
const REG_GRAIN: u64 = 64;

/// Row pitch granule: 32 elements start every row 32-byte aligned in every element type.
const PITCH_GRAIN: u64 = UB_ALIGN;

fn round_up(n: u64, to: u64) -> u64 {
    n.div_ceil(to) * to
}

/// Plans a launch of `program` over `grid`, or `None` when even the smallest tile does not fit
/// the unified buffer.
pub fn elementwise_program(
    program: &Compiled,
    grid: &Grid,
    props: &DeviceProps,
) -> Option<Plan<ElementwiseTiling>> {
    let budget = props.ub_bytes as u64
        - if program.uses_mask() {
            SELECT_SCRATCH
        } else {
            0
        };
    let words = program.words() as u64;
    let avail = budget.checked_sub(ub_align(words * 4))?;
    let broadcast_rows = grid
        .inputs
        .iter()
        .filter(|p| p.0 == InputMode::RowBroadcast)
        .count() as u64;
    // Bytes of the unified buffer a tile of `elems` register elements and rows of `pitch` take:
    // registers, staging, (mask bits, ones), broadcast rows.
    let footprint = |elems: u64, pitch: u64| {
        let per = program.regs() as u64 * 4 + 4 + if program.uses_mask() { 4 } else { 0 };
        let mask = if program.uses_mask() {
            ub_align(elems / 8)
        } else {
            0
        };
        per * elems + mask + broadcast_rows * pitch * 4
    };
    let cores = props.vector_cores as u64;
    let rows = grid.rows();
    let cols = grid.cols;
    let whole = round_up(cols, PITCH_GRAIN);
    let (chunk, pitch, tile_rows) = if footprint(round_up(whole, REG_GRAIN), whole) <= avail {
        let fit = (1..=MAX_TILE_ROWS.min(rows))
            .rev()
            .find(|&k| footprint(round_up(k * whole, REG_GRAIN), whole) <= avail)
            .unwrap_or(1);
        // Spread the rows over the cores before making tiles taller.
        let k = fit.min(rows.div_ceil(cores)).max(1);
        if rows < cores && cols > REG_GRAIN {
            // Few rows: split them across the cores by columns as well.
            let split = cols.div_ceil(cores.div_ceil(rows));
            let chunk = round_up(split, REG_GRAIN).min(cols);
            (chunk, round_up(chunk, PITCH_GRAIN), 1)
        } else {
            (cols, whole, k)
        }
    } else {
        let mut chunk = avail / (program.regs() as u64 * 4 + 12 + broadcast_rows * 4);
        chunk = chunk / REG_GRAIN * REG_GRAIN;
        while chunk > 0 && footprint(chunk, chunk) > avail {
            chunk -= REG_GRAIN;
        }
        if chunk == 0 {
            return None;
        }
        // Even out the chunks so the tiles make whole rounds over the cores.
        let rounds = (rows * cols.div_ceil(chunk)).div_ceil(cores);
        let per_row = (rounds * cores).div_ceil(rows);
        let chunk = round_up(cols.div_ceil(per_row), REG_GRAIN).min(chunk);
        (chunk, chunk, 1)
    };
    let col_chunks = cols.div_ceil(chunk);
    let units = rows.div_ceil(tile_rows) * col_chunks;
    let per_block = units.div_ceil(cores).max(1);
    let mut outer = [0u64; MAX_RANK];
    outer[..grid.outer.len()].copy_from_slice(&grid.outer);
    Some(Plan {
        block_dim: units.div_ceil(per_block).max(1) as u32,
        tiling: ElementwiseTiling {
            rows,
            units,
            outer,
            outer_rank: grid.outer.len() as u32,
            cols: cols as u32,
            chunk: chunk as u32,
            pitch: pitch as u32,
            tile_rows: tile_rows as u32,
            col_chunks: col_chunks as u32,
            units_per_block: per_block as u32,
            reg_elems: round_up(tile_rows * pitch, REG_GRAIN) as u32,
            regs: program.regs(),
            inputs: program.num_inputs() as u32,
            outputs: program.num_outputs() as u32,
            code: program.len() as u32,
            program_words: words as u32,
            needs_mask: program.uses_mask() as u32,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::{ElemType, Op, Program};

    fn program(regs_wanted: usize, mask: bool) -> Compiled {
        let mut p = Program::new();
        let x = p.input(ElemType::F32);
        let vals: Vec<_> = (0..regs_wanted)
            .map(|i| p.push(Op::AddS(x, i as f32)))
            .collect();
        let mut acc = vals[0];
        for v in &vals[1..] {
            acc = p.push(Op::Add(acc, *v));
        }
        if mask {
            acc = p.push(Op::CmpS(acc, crate::program::Cmp::Gt, 0.0));
        }
        p.output(acc, ElemType::F32);
        p.compile().unwrap()
    }

    fn grid(outer: Vec<u64>, cols: u64, modes: &[InputMode]) -> Grid {
        Grid {
            inputs: modes
                .iter()
                .map(|&m| (m, 0, vec![0; outer.len()]))
                .collect(),
            outer,
            cols,
        }
    }

    fn ub_used(p: &Compiled, t: &ElementwiseTiling, broadcast_rows: u64) -> u64 {
        let n = t.reg_elems as u64;
        ub_align(p.words() as u64 * 4)
            + p.regs() as u64 * n * 4
            + n * 4
            + if p.uses_mask() {
                ub_align(n / 8) + n * 4
            } else {
                0
            }
            + broadcast_rows * t.pitch as u64 * 4
    }

    #[test]
    fn tiles_fit_the_unified_buffer_and_cover_the_grid() {
        let a2 = DeviceProps::ATLAS_A2;
        for regs in [1, 4, 12, 20] {
            for mask in [false, true] {
                let p = program(regs, mask);
                for (outer, cols) in [
                    (vec![], 1),
                    (vec![], 100_000),
                    (vec![4096], 4096),
                    (vec![3, 7], 50_000),
                    (vec![10_000], 16),
                ] {
                    let g = grid(
                        outer.clone(),
                        cols,
                        &[InputMode::Dense, InputMode::RowBroadcast],
                    );
                    let plan = elementwise_program(&p, &g, &a2).unwrap();
                    let t = plan.tiling;
                    let limit = a2.ub_bytes as u64 - if mask { SELECT_SCRATCH } else { 0 };
                    assert!(
                        ub_used(&p, &t, 1) <= limit,
                        "{regs} regs {outer:?}x{cols}: {t:?}"
                    );
                    assert!(t.pitch.is_multiple_of(32) && t.reg_elems.is_multiple_of(64));
                    assert!(t.reg_elems >= t.tile_rows * t.pitch);
                    assert!(t.chunk as u64 * t.col_chunks as u64 >= cols);
                    assert!(t.units_per_block as u64 * plan.block_dim as u64 >= t.units);
                    assert!(plan.block_dim <= a2.vector_cores);
                    assert!(t.tile_rows as u64 * (t.units / t.col_chunks as u64) >= g.rows());
                }
            }
        }
    }

    #[test]
    fn a_large_dense_tensor_uses_every_core() {
        let p = program(3, false);
        let plan = elementwise_program(
            &p,
            &grid(vec![], 1 << 20, &[InputMode::Dense]),
            &DeviceProps::ATLAS_A2,
        )
        .unwrap();
        assert_eq!(plan.block_dim, 48);
    }
}
