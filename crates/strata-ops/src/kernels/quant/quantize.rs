//! The dispatch of activation quantization to the widest kernel this CPU has: 8-bit blocks of
//! 32 ([`Q8Block`]), the integer-dot operand of the legacy weight formats.

use super::q8::{quantize_portable, Q8Block};

/// Quantizes `x` (a multiple of 32 long) into `out`, one block per 32 values, exactly as
/// llama.cpp's AVX2 `quantize_row_q8_0`/`q8_1` do, so products match its numbers: `qs =
/// round_ties_even(x · 127/absmax)`, the scale `d = absmax/127` and `s = d · Σ qs` stored as f16
/// (read back here as the f32 of that f16).
pub fn quantize_activations(x: &[f32], out: &mut [Q8Block]) {
    #[cfg(target_arch = "x86_64")]
    if super::Isa::Avx512.is_available() {
        // SAFETY: AVX-512 F, BW, VL and VNNI, AVX2, FMA and F16C were detected at run time.
        unsafe { super::avx512::quantize_activations(x, out) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if super::Isa::Avx2.is_available() {
        // SAFETY: AVX2, FMA and F16C were detected at run time.
        unsafe { super::avx2::quantize_activations(x, out) };
        return;
    }
    quantize_portable(x, out);
}
