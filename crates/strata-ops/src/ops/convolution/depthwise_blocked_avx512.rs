//! The blocked depthwise kernel's multiply-adds for f32 on AVX-512: one band's outputs, eight
//! positions of a row at a time in registers, one fused multiply-add per tap and position.
//!
//! The generic loop in [`super::depthwise_blocked`] leaves the vectorizing to the compiler, which
//! on these short fixed-size arrays spills the accumulators or picks odd shapes; written out in
//! intrinsics the accumulators, the tap's weight and the source vector stay in registers.

use std::arch::x86_64::*;

use super::depthwise_band::BandShape;
use crate::kernels::interleave::LANES;

/// Positions computed together in a row.
const GROUP: usize = 8;

/// `out[(oy * cols + ox) * LANES..][..LANES] = start + sum over taps t of wt[t] * buf[(oy *
/// row_step + ox * col_step + tap_at[t]) * LANES..][..LANES]` for the band's outputs.
///
/// # Safety
/// AVX-512F is available, `wt.len() == tap_at.len()`, `out` holds `rows * cols * LANES`
/// elements, and every position read lies in `buf`: `((rows - 1) * row_step + (cols - 1) *
/// col_step + max(tap_at) + 1) * LANES <= buf.len()` (checked by the caller's assertion).
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn band_outputs(
    buf: &[f32],
    shape: &BandShape,
    wt: &[[f32; LANES]],
    tap_at: &[usize],
    start: &[f32; LANES],
    out: &mut [f32],
) {
    // SAFETY: `start` is an array of LANES (16) f32, one unaligned vector load.
    let start = unsafe { _mm512_loadu_ps(start.as_ptr()) };
    let args = Group {
        buf: buf.as_ptr(),
        step: shape.col_step,
        wt,
        tap_at,
        start,
    };
    for oy in 0..shape.rows {
        let row_corner = oy * shape.row_step;
        let row_out = out.as_mut_ptr().wrapping_add(oy * shape.cols * LANES);
        let mut ox = 0;
        while ox + GROUP <= shape.cols {
            let at = row_out.wrapping_add(ox * LANES);
            // SAFETY: positions ox..ox + GROUP of this row are inside `out` and their windows
            // inside `buf` (the caller's contract).
            unsafe { args.run::<GROUP>(row_corner + ox * shape.col_step, at) };
            ox += GROUP;
        }
        let at = row_out.wrapping_add(ox * LANES);
        let corner = row_corner + ox * shape.col_step;
        // SAFETY: as above, for the row's last `cols - ox < GROUP` positions.
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
struct Group<'a> {
    buf: *const f32,
    step: usize,
    wt: &'a [[f32; LANES]],
    tap_at: &'a [usize],
    start: __m512,
}

impl Group<'_> {
    /// `G` consecutive positions whose first window starts at buffer position `corner`,
    /// written to `out` (`G * LANES` elements).
    ///
    /// # Safety
    /// AVX-512F is available; `out` is valid for `G * LANES` writes; every position
    /// `corner + q * step + tap_at[t]` (`q < G`) lies in the buffer.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn run<const G: usize>(&self, corner: usize, out: *mut f32) {
        let mut acc = [self.start; G];
        for (w, &at) in self.wt.iter().zip(self.tap_at) {
            // SAFETY: `w` is a LANES-element array.
            let w = unsafe { _mm512_loadu_ps(w.as_ptr()) };
            let first = self.buf.wrapping_add((corner + at) * LANES);
            for (q, a) in acc.iter_mut().enumerate() {
                // SAFETY: position corner + q * step + at lies in the buffer (contract).
                let x = unsafe { _mm512_loadu_ps(first.add(q * self.step * LANES)) };
                *a = _mm512_fmadd_ps(w, x, *a);
            }
        }
        for (q, &a) in acc.iter().enumerate() {
            // SAFETY: `out` is valid for G * LANES writes (contract).
            unsafe { _mm512_storeu_ps(out.add(q * LANES), a) };
        }
    }
}
