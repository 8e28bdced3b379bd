//! Branch-free f16 ↔ f32 conversions on the bit patterns (after F. Giesen's public-domain
//! `half_to_float` / `float_to_half_fast3_rtne`). The `half` crate converts one element at a
//! time behind a run-time CPU check; these inline into loops that vectorize.

/// The f32 value of f16 bits (exact: every f16 is an f32).
#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    const SHIFTED_EXP: u32 = 0x7c00 << 13;
    let magic = f32::from_bits(113 << 23);
    let bits = ((h & 0x7fff) as u32) << 13;
    let exp = bits & SHIFTED_EXP;
    let normal = bits + ((127 - 15) << 23);
    // Inf/NaN: push the exponent to all ones.
    let special = normal + ((128 - 16) << 23);
    // Zero/subnormal: renormalize through a float subtraction.
    let subnormal = (f32::from_bits(normal + (1 << 23)) - magic).to_bits();
    let magnitude = if exp == SHIFTED_EXP {
        special
    } else if exp == 0 {
        subnormal
    } else {
        normal
    };
    f32::from_bits(magnitude | ((h & 0x8000) as u32) << 16)
}

/// The f16 bits nearest to `f` (ties to even); overflow gives inf, NaN stays NaN.
#[inline(always)]
pub fn f32_to_f16(f: f32) -> u16 {
    let x = f.to_bits();
    let sign = x & 0x8000_0000;
    let x = x ^ sign;
    // Inf or NaN (NaN becomes a quiet NaN), or too large: inf.
    let special: u32 = if x > 0x7f80_0000 { 0x7e00 } else { 0x7c00 };
    // Subnormal or zero result: align the mantissa with a magic add (rounds to nearest even).
    let denorm_magic = (((127 - 15) + (23 - 10) + 1) as u32) << 23;
    let subnormal = (f32::from_bits(x) + f32::from_bits(denorm_magic))
        .to_bits()
        .wrapping_sub(denorm_magic);
    // Normal result: rebias the exponent and round the dropped 13 bits to nearest even.
    let odd = (x >> 13) & 1;
    let normal = (x
        .wrapping_add(((15u32).wrapping_sub(127) << 23).wrapping_add(0xfff))
        .wrapping_add(odd))
        >> 13;
    let magnitude = if x >= 0x4780_0000 {
        special
    } else if x < 0x3880_0000 {
        subnormal
    } else {
        normal
    };
    (magnitude | (sign >> 16)) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_core::f16;

    #[test]
    fn every_f16_round_trips() {
        for bits in 0..=u16::MAX {
            let want = f16::from_bits(bits).to_f32();
            let got = f16_to_f32(bits);
            if want.is_nan() {
                assert!(got.is_nan(), "{bits:#x}");
                assert!(f16::from_bits(f32_to_f16(got)).is_nan());
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{bits:#x}");
                assert_eq!(f32_to_f16(got), bits, "{bits:#x}");
            }
        }
    }

    #[test]
    fn f32_rounding_matches_half() {
        // A dense spread of f32 bit patterns: ties, subnormal results, overflow.
        for x in (0..0x7f80_0000u32).step_by(997) {
            for v in [f32::from_bits(x), -f32::from_bits(x)] {
                assert_eq!(f32_to_f16(v), f16::from_f32(v).to_bits(), "{v:e}");
            }
        }
        for v in [
            65504.0f32,
            65520.0,
            65519.99,
            1e-8,
            2.9802322e-8,
            5.96e-8,
            f32::INFINITY,
        ] {
            assert_eq!(f32_to_f16(v), f16::from_f32(v).to_bits(), "{v:e}");
        }
        assert!(f16::from_bits(f32_to_f16(f32::NAN)).is_nan());
    }
}
