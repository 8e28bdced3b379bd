//! AVX2 block dots: the legacy weight formats against [`Q8Block`] activations with 8-bit
//! integer products (`vpmaddubsw` then `vpmaddwd`, llama.cpp's scheme), and an FMA float dot for
//! the dequantized path. Every function requires AVX2, FMA and F16C, checked by the caller at run
//! time.

use std::arch::x86_64::*;

use strata_core::dtype::block::{Q4_0_BYTES, Q4_1_BYTES, Q5_0_BYTES, Q5_1_BYTES, Q8_0_BYTES};

use super::q8::Q8Block;

/// The f16 at byte `at` of `b` as f32, with F16C (the block scales: a call into `half` per
/// block cost a tenth of a decode step).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn f16_at(b: &[u8], at: usize) -> f32 {
    let bits = u16::from_le_bytes([b[at], b[at + 1]]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    _mm_cvtss_f32(s)
}

/// 16 bytes of nibbles as 32 bytes 0..16: low nibbles in bytes 0..16, high in 16..32 (element
/// order of the legacy formats).
///
/// # Safety
/// `p` must point at 16 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn nibbles(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 16 readable bytes; unaligned loads are allowed.
    let b = unsafe { _mm_loadu_si128(p.cast()) };
    let both = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
}

/// Byte j = 0x10 where bit j of `qh` is set, else 0 (the fifth bit of the q5 formats).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn fifth_bits(qh: u32) -> __m256i {
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(qh as i32),
        _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3,
            3, 3, 3,
        ),
    );
    let select = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

/// Σ x·y over 32 byte pairs, x unsigned (≤ 128) and y signed, as eight f32 partial sums.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_u8_i8(x: __m256i, y: __m256i) -> __m256 {
    let pairs = _mm256_maddubs_epi16(x, y);
    _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
}

/// Σ x·y over 32 signed byte pairs: |x| times y with x's sign moved onto y.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_i8_i8(x: __m256i, y: __m256i) -> __m256 {
    dot_u8_i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
}

/// # Safety
/// `y` must be a live block (32 readable bytes of `qs`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load_q8(y: &Q8Block) -> __m256i {
    // SAFETY: `qs` is 32 bytes inside `y`.
    unsafe { _mm256_loadu_si256(y.qs.as_ptr().cast()) }
}

/// Bytes ahead of a group of four weight rows that the four-weight-row dots prefetch. A
/// matrix's rows are consecutive, so this fetches the rows of later groups while the current
/// group computes: the hardware prefetchers do not follow four interleaved streams, and
/// decode's products were waiting on memory (on SmolLM2's 576- and 1536-wide rows, 2 KiB
/// ahead left a third of the gain, 6–16 KiB all gave about the same).
const PREFETCH_BYTES: usize = 8192;

/// Prefetches the first [`PREFETCH_BYTES`] (at most `len`) bytes at `start`: the start of a
/// range of rows, which the four-row dots' own prefetches (ahead of their group) never cover
/// (a thread's chunk of a matrix starts cold; SmolLM2 decode at 2 threads measured 1–3% faster
/// with it, within the noise at 1 thread).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn prefetch_start(start: *const u8, len: usize) {
    for line in (0..len.min(PREFETCH_BYTES)).step_by(64) {
        _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(line).cast());
    }
}

/// Prefetches the lines [`PREFETCH_BYTES`] past block `block` of a group of four consecutive
/// rows starting at `first_row`: per block, the group consumes `4 · block_bytes` bytes, and the
/// prefetched range advances as much. A prefetch never faults, so past the matrix's end it is
/// only wasted.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn prefetch_ahead(first_row: *const u8, block: usize, block_bytes: usize) {
    let at = first_row.wrapping_add(PREFETCH_BYTES + block * 4 * block_bytes);
    for line in (0..4 * block_bytes).step_by(64) {
        _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(line).cast());
    }
}

/// Generates a row dot and its four-row form: `$bytes` per block, `$prep(block)` gives the
/// block's (quantized values as bytes, scale, offset) and `$dot` multiplies those bytes with an
/// activation block's (`dot_u8_i8` or `dot_i8_i8`). Per (weight row, activation row) both forms
/// compute the same operations in the same order as llama.cpp's AVX2 `ggml_vec_dot_*`: eight
/// lanes of scaled integer sums accumulated block after block with fused multiply-adds, summed
/// at the end, plus the offsets summed in f32.
macro_rules! row_dot {
    ($(#[$doc:meta])* $name:ident, $name4:ident, $rows4:ident, $bytes:expr, $dot:ident,
     |$b:ident| $prep:block) => {
        $(#[$doc])*
        /// # Safety
        /// The CPU must have AVX2, FMA and F16C.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $name(row: &[u8], ys: &[Q8Block]) -> f32 {
            let mut acc = _mm256_setzero_ps();
            let mut offset = 0.0f32;
            for ($b, y) in row.chunks_exact($bytes).zip(ys) {
                // SAFETY: `$b` is one whole block (`chunks_exact`), so every load in the body
                // stays inside it.
                let (x, d, m): (__m256i, f32, f32) = unsafe { $prep };
                // SAFETY: `y` is a live block.
                let q = $dot(x, unsafe { load_q8(y) });
                acc = _mm256_fmadd_ps(_mm256_set1_ps(d * y.d), q, acc);
                offset += m * y.s;
            }
            hsum(acc) + offset
        }

        /// The same dot for four activation rows at once: each weight block is unpacked once.
        ///
        /// # Safety
        /// The CPU must have AVX2, FMA and F16C; each of `ys` holds a block per weight block.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $name4(row: &[u8], ys: [&[Q8Block]; 4]) -> [f32; 4] {
            let mut acc = [_mm256_setzero_ps(); 4];
            let mut offset = [0.0f32; 4];
            let blocks = row.len() / $bytes;
            assert!(ys.iter().all(|y| y.len() >= blocks));
            for (i, $b) in row.chunks_exact($bytes).enumerate() {
                // SAFETY: as in the one-row form.
                let (x, d, m): (__m256i, f32, f32) = unsafe { $prep };
                for r in 0..4 {
                    // SAFETY: i < blocks <= ys[r].len() (asserted above).
                    let y = unsafe { ys[r].get_unchecked(i) };
                    // SAFETY: `y` is a live block.
                    let q = $dot(x, unsafe { load_q8(y) });
                    acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * y.d), q, acc[r]);
                    offset[r] += m * y.s;
                }
            }
            std::array::from_fn(|r| hsum(acc[r]) + offset[r])
        }

        /// The dot of four weight rows with one activation row (a matrix-vector product's
        /// rows four at a time): four independent accumulator chains share each activation
        /// block, and each row's operations are the one-row form's, in its order.
        ///
        /// # Safety
        /// The CPU must have AVX2, FMA and F16C.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $rows4(rows: [&[u8]; 4], ys: &[Q8Block]) -> [f32; 4] {
            let mut acc = [_mm256_setzero_ps(); 4];
            let mut offset = [0.0f32; 4];
            let blocks = rows.iter().map(|r| r.len() / $bytes).fold(ys.len(), usize::min);
            for (i, y) in ys.iter().enumerate().take(blocks) {
                // SAFETY: `y` is a live block.
                let yq = unsafe { load_q8(y) };
                prefetch_ahead(rows[0].as_ptr(), i, $bytes);
                for r in 0..4 {
                    let $b = &rows[r][i * $bytes..(i + 1) * $bytes];
                    // SAFETY: `$b` is one whole block, so every load in the body stays inside.
                    let (x, d, m): (__m256i, f32, f32) = unsafe { $prep };
                    let q = $dot(x, yq);
                    acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * y.d), q, acc[r]);
                    offset[r] += m * y.s;
                }
            }
            std::array::from_fn(|r| hsum(acc[r]) + offset[r])
        }
    };
}

row_dot!(
    /// q4_0 weights: (nibble - 8) · d.
    q4_0, q4_0_x4, q4_0_rows4, Q4_0_BYTES, dot_i8_i8, |b| {
        let x = _mm256_sub_epi8(nibbles(b.as_ptr().add(2)), _mm256_set1_epi8(8));
        (x, f16_at(b, 0), 0.0)
    }
);

row_dot!(
    /// q4_1 weights: nibble · d + m.
    q4_1, q4_1_x4, q4_1_rows4, Q4_1_BYTES, dot_u8_i8, |b| {
        (nibbles(b.as_ptr().add(4)), f16_at(b, 0), f16_at(b, 2))
    }
);

row_dot!(
    /// q5_0 weights: (5-bit value - 16) · d.
    q5_0, q5_0_x4, q5_0_rows4, Q5_0_BYTES, dot_i8_i8, |b| {
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        let x = _mm256_or_si256(nibbles(b.as_ptr().add(6)), fifth_bits(qh));
        (_mm256_sub_epi8(x, _mm256_set1_epi8(16)), f16_at(b, 0), 0.0)
    }
);

row_dot!(
    /// q5_1 weights: 5-bit value · d + m.
    q5_1, q5_1_x4, q5_1_rows4, Q5_1_BYTES, dot_u8_i8, |b| {
        let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let x = _mm256_or_si256(nibbles(b.as_ptr().add(8)), fifth_bits(qh));
        (x, f16_at(b, 0), f16_at(b, 2))
    }
);

row_dot!(
    /// q8_0 weights: q · d.
    q8_0, q8_0_x4, q8_0_rows4, Q8_0_BYTES, dot_i8_i8, |b| {
        (_mm256_loadu_si256(b.as_ptr().add(2).cast()), f16_at(b, 0), 0.0)
    }
);

/// `Σ a·b` with FMA, 32 lanes in flight.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (l, lane) in acc.iter_mut().enumerate() {
            // SAFETY: i + 8l + 8 <= n, inside both slices.
            let (x, y) = unsafe {
                (
                    _mm256_loadu_ps(a.as_ptr().add(i + 8 * l)),
                    _mm256_loadu_ps(b.as_ptr().add(i + 8 * l)),
                )
            };
            *lane = _mm256_fmadd_ps(x, y, *lane);
        }
        i += 32;
    }
    let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let tail: f32 = a[i..n].iter().zip(&b[i..n]).map(|(x, y)| x * y).sum();
    hsum(sum) + tail
}

/// [`super::quantize_activations`] as llama.cpp's AVX2 `quantize_row_q8_1` computes it (the
/// same values as the scalar form: the absolute maximum is order-independent, and
/// `_mm256_round_ps` rounds ties to even like `round_ties_even`).
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quantize_activations(x: &[f32], out: &mut [Q8Block]) {
    let sign = _mm256_set1_ps(-0.0);
    for (xs, block) in x.chunks_exact(32).zip(out.iter_mut()) {
        // SAFETY: `xs` holds 32 values (`chunks_exact`).
        let v: [__m256; 4] =
            std::array::from_fn(|i| unsafe { _mm256_loadu_ps(xs.as_ptr().add(8 * i)) });
        let abs = v.map(|v| _mm256_andnot_ps(sign, v));
        let max = _mm256_max_ps(_mm256_max_ps(abs[0], abs[1]), _mm256_max_ps(abs[2], abs[3]));
        let m4 = _mm_max_ps(_mm256_extractf128_ps(max, 1), _mm256_castps256_ps128(max));
        let m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        let m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        let amax = _mm_cvtss_f32(m4);
        let d = amax / 127.0;
        let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
        let q = v.map(|v| {
            _mm256_cvtps_epi32(_mm256_round_ps::<
                { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
            >(_mm256_mul_ps(v, id)))
        });
        let sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        let s4 = _mm_add_epi32(
            _mm256_castsi256_si128(sum),
            _mm256_extracti128_si256(sum, 1),
        );
        let s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
        let s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1));
        let sum = _mm_cvtsi128_si32(s4);
        // packs interleave the 128-bit lanes; the permutation restores element order.
        let i01 = _mm256_packs_epi32(q[0], q[1]);
        let i23 = _mm256_packs_epi32(q[2], q[3]);
        let bytes = _mm256_permutevar8x32_epi32(
            _mm256_packs_epi16(i01, i23),
            _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7),
        );
        // SAFETY: `qs` is 32 bytes inside `block`.
        unsafe { _mm256_storeu_si256(block.qs.as_mut_ptr().cast(), bytes) };
        block.d = through_f16(d);
        block.s = through_f16(d * sum as f32);
    }
}

/// `v` rounded to the nearest f16 (ties to even), as f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn through_f16(v: f32) -> f32 {
    let h = _mm_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT }>(_mm_set_ss(v));
    _mm_cvtss_f32(_mm_cvtph_ps(h))
}
