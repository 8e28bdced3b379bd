//! General matrix multiply over strided slices, through the `gemm` crate (packed, SIMD,
//! multithreaded). Arbitrary row/column strides let transposed operands (Gemm's transA/transB,
//! MatMul on transposed views) run without a copy.

use gemm::Parallelism;

use super::error::{KernelError, KernelResult};
use super::float::Float;

const OP: &str = "Gemm";

/// Element types the `gemm` crate computes in. Sealed: `gemm` dispatches on the concrete type and
/// panics on any other, so only types it supports may implement this.
pub trait GemmFloat: Float + sealed::Sealed {}
impl GemmFloat for f32 {}
impl GemmFloat for f64 {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// `C = alpha * A * B + beta * C` in `f32`. See [`gemm`].
#[allow(clippy::too_many_arguments)]
pub fn gemm_f32(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    a_strides: (isize, isize),
    b: &[f32],
    b_strides: (isize, isize),
    c: &mut [f32],
    c_strides: (isize, isize),
    alpha: f32,
    beta: f32,
    threads: usize,
) -> KernelResult<()> {
    gemm(
        m, n, k, a, a_strides, b, b_strides, c, c_strides, alpha, beta, threads,
    )
}

/// `C = alpha * A * B + beta * C`, with A `m x k`, B `k x n` and C `m x n`.
///
/// Element `(i, j)` of an operand with strides `(row, col)` is `slice[i * row + j * col]`, so
/// `(cols, 1)` is row-major and `(1, rows)` a transposed (column-major) matrix. Every element an
/// operand covers must lie inside its slice (a negative stride is only possible on an axis of
/// extent 1), and C's strides must not map two elements to one place. `beta == 0` means C is
/// write-only (NaNs in it do not propagate), as in BLAS. `k == 0` gives `C = beta * C`.
/// `threads <= 1` runs on the calling thread; more uses up to that many workers of the current
/// rayon pool for large products.
#[allow(clippy::too_many_arguments)]
pub fn gemm<T: GemmFloat>(
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    a_strides: (isize, isize),
    b: &[T],
    b_strides: (isize, isize),
    c: &mut [T],
    c_strides: (isize, isize),
    alpha: T,
    beta: T,
    threads: usize,
) -> KernelResult<()> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    check_operand("C", c.len(), m, n, c_strides)?;
    check_distinct(m, n, c_strides)?;
    if k == 0 {
        scale(m, n, c, c_strides, beta);
        return Ok(());
    }
    check_operand("A", a.len(), m, k, a_strides)?;
    check_operand("B", b.len(), k, n, b_strides)?;
    // More workers than the pool has buys nothing; a 1-thread pool means no parallelism.
    let threads = threads.min(rayon::current_num_threads());
    let parallelism = if threads <= 1 {
        Parallelism::None
    } else {
        Parallelism::Rayon(threads)
    };
    // SAFETY: `gemm::gemm` reads A at `i*a.0 + j*a.1` (i < m, j < k), B likewise over k x n,
    // and reads/writes C over m x n. `check_operand` proved every such offset lies in
    // `0..len` of its slice (computed in i128, so no overflow either), and `check_distinct`
    // proved C's elements are pairwise distinct, so its worker threads never write one place
    // twice. C is borrowed mutably, so it cannot alias A or B. `T` is f32 or f64 (sealed
    // `GemmFloat`), which `gemm` supports, so its type dispatch cannot panic.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            c_strides.1,
            c_strides.0,
            beta != T::ZERO,
            a.as_ptr(),
            a_strides.1,
            a_strides.0,
            b.as_ptr(),
            b_strides.1,
            b_strides.0,
            // The crate computes `dst = alpha * dst + beta * lhs * rhs`: its names are swapped.
            beta,
            alpha,
            false,
            false,
            false,
            parallelism,
        );
    }
    Ok(())
}

/// Checks that every element of a `rows x cols` strided operand lies inside `0..len`.
fn check_operand(
    operand: &'static str,
    len: usize,
    rows: usize,
    cols: usize,
    strides: (isize, isize),
) -> KernelResult<()> {
    let reach = |extent: usize, stride: isize| (extent as i128 - 1) * stride as i128;
    let (r, c) = (reach(rows, strides.0), reach(cols, strides.1));
    let lowest = r.min(0) + c.min(0);
    let highest = r.max(0) + c.max(0);
    let fail = |reason: String| KernelError::InvalidLayout {
        op: OP,
        operand,
        rows,
        cols,
        strides,
        reason,
    };
    if lowest < 0 {
        return Err(fail(format!(
            "reaches offset {lowest}, before the start of its slice (negative strides need extent 1)"
        )));
    }
    if highest >= len as i128 {
        return Err(fail(format!(
            "reaches offset {highest} but its slice has {len} elements"
        )));
    }
    Ok(())
}

/// Checks that distinct `(i, j)` of the output map to distinct offsets: along the axes of extent
/// > 1, sorted by stride, each stride must step over the whole span of the smaller one.
fn check_distinct(rows: usize, cols: usize, strides: (isize, isize)) -> KernelResult<()> {
    let mut axes = [
        (rows, strides.0.unsigned_abs()),
        (cols, strides.1.unsigned_abs()),
    ];
    axes.sort_by_key(|&(_, s)| s);
    let mut span = 1usize; // offsets covered so far, exclusive
    for (extent, stride) in axes {
        if extent <= 1 {
            continue;
        }
        if stride < span {
            return Err(KernelError::InvalidLayout {
                op: OP,
                operand: "C",
                rows,
                cols,
                strides,
                reason: "maps distinct output elements to the same offset".into(),
            });
        }
        span = stride.saturating_mul(extent - 1).saturating_add(span);
    }
    Ok(())
}

/// `C = beta * C` for `k == 0`; with `beta == 0`, C is overwritten with zeros (never read).
fn scale<T: Float>(m: usize, n: usize, c: &mut [T], strides: (isize, isize), beta: T) {
    for i in 0..m {
        for j in 0..n {
            // Offsets were checked non-negative and in bounds by `check_operand`.
            let at = (i as isize * strides.0 + j as isize * strides.1) as usize;
            c[at] = if beta == T::ZERO {
                T::ZERO
            } else {
                beta * c[at]
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{assert_close, Rng};

    /// Where an operand's elements live: row-major, column-major (transposed), or with a padded
    /// leading dimension.
    #[derive(Clone, Copy, Debug)]
    enum Layout {
        RowMajor,
        ColMajor,
        PaddedRows(usize),
        PaddedCols(usize),
    }

    impl Layout {
        fn pick(rng: &mut Rng) -> Self {
            match rng.below(4) {
                0 => Layout::RowMajor,
                1 => Layout::ColMajor,
                2 => Layout::PaddedRows(1 + rng.below(3)),
                _ => Layout::PaddedCols(1 + rng.below(3)),
            }
        }

        /// (strides, slice length) for a rows x cols matrix.
        fn strides(self, rows: usize, cols: usize) -> ((isize, isize), usize) {
            let (r, c) = (rows as isize, cols as isize);
            match self {
                Layout::RowMajor => ((c, 1), rows * cols),
                Layout::ColMajor => ((1, r), rows * cols),
                Layout::PaddedRows(p) => ((c + p as isize, 1), rows * (cols + p)),
                Layout::PaddedCols(p) => ((1, r + p as isize), cols * (rows + p)),
            }
        }
    }

    fn at(s: &[f32], st: (isize, isize), i: usize, j: usize) -> f32 {
        s[(i as isize * st.0 + j as isize * st.1) as usize]
    }

    #[test]
    fn strided_gemm_matches_naive_reference() {
        let mut rng = Rng::new(0x6e3d);
        for case in 0..300 {
            let (m, n, k) = (rng.below(40), rng.below(40), rng.below(40));
            let (la, lb, lc) = (
                Layout::pick(&mut rng),
                Layout::pick(&mut rng),
                Layout::pick(&mut rng),
            );
            let (sa, len_a) = la.strides(m, k);
            let (sb, len_b) = lb.strides(k, n);
            let (sc, len_c) = lc.strides(m, n);
            let a = rng.vec(len_a);
            let b = rng.vec(len_b);
            let c0 = rng.vec(len_c);
            let alpha = [1.0, 0.5, -2.0][rng.below(3)];
            let beta = [0.0, 1.0, 0.25][rng.below(3)];
            let threads = 1 + rng.below(2);

            let mut expected = c0.clone();
            for i in 0..m {
                for j in 0..n {
                    let dot: f64 = (0..k)
                        .map(|p| at(&a, sa, i, p) as f64 * at(&b, sb, p, j) as f64)
                        .sum();
                    let idx = (i as isize * sc.0 + j as isize * sc.1) as usize;
                    expected[idx] = (alpha as f64 * dot + beta as f64 * c0[idx] as f64) as f32;
                }
            }
            let mut c = c0.clone();
            gemm_f32(m, n, k, &a, sa, &b, sb, &mut c, sc, alpha, beta, threads).unwrap();
            assert_close(
                &c,
                &expected,
                &format!("case {case}: m{m} n{n} k{k} {la:?} {lb:?} {lc:?}"),
            );
        }
    }

    #[test]
    fn large_gemm_multithreaded_matches_single_threaded() {
        let mut rng = Rng::new(7);
        let (m, n, k) = (130, 97, 211);
        let (a, b) = (rng.vec(m * k), rng.vec(k * n));
        let (row, col) = ((k as isize, 1), (1, k as isize));
        let product = |threads: usize| {
            let mut c = vec![0.0; m * n];
            gemm_f32(
                m,
                n,
                k,
                &a,
                row,
                &b,
                col,
                &mut c,
                (n as isize, 1),
                1.0,
                0.0,
                threads,
            )
            .unwrap();
            c
        };
        let c1 = product(1);
        assert_close(&product(2), &c1, "2 threads");
        assert_close(&product(usize::MAX), &c1, "more threads than the pool");
        // B with strides (1, k) is B^T stored row-major: check one element by hand.
        let dot: f32 = (0..k).map(|p| a[3 * k + p] * b[5 * k + p]).sum();
        assert!((c1[3 * n + 5] - dot).abs() < 1e-4 * dot.abs().max(1.0));
    }

    #[test]
    fn k_zero_scales_c_by_beta() {
        let mut c = vec![1.0, 2.0, 3.0, 4.0];
        gemm_f32(
            2,
            2,
            0,
            &[],
            (0, 1),
            &[],
            (2, 1),
            &mut c,
            (2, 1),
            1.0,
            0.5,
            1,
        )
        .unwrap();
        assert_eq!(c, [0.5, 1.0, 1.5, 2.0]);
        let mut c = vec![f32::NAN; 4];
        gemm_f32(
            2,
            2,
            0,
            &[],
            (0, 1),
            &[],
            (2, 1),
            &mut c,
            (2, 1),
            1.0,
            0.0,
            1,
        )
        .unwrap();
        assert_eq!(c, [0.0; 4]);
    }

    #[test]
    fn beta_zero_does_not_read_c() {
        let a = [1.0, 2.0, 3.0, 4.0];
        let b = [1.0, 0.0, 0.0, 1.0];
        let mut c = [f32::NAN; 4];
        gemm_f32(2, 2, 2, &a, (2, 1), &b, (2, 1), &mut c, (2, 1), 2.0, 0.0, 1).unwrap();
        assert_eq!(c, [2.0, 4.0, 6.0, 8.0]);
    }

    #[test]
    fn empty_products_touch_nothing() {
        let mut c: [f32; 0] = [];
        gemm_f32(
            0,
            5,
            3,
            &[],
            (3, 1),
            &[0.0; 15],
            (5, 1),
            &mut c,
            (5, 1),
            1.0,
            0.0,
            1,
        )
        .unwrap();
        gemm_f32(
            4,
            0,
            3,
            &[0.0; 12],
            (3, 1),
            &[],
            (0, 1),
            &mut c,
            (0, 1),
            1.0,
            0.0,
            1,
        )
        .unwrap();
    }

    #[test]
    fn out_of_bounds_and_overlapping_layouts_are_rejected() {
        let a = [0.0f32; 6];
        let b = [0.0f32; 6];
        let mut c = [0.0f32; 4];
        let err = gemm_f32(
            2,
            2,
            3,
            &a[..5],
            (3, 1),
            &b,
            (2, 1),
            &mut c,
            (2, 1),
            1.0,
            0.0,
            1,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Gemm: operand A (2x3, strides (3, 1)) reaches offset 5 but its slice has 5 elements"
        );
        let err = gemm_f32(
            2,
            2,
            3,
            &a,
            (-3, 1),
            &b,
            (2, 1),
            &mut c,
            (2, 1),
            1.0,
            0.0,
            1,
        )
        .unwrap_err();
        assert!(err.to_string().contains("before the start"), "{err}");
        let err =
            gemm_f32(2, 2, 3, &a, (3, 1), &b, (2, 1), &mut c, (0, 1), 1.0, 0.0, 1).unwrap_err();
        assert!(err.to_string().contains("same offset"), "{err}");
        let err =
            gemm_f32(2, 2, 3, &a, (3, 1), &b, (2, 1), &mut c, (1, 1), 1.0, 0.0, 1).unwrap_err();
        assert!(err.to_string().contains("same offset"), "{err}");
        // A stride-0 (broadcast) input is fine.
        gemm_f32(
            2,
            2,
            3,
            &a[..3],
            (0, 1),
            &b,
            (2, 1),
            &mut c,
            (2, 1),
            1.0,
            0.0,
            1,
        )
        .unwrap();
        // Huge strides do not overflow the check.
        let err = gemm_f32(
            2,
            2,
            3,
            &a,
            (isize::MAX, 1),
            &b,
            (2, 1),
            &mut c,
            (2, 1),
            1.0,
            0.0,
            1,
        )
        .unwrap_err();
        assert!(err.to_string().contains("reaches offset"), "{err}");
    }

    #[test]
    fn f64_goes_through_the_same_path() {
        let a = [1.0f64, 2.0, 3.0, 4.0];
        let mut c = [0.0f64; 4];
        gemm(2, 2, 2, &a, (2, 1), &a, (1, 2), &mut c, (2, 1), 1.0, 0.0, 1).unwrap();
        assert_eq!(c, [5.0, 11.0, 11.0, 25.0]);
    }
}
