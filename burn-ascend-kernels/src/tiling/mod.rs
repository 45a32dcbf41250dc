//! Tiling: how each kernel splits its work over the vector cores (blocks) and the unified
//! buffer (tiles), as pure functions of the shapes and the device's properties. Tiling never
//! depends on values held in device tensors, so a launch never waits for the host.
//!
//! The structs mirror the kernels' tiling structs field for field (`#[repr(C)]`, fixed-width
//! fields), because the launch passes them by value to the kernel.

/// The device properties tiling depends on: sizes, and the rates of the device model that
/// per-shape choices are made from (the benches model device time with the same figures).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceProps {
    /// Vector cores (AIV) a vector kernel can use in parallel.
    pub vector_cores: u32,
    /// Unified buffer per vector core, bytes.
    pub ub_bytes: u32,
    /// HBM bandwidth of the die, bytes/s.
    pub hbm_bytes_per_s: u64,
    /// The AI Core clock, Hz.
    pub clock_hz: u64,
    /// One vector core's global-memory rate, bytes per cycle.
    pub core_gm_bytes_per_cycle: u64,
    /// Cube cores (AIC) a cube kernel can use in parallel.
    pub cube_cores: u32,
    /// Vector repeats (256 bytes each) one vector core issues per cycle.
    pub vector_repeats_per_cycle: u64,
    /// Fixed cost of one kernel launch, nanoseconds.
    pub launch_latency_ns: u64,
}

impl DeviceProps {
    /// Atlas A2 Ascend910B2 (its entry of [`SOCS`]; the emulated NPU by default): 48 vector cores, 192 KiB unified buffer each
    /// (`hardware-atlas-a2.md` §2-3); 1.6 TB/s of HBM bandwidth (the low end of the sheet's
    /// UNCERTAIN 1.6-1.8 TB/s), a 1.8 GHz clock (910B2's `cube_freq`) and 32 B/cycle per core
    /// (the platform ini's `ddr_rate`, units UNCERTAIN, taken for cube cores too); 24 cube cores,
    /// each a 16x16x16 half MAC per cycle (§4.1; the emulation counts cube cycles so); one
    /// vector repeat per cycle (§4.2 "256 B per cycle"; a Huawei example implies about two, so
    /// one is the stricter choice, UNCERTAIN); 3 µs per launch (ASSUMED: the sheets give none).
    pub const ATLAS_A2: Self = Self {
        vector_cores: 48,
        ub_bytes: 192 << 10,
        hbm_bytes_per_s: 1_600_000_000_000,
        clock_hz: 1_800_000_000,
        core_gm_bytes_per_cycle: 32,
        cube_cores: 24,
        vector_repeats_per_cycle: 1,
        launch_latency_ns: 3_000,
    };

    /// The properties of the SoC `aclrtGetSocName` names: its cube (AI) and vector core counts
    /// and its cube clock from [`SOCS`], everything else as [`Self::ATLAS_A2`] (the per-core
    /// memories are the same on every SoC of the table, `hardware-atlas-a2.md` §3; the sheets give
    /// no per-SoC bandwidth, so the A2 figure, UNCERTAIN for the 32 GiB parts). `None` for a SoC
    /// the table does not have.
    pub fn for_soc(name: &str) -> Option<Self> {
        SOCS.iter().find(|s| s.name == name).map(|s| Self {
            cube_cores: s.cube_cores,
            vector_cores: s.vector_cores,
            clock_hz: s.clock_mhz * 1_000_000,
            ..Self::ATLAS_A2
        })
    }

    /// One vector core's global-memory rate, bytes/s.
    pub fn core_gm_bytes_per_s(&self) -> f64 {
        (self.core_gm_bytes_per_cycle * self.clock_hz) as f64
    }

    /// Modelled seconds of a launch moving `total` GM bytes whose busiest core moves `busiest`:
    /// the slower of the chip at HBM bandwidth and that core at its own GM rate.
    pub fn gm_seconds(&self, total: u64, busiest: u64) -> f64 {
        (total as f64 / self.hbm_bytes_per_s as f64)
            .max(busiest as f64 / self.core_gm_bytes_per_s())
    }
}

/// One SoC's figures of the platform description (`hardware-atlas-a2.md` §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocFigures {
    /// The name `aclrtGetSocName` gives (the ini's SoC_version).
    pub name: &'static str,
    /// AI cores, one cube core (AIC) each.
    pub cube_cores: u32,
    /// Vector cores (AIV), two per AI core.
    pub vector_cores: u32,
    /// `cube_freq`, MHz.
    pub clock_mhz: u64,
}

/// The Atlas A2 (910B) and A3 (910C, one die per device) SoCs the kernels are built for
/// (`hardware-atlas-a2.md` §2, values as in the platform ini files).
pub const SOCS: &[SocFigures] = &[
    soc("Ascend910B1", 24, 1850),
    soc("Ascend910B2", 24, 1800),
    soc("Ascend910B2C", 24, 1800),
    soc("Ascend910B3", 20, 1800),
    soc("Ascend910B4", 20, 1500),
    soc("Ascend910B4-1", 20, 1500),
    soc("Ascend910_9391", 24, 1850),
    soc("Ascend910_9392", 24, 1850),
    soc("Ascend910_9381", 24, 1800),
    soc("Ascend910_9382", 24, 1800),
    soc("Ascend910_9372", 20, 1800),
    soc("Ascend910_9362", 20, 1500),
];

const fn soc(name: &'static str, cube_cores: u32, clock_mhz: u64) -> SocFigures {
    SocFigures {
        name,
        cube_cores,
        vector_cores: 2 * cube_cores,
        clock_mhz,
    }
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

/// `bytes` rounded up to whole 32-byte blocks (the UB allocation granule).
pub(crate) fn ub_align(bytes: u64) -> u64 {
    bytes.div_ceil(UB_ALIGN) * UB_ALIGN
}

/// Bytes of ReduceSum's shared f32 buffer for `count` elements, as the kernels size it
/// (`ReduceTmpElems` in `kernels/kernel_common.h`): one partial per 256-byte repeat, rounded
/// up to a 32-byte block.
pub(crate) fn reduce_tmp_bytes(count: u64) -> u64 {
    align8(count.div_ceil(64)) * 4
}

/// `rows` split evenly over the vector cores: `(rows per block, blocks)`, at least one of each.
pub(crate) fn even_split(rows: u64, props: &DeviceProps) -> (u64, u64) {
    let per_block = rows.div_ceil(props.vector_cores as u64).max(1);
    (per_block, rows.div_ceil(per_block).max(1))
}

/// `n` rounded up to a multiple of 8 (elements of 32-byte blocks of f32/i32).
pub(crate) fn align8(n: u64) -> u64 {
    n.div_ceil(8) * 8
}

/// Elements of a `bytes`-wide type rounded up to whole 32-byte blocks.
pub(crate) fn align_type(n: u64, bytes: u64) -> u64 {
    let per = UB_ALIGN / bytes;
    n.div_ceil(per) * per
}

mod elementwise;
mod extend;
mod norm;
mod paged;
mod program;
mod routing;

pub use elementwise::*;
pub use extend::*;
pub use norm::*;
pub use paged::*;
pub use program::*;
pub use routing::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn props_follow_the_soc() {
        // The 910B3 and 910B4 have 20 AI cores (40 vector cores), the 910B4 a 1.5 GHz clock.
        let b3 = DeviceProps::for_soc("Ascend910B3").expect("in the table");
        assert_eq!(
            (b3.cube_cores, b3.vector_cores, b3.clock_hz),
            (20, 40, 1_800_000_000)
        );
        let b4 = DeviceProps::for_soc("Ascend910B4").expect("in the table");
        assert_eq!(
            (b4.cube_cores, b4.vector_cores, b4.clock_hz),
            (20, 40, 1_500_000_000)
        );
        let b1 = DeviceProps::for_soc("Ascend910B1").expect("in the table");
        assert_eq!((b1.cube_cores, b1.clock_hz), (24, 1_850_000_000));
        assert_eq!(b4.ub_bytes, DeviceProps::ATLAS_A2.ub_bytes);
        // ATLAS_A2 is the 910B2's entry.
        assert_eq!(
            DeviceProps::for_soc("Ascend910B2"),
            Some(DeviceProps::ATLAS_A2)
        );
        assert_eq!(DeviceProps::for_soc("Ascend310P3"), None);
    }
}
