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

// The fused epilogue's activation as a kernel's compile-time parameter.
const ACT_NONE: u8 = 0;
const ACT_RELU: u8 = 1;
const ACT_CLIP: u8 = 2;
const ACT_LEAKY: u8 = 3;

/// Runs `body` with `i` = 0, 1, .. `mr - 1` as constants (`mr` at most 16): the rows of a
/// register tile without a loop, so every `acc[i]` is a fixed register.
macro_rules! for_each_row {
    ($mr:expr, |$i:ident| $body:block) => {
        const { assert!($mr <= 16) };
        for_each_row!(@rows $mr, $i, $body, 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15);
    };
    (@rows $mr:expr, $i:ident, $body:block, $($row:literal)*) => {
        $(
            if $row < $mr {
                let $i: usize = $row;
                $body
            }
        )*
    };
}

/// Generates a microkernel marker type `$name<MR>` over element `$t` whose register tile is `MR`
/// rows by `$vectors` vectors of `$lanes` lanes, compiled with `$feature`.
macro_rules! simd_microkernel {
    (
        $(#[$doc:meta])*
        $name:ident, $module:ident, $t:ty, feature = $feature:literal,
        lanes = $lanes:literal, vectors = $vectors:literal, kc = $kc:literal, nc = $nc:literal,
        direct_b_rows = $direct_b_rows:literal,
        $(half = $half:ident,)?
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
                const DIRECT_B_MAX_ROWS: usize = $direct_b_rows;

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
                    a: (*const $t, usize),
                    b: (*const $t, usize),
                    c: &Tile<$t>,
                    alpha: $t,
                    beta: $t,
                    prefetch: Prefetch<$t>,
                    epilogue: Option<&TileEpilogue<$t>>,
                ) {
                    let args = Args { k, a, b, c, alpha, beta, prefetch };
                    // SAFETY: the caller upholds `Microkernel::run`'s contract, which is
                    // `kernel`'s: buffer extents, exclusive access to the tile, the epilogue's
                    // parts, and the CPU features (this type is only chosen after run-time
                    // detection).
                    unsafe {
                        match epilogue {
                            None => kernel::<MR, false, false, false, false, ACT_NONE>(
                                args,
                                &TileEpilogue::NONE,
                            ),
                            Some(e) => match e.act {
                                FusedAct::None => with_parts::<MR, ACT_NONE>(args, e),
                                FusedAct::Relu => with_parts::<MR, ACT_RELU>(args, e),
                                FusedAct::Clip { .. } => with_parts::<MR, ACT_CLIP>(args, e),
                                FusedAct::LeakyRelu { .. } => with_parts::<MR, ACT_LEAKY>(args, e),
                            },
                        }
                    }
                }

                $(
                    #[inline]
                    unsafe fn run_half(
                        k: usize,
                        a: (*const $t, usize),
                        b: (*const $t, usize),
                        c: &Tile<$t>,
                        alpha: $t,
                        beta: $t,
                        prefetch: Prefetch<$t>,
                    ) {
                        // SAFETY: the caller upholds `run_half`'s contract: `run`'s, with at
                        // most NR / 2 columns, which is the half-wide kernel's whole tile; it
                        // reads the NR / 2 elements of B per step this one would read first.
                        unsafe { super::$half::plain::<MR>(k, a, b, c, alpha, beta, prefetch) }
                    }
                )?
            }

            /// The kernel without an epilogue: what a kernel twice as wide runs on its narrow
            /// edge tiles ([`Microkernel::run_half`]; unused for the others).
            ///
            /// # Safety
            /// As [`Microkernel::run`] without an epilogue.
            #[allow(dead_code)]
            #[inline]
            pub(super) unsafe fn plain<const MR: usize>(
                k: usize,
                a: (*const $t, usize),
                b: (*const $t, usize),
                c: &Tile<$t>,
                alpha: $t,
                beta: $t,
                prefetch: Prefetch<$t>,
            ) {
                let args = Args { k, a, b, c, alpha, beta, prefetch };
                // SAFETY: forwarded from the caller, who ran feature detection for this type's
                // ISA (the wider kernel calling this has the same features).
                unsafe { kernel::<MR, false, false, false, false, ACT_NONE>(args, &TileEpilogue::NONE) }
            }

            /// A microkernel call's operands, passed on through the epilogue dispatch.
            #[derive(Clone, Copy)]
            struct Args<'t> {
                k: usize,
                a: (*const $t, usize),
                b: (*const $t, usize),
                c: &'t Tile<$t>,
                alpha: $t,
                beta: $t,
                prefetch: Prefetch<$t>,
            }

            /// The kernel compiled for the epilogue's parts (residual, row bias, column bias)
            /// and activation `ACT`: each combination is its own straight-line store pass.
            ///
            /// # Safety
            /// As [`kernel`].
            #[inline(always)]
            unsafe fn with_parts<const MR: usize, const ACT: u8>(
                args: Args<'_>,
                e: &TileEpilogue<$t>,
            ) {
                let parts = (
                    !e.residual.is_null(),
                    !e.row_bias.is_null(),
                    !e.col_bias.is_null(),
                );
                // SAFETY: forwarded from the caller.
                unsafe {
                    match parts {
                        (false, false, false) => kernel::<MR, true, false, false, false, ACT>(args, e),
                        (false, false, true) => kernel::<MR, true, false, false, true, ACT>(args, e),
                        (false, true, false) => kernel::<MR, true, false, true, false, ACT>(args, e),
                        (false, true, true) => kernel::<MR, true, false, true, true, ACT>(args, e),
                        (true, false, false) => kernel::<MR, true, true, false, false, ACT>(args, e),
                        (true, false, true) => kernel::<MR, true, true, false, true, ACT>(args, e),
                        (true, true, false) => kernel::<MR, true, true, true, false, ACT>(args, e),
                        (true, true, true) => kernel::<MR, true, true, true, true, ACT>(args, e),
                    }
                }
            }

            /// Computes the tile and stores it. With `FUSED`, the epilogue's parts (`RES`
            /// residual, `ROW` row bias, `COL` column bias, activation `ACT`) are compile-time
            /// choices, applied to each accumulator between its scaling and its store, so the
            /// accumulators go from registers to memory in one pass: loops over the accumulator
            /// array with run-time tests per part kept LLVM from unrolling them, and it spilled
            /// all `2 * MR` accumulators to the stack (MobileNetV2's 96 <- 16 expand 1x1 then
            /// ran 396 -> 458 us instead of faster).
            ///
            /// # Safety
            /// As [`Microkernel::run`]: `a + p * a_step` holds `MR` elements and
            /// `b + p * b_stride` `NR` for each `p < k`, the tile is valid and exclusively ours, the epilogue's parts
            /// are readable for it, and the CPU has the enabled features.
            #[target_feature(enable = $feature)]
            unsafe fn kernel<
                const MR: usize,
                const FUSED: bool,
                const RES: bool,
                const ROW: bool,
                const COL: bool,
                const ACT: u8,
            >(
                Args { k, a: (a, a_step), b: (b, b_stride), c, alpha, beta, prefetch }: Args<'_>,
                e: &TileEpilogue<$t>,
            ) {
                let mut acc = [[$zero(); VECTORS]; MR];
                let (mut a, mut b) = (a, b);
                // The last byte of a prefetch run: a second line when a run spans two.
                let span_end = (prefetch.span * std::mem::size_of::<$t>()).max(1) - 1;
                let mut ahead = prefetch.ptr.cast::<i8>();
                for _ in 0..k {
                    // Hints only (never faults): the next sliver of a prepacked operand.
                    if prefetch.to_l2 {
                        _mm_prefetch::<_MM_HINT_T1>(ahead);
                        _mm_prefetch::<_MM_HINT_T1>(ahead.wrapping_add(span_end));
                    } else {
                        _mm_prefetch::<_MM_HINT_T0>(ahead);
                        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(span_end));
                    }
                    ahead = ahead.wrapping_add(prefetch.step * std::mem::size_of::<$t>());
                    let mut row = [$zero(); VECTORS];
                    for (v, lane) in row.iter_mut().enumerate() {
                        // SAFETY: `b` points at a row of NR elements of B (one of the `k` rows
                        // the caller guarantees), and `v * LANES + LANES <= NR`.
                        *lane = unsafe { $load(b.add(v * LANES)) };
                    }
                    for (i, acc_row) in acc.iter_mut().enumerate() {
                        // SAFETY: `a` points at a column of MR elements of A (one of the `k`
                        // columns the caller guarantees), and `i < MR`.
                        let x = $splat(unsafe { *a.add(i) });
                        for (sum, &w) in acc_row.iter_mut().zip(&row) {
                            *sum = $fmadd(x, w, *sum);
                        }
                    }
                    // Past the end after the last step, but never dereferenced there.
                    a = a.wrapping_add(a_step);
                    b = b.wrapping_add(b_stride);
                }

                if c.n == NR && c.cs == 1 {
                    // Whole rows, contiguous: vector read-modify-write of C (a last row sliver
                    // of fewer than MR rows too), the epilogue applied on the way, in
                    // `TileEpilogue::finish_row`'s order and with its rounding.
                    let (alpha, beta_v, keep) = ($splat(alpha), $splat(beta), beta != 0.0);
                    let mut col = [$zero(); VECTORS];
                    if FUSED && COL {
                        for (v, b) in col.iter_mut().enumerate() {
                            // SAFETY: columns < NR = c.n of the tile, readable (caller).
                            *b = unsafe { $load(e.col_bias.add(v * LANES)) };
                        }
                    }
                    let (lo, hi) = match e.act {
                        FusedAct::Clip { lo, hi } => ($splat(lo), $splat(hi)),
                        FusedAct::LeakyRelu { alpha } => ($splat(alpha), $zero()),
                        _ => ($zero(), $zero()),
                    };
                    // Row by row, unrolled by hand: a loop here (even without an early exit)
                    // was left rolled in most epilogue variants, and then LLVM kept all the
                    // accumulators on the stack, the k loop included.
                    for_each_row!(MR, |i| {
                        let acc_row = &acc[i];
                        if i < c.m {
                            let out = c.ptr.wrapping_offset(i as isize * c.rs);
                            let res = e.residual.wrapping_offset(i as isize * e.residual_rs);
                            let shift = if FUSED && ROW {
                                // SAFETY: row i < c.m of the tile, readable (caller).
                                $splat(unsafe { *e.row_bias.add(i) })
                            } else {
                                $zero()
                            };
                            for (v, &sum) in acc_row.iter().enumerate() {
                                let at = out.wrapping_add(v * LANES);
                                let mut x = $mul(sum, alpha);
                                if keep {
                                    // SAFETY: elements (i, v * LANES..(v + 1) * LANES) of the tile:
                                    // i < c.m and the columns < NR = c.n with unit stride, so the
                                    // caller guarantees them readable.
                                    x = $fmadd(beta_v, unsafe { $load(at) }, x);
                                }
                                if FUSED {
                                    if RES {
                                        // SAFETY: row i < c.m, columns < NR = c.n of the tile's
                                        // residual, readable (caller).
                                        x = $add(x, unsafe { $load(res.add(v * LANES)) });
                                    }
                                    if ROW {
                                        x = $add(x, shift);
                                    }
                                    if COL {
                                        x = $add(x, col[v]);
                                    }
                                    // max/min return their second operand on a NaN or a tie,
                                    // which is what the scalar comparisons do with the operands
                                    // in this order.
                                    x = match ACT {
                                        ACT_RELU => $max(x, $zero()),
                                        ACT_CLIP => $min(hi, $max(lo, x)),
                                        // SAFETY: the CPU has the enabled features (caller).
                                        ACT_LEAKY => unsafe { $leaky(x, lo) },
                                        _ => x,
                                    };
                                }
                                // SAFETY: the same elements, which the caller guarantees writable
                                // and exclusively ours.
                                unsafe { $store(at, x) };
                            }
                        }
                    });
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
                    // SAFETY: forwarded from the caller's contract: the tile's elements are
                    // valid and ours, and the epilogue's parts readable for every one of them.
                    unsafe { store_tile(&tile, c, alpha, beta, FUSED.then_some(e)) };
                }
            }
        }
    };
}

simd_microkernel! {
    /// AVX-512F, f32: `MR x 32` tile (two 16-lane vectors per row).
    Avx512F32, avx512_f32, f32, feature = "avx512f",
    lanes = 16, vectors = 2, kc = 256, nc = 512,
    direct_b_rows = 128,
    half = avx512_f32_narrow,
    zero = _mm512_setzero_ps, splat = _mm512_set1_ps, load = _mm512_loadu_ps,
    store = _mm512_storeu_ps, fmadd = _mm512_fmadd_ps, mul = _mm512_mul_ps, add = _mm512_add_ps,
    max = _mm512_max_ps, min = _mm512_min_ps, leaky = leaky_avx512_f32,
}

simd_microkernel! {
    /// AVX-512F, f32, for a B of at most 16 columns (a classifier's few classes): `MR x 16`
    /// tile (one vector per row). The `MR x 32` tile would compute mostly padding: mlp_b64's
    /// 10-class layer (64 x 512 x 10) took 21.5 us, a third of the wide layers' rate.
    Avx512F32Narrow, avx512_f32_narrow, f32, feature = "avx512f",
    lanes = 16, vectors = 1, kc = 256, nc = 512,
    direct_b_rows = 128,
    zero = _mm512_setzero_ps, splat = _mm512_set1_ps, load = _mm512_loadu_ps,
    store = _mm512_storeu_ps, fmadd = _mm512_fmadd_ps, mul = _mm512_mul_ps, add = _mm512_add_ps,
    max = _mm512_max_ps, min = _mm512_min_ps, leaky = leaky_avx512_f32,
}

simd_microkernel! {
    /// AVX-512F, f64: `MR x 16` tile (two 8-lane vectors per row).
    Avx512F64, avx512_f64, f64, feature = "avx512f",
    lanes = 8, vectors = 2, kc = 128, nc = 512,
    direct_b_rows = 128,
    zero = _mm512_setzero_pd, splat = _mm512_set1_pd, load = _mm512_loadu_pd,
    store = _mm512_storeu_pd, fmadd = _mm512_fmadd_pd, mul = _mm512_mul_pd, add = _mm512_add_pd,
    max = _mm512_max_pd, min = _mm512_min_pd, leaky = leaky_avx512_f64,
}

simd_microkernel! {
    /// AVX2 + FMA, f32: `MR x 16` tile (two 8-lane vectors per row). Column blocks of 128:
    /// each A sliver walks a `KC x NC` block of B from L2, and at 512 columns that block is all
    /// of a Zen 3 core's 512 KiB L2 (there BERT-base ran 0.85x, GPT-2 0.89x, MobileNetV2 0.88x
    /// of the time with 512 at 1 thread). B is packed from 48 rows of A on: on Zen 3, 1x1
    /// convolutions ran faster packed than in place (64 <- 256 at 56x56 68 against 53 GFLOP/s,
    /// 128 <- 512 at 28x28 55 against 47, 48 <- 144 at 56x56 60 against 56) and slower at 16
    /// rows (36 against 44), about even at 32.
    Avx2F32, avx2_f32, f32, feature = "avx2,fma",
    lanes = 8, vectors = 2, kc = 256, nc = 128,
    direct_b_rows = 32,
    zero = _mm256_setzero_ps, splat = _mm256_set1_ps, load = _mm256_loadu_ps,
    store = _mm256_storeu_ps, fmadd = _mm256_fmadd_ps, mul = _mm256_mul_ps, add = _mm256_add_ps,
    max = _mm256_max_ps, min = _mm256_min_ps, leaky = leaky_avx2_f32,
}

simd_microkernel! {
    /// AVX2 + FMA, f64: `MR x 8` tile (two 4-lane vectors per row).
    Avx2F64, avx2_f64, f64, feature = "avx2,fma",
    lanes = 4, vectors = 2, kc = 256, nc = 256,
    direct_b_rows = 128,
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
