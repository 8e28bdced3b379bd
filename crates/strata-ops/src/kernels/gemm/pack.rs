//! Packing operands into the microkernels' sliver layout, and the per-thread buffers they are
//! packed into.
//!
//! A packed block of a `kc x width` operand (rows `p`, columns `j`) is a run of slivers of `w`
//! columns: sliver `s` holds, for each `p`, the `w` elements `(p, s * w + j)` contiguously,
//! zero-padded past the last column. B is packed as is (`w = NR`); A is packed transposed, so
//! each sliver holds, per step `p` of the product, `MR` consecutive rows (`w = MR`).
//!
//! Buffers are thread-local and only ever grow: the first products on a thread size them (to at
//! most one `KC x NC` block of B and one `MR x KC` sliver of A), later ones reuse them, so a
//! steady stream of products allocates nothing. A caller-provided scratch argument would have
//! changed `gemm`'s signature and every caller's scratch planning; the blocks are small (about
//! half a MiB per thread), so keeping them per thread costs little and needs no coordination.

use std::cell::RefCell;

use bytemuck::{Pod, Zeroable};

use super::super::float::Float;

/// A read-only strided matrix view: element `(i, j)` is `data[i * rs + j * cs]`. Whoever builds
/// one has checked that every element it will be asked for lies in `data`.
#[derive(Clone, Copy, Debug)]
pub struct MatRef<'a, T> {
    pub data: &'a [T],
    pub rs: isize,
    pub cs: isize,
}

impl<T: Copy> MatRef<'_, T> {
    /// The transposed view (no copy).
    #[inline]
    pub fn t(self) -> Self {
        MatRef {
            data: self.data,
            rs: self.cs,
            cs: self.rs,
        }
    }

    /// Offset of element `(i, j)`. Checked operands give in-bounds, non-negative offsets; a
    /// wrong one would make the slice index below panic, never read out of bounds.
    #[inline(always)]
    pub(super) fn offset(&self, i: usize, j: usize) -> usize {
        (i as isize * self.rs + j as isize * self.cs) as usize
    }
}

/// Packs rows `p0..p0 + kc` by columns `j0..j0 + width` of `src` into `dst` as slivers of `W`
/// columns (see the module docs); returns the packed length, `width.div_ceil(W) * kc * W`.
/// `W` is a constant so that copying one sliver row is a few vector moves, not a `memcpy` call.
pub fn pack_block<T: Float + Pod, const W: usize>(
    dst: &mut [T],
    src: MatRef<'_, T>,
    p0: usize,
    kc: usize,
    j0: usize,
    width: usize,
) -> usize {
    let slivers = width.div_ceil(W);
    let len = slivers * kc * W;
    let dst = &mut dst[..len];
    if kc == 0 || width == 0 {
        return len;
    }
    // Rows contiguous: the whole slivers row by row, so the source is read as `kc` runs of
    // `W * full` elements instead of `full` walks down `kc` rows 64 bytes at a time (with a
    // power-of-two row stride those walks keep to a few cache sets and miss in L1 and L2).
    let full = if src.cs == 1 { width / W } else { 0 };
    if full > 0 {
        for p in 0..kc {
            let row = &src.data[src.offset(p0 + p, j0)..][..full * W];
            for (s, chunk) in row.chunks_exact(W).enumerate() {
                dst[(s * kc + p) * W..][..W].copy_from_slice(chunk);
            }
        }
    }
    for (s, sliver) in dst.chunks_exact_mut(kc * W).enumerate().skip(full) {
        let cols = (width - s * W).min(W);
        let j = j0 + s * W;
        if src.cs == 1 && cols == W {
            // Rows contiguous, whole sliver: one fixed-size copy per row.
            for (p, out) in sliver.chunks_exact_mut(W).enumerate() {
                let row = &src.data[src.offset(p0 + p, j)..][..W];
                out.copy_from_slice(row);
            }
        } else if src.cs == 1 {
            for (p, out) in sliver.chunks_exact_mut(W).enumerate() {
                let row = &src.data[src.offset(p0 + p, j)..][..cols];
                for (x, &y) in out.iter_mut().zip(row) {
                    *x = y;
                }
                for x in &mut out[cols..] {
                    *x = T::ZERO;
                }
            }
        } else if src.rs == 1 && pack_columns_fast(sliver, W, src, (p0, kc), (j, cols)) {
            // Columns contiguous (a row-major A, a transposed B): packed by 16x16 transposes.
        } else if src.rs == 1 {
            // Columns contiguous: each source column fills one lane of every sliver row.
            for lane in 0..W {
                if lane < cols {
                    let col = &src.data[src.offset(p0, j + lane)..][..kc];
                    for (out, &x) in sliver.chunks_exact_mut(W).zip(col) {
                        out[lane] = x;
                    }
                } else {
                    for out in sliver.chunks_exact_mut(W) {
                        out[lane] = T::ZERO;
                    }
                }
            }
        } else {
            for (p, out) in sliver.chunks_exact_mut(W).enumerate() {
                for (lane, x) in out.iter_mut().enumerate() {
                    *x = if lane < cols {
                        src.data[src.offset(p0 + p, j + lane)]
                    } else {
                        T::ZERO
                    };
                }
            }
        }
    }
    len
}

/// One packed sliver of `w` lanes by `kc` rows from columns stored contiguously: lane `l < cols`
/// of row `p` is `src[l * cs + p]`, lanes `cols..w` are zero. For B given as its transpose (a
/// weight matrix stored by output feature, as quantized weights are) by a [`super::ProduceB`].
pub fn pack_transposed_sliver<T: Float + Pod>(
    sliver: &mut [T],
    w: usize,
    src: &[T],
    cs: usize,
    kc: usize,
    cols: usize,
) {
    let view = MatRef {
        data: src,
        rs: 1,
        cs: cs as isize,
    };
    if pack_columns_fast(sliver, w, view, (0, kc), (0, cols)) {
        return;
    }
    for (p, row) in sliver[..kc * w].chunks_exact_mut(w).enumerate() {
        for (l, x) in row.iter_mut().enumerate() {
            *x = if l < cols { src[l * cs + p] } else { T::ZERO };
        }
    }
}

/// One sliver (`w` lanes, `kc` rows) of a source whose columns are contiguous (`src.rs == 1`),
/// columns `j..j + cols` from row `p0`, by register transposes (16x16 with AVX-512, 8x8 with
/// AVX2) where the element is f32; `false` (nothing written) otherwise. Column by column, each
/// element would be a store of its own, `w` elements apart.
fn pack_columns_fast<T: Float + Pod>(
    sliver: &mut [T],
    w: usize,
    src: MatRef<'_, T>,
    (p0, kc): (usize, usize),
    (j, cols): (usize, usize),
) -> bool {
    #[cfg(target_arch = "x86_64")]
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() {
        let avx512 = std::arch::is_x86_feature_detected!("avx512f");
        if avx512 || std::arch::is_x86_feature_detected!("avx2") {
            let (sliver, data): (&mut [f32], &[f32]) = (
                bytemuck::cast_slice_mut(sliver),
                bytemuck::cast_slice(src.data),
            );
            let cs = src.cs as usize;
            let first = src.offset(p0, j);
            // Column l's kc elements start at first + l * cs: the last must be inside `data`
            // (checked operands guarantee it; a wrong one fails here instead of reading past).
            assert!(cols <= w && sliver.len() >= kc * w);
            assert!(cols == 0 || kc == 0 || first + (cols - 1) * cs + kc <= data.len());
            let data = &data[first..];
            // SAFETY: the feature each call needs was detected just now; the extents were
            // asserted above.
            unsafe {
                if avx512 {
                    avx512::pack_columns(sliver, w, data, cs, kc, cols);
                } else {
                    avx2::pack_columns(sliver, w, data, cs, kc, cols);
                }
            }
            return true;
        }
    }
    let _ = (sliver, w, src, p0, kc, j, cols);
    false
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// The first `count` (at most 8) of 8 lanes, as `vmaskmovps` takes them.
    #[target_feature(enable = "avx2")]
    fn mask(count: usize) -> __m256i {
        let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        _mm256_cmpgt_epi32(_mm256_set1_epi32(count as i32), lane)
    }

    /// Transposes the 8 x 8 block `r` (row `i` lane `j` becomes row `j` lane `i`).
    #[target_feature(enable = "avx2")]
    fn transpose(r: &mut [__m256; 8]) {
        let t0 = _mm256_unpacklo_ps(r[0], r[1]);
        let t1 = _mm256_unpackhi_ps(r[0], r[1]);
        let t2 = _mm256_unpacklo_ps(r[2], r[3]);
        let t3 = _mm256_unpackhi_ps(r[2], r[3]);
        let t4 = _mm256_unpacklo_ps(r[4], r[5]);
        let t5 = _mm256_unpackhi_ps(r[4], r[5]);
        let t6 = _mm256_unpacklo_ps(r[6], r[7]);
        let t7 = _mm256_unpackhi_ps(r[6], r[7]);
        // Rows 0..4 (and 4..8) of columns 0, 1, 2, 3 in the low halves, 4..8 in the high ones.
        let s0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let s1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
        let s2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let s3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
        let s4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let s5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
        let s6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let s7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
        r[0] = _mm256_permute2f128_ps::<0x20>(s0, s4);
        r[1] = _mm256_permute2f128_ps::<0x20>(s1, s5);
        r[2] = _mm256_permute2f128_ps::<0x20>(s2, s6);
        r[3] = _mm256_permute2f128_ps::<0x20>(s3, s7);
        r[4] = _mm256_permute2f128_ps::<0x31>(s0, s4);
        r[5] = _mm256_permute2f128_ps::<0x31>(s1, s5);
        r[6] = _mm256_permute2f128_ps::<0x31>(s2, s6);
        r[7] = _mm256_permute2f128_ps::<0x31>(s3, s7);
    }

    /// `sliver[p * w + l] = src[l * cs + p]` for `p < kc`, `l < cols`, and 0 for the lanes
    /// `cols..w`: 8 rows by 8 lanes at a time, as the AVX-512 version does 16 by 16 (on AVX2
    /// packing is memory-bound either way: in BERT-base, 1 thread, the packing share of the
    /// run went from 3.5 % to 3.1 % of the perf samples).
    ///
    /// # Safety
    /// AVX2 is available; `cols <= w`, `sliver.len() >= kc * w` and, unless `cols` or `kc` is
    /// 0, `src.len() >= (cols - 1) * cs + kc`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn pack_columns(
        sliver: &mut [f32],
        w: usize,
        src: &[f32],
        cs: usize,
        kc: usize,
        cols: usize,
    ) {
        let mut r = [_mm256_setzero_ps(); 8];
        for l0 in (0..w).step_by(8) {
            let lanes = (w - l0).min(8);
            let store = mask(lanes);
            for p in (0..kc).step_by(8) {
                let count = (kc - p).min(8);
                let load = mask(count);
                for (l, v) in r.iter_mut().enumerate() {
                    *v = if l0 + l < cols {
                        let at = src.as_ptr().wrapping_add((l0 + l) * cs + p);
                        // SAFETY: elements (l0 + l) * cs + p .. + count lie below
                        // (cols - 1) * cs + kc <= src.len(); with count < 8 the rest are
                        // masked off and not read (masked loads are slow: only for the tail).
                        unsafe {
                            if count == 8 {
                                _mm256_loadu_ps(at)
                            } else {
                                _mm256_maskload_ps(at, load)
                            }
                        }
                    } else {
                        _mm256_setzero_ps()
                    };
                }
                transpose(&mut r);
                for (q, &row) in r.iter().enumerate().take(count) {
                    let at = sliver.as_mut_ptr().wrapping_add((p + q) * w + l0);
                    // A whole vector where it fits: with all 8 lanes, or with a narrower
                    // sliver (w < 8, a single lane block) while the 8 elements stay inside it:
                    // the lanes past w spill into the following rows' starts, which those
                    // rows' own stores overwrite next. Masked stores are slow on AMD cores.
                    if lanes == 8 || (w < 8 && (p + q) * w + 8 <= kc * w) {
                        // SAFETY: 8 elements from (p + q) * w + l0 end at most at
                        // (p + q) * w + w <= kc * w with 8 lanes (l0 + 8 <= w), else at
                        // (p + q) * w + 8 <= kc * w (l0 = 0); kc * w <= sliver.len().
                        unsafe { _mm256_storeu_ps(at, row) };
                    } else {
                        // SAFETY: lanes l0..l0 + lanes of row p + q < kc end at most at
                        // (p + q) * w + w <= kc * w <= sliver.len(); the rest is masked off.
                        unsafe { _mm256_maskstore_ps(at, store, row) };
                    }
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use crate::kernels::interleave::avx512::{mask, transpose};

    /// `sliver[p * w + l] = src[l * cs + p]` for `p < kc`, `l < cols`, and 0 for the lanes
    /// `cols..w`: 16 rows by 16 lanes at a time, each block loaded as 16 column pieces,
    /// transposed in registers and stored as 16 sliver rows.
    ///
    /// # Safety
    /// AVX-512F is available; `cols <= w`, `sliver.len() >= kc * w` and, unless `cols` or `kc`
    /// is 0, `src.len() >= (cols - 1) * cs + kc`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn pack_columns(
        sliver: &mut [f32],
        w: usize,
        src: &[f32],
        cs: usize,
        kc: usize,
        cols: usize,
    ) {
        let mut r = [_mm512_setzero_ps(); 16];
        for l0 in (0..w).step_by(16) {
            let lanes = (w - l0).min(16);
            let store = mask(lanes);
            for p in (0..kc).step_by(16) {
                let count = (kc - p).min(16);
                let load = mask(count);
                for (l, v) in r.iter_mut().enumerate() {
                    *v = if l0 + l < cols {
                        // SAFETY: the unmasked elements (l0 + l) * cs + p .. + count lie below
                        // (cols - 1) * cs + kc <= src.len(); masked-off ones are not read.
                        unsafe { _mm512_maskz_loadu_ps(load, src.as_ptr().add((l0 + l) * cs + p)) }
                    } else {
                        _mm512_setzero_ps()
                    };
                }
                transpose(&mut r);
                for (q, &row) in r.iter().enumerate().take(count) {
                    // SAFETY: lanes l0..l0 + lanes of row p + q < kc end at most at
                    // (p + q) * w + w <= kc * w <= sliver.len(); the rest is masked off.
                    unsafe {
                        _mm512_mask_storeu_ps(sliver.as_mut_ptr().add((p + q) * w + l0), store, row)
                    };
                }
            }
        }
    }
}

/// One cache line: the unit the packing buffers are allocated in, so they are 64-byte aligned.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// The packing buffers of one thread.
#[derive(Default)]
struct PackBuffers {
    a: Vec<Line>,
    b: Vec<Line>,
}

impl PackBuffers {
    /// Typed views of at least `a_len` and `b_len` elements, growing the buffers if needed.
    fn slices<T: Pod>(&mut self, a_len: usize, b_len: usize) -> (&mut [T], &mut [T]) {
        fn grow<T>(lines: &mut Vec<Line>, len: usize) {
            let needed = (len * std::mem::size_of::<T>()).div_ceil(std::mem::size_of::<Line>());
            if lines.len() < needed {
                lines.resize(needed, Line::zeroed());
            }
        }
        grow::<T>(&mut self.a, a_len);
        grow::<T>(&mut self.b, b_len);
        let a: &mut [T] = bytemuck::cast_slice_mut(&mut self.a[..]);
        let b: &mut [T] = bytemuck::cast_slice_mut(&mut self.b[..]);
        (&mut a[..a_len], &mut b[..b_len])
    }
}

thread_local! {
    static BUFFERS: RefCell<PackBuffers> = const {
        RefCell::new(PackBuffers { a: Vec::new(), b: Vec::new() })
    };
}

/// Runs `f` with this thread's packing buffers for A (`a_len` elements) and B (`b_len`). Should
/// the thread's buffers be in use already (a product started from inside another one) or gone
/// (thread teardown), `f` gets fresh temporary buffers instead: correct, just not allocation-free.
pub fn with_pack_buffers<T: Pod, R>(
    a_len: usize,
    b_len: usize,
    f: impl FnOnce(&mut [T], &mut [T]) -> R,
) -> R {
    let mut f = Some(f);
    let reused = BUFFERS.try_with(|cell| {
        let mut buffers = cell.try_borrow_mut().ok()?;
        let f = f.take()?;
        let (a, b) = buffers.slices(a_len, b_len);
        Some(f(a, b))
    });
    if let Ok(Some(result)) = reused {
        return result;
    }
    let mut temporary = PackBuffers::default();
    let (a, b) = temporary.slices(a_len, b_len);
    match f.take() {
        Some(f) => f(a, b),
        None => unreachable!("`f` is only taken on the path that returns its result"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_every_layout_into_zero_padded_slivers() {
        // A 3 x 5 source, values 10 * row + col, in three layouts.
        let value = |p: usize, j: usize| (10 * p + j) as f32;
        let row_major: Vec<f32> = (0..3)
            .flat_map(|p| (0..5).map(move |j| value(p, j)))
            .collect();
        let col_major: Vec<f32> = (0..5)
            .flat_map(|j| (0..3).map(move |p| value(p, j)))
            .collect();
        let mut padded = [f32::NAN; 3 * 14];
        for p in 0..3 {
            for j in 0..5 {
                padded[p * 2 + j * 7] = value(p, j);
            }
        }
        let views = [
            MatRef {
                data: &row_major[..],
                rs: 5,
                cs: 1,
            },
            MatRef {
                data: &col_major[..],
                rs: 1,
                cs: 3,
            },
            MatRef {
                data: &padded[..],
                rs: 2,
                cs: 7,
            },
        ];
        for view in views {
            // Rows 1..3, columns 1..5 in slivers of 3: [1, 2, 3], [4, pad, pad].
            let mut dst = vec![f32::NAN; 20];
            assert_eq!(pack_block::<f32, 3>(&mut dst, view, 1, 2, 1, 4), 12);
            assert_eq!(
                dst[..12],
                [11.0, 12.0, 13.0, 21.0, 22.0, 23.0, 14.0, 0.0, 0.0, 24.0, 0.0, 0.0],
                "{view:?}"
            );
            assert!(dst[12..].iter().all(|x| x.is_nan()), "wrote past the block");
            // All rows, all columns in slivers of 2: two whole slivers, then a partial one.
            let mut dst = vec![f32::NAN; 20];
            assert_eq!(pack_block::<f32, 2>(&mut dst, view, 0, 3, 0, 5), 18);
            assert_eq!(
                dst[..18],
                [
                    0.0, 1.0, 10.0, 11.0, 20.0, 21.0, 2.0, 3.0, 12.0, 13.0, 22.0, 23.0, 4.0, 0.0,
                    14.0, 0.0, 24.0, 0.0
                ],
                "{view:?}"
            );
            assert!(dst[18..].iter().all(|x| x.is_nan()), "wrote past the block");
        }
    }

    /// Column-contiguous sources (a row-major A seen transposed) take the transposing path on
    /// AVX-512 or AVX2 f32: every sliver width the microkernels use, depths around the 16-row blocks,
    /// partial slivers, against the definition (f64 checks the element-by-element path).
    #[test]
    fn column_contiguous_sources_pack_like_the_definition() {
        fn check<T: Float + Pod + From<u16>, const W: usize>() {
            let (k, n, cs) = (41, 37, 45);
            let data: Vec<T> = (0..n * cs).map(|i| T::from(i as u16)).collect();
            let src = MatRef {
                data: &data[..],
                rs: 1,
                cs: cs as isize,
            };
            for (p0, kc) in [(0, 1), (3, 15), (0, 16), (2, 17), (0, 41), (5, 33)] {
                assert!(p0 + kc <= k && cs >= k);
                for (j0, width) in [(0, W), (1, W - 1), (4, 2 * W + 3), (0, n.min(3 * W))] {
                    if j0 + width > n {
                        continue;
                    }
                    let mut dst = vec![T::ONE; width.div_ceil(W) * kc * W + 7];
                    let len = pack_block::<T, W>(&mut dst, src, p0, kc, j0, width);
                    for s in 0..width.div_ceil(W) {
                        for p in 0..kc {
                            for l in 0..W {
                                let j = s * W + l;
                                let want = if j < width {
                                    data[(j0 + j) * cs + p0 + p]
                                } else {
                                    T::ZERO
                                };
                                let got = dst[s * kc * W + p * W + l];
                                assert!(
                                    got == want,
                                    "W {W} p0 {p0} kc {kc} j0 {j0} ({s}, {p}, {l})"
                                );
                            }
                        }
                    }
                    assert!(
                        dst[len..].iter().all(|&x| x == T::ONE),
                        "wrote past the block"
                    );
                }
            }
        }
        check::<f32, 1>();
        check::<f32, 3>();
        check::<f32, 6>();
        check::<f32, 8>();
        check::<f32, 11>();
        check::<f32, 13>();
        check::<f32, 14>();
        check::<f32, 16>();
        check::<f32, 32>();
        check::<f64, 8>();
        check::<f64, 13>();
    }

    #[test]
    fn buffers_are_reused_and_nested_use_gets_fresh_ones() {
        let first = with_pack_buffers::<f32, _>(100, 1000, |a, b| {
            a.fill(1.0);
            b.fill(2.0);
            (a.as_ptr() as usize, b.as_ptr() as usize)
        });
        assert_eq!(first.0 % 64, 0);
        assert_eq!(first.1 % 64, 0);
        let again = with_pack_buffers::<f64, _>(10, 100, |a, b| {
            // Nested: the thread's buffers are taken, so these are temporary ones.
            let nested = with_pack_buffers::<f32, _>(1, 1, |x, _| x.as_ptr() as usize);
            assert_ne!(nested, a.as_ptr() as usize);
            (a.as_ptr() as usize, b.as_ptr() as usize)
        });
        assert_eq!(again, first, "smaller requests reuse the same memory");
    }
}
