//! Signal processing: DFT, STFT, window functions, MelWeightMatrix.

mod dft;
mod fft;
mod mel_weight_matrix;
mod stft;
mod values;
mod window;

use crate::OpTable;

/// The family's operators, read by the registry.
pub const OPS: &[OpTable] = &[&[
    ("DFT", dft::Dft::build),
    ("STFT", stft::Stft::build),
    ("HannWindow", window::Window::build_hann),
    ("HammingWindow", window::Window::build_hamming),
    ("BlackmanWindow", window::Window::build_blackman),
    ("MelWeightMatrix", mel_weight_matrix::MelWeightMatrix::build),
]];
