//! Skinny products (at most [`MAX_ROWS`] rows of C) against a B prepacked at plan time: a
//! fully connected layer at batch 1.
//!
//! The packed layout keeps each sliver of `NR` columns with all its `k` rows contiguous, so a
//! sliver is one sequential stream: the hardware prefetcher follows it, which a row-major B read
//! a few columns at a time (a new page every row or two) defeats. Each thread takes one
//! contiguous run of slivers, the same one every call, so with enough threads every core keeps
//! its part of the weights in its own L2 from one run to the next. Two slivers are accumulated
//! together so that independent sums hide the latency of the additions.

use super::super::float::Float;
use super::driver::Problem;
use super::skinny::MAX_ROWS;
use crate::kernels::simd::multiversion;
use crate::parallel;

/// Below this many multiply-adds the product stays on the calling thread.
const PARALLEL_MIN_MULADDS: usize = 1 << 17;

/// Computes `p` (B prepacked in slivers of `tile` columns, at most [`MAX_ROWS`] rows of C);
/// returns false (touching nothing) for a product or sliver width it does not handle.
///
/// # Safety
/// As [`super::driver::run`]: `p` was validated, `p.packed_b` holds `n.div_ceil(tile)` slivers
/// of `k * tile` elements, C's elements are in bounds, distinct and exclusively ours.
pub(super) unsafe fn try_run<T: Float>(p: &Problem<'_, T>, tile: usize, threads: usize) -> bool {
    let Some(packed) = p.packed_b else {
        return false;
    };
    if p.m == 0 || p.m > MAX_ROWS || p.n == 0 || p.k == 0 || !matches!(tile, 4 | 8 | 16 | 32) {
        return false;
    }
    let slivers = p.n.div_ceil(tile);
    // Cancellation: sliver pairs poll the run's token; the run fails at its next check.
    let stop = crate::run_control::stop_token();
    let run = |range: std::ops::Range<usize>| {
        let mut s = range.start;
        while s < range.end {
            if stop.should_stop_at(s / 2) {
                return;
            }
            let count = 2.min(range.end - s);
            let data = &packed[s * p.k * tile..][..count * p.k * tile];
            let mut acc = [[T::ZERO; 2 * 32]; MAX_ROWS];
            match tile {
                32 => slivers_32(p.a.data, (p.a.rs, p.a.cs), p.m, p.k, data, count, &mut acc),
                16 => slivers_16(p.a.data, (p.a.rs, p.a.cs), p.m, p.k, data, count, &mut acc),
                8 => slivers_8(p.a.data, (p.a.rs, p.a.cs), p.m, p.k, data, count, &mut acc),
                _ => slivers_4(p.a.data, (p.a.rs, p.a.cs), p.m, p.k, data, count, &mut acc),
            }
            let cols = s * tile..((s + count) * tile).min(p.n);
            // SAFETY: the slivers of this run are this task's alone, so are their columns of C;
            // in bounds by the caller's contract.
            unsafe { finish(p, &acc, cols) };
            s += count;
        }
    };
    let work = p.m.saturating_mul(p.n).saturating_mul(p.k);
    if threads > 1 && slivers > 1 && work >= PARALLEL_MIN_MULADDS {
        let parts = threads.min(parallel::threads()).min(slivers).max(1);
        // Whole pairs of slivers per part, so every part keeps the two-sliver step.
        let per_part = slivers.div_ceil(parts).next_multiple_of(2);
        parallel::for_each_thread(parts, |part| {
            run(part * per_part..((part + 1) * per_part).min(slivers))
        });
    } else {
        run(0..slivers);
    }
    true
}

/// Writes `alpha * acc + beta * C` into columns `cols` of C's rows, then runs the epilogue.
///
/// # Safety
/// Those elements of C are valid and accessed by no one else meanwhile.
unsafe fn finish<T: Float>(
    p: &Problem<'_, T>,
    acc: &[[T; 64]; MAX_ROWS],
    cols: std::ops::Range<usize>,
) {
    for (i, acc_row) in acc.iter().enumerate().take(p.m) {
        for (&x, j) in acc_row.iter().zip(cols.clone()) {
            let at =
                p.c.ptr
                    .wrapping_offset(i as isize * p.c.rs + j as isize * p.c.cs);
            // SAFETY: (i, j) is an element of C in this task's columns (caller); C is read
            // only when beta != 0.
            unsafe {
                *at = if p.beta == T::ZERO {
                    p.alpha * x
                } else {
                    p.alpha * x + p.beta * *at
                };
            }
        }
        if let Some(epilogue) = p.epilogue {
            let row =
                p.c.ptr
                    .wrapping_offset(i as isize * p.c.rs + cols.start as isize);
            // SAFETY: the epilogue's contract makes C's rows contiguous (cs == 1); this piece
            // of row i is in bounds and written by this task only (above).
            let row = unsafe { std::slice::from_raw_parts_mut(row, cols.len()) };
            epilogue(i, cols.start, row);
        }
    }
}

/// `acc[i][q * NR + j] = sum_p A[i, p] * sliver_q[p * NR + j]` for the `count` (1 or 2)
/// slivers of `data`; a one-row product keeps its sums in registers.
#[inline(always)]
fn slivers<T: Float, const NR: usize>(
    a: &[T],
    (rs, cs): (isize, isize),
    m: usize,
    k: usize,
    data: &[T],
    count: usize,
    acc: &mut [[T; 64]; MAX_ROWS],
) {
    let a_at = |i: usize, p: usize| a[(i as isize * rs + p as isize * cs) as usize];
    let (first, second) = data.split_at(k * NR);
    if m == 1 && count == 2 {
        let (mut s0, mut s1) = ([T::ZERO; NR], [T::ZERO; NR]);
        for ((p, r0), r1) in first
            .chunks_exact(NR)
            .enumerate()
            .zip(second.chunks_exact(NR))
        {
            let x = a_at(0, p);
            for ((y0, y1), (&w0, &w1)) in s0.iter_mut().zip(&mut s1).zip(r0.iter().zip(r1)) {
                *y0 += x * w0;
                *y1 += x * w1;
            }
        }
        acc[0][..NR].copy_from_slice(&s0);
        acc[0][NR..2 * NR].copy_from_slice(&s1);
        return;
    }
    for (q, sliver) in [first, second].into_iter().take(count).enumerate() {
        for (i, acc_row) in acc.iter_mut().enumerate().take(m) {
            let mut sums = [T::ZERO; NR];
            for (p, row) in sliver.chunks_exact(NR).enumerate() {
                let x = a_at(i, p);
                for (y, &w) in sums.iter_mut().zip(row) {
                    *y += x * w;
                }
            }
            acc_row[q * NR..][..NR].copy_from_slice(&sums);
        }
    }
}

macro_rules! slivers_of_width {
    ($($name:ident = $nr:literal),*) => {$(
        multiversion! {
            /// [`slivers`] for one sliver width.
            fn $name<T: Float>(
                a: &[T],
                strides: (isize, isize),
                m: usize,
                k: usize,
                data: &[T],
                count: usize,
                acc: &mut [[T; 64]; MAX_ROWS],
            ) {
                slivers::<T, $nr>(a, strides, m, k, data, count, acc)
            }
        }
    )*};
}

slivers_of_width!(
    slivers_32 = 32,
    slivers_16 = 16,
    slivers_8 = 8,
    slivers_4 = 4
);
