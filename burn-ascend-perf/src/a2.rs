//! The Atlas A2 (910B) figures of `/work/shared/ascend/hardware-atlas-a2.md` that the
//! device-time model uses, and the model. Core counts and the clock are the modelled device's
//! SoC's (read through the ACL seam: `aclrtGetSocName`); the rest is the same on every A2 SoC.
//! A model, not a measurement: the sources mark the bandwidth figures UNCERTAIN. Used by the
//! benchmarks and by the example's serving figures.

use std::sync::OnceLock;

use burn_ascend::emulator::kernel_runner::{clear_launch_log, launch_log, CoreKind, LaunchStats};
use burn_ascend::emulator::work_counters;
use burn_ascend::runtime::DeviceContext;
use burn_ascend::AscendDevice;
use burn_ascend_kernels::tiling::DeviceProps;

/// The figures the tiling's per-shape choices use too, where they do not depend on the SoC.
const A2: DeviceProps = DeviceProps::ATLAS_A2;
/// HBM bandwidth per die, bytes/s: the low end of the documents' 1.6-1.8 TB/s estimate.
pub const HBM_BYTES_PER_S: f64 = A2.hbm_bytes_per_s as f64;
/// Vector repeats (256 bytes each) one AIV issues per cycle (see [`DeviceProps::ATLAS_A2`]).
pub const VECTOR_REPEATS_PER_CYCLE: f64 = A2.vector_repeats_per_cycle as f64;
/// Fixed cost of one kernel launch, seconds (ASSUMED, see [`DeviceProps::ATLAS_A2`]).
pub const LAUNCH_LATENCY_S: f64 = A2.launch_latency_ns as f64 * 1e-9;

/// The modelled device's properties: those of the SoC the default device names (the emulated
/// NPU is an Ascend910B2 unless `BURN_ASCEND_EMU_SOC` says otherwise), read once. Panics when
/// the device does not open or its SoC is not an Atlas A2/A3 one the model has figures for.
pub fn props() -> DeviceProps {
    static PROPS: OnceLock<DeviceProps> = OnceLock::new();
    *PROPS.get_or_init(|| {
        let ctx = DeviceContext::get(&AscendDevice::default().into())
            .unwrap_or_else(|e| panic!("the device model reads the default device's SoC: {e}"));
        let soc = ctx.soc_name().unwrap_or_default();
        DeviceProps::for_soc(soc)
            .unwrap_or_else(|| panic!("the device model has no figures for the SoC {soc:?}"))
    })
}

/// Vector cores (AIV) of the modelled SoC.
pub fn vector_cores() -> u32 {
    props().vector_cores
}

/// Cube cores (AIC) of the modelled SoC.
pub fn cube_cores() -> u32 {
    props().cube_cores
}

/// The modelled SoC's AI Core clock, Hz.
pub fn clock_hz() -> f64 {
    props().clock_hz as f64
}

/// The cube unit's peak in half/bf16, FLOPs/s: one 16x16x16 product (8192 FLOPs) per cube
/// core per cycle (hardware-atlas-a2.md §4.1; bf16 at the f16 rate is UNCERTAIN there).
pub fn cube_flops_per_s() -> f64 {
    cube_cores() as f64 * 8192.0 * clock_hz()
}

/// One AIV's GM rate: the platform ini's `ddr_rate = 32` bytes/cycle at the SoC's clock.
pub fn core_bytes_per_s() -> f64 {
    props().core_gm_bytes_per_s()
}

/// One HCCS link between two NPUs, bytes/s per direction. ASSUMED: the fact sheets give no
/// HCCS bandwidth; this is the commonly quoted third-party figure for an 8-NPU Atlas 800T A2
/// server (a full mesh of 7 links per 910B, 392 GB/s per NPU), UNCERTAIN.
pub const HCCS_LINK_BYTES_PER_S: f64 = 56e9;
/// Scalar cycles charged per value a device-side check tests: a compare and a branch.
/// ASSUMED (no scalar timing in the fact sheets); used only for an upper bound.
pub const SCALAR_CYCLES_PER_CHECK: f64 = 2.0;

/// Which term of the roofline bounds a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Bound {
    /// All bytes at peak HBM bandwidth.
    #[default]
    Hbm,
    /// The busiest core's bytes at one core's GM rate.
    CoreGm,
    /// The busiest core's vector repeats.
    Vector,
    /// The busiest cube core's matrix cycles.
    Cube,
}

impl Bound {
    /// The bound's name in the benches' tables.
    pub fn name(self) -> &'static str {
        match self {
            Bound::Hbm => "HBM bandwidth",
            Bound::CoreGm => "one core's GM rate",
            Bound::Vector => "vector unit",
            Bound::Cube => "cube unit",
        }
    }
}

/// The modelled device time of one launch, its terms and its bandwidth limit.
#[derive(Debug, Clone, Copy, Default)]
pub struct Model {
    /// Seconds: the largest term plus the launch latency.
    pub modelled: f64,
    /// Seconds: the largest term (the roofline, without latency).
    pub roofline: f64,
    /// Seconds: all bytes at peak HBM bandwidth (also the HBM term).
    pub limit: f64,
    /// Seconds: the busiest core's bytes at its own GM rate.
    pub core_gm: f64,
    /// Seconds: the busiest core's vector repeats at one per cycle.
    pub vector: f64,
    /// Seconds: the busiest cube core's cycles (16x16x16 half MACs, a quarter of that in f32).
    pub cube: f64,
    /// The largest term.
    pub bound: Bound,
}

/// The busiest core's share of a per-block counter: blocks are dealt to the `cores` cores
/// round-robin (blocks beyond the core count run in waves on the same cores).
fn busiest(per_block: &[u64], cores: u32) -> u64 {
    let mut per_core = vec![0u64; cores as usize];
    for (i, b) in per_block.iter().enumerate() {
        per_core[i % cores as usize] += b;
    }
    per_core.into_iter().max().unwrap_or(0)
}

/// Models one launch from its emulation counters: max(bytes / HBM bandwidth, busiest core's
/// bytes / core GM rate, busiest core's vector cycles, busiest cube core's cycles) + launch
/// latency. A cube kernel's blocks are dealt to the cube cores, a vector kernel's to the vector
/// cores.
pub fn model(s: &LaunchStats) -> Model {
    let cores = match s.cores {
        CoreKind::Cube => cube_cores(),
        CoreKind::Vector => vector_cores(),
    };
    let total = (s.gm_bytes_read + s.gm_bytes_written) as f64;
    let limit = total / HBM_BYTES_PER_S;
    let core_gm = busiest(&s.per_block_gm_bytes, cores) as f64 / core_bytes_per_s();
    let vector =
        busiest(&s.per_block_vector_repeats, cores) as f64 / VECTOR_REPEATS_PER_CYCLE / clock_hz();
    let cube = busiest(&s.per_block_cube_cycles, cores) as f64 / clock_hz();
    let (roofline, bound) = [
        (limit, Bound::Hbm),
        (core_gm, Bound::CoreGm),
        (vector, Bound::Vector),
        (cube, Bound::Cube),
    ]
    .into_iter()
    .fold((0.0, Bound::Hbm), |a, b| if b.0 > a.0 { b } else { a });
    Model {
        modelled: roofline + LAUNCH_LATENCY_S,
        roofline,
        limit,
        core_gm,
        vector,
        cube,
        bound,
    }
}

/// Per-core balance: busiest block's bytes over the mean block's (1.00 is perfect).
pub fn balance(s: &LaunchStats) -> f64 {
    let b = &s.per_block_gm_bytes;
    let max = b.iter().copied().max().unwrap_or(0) as f64;
    let mean = b.iter().sum::<u64>() as f64 / b.len().max(1) as f64;
    if mean > 0.0 {
        max / mean
    } else {
        1.0
    }
}

/// The modelled time of the work the emulated devices of this process run, lap by lap: each
/// Ascend C kernel launch by [`model`], each aclnn operator at its modelled bytes (each tensor
/// argument once, see `work_counters`) over peak HBM bandwidth (an aclnn operator's latency and
/// compute are not modelled). It empties the kernel launch log at each lap, so one clock at a time.
#[derive(Debug)]
pub struct ModelledClock {
    aclnn_bytes: u64,
}

impl ModelledClock {
    /// Starts counting from now.
    pub fn start() -> Self {
        clear_launch_log();
        Self {
            aclnn_bytes: work_counters().aclnn_bytes,
        }
    }

    /// Modelled seconds of the work that completed since the last lap (or the start); call it
    /// once the device has run that work.
    pub fn lap(&mut self) -> f64 {
        let kernels: f64 = launch_log().iter().map(|s| model(s).modelled).sum();
        clear_launch_log();
        let bytes = work_counters().aclnn_bytes;
        let aclnn = (bytes - self.aclnn_bytes) as f64 / HBM_BYTES_PER_S;
        self.aclnn_bytes = bytes;
        kernels + aclnn
    }
}
