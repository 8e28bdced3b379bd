//! Row normalization for transformers: LayerNorm or RMS norm over contiguous rows, with an
//! optional residual and bias added first (the "skip" form) and that sum optionally stored.
//! Each row is read from memory once: the sum, the statistics and the scaled output are
//! computed while the row sits in L1. Lane-wise partial sums (independent accumulators) let the
//! compiler vectorize the reductions without reassociating; [`multiversion!`] compiles them
//! for AVX-512 / AVX2+FMA, chosen at run time. Rows are spread over the intra-op pool.

use super::error::{KernelError, KernelResult};
use super::float::Float;
use super::simd::multiversion;

const OP: &str = "norm_rows";

/// Independent accumulators per reduction: two AVX-512 vectors of f32.
const LANES: usize = 32;

/// Rows per pool task at the least: a row of a few hundred values is too little work to hand
/// over alone.
const MIN_ELEMENTS_PER_TASK: usize = 16 * 1024;

/// What to normalize. Empty `skip`, `bias` and `beta` mean absent.
#[derive(Debug, Clone, Copy)]
pub struct NormRows<'a, T> {
    pub x: &'a [T],
    /// Added to `x`, repeating every `skip.len()` elements (a whole number of rows, dividing
    /// `x.len()`): a residual of `x`'s shape, or one broadcast over leading dims.
    pub skip: &'a [T],
    /// Added to every row (`cols` values).
    pub bias: &'a [T],
    pub gamma: &'a [T],
    pub beta: &'a [T],
    pub cols: usize,
    pub epsilon: f32,
    /// LayerNorm (subtract the mean) rather than RMS norm.
    pub centered: bool,
}

/// Where results go. `sum` receives `x + skip + bias`; `mean` and `inv_std` one value per row.
pub struct NormOut<'a, T> {
    pub y: &'a mut [T],
    pub sum: Option<&'a mut [T]>,
    pub mean: Option<&'a mut [T]>,
    pub inv_std: Option<&'a mut [T]>,
}

/// Normalizes every row of `p.x` into `out`, spread over the current pool when there is work
/// enough. Errors when a length does not fit the row width.
pub fn norm_rows<T: Float>(p: &NormRows<'_, T>, out: NormOut<'_, T>) -> KernelResult<()> {
    let cols = p.cols;
    if cols == 0 || p.x.is_empty() {
        return Ok(());
    }
    let rows = p.x.len() / cols;
    let bad = |param: &'static str, len: usize| KernelError::InvalidParam {
        op: OP,
        param,
        reason: format!("{len} elements do not fit rows of {cols}"),
    };
    if !p.x.len().is_multiple_of(cols) || out.y.len() != p.x.len() {
        return Err(bad("x or y", p.x.len()));
    }
    if !p.skip.is_empty()
        && (!p.skip.len().is_multiple_of(cols) || !p.x.len().is_multiple_of(p.skip.len()))
    {
        return Err(bad("skip", p.skip.len()));
    }
    if p.gamma.len() != cols {
        return Err(bad("gamma", p.gamma.len()));
    }
    for (param, v) in [("beta", p.beta), ("bias", p.bias)] {
        if !v.is_empty() && v.len() != cols {
            return Err(bad(param, v.len()));
        }
    }
    if out.sum.as_ref().is_some_and(|s| s.len() != p.x.len()) {
        return Err(bad("sum", p.x.len()));
    }
    for stat in [&out.mean, &out.inv_std].into_iter().flatten() {
        if stat.len() != rows {
            return Err(bad("statistics", stat.len()));
        }
    }
    let threads = crate::parallel::threads();
    let per_task = if threads > 1 && rows * cols >= 2 * MIN_ELEMENTS_PER_TASK {
        rows.div_ceil(threads)
            .max(MIN_ELEMENTS_PER_TASK.div_ceil(cols))
    } else {
        rows
    };
    let NormOut {
        y,
        sum,
        mean,
        inv_std,
    } = out;
    let shared = Shared {
        sum: sum.map(|s| s.as_mut_ptr()),
        mean: mean.map(|s| s.as_mut_ptr()),
        inv_std: inv_std.map(|s| s.as_mut_ptr()),
    };
    crate::parallel::for_each_chunk_mut(y, per_task * cols, 1, |task, y| {
        let first = task * per_task;
        for (r, y) in y.chunks_exact_mut(cols).enumerate() {
            let row = first + r;
            // SAFETY: every row index is visited by exactly one task, and the pointers are
            // into slices checked above to hold `rows` (stats) or `rows * cols` (sum) values
            // that stay mutably borrowed for this whole call.
            let (sum, stats) = unsafe { shared.row(row, cols) };
            let at = row * cols;
            let x = &p.x[at..at + cols];
            let skip = if p.skip.is_empty() {
                &[][..]
            } else {
                let s = at % p.skip.len();
                &p.skip[s..s + cols]
            };
            let (m, inv) = norm_row(p, x, skip, y, sum);
            if let Some((mean, inv_std)) = stats {
                if let Some(mean) = mean {
                    *mean = m;
                }
                if let Some(inv_std) = inv_std {
                    *inv_std = inv;
                }
            }
        }
    });
    Ok(())
}

/// The optional per-row outputs as raw pointers, so pool tasks can each write their own rows.
struct Shared<T> {
    sum: Option<*mut T>,
    mean: Option<*mut T>,
    inv_std: Option<*mut T>,
}

// SAFETY: tasks write disjoint rows only (see `norm_rows`); `T` values may cross threads.
unsafe impl<T: Send> Sync for Shared<T> {}

type RowStats<'a, T> = Option<(Option<&'a mut T>, Option<&'a mut T>)>;

impl<T> Shared<T> {
    /// The sum row and statistic slots of row `row`.
    ///
    /// # Safety
    /// The pointers point to live buffers of `rows * cols` (sum) and `rows` (stats) values,
    /// `row < rows`, and no other reference to this row's parts exists meanwhile.
    #[allow(clippy::mut_from_ref)]
    unsafe fn row(&self, row: usize, cols: usize) -> (Option<&mut [T]>, RowStats<'_, T>) {
        // SAFETY: the caller's contract.
        unsafe {
            let sum = self
                .sum
                .map(|p| std::slice::from_raw_parts_mut(p.add(row * cols), cols));
            let mean = self.mean.map(|p| &mut *p.add(row));
            let inv = self.inv_std.map(|p| &mut *p.add(row));
            let stats = (mean.is_some() || inv.is_some()).then_some((mean, inv));
            (sum, stats)
        }
    }
}

/// One row; returns its mean (0 for RMS) and inverse standard deviation (or RMS).
#[inline(always)]
fn norm_row<T: Float>(
    p: &NormRows<'_, T>,
    x: &[T],
    skip: &[T],
    y: &mut [T],
    sum: Option<&mut [T]>,
) -> (T, T) {
    let mut stats = [T::ZERO; 2];
    match sum {
        Some(sum) => {
            add_row(x, skip, p.bias, sum);
            stats_and_scale(p.centered, p.epsilon, p.gamma, p.beta, sum, y, &mut stats);
        }
        None if skip.is_empty() && p.bias.is_empty() => {
            stats_and_scale(p.centered, p.epsilon, p.gamma, p.beta, x, y, &mut stats);
        }
        None => {
            // The sum is not wanted: build it in `y` and normalize in place.
            add_row(x, skip, p.bias, y);
            stats_in_place(p.centered, p.epsilon, p.gamma, p.beta, y, &mut stats);
        }
    }
    (stats[0], stats[1])
}

multiversion! {
    /// `out = x + skip + bias` (absent ones empty).
    fn add_row<T: Float>(x: &[T], skip: &[T], bias: &[T], out: &mut [T]) {
        let out = &mut out[..x.len()];
        match (skip.is_empty(), bias.is_empty()) {
            (false, false) => {
                for (((o, &a), &s), &b) in out.iter_mut().zip(x).zip(skip).zip(bias) {
                    *o = a + s + b;
                }
            }
            (false, true) => {
                for ((o, &a), &s) in out.iter_mut().zip(x).zip(skip) {
                    *o = a + s;
                }
            }
            (true, false) => {
                for ((o, &a), &b) in out.iter_mut().zip(x).zip(bias) {
                    *o = a + b;
                }
            }
            (true, true) => out.copy_from_slice(x),
        }
    }
}

multiversion! {
    /// Statistics of `src`, then `y = (src - mean) * inv_std * gamma + beta`; `stats` receives
    /// (mean, inv_std).
    fn stats_and_scale<T: Float>(
        centered: bool,
        epsilon: f32,
        gamma: &[T],
        beta: &[T],
        src: &[T],
        y: &mut [T],
        stats: &mut [T; 2],
    ) {
        let (mean, inv) = row_stats(centered, epsilon, src);
        scale(mean, inv, gamma, beta, src, y);
        *stats = [mean, inv];
    }
}

multiversion! {
    /// [`stats_and_scale`] with the source in `y` itself.
    fn stats_in_place<T: Float>(
        centered: bool,
        epsilon: f32,
        gamma: &[T],
        beta: &[T],
        y: &mut [T],
        stats: &mut [T; 2],
    ) {
        let (mean, inv) = row_stats(centered, epsilon, y);
        scale_in_place(mean, inv, gamma, beta, y);
        *stats = [mean, inv];
    }
}

/// Mean (0 for RMS) and the inverse of `sqrt(variance + eps)` (or of the RMS). The variance
/// is taken around the mean in a second pass over the cached row, which keeps it exact for rows
/// far from zero.
#[inline(always)]
fn row_stats<T: Float>(centered: bool, epsilon: f32, src: &[T]) -> (T, T) {
    let n = T::from_usize(src.len());
    let mean = if centered {
        lane_sum(src, |v| v) / n
    } else {
        T::ZERO
    };
    let var = lane_sum(src, |v| {
        let d = v - mean;
        d * d
    }) / n;
    (mean, T::ONE / (var + T::from_f32(epsilon)).sqrt())
}

/// `sum(f(v))` over `src` with [`LANES`] independent accumulators.
#[inline(always)]
fn lane_sum<T: Float>(src: &[T], f: impl Fn(T) -> T) -> T {
    let mut acc = [T::ZERO; LANES];
    let chunks = src.chunks_exact(LANES);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (a, &v) in acc.iter_mut().zip(chunk) {
            *a += f(v);
        }
    }
    let mut total = T::ZERO;
    for &v in rest {
        total += f(v);
    }
    // Pairwise fold of the lanes.
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for i in 0..width {
            let high = acc[i + width];
            acc[i] += high;
        }
    }
    acc[0] + total
}

#[inline(always)]
fn scale<T: Float>(mean: T, inv: T, gamma: &[T], beta: &[T], src: &[T], y: &mut [T]) {
    let y = &mut y[..src.len()];
    if beta.is_empty() {
        for ((o, &v), &g) in y.iter_mut().zip(src).zip(gamma) {
            *o = (v - mean) * inv * g;
        }
    } else {
        for (((o, &v), &g), &b) in y.iter_mut().zip(src).zip(gamma).zip(beta) {
            *o = (v - mean) * inv * g + b;
        }
    }
}

#[inline(always)]
fn scale_in_place<T: Float>(mean: T, inv: T, gamma: &[T], beta: &[T], y: &mut [T]) {
    if beta.is_empty() {
        for (o, &g) in y.iter_mut().zip(gamma) {
            *o = (*o - mean) * inv * g;
        }
    } else {
        for ((o, &g), &b) in y.iter_mut().zip(gamma).zip(beta) {
            *o = (*o - mean) * inv * g + b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::rng::Rng;

    /// The textbook row normalization in f64.
    fn reference(p: &NormRows<'_, f32>) -> (Vec<f32>, Vec<f32>) {
        let cols = p.cols;
        let mut y = Vec::new();
        let mut sums = Vec::new();
        for (r, row) in p.x.chunks(cols).enumerate() {
            let h: Vec<f64> = (0..cols)
                .map(|j| {
                    let mut v = f64::from(row[j]);
                    if !p.skip.is_empty() {
                        v += f64::from(p.skip[(r * cols + j) % p.skip.len()]);
                    }
                    if !p.bias.is_empty() {
                        v += f64::from(p.bias[j]);
                    }
                    v
                })
                .collect();
            let n = cols as f64;
            let mean = if p.centered {
                h.iter().sum::<f64>() / n
            } else {
                0.0
            };
            let var = h.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
            let inv = 1.0 / (var + f64::from(p.epsilon)).sqrt();
            for (j, &hj) in h.iter().enumerate().take(cols) {
                let mut o = (hj - mean) * inv * f64::from(p.gamma[j]);
                if !p.beta.is_empty() {
                    o += f64::from(p.beta[j]);
                }
                y.push(o as f32);
            }
            sums.extend(h.iter().map(|&v| v as f32));
        }
        (y, sums)
    }

    #[test]
    fn rows_match_the_f64_reference_in_every_form() {
        let mut rng = Rng::new(0x1a7e);
        let pool = crate::parallel::ThreadPool::new(2).unwrap();
        for case in 0..48 {
            let cols = [1, 7, 32, 33, 100, 768][case % 6];
            let rows = [1, 3, 40][case % 3];
            let x: Vec<f32> = rng.vec(rows * cols).iter().map(|v| v * 4.0 + 3.0).collect();
            let skip = match case % 4 {
                0 => Vec::new(),
                1 => rng.vec(rows * cols),
                _ => rng.vec(cols),
            };
            let bias = if case % 5 < 2 {
                rng.vec(cols)
            } else {
                Vec::new()
            };
            let gamma = rng.vec(cols);
            let beta = if case % 2 == 0 {
                rng.vec(cols)
            } else {
                Vec::new()
            };
            let p = NormRows {
                x: &x,
                skip: &skip,
                bias: &bias,
                gamma: &gamma,
                beta: &beta,
                cols,
                epsilon: 1e-5,
                centered: case % 7 != 3,
            };
            let (want_y, want_sum) = reference(&p);
            let mut y = vec![f32::NAN; x.len()];
            let mut sum = vec![f32::NAN; x.len()];
            let mut mean = vec![f32::NAN; rows];
            let keep_sum = case % 3 == 0;
            let out = NormOut {
                y: &mut y,
                sum: keep_sum.then_some(&mut sum[..]),
                mean: Some(&mut mean),
                inv_std: None,
            };
            crate::parallel::install(&pool, || norm_rows(&p, out)).unwrap();
            for (i, (g, w)) in y.iter().zip(&want_y).enumerate() {
                assert!(
                    (g - w).abs() <= 2e-5 * w.abs().max(1.0),
                    "case {case} y[{i}]: {g} vs {w}"
                );
            }
            if keep_sum {
                for (g, w) in sum.iter().zip(&want_sum) {
                    assert!((g - w).abs() <= 1e-6 * w.abs().max(1.0), "case {case} sum");
                }
            }
            assert!(mean.iter().all(|m| m.is_finite()), "case {case} mean");
        }
    }

    fn out(y: &mut [f32]) -> NormOut<'_, f32> {
        NormOut {
            y,
            sum: None,
            mean: None,
            inv_std: None,
        }
    }

    #[test]
    fn lengths_that_do_not_fit_are_errors() {
        let x = [1.0f32; 6];
        let g = [1.0f32; 3];
        let mut y = [0.0f32; 6];
        let p = NormRows {
            x: &x,
            skip: &[],
            bias: &[],
            gamma: &g[..2],
            beta: &[],
            cols: 3,
            epsilon: 0.0,
            centered: true,
        };

        assert!(norm_rows(&p, out(&mut y[..])).is_err());
        let p = NormRows {
            gamma: &g,
            skip: &x[..4],
            ..p
        };
        assert!(norm_rows(&p, out(&mut y[..])).is_err());
        // Lengths that fit run (with an epsilon: constant rows over a zero variance are 0/0).
        let p = NormRows {
            skip: &[],
            epsilon: 1e-5,
            ..p
        };
        norm_rows(&p, out(&mut y[..])).unwrap();
        assert_eq!(y, [0.0; 6]);
    }
}
