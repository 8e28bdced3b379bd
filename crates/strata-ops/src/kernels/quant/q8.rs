//! Activations quantized on the fly to 8-bit blocks of 32, the integer-dot operand of the legacy
//! weight formats (llama.cpp's q8_0/q8_1 for activations, with an f32 scale).

use strata_core::QUANT_BLOCK;

use crate::support::f16_bits::{f16_to_f32, f32_to_f16};

/// 32 activations as `d · qs[i]`, with `s = d · Σ qs` for the formats with an offset (`_1`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C, align(8))]
pub struct Q8Block {
    pub d: f32,
    pub s: f32,
    pub qs: [i8; QUANT_BLOCK],
}

/// The scalar [`super::quantize_activations`].
pub(super) fn quantize_portable(x: &[f32], out: &mut [Q8Block]) {
    for (xs, block) in x.chunks_exact(QUANT_BLOCK).zip(out.iter_mut()) {
        let amax = xs.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        let mut sum = 0i32;
        for (q, &v) in block.qs.iter_mut().zip(xs) {
            *q = (v * id).round_ties_even() as i8;
            sum += *q as i32;
        }
        block.d = through_f16(d);
        block.s = through_f16(d * sum as f32);
    }
}

/// `v` rounded to the nearest f16 (as llama.cpp stores block scales).
fn through_f16(v: f32) -> f32 {
    f16_to_f32(f32_to_f16(v))
}
