//! x86_64 microkernels: AVX-512F and AVX2+FMA, for f32 and f64.
//!
//! Each keeps an `MR x (2 vectors)` tile of C in registers: per step of `k` it loads one packed
//! row of B (two vectors), broadcasts the `MR` packed elements of A's column and issues
//! `2 * MR` fused multiply-adds. AVX-512 has 32 vector registers (`MR` up to 14 fits with the
//! two B vectors and a broadcast), AVX2 has 16 (`MR = 6`).
//!
//! The kernels are compiled with `#[target_feature]` and must only be called once the features
//! were detected at run time; [`super::Isa`] does that.

use std::arch::x86_64::*;

use super::microkernel::{store_tile, FusedAct, Microkernel, Prefetch, Tile, TileEpilogue};
use super::pack::{pack_block, MatRef};

/// Generates a microkernel marker type `$name<MR>` over element `$t` whose register tile is `MR`
/// rows by `$vectors` vectors of `$lanes` lanes, compiled with `$feature`.
macro_rules! simd_microkernel {
    (
        $(#[$doc:meta])*
        $name:ident, $module:ident, $t:ty, feature = $feature:literal,
        lanes = $lanes:literal, vectors = $vectors:literal, kc = $kc:literal, nc = $nc:literal,
        zero = $zero:ident, splat = $splat:ident, load = $load:ident, store = $store:ident,
        fmadd = $fmadd:ident, mul = $mul:ident, add = $add:ident, max = $max:ident,
        min = $min:ident, leaky = $leaky:ident $(,)?
    ) => {
        pub use $module::$name;

        mod $module {
            use super::*;

            const LANES: usize = $lanes;
            const VECTORS: usize = $vectors;
            const NR: usize = LANES * VECTORS;

            $(#[$doc])*
            #[derive(Clone, Copy, Debug)]
            pub struct $name<const MR: usize>;

            impl<const MR: usize> Microkernel<$t> for $name<MR> {
                const MR: usize = MR;
                const NR: usize = NR;
                const KC: usize = $kc;
                const NC: usize = $nc;

                fn pack_a(
                    dst: &mut [$t],
                    a: MatRef<'_, $t>,
                    i0: usize,
                    rows: usize,
                    p0: usize,
                    kc: usize,
                ) -> usize {
                    pack_block::<$t, MR>(dst, a.t(), p0, kc, i0, rows)
                }

                fn pack_b(
                    dst: &mut [$t],
                    b: MatRef<'_, $t>,
                    p0: usize,
                    kc: usize,
                    j0: usize,
                    cols: usize,
                ) -> usize {
                    pack_block::<$t, NR>(dst, b, p0, kc, j0, cols)
                }

                #[inline]
                unsafe fn run(
                    k: usize,
                    a: *const $t,
                    b: (*const $t, usize),
                    c: &Tile<$t>,
                    alpha: $t,
                    beta: $t,
                    prefetch: Prefetch<$t>,
                    epilogue: Option<&TileEpilogue<$t>>,
                ) {
                    // SAFETY: the caller upholds `Microkernel::run`'s contract, which is
                    // `kernel`'s: buffer extents, exclusive access to the tile, the epilogue's
                    // parts, and the CPU features (this type is only chosen after run-time
                    // detection).
                    unsafe { kernel::<MR>(k, a, b, c, alpha, beta, prefetch, epilogue) }
                }
            }

            /// # Safety
            /// As [`Microkernel::run`]: `a` holds `k * MR` elements, `b + p * b_stride` `NR`
            /// for each `p < k`, the tile is valid and exclusively ours, the epilogue's parts
            /// are readable for it, and the CPU has the enabled features.
            #[allow(clippy::too_many_arguments)]
            #[target_feature(enable = $feature)]
            unsafe fn kernel<const MR: usize>(
                k: usize,
                a: *const $t,
                (b, b_stride): (*const $t, usize),
                c: &Tile<$t>,
                alpha: $t,
                beta: $t,
                prefetch: Prefetch<$t>,
                epilogue: Option<&TileEpilogue<$t>>,
            ) {
                let mut acc = [[$zero(); VECTORS]; MR];
                let (mut a, mut b) = (a, b);
                // The last byte of a prefetch run: a second line when a run spans two.
                let span_end = (prefetch.span * std::mem::size_of::<$t>()).max(1) - 1;
                let mut ahead = prefetch.ptr.cast::<i8>();
                for _ in 0..k {
                    // Hints only (never faults): the next sliver of a prepacked operand.
                    _mm_prefetch::<_MM_HINT_T0>(ahead);
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(span_end));
                    ahead = ahead.wrapping_add(prefetch.step * std::mem::size_of::<$t>());
                    let mut row = [$zero(); VECTORS];
                    for (v, lane) in row.iter_mut().enumerate() {
                        // SAFETY: `b` points at a row of NR elements of B (one of the `k` rows
                        // the caller guarantees), and `v * LANES + LANES <= NR`.
                        *lane = unsafe { $load(b.add(v * LANES)) };
                    }
                    for (i, acc_row) in acc.iter_mut().enumerate() {
                        // SAFETY: `a` points at a packed column of MR elements (one of the `k`
                        // columns the caller guarantees), and `i < MR`.
                        let x = $splat(unsafe { *a.add(i) });
                        for (sum, &w) in acc_row.iter_mut().zip(&row) {
                            *sum = $fmadd(x, w, *sum);
                        }
                    }
                    // Past the end after the last step, but never dereferenced there.
                    a = a.wrapping_add(MR);
                    b = b.wrapping_add(b_stride);
                }

                if c.n == NR && c.cs == 1 {
                    // Whole rows, contiguous: vector read-modify-write of C (a last row sliver
                    // of fewer than MR rows too). The row loops run over all MR rows, testing
                    // `i < c.m`, so they unroll and the sums stay in registers.
                    let alpha = $splat(alpha);
                    if let Some(e) = epilogue {
                        // Finish the sums in registers, one pass per part of the epilogue (a
                        // test per part, not per vector), in `TileEpilogue::finish_row`'s order
                        // and with its rounding.
                        for (i, acc_row) in acc.iter_mut().enumerate() {
                            let row = c.ptr.wrapping_offset(i as isize * c.rs);
                            for (v, sum) in acc_row.iter_mut().enumerate() {
                                *sum = $mul(*sum, alpha);
                                if beta != 0.0 && i < c.m {
                                    // SAFETY: elements (i, v * LANES..(v + 1) * LANES) of
                                    // the tile: i < c.m and the columns < NR = c.n with unit
                                    // stride, so the caller guarantees them readable.
                                    let old = unsafe { $load(row.wrapping_add(v * LANES)) };
                                    *sum = $fmadd($splat(beta), old, *sum);
                                }
                            }
                        }
                        if !e.residual.is_null() {
                            for (i, acc_row) in acc.iter_mut().enumerate() {
                                let r = e.residual.wrapping_offset(i as isize * e.residual_rs);
                                for (v, sum) in acc_row.iter_mut().enumerate() {
                                    if i < c.m {
                                        // SAFETY: row i < c.m, columns < NR = c.n of the
                                        // tile's residual, readable (caller).
                                        *sum = $add(*sum, unsafe { $load(r.add(v * LANES)) });
                                    }
                                }
                            }
                        }
                        if !e.row_bias.is_null() {
                            for (i, acc_row) in acc.iter_mut().enumerate() {
                                if i < c.m {
                                    // SAFETY: row i < c.m of the tile, readable (caller).
                                    let b = $splat(unsafe { *e.row_bias.add(i) });
                                    for sum in acc_row.iter_mut() {
                                        *sum = $add(*sum, b);
                                    }
                                }
                            }
                        }
                        if !e.col_bias.is_null() {
                            let mut b = [$zero(); VECTORS];
                            for (v, b) in b.iter_mut().enumerate() {
                                // SAFETY: columns < NR = c.n of the tile, readable (caller).
                                *b = unsafe { $load(e.col_bias.add(v * LANES)) };
                            }
                            for acc_row in acc.iter_mut() {
                                for (sum, &b) in acc_row.iter_mut().zip(&b) {
                                    *sum = $add(*sum, b);
                                }
                            }
                        }
                        // max/min return their second operand on a NaN or a tie, which is
                        // what the scalar comparisons do with the operands in this order.
                        match e.act {
                            FusedAct::None => {}
                            FusedAct::Relu => {
                                for x in acc.iter_mut().flatten() {
                                    *x = $max(*x, $zero());
                                }
                            }
                            FusedAct::Clip { lo, hi } => {
                                let (lo, hi) = ($splat(lo), $splat(hi));
                                for x in acc.iter_mut().flatten() {
                                    *x = $min(hi, $max(lo, *x));
                                }
                            }
                            FusedAct::LeakyRelu { alpha } => {
                                let alpha = $splat(alpha);
                                for x in acc.iter_mut().flatten() {
                                    // SAFETY: the CPU has the enabled features (caller).
                                    *x = unsafe { $leaky(*x, alpha) };
                                }
                            }
                        }
                        for (i, acc_row) in acc.iter().enumerate() {
                            let row = c.ptr.wrapping_offset(i as isize * c.rs);
                            for (v, &sum) in acc_row.iter().enumerate() {
                                if i < c.m {
                                    // SAFETY: elements (i < c.m, columns < NR = c.n) of the
                                    // tile, which the caller guarantees writable and
                                    // exclusively ours.
                                    unsafe { $store(row.wrapping_add(v * LANES), sum) };
                                }
                            }
                        }
                        return;
                    }
                    for (i, acc_row) in acc.iter().enumerate() {
                        let row = c.ptr.wrapping_offset(i as isize * c.rs);
                        for (v, &sum) in acc_row.iter().enumerate() {
                            if i >= c.m {
                                continue;
                            }
                            let at = row.wrapping_add(v * LANES);
                            let scaled = $mul(sum, alpha);
                            let out = if beta == 0.0 {
                                scaled
                            } else {
                                // SAFETY: elements (i, v * LANES..(v + 1) * LANES) of the tile:
                                // i < c.m and the columns < NR = c.n with unit stride, so the
                                // caller guarantees them readable.
                                $fmadd($splat(beta), unsafe { $load(at) }, scaled)
                            };
                            // SAFETY: the same elements, which the caller guarantees writable
                            // and exclusively ours.
                            unsafe { $store(at, out) };
                        }
                    }
                } else {
                    // Partial columns or strided ones: spill the registers, write row by row.
                    let mut tile = [[0.0 as $t; NR]; MR];
                    for (dst, acc_row) in tile.iter_mut().zip(&acc) {
                        for (v, &sum) in acc_row.iter().enumerate() {
                            // SAFETY: `dst` is a local row of NR elements and
                            // `v * LANES + LANES <= NR`.
                            unsafe { $store(dst.as_mut_ptr().add(v * LANES), sum) };
                        }
                    }
                    // SAFETY: forwarded from the caller's contract on `c`.
                    unsafe { store_tile(&tile, c, alpha, beta, epilogue) };
                }
            }
        }
    };
}

simd_microkernel! {
    /// AVX-512F, f32: `MR x 32` tile (two 16-lane vectors per row).
    Avx512F32, avx512_f32, f32, feature = "avx512f",
    lanes = 16, vectors = 2, kc = 256, nc = 512,
    zero = _mm512_setzero_ps, splat = _mm512_set1_ps, load = _mm512_loadu_ps,
    store = _mm512_storeu_ps, fmadd = _mm512_fmadd_ps, mul = _mm512_mul_ps, add = _mm512_add_ps,
    max = _mm512_max_ps, min = _mm512_min_ps, leaky = leaky_avx512_f32,
}

simd_microkernel! {
    /// AVX-512F, f64: `MR x 16` tile (two 8-lane vectors per row).
    Avx512F64, avx512_f64, f64, feature = "avx512f",
    lanes = 8, vectors = 2, kc = 128, nc = 512,
    zero = _mm512_setzero_pd, splat = _mm512_set1_pd, load = _mm512_loadu_pd,
    store = _mm512_storeu_pd, fmadd = _mm512_fmadd_pd, mul = _mm512_mul_pd, add = _mm512_add_pd,
    max = _mm512_max_pd, min = _mm512_min_pd, leaky = leaky_avx512_f64,
}

simd_microkernel! {
    /// AVX2 + FMA, f32: `MR x 16` tile (two 8-lane vectors per row).
    Avx2F32, avx2_f32, f32, feature = "avx2,fma",
    lanes = 8, vectors = 2, kc = 256, nc = 512,
    zero = _mm256_setzero_ps, splat = _mm256_set1_ps, load = _mm256_loadu_ps,
    store = _mm256_storeu_ps, fmadd = _mm256_fmadd_ps, mul = _mm256_mul_ps, add = _mm256_add_ps,
    max = _mm256_max_ps, min = _mm256_min_ps, leaky = leaky_avx2_f32,
}

simd_microkernel! {
    /// AVX2 + FMA, f64: `MR x 8` tile (two 4-lane vectors per row).
    Avx2F64, avx2_f64, f64, feature = "avx2,fma",
    lanes = 4, vectors = 2, kc = 256, nc = 256,
    zero = _mm256_setzero_pd, splat = _mm256_set1_pd, load = _mm256_loadu_pd,
    store = _mm256_storeu_pd, fmadd = _mm256_fmadd_pd, mul = _mm256_mul_pd, add = _mm256_add_pd,
    max = _mm256_max_pd, min = _mm256_min_pd, leaky = leaky_avx2_f64,
}

// LeakyRelu on one vector: `x >= 0 ? x : alpha * x`, as a multiply under the mask of the
// negative lanes (a NaN compares false and stays as it is, as in the scalar form).

/// # Safety
/// The CPU has AVX-512F.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn leaky_avx512_f32(x: __m512, alpha: __m512) -> __m512 {
    let negative = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_setzero_ps());
    _mm512_mask_mul_ps(x, negative, x, alpha)
}

/// # Safety
/// The CPU has AVX-512F.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn leaky_avx512_f64(x: __m512d, alpha: __m512d) -> __m512d {
    let negative = _mm512_cmp_pd_mask::<_CMP_LT_OQ>(x, _mm512_setzero_pd());
    _mm512_mask_mul_pd(x, negative, x, alpha)
}

/// # Safety
/// The CPU has AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn leaky_avx2_f32(x: __m256, alpha: __m256) -> __m256 {
    let negative = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_setzero_ps());
    _mm256_blendv_ps(x, _mm256_mul_ps(x, alpha), negative)
}

/// # Safety
/// The CPU has AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn leaky_avx2_f64(x: __m256d, alpha: __m256d) -> __m256d {
    let negative = _mm256_cmp_pd::<_CMP_LT_OQ>(x, _mm256_setzero_pd());
    _mm256_blendv_pd(x, _mm256_mul_pd(x, alpha), negative)
}
