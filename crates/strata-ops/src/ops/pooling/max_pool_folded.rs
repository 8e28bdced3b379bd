//! MaxPool of one f32 plane with AVX-512 or AVX2 at column strides 1 and 2 (any kernel and
//! padding, no dilation), generic over the vector width: separable like
//! [`super::max_pool_2d`]'s row path. Per output row, the input rows under the window are folded
//! into one row in a buffer with `-inf` margins, then each vector of outputs takes its `kw` taps
//! from that row: one load per tap at stride 1, two loads and an even-element shuffle at stride
//! 2. On AVX-512: SqueezeNet's first pool (3x3/2,
//! 64 x 111 x 111) went from 0.335 to 0.176 ms at one thread against the phase-plane path, which
//! spent a third of its time deinterleaving; the input (3 MB) now streams at about 18 GB/s.
//!
//! On AVX-512, `kh x 2` and `kh x 3` windows take [`super::max_pool_direct`] instead (no row
//! buffer); this kernel keeps the other widths, left padding beyond 16 columns, and AVX2.
//!
//! The maximum is NaN-propagating (a NaN anywhere in the window wins), as everywhere in MaxPool.

use crate::kernels::gemm::with_pack_buffers;
use crate::kernels::spatial::WindowGeometry;
use crate::ops::convolution::simd::{Avx2, Avx512, Isa, Simd};

/// Lanes of the widest vector (AVX-512's): the buffers' slack.
const LANES: usize = 16;
/// The row buffer's `-inf` margin before the folded row: the most left padding handled.
const MARGIN: usize = 16;
/// Longest row buffer (a per-thread packing buffer): the widest rows handled.
const ROW_CAP: usize = 1 << 16;

/// Whether [`planes_max`] handles `g` on this CPU.
pub(crate) fn supports(g: &WindowGeometry) -> bool {
    g.in_dims.len() == 2
        && g.dilations.iter().all(|&d| d == 1)
        && (1..=2).contains(&g.strides[1])
        && g.pads_begin[1] <= MARGIN
        && row_len(g).is_some_and(|len| len <= ROW_CAP)
        && Simd::detect().is_some()
}

/// Buffer elements a plane of `g` reads: the margin, then the folded row or the furthest tap
/// of the last (whole) output block, then a vector of slack for the stride-2 pair load.
fn row_len(g: &WindowGeometry) -> Option<usize> {
    let (iw, ow) = (g.in_dims[1], g.out_dims[1]);
    let blocks = ow.div_ceil(LANES).checked_mul(LANES)?;
    let reach = blocks.checked_mul(g.strides[1])?.checked_add(g.kernel[1])?;
    MARGIN.checked_add(iw.max(reach))?.checked_add(2 * LANES)
}

/// Max pool of the planes of `x` (whole planes of `g.in_len` elements) into those of `y`
/// (`g.out_len` each), for a geometry [`supports`] accepted. Windows wholly in the padding
/// yield `-inf` here; the caller replaces them with the lowest finite value.
pub(crate) fn planes_max(g: &WindowGeometry, x: &[f32], y: &mut [f32]) {
    let Some(simd) = Simd::detect() else {
        unreachable!("`supports` checked the ISA");
    };
    planes_max_on(simd, g, x, y);
}

/// [`planes_max`] on `simd` (tests run each ISA the CPU has).
fn planes_max_on(simd: Simd, g: &WindowGeometry, x: &[f32], y: &mut [f32]) {
    assert!(supports(g) && g.in_len > 0 && g.out_len > 0);
    assert!(x.len() / g.in_len >= y.len() / g.out_len);
    let len = row_len(g).unwrap_or(ROW_CAP);
    with_pack_buffers::<f32, _>(2 * len, 0, |rows, _| {
        let (even, odd) = rows.split_at_mut(len);
        // Folding writes only the row itself: the margins stay `-inf` from plane to plane.
        even.fill(f32::NEG_INFINITY);
        odd.fill(f32::NEG_INFINITY);
        for (x, y) in x.chunks_exact(g.in_len).zip(y.chunks_exact_mut(g.out_len)) {
            let rows = [&mut *even, &mut *odd];
            // SAFETY: the token was detected; `x` holds `g.in_len` and `y` `g.out_len`
            // elements, and each row buffer `row_len(g)`, all `-inf` but the folded rows.
            unsafe {
                match simd {
                    Simd::Avx512(isa) => plane_max_avx512(isa, g, x, y, rows),
                    Simd::Avx2(isa) => plane_max_avx2(isa, g, x, y, rows),
                }
            }
        }
    });
}

/// [`plane_max`] on AVX-512.
///
/// # Safety
/// As [`plane_max`].
#[target_feature(enable = "avx512f")]
unsafe fn plane_max_avx512(
    isa: Avx512,
    g: &WindowGeometry,
    x: &[f32],
    y: &mut [f32],
    rows: [&mut [f32]; 2],
) {
    // SAFETY: the caller's contract; the token proves AVX-512F.
    unsafe { compiled_windows(isa, g, x, y, rows) }
}

/// [`plane_max`] on AVX2.
///
/// # Safety
/// As [`plane_max`].
#[target_feature(enable = "avx2,fma")]
unsafe fn plane_max_avx2(
    isa: Avx2,
    g: &WindowGeometry,
    x: &[f32],
    y: &mut [f32],
    rows: [&mut [f32]; 2],
) {
    // SAFETY: the caller's contract; the token proves AVX2.
    unsafe { compiled_windows(isa, g, x, y, rows) }
}

/// [`plane_max`] compiled for the common pools.
///
/// # Safety
/// As [`plane_max`].
#[inline(always)]
unsafe fn compiled_windows<I: Isa>(
    isa: I,
    g: &WindowGeometry,
    x: &[f32],
    y: &mut [f32],
    rows: [&mut [f32]; 2],
) {
    // SAFETY: the caller's contract, with the window's sizes.
    unsafe {
        match (&g.kernel[..], &g.strides[..]) {
            ([3, 3], [2, 2]) => plane_max::<I, 3, 3, 2>(isa, g, x, y, rows),
            ([3, 3], [1, 1]) => plane_max::<I, 3, 3, 1>(isa, g, x, y, rows),
            ([2, 2], [2, 2]) => plane_max::<I, 2, 2, 2>(isa, g, x, y, rows),
            _ => plane_max::<I, 0, 0, 0>(isa, g, x, y, rows),
        }
    }
}

/// Output rows alternate between two row buffers: the rows under output row `oy + 1` are
/// folded into one while the taps of row `oy` read the other. Reading a row right after
/// folding it made every first tap load wait for the (masked, unaligned) stores it overlaps to
/// commit: SqueezeNet's 3x3/2 pools spent most of their time in those stalls. `KH x KW` at
/// column stride `SW` is the geometry's window, compiled for the common pools (their loops
/// unrolled: SqueezeNet's 3x3/2 pools spent as long on loop control as on maxima); 0 reads them
/// from `g`.
///
/// # Safety
/// `supports(g)` holds, `x` holds `g.in_len` and `y` `g.out_len` elements, and both row
/// buffers at least `row_len(g)`, all `-inf` outside the folded rows; nonzero `KH`, `KW`, `SW`
/// are `g`'s.
#[inline(always)]
unsafe fn plane_max<I: Isa, const KH: usize, const KW: usize, const SW: usize>(
    isa: I,
    g: &WindowGeometry,
    x: &[f32],
    y: &mut [f32],
    rows: [&mut [f32]; 2],
) {
    let oh = g.out_dims[0];
    let [even, odd] = rows;
    // SAFETY: forwarded from this function's contract; `even` is one of its row buffers.
    let mut ready = unsafe { fold_rows::<I, KH>(isa, g, x, 0, even) };
    for (oy, y_row) in y.chunks_exact_mut(g.out_dims[1]).enumerate().take(oh) {
        let (current, next) = if oy % 2 == 0 {
            (&*even, &mut *odd)
        } else {
            (&*odd, &mut *even)
        };
        // SAFETY: forwarded from this function's contract; `next` is the other row buffer.
        let next_ready = oy + 1 < oh && unsafe { fold_rows::<I, KH>(isa, g, x, oy + 1, next) };
        if ready {
            // SAFETY: as above; `current` holds output row oy's folded rows.
            unsafe { take_taps::<I, KW, SW>(isa, g, current, y_row) };
        } else {
            y_row.fill(f32::MIN);
        }
        ready = next_ready;
    }
}

/// Folds the input rows under output row `oy` into `row[MARGIN..MARGIN + iw]` (the margins
/// stay `-inf`); false when the window holds no input row. A nonzero `KH` is `g.kernel[0]`.
///
/// # Safety
/// As [`plane_max`], with `row` one of its buffers.
#[inline(always)]
unsafe fn fold_rows<I: Isa, const KH: usize>(
    isa: I,
    g: &WindowGeometry,
    x: &[f32],
    oy: usize,
    row: &mut [f32],
) -> bool {
    let (ih, iw) = (g.in_dims[0], g.in_dims[1]);
    let start = (oy * g.strides[0]) as isize - g.pads_begin[0] as isize;
    let r0 = start.max(0) as usize;
    let r1 = ((start + g.kernel[0] as isize).max(0) as usize).min(ih);
    if r0 >= r1 {
        return false;
    }
    for c in (0..iw).step_by(I::LANES) {
        let n = iw - c;
        let at = |r: usize| x.as_ptr().wrapping_add(r * iw + c);
        // SAFETY: lanes c.. of input row r (r < ih), cut to the iw - c that exist, so inside
        // `x` (ih * iw elements).
        let mut acc = unsafe { isa.load_first(at(r0), n) };
        if KH > 0 && r1 - r0 == KH {
            // A whole window (constant trip count).
            for r in r0 + 1..r0 + KH {
                // SAFETY: as above, for row r < r0 + KH = r1 <= ih.
                acc = isa.max_nan(acc, unsafe { isa.load_first(at(r), n) });
            }
        } else {
            for r in r0 + 1..r1 {
                // SAFETY: as above, for row r < r1 <= ih.
                acc = isa.max_nan(acc, unsafe { isa.load_first(at(r), n) });
            }
        }
        // SAFETY: row[MARGIN + c..] for the first n lanes: MARGIN + iw <= row_len <= row.len().
        unsafe { isa.store_first(row.as_mut_ptr().add(MARGIN + c), n, acc) };
    }
    true
}

/// Each vector of outputs of `y_row` takes the maximum of its `kw` taps from the folded `row`:
/// one load per tap at stride 1, two loads and their even elements at stride 2.
///
/// # Safety
/// As [`plane_max`], with `row` one of its buffers, folded by [`fold_rows`].
#[inline(always)]
unsafe fn take_taps<I: Isa, const KW: usize, const SW: usize>(
    isa: I,
    g: &WindowGeometry,
    row: &[f32],
    y_row: &mut [f32],
) {
    let (ow, pw) = (g.out_dims[1], g.pads_begin[1]);
    let kw = if KW > 0 { KW } else { g.kernel[1] };
    let sw = if SW > 0 { SW } else { g.strides[1] };
    let lanes = I::LANES;
    for ox in (0..ow).step_by(lanes) {
        let mut acc = isa.splat(f32::NEG_INFINITY);
        for t in 0..kw {
            // Output ox + i reads padded column (ox + i) * sw + t, buffer index
            // MARGIN - pw + that (pw <= MARGIN, by `supports`).
            let at = row.as_ptr().wrapping_add(MARGIN - pw + ox * sw + t);
            let taps = if sw == 1 {
                // SAFETY: a vector from index MARGIN - pw + ox + t, below
                // MARGIN + blocks * sw + kw + 2 * LANES <= row_len <= row.len().
                unsafe { isa.load(at) }
            } else {
                // SAFETY: two vectors from index MARGIN - pw + 2 * ox + t, inside the
                // buffer by the same bound (two vectors of slack).
                let (lo, hi) = unsafe { (isa.load(at), isa.load(at.add(lanes))) };
                isa.evens(lo, hi)
            };
            acc = isa.max_nan(acc, taps);
        }
        // SAFETY: outputs ox.. of this row, cut to the ow - ox that exist.
        unsafe { isa.store_first(y_row.as_mut_ptr().add(ox), ow - ox, acc) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::pooling::pool_kernel::{
        geometry, max_pool, pool_output_dims, PoolParams, StorageOrder,
    };
    use crate::support::rng::Rng;

    /// The folded kernel on every ISA this CPU has (AVX2 too where AVX-512 is there, and for
    /// the windows the direct AVX-512 kernel now takes): the reference walk's bits, windows
    /// wholly in the padding aside (`-inf` here, replaced by the caller).
    #[test]
    fn folded_kernel_matches_the_reference_walk_on_each_isa() {
        let mut rng = Rng::new(0x9a04);
        for case in 0..200 {
            let kernel = vec![rng.range(1, 4), rng.range(1, 4)];
            let p = PoolParams {
                strides: vec![rng.range(1, 3), rng.range(1, 2)],
                pads_begin: vec![rng.below(kernel[0]), rng.below(kernel[1])],
                pads_end: vec![rng.below(kernel[0]), rng.below(kernel[1])],
                ceil_mode: rng.below(2) == 0,
                kernel,
                ..PoolParams::default()
            };
            let dims = [1, rng.range(1, 3), rng.range(4, 14), rng.range(4, 70)];
            let (_, g) = geometry("MaxPool", &dims, &p).unwrap();
            if !supports(&g) {
                continue;
            }
            let out_len: usize = pool_output_dims(&dims, &p).unwrap().iter().product();
            let mut input = rng.vec(dims.iter().product());
            if case % 3 == 0 {
                let at = rng.below(input.len());
                input[at] = f32::NAN;
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
            for simd in Simd::all() {
                let mut got = vec![0.0; out_len];
                planes_max_on(simd, &g, &input, &mut got);
                let same = got.iter().zip(&expected).all(|(&a, &b)| {
                    let a = if a == f32::NEG_INFINITY { f32::MIN } else { a };
                    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
                });
                assert!(same, "case {case}: {dims:?} {p:?}");
            }
        }
    }
}
