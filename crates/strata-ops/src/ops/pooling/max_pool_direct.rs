//! MaxPool of f32 planes on AVX-512 for the CNN windows (`kh x 2` or `kh x 3`, column stride 1
//! or 2, any row stride and padding, no dilation) straight from the input, without a row
//! buffer.
//!
//! Per output row, each 16-lane vector of input columns is folded over the rows under the
//! window in registers (the "column maxima"); a vector of 16 outputs then takes its taps from
//! two or three consecutive column maxima with shuffles: at column stride 2, the even and odd
//! elements of a pair (`vpermt2ps`) and the evens shifted by one (`valignd` with the next
//! vector), at stride 1 the vector and its shifts by one and two (`valignd`). Columns outside
//! the input (padding, the right end) are loaded masked and read as `-inf`, from a per-call
//! table of each vector's mask.
//!
//! Every row of a plane reads the same column vectors, so their masks are computed once per
//! call ([`Columns`]): blocks reading only whole vectors take unmasked loads, the others
//! masked ones, and planes of one block (at most 16 outputs a row) keep their masks in
//! registers from row to row. Output rows whose window the plane's top or bottom cuts take a
//! row-count loop, the others the window height unrolled.
//!
//! It replaces [`super::max_pool_folded`] for these windows, which wrote every folded row to a
//! buffer and read it back (masked stores, loads waiting on them) with per-row overhead that
//! dominated small planes. Measured on this machine (Xeon, AVX-512; alternating A/B of the
//! single-layer models, new/old time; SqueezeNet's 3x3/2 pools as exported):
//!
//! | pool | 1 thread | 2 threads |
//! |---|---|---|
//! | 256 x 27 x 27, 3x3/2 | 0.37 (41 -> 19 us) | 0.41 |
//! | 128 x 55 x 55, 3x3/2 | 0.56 (80 -> 44 us) | 0.51 |
//! | 64 x 111 x 111, 3x3/2 | 0.87 (154 -> 135 us) | 0.61 |
//! | 64 x 112 x 112, 3x3/2 pad 1 (ResNet) | 0.99 | 0.75 |
//! | 128 x 112 x 112, 2x2/2 | 1.00 | 0.93 |
//! | 192 x 28 x 28, 3x3/1 pad 1 | 0.66 | 0.69 |
//! | 96 x 54 x 54, 3x3/2 ceil_mode | 0.55 | 0.47 |
//!
//! The planes of 111 and 112 columns (3 to 6 MB of input) stream from beyond L2 at one thread:
//! the kernel waits on memory there, as the folded one did. In SqueezeNet (1 thread, per-node
//! profile) the three pools went from 0.30 to 0.21 ms (onnxruntime's NCHWc pools: about 0.22).
//!
//! The maximum is NaN-propagating (a NaN anywhere in the window wins), as everywhere in MaxPool.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use smallvec::SmallVec;

use crate::kernels::spatial::WindowGeometry;
use crate::ops::convolution::simd::{Avx512, Simd};

/// f32 lanes of a vector.
const LANES: usize = 16;
/// The most left padding handled (anything larger takes the other kernels).
const MAX_PAD: usize = 16;
/// The most column vectors a row reads ([`Columns`] keeps their masks inline, so a run never
/// allocates): 31 blocks of 16 outputs at column stride 2, 63 at stride 1. Wider rows take the
/// folded kernel.
const MAX_VECTORS: usize = 64;

/// The AVX-512 token, where this CPU has it.
fn avx512() -> Option<Avx512> {
    Simd::detect().and_then(Simd::avx512)
}

/// Whether [`planes_max`] handles `g` on this CPU.
pub(crate) fn supports(g: &WindowGeometry) -> bool {
    g.in_dims.len() == 2
        && g.dilations.iter().all(|&d| d == 1)
        && (1..=2).contains(&g.strides[1])
        && (2..=3).contains(&g.kernel[1])
        && g.pads_begin[1] <= MAX_PAD
        && g.in_dims[1] <= isize::MAX as usize / 4
        && g.out_dims[1] <= isize::MAX as usize / 4
        && g.out_dims[1].div_ceil(LANES) * g.strides[1] < MAX_VECTORS
        && avx512().is_some()
}

/// The input column vectors a row of `g` reads, the same for every row: vector `k` starts at
/// input column `16 k - pw` (possibly negative; padded column `16 k`), and `masks[k]` has its
/// lanes inside `0..iw`. Blocks `plain` (16 outputs each) read only whole vectors.
struct Columns {
    masks: SmallVec<[u16; MAX_VECTORS]>,
    blocks: usize,
    plain: std::ops::Range<usize>,
}

impl Columns {
    fn of(g: &WindowGeometry) -> Columns {
        let (iw, ow, pw) = (
            g.in_dims[1] as isize,
            g.out_dims[1],
            g.pads_begin[1] as isize,
        );
        let sw = g.strides[1];
        let blocks = ow.div_ceil(LANES);
        // Block b reads vectors sw b ..= sw b + sw: at stride 2 a pair and the first element
        // of the next, at stride 1 one vector and the first elements of the next.
        let masks: SmallVec<[u16; MAX_VECTORS]> = (0..blocks * sw + 1)
            .map(|k| {
                let base = (k * LANES) as isize - pw;
                let lo = (-base).clamp(0, LANES as isize) as u32;
                let hi = (iw - base).clamp(0, LANES as isize) as u32;
                let below_hi = if hi >= 16 { 0xffff } else { (1u32 << hi) - 1 };
                let from_lo = !((1u32 << lo) - 1);
                (below_hi & from_lo) as u16
            })
            .collect();
        // Whole vectors form one run of k, so the blocks reading only those form one run of b
        // (vector sw b of block b is loaded by block b - 1, or masked for b = 0).
        let whole = |b: usize| (sw * b + 1..=sw * b + sw).all(|k| masks[k] == 0xffff);
        let start = (0..blocks).find(|&b| whole(b)).unwrap_or(blocks);
        let end = (start..blocks).find(|&b| !whole(b)).unwrap_or(blocks);
        Columns {
            masks,
            blocks,
            plain: start..end,
        }
    }
}

/// Max pool of the planes of `x` (whole planes of `g.in_len` elements) into those of `y`
/// (`g.out_len` each), for a geometry [`supports`] accepted; false (nothing written) where it
/// does not. Windows wholly in the column padding yield `-inf` here (the caller replaces them
/// with the lowest finite value); windows wholly in the row padding yield `f32::MIN`.
pub(crate) fn planes_max(g: &WindowGeometry, x: &[f32], y: &mut [f32]) -> bool {
    let Some(isa) = avx512() else {
        return false;
    };
    if !supports(g) || g.in_len == 0 || g.out_len == 0 {
        return false;
    }
    let planes = (x.len() / g.in_len).min(y.len() / g.out_len);
    let columns = Columns::of(g);
    // SAFETY: the token proves AVX-512F; `supports(g)` holds, `x` holds `planes` whole input
    // planes and `y` as many output planes, and `columns` is `g`'s.
    unsafe { planes_max_avx512(isa, g, &columns, planes, x, y) };
    true
}

/// [`planes_max`]'s work, compiled for the common windows.
///
/// # Safety
/// AVX-512F is available (the token); `supports(g)`; `x` holds at least `planes * g.in_len`
/// and `y` `planes * g.out_len` elements; `columns` is `Columns::of(g)`.
#[target_feature(enable = "avx512f")]
unsafe fn planes_max_avx512(
    _: Avx512,
    g: &WindowGeometry,
    columns: &Columns,
    planes: usize,
    x: &[f32],
    y: &mut [f32],
) {
    let x = &x[..planes * g.in_len];
    let y = &mut y[..planes * g.out_len];
    // SAFETY: this function's contract.
    unsafe {
        match (g.kernel[0], g.kernel[1], g.strides[1]) {
            (3, 3, 2) => planes_of::<3, 3, 2>(g, columns, x, y),
            (2, 2, 2) => planes_of::<2, 2, 2>(g, columns, x, y),
            (3, 3, 1) => planes_of::<3, 3, 1>(g, columns, x, y),
            (_, 3, 2) => planes_of::<0, 3, 2>(g, columns, x, y),
            (_, 2, 2) => planes_of::<0, 2, 2>(g, columns, x, y),
            (_, 3, 1) => planes_of::<0, 3, 1>(g, columns, x, y),
            _ => planes_of::<0, 2, 1>(g, columns, x, y),
        }
    }
}

/// `max(a, b)` where a NaN in either wins.
#[inline(always)]
fn max_nan(a: __m512, b: __m512) -> __m512 {
    // SAFETY: only inlined into functions compiled with AVX-512F.
    unsafe {
        let nan_a = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a, a);
        _mm512_mask_mov_ps(_mm512_max_ps(a, b), nan_a, a)
    }
}

/// The column maxima of one vector of input columns: 16 lanes from `top` in each of `rows`
/// rows (`iw` elements apart); when `MASKED`, only the lanes of `mask`, `-inf` in the others.
/// A nonzero `KH` is `rows`.
///
/// # Safety
/// AVX-512F; for each row `r < rows`, the 16 lanes (when `MASKED`, those of `mask`) at
/// `top + r * iw` are inside the input.
#[inline(always)]
unsafe fn column<const KH: usize, const MASKED: bool>(
    top: *const f32,
    iw: usize,
    rows: usize,
    mask: u16,
) -> __m512 {
    let rows = if KH > 0 { KH } else { rows };
    // SAFETY: the caller's contract (masked-off lanes are not read).
    unsafe {
        let bottom = _mm512_set1_ps(f32::NEG_INFINITY);
        if MASKED && mask == 0 {
            return bottom;
        }
        // Masked: zeros in the other lanes, made `-inf` once at the end. (Macros, not
        // closures: a closure would not be compiled with AVX-512.)
        macro_rules! load {
            ($at:expr) => {
                if MASKED {
                    _mm512_maskz_loadu_ps(mask, $at)
                } else {
                    _mm512_loadu_ps($at)
                }
            };
        }
        let mut acc = load!(top);
        for r in 1..rows {
            acc = max_nan(acc, load!(top.wrapping_add(r * iw)));
        }
        if MASKED {
            acc = _mm512_mask_mov_ps(bottom, mask, acc);
        }
        acc
    }
}

/// `v` shifted down by `BY` lanes, the first lanes of `next` filling its end.
#[inline(always)]
fn shift<const BY: i32>(v: __m512, next: __m512) -> __m512 {
    // SAFETY: only inlined into functions compiled with AVX-512F.
    unsafe {
        _mm512_castsi512_ps(_mm512_alignr_epi32::<BY>(
            _mm512_castps_si512(next),
            _mm512_castps_si512(v),
        ))
    }
}

/// The 16 outputs of block `b` of a row: from `current` (the column maxima of vector `SW b`),
/// the vectors after it; returns them and the column maxima of vector `SW b + SW` (the next
/// block's `current`).
///
/// # Safety
/// AVX-512F; `top` points at padded column 0 of the first of `rows` input rows under the
/// window; when `MASKED`, `mask_1` and `mask_2` are the masks of vectors `SW b + 1` and
/// `SW b + SW` (as [`Columns`]), else those vectors are whole.
#[inline(always)]
unsafe fn block<const KH: usize, const KW: usize, const SW: usize, const MASKED: bool>(
    top: *const f32,
    iw: usize,
    rows: usize,
    (mask_1, mask_2): (u16, u16),
    b: usize,
    current: __m512,
) -> (__m512, __m512) {
    // SAFETY: vector k covers padded columns 16 k.., those of its mask inside the rows.
    unsafe {
        macro_rules! col {
            ($k:expr, $mask:expr) => {
                column::<KH, MASKED>(top.wrapping_add($k * LANES), iw, rows, $mask)
            };
        }
        if SW == 2 {
            // Outputs 16 b + i read padded columns 32 b + 2 i + t (t < KW): the even and odd
            // elements of vectors 2 b, 2 b + 1, and the evens shifted by one.
            let second = col!(2 * b + 1, mask_1);
            let next = col!(2 * b + 2, mask_2);
            let evens =
                _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
            let odds = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
            let even = _mm512_permutex2var_ps(current, evens, second);
            let odd = _mm512_permutex2var_ps(current, odds, second);
            let mut best = max_nan(even, odd);
            if KW == 3 {
                best = max_nan(best, shift::<1>(even, next));
            }
            (best, next)
        } else {
            // Outputs 16 b + i read padded columns 16 b + i + t: vector b shifted by t.
            let next = col!(b + 1, mask_1);
            let mut best = max_nan(current, shift::<1>(current, next));
            if KW == 3 {
                best = max_nan(best, shift::<2>(current, next));
            }
            (best, next)
        }
    }
}

/// One output row from the `rows` input rows under its window (`KH` when nonzero); `masks`,
/// `plain` and `blocks` are the geometry's [`Columns`] (as plain values: the stores to `y`
/// would make the compiler reload them).
///
/// # Safety
/// AVX-512F; `top` points at padded column 0 (input column `-pw`) of the first of `rows` input
/// rows inside the plane; `y` is valid for `ow` writes and overlaps neither `masks` nor the
/// input.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn row<const KH: usize, const KW: usize, const SW: usize>(
    top: *const f32,
    iw: usize,
    rows: usize,
    masks: &[u16],
    (plain_start, plain_end, blocks): (usize, usize, usize),
    y: *mut f32,
    ow: usize,
) {
    // SAFETY: the caller's contract; `block`'s with the runs `Columns` computed.
    unsafe {
        macro_rules! store {
            ($b:expr, $best:expr) => {{
                let ox = $b * LANES;
                if ox + LANES <= ow {
                    _mm512_storeu_ps(y.add(ox), $best);
                } else {
                    _mm512_mask_storeu_ps(y.add(ox), ((1u32 << (ow - ox)) - 1) as u16, $best);
                }
            }};
        }
        let mut current = column::<KH, true>(top, iw, rows, *masks.get_unchecked(0));
        let edge = |b: usize| {
            (
                *masks.get_unchecked(SW * b + 1),
                *masks.get_unchecked(SW * b + SW),
            )
        };
        for b in 0..plain_start {
            let (best, next) = block::<KH, KW, SW, true>(top, iw, rows, edge(b), b, current);
            store!(b, best);
            current = next;
        }
        for b in plain_start..plain_end {
            let whole = (0xffff, 0xffff);
            let (best, next) = block::<KH, KW, SW, false>(top, iw, rows, whole, b, current);
            store!(b, best);
            current = next;
        }
        for b in plain_end..blocks {
            let (best, next) = block::<KH, KW, SW, true>(top, iw, rows, edge(b), b, current);
            store!(b, best);
            current = next;
        }
    }
}

/// [`row`] for rows of one block (at most 16 outputs), its masks as values, kept in
/// registers from row to row: `masks` those of vectors 0, 1 and `SW`, `stored` the outputs'.
///
/// # Safety
/// As [`row`].
#[inline(always)]
unsafe fn single_block_row<const KH: usize, const KW: usize, const SW: usize>(
    top: *const f32,
    iw: usize,
    rows: usize,
    masks: [u16; 3],
    stored: u16,
    y: *mut f32,
) {
    // SAFETY: as `row`, for block 0.
    unsafe {
        let current = column::<KH, true>(top, iw, rows, masks[0]);
        let (best, _) = block::<KH, KW, SW, true>(top, iw, rows, (masks[1], masks[2]), 0, current);
        _mm512_mask_storeu_ps(y, stored, best);
    }
}

/// Whole planes: `KH x KW` windows at column stride `SW` (`KH` 0: the geometry's window
/// height).
///
/// # Safety
/// As [`planes_max_avx512`], with `x` and `y` whole planes; `KW` and `SW` are `g`'s, a nonzero
/// `KH` too.
#[inline(always)]
unsafe fn planes_of<const KH: usize, const KW: usize, const SW: usize>(
    g: &WindowGeometry,
    columns: &Columns,
    x: &[f32],
    y: &mut [f32],
) {
    let (ih, iw) = (g.in_dims[0], g.in_dims[1]);
    let (oh, ow) = (g.out_dims[0], g.out_dims[1]);
    let (kh, sh, ph, pw) = (g.kernel[0], g.strides[0], g.pads_begin[0], g.pads_begin[1]);
    let masks = &columns.masks[..];
    let runs = (columns.plain.start, columns.plain.end, columns.blocks);
    // Output rows first..last have whole windows (rows oy sh - ph .. + kh inside the plane).
    let first = ph.div_ceil(sh).min(oh);
    let last = if ih + ph >= kh {
        ((ih + ph - kh) / sh + 1).clamp(first, oh)
    } else {
        first
    };
    for (x, y) in x.chunks_exact(g.in_len).zip(y.chunks_exact_mut(g.out_len)) {
        let (x, y) = (x.as_ptr(), y.as_mut_ptr());
        // An output row whose window the plane's top or bottom cuts.
        let cut_row = |oy: usize| {
            let start = (oy * sh) as isize - ph as isize;
            let r0 = start.max(0) as usize;
            let r1 = ((start + kh as isize).max(0) as usize).min(ih);
            (r0, r1)
        };
        for oy in (0..first).chain(last..oh) {
            let (r0, r1) = cut_row(oy);
            let y = y.wrapping_add(oy * ow);
            // SAFETY: output row oy < oh of this plane; rows r0..r1 inside the plane, from
            // padded column 0 (before the plane's start for r0 = 0, pw > 0); AVX-512F (this
            // function's contract).
            unsafe {
                if r0 >= r1 {
                    std::slice::from_raw_parts_mut(y, ow).fill(f32::MIN);
                } else {
                    let top = x.wrapping_add(r0 * iw).wrapping_sub(pw);
                    row::<0, KW, SW>(top, iw, r1 - r0, masks, runs, y, ow);
                }
            }
        }
        let rows = if KH > 0 { KH } else { kh };
        let mut top = x
            .wrapping_add((first * sh).saturating_sub(ph) * iw)
            .wrapping_sub(pw);
        let mut y = y.wrapping_add(first * ow);
        if runs.2 == 1 {
            let single = [masks[0], masks[1], masks[SW]];
            let stored = ((1u32 << ow) - 1) as u16;
            for _ in first..last {
                // SAFETY: as above, for output rows first..last whose windows are whole.
                unsafe { single_block_row::<KH, KW, SW>(top, iw, rows, single, stored, y) };
                top = top.wrapping_add(sh * iw);
                y = y.wrapping_add(ow);
            }
            continue;
        }
        for _ in first..last {
            // SAFETY: as above, for output rows first..last whose windows are whole.
            unsafe { row::<KH, KW, SW>(top, iw, rows, masks, runs, y, ow) };
            top = top.wrapping_add(sh * iw);
            y = y.wrapping_add(ow);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::pooling::pool_kernel::{
        geometry, max_pool, pool_output_dims, PoolParams, StorageOrder,
    };
    use crate::support::rng::Rng;

    /// Same bits, any NaN matching any NaN.
    fn same(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    /// The direct kernel (with the caller's `-inf` fix-up done here) against the reference walk
    /// of `max_pool`, on random geometries it takes: both column strides, 2- and 3-wide windows,
    /// any window height and row stride, pads (windows wholly in the padding too), ceil mode,
    /// widths around the vector lengths, NaNs (one, several, at the row ends).
    #[test]
    fn direct_kernel_matches_the_reference_walk() {
        if avx512().is_none() {
            return;
        }
        let mut rng = Rng::new(0x9a03);
        let mut taken = 0;
        for case in 0..600 {
            let kernel = vec![rng.range(1, 4), rng.range(2, 3)];
            let p = PoolParams {
                strides: vec![rng.range(1, 3), rng.range(1, 2)],
                pads_begin: vec![rng.below(kernel[0] + 1), rng.below(kernel[1] + 1)],
                pads_end: vec![rng.below(kernel[0] + 1), rng.below(kernel[1] + 1)],
                ceil_mode: rng.below(2) == 0,
                kernel,
                ..PoolParams::default()
            };
            let width = match case % 4 {
                0 => rng.range(2, 20),
                1 => rng.range(28, 36),
                2 => rng.range(60, 70),
                _ => rng.range(100, 140),
            };
            let dims = [1, rng.range(1, 3), rng.range(1, 12), width];
            let Ok((planes, g)) = geometry("MaxPool", &dims, &p) else {
                continue;
            };
            let out_len: usize = pool_output_dims(&dims, &p).unwrap().iter().product();
            if out_len == 0 || !supports(&g) {
                continue;
            }
            taken += 1;
            let mut input = rng.vec(dims.iter().product());
            for _ in 0..[0, 1, 3][case % 3] {
                let at = rng.below(input.len());
                input[at] = f32::NAN;
            }
            if case % 7 == 0 {
                // A NaN in the last column and one in the first.
                let (h, w) = (dims[2], dims[3]);
                input[rng.below(h) * w + w - 1] = f32::NAN;
                input[rng.below(h) * w] = f32::NAN;
            }
            let mut expected = vec![0.0; out_len];
            max_pool(
                &input,
                &dims,
                &p,
                &mut expected,
                None,
                StorageOrder::RowMajor,
            )
            .unwrap();
            let mut got = vec![f32::NAN; out_len];
            assert!(planes_max(&g, &input, &mut got));
            assert_eq!(planes * g.out_len, out_len);
            for v in &mut got {
                if *v == f32::NEG_INFINITY {
                    *v = f32::MIN;
                }
            }
            let bad = got.iter().zip(&expected).position(|(&a, &b)| !same(a, b));
            assert!(
                bad.is_none(),
                "case {case}: {dims:?} {p:?}: output {bad:?}: {:?} vs {:?}",
                bad.map(|i| got[i]),
                bad.map(|i| expected[i])
            );
        }
        assert!(taken > 300, "only {taken} cases took the kernel");
    }

    /// Geometries it does not take are refused (nothing written), not miscomputed.
    #[test]
    fn other_windows_are_refused() {
        let p = |k: usize, s: usize, pad: usize| PoolParams {
            kernel: vec![3, k],
            strides: vec![2, s],
            pads_begin: vec![0, pad],
            pads_end: vec![0, 0],
            ..PoolParams::default()
        };
        for (k, s, pad) in [(4, 2, 0), (1, 1, 0), (3, 3, 0), (3, 2, 17)] {
            let (_, g) = geometry("MaxPool", &[1, 1, 9, 40], &p(k, s, pad)).unwrap();
            assert!(!supports(&g));
            let mut y = vec![1.5; g.out_len];
            assert!(!planes_max(&g, &vec![0.0; g.in_len], &mut y));
            assert!(y.iter().all(|&v| v == 1.5));
        }
        let (_, g) = geometry("MaxPool", &[1, 1, 9, 40], &p(3, 2, 1)).unwrap();
        assert_eq!(supports(&g), avx512().is_some());
        // Rows of more column vectors than the inline mask table holds: 1000 / 2 = 500 outputs
        // are 32 blocks, 65 vectors at stride 2 (the folded kernel takes them).
        let (_, g) = geometry("MaxPool", &[1, 1, 3, 1000], &p(3, 2, 0)).unwrap();
        assert!(!supports(&g));
        let (_, g) = geometry("MaxPool", &[1, 1, 3, 990], &p(3, 2, 0)).unwrap();
        assert_eq!(supports(&g), avx512().is_some());
    }
}
