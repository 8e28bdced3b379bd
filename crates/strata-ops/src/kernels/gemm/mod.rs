//! General matrix multiply over strided slices: our own BLIS-style GEMM for f32 and f64.
//!
//! Operands are packed block by block into aligned thread-local buffers ([`pack`]), the product
//! of each packed block pair is computed by a register-blocked microkernel ([`microkernel`],
//! [`x86`]) under cache blocking ([`driver`]), and blocks of C are spread over the intra-op pool
//! when asked. Products with at most four rows or columns of C skip packing and stream the
//! operands ([`skinny`]). The microkernel is chosen at run time: AVX-512F, else AVX2+FMA on x86_64, else a
//! portable kernel that the compiler vectorizes (what other targets use). Arbitrary row/column
//! strides let transposed operands (Gemm's transA/transB, MatMul on transposed views) run
//! without a copy. In steady state a product allocates nothing.

mod driver;
#[cfg(test)]
mod fused_tests;
mod microkernel;
mod pack;
mod prepacked;
mod produced;
mod skinny;
mod skinny_packed;
#[cfg(target_arch = "x86_64")]
mod x86;

use bytemuck::Pod;

pub(crate) use self::driver::MatMut;
use self::driver::Problem;
pub use self::driver::{Epilogue, FusedEpilogue};
pub use self::microkernel::FusedAct;
use self::microkernel::{Microkernel, Portable};
pub(crate) use self::pack::with_pack_buffers;
use self::pack::MatRef;
pub(crate) use self::prepacked::{
    gemm_packed_a, gemm_prepacked_produced_b, gemm_prepacked_split_depth, packed_a_rows,
};
pub use self::prepacked::{gemm_prepacked, gemm_prepacked_with, PackedOperand, Prepacked};
pub use self::produced::{gemm_produced_b, pack_transposed_sliver, BBlock, ProduceB};
use super::error::{KernelError, KernelResult};
use super::float::Float;

const OP: &str = "Gemm";

/// Element types our GEMM computes in (f32 and f64). Sealed: each type carries its own set of
/// microkernels.
pub trait GemmFloat: Float + Pod + sealed::Sealed {}
impl GemmFloat for f32 {}
impl GemmFloat for f64 {}

mod sealed {
    use super::driver::Problem;
    use super::isa::Isa;

    pub trait Sealed: Sized {
        /// Runs a validated product with the microkernel for `isa` (the portable one when
        /// `isa` is not available on this CPU).
        fn dispatch(p: &Problem<'_, Self>, isa: Isa, threads: usize);

        /// The register tile (`MR`, `NR`) [`Sealed::dispatch`] uses for a product of `m` rows.
        fn tiles(m: usize, isa: Isa) -> (usize, usize);

        /// The register tile (`MR`, `NR`) of `isa`'s narrow microkernel, if it has one: a B of
        /// at most `NR` columns (narrower than [`Sealed::tiles`]' `NR`) is packed for it at
        /// plan time, so that its tiles do not compute mostly padding.
        fn narrow_tiles(isa: Isa) -> Option<(usize, usize)>;

        /// Runs a validated product whose B is packed in slivers of the narrow microkernel's
        /// `NR` (see [`Sealed::narrow_tiles`]).
        fn dispatch_narrow(p: &Problem<'_, Self>, isa: Isa, threads: usize);
    }
}

/// Which microkernels a product runs with.
mod isa {
    /// An instruction set the GEMM has microkernels for.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Isa {
        /// Plain Rust, vectorized by the compiler for the build target.
        Portable,
        /// x86_64 AVX2 and FMA.
        Avx2,
        /// x86_64 AVX-512F.
        Avx512,
    }

    impl Isa {
        /// The fastest instruction set this CPU has.
        pub fn detect() -> Isa {
            [Isa::Avx512, Isa::Avx2]
                .into_iter()
                .find(|isa| isa.is_available())
                .unwrap_or(Isa::Portable)
        }

        /// Whether this CPU can run the instruction set (checked at run time).
        pub fn is_available(self) -> bool {
            match self {
                Isa::Portable => true,
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => {
                    std::arch::is_x86_feature_detected!("avx2")
                        && std::arch::is_x86_feature_detected!("fma")
                }
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
                #[cfg(not(target_arch = "x86_64"))]
                Isa::Avx2 | Isa::Avx512 => false,
            }
        }
    }
}

use self::isa::Isa;

/// The tallest register tile of any microkernel: callers that pack A themselves
/// ([`gemm_packed_a`]) size their buffers for slivers of up to this many rows.
pub(crate) const MAX_TILE_ROWS: usize = 16;

/// Generates the per-type dispatch: `$avx512` / `$avx2` / `$portable` are the microkernels. The
/// AVX-512 list offers several register-tile heights; [`tile_rows`] picks the one that wastes
/// the least on the product's row count.
macro_rules! dispatch {
    (
        $t:ty,
        avx512 = [$tallest:ty $(, $avx512:ty)*],
        $(avx512_narrow = $narrow:ty,)?
        avx2 = $avx2:ty,
        portable = $portable:ty
    ) => {
        // The AVX-512 heights are listed tallest first.
        #[cfg(target_arch = "x86_64")]
        const _: () = assert!(
            <$tallest as Microkernel<$t>>::MR <= MAX_TILE_ROWS
                && <$avx2 as Microkernel<$t>>::MR <= MAX_TILE_ROWS
        );
        const _: () = assert!(<$portable as Microkernel<$t>>::MR <= MAX_TILE_ROWS);

        impl sealed::Sealed for $t {
            fn tiles(m: usize, isa: Isa) -> (usize, usize) {
                let isa = if isa.is_available() {
                    isa
                } else {
                    Isa::Portable
                };
                match isa {
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx512 => {
                        let heights = [
                            <$tallest as Microkernel<$t>>::MR,
                            $(<$avx512 as Microkernel<$t>>::MR),*
                        ];
                        (tile_rows(m, &heights), <$tallest as Microkernel<$t>>::NR)
                    }
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx2 => (
                        <$avx2 as Microkernel<$t>>::MR,
                        <$avx2 as Microkernel<$t>>::NR,
                    ),
                    _ => (
                        <$portable as Microkernel<$t>>::MR,
                        <$portable as Microkernel<$t>>::NR,
                    ),
                }
            }

            fn narrow_tiles(isa: Isa) -> Option<(usize, usize)> {
                #[cfg(target_arch = "x86_64")]
                if isa == Isa::Avx512 && isa.is_available() {
                    $(
                        return Some((
                            <$narrow as Microkernel<$t>>::MR,
                            <$narrow as Microkernel<$t>>::NR,
                        ));
                    )?
                }
                let _ = isa;
                None
            }

            fn dispatch_narrow(p: &Problem<'_, Self>, isa: Isa, threads: usize) {
                #[cfg(target_arch = "x86_64")]
                if isa == Isa::Avx512 && isa.is_available() {
                    $(
                        // SAFETY: `gemm` validated the operands (see `run`'s contract), B is
                        // packed in this kernel's slivers (the caller's contract), and
                        // AVX-512F was detected on this CPU just above.
                        return unsafe { driver::run::<$t, $narrow>(p, threads) };
                    )?
                }
                Self::dispatch(p, isa, threads)
            }

            fn dispatch(p: &Problem<'_, Self>, isa: Isa, threads: usize) {
                let isa = if isa.is_available() {
                    isa
                } else {
                    Isa::Portable
                };
                match isa {
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx512 => {
                        let heights = [
                            <$tallest as Microkernel<$t>>::MR,
                            $(<$avx512 as Microkernel<$t>>::MR),*
                        ];
                        let rows = tile_rows(p.m, &heights);
                        $(
                            if rows == <$avx512 as Microkernel<$t>>::MR {
                                // SAFETY: `gemm` validated the operands (see `run`'s contract),
                                // and AVX-512F was detected on this CPU just above.
                                return unsafe { driver::run::<$t, $avx512>(p, threads) };
                            }
                        )*
                        // SAFETY: as above.
                        unsafe { driver::run::<$t, $tallest>(p, threads) }
                    }
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: as above, with AVX2 and FMA detected.
                    Isa::Avx2 => unsafe { driver::run::<$t, $avx2>(p, threads) },
                    // SAFETY: as above; the portable kernel needs no CPU feature.
                    _ => unsafe { driver::run::<$t, $portable>(p, threads) },
                }
            }
        }
    };
}

dispatch!(
    f32,
    avx512 = [
        x86::Avx512F32<14>,
        x86::Avx512F32<13>,
        x86::Avx512F32<11>,
        x86::Avx512F32<8>
    ],
    avx512_narrow = x86::Avx512F32Narrow<16>,
    avx2 = x86::Avx2F32<6>,
    portable = Portable<4, 8>
);
dispatch!(
    f64,
    avx512 = [x86::Avx512F64<14>, x86::Avx512F64<8>],
    avx2 = x86::Avx2F64<6>,
    portable = Portable<4, 4>
);

/// The register-tile height (one of `heights`, largest first) for a product with `m` rows: a
/// tile always computes all its rows, so 32 rows in tiles of 14 compute 42. Each tile also pays
/// a fixed cost (loading B, the loop, storing C) worth about two rows, so the smallest
/// `tiles * (height + 2)` wins; ties go to the taller tile.
fn tile_rows(m: usize, heights: &[usize]) -> usize {
    let cost = |h: usize| m.div_ceil(h) * (h + 2);
    heights
        .iter()
        .copied()
        .reduce(|best, h| if cost(h) < cost(best) { h } else { best })
        .unwrap_or(1)
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
/// intra-op pool for large products. Allocates nothing once the calling thread (or each worker)
/// has run a product of this size before.
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
    gemm_with_isa(
        Isa::detect(),
        m,
        n,
        k,
        a,
        a_strides,
        b,
        b_strides,
        c,
        c_strides,
        alpha,
        beta,
        threads,
    )
}

/// [`gemm`] with the microkernels of `isa` (the portable ones where it is not available).
#[allow(clippy::too_many_arguments)]
fn gemm_with_isa<T: GemmFloat>(
    isa: Isa,
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
    let problem = Problem {
        m,
        n,
        k,
        a: MatRef {
            data: a,
            rs: a_strides.0,
            cs: a_strides.1,
        },
        b: MatRef {
            data: b,
            rs: b_strides.0,
            cs: b_strides.1,
        },
        // `c` stays mutably borrowed until the product returns, so nothing else touches it and
        // it cannot alias A or B.
        c: MatMut::of(c, c_strides),
        alpha,
        beta,
        packed_a: None,
        packed_b: None,
        produce_b: None,
        epilogue: None,
        fused: None,
        depth_split: None,
    };
    // One to four rows (or columns) of C: stream B, do not pack it.
    // SAFETY: the operands were validated above, and `c` stays mutably borrowed throughout.
    if unsafe { skinny::try_run(&problem, threads) } {
        return Ok(());
    }
    // SAFETY: as above, for the same product transposed.
    if n <= skinny::MAX_ROWS && unsafe { skinny::try_run(&problem.transposed(), threads) } {
        return Ok(());
    }
    // The microkernels write whole rows of a tile with vector stores when C's columns are
    // contiguous; when its rows are instead, compute the transposed product. A single column
    // is also better computed as a single row: a register tile is wider than it is tall.
    let (rs, cs) = (c_strides.0, c_strides.1);
    if m > 1 && ((n > 1 && cs != 1 && rs == 1) || n == 1) {
        T::dispatch(&problem.transposed(), isa, threads);
    } else {
        T::dispatch(&problem, isa, threads);
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
    use crate::support::rng::Rng;
    use crate::support::test_util::assert_close_within;

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

    /// The instruction sets this CPU can run, the portable one always first.
    fn available_isas() -> Vec<Isa> {
        [Isa::Portable, Isa::Avx2, Isa::Avx512]
            .into_iter()
            .filter(|isa| isa.is_available())
            .collect()
    }

    /// Runs one random product of the given size through `isa` and checks it against a naive
    /// f64 reference: random layouts for every operand, random alpha and beta, and with
    /// `beta == 0` a C full of NaN (which must not leak through). Elements of C's slice outside
    /// the matrix (padding) must be left alone.
    #[allow(clippy::too_many_arguments)]
    fn check_random_case<T: GemmFloat + Into<f64>>(
        rng: &mut Rng,
        isa: Isa,
        m: usize,
        n: usize,
        k: usize,
        threads: usize,
        tolerance: f64,
        what: &str,
    ) {
        let (la, lb, lc) = (Layout::pick(rng), Layout::pick(rng), Layout::pick(rng));
        let (sa, len_a) = la.strides(m, k);
        let (sb, len_b) = lb.strides(k, n);
        let (sc, len_c) = lc.strides(m, n);
        let data =
            |rng: &mut Rng, len| -> Vec<T> { rng.vec(len).into_iter().map(T::from_f32).collect() };
        let a = data(rng, len_a);
        let b = data(rng, len_b);
        let alpha = [1.0, 0.5, -2.0][rng.below(3)];
        let beta = [0.0, 1.0, 0.25][rng.below(3)];
        let mut c0 = data(rng, len_c);
        if beta == 0.0 {
            for i in 0..m {
                for j in 0..n {
                    c0[(i as isize * sc.0 + j as isize * sc.1) as usize] = T::from_f32(f32::NAN);
                }
            }
        }
        let get = |s: &[T], st: (isize, isize), i: usize, j: usize| -> f64 {
            s[(i as isize * st.0 + j as isize * st.1) as usize].into()
        };
        let mut expected: Vec<f64> = c0.iter().map(|&x| x.into()).collect();
        for i in 0..m {
            for j in 0..n {
                let dot: f64 = (0..k).map(|p| get(&a, sa, i, p) * get(&b, sb, p, j)).sum();
                let at = (i as isize * sc.0 + j as isize * sc.1) as usize;
                expected[at] = alpha as f64 * dot
                    + if beta == 0.0 {
                        0.0
                    } else {
                        beta as f64 * expected[at]
                    };
            }
        }
        let mut c = c0.clone();
        gemm_with_isa(
            isa,
            m,
            n,
            k,
            &a,
            sa,
            &b,
            sb,
            &mut c,
            sc,
            T::from_f32(alpha),
            T::from_f32(beta),
            threads,
        )
        .unwrap();
        for (at, (&got, &want)) in c.iter().zip(&expected).enumerate() {
            let got: f64 = got.into();
            let ok = (got.is_nan() && want.is_nan())
                || (got - want).abs() <= tolerance * want.abs().max(1.0);
            assert!(
                ok,
                "{what} {isa:?}: m{m} n{n} k{k} {la:?} {lb:?} {lc:?} alpha {alpha} beta {beta} \
                 threads {threads}: element {at}: got {got}, expected {want}"
            );
        }
    }

    #[test]
    fn every_microkernel_matches_naive_reference_on_small_strided_cases() {
        for isa in available_isas() {
            let mut rng = Rng::new(0x51ab);
            for _ in 0..200 {
                let (m, n, k) = (rng.below(40), rng.below(40), rng.below(40));
                let threads = 1 + rng.below(2);
                check_random_case::<f32>(&mut rng, isa, m, n, k, threads, 1e-4, "f32");
                check_random_case::<f64>(&mut rng, isa, m, n, k, threads, 1e-10, "f64");
            }
        }
    }

    /// Sizes just below, at and above the register tiles (MR 4/6/14, NR 4/8/16/32) and the cache
    /// blocks (KC 128/256, NC 256/512) of every microkernel.
    #[test]
    fn every_microkernel_matches_naive_reference_around_block_boundaries() {
        const MS: [usize; 10] = [1, 3, 4, 5, 6, 7, 13, 14, 15, 29];
        const NS: [usize; 16] = [1, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 255, 257, 512, 513];
        const KS: [usize; 9] = [1, 2, 127, 128, 129, 255, 256, 257, 513];
        for isa in available_isas() {
            let mut rng = Rng::new(0xb10c);
            for case in 0..120 {
                let m = MS[rng.below(MS.len())];
                let n = NS[rng.below(NS.len())];
                let k = KS[rng.below(KS.len())];
                // Mostly one thread; a few cases through the parallel split too.
                let threads = if case % 8 == 0 { 2 } else { 1 };
                check_random_case::<f32>(&mut rng, isa, m, n, k, threads, 2e-4, "f32");
                check_random_case::<f64>(&mut rng, isa, m, n, k, threads, 1e-10, "f64");
            }
            // Larger than one block in every direction, serial and split over threads.
            for threads in [1, 2, 3] {
                check_random_case::<f32>(&mut rng, isa, 131, 1050, 300, threads, 2e-4, "big f32");
            }
            check_random_case::<f64>(&mut rng, isa, 70, 530, 270, 2, 1e-10, "big f64");
        }
    }

    /// Products whose last column tile is at most half a register tile wide (AVX-512 f32 runs
    /// those with its 16-wide kernel), at every tile height, serial and split over threads.
    #[test]
    fn narrow_last_column_tiles_match_naive_reference() {
        for isa in available_isas() {
            let mut rng = Rng::new(0x4a1f);
            for m in [8, 11, 13, 14, 28, 49] {
                for n in [33, 41, 48, 69, 196] {
                    for threads in [1, 2] {
                        let k = [1, 17, 300][rng.below(3)];
                        check_random_case::<f32>(&mut rng, isa, m, n, k, threads, 2e-4, "f32");
                    }
                }
            }
        }
    }

    /// One to four rows or columns of C, long enough to be split into several column blocks
    /// and over threads, in random layouts (some stream, some fall back to packing).
    #[test]
    fn skinny_products_match_naive_reference_serial_and_threaded() {
        let mut rng = Rng::new(0x5c1);
        for (m, n, k) in [(1, 1000, 700), (4, 777, 300), (900, 1, 333), (1000, 3, 64)] {
            for threads in [1, 2] {
                check_random_case::<f32>(&mut rng, Isa::detect(), m, n, k, threads, 2e-4, "f32");
                check_random_case::<f64>(&mut rng, Isa::detect(), m, n, k, threads, 1e-10, "f64");
            }
        }
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
            assert_close_within(
                &c,
                &expected,
                1e-4,
                &format!("case {case}: m{m} n{n} k{k} {la:?} {lb:?} {lc:?}"),
            );
        }
    }

    #[test]
    fn large_gemm_multithreaded_matches_single_threaded() {
        let mut rng = Rng::new(7);
        // More rows than columns splits the rows over the threads, the other way the columns
        // (a block of 61 rows is five register tiles).
        for (m, n, k) in [(130, 97, 211), (61, 300, 100)] {
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
            // On pools of 2 and 3 threads the odd column blocks walk their row slivers from
            // the middle.
            for threads in [2, 3] {
                let pool = crate::parallel::ThreadPool::new(threads).unwrap();
                let c = crate::parallel::install(&pool, || product(threads));
                assert_close_within(&c, &c1, 1e-4, &format!("{m}x{n}, {threads} threads"));
            }
            assert_close_within(
                &product(usize::MAX),
                &c1,
                1e-4,
                "more threads than the pool",
            );
            // B with strides (1, k) is B^T stored row-major: check one element by hand.
            let dot: f32 = (0..k).map(|p| a[3 * k + p] * b[5 * k + p]).sum();
            assert!((c1[3 * n + 5] - dot).abs() < 1e-4 * dot.abs().max(1.0));
        }
    }

    #[test]
    fn tile_height_fits_the_row_count() {
        let heights = [14, 13, 11, 8];
        assert_eq!(tile_rows(32, &heights), 11); // 3 tiles of 11, not 3 of 14
        assert_eq!(tile_rows(64, &heights), 13); // 5 tiles of 13
        assert_eq!(tile_rows(8, &heights), 8);
        assert_eq!(tile_rows(1, &heights), 8);
        assert_eq!(tile_rows(14, &heights), 14);
        assert_eq!(tile_rows(28, &heights), 14);
        assert_eq!(tile_rows(1000, &[14]), 14);
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
