//! x86_64 integer microkernels.
//!
//! AVX-512 VNNI: per group of 4 depths, one 64-byte load per B panel (16 columns x 4 bytes) and
//! one 32-bit broadcast of each A row's 4 bytes; `vpdpbusd` multiplies u8 by i8 and adds the
//! four products into each i32 lane exactly. 8 rows x 2 panels = 16 accumulators.
//!
//! AVX2: no byte dot product that cannot saturate (`vpmaddubsw` adds two u8·i8 products into a
//! saturating i16: 255·127·2 does not fit), so both operands are widened to i16 and multiplied
//! with `vpmaddwd`, whose pair sums fit i32. A 16-byte slice of a panel (4 columns x 4 depths)
//! widens to 16 i16; against A's 4 values repeated, `vpmaddwd` yields each column's sum in two
//! adjacent lanes, added at the end. One row x 2 panels = 8 accumulators.

use std::arch::x86_64::*;

use super::microkernel::IntMicrokernel;
use super::{NR, PANEL};

/// AVX-512 VNNI, 8 rows.
#[derive(Clone, Copy, Debug)]
pub(super) struct Avx512Vnni;

impl IntMicrokernel for Avx512Vnni {
    const MR: usize = 8;

    #[inline]
    unsafe fn run(kp: usize, a: *const u8, b: *const i8, c: *mut i32) {
        // SAFETY: the caller upholds the contract (extents, CPU features: this type is only
        // chosen after detecting AVX-512F/BW and VNNI).
        unsafe { vnni_kernel(kp, a, b, c) }
    }
}

/// # Safety
/// `IntMicrokernel::run`'s contract with `MR = 8`, on a CPU with AVX-512F, BW and VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn vnni_kernel(kp: usize, a: *const u8, b: *const i8, c: *mut i32) {
    const MR: usize = 8;
    let mut acc = [[_mm512_setzero_si512(); 2]; MR];
    let b1 = b.wrapping_add(kp * PANEL);
    for g in 0..kp / 4 {
        // SAFETY: group g < kp / 4 of each panel lies within its kp * PANEL bytes, and A's
        // group within kp * MR bytes (caller's contract); loads are unaligned.
        unsafe {
            let v0 = _mm512_loadu_si512(b.add(g * PANEL * 4).cast());
            let v1 = _mm512_loadu_si512(b1.add(g * PANEL * 4).cast());
            let ag = a.add(g * MR * 4);
            for (i, row) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_epi32(ag.add(i * 4).cast::<i32>().read_unaligned());
                row[0] = _mm512_dpbusd_epi32(row[0], av, v0);
                row[1] = _mm512_dpbusd_epi32(row[1], av, v1);
            }
        }
    }
    for (i, row) in acc.iter().enumerate() {
        // SAFETY: c holds MR rows of NR = 32 i32 values (caller's contract).
        unsafe {
            _mm512_storeu_si512(c.add(i * NR).cast(), row[0]);
            _mm512_storeu_si512(c.add(i * NR + PANEL).cast(), row[1]);
        }
    }
}

/// AVX2, one row.
#[derive(Clone, Copy, Debug)]
pub(super) struct Avx2;

impl IntMicrokernel for Avx2 {
    const MR: usize = 1;

    #[inline]
    unsafe fn run(kp: usize, a: *const u8, b: *const i8, c: *mut i32) {
        // SAFETY: as for the VNNI kernel, with AVX2 detected.
        unsafe { avx2_kernel(kp, a, b, c) }
    }
}

/// # Safety
/// `IntMicrokernel::run`'s contract with `MR = 1`, on a CPU with AVX2.
#[target_feature(enable = "avx2")]
unsafe fn avx2_kernel(kp: usize, a: *const u8, b: *const i8, c: *mut i32) {
    // acc[q]: columns 4q..4q+4 of the 32, each column's sum split over two adjacent lanes.
    let mut acc = [_mm256_setzero_si256(); NR / 4];
    for g in 0..kp / 4 {
        // SAFETY: group g of A (4 bytes) and of both panels (64 bytes each) are in bounds by
        // the caller's contract; loads are unaligned.
        unsafe {
            let a4 = _mm_cvtsi32_si128(a.add(g * 4).cast::<i32>().read_unaligned());
            let a16 = _mm256_broadcastq_epi64(_mm_cvtepu8_epi16(a4));
            for (q, lane) in acc.iter_mut().enumerate() {
                let panel = b.add((q / 4) * kp * PANEL);
                let bytes = _mm_loadu_si128(panel.add(g * PANEL * 4 + (q % 4) * 16).cast());
                let b16 = _mm256_cvtepi8_epi16(bytes);
                *lane = _mm256_add_epi32(*lane, _mm256_madd_epi16(a16, b16));
            }
        }
    }
    let mut lanes = [0i32; 8];
    for (q, lane) in acc.iter().enumerate() {
        // SAFETY: `lanes` holds 8 i32 values; unaligned store.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), *lane) };
        for col in 0..4 {
            let sum = lanes[2 * col].wrapping_add(lanes[2 * col + 1]);
            // SAFETY: column 4q + col < NR of row 0 (caller's contract).
            unsafe { c.add(q * 4 + col).write(sum) };
        }
    }
}
