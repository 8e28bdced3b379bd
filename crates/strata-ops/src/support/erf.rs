//! The error function in f64 (std's `erf` is unstable). Rational approximations from FreeBSD's
//! `s_erf.c`, accurate to under one ulp:
//!
//! Copyright (C) 1993 by Sun Microsystems, Inc. All rights reserved.
//! Developed at SunPro, a Sun Microsystems, Inc. business. Permission to use, copy, modify, and
//! distribute this software is freely granted, provided that this notice is preserved.

// The coefficients are kept digit for digit as published.
#![allow(clippy::excessive_precision)]

const ERX: f64 = 8.45062911510467529297e-01;
// erf on [0, 0.84375]: x + x * P(x²) / Q(x²).
const EFX8: f64 = 1.02703333676410069053e+00;
const PP: [f64; 5] = [
    1.28379167095512558561e-01,
    -3.25042107247001499370e-01,
    -2.84817495755985104766e-02,
    -5.77027029648944159157e-03,
    -2.37630166566501626084e-05,
];
const QQ: [f64; 5] = [
    3.97917223959155352819e-01,
    6.50222499887672944485e-02,
    5.08130628187576562776e-03,
    1.32494738004321644526e-04,
    -3.96022827877536812320e-06,
];
// erf on [0.84375, 1.25]: erx + P(s) / Q(s) with s = |x| - 1.
const PA: [f64; 7] = [
    -2.36211856075265944077e-03,
    4.14856118683748331666e-01,
    -3.72207876035701323847e-01,
    3.18346619901161753674e-01,
    -1.10894694282396677476e-01,
    3.54783043256182359371e-02,
    -2.16637559486879084300e-03,
];
const QA: [f64; 6] = [
    1.06420880400844228286e-01,
    5.40397917702171048937e-01,
    7.18286544141962662868e-02,
    1.26171219808761642112e-01,
    1.36370839120290507362e-02,
    1.19844998467991074170e-02,
];
// erfc on [1.25, 1/0.35]: exp(-x² - 0.5625 + R(z) / S(z)) / x with z = 1/x².
const RA: [f64; 8] = [
    -9.86494403484714822705e-03,
    -6.93858572707181764372e-01,
    -1.05586262253232909814e+01,
    -6.23753324503260060396e+01,
    -1.62396669462573470355e+02,
    -1.84605092906711035994e+02,
    -8.12874355063065934246e+01,
    -9.81432934416914548592e+00,
];
const SA: [f64; 8] = [
    1.96512716674392571292e+01,
    1.37657754143519042600e+02,
    4.34565877475229228821e+02,
    6.45387271733267880336e+02,
    4.29008140027567833386e+02,
    1.08635005541779435134e+02,
    6.57024977031928170135e+00,
    -6.04244152148580987438e-02,
];
// erfc on [1/0.35, 6].
const RB: [f64; 7] = [
    -9.86494292470009928597e-03,
    -7.99283237680523006574e-01,
    -1.77579549177547519889e+01,
    -1.60636384855821916062e+02,
    -6.37566443368389627722e+02,
    -1.02509513161107724954e+03,
    -4.83519191608651397019e+02,
];
const SB: [f64; 7] = [
    3.03380607434824582924e+01,
    3.25792512996573918826e+02,
    1.53672958608443695994e+03,
    3.19985821950859553908e+03,
    2.55305040643316442583e+03,
    4.74528541206955367215e+02,
    -2.24409524465858183362e+01,
];

/// `c[0] + z * (c[1] + z * (...))`.
#[inline(always)]
fn poly(c: &[f64], z: f64) -> f64 {
    c.iter().rev().fold(0.0, |acc, &k| acc * z + k)
}

/// `1 + z * (c[0] + z * (c[1] + ...))`.
#[inline(always)]
fn poly1(c: &[f64], z: f64) -> f64 {
    1.0 + z * poly(c, z)
}

pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    if a < 0.84375 {
        if a < f64::powi(2.0, -28) {
            return 0.125 * (8.0 * x + EFX8 * x);
        }
        let z = x * x;
        return x + x * (poly(&PP, z) / poly1(&QQ, z));
    }
    let y = if a < 1.25 {
        let s = a - 1.0;
        ERX + poly(&PA, s) / poly1(&QA, s)
    } else if a < 6.0 {
        let s = 1.0 / (a * a);
        let (r, big_s) = if a < 1.0 / 0.35 {
            (poly(&RA, s), poly1(&SA, s))
        } else {
            (poly(&RB, s), poly1(&SB, s))
        };
        // z is a with the low 32 bits cleared, so z * z is exact.
        let z = f64::from_bits(a.to_bits() & 0xffff_ffff_0000_0000);
        1.0 - (-z * z - 0.5625).exp() * ((z - a) * (z + a) + r / big_s).exp() / a
    } else {
        1.0
    };
    y.copysign(x)
}

#[cfg(test)]
mod tests {
    use super::erf;

    #[test]
    fn known_values() {
        // Reference values from mpmath.
        let cases = [
            (0.0, 0.0),
            (1e-10, 1.1283791670955126e-10),
            (0.5, 0.5204998778130465),
            (1.0, 0.8427007929497149),
            (2.0, 0.9953222650189527),
            (3.5, 0.9999992569016276),
            (-0.7, -0.6778011938374184),
            (10.0, 1.0),
        ];
        for (x, want) in cases {
            let got = erf(x);
            assert!(
                (got - want).abs() <= 1e-15 * want.abs().max(1e-300),
                "erf({x}) = {got}"
            );
        }
        assert!(erf(f64::NAN).is_nan());
        assert_eq!(erf(f64::NEG_INFINITY), -1.0);
    }
}
