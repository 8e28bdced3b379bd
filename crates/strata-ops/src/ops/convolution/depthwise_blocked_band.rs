//! The blocked depthwise kernel's multiply-adds for f32, written once over the SIMD token
//! ([`Isa`]): one band's outputs, `G` positions of a row at a time in registers, each position's
//! block of [`LANES`] channels as `V = LANES / I::LANES` vectors (one zmm on AVX-512, two ymm on
//! AVX2), one fused multiply-add per tap, position and vector.
//!
//! The portable loop in [`super::depthwise_blocked`] leaves the vectorizing to the compiler,
//! which on these short fixed-size arrays spills the accumulators or picks odd shapes; here the
//! `G * V` accumulators, the tap's `V` weights and the source vector stay in registers.

use super::depthwise_band::BandShape;
use super::simd::{Avx2, Avx512, Isa, Simd};
use crate::kernels::interleave::LANES;

/// Positions per group on AVX-512: eight independent chains per weight, 10 of 32 registers.
const GROUP_AVX512: usize = 8;
/// Positions per group on AVX2: 6 x 2 accumulators, 2 weights and a source vector fill 15 of
/// the 16 ymm registers. MobileNetV2's depthwise layers forced onto this kernel (Zen 3, 1
/// thread, medians of 7 rounds) took 7.3 ms in all at 6, 7.8 at 4, 8.7 at 5, 8.2 at 7.
const GROUP_AVX2: usize = 6;

/// `out[(oy * cols + ox) * LANES..][..LANES] = start + sum over taps t of wt[t] * buf[(oy *
/// row_step + ox * col_step + tap_at[t]) * LANES..][..LANES]` for the band's outputs, on the
/// detected ISA. (Every window read must lie in `buf` and `out` hold the band's outputs:
/// asserted.)
pub(super) fn band_outputs(
    simd: Simd,
    buf: &[f32],
    shape: &BandShape,
    wt: &[[f32; LANES]],
    tap_at: &[usize],
    start: &[f32; LANES],
    out: &mut [f32],
) {
    let reach = (shape.rows - 1) * shape.row_step
        + (shape.cols - 1) * shape.col_step
        + tap_at.iter().max().copied().unwrap_or(0)
        + 1;
    assert!(reach * LANES <= buf.len() && out.len() == shape.rows * shape.cols * LANES);
    assert_eq!(wt.len(), tap_at.len());
    // SAFETY: the tokens prove the entry points' features; the reads and writes were checked.
    unsafe {
        match simd {
            Simd::Avx512(isa) => band_avx512(isa, buf, shape, wt, tap_at, start, out),
            Simd::Avx2(isa) => band_avx2(isa, buf, shape, wt, tap_at, start, out),
        }
    }
}

/// Defines `$name`, [`band`] with `$group` positions of `$vectors` vectors on the `$isa` token,
/// compiled with `$features` (the caller's contract: the reads and writes of [`band`]).
macro_rules! entry_point {
    ($name:ident, $isa:ty, $features:literal, $group:expr, $vectors:expr) => {
        #[target_feature(enable = $features)]
        unsafe fn $name(
            isa: $isa,
            buf: &[f32],
            shape: &BandShape,
            wt: &[[f32; LANES]],
            tap_at: &[usize],
            start: &[f32; LANES],
            out: &mut [f32],
        ) {
            // SAFETY: the caller's contract.
            unsafe { band::<_, $group, $vectors>(isa, buf, shape, wt, tap_at, start, out) }
        }
    };
}
entry_point!(band_avx512, Avx512, "avx512f", GROUP_AVX512, 1);
entry_point!(band_avx2, Avx2, "avx2,fma", GROUP_AVX2, 2);

/// The band's rows, [`Group::run`] on `G` positions at a time, then the row's last `< G`.
///
/// # Safety
/// `V * I::LANES == LANES`, `G <= 8`; `wt.len() == tap_at.len()`, `out` holds `rows * cols *
/// LANES` elements and every position read lies in `buf` (as [`band_outputs`] asserts).
#[inline(always)]
unsafe fn band<I: Isa, const G: usize, const V: usize>(
    isa: I,
    buf: &[f32],
    shape: &BandShape,
    wt: &[[f32; LANES]],
    tap_at: &[usize],
    start: &[f32; LANES],
    out: &mut [f32],
) {
    debug_assert!(V * I::LANES == LANES && G <= 8);
    let mut start_v = [isa.splat(0.0); V];
    for (h, s) in start_v.iter_mut().enumerate() {
        // SAFETY: `start` holds LANES = V * I::LANES elements.
        *s = unsafe { isa.load(start.as_ptr().add(h * I::LANES)) };
    }
    let args = Group {
        isa,
        buf: buf.as_ptr(),
        step: shape.col_step,
        wt,
        tap_at,
        start: start_v,
    };
    for oy in 0..shape.rows {
        let row_corner = oy * shape.row_step;
        let row_out = out.as_mut_ptr().wrapping_add(oy * shape.cols * LANES);
        let mut ox = 0;
        while ox + G <= shape.cols {
            let at = row_out.wrapping_add(ox * LANES);
            // SAFETY: positions ox..ox + G of this row are inside `out` and their windows
            // inside `buf` (the caller's contract).
            unsafe { args.run::<G>(row_corner + ox * shape.col_step, at) };
            ox += G;
        }
        let at = row_out.wrapping_add(ox * LANES);
        let corner = row_corner + ox * shape.col_step;
        // SAFETY: as above, for the row's last `cols - ox < G <= 8` positions.
        unsafe {
            match shape.cols - ox {
                0 => {}
                1 => args.run::<1>(corner, at),
                2 => args.run::<2>(corner, at),
                3 => args.run::<3>(corner, at),
                4 => args.run::<4>(corner, at),
                5 => args.run::<5>(corner, at),
                6 => args.run::<6>(corner, at),
                _ => args.run::<7>(corner, at),
            }
        }
    }
}

/// What every group of a band shares.
struct Group<'a, I: Isa, const V: usize> {
    isa: I,
    buf: *const f32,
    step: usize,
    wt: &'a [[f32; LANES]],
    tap_at: &'a [usize],
    start: [I::V; V],
}

impl<I: Isa, const V: usize> Group<'_, I, V> {
    /// `P` consecutive positions whose first window starts at buffer position `corner`,
    /// written to `out` (`P * LANES` elements).
    ///
    /// # Safety
    /// `out` is valid for `P * LANES` writes; every position `corner + q * step + tap_at[t]`
    /// (`q < P`) lies in the buffer.
    #[inline(always)]
    unsafe fn run<const P: usize>(&self, corner: usize, out: *mut f32) {
        let isa = self.isa;
        let mut acc = [self.start; P];
        for (w, &at) in self.wt.iter().zip(self.tap_at) {
            let mut wv = [isa.splat(0.0); V];
            for (h, wv) in wv.iter_mut().enumerate() {
                // SAFETY: `w` holds LANES = V * I::LANES elements.
                *wv = unsafe { isa.load(w.as_ptr().add(h * I::LANES)) };
            }
            let first = self.buf.wrapping_add((corner + at) * LANES);
            for (q, a) in acc.iter_mut().enumerate() {
                for (h, a) in a.iter_mut().enumerate() {
                    // SAFETY: position corner + q * step + at lies in the buffer (contract).
                    let x = unsafe { isa.load(first.add(q * self.step * LANES + h * I::LANES)) };
                    *a = isa.fmadd(wv[h], x, *a);
                }
            }
        }
        for (q, a) in acc.iter().enumerate() {
            for (h, &a) in a.iter().enumerate() {
                // SAFETY: `out` is valid for P * LANES writes (contract).
                unsafe { isa.store(out.add(q * LANES + h * I::LANES), a) };
            }
        }
    }
}
