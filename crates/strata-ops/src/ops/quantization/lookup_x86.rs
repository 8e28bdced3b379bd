//! The 256-entry byte lookup with AVX-512 VBMI: `vpermi2b` picks from 128 table bytes by the
//! low 7 bits of each index, once for each half of the table, and the index's top bit chooses
//! between the two: 64 lookups in four instructions.

use std::arch::x86_64::*;

/// Whether this CPU has AVX-512 BW and VBMI.
pub(super) fn vbmi_available() -> bool {
    std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vbmi")
}

/// `dst[i] = table[src[i]]` for `i < min(src.len(), dst.len())`.
///
/// # Safety
/// The CPU has AVX-512F, BW and VBMI ([`vbmi_available`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
pub(super) unsafe fn look_up_vbmi(table: &[u8; 256], src: &[u8], dst: &mut [u8]) {
    let len = src.len().min(dst.len());
    // SAFETY: `table` holds 4 x 64 bytes; unaligned loads.
    let (t0, t1, t2, t3) = unsafe {
        let t = table.as_ptr();
        (
            _mm512_loadu_si512(t.cast()),
            _mm512_loadu_si512(t.add(64).cast()),
            _mm512_loadu_si512(t.add(128).cast()),
            _mm512_loadu_si512(t.add(192).cast()),
        )
    };
    let mut i = 0;
    while i + 64 <= len {
        // SAFETY: bytes i..i + 64 are within both slices; unaligned load and store.
        unsafe {
            let idx = _mm512_loadu_si512(src.as_ptr().add(i).cast());
            let lo = _mm512_permutex2var_epi8(t0, idx, t1);
            let hi = _mm512_permutex2var_epi8(t2, idx, t3);
            let high = _mm512_movepi8_mask(idx);
            let out = _mm512_mask_blend_epi8(high, lo, hi);
            _mm512_storeu_si512(dst.as_mut_ptr().add(i).cast(), out);
        }
        i += 64;
    }
    for (d, &s) in dst[i..len].iter_mut().zip(&src[i..len]) {
        *d = table[usize::from(s)];
    }
}
