//! The in-register activation of the AVX-512 depthwise kernels (the few-channel and direct
//! kernels use the generic `Isa::clamp`).

use std::arch::x86_64::*;

use super::row_band::ClampKind;

/// `v` clamped to `[lo, hi]` the way `kind` says: the activation the row kernels apply in
/// registers as they store.
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) fn clamp(kind: ClampKind, v: __m512, lo: __m512, hi: __m512) -> __m512 {
    match kind {
        ClampKind::None => v,
        // max(v, lo): a NaN becomes lo, as Relu's `x > 0 ? x : 0`.
        ClampKind::NanToLow => _mm512_min_ps(_mm512_max_ps(v, lo), hi),
        // max(lo, v): a NaN stays NaN, as Clip's comparisons.
        ClampKind::KeepNan => _mm512_min_ps(hi, _mm512_max_ps(lo, v)),
    }
}
