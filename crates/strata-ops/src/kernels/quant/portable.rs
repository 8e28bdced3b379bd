//! Portable block dots: integer dots of each legacy weight format with [`Q8Block`]s, and the
//! float dot of any format's dequantized block with f32 activations.

use strata_core::dtype::block::{
    f16_at, Q4_0_BYTES, Q4_1_BYTES, Q5_0_BYTES, Q5_1_BYTES, Q8_0_BYTES,
};
use strata_core::QUANT_BLOCK;

use super::q8::Q8Block;

/// The dot of one weight row (whole blocks) with the row's quantized activations.
pub type RowDot = unsafe fn(&[u8], &[Q8Block]) -> f32;

/// Low nibbles are elements 0..16, high nibbles 16..32.
#[inline(always)]
fn nibble_dot(qs: &[u8], y: &[i8; QUANT_BLOCK], offset: i32) -> i32 {
    let mut sum = 0i32;
    for j in 0..QUANT_BLOCK / 2 {
        sum += ((qs[j] & 0x0F) as i32 - offset) * y[j] as i32;
        sum += ((qs[j] >> 4) as i32 - offset) * y[j + 16] as i32;
    }
    sum
}

#[inline(always)]
fn q5_dot(qh: u32, qs: &[u8], y: &[i8; QUANT_BLOCK], offset: i32) -> i32 {
    let mut sum = 0i32;
    for j in 0..QUANT_BLOCK / 2 {
        let lo = (qs[j] & 0x0F) as i32 | ((((qh >> j) & 1) << 4) as i32);
        let hi = (qs[j] >> 4) as i32 | ((((qh >> (j + 16)) & 1) << 4) as i32);
        sum += (lo - offset) * y[j] as i32 + (hi - offset) * y[j + 16] as i32;
    }
    sum
}

fn qh_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// # Safety
/// None beyond the types: safe code with an `unsafe fn` signature to share [`RowDot`].
pub unsafe fn q4_0(row: &[u8], ys: &[Q8Block]) -> f32 {
    row.chunks_exact(Q4_0_BYTES)
        .zip(ys)
        .map(|(b, y)| f16_at(b, 0) * y.d * nibble_dot(&b[2..], &y.qs, 8) as f32)
        .sum()
}

/// # Safety
/// As [`q4_0`].
pub unsafe fn q4_1(row: &[u8], ys: &[Q8Block]) -> f32 {
    row.chunks_exact(Q4_1_BYTES)
        .zip(ys)
        .map(|(b, y)| {
            f16_at(b, 0) * y.d * nibble_dot(&b[4..], &y.qs, 0) as f32 + f16_at(b, 2) * y.s
        })
        .sum()
}

/// # Safety
/// As [`q4_0`].
pub unsafe fn q5_0(row: &[u8], ys: &[Q8Block]) -> f32 {
    row.chunks_exact(Q5_0_BYTES)
        .zip(ys)
        .map(|(b, y)| f16_at(b, 0) * y.d * q5_dot(qh_at(b, 2), &b[6..], &y.qs, 16) as f32)
        .sum()
}

/// # Safety
/// As [`q4_0`].
pub unsafe fn q5_1(row: &[u8], ys: &[Q8Block]) -> f32 {
    row.chunks_exact(Q5_1_BYTES)
        .zip(ys)
        .map(|(b, y)| {
            f16_at(b, 0) * y.d * q5_dot(qh_at(b, 4), &b[8..], &y.qs, 0) as f32 + f16_at(b, 2) * y.s
        })
        .sum()
}

/// # Safety
/// As [`q4_0`].
pub unsafe fn q8_0(row: &[u8], ys: &[Q8Block]) -> f32 {
    row.chunks_exact(Q8_0_BYTES)
        .zip(ys)
        .map(|(b, y)| {
            let dot: i32 = b[2..]
                .iter()
                .zip(&y.qs)
                .map(|(&w, &x)| w as i8 as i32 * x as i32)
                .sum();
            f16_at(b, 0) * y.d * dot as f32
        })
        .sum()
}

/// `Σ a·b` in eight independent lanes, so the compiler vectorizes it.
#[inline(always)]
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}
