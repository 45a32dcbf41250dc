//! `burn_signal::SignalOps` for [`Ascend`]: Burn 0.22 moved the FFT out of `ModuleOps` into
//! burn-signal; the core's DFT (`ops::fft`) serves it. burn-ascend-server registers burn-signal's
//! custom ops, so a Burn 0.22 program's `signal::rfft` on a remote device runs here.

use burn_signal::SignalOps;

use super::*;
use crate::ops::fft;

impl SignalOps for Ascend {
    fn rfft(
        signal: FloatTensor<Ascend>,
        dim: usize,
        n: Option<usize>,
    ) -> (FloatTensor<Ascend>, FloatTensor<Ascend>) {
        run("rfft", fft::rfft(&signal, dim, n))
    }

    fn irfft(
        real: FloatTensor<Ascend>,
        imag: FloatTensor<Ascend>,
        dim: usize,
        n: Option<usize>,
    ) -> FloatTensor<Ascend> {
        run("irfft", fft::irfft(&real, &imag, dim, n))
    }
}
