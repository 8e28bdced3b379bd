//! Softmax along contiguous f32 rows (the last axis, the form attention scores and classifier
//! heads take): each row's maximum, `exp(x - max)` with its sum, then one scale, all with the
//! attention kernel's vectorized row passes; rows spread over the current pool when there are
//! enough of them to pay for a fork.

use super::sdpa::{exp_shifted, row_max};

/// Fewer elements than this per task and splitting costs more than it saves (as the
/// normalization kernels measure it).
const MIN_ELEMENTS_PER_TASK: usize = 16 * 1024;

/// Replaces every row of `cols` elements of `data` by its softmax. Values of `exp(x - max)`
/// below the smallest normal f32 (1.2e-38 of the row's largest term) become 0; a row holding a
/// NaN becomes all NaN, as the exact formula gives.
pub fn softmax_rows(data: &mut [f32], cols: usize) {
    if cols == 0 || data.is_empty() {
        return;
    }
    let rows = data.len() / cols;
    let threads = crate::parallel::threads();
    let per_task = if threads > 1 && data.len() >= 2 * MIN_ELEMENTS_PER_TASK {
        rows.div_ceil(threads)
            .max(MIN_ELEMENTS_PER_TASK.div_ceil(cols))
    } else {
        rows
    };
    crate::parallel::for_each_chunk_mut(data, per_task * cols, 1, |_, chunk| {
        chunk.chunks_exact_mut(cols).for_each(softmax_row);
    });
}

/// One row's softmax, in place.
fn softmax_row(row: &mut [f32]) {
    let max = row_max(row);
    let inv_sum = 1.0 / exp_shifted(row, max);
    row.iter_mut().for_each(|x| *x *= inv_sum);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::rng::Rng;

    /// The softmax of `row` in f64, the plain formula.
    fn reference(row: &[f32]) -> Vec<f32> {
        let max = row
            .iter()
            .fold(f64::NEG_INFINITY, |m, &x| m.max(f64::from(x)));
        let e: Vec<f64> = row.iter().map(|&x| (f64::from(x) - max).exp()).collect();
        let sum: f64 = e.iter().sum();
        e.iter().map(|v| (v / sum) as f32).collect()
    }

    #[test]
    fn rows_of_every_tail_length_match_the_formula() {
        let mut rng = Rng::new(7);
        for cols in [1, 3, 15, 16, 17, 64, 100, 257] {
            let rows = 5;
            let mut data: Vec<f32> = rng.vec(rows * cols).iter().map(|x| x * 8.0).collect();
            let expected: Vec<f32> = data.chunks(cols).flat_map(reference).collect();
            softmax_rows(&mut data, cols);
            for (i, (got, want)) in data.iter().zip(&expected).enumerate() {
                assert!(
                    (got - want).abs() <= 1e-6 + 1e-5 * want.abs(),
                    "cols {cols}, element {i}: {got} vs {want}"
                );
            }
            for row in data.chunks(cols) {
                let sum: f32 = row.iter().sum();
                assert!((sum - 1.0).abs() < 1e-5, "cols {cols}: row sums to {sum}");
            }
        }
    }

    #[test]
    fn large_inputs_spread_over_threads_match_one_thread() {
        let mut rng = Rng::new(11);
        let (rows, cols) = (300, 128);
        let data: Vec<f32> = rng.vec(rows * cols).iter().map(|x| x * 4.0).collect();
        let mut one = data.clone();
        softmax_rows(&mut one, cols);
        let pool = crate::parallel::ThreadPool::new(2).unwrap();
        let mut two = data.clone();
        crate::parallel::install(&pool, || softmax_rows(&mut two, cols));
        assert_eq!(one, two);
        let expected: Vec<f32> = data.chunks(cols).flat_map(reference).collect();
        assert!(one
            .iter()
            .zip(&expected)
            .all(|(a, b)| (a - b).abs() <= 1e-6 + 1e-5 * b.abs()));
    }

    #[test]
    fn nan_spreads_over_its_row_and_huge_values_do_not_overflow() {
        let mut data = vec![1.0, f32::NAN, 2.0, 1e30, 1e30, -1e30];
        softmax_rows(&mut data, 3);
        assert!(data[..3].iter().all(|x| x.is_nan()));
        assert_eq!(&data[3..], &[0.5, 0.5, 0.0]);
    }
}
