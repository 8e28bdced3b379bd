//! Interleaving [`LANES`] channel rows into vectors of channels, and back: the layout change
//! around kernels that compute on channel blocks (the blocked depthwise convolution).
//!
//! `interleave_rows` turns `lanes` rows of `n` elements (row `l` at `src[l * stride..]`) into `n`
//! vectors of `LANES` elements (`dst[j * LANES + l]`); `deinterleave` does the reverse. Both are
//! 16x16 transposes; for f32 on AVX-512 they run in registers (masked loads and stores for the
//! ragged ends), elsewhere element by element.

use std::any::TypeId;

use super::float::Float;
use bytemuck::Pod;

/// Elements per interleaved vector.
pub(crate) const LANES: usize = 16;

/// `lanes` channel rows (channel `l` at `src[l * stride..]`, `n = rows * row_len` elements, a
/// band of `rows` image rows of `row_len`) into vectors of `LANES` channels, the lanes past
/// `lanes` zero; each image row's vectors start `dst_row` positions after the previous one's:
/// element `j` of a channel goes to lane `l` of position `(j / row_len) * dst_row + j %
/// row_len` of `dst`. One pass of
/// whole 16x16 transposes however short the rows (a 7-wide plane's rows share tiles), leaving
/// the positions between rows untouched (the padding a caller fills).
///
/// # Panics
/// When `lanes > LANES`, `dst_row < row_len`, `dst` holds fewer than `((rows - 1) * dst_row +
/// row_len) * LANES` elements or `src` fewer than `(lanes - 1) * stride + rows * row_len`.
pub(crate) fn interleave_rows<T: Pod>(
    src: &[T],
    stride: usize,
    lanes: usize,
    (row_len, rows): (usize, usize),
    dst_row: usize,
    dst: &mut [T],
) {
    let n = row_len * rows;
    assert!(lanes <= LANES && (rows <= 1 || dst_row >= row_len));
    assert!(n == 0 || dst.len() >= ((rows - 1) * dst_row + row_len) * LANES);
    assert!(lanes == 0 || n == 0 || src.len() >= (lanes - 1) * stride + n);
    if n == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if let (Some(src), Some(dst)) = (as_f32(src), as_f32_mut(dst)) {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: AVX-512F was detected just now; the extents were asserted above.
            unsafe { avx512::interleave(src, stride, lanes, (row_len, rows), dst_row, dst) };
            return;
        }
    }
    for j in 0..n {
        let at = ((j / row_len) * dst_row + j % row_len) * LANES;
        for (l, d) in dst[at..at + LANES].iter_mut().enumerate() {
            *d = if l < lanes {
                src[l * stride + j]
            } else {
                T::zeroed()
            };
        }
    }
}

/// `dst[l * stride + j] = src[j * LANES + l]` for `j < n`, `l < lanes`: the inverse of
/// [`interleave_rows`] (of one row). Nothing else of `dst` is written.
///
/// # Panics
/// When `lanes > LANES`, `src` holds fewer than `n * LANES` elements or `dst` fewer than
/// `(lanes - 1) * stride + n`.
pub(crate) fn deinterleave<T: Pod>(
    src: &[T],
    stride: usize,
    lanes: usize,
    n: usize,
    dst: &mut [T],
) {
    assert!(src.len() >= n * LANES);
    transpose_lanes(src, LANES, lanes, n, dst, stride);
}

/// `dst[l * dst_rs + j] = src[j * src_rs + l]` for `j < n`, `l < lanes`: `n` rows of `lanes`
/// elements (`src_rs` apart) into `lanes` rows of `n` (`dst_rs` apart), by 16x16 register
/// transposes for f32 on AVX-512. Nothing else of `dst` is written.
///
/// # Panics
/// When `lanes > LANES` or, with `n` and `lanes` above 0, `src` holds fewer than
/// `(n - 1) * src_rs + lanes` elements or `dst` fewer than `(lanes - 1) * dst_rs + n`.
pub(crate) fn transpose_lanes<T: Pod>(
    src: &[T],
    src_rs: usize,
    lanes: usize,
    n: usize,
    dst: &mut [T],
    dst_rs: usize,
) {
    if transposed_in_registers(src, None, src_rs, lanes, n, dst, dst_rs) {
        return;
    }
    for l in 0..lanes {
        let row = &mut dst[l * dst_rs..][..n];
        for (j, d) in row.iter_mut().enumerate() {
            *d = src[j * src_rs + l];
        }
    }
}

/// [`transpose_lanes`] of the sum `src + add` (`add` laid out as `src`):
/// `dst[l * dst_rs + j] = src[j * src_rs + l] + add[j * src_rs + l]`. The two halves of a
/// product whose depth was split are added on their way through the registers.
///
/// # Panics
/// As [`transpose_lanes`], for `add` as for `src`.
pub(crate) fn transpose_lanes_sum<T: Float + Pod>(
    (src, add): (&[T], &[T]),
    src_rs: usize,
    lanes: usize,
    n: usize,
    dst: &mut [T],
    dst_rs: usize,
) {
    if transposed_in_registers(src, Some(add), src_rs, lanes, n, dst, dst_rs) {
        return;
    }
    for l in 0..lanes {
        let row = &mut dst[l * dst_rs..][..n];
        for (j, d) in row.iter_mut().enumerate() {
            *d = src[j * src_rs + l] + add[j * src_rs + l];
        }
    }
}

/// The checks of [`transpose_lanes`] and [`transpose_lanes_sum`] (`add` given), then the whole
/// transpose by 16x16 register transposes for f32 on AVX-512: `true` when it is done (or there
/// is nothing to do), `false` when the caller's portable loop must do it.
fn transposed_in_registers<T: Pod>(
    src: &[T],
    add: Option<&[T]>,
    src_rs: usize,
    lanes: usize,
    n: usize,
    dst: &mut [T],
    dst_rs: usize,
) -> bool {
    assert!(lanes <= LANES);
    if lanes == 0 || n == 0 {
        return true;
    }
    let need = (n - 1) * src_rs + lanes;
    assert!(src.len() >= need && add.is_none_or(|a| a.len() >= need));
    assert!(dst.len() >= (lanes - 1) * dst_rs + n);
    #[cfg(target_arch = "x86_64")]
    if let (Some(src), Some(dst)) = (as_f32(src), as_f32_mut(dst)) {
        // `add` has the type of `src`, f32 too.
        let add = add.and_then(as_f32);
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: AVX-512F was detected just now; the extents were asserted above.
            unsafe { avx512::transpose_lanes(src, add, src_rs, lanes, n, dst, dst_rs) };
            return true;
        }
    }
    false
}

fn as_f32<T: Pod>(s: &[T]) -> Option<&[f32]> {
    (TypeId::of::<T>() == TypeId::of::<f32>()).then(|| bytemuck::cast_slice(s))
}

fn as_f32_mut<T: Pod>(s: &mut [T]) -> Option<&mut [f32]> {
    (TypeId::of::<T>() == TypeId::of::<f32>()).then(|| bytemuck::cast_slice_mut(s))
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512 {
    use std::arch::x86_64::*;

    use super::LANES;

    /// Transposes the 16x16 matrix whose rows are `r` in registers.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) fn transpose(r: &mut [__m512; 16]) {
        let mut t = [_mm512_setzero_ps(); 16];
        for i in 0..8 {
            t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        for q in 0..4 {
            let b = 4 * q;
            r[b] = lo(t[b], t[b + 2]);
            r[b + 1] = hi(t[b], t[b + 2]);
            r[b + 2] = lo(t[b + 1], t[b + 3]);
            r[b + 3] = hi(t[b + 1], t[b + 3]);
        }
        for h in 0..2 {
            let b = 8 * h;
            for i in 0..4 {
                t[b + i] = _mm512_shuffle_f32x4::<0x88>(r[b + i], r[b + 4 + i]);
                t[b + 4 + i] = _mm512_shuffle_f32x4::<0xdd>(r[b + i], r[b + 4 + i]);
            }
        }
        for i in 0..8 {
            r[i] = _mm512_shuffle_f32x4::<0x88>(t[i], t[8 + i]);
            r[8 + i] = _mm512_shuffle_f32x4::<0xdd>(t[i], t[8 + i]);
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn lo(a: __m512, b: __m512) -> __m512 {
        _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)))
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn hi(a: __m512, b: __m512) -> __m512 {
        _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)))
    }

    /// The first `count` (at most 16) lanes.
    #[inline]
    pub(crate) fn mask(count: usize) -> __mmask16 {
        if count >= 16 {
            0xffff
        } else {
            (1u16 << count) - 1
        }
    }

    /// # Safety
    /// AVX-512F is available and the extents are those [`super::interleave_rows`] asserts:
    /// `lanes <= LANES`, `n = rows * row_len > 0`, `dst_row >= row_len` (or one row),
    /// `dst.len() >= ((rows - 1) * dst_row + row_len) * LANES` and, unless `lanes` is 0,
    /// `src.len() >= (lanes - 1) * stride + n`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn interleave(
        src: &[f32],
        stride: usize,
        lanes: usize,
        (row_len, rows): (usize, usize),
        dst_row: usize,
        dst: &mut [f32],
    ) {
        let n = row_len * rows;
        let mut r = [_mm512_setzero_ps(); 16];
        // Destination of the next element: row and column.
        let (mut row, mut col) = (0, 0);
        for j0 in (0..n).step_by(LANES) {
            let count = (n - j0).min(LANES);
            let m = mask(count);
            for (l, v) in r.iter_mut().enumerate() {
                *v = if l < lanes {
                    // SAFETY: the unmasked elements l * stride + j0 .. + count lie below
                    // (lanes - 1) * stride + n <= src.len(); masked-off ones are not accessed.
                    unsafe { _mm512_maskz_loadu_ps(m, src.as_ptr().add(l * stride + j0)) }
                } else {
                    _mm512_setzero_ps()
                };
            }
            transpose(&mut r);
            for &vector in r.iter().take(count) {
                // SAFETY: row < rows and col < row_len, so the position's LANES elements end
                // at most at ((rows - 1) * dst_row + row_len) * LANES <= dst.len().
                unsafe {
                    _mm512_storeu_ps(dst.as_mut_ptr().add((row * dst_row + col) * LANES), vector)
                };
                col += 1;
                if col == row_len {
                    (row, col) = (row + 1, 0);
                }
            }
        }
    }

    /// With `add`, the transpose of `src + add`.
    ///
    /// # Safety
    /// AVX-512F is available; `0 < lanes <= LANES`, `n > 0`, `src.len() >= (n - 1) * src_rs +
    /// lanes` (and so `add`, if given) and `dst.len() >= (lanes - 1) * dst_rs + n`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn transpose_lanes(
        src: &[f32],
        add: Option<&[f32]>,
        src_rs: usize,
        lanes: usize,
        n: usize,
        dst: &mut [f32],
        dst_rs: usize,
    ) {
        let mut r = [_mm512_setzero_ps(); 16];
        let load = mask(lanes);
        for j0 in (0..n).step_by(LANES) {
            let count = (n - j0).min(LANES);
            for (j, row) in r.iter_mut().enumerate() {
                *row = if j < count {
                    let at = (j0 + j) * src_rs;
                    // SAFETY: the unmasked elements at .. at + lanes lie below
                    // (n - 1) * src_rs + lanes <= src.len() (and add.len()); masked-off ones
                    // are not read.
                    unsafe {
                        let v = _mm512_maskz_loadu_ps(load, src.as_ptr().add(at));
                        match add {
                            Some(add) => {
                                _mm512_add_ps(v, _mm512_maskz_loadu_ps(load, add.as_ptr().add(at)))
                            }
                            None => v,
                        }
                    }
                } else {
                    _mm512_setzero_ps()
                };
            }
            transpose(&mut r);
            let m = mask(count);
            for (l, &vector) in r.iter().enumerate().take(lanes) {
                // SAFETY: the unmasked elements l * dst_rs + j0 .. + count lie below
                // (lanes - 1) * dst_rs + n <= dst.len(); masked-off ones are not written.
                unsafe { _mm512_mask_storeu_ps(dst.as_mut_ptr().add(l * dst_rs + j0), m, vector) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both directions against the definition, for widths around a tile and partial lane
    /// counts, in f32 (the vector path where the CPU has it) and f64 (the portable one).
    #[test]
    fn interleave_and_back_transpose_exactly() {
        for n in [0, 1, 7, 15, 16, 17, 35, 40] {
            for lanes in [0, 1, 5, 16] {
                let stride = n + 3;
                let src: Vec<f32> = (0..lanes * stride).map(|i| i as f32 + 0.5).collect();
                let mut dst = vec![f32::NAN; n * LANES];
                interleave_rows(&src, stride, lanes, (n, 1), n, &mut dst);
                for j in 0..n {
                    for l in 0..LANES {
                        let want = if l < lanes { src[l * stride + j] } else { 0.0 };
                        assert_eq!(dst[j * LANES + l], want, "n {n} lanes {lanes} ({j}, {l})");
                    }
                }
                let mut back = vec![-1.0f32; lanes * stride];
                deinterleave(&dst, stride, lanes, n, &mut back);
                for l in 0..lanes {
                    for j in 0..stride {
                        let want = if j < n { src[l * stride + j] } else { -1.0 };
                        assert_eq!(back[l * stride + j], want, "n {n} lanes {lanes} ({l}, {j})");
                    }
                }
                // The same elements as rows of 5 spread 7 positions apart.
                if n % 5 == 0 && n > 0 {
                    let rows = n / 5;
                    let mut spread = vec![f32::NAN; ((rows - 1) * 7 + 5) * LANES];
                    interleave_rows(&src, stride, lanes, (5, rows), 7, &mut spread);
                    for j in 0..n {
                        let at = ((j / 5) * 7 + j % 5) * LANES;
                        assert_eq!(spread[at..at + LANES], dst[j * LANES..][..LANES]);
                    }
                    assert!(spread[5 * LANES..7 * LANES].iter().all(|v| v.is_nan()) || rows == 1);
                }
                let src64: Vec<f64> = src.iter().map(|&v| v as f64).collect();
                let mut dst64 = vec![f64::NAN; n * LANES];
                interleave_rows(&src64, stride, lanes, (n, 1), n, &mut dst64);
                assert!(dst64.iter().zip(&dst).all(|(&a, &b)| a == b as f64));
            }
        }
    }

    /// The sum of two sources lands where the transpose of either would, element by element,
    /// in f32 (vector path) and f64; nothing around the block is written.
    #[test]
    fn transpose_lanes_sum_adds_both_sources() {
        for (n, lanes, src_rs, dst_rs) in [(1, 1, 1, 1), (49, 16, 160, 49), (17, 7, 9, 20)] {
            let len = (n - 1) * src_rs + lanes;
            let src: Vec<f32> = (0..len).map(|i| i as f32 + 0.25).collect();
            let add: Vec<f32> = (0..len).map(|i| (i * i % 7) as f32 - 3.0).collect();
            let mut dst = vec![-1.0f32; (lanes - 1) * dst_rs + n + 3];
            transpose_lanes_sum((&src, &add), src_rs, lanes, n, &mut dst, dst_rs);
            let (src64, add64): (Vec<f64>, Vec<f64>) = src
                .iter()
                .zip(&add)
                .map(|(&s, &a)| (s as f64, a as f64))
                .unzip();
            let mut dst64 = vec![-1.0f64; dst.len()];
            transpose_lanes_sum((&src64, &add64), src_rs, lanes, n, &mut dst64, dst_rs);
            for (at, (&v, &w)) in dst.iter().zip(&dst64).enumerate() {
                let (l, j) = (at / dst_rs, at % dst_rs);
                let want = if l < lanes && j < n {
                    src[j * src_rs + l] + add[j * src_rs + l]
                } else {
                    -1.0
                };
                assert_eq!(v, want, "{n} {lanes} {src_rs} {dst_rs} at {at}");
                assert_eq!(w, want as f64);
            }
        }
    }

    /// Rows of any stride into rows of any stride: every element of the `lanes x n` block lands
    /// at its transposed place and nothing around it is written, in f32 (vector path) and f64.
    #[test]
    fn transpose_lanes_moves_exactly_the_block() {
        for (n, lanes, src_rs, dst_rs) in [
            (1, 1, 1, 1),
            (17, 16, 16, 17),
            (40, 5, 9, 43),
            (16, 3, 3, 20),
            (33, 12, 64, 33),
        ] {
            let src: Vec<f32> = (0..(n - 1) * src_rs + lanes)
                .map(|i| i as f32 + 0.25)
                .collect();
            let mut dst = vec![-1.0f32; (lanes - 1) * dst_rs + n + 5];
            transpose_lanes(&src, src_rs, lanes, n, &mut dst, dst_rs);
            let mut dst64 = vec![-1.0f64; dst.len()];
            let src64: Vec<f64> = src.iter().map(|&v| v as f64).collect();
            transpose_lanes(&src64, src_rs, lanes, n, &mut dst64, dst_rs);
            for (at, (&v, &w)) in dst.iter().zip(&dst64).enumerate() {
                let (l, j) = (at / dst_rs, at % dst_rs);
                let want = if l < lanes && j < n {
                    src[j * src_rs + l]
                } else {
                    -1.0
                };
                assert_eq!(v, want, "{n} {lanes} {src_rs} {dst_rs} at {at}");
                assert_eq!(w, want as f64);
            }
        }
    }
}
