//! The 3x3 depthwise kernel's plane loop for f32 at stride 1 or 2, on AVX-512 or AVX2: a vector
//! of outputs of a row at a time, read straight from the NCHW input row (no band copy). At
//! stride 2 the input columns under a vector of outputs are split into even and odd columns in
//! registers ([`DwSimd::taps`]); at stride 1 the three taps are three unaligned loads. Padding
//! is masked loads (left and right) and skipped rows (top and bottom). On AVX2 the masked
//! vectors of stride-1 rows go [`ROWS`] rows at a time, each input row loaded once for them all.

use super::depthwise_simd::{entry_points, DwSimd};
use super::row_band::Clamp;

/// Output vectors of a row held in registers at once (on AVX2 the weights then are memory
/// operands).
const CHUNK: usize = 4;

/// One plane's geometry: input `ih x iw`, output `oh x ow`, padding before (0 or 1), stride
/// (1 or 2, both axes).
#[derive(Clone, Copy, Debug)]
pub(super) struct Plane {
    pub stride: usize,
    pub ih: usize,
    pub iw: usize,
    pub oh: usize,
    pub ow: usize,
    pub pad_top: usize,
    pub pad_left: usize,
}

entry_points! {
    /// `out[oy * ow + ox] = clamp(start + sum over ky, kx of k[ky * 3 + kx] * x[s oy + ky -
    /// pad_top][s ox + kx - pad_left])` with `s` the stride, padding read as zeros. (Lengths
    /// are asserted: `x` holds `ih * iw`, `out` `oh * ow`; reads past any edge are masked off
    /// or skipped, so any padding after the plane works.)
    direct_plane(plane_avx512, plane_avx2) => plane(
        x: &[f32],
        g: Plane,
        k: &[f32; 9],
        start: f32,
        clamp_to: Clamp,
        out: &mut [f32],
    )
}

#[inline(always)]
fn plane<I: DwSimd>(
    isa: I,
    x: &[f32],
    g: Plane,
    k: &[f32; 9],
    start: f32,
    clamp_to: Clamp,
    out: &mut [f32],
) {
    assert!(x.len() == g.ih * g.iw && out.len() == g.oh * g.ow);
    assert!(g.pad_top <= 1 && g.pad_left <= 1 && g.oh > 0 && g.ow > 0);
    match g.stride {
        1 => strided::<I, 1>(isa, x, g, k, start, clamp_to, out),
        2 => strided::<I, 2>(isa, x, g, k, start, clamp_to, out),
        s => panic!("stride {s} is not 1 or 2"),
    }
}

/// [`plane`] at stride `S`, up to [`CHUNK`] vectors of a row at a time (lengths asserted
/// by [`plane`]): the vectors at the row's ends one at a time with masked loads, the others
/// with plain ones.
#[inline(always)]
fn strided<I: DwSimd, const S: usize>(
    isa: I,
    x: &[f32],
    g: Plane,
    k: &[f32; 9],
    start: f32,
    clamp_to: Clamp,
    out: &mut [f32],
) {
    let mut w = [isa.splat(0.0); 9];
    for (w, &k) in w.iter_mut().zip(k) {
        *w = isa.splat(k);
    }
    let vectors = g.ow.div_ceil(I::LANES);
    // Whether all loads of vector v lie inside the row: then it needs no masks.
    let inside = |v: usize| {
        let s = (S * v * I::LANES) as isize - g.pad_left as isize;
        s >= 0 && s as usize + isa.load_reach::<S>() <= g.iw
    };
    let args = (isa, x, g, &w, start, clamp_to);
    let mut v0 = 0;
    while v0 < vectors {
        // The count known at compile time keeps the accumulators in registers. (Direct calls:
        // a function pointer would lose the caller's target features.)
        if !inside(v0) {
            columns::<I, S, 1, true>(args, out, v0);
            v0 += 1;
            continue;
        }
        let mut count = 1;
        while count < CHUNK && v0 + count < vectors && inside(v0 + count) {
            count += 1;
        }
        match count {
            1 => columns::<I, S, 1, false>(args, out, v0),
            2 => columns::<I, S, 2, false>(args, out, v0),
            3 => columns::<I, S, 3, false>(args, out, v0),
            _ => columns::<I, S, 4, false>(args, out, v0),
        }
        v0 += count;
    }
}

/// Output vectors `v0..v0 + N` of every row of [`strided`]'s plane, their loads masked to the
/// row if `MASKED` (else all inside it).
#[allow(clippy::type_complexity)]
#[inline(always)]
fn columns<I: DwSimd, const S: usize, const N: usize, const MASKED: bool>(
    (isa, x, g, w, start, clamp_to): (I, &[f32], Plane, &[I::V; 9], f32, Clamp),
    out: &mut [f32],
    v0: usize,
) {
    let lanes = I::LANES;
    let (lo, hi) = isa.bounds(clamp_to);
    let base = x.as_ptr();
    let dst = out.as_mut_ptr();
    // Per vector: its first tap's column, the masks of its loads and the outputs it stores
    // (rows share them).
    let mut cols = [(0isize, isa.tap_masks::<S>(0, 0), 0usize); N];
    for (j, m) in cols.iter_mut().enumerate() {
        let ox0 = (v0 + j) * lanes;
        let s = (S * ox0) as isize - g.pad_left as isize;
        if MASKED {
            m.1 = isa.tap_masks::<S>(s, g.iw);
        }
        (m.0, m.2) = (s, (g.ow - ox0).min(lanes));
    }
    let mut first = 0;
    if blocks::<I>(g) && MASKED && S == 1 {
        let args = (isa, x, g, w, start, clamp_to);
        while first + ROWS <= g.oh {
            row_block::<I, N>(args, &cols, out, v0, first);
            first += ROWS;
        }
    }
    for oy in first..g.oh {
        let mut acc = [isa.splat(start); N];
        for ky in 0..3 {
            let iy = (S * oy + ky) as isize - g.pad_top as isize;
            if iy < 0 || iy >= g.ih as isize {
                continue;
            }
            let row = base.wrapping_add(iy as usize * g.iw);
            let (w0, w1, w2) = (w[ky * 3], w[ky * 3 + 1], w[ky * 3 + 2]);
            for (a, (s, m, _)) in acc.iter_mut().zip(&cols) {
                let p = row.wrapping_offset(*s);
                // SAFETY: `row` is input row iy < ih, inside `x`; the masks were made for
                // column `s` of a row `iw` wide, or (not MASKED) columns s..s + load_reach
                // are inside the row (`strided`).
                let [t0, t1, t2] = unsafe {
                    if MASKED {
                        isa.taps::<S>(p, m)
                    } else {
                        isa.taps_full::<S>(p)
                    }
                };
                *a = isa.fmadd(t0, w0, *a);
                *a = isa.fmadd(t1, w1, *a);
                *a = isa.fmadd(t2, w2, *a);
            }
        }
        for (j, (&a, &(_, _, stored))) in acc.iter().zip(&cols).enumerate() {
            let at = oy * g.ow + (v0 + j) * lanes;
            let v = isa.clamp(clamp_to.kind, isa.in_order::<S>(a), lo, hi);
            // SAFETY: the `stored` columns from (v0 + j) * lanes are below ow, of output row
            // oy < oh (`out` holds oh * ow, asserted by `plane`).
            unsafe { isa.store_first(dst.wrapping_add(at), stored, v) };
        }
    }
}

/// Output rows accumulated at once by [`row_block`].
const ROWS: usize = 4;

/// Whether [`columns`] takes its masked stride-1 vectors [`ROWS`] rows at a time: on AVX2, rows
/// of two or more vectors. Zen 3 (1 thread, one-layer models with Clip, median ratio of 10
/// alternating rounds): 14x14 planes ran 0.85-0.87x the time of one row at a time (576 and 384
/// channels), 56x56 (144) 0.92x. Blocks measured slower elsewhere: 7x7 (960 channels, one
/// vector a row) 1.05-1.15x, stride 2 (576, 14 -> 7) 1.2x, the unmasked vectors of 112x112
/// (32) 1.03-1.09x. AVX-512 was not measured.
fn blocks<I: DwSimd>(g: Plane) -> bool {
    I::LANES == 8 && g.ow > I::LANES
}

/// Stride-1 output rows `oy..oy + ROWS` of vectors `v0..v0 + N` (masked as `cols`), all inside
/// the plane: each of the input rows under them is loaded once and multiplied into every
/// output row that reads it.
#[allow(clippy::type_complexity)]
#[inline(always)]
fn row_block<I: DwSimd, const N: usize>(
    (isa, x, g, w, start, clamp_to): (I, &[f32], Plane, &[I::V; 9], f32, Clamp),
    cols: &[(isize, I::TapMasks, usize); N],
    out: &mut [f32],
    v0: usize,
    oy: usize,
) {
    let (lo, hi) = isa.bounds(clamp_to);
    let mut acc = [[isa.splat(start); N]; ROWS];
    for r in 0..ROWS + 2 {
        let iy = (oy + r) as isize - g.pad_top as isize;
        if iy < 0 || iy >= g.ih as isize {
            continue;
        }
        let row = x.as_ptr().wrapping_add(iy as usize * g.iw);
        for (n, (s, m, _)) in cols.iter().enumerate() {
            // SAFETY: `row` is input row iy < ih, inside `x`; the masks were made for column
            // `s` of a row `iw` wide (`columns`).
            let [t0, t1, t2] = unsafe { isa.taps::<1>(row.wrapping_offset(*s), m) };
            for (j, a) in acc.iter_mut().enumerate() {
                // Output row oy + j reads this input row as its kernel row r - j.
                let ky = r.wrapping_sub(j);
                if ky < 3 {
                    let a = &mut a[n];
                    *a = isa.fmadd(t0, w[ky * 3], *a);
                    *a = isa.fmadd(t1, w[ky * 3 + 1], *a);
                    *a = isa.fmadd(t2, w[ky * 3 + 2], *a);
                }
            }
        }
    }
    for (j, acc) in acc.iter().enumerate() {
        for (n, (&a, &(_, _, stored))) in acc.iter().zip(cols).enumerate() {
            let at = (oy + j) * g.ow + (v0 + n) * I::LANES;
            let v = isa.clamp(clamp_to.kind, a, lo, hi);
            // SAFETY: the `stored` columns from (v0 + n) * lanes are below ow, of output row
            // oy + j < oh (`columns` blocks only whole blocks of rows; `out` holds oh * ow,
            // asserted by `plane`).
            unsafe { isa.store_first(out.as_mut_ptr().wrapping_add(at), stored, v) };
        }
    }
}
