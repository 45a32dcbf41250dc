//! Tiling of `vector_add`.

use super::{DeviceProps, Plan, DOUBLE_BUFFER, UB_ALIGN};

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
