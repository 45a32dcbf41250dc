//! What a step would cost on an Atlas A2 NPU, from what the emulated NPU ran and from shapes
//! alone: the device-time model ([`a2`]: each launch the emulated runtime logged, timed with the
//! A2's figures, and [`a2::ModelledClock`] summing them) and the roofline of a decoder layer's
//! decode step ([`roofline`]: the bytes and FLOPs it cannot avoid). Used by the benchmarks and by
//! the example's serving figures; a model, not a measurement.

#![warn(missing_docs)]

pub mod a2;
pub mod roofline;
