//! The conformance suite of `tests/conformance.rs` on `Fusion<Ascend>`: the same op tables,
//! edge values, large tensors, random ops and properties, with every op recorded by
//! burn-fusion and executed lazily on the emulated NPU, against burn-flex.

#[path = "common/mod.rs"]
mod harness;

/// The shared harness with `Fusion<Ascend>` as the backend under test.
mod common {
    pub use super::harness::*;

    /// The backend under test (shadows the harness's `Ascend`).
    pub type Ascend = burn_fusion::Fusion<burn_ascend::Ascend>;

    // burn-fusion 0.21 does not record these ops: `Fusion<B>` runs Burn's default
    // compositions of them, which differ from burn-flex's native ops whatever `B` is. Each
    // entry must keep failing against the reference; when burn-fusion changes, it leaves.
    const DEFAULT_COMPOSITION: &str = "burn-fusion 0.21 runs Burn's default composition";
    const NO_BOOL_SCALARS: &str = "burn-fusion 0.21 has no bool scalars";

    /// Different values from the reference.
    const VALUES: &str = "the reference gives";
    /// Burn's default composition returns its indices as I64, burn-flex as the input's type.
    const INDEX_DTYPE: &str = ": dtype";
    /// burn-fusion's call fails (its own error, reported on its worker thread).
    const FUSION_CALL: &str = "CallError";

    /// Where `Fusion<Ascend>` differs from burn-flex because of burn-fusion itself.
    pub const KNOWN_DEVIATIONS: &[Deviation] = &[
        ("float_edge_sign", DEFAULT_COMPOSITION, VALUES),
        ("activation_gelu_backward", DEFAULT_COMPOSITION, VALUES),
        ("activation_hard_sigmoid", DEFAULT_COMPOSITION, VALUES),
        ("int_argsort", DEFAULT_COMPOSITION, INDEX_DTYPE),
        ("int_sort_with_indices", DEFAULT_COMPOSITION, INDEX_DTYPE),
        ("bool_equal_elem", NO_BOOL_SCALARS, FUSION_CALL),
        ("bool_not_equal_elem", NO_BOOL_SCALARS, FUSION_CALL),
        ("bool_mask_fill", NO_BOOL_SCALARS, FUSION_CALL),
    ];
}

#[path = "conformance/activation.rs"]
mod activation;
#[path = "conformance/bool.rs"]
mod bool;
#[path = "conformance/edge.rs"]
mod edge;
#[path = "conformance/float.rs"]
mod float;
#[path = "conformance/int.rs"]
mod int;
#[path = "conformance/large.rs"]
mod large;
#[path = "conformance/properties.rs"]
mod properties;
#[path = "conformance/random.rs"]
mod random;
#[path = "conformance/transaction.rs"]
mod transaction;
