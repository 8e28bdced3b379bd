//! AVX-512 (BW, VL, VNNI) four-weight-row dots of the legacy weight formats against one row of
//! [`Q8Block`] activations: decode's matrix-vector products. Two weight rows share each 512-bit
//! register (one per 256-bit half), so every row keeps the eight f32 lanes and the order of
//! operations of the AVX2 one-row dot (llama.cpp's): bit-equal results with half the
//! instructions. The integer sums come from `vpdpbusd`, which gives the same i32 lanes as
//! `vpmaddubsw` + `vpmaddwd` (sums of four adjacent byte products, exact).

use std::arch::x86_64::*;

use strata_core::dtype::block::{Q4_0_BYTES, Q4_1_BYTES, Q5_0_BYTES, Q5_1_BYTES, Q8_0_BYTES};

use super::avx2::{hsum, prefetch_ahead, through_f16};
use super::q8::Q8Block;

/// The 16 nibble bytes at `p0` and at `p1` as two 32-byte halves of values 0..16, each half in
/// the legacy formats' element order (low nibbles, then high nibbles).
///
/// # Safety
/// `p0` and `p1` must each point at 16 readable bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn nibbles2(p0: *const u8, p1: *const u8) -> __m512i {
    // SAFETY: the caller guarantees 16 readable bytes at each; unaligned loads are allowed.
    let (a, b) = unsafe { (_mm_loadu_si128(p0.cast()), _mm_loadu_si128(p1.cast())) };
    let z = _mm512_castsi256_si512(_mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1));
    // 128-bit lanes (a, a, b, b), then the high nibbles down in lanes 1 and 3.
    let z = _mm512_shuffle_i64x2::<0x50>(z, z);
    let z = _mm512_mask_srli_epi16::<4>(z, 0xFF00_FF00, z);
    _mm512_and_si512(z, _mm512_set1_epi8(0x0F))
}

/// `u` plus 16 in each byte whose bit is set in the q5 formats' fifth bits of the two rows.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn with_fifth_bits(u: __m512i, qh0: u32, qh1: u32) -> __m512i {
    let set = u64::from(qh0) | (u64::from(qh1) << 32);
    _mm512_mask_add_epi8(u, set, u, _mm512_set1_epi8(16))
}

/// The little-endian u32 at `p`.
///
/// # Safety
/// `p` must point at 4 readable bytes.
#[inline]
unsafe fn u32_at(p: *const u8) -> u32 {
    // SAFETY: guaranteed by the caller; unaligned reads are allowed.
    u32::from_le(unsafe { p.cast::<u32>().read_unaligned() })
}

/// Generates a four-weight-row dot: `$bytes` per block; `$bias` is subtracted from the unsigned
/// bytes `$prep(p0, p1)` gives for the block of two rows (pointers at the blocks' first
/// bytes); `$min` says whether the format has an offset `m` (f16 at byte 2).
macro_rules! rows4 {
    ($(#[$doc:meta])* $name:ident, $bytes:expr, bias: $bias:expr, min: $min:expr,
     |$p0:ident, $p1:ident| $prep:block) => {
        $(#[$doc])*
        /// Each result is bit-equal to the AVX2 one-row dot of that row.
        ///
        /// # Safety
        /// The CPU must have AVX-512 F, BW, VL and VNNI, AVX2, FMA and F16C.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
        pub unsafe fn $name(rows: [&[u8]; 4], ys: &[Q8Block]) -> [f32; 4] {
            let blocks = rows.iter().map(|r| r.len() / $bytes).fold(ys.len(), usize::min);
            let p = rows.map(<[u8]>::as_ptr);
            // The f32 scales of rows (0, 1) and (2, 3) from the lanes (d0, m0, d1, m1, …).
            let pick = [
                _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2),
                _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6),
            ];
            let mut acc = [_mm512_setzero_ps(); 2];
            let mut offset = _mm256_setzero_ps();
            for (i, y) in ys.iter().enumerate().take(blocks) {
                prefetch_ahead(p[0], i, $bytes);
                let at = i * $bytes;
                // SAFETY: `qs` is 32 bytes inside `y`.
                let yq = _mm512_broadcast_i64x4(unsafe { _mm256_loadu_si256(y.qs.as_ptr().cast()) });
                // Σ (u - bias)·y = Σ u·y - bias·Σ y: start each lane at -bias·Σ y.
                let init = if $bias == 0 {
                    _mm512_setzero_si512()
                } else {
                    let zero = _mm512_setzero_si512();
                    _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, _mm512_set1_epi8($bias as u8 as i8), yq))
                };
                // SAFETY: block `i` of each row is whole (i < blocks), and a block's first
                // four bytes are its f16 scale and f16 offset or first quantized bytes.
                let dm = unsafe {
                    _mm_setr_epi32(
                        u32_at(p[0].add(at)) as i32,
                        u32_at(p[1].add(at)) as i32,
                        u32_at(p[2].add(at)) as i32,
                        u32_at(p[3].add(at)) as i32,
                    )
                };
                let dm = _mm256_cvtph_ps(dm);
                let scale = _mm512_castps256_ps512(_mm256_mul_ps(dm, _mm256_set1_ps(y.d)));
                if $min {
                    offset = _mm256_add_ps(offset, _mm256_mul_ps(dm, _mm256_set1_ps(y.s)));
                }
                for h in 0..2 {
                    // SAFETY: both blocks are whole, so every load in the body stays inside.
                    let ($p0, $p1) = unsafe { (p[2 * h].add(at), p[2 * h + 1].add(at)) };
                    // SAFETY: as above.
                    let u: __m512i = unsafe { $prep };
                    let q = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(init, u, yq));
                    acc[h] = _mm512_fmadd_ps(_mm512_permutexvar_ps(pick[h], scale), q, acc[h]);
                }
            }
            let halves = halves(acc);
            let mut offsets = [0.0f32; 8];
            // SAFETY: eight f32 into an eight-f32 array.
            unsafe { _mm256_storeu_ps(offsets.as_mut_ptr(), offset) };
            // The one-row dot adds its offset sum (0.0 for the formats without one) last.
            std::array::from_fn(|r| hsum(halves[r]) + if $min { offsets[2 * r + 1] } else { 0.0 })
        }
    };
}

rows4!(
    /// q4_0 weights: (nibble - 8) · d.
    q4_0_rows4, Q4_0_BYTES, bias: 8, min: false, |p0, p1| {
        nibbles2(p0.add(2), p1.add(2))
    }
);

rows4!(
    /// q4_1 weights: nibble · d + m.
    q4_1_rows4, Q4_1_BYTES, bias: 0, min: true, |p0, p1| {
        nibbles2(p0.add(4), p1.add(4))
    }
);

rows4!(
    /// q5_0 weights: (5-bit value - 16) · d.
    q5_0_rows4, Q5_0_BYTES, bias: 16, min: false, |p0, p1| {
        with_fifth_bits(nibbles2(p0.add(6), p1.add(6)), u32_at(p0.add(2)), u32_at(p1.add(2)))
    }
);

rows4!(
    /// q5_1 weights: 5-bit value · d + m.
    q5_1_rows4, Q5_1_BYTES, bias: 0, min: true, |p0, p1| {
        with_fifth_bits(nibbles2(p0.add(8), p1.add(8)), u32_at(p0.add(4)), u32_at(p1.add(4)))
    }
);

rows4!(
    /// q8_0 weights: q · d, as the unsigned bytes q + 128 (bias 128).
    q8_0_rows4, Q8_0_BYTES, bias: 128, min: false, |p0, p1| {
        let a = _mm256_loadu_si256(p0.add(2).cast());
        let b = _mm256_loadu_si256(p1.add(2).cast());
        let z = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b);
        _mm512_xor_si512(z, _mm512_set1_epi8(-128))
    }
);

/// Generates a one-weight-row, four-activation-row dot (prefill's products): the weight block's
/// unsigned bytes `$prep(p)` (pointer at the block's first byte, both 256-bit halves the same
/// block) meet two activation rows per 512-bit register. `$bytes`, `$bias` and `$min` as in
/// [`rows4`].
macro_rules! x4 {
    ($(#[$doc:meta])* $name:ident, $bytes:expr, bias: $bias:expr, min: $min:expr,
     |$p:ident| $prep:block) => {
        $(#[$doc])*
        /// Each result is bit-equal to the AVX2 one-row dot of that activation row.
        ///
        /// # Safety
        /// The CPU must have AVX-512 F, BW, VL and VNNI, AVX2, FMA and F16C.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
        pub unsafe fn $name(row: &[u8], ys: [&[Q8Block]; 4]) -> [f32; 4] {
            let blocks = ys.iter().map(|y| y.len()).fold(row.len() / $bytes, usize::min);
            let $p = row.as_ptr();
            // The f32 scales of activation rows (0, 1) and (2, 3) from the lanes (s0, s1, s2, s3).
            let pick = [
                _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3),
            ];
            let mut acc = [_mm512_setzero_ps(); 2];
            let mut offset = _mm_setzero_ps();
            for i in 0..blocks {
                // SAFETY: i < blocks <= every ys[r].len().
                let y = ys.map(|y| unsafe { y.get_unchecked(i) });
                let at = i * $bytes;
                // SAFETY: block `i` of the row is whole (i < blocks); its first two bytes are
                // the f16 scale and, for the formats with one, the next two the f16 offset.
                let (d, m) = unsafe {
                    let dm = _mm_cvtph_ps(_mm_cvtsi32_si128(u32_at($p.add(at)) as i32));
                    (_mm_cvtss_f32(dm), _mm_cvtss_f32(_mm_movehdup_ps(dm)))
                };
                // The one-row dot's `d · y.d` and `m · y.s`, the same f32 products.
                let scale = _mm_mul_ps(_mm_set1_ps(d), _mm_setr_ps(y[0].d, y[1].d, y[2].d, y[3].d));
                let scale = _mm512_castps128_ps512(scale);
                if $min {
                    let s = _mm_setr_ps(y[0].s, y[1].s, y[2].s, y[3].s);
                    offset = _mm_add_ps(offset, _mm_mul_ps(_mm_set1_ps(m), s));
                }
                // SAFETY: the block is whole, so every load in the body stays inside it.
                let u: __m512i = unsafe {
                    let $p = $p.add(at);
                    $prep
                };
                for h in 0..2 {
                    // SAFETY: `qs` is 32 bytes inside each block.
                    let yq = unsafe {
                        let lo = _mm256_loadu_si256(y[2 * h].qs.as_ptr().cast());
                        let hi = _mm256_loadu_si256(y[2 * h + 1].qs.as_ptr().cast());
                        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
                    };
                    // Σ (u - bias)·y = Σ u·y - bias·Σ y: start each lane at -bias·Σ y.
                    let init = if $bias == 0 {
                        _mm512_setzero_si512()
                    } else {
                        let zero = _mm512_setzero_si512();
                        _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, _mm512_set1_epi8($bias as u8 as i8), yq))
                    };
                    let q = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(init, u, yq));
                    acc[h] = _mm512_fmadd_ps(_mm512_permutexvar_ps(pick[h], scale), q, acc[h]);
                }
            }
            let halves = halves(acc);
            let mut offsets = [0.0f32; 4];
            // SAFETY: four f32 into a four-f32 array.
            unsafe { _mm_storeu_ps(offsets.as_mut_ptr(), offset) };
            // The one-row dot adds its offset sum last (+0.0 for the formats without one).
            std::array::from_fn(|r| hsum(halves[r]) + offsets[r])
        }
    };
}

/// The 32 bytes at `p`, in both 256-bit halves.
///
/// # Safety
/// `p` must point at 32 readable bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn bytes32_twice(p: *const u8) -> __m512i {
    // SAFETY: the caller guarantees 32 readable bytes; unaligned loads are allowed.
    _mm512_broadcast_i64x4(unsafe { _mm256_loadu_si256(p.cast()) })
}

x4!(
    /// q4_0 weights: (nibble - 8) · d.
    q4_0_x4, Q4_0_BYTES, bias: 8, min: false, |p| {
        nibbles2(p.add(2), p.add(2))
    }
);

x4!(
    /// q4_1 weights: nibble · d + m.
    q4_1_x4, Q4_1_BYTES, bias: 0, min: true, |p| {
        nibbles2(p.add(4), p.add(4))
    }
);

x4!(
    /// q5_0 weights: (5-bit value - 16) · d.
    q5_0_x4, Q5_0_BYTES, bias: 16, min: false, |p| {
        let qh = u32_at(p.add(2));
        with_fifth_bits(nibbles2(p.add(6), p.add(6)), qh, qh)
    }
);

x4!(
    /// q5_1 weights: 5-bit value · d + m.
    q5_1_x4, Q5_1_BYTES, bias: 0, min: true, |p| {
        let qh = u32_at(p.add(4));
        with_fifth_bits(nibbles2(p.add(8), p.add(8)), qh, qh)
    }
);

x4!(
    /// q8_0 weights: q · d, as the unsigned bytes q + 128 (bias 128).
    q8_0_x4, Q8_0_BYTES, bias: 128, min: false, |p| {
        _mm512_xor_si512(bytes32_twice(p.add(2)), _mm512_set1_epi8(-128))
    }
);

/// `Σ a·b` with 16-lane FMAs, four accumulators (64 products in flight), the last partial
/// vector through a masked load: the dequantizing strategy's dot (k-quants, f16/bf16 weights).
///
/// # Safety
/// The CPU must have AVX-512 F, BW, VL and VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut i = 0;
    while i + 64 <= n {
        for (l, lane) in acc.iter_mut().enumerate() {
            // SAFETY: i + 16l + 16 <= n, inside both slices.
            let (x, y) = unsafe {
                (
                    _mm512_loadu_ps(pa.add(i + 16 * l)),
                    _mm512_loadu_ps(pb.add(i + 16 * l)),
                )
            };
            *lane = _mm512_fmadd_ps(x, y, *lane);
        }
        i += 64;
    }
    while i < n {
        let mask: __mmask16 = if n - i >= 16 {
            0xFFFF
        } else {
            (1u16 << (n - i)) - 1
        };
        // SAFETY: the masked loads read only elements i..min(i + 16, n), inside both slices
        // (masked-off lanes are not accessed and cannot fault).
        let (x, y) = unsafe {
            (
                _mm512_maskz_loadu_ps(mask, pa.add(i)),
                _mm512_maskz_loadu_ps(mask, pb.add(i)),
            )
        };
        acc[0] = _mm512_fmadd_ps(x, y, acc[0]);
        i += 16;
    }
    let sum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
    _mm512_reduce_add_ps(sum)
}

/// [`super::quantize_activations`] with 16-lane vectors: the same values as the AVX2 and
/// scalar forms (the absolute maximum and the integer sum are order-independent, and rounding
/// is to nearest even in all three).
///
/// # Safety
/// The CPU must have AVX-512 F, BW, VL and VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn quantize_activations(x: &[f32], out: &mut [Q8Block]) {
    for (xs, block) in x.chunks_exact(32).zip(out.iter_mut()) {
        // SAFETY: `xs` holds 32 values (`chunks_exact`).
        let v: [__m512; 2] =
            std::array::from_fn(|i| unsafe { _mm512_loadu_ps(xs.as_ptr().add(16 * i)) });
        let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1])));
        let d = amax / 127.0;
        let id = _mm512_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
        let q = v.map(|v| {
            _mm512_cvtps_epi32(_mm512_roundscale_ps::<
                { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
            >(_mm512_mul_ps(v, id)))
        });
        let sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q[0], q[1]));
        let lo = _mm512_cvtsepi32_epi8(q[0]);
        let hi = _mm512_cvtsepi32_epi8(q[1]);
        // SAFETY: `qs` is 32 bytes inside `block`.
        unsafe { _mm256_storeu_si256(block.qs.as_mut_ptr().cast(), _mm256_set_m128i(hi, lo)) };
        block.d = through_f16(d);
        block.s = through_f16(d * sum as f32);
    }
}

/// The four 256-bit halves of two 512-bit accumulators, in row order: each half holds one row's
/// eight lanes (the two-rows-per-register layout of the dots above).
#[inline]
#[target_feature(enable = "avx512f")]
fn halves(acc: [__m512; 2]) -> [__m256; 4] {
    let high = |v: __m512| _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
    [
        _mm512_castps512_ps256(acc[0]),
        high(acc[0]),
        _mm512_castps512_ps256(acc[1]),
        high(acc[1]),
    ]
}
