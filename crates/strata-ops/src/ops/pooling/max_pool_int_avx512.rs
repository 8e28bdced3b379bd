//! MaxPool of one u8 or i8 plane with AVX-512BW (and VBMI for stride 2), the byte counterpart of
//! [`super::max_pool_folded`]: per output row, the input rows under the window are folded into
//! one row in a buffer with margins that no maximum takes, then each block of 64 outputs takes
//! its `kw` taps from that row: one load per tap at column stride 1, two loads and one
//! two-source byte permute (the even bytes of 128) at stride 2. An i8 plane runs as u8 with
//! its sign bit flipped on the way in and out (`v + 128` keeps the order), so the margins are
//! 0 in both cases, and a window wholly in the padding gives the type's minimum, as MaxPool's
//! integer path does.

use std::arch::x86_64::*;

use crate::kernels::gemm::with_pack_buffers;
use crate::kernels::spatial::WindowGeometry;

/// Lanes (bytes) per vector.
const LANES: usize = 64;
/// The row buffer's margin before the folded row: the most left padding handled.
const MARGIN: usize = 64;
/// Longest row buffer (a per-thread packing buffer): the widest rows handled.
const ROW_CAP: usize = 1 << 16;

/// Whether [`plane_max`] handles `g` on this CPU.
pub(crate) fn supports(g: &WindowGeometry) -> bool {
    g.in_dims.len() == 2
        && g.dilations.iter().all(|&d| d == 1)
        && (1..=2).contains(&g.strides[1])
        && g.pads_begin[1] <= MARGIN
        && row_len(g).is_some_and(|len| len <= ROW_CAP)
        && std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vbmi")
}

/// Buffer bytes a plane of `g` reads: the margin, then the folded row or the furthest tap of
/// the last (whole) output block, then two vectors of slack for the stride-2 pair load.
fn row_len(g: &WindowGeometry) -> Option<usize> {
    let (iw, ow) = (g.in_dims[1], g.out_dims[1]);
    let blocks = ow.div_ceil(LANES).checked_mul(LANES)?;
    let reach = blocks.checked_mul(g.strides[1])?.checked_add(g.kernel[1])?;
    MARGIN.checked_add(iw.max(reach))?.checked_add(2 * LANES)
}

/// Max pool of plane `x` (`g.in_len` bytes) into `y` (`g.out_len`), for a geometry [`supports`]
/// accepted; `flip` is 0 for u8 and 0x80 for i8 (given as raw bytes).
pub(crate) fn plane_max(g: &WindowGeometry, x: &[u8], y: &mut [u8], flip: u8) {
    assert!(supports(g) && x.len() >= g.in_len && y.len() >= g.out_len);
    let len = row_len(g).unwrap_or(ROW_CAP);
    with_pack_buffers::<u8, _>(2 * len, 0, |rows, _| {
        rows.fill(0);
        let (even, odd) = rows.split_at_mut(len);
        // SAFETY: AVX-512F/BW/VBMI were detected by `supports`; the lengths were asserted
        // above and each row buffer holds `row_len(g)` bytes.
        unsafe { plane_max_avx512(g, x, y, [even, odd], flip) }
    });
}

/// Output rows alternate between two row buffers, as in [`super::max_pool_folded`]: the rows
/// under output row `oy + 1` are folded into one while row `oy` takes its taps from the other,
/// so no tap load waits on the masked stores it overlaps.
///
/// # Safety
/// AVX-512F, BW and VBMI are available, `supports(g)` holds, `x` holds `g.in_len` and `y`
/// `g.out_len` bytes, and both row buffers at least `row_len(g)`, all zero.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
unsafe fn plane_max_avx512(
    g: &WindowGeometry,
    x: &[u8],
    y: &mut [u8],
    rows: [&mut [u8]; 2],
    flip: u8,
) {
    let oh = g.out_dims[0];
    let f = _mm512_set1_epi8(flip as i8);
    let [even, odd] = rows;
    // SAFETY: forwarded from this function's contract; `even` is one of its row buffers.
    let mut ready = unsafe { fold_rows(g, x, 0, even, f) };
    for (oy, y_row) in y.chunks_exact_mut(g.out_dims[1]).enumerate().take(oh) {
        let (current, next) = if oy % 2 == 0 {
            (&*even, &mut *odd)
        } else {
            (&*odd, &mut *even)
        };
        // SAFETY: forwarded from this function's contract; `next` is the other row buffer.
        let next_ready = oy + 1 < oh && unsafe { fold_rows(g, x, oy + 1, next, f) };
        if ready {
            // SAFETY: as above; `current` holds output row oy's folded rows.
            unsafe { take_taps(g, current, y_row, f) };
        } else {
            // No input row: the type's minimum (0 flipped).
            y_row.fill(flip);
        }
        ready = next_ready;
    }
}

/// Folds the input rows under output row `oy` into `row[MARGIN..MARGIN + iw]`, sign-flipped
/// by `f` (the margins stay 0); false when the window holds no input row.
///
/// # Safety
/// As [`plane_max_avx512`], with `row` one of its buffers.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
unsafe fn fold_rows(g: &WindowGeometry, x: &[u8], oy: usize, row: &mut [u8], f: __m512i) -> bool {
    let (ih, iw) = (g.in_dims[0], g.in_dims[1]);
    let start = (oy * g.strides[0]) as isize - g.pads_begin[0] as isize;
    let r0 = start.max(0) as usize;
    let r1 = ((start + g.kernel[0] as isize).max(0) as usize).min(ih);
    if r0 >= r1 {
        return false;
    }
    for c in (0..iw).step_by(LANES) {
        let mask = lanes(iw - c);
        let at = |r: usize| x.as_ptr().wrapping_add(r * iw + c);
        // SAFETY: bytes c..c + 64 of input row r (r < ih), masked to the iw - c that
        // exist, so inside `x` (ih * iw bytes); masked-off lanes are not read.
        let load =
            |r: usize| unsafe { _mm512_xor_si512(_mm512_maskz_loadu_epi8(mask, at(r).cast()), f) };
        let mut acc = load(r0);
        for r in r0 + 1..r1 {
            acc = _mm512_max_epu8(acc, load(r));
        }
        // SAFETY: row[MARGIN + c..] for the masked lanes: MARGIN + iw <= row_len.
        unsafe { _mm512_mask_storeu_epi8(row.as_mut_ptr().add(MARGIN + c).cast(), mask, acc) };
    }
    true
}

/// Each block of 64 outputs of `y_row` takes the maximum of its `kw` taps from the folded
/// `row`: one load per tap at stride 1, two loads and one two-source byte permute (the even
/// bytes of 128) at stride 2; the sign flip `f` is undone on the way out.
///
/// # Safety
/// As [`plane_max_avx512`], with `row` one of its buffers, folded by [`fold_rows`].
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
unsafe fn take_taps(g: &WindowGeometry, row: &[u8], y_row: &mut [u8], f: __m512i) {
    let (ow, kw, sw, pw) = (g.out_dims[1], g.kernel[1], g.strides[1], g.pads_begin[1]);
    let mut even = [0u8; LANES];
    for (i, e) in even.iter_mut().enumerate() {
        *e = (2 * i) as u8;
    }
    // SAFETY: `even` holds 64 bytes; unaligned load.
    let even = unsafe { _mm512_loadu_si512(even.as_ptr().cast()) };
    for ox in (0..ow).step_by(LANES) {
        let mut acc = _mm512_setzero_si512();
        for t in 0..kw {
            // Output ox + i reads padded column (ox + i) * sw + t, buffer index
            // MARGIN - pw + that (pw <= MARGIN, by `supports`).
            let at = row.as_ptr().wrapping_add(MARGIN - pw + ox * sw + t);
            let taps = if sw == 1 {
                // SAFETY: 64 bytes from index MARGIN - pw + ox + t, below
                // MARGIN + blocks * sw + kw + 2 * LANES <= row_len <= row.len().
                unsafe { _mm512_loadu_si512(at.cast()) }
            } else {
                // SAFETY: 128 bytes from index MARGIN - pw + 2 * ox + t, inside the buffer
                // by the same bound (two vectors of slack).
                let (lo, hi) = unsafe {
                    (
                        _mm512_loadu_si512(at.cast()),
                        _mm512_loadu_si512(at.add(LANES).cast()),
                    )
                };
                _mm512_permutex2var_epi8(lo, even, hi)
            };
            acc = _mm512_max_epu8(acc, taps);
        }
        let mask = lanes(ow - ox);
        let acc = _mm512_xor_si512(acc, f);
        // SAFETY: outputs ox.. of this row, masked to the ow - ox that exist.
        unsafe { _mm512_mask_storeu_epi8(y_row.as_mut_ptr().add(ox).cast(), mask, acc) };
    }
}

/// Mask of the first `count` lanes (all 64 from 64 on).
fn lanes(count: usize) -> __mmask64 {
    if count >= LANES {
        u64::MAX
    } else {
        (1u64 << count) - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::pooling::pool_kernel::{geometry, max_pool, PoolParams, StorageOrder};
    use crate::support::rng::Rng;

    /// Every plane against `max_pool`'s reference walk, u8 and i8, on random geometries
    /// (pads, strides 1 and 2, ceil_mode, windows wholly in the padding, rows wider than a
    /// vector).
    #[test]
    fn byte_planes_match_the_reference_walk() {
        let mut rng = Rng::new(0x51);
        let mut ran = 0;
        for case in 0..300 {
            let kernel = vec![rng.range(1, 4), rng.range(1, 5)];
            let p = PoolParams {
                strides: vec![rng.range(1, 4), rng.range(1, 3)],
                pads_begin: vec![rng.below(kernel[0]), rng.below(kernel[1])],
                pads_end: vec![rng.below(kernel[0]), rng.below(kernel[1])],
                ceil_mode: rng.below(2) == 0,
                kernel,
                ..PoolParams::default()
            };
            let dims = [
                1,
                rng.range(1, 4),
                rng.range(p.kernel[0], 12),
                rng.range(p.kernel[1], 200),
            ];
            let (planes, g) = geometry("MaxPool", &dims, &p).unwrap();
            if !supports(&g) {
                continue;
            }
            ran += 1;
            let raw: Vec<u8> = (0..planes * g.in_len)
                .map(|_| rng.below(256) as u8)
                .collect();
            // u8
            let mut want = vec![0u8; planes * g.out_len];
            max_pool(&raw, &dims, &p, &mut want, None, StorageOrder::RowMajor).unwrap();
            let mut got = vec![0xEEu8; planes * g.out_len];
            for (x, y) in raw.chunks(g.in_len).zip(got.chunks_mut(g.out_len)) {
                plane_max(&g, x, y, 0);
            }
            assert_eq!(got, want, "u8 case {case}: {dims:?} {p:?}");
            // i8
            let signed: Vec<i8> = raw.iter().map(|&v| v as i8).collect();
            let mut want = vec![0i8; planes * g.out_len];
            max_pool(&signed, &dims, &p, &mut want, None, StorageOrder::RowMajor).unwrap();
            let mut got = vec![0x11u8; planes * g.out_len];
            for (x, y) in raw.chunks(g.in_len).zip(got.chunks_mut(g.out_len)) {
                plane_max(&g, x, y, 0x80);
            }
            let got: Vec<i8> = got.iter().map(|&v| v as i8).collect();
            assert_eq!(got, want, "i8 case {case}: {dims:?} {p:?}");
        }
        let has = std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vbmi");
        assert!(!has || ran > 100, "only {ran} cases ran");
    }
}
