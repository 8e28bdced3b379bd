//! The score transforms of the ai.onnx.ml tree and linear models (`post_transform`): NONE,
//! SOFTMAX, LOGISTIC, SOFTMAX_ZERO and PROBIT, applied to one row of scores in f64. PROBIT uses
//! the closed-form inverse-erf approximation of the ONNX reference and onnxruntime (relative
//! error about 2e-3), so results agree with theirs; SOFTMAX_ZERO leaves zero scores at zero.

use crate::{OpError, OpResult};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PostTransform {
    None,
    Softmax,
    Logistic,
    SoftmaxZero,
    Probit,
}

impl PostTransform {
    /// From the integer attribute of TreeEnsemble (opset 5): 0..=4 in the order above.
    pub fn from_code(op: &str, code: i64) -> OpResult<Self> {
        Ok(match code {
            0 => PostTransform::None,
            1 => PostTransform::Softmax,
            2 => PostTransform::Logistic,
            3 => PostTransform::SoftmaxZero,
            4 => PostTransform::Probit,
            other => {
                return Err(OpError::attribute(
                    op,
                    "post_transform",
                    format!("{other} is not one of 0 (NONE) ..= 4 (PROBIT)"),
                ))
            }
        })
    }

    /// From the string attribute of the older ai.onnx.ml operators.
    pub fn from_name(op: &str, name: &str) -> OpResult<Self> {
        Ok(match name {
            "NONE" => PostTransform::None,
            "SOFTMAX" => PostTransform::Softmax,
            "LOGISTIC" => PostTransform::Logistic,
            "SOFTMAX_ZERO" => PostTransform::SoftmaxZero,
            "PROBIT" => PostTransform::Probit,
            other => {
                return Err(OpError::attribute(
                    op,
                    "post_transform",
                    format!("{other:?} is not NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO or PROBIT"),
                ))
            }
        })
    }

    /// Transforms one row of scores in place.
    pub fn apply(self, scores: &mut [f64]) {
        match self {
            PostTransform::None => {}
            PostTransform::Logistic => scores.iter_mut().for_each(|v| *v = logistic(*v)),
            PostTransform::Probit => scores.iter_mut().for_each(|v| *v = probit(*v)),
            PostTransform::Softmax => softmax(scores),
            PostTransform::SoftmaxZero => softmax_zero(scores),
        }
    }
}

/// 1 / (1 + e^-x), computed from |x| so large inputs do not overflow.
fn logistic(x: f64) -> f64 {
    let v = 1.0 / (1.0 + (-x.abs()).exp());
    if x < 0.0 {
        1.0 - v
    } else {
        v
    }
}

fn softmax(scores: &mut [f64]) {
    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut sum = 0.0;
    for v in scores.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    scores.iter_mut().for_each(|v| *v /= sum);
}

/// Softmax over the non-zero scores; zeros stay zero. A row of only zeros becomes 0.5s, as in
/// the ONNX reference.
fn softmax_zero(scores: &mut [f64]) {
    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut sum = 0.0;
    for v in scores.iter_mut() {
        if v.abs() > 1e-7 {
            *v = (*v - max).exp();
        } else {
            *v = 0.0;
        }
        sum += *v;
    }
    if sum == 0.0 {
        scores.fill(0.5);
    } else {
        scores.iter_mut().for_each(|v| *v /= sum);
    }
}

/// Winitzki's closed-form inverse error function (a = 0.147); ±1 map to ±infinity (ln 0 is
/// -infinity), values outside [-1, 1] to NaN.
fn erf_inv(x: f64) -> f64 {
    let sign = if x < 0.0 { -1.0 } else { 1.0 };
    let ln = ((1.0 - x) * (1.0 + x)).ln();
    let a = 2.0 / (std::f64::consts::PI * 0.147) + 0.5 * ln;
    let b = ln / 0.147;
    sign * (-a + (a * a - b).sqrt()).sqrt()
}

/// The standard normal quantile of a probability: sqrt(2) erfinv(2p - 1).
fn probit(p: f64) -> f64 {
    std::f64::consts::SQRT_2 * erf_inv(2.0 * p - 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tol)
    }

    #[test]
    fn transforms_match_their_definitions() {
        let mut s = [0.0, (3.0f64).ln()];
        PostTransform::Softmax.apply(&mut s);
        assert!(close(&s, &[0.25, 0.75], 1e-12), "{s:?}");
        let mut s = [0.0, -800.0, 800.0];
        PostTransform::Logistic.apply(&mut s);
        assert!(close(&s, &[0.5, 0.0, 1.0], 1e-12), "{s:?}");
        let mut s = [0.0, 1.0, 1.0];
        PostTransform::SoftmaxZero.apply(&mut s);
        assert!(close(&s, &[0.0, 0.5, 0.5], 1e-12), "{s:?}");
        let mut s = [0.0, 0.0];
        PostTransform::SoftmaxZero.apply(&mut s);
        assert_eq!(s, [0.5, 0.5]);
        // Normal quantiles: 0.5 -> 0, 0.975 -> 1.95996 (within the approximation's error).
        let mut s = [0.5, 0.975, 0.025];
        PostTransform::Probit.apply(&mut s);
        assert!(close(&s, &[0.0, 1.959964, -1.959964], 5e-3), "{s:?}");
        let mut s = [0.0, 1.0, 1.5];
        PostTransform::Probit.apply(&mut s);
        assert!(
            s[0] == f64::NEG_INFINITY && s[1] == f64::INFINITY && s[2].is_nan(),
            "{s:?}"
        );
    }

    #[test]
    fn unknown_transforms_are_errors() {
        assert!(PostTransform::from_code("T", 5).is_err());
        assert!(PostTransform::from_name("T", "EXP").is_err());
        assert_eq!(
            PostTransform::from_name("T", "PROBIT").unwrap(),
            PostTransform::from_code("T", 4).unwrap()
        );
    }
}
