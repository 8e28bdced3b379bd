//! Skinny products — at most [`MAX_ROWS`] rows of C, as in batch-1 MatMul/Gemm — streamed
//! straight from the operands, without packing.
//!
//! With one to four rows there is no reuse of B for packing to buy: every element of B is read
//! once whatever happens, so the product is bound by how fast B streams from memory. Packing it
//! first would read it twice and write it once. Two layouts of B stream contiguously:
//!
//! - rows contiguous (`B` is `k x n` row-major): C's rows accumulate `A[i, p] * B[p, ..]` over
//!   `p`, one block of columns at a time kept in L1;
//! - columns contiguous (`B` transposed, e.g. Gemm's `transB` weights): each element of C is a
//!   dot product of a row of A (contiguous too) with a column of B.
//!
//! Blocks of columns are spread over the threads when the product is large enough. Any other
//! layout goes through the packed driver.

use std::ops::Range;

use super::super::float::Float;
use super::driver::{MatMut, Problem};
use super::pack::MatRef;
use crate::kernels::simd::multiversion;
use crate::parallel;

/// Products with at most this many rows of C take the streaming path.
pub(super) const MAX_ROWS: usize = 4;
/// Columns of C per block: `MAX_ROWS x COLUMNS` accumulators stay in L1.
const COLUMNS: usize = 128;
/// Lanes of the dot product's partial sums (a whole AVX-512 register of f32).
const LANES: usize = 16;
/// Below this many multiply-adds the product stays on the calling thread.
const PARALLEL_MIN_MULADDS: usize = 1 << 17;

/// Computes `p` when it is skinny and B streams contiguously; returns false (touching nothing)
/// otherwise.
///
/// # Safety
/// As [`super::driver::run`]: `p` was validated (every element in bounds, C's elements
/// distinct and exclusively ours).
pub(super) unsafe fn try_run<T: Float>(p: &Problem<'_, T>, threads: usize) -> bool {
    if p.m > MAX_ROWS || p.m == 0 || p.n == 0 || p.k == 0 {
        return false;
    }
    let by_rows = p.b.cs == 1;
    let streams = by_rows || (p.b.rs == 1 && p.a.cs == 1);
    if !streams {
        return false;
    }
    let blocks = p.n.div_ceil(COLUMNS);
    // Cancellation: blocks poll the run's token; the run fails at its next check (run_control).
    let stop = crate::run_control::stop_token();
    let block = |index: usize| {
        if stop.should_stop_at(index) {
            return;
        }
        let cols = index * COLUMNS..((index + 1) * COLUMNS).min(p.n);
        let mut acc = [[T::ZERO; COLUMNS]; MAX_ROWS];
        stream_block(by_rows, p.a, p.b, p.m, p.k, cols.clone(), &mut acc);
        // SAFETY: the blocks partition C's columns, so this block's elements are written by
        // this task only; they are in bounds by the caller's contract.
        unsafe { store(&acc, p.c, p.m, cols.clone(), p.alpha, p.beta) };
        if let Some(epilogue) = p.epilogue {
            for i in 0..p.m {
                let row =
                    p.c.ptr
                        .wrapping_offset(i as isize * p.c.rs + cols.start as isize);
                // SAFETY: the epilogue's contract makes C's rows contiguous (cs == 1), and this
                // block's piece of row i is in bounds and written by this task only (above).
                let row = unsafe { std::slice::from_raw_parts_mut(row, cols.len()) };
                epilogue(i, cols.start, row);
            }
        }
    };
    let work = p.m.saturating_mul(p.n).saturating_mul(p.k);
    if threads > 1 && blocks > 1 && work >= PARALLEL_MIN_MULADDS {
        // One contiguous run of column blocks per thread, on the same thread every call: each
        // core keeps its part of B in its own cache from one run to the next.
        let parts = threads.min(parallel::threads()).min(blocks).max(1);
        let per_part = blocks.div_ceil(parts);
        parallel::for_each_thread(parts, |part| {
            (part * per_part..((part + 1) * per_part).min(blocks)).for_each(block)
        });
    } else {
        (0..blocks).for_each(block);
    }
    true
}

multiversion! {
    /// `acc[i][j - cols.start] = sum_p A[i, p] * B[p, j]`: streaming B's rows when `by_rows`,
    /// else dot products of A's rows with B's columns.
    fn stream_block<T: Float>(
        by_rows: bool,
        a: MatRef<'_, T>,
        b: MatRef<'_, T>,
        m: usize,
        k: usize,
        cols: Range<usize>,
        acc: &mut [[T; COLUMNS]; MAX_ROWS],
    ) {
        if by_rows && m == 1 && cols.len() == COLUMNS {
            // One row of C over a whole block: the sums live in registers (a fixed-size local
            // array) rather than being reloaded and stored for every row of B.
            let mut sums = [T::ZERO; COLUMNS];
            for p in 0..k {
                let b_row = &b.data[b.offset(p, cols.start)..][..COLUMNS];
                let x = a.data[a.offset(0, p)];
                for (y, &w) in sums.iter_mut().zip(b_row) {
                    *y += x * w;
                }
            }
            acc[0] = sums;
        } else if by_rows {
            // B's rows are contiguous: accumulate `A[i, p] * B[p, cols]` over `p`.
            let width = cols.len();
            for p in 0..k {
                let b_row = &b.data[b.offset(p, cols.start)..][..width];
                for (i, acc_row) in acc.iter_mut().enumerate().take(m) {
                    let x = a.data[a.offset(i, p)];
                    for (y, &w) in acc_row[..width].iter_mut().zip(b_row) {
                        *y += x * w;
                    }
                }
            }
        } else {
            // A's rows and B's columns are contiguous: dot products, four columns at a time so
            // that four independent chains of sums share each load of A (one chain alone waits
            // on its own additions).
            let first = cols.start;
            let mut c = 0;
            while c + 4 <= cols.len() {
                let column = |q: usize| &b.data[b.offset(0, first + c + q)..][..k];
                let columns = [column(0), column(1), column(2), column(3)];
                for (i, acc_row) in acc.iter_mut().enumerate().take(m) {
                    let sums = dot4(&a.data[a.offset(i, 0)..][..k], columns);
                    acc_row[c..c + 4].copy_from_slice(&sums);
                }
                c += 4;
            }
            for (c, j) in cols.enumerate().skip(c) {
                let column = &b.data[b.offset(0, j)..][..k];
                for (i, acc_row) in acc.iter_mut().enumerate().take(m) {
                    acc_row[c] = dot(&a.data[a.offset(i, 0)..][..k], column);
                }
            }
        }
    }
}

/// `x . y[q]` for four `y`s of `x`'s length, each in `LANES` partial sums.
#[inline(always)]
fn dot4<T: Float>(x: &[T], ys: [&[T]; 4]) -> [T; 4] {
    let mut lanes = [[T::ZERO; LANES]; 4];
    let whole = x.len() / LANES * LANES;
    for start in (0..whole).step_by(LANES) {
        let xa = &x[start..start + LANES];
        for (lane, y) in lanes.iter_mut().zip(ys) {
            for ((s, &u), &v) in lane.iter_mut().zip(xa).zip(&y[start..start + LANES]) {
                *s += u * v;
            }
        }
    }
    let mut sums = [T::ZERO; 4];
    for ((sum, lane), y) in sums.iter_mut().zip(&lanes).zip(ys) {
        *sum = lane.iter().fold(T::ZERO, |s, &v| s + v);
        for (&u, &v) in x[whole..].iter().zip(&y[whole..]) {
            *sum += u * v;
        }
    }
    sums
}

/// `x . y` over equal lengths, in `LANES` independent partial sums so that it vectorizes.
#[inline(always)]
fn dot<T: Float>(x: &[T], y: &[T]) -> T {
    let mut lanes = [T::ZERO; LANES];
    let (xs, ys) = (x.chunks_exact(LANES), y.chunks_exact(LANES));
    let (x_rest, y_rest) = (xs.remainder(), ys.remainder());
    for (xa, ya) in xs.zip(ys) {
        for ((s, &u), &v) in lanes.iter_mut().zip(xa).zip(ya) {
            *s += u * v;
        }
    }
    let mut sum = lanes.iter().fold(T::ZERO, |s, &v| s + v);
    for (&u, &v) in x_rest.iter().zip(y_rest) {
        sum += u * v;
    }
    sum
}

/// `C[i, j] = alpha * acc + beta * C[i, j]` over rows `0..m` and columns `cols`; `beta == 0`
/// never reads C.
///
/// # Safety
/// Those elements of C are valid and accessed by no one else meanwhile.
unsafe fn store<T: Float>(
    acc: &[[T; COLUMNS]; MAX_ROWS],
    c: MatMut<T>,
    m: usize,
    cols: Range<usize>,
    alpha: T,
    beta: T,
) {
    for (i, acc_row) in acc.iter().enumerate().take(m) {
        for (&x, j) in acc_row.iter().zip(cols.clone()) {
            let at = c.ptr.wrapping_offset(i as isize * c.rs + j as isize * c.cs);
            // SAFETY: (i, j) is an element of C in this block, valid and ours (caller); C is
            // read only when beta != 0.
            unsafe {
                *at = if beta == T::ZERO {
                    alpha * x
                } else {
                    alpha * x + beta * *at
                };
            }
        }
    }
}
