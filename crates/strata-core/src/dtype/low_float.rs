//! Codecs (C1) for the ONNX low-precision float formats held as one-byte bit patterns: float8
//! E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ (opset 19), float8 E8M0 (opset 24) and float4 E2M1
//! (opset 23, the code in the low nibble).
//!
//! Encoding rounds to nearest, ties to even, as the ONNX reference (ml_dtypes) does. Values past
//! the largest finite value become the format's infinity (E5M2), its NaN (the FN/FNUZ types), or
//! the largest value when `saturate` is set (and always for E2M1, which has neither). E8M0 is a
//! bare power-of-two exponent with its own rounding modes (see [`encode_e8m0`]).

use super::DType;

/// One of the sign/exponent/mantissa float formats narrower than f16.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MiniFloat {
    exponent_bits: u32,
    mantissa_bits: u32,
    bias: i32,
    kind: Specials,
}

/// How a format spells NaN and infinity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Specials {
    /// IEEE style: all-ones exponent is infinity (zero mantissa) or NaN.
    Ieee,
    /// "Finite": no infinity; only the all-ones exponent and mantissa is NaN (E4M3FN).
    FiniteNanAllOnes,
    /// "Finite, unsigned zero": no infinity, no -0; the -0 pattern (sign bit alone) is NaN.
    FiniteNanNegZero,
    /// No infinity and no NaN at all (E2M1).
    Neither,
}

impl MiniFloat {
    pub const E4M3FN: MiniFloat = MiniFloat::new(4, 3, 7, Specials::FiniteNanAllOnes);
    pub const E4M3FNUZ: MiniFloat = MiniFloat::new(4, 3, 8, Specials::FiniteNanNegZero);
    pub const E5M2: MiniFloat = MiniFloat::new(5, 2, 15, Specials::Ieee);
    pub const E5M2FNUZ: MiniFloat = MiniFloat::new(5, 2, 16, Specials::FiniteNanNegZero);
    pub const E2M1: MiniFloat = MiniFloat::new(2, 1, 1, Specials::Neither);

    const fn new(exponent_bits: u32, mantissa_bits: u32, bias: i32, kind: Specials) -> Self {
        MiniFloat {
            exponent_bits,
            mantissa_bits,
            bias,
            kind,
        }
    }

    /// The format of a sign/exponent/mantissa dtype (not E8M0, which has no sign or mantissa).
    pub fn of(dtype: DType) -> Option<MiniFloat> {
        match dtype {
            DType::F8E4M3FN => Some(Self::E4M3FN),
            DType::F8E4M3FNUZ => Some(Self::E4M3FNUZ),
            DType::F8E5M2 => Some(Self::E5M2),
            DType::F8E5M2FNUZ => Some(Self::E5M2FNUZ),
            DType::F4E2M1 => Some(Self::E2M1),
            _ => None,
        }
    }

    const fn sign_bit(self) -> u8 {
        1 << (self.exponent_bits + self.mantissa_bits)
    }

    const fn max_exponent_field(self) -> u32 {
        (1 << self.exponent_bits) - 1
    }

    /// The bit pattern of the largest finite magnitude.
    fn max_code(self) -> u8 {
        let all_ones = self.sign_bit() - 1;
        match self.kind {
            // The top exponent is reserved for infinity and NaN.
            Specials::Ieee => all_ones & !((1 << self.mantissa_bits) as u8),
            // All ones is NaN; one below it is the largest value.
            Specials::FiniteNanAllOnes => all_ones - 1,
            Specials::FiniteNanNegZero | Specials::Neither => all_ones,
        }
    }

    /// The canonical NaN pattern (E2M1 has none: NaN becomes -0, as ml_dtypes does).
    fn nan_code(self) -> u8 {
        match self.kind {
            Specials::Ieee => ((self.max_exponent_field() << self.mantissa_bits) as u8) | 0b10,
            Specials::FiniteNanAllOnes => self.sign_bit() - 1,
            Specials::FiniteNanNegZero | Specials::Neither => self.sign_bit(),
        }
    }

    /// The value of bit pattern `code` (only the format's low bits are read).
    pub fn decode(self, code: u8) -> f32 {
        let width = 1 + self.exponent_bits + self.mantissa_bits;
        let code = code & ((1u16 << width) - 1) as u8;
        let negative = code & self.sign_bit() != 0;
        let magnitude = code & (self.sign_bit() - 1);
        let exponent_field = u32::from(magnitude >> self.mantissa_bits);
        let mantissa = i32::from(magnitude & ((1 << self.mantissa_bits) - 1));
        match self.kind {
            Specials::FiniteNanNegZero if code == self.sign_bit() => return f32::NAN,
            Specials::FiniteNanAllOnes if magnitude == self.sign_bit() - 1 => return f32::NAN,
            Specials::Ieee if exponent_field == self.max_exponent_field() => {
                let special = if mantissa == 0 {
                    f32::INFINITY
                } else {
                    f32::NAN
                };
                return if negative { -special } else { special };
            }
            _ => {}
        }
        let m = self.mantissa_bits as i32;
        // Subnormals have exponent field 0 and no implicit leading one.
        let (significand, exponent) = if exponent_field == 0 {
            (mantissa, 1 - self.bias - m)
        } else {
            (mantissa | (1 << m), exponent_field as i32 - self.bias - m)
        };
        // Exact: at most 4 significant bits times a power of two well inside f32's range.
        let value = significand as f32 * (exponent as f32).exp2();
        if negative {
            -value
        } else {
            value
        }
    }

    /// The bit pattern nearest `x` (ties to even). Out-of-range values become infinity or NaN,
    /// or the largest finite value when `saturate` is set or the format has neither.
    pub fn encode(self, x: f64, saturate: bool) -> u8 {
        if x.is_nan() {
            return self.nan_code();
        }
        let sign = if x.is_sign_negative() {
            self.sign_bit()
        } else {
            0
        };
        let overflow = || {
            let saturates = saturate || self.kind == Specials::Neither;
            match self.kind {
                _ if saturates => sign | self.max_code(),
                Specials::Ieee => sign | ((self.max_exponent_field() << self.mantissa_bits) as u8),
                _ => self.nan_code(),
            }
        };
        let magnitude = x.abs();
        if magnitude.is_infinite() {
            return overflow();
        }
        let code = self.round_magnitude(magnitude);
        if code > self.max_code() {
            return overflow();
        }
        // Formats without -0 round tiny negatives (and -0) to +0.
        if code == 0 && self.kind == Specials::FiniteNanNegZero {
            return 0;
        }
        sign | code
    }

    /// The unsigned pattern of finite `magnitude` rounded to nearest even, possibly one exponent
    /// past the format's range (the caller checks it against `max_code`).
    fn round_magnitude(self, magnitude: f64) -> u8 {
        if magnitude == 0.0 {
            return 0;
        }
        let m = self.mantissa_bits as i32;
        let min_exponent = 1 - self.bias;
        // f64 exponent of the magnitude (every f32/f16 input is a normal f64).
        let exponent = (((magnitude.to_bits() >> 52) & 0x7FF) as i32 - 1023).max(min_exponent);
        // Cap far-out exponents so the code arithmetic below stays in range; such values
        // overflow anyway.
        let top = self.max_exponent_field() as i32 - self.bias + 1;
        if exponent > top {
            return u8::MAX;
        }
        // Scaling by a power of two is exact; the division leaves the part to round.
        let quantum = f64::from(exponent - m).exp2();
        let scaled = magnitude / quantum;
        let steps = round_half_even(scaled) as i32;
        let (exponent, steps) = if steps >= 2 << m {
            (exponent + 1, steps >> 1)
        } else {
            (exponent, steps)
        };
        if steps < 1 << m {
            // Subnormal (or zero): exponent field 0.
            return steps as u8;
        }
        let field = exponent + self.bias;
        if field > self.max_exponent_field() as i32 {
            return u8::MAX;
        }
        ((field << m) | (steps - (1 << m))) as u8
    }
}

fn round_half_even(x: f64) -> f64 {
    let floor = x.floor();
    let diff = x - floor;
    if diff > 0.5 || (diff == 0.5 && floor % 2.0 != 0.0) {
        floor + 1.0
    } else {
        floor
    }
}

/// E8M0: the value 2^(code - 127), with 0xFF for NaN.
pub fn decode_e8m0(code: u8) -> f32 {
    if code == 0xFF {
        f32::NAN
    } else {
        (f32::from(code) - 127.0).exp2()
    }
}

/// How E8M0 encoding rounds a value that is not a power of two (Cast's `round_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum E8m0Rounding {
    /// Toward the next power of two up (the default).
    Up,
    /// Toward the power of two below (truncate the mantissa).
    Down,
    /// To the nearer power of two, by the guard/round/sticky bits.
    Nearest,
}

impl E8m0Rounding {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "up" => Some(Self::Up),
            "down" => Some(Self::Down),
            "nearest" => Some(Self::Nearest),
            _ => None,
        }
    }
}

/// The E8M0 code of `x`, from its f32 exponent as the ONNX reference computes it: the sign is
/// dropped, NaN and infinity give 0xFF, and with `saturate` rounding never reaches 0xFF.
pub fn encode_e8m0(x: f32, saturate: bool, rounding: E8m0Rounding) -> u8 {
    let bits = x.to_bits();
    let exponent = (bits >> 23) & 0xFF;
    if exponent == 0xFF {
        return 0xFF;
    }
    let round_up = match rounding {
        E8m0Rounding::Down => false,
        E8m0Rounding::Up => bits & 0x7F_FFFF != 0,
        E8m0Rounding::Nearest => {
            let guard = bits & 0x40_0000 != 0;
            let round = bits & 0x20_0000 != 0;
            let sticky = bits & 0x1F_FFFF != 0;
            let odd = exponent > 0;
            guard && (round || sticky || odd)
        }
    };
    let round_up = round_up && !(saturate && exponent == 0xFE);
    // Without saturation 0xFE rounds up to 0xFF (NaN), as the reference's u8 arithmetic does.
    (exponent + u32::from(round_up)) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e4m3fn_values_rounding_and_overflow() {
        let f = MiniFloat::E4M3FN;
        assert_eq!(f.decode(0x7E), 448.0);
        assert!(f.decode(0x7F).is_nan() && f.decode(0xFF).is_nan());
        assert_eq!(f.decode(0x01), 2f32.powi(-9));
        assert_eq!(f.encode(1.0, true), 0x38);
        // 0.4789 lies between 0.46875 (0x2F) and 0.5 (0x30), nearer the first.
        assert_eq!(f.encode(0.478_925_47, true), 0x2F);
        // 464 is the tie between 448 (even mantissa) and 480 (not representable).
        assert_eq!(f.encode(464.0, false), 0x7E);
        assert_eq!(f.encode(465.0, false), 0x7F);
        assert_eq!(f.encode(1e6, true), 0x7E);
        assert_eq!(f.encode(-f64::INFINITY, true), 0xFE);
        assert_eq!(f.encode(-f64::INFINITY, false), 0x7F);
        assert_eq!(f.encode(-1e-10, true), 0x80);
    }

    #[test]
    fn fnuz_formats_have_no_negative_zero() {
        let f = MiniFloat::E4M3FNUZ;
        assert!(f.decode(0x80).is_nan());
        assert_eq!(f.decode(0x7F), 240.0);
        assert_eq!(f.encode(-1e-10, false), 0x00);
        assert_eq!(f.encode(248.0, false), 0x80);
        assert_eq!(f.encode(248.0, true), 0x7F);
        assert_eq!(f.encode(2f64.powi(-10), true), 0x01);
        let g = MiniFloat::E5M2FNUZ;
        assert_eq!(g.decode(0x7F), 57344.0);
        assert_eq!(g.encode(250.0, true), 96);
    }

    #[test]
    fn e5m2_is_ieee_like() {
        let f = MiniFloat::E5M2;
        assert_eq!(f.decode(0x7C), f32::INFINITY);
        assert!(f.decode(0x7E).is_nan());
        assert_eq!(f.encode(61440.0, false), 0x7C);
        assert_eq!(f.encode(61440.0, true), 0x7B);
        assert_eq!(f.encode(57344.0, false), 0x7B);
        assert_eq!(f.encode(2f64.powi(-10), true), 20);
        assert_eq!(f.encode(2f64.powi(-20), true), 0);
        assert_eq!(f.encode(f64::NAN, true), 0x7E);
    }

    #[test]
    fn e2m1_saturates_and_rounds_to_even() {
        let f = MiniFloat::E2M1;
        let values: Vec<f32> = (0..8).map(|c| f.decode(c)).collect();
        assert_eq!(values, [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]);
        assert_eq!(f.decode(0xF), -6.0);
        assert_eq!(f.encode(0.25, false), 0);
        assert_eq!(f.encode(2.5, false), 4);
        assert_eq!(f.encode(5.0, false), 6);
        assert_eq!(f.encode(100.0, false), 7);
        assert_eq!(f.encode(-f64::INFINITY, false), 0xF);
        assert_eq!(f.encode(f64::NAN, false), 0x8);
    }

    #[test]
    fn e8m0_rounding_modes() {
        assert_eq!(decode_e8m0(127), 1.0);
        assert!(decode_e8m0(0xFF).is_nan());
        assert_eq!(encode_e8m0(0.124, true, E8m0Rounding::Up), 124);
        assert_eq!(encode_e8m0(1.1, true, E8m0Rounding::Up), 128);
        assert_eq!(encode_e8m0(1.1, true, E8m0Rounding::Down), 127);
        assert_eq!(encode_e8m0(1.6, true, E8m0Rounding::Nearest), 128);
        assert_eq!(encode_e8m0(0.0, true, E8m0Rounding::Up), 0);
        assert_eq!(encode_e8m0(f32::MAX, true, E8m0Rounding::Up), 0xFE);
        assert_eq!(encode_e8m0(f32::MAX, false, E8m0Rounding::Up), 0xFF);
        assert_eq!(E8m0Rounding::parse("sideways"), None);
    }
}
