//! Branch-free f32 `exp`, `tanh` and `erf` that LLVM can vectorize (std's call into libm one
//! element at a time). Every path is computed and selected, so loops over slices become SIMD.
//! Accuracy is a few ulp, checked against f64 references in the tests below.

/// 1.5·2²³: adding it rounds an f32 of magnitude below 2²² to an integer (ties to even),
/// which then sits in the low mantissa bits. SSE2 has no vectorizable `round`, and f32 → i32
/// casts (saturating in Rust) do not vectorize, so both go through this.
const MAGIC: f32 = 12_582_912.0;

/// 2^n for `n` in [-126, 127], built from the exponent bits.
#[inline(always)]
fn pow2i(n: i32) -> f32 {
    f32::from_bits(((n + 127) as u32) << 23)
}

/// e^x. Overflows to inf above ~88.72 and underflows through the subnormals to 0, as libm's.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    // Beyond these the result is inf or 0 anyway; clamping keeps the exponent bits valid.
    // NaN fails both comparisons and passes through.
    let x = if x > 89.0 { 89.0 } else { x };
    let x = if x < -104.0 { -104.0 } else { x };
    let t = x * std::f32::consts::LOG2_E + MAGIC;
    let n = t - MAGIC;
    let ni = (t.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32);
    // Cody-Waite: ln 2 split in two so `n * LN2_HI` is exact.
    let r = x - n * 0.693_359_4 + n * 2.121_944_4e-4;
    // Cephes expf polynomial for e^r on |r| <= ln2/2.
    let p = 1.987_569_1e-4;
    let p = p * r + 1.398_2e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 0.5;
    let e = p * r * r + r + 1.0;
    // Scale in two halves so n in [-150, 129] never leaves the normal exponent range.
    let n1 = ni >> 1;
    e * pow2i(n1) * pow2i(ni - n1)
}

/// tanh(x): a polynomial near 0 (where 1 - 2/(e^2x + 1) would cancel), the exp form beyond.
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let a = x.abs();
    let z = x * x;
    // Cephes tanhf polynomial for |x| < 0.625.
    let p = -5.704_988_7e-3;
    let p = p * z + 2.063_909e-2;
    let p = p * z - 5.373_971_6e-2;
    let p = p * z + 1.333_144_2e-1;
    let p = p * z - 3.333_328e-1;
    let small = p * z * x + x;
    let large = 1.0 - 2.0 / (exp(2.0 * a) + 1.0);
    if a < 0.625 {
        small
    } else {
        large.copysign(x)
    }
}

/// erf(x): a rational approximation on [-4, 4] (beyond it erf is ±1 in f32).
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let x = if x > 4.0 { 4.0 } else { x };
    let x = if x < -4.0 { -4.0 } else { x };
    let z = x * x;
    let p = -2.726_142_3e-10;
    let p = p * z + 2.770_681_4e-8;
    let p = p * z - 2.101_024e-6;
    let p = p * z - 5.692_506_4e-5;
    let p = p * z - 7.349_906_3e-4;
    let p = p * z - 2.954_6e-3;
    let p = p * z - 1.609_603_3e-2;
    let q = -1.456_607_2e-5;
    let q = q * z - 2.133_740_6e-4;
    let q = q * z - 1.682_827e-3;
    let q = q * z - 7.373_329e-3;
    let q = q * z - 1.426_474e-2;
    // Past 3.92 erf rounds to ±1 in f32; the approximation would stop an ulp short.
    let y = x * p / q;
    if x.abs() > 3.92 {
        1.0f32.copysign(x)
    } else {
        y
    }
}

#[cfg(test)]
mod tests {
    /// Largest error of `f` against `reference` over `[lo, hi]`, in units of
    /// `abs + rel * |expected|`.
    fn worst(f: impl Fn(f32) -> f32, reference: impl Fn(f64) -> f64, lo: f32, hi: f32) -> f64 {
        let steps = 200_000;
        (0..=steps)
            .map(|i| lo + (hi - lo) * i as f32 / steps as f32)
            .map(|x| {
                let want = reference(x as f64);
                let got = f(x) as f64;
                (got - want).abs() / (1e-30 + 2e-7 * want.abs())
            })
            .fold(0.0, f64::max)
    }

    #[test]
    fn exp_is_within_a_few_ulp() {
        assert!(worst(super::exp, f64::exp, -87.0, 88.0) < 1.5);
        assert_eq!(super::exp(0.0), 1.0);
        assert_eq!(super::exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(super::exp(100.0), f32::INFINITY);
        assert_eq!(super::exp(f32::NEG_INFINITY), 0.0);
        assert!(super::exp(-100.0) > 0.0 && super::exp(-100.0) < 1e-43);
        assert!(super::exp(f32::NAN).is_nan());
    }

    #[test]
    fn tanh_is_within_a_few_ulp() {
        assert!(worst(super::tanh, f64::tanh, -10.0, 10.0) < 3.0);
        assert_eq!(super::tanh(1e-30), 1e-30);
        assert_eq!(super::tanh(-50.0), -1.0);
        assert!(super::tanh(f32::NAN).is_nan());
    }

    #[test]
    fn erf_is_within_a_few_ulp() {
        let reference = crate::support::erf::erf;
        assert!(worst(super::erf, reference, -5.0, 5.0) < 4.0);
        assert!(worst(super::erf, reference, -1e-3, 1e-3) < 4.0);
        assert_eq!(super::erf(10.0), 1.0);
        assert!(super::erf(f32::NAN).is_nan());
    }
}
