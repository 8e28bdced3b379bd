//! The activation functions RNN, GRU and LSTM accept by name in their `activations` attribute,
//! with `activation_alpha` / `activation_beta` consumed in order by the functions that take
//! them (defaults as in the corresponding ONNX operators).

use crate::kernels::GemmFloat;
use crate::{OpError, OpResult};

/// The float types the recurrent kernels compute in: GEMM plus transcendental functions.
pub(crate) trait RecurrentFloat:
    GemmFloat + num_traits::Float + strata_core::Element
{
}
impl RecurrentFloat for f32 {}
impl RecurrentFloat for f64 {}

/// One named activation with its parameters resolved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Activation {
    Relu,
    Tanh,
    Sigmoid,
    Affine { alpha: f32, beta: f32 },
    LeakyRelu { alpha: f32 },
    ThresholdedRelu { alpha: f32 },
    ScaledTanh { alpha: f32, beta: f32 },
    HardSigmoid { alpha: f32, beta: f32 },
    Elu { alpha: f32 },
    Softsign,
    Softplus,
}

/// The next value of an `activation_alpha`/`activation_beta` list, or the function's default.
struct Params<'a> {
    values: &'a [f32],
    next: usize,
}

impl Params<'_> {
    fn take(&mut self, default: f32) -> f32 {
        let v = self.values.get(self.next).copied().unwrap_or(default);
        self.next += 1;
        v
    }
}

/// Parses the `activations` names (case-insensitive) against the alpha/beta lists.
pub(crate) fn parse_activations(
    op: &str,
    names: &[String],
    alphas: &[f32],
    betas: &[f32],
) -> OpResult<Vec<Activation>> {
    let mut alpha = Params {
        values: alphas,
        next: 0,
    };
    let mut beta = Params {
        values: betas,
        next: 0,
    };
    names
        .iter()
        .map(|name| {
            Ok(match name.to_ascii_lowercase().as_str() {
                "relu" => Activation::Relu,
                "tanh" => Activation::Tanh,
                "sigmoid" => Activation::Sigmoid,
                "affine" => Activation::Affine {
                    alpha: alpha.take(1.0),
                    beta: beta.take(0.0),
                },
                "leakyrelu" => Activation::LeakyRelu {
                    alpha: alpha.take(0.01),
                },
                "thresholdedrelu" => Activation::ThresholdedRelu {
                    alpha: alpha.take(1.0),
                },
                "scaledtanh" => Activation::ScaledTanh {
                    alpha: alpha.take(1.0),
                    beta: beta.take(1.0),
                },
                "hardsigmoid" => Activation::HardSigmoid {
                    alpha: alpha.take(0.2),
                    beta: beta.take(0.5),
                },
                "elu" => Activation::Elu {
                    alpha: alpha.take(1.0),
                },
                "softsign" => Activation::Softsign,
                "softplus" => Activation::Softplus,
                _ => {
                    return Err(OpError::attribute(
                        op,
                        "activations",
                        format!("unknown activation function {name:?}"),
                    ))
                }
            })
        })
        .collect()
}

impl Activation {
    #[inline]
    pub(crate) fn apply<T: RecurrentFloat>(self, x: T) -> T {
        use num_traits::Float as F;
        let c = |v: f32| <T as crate::kernels::Float>::from_f32(v);
        let (zero, one) = (T::zero(), T::one());
        match self {
            Activation::Relu => F::max(x, zero),
            Activation::Tanh => F::tanh(x),
            Activation::Sigmoid => one / (one + F::exp(-x)),
            Activation::Affine { alpha, beta } => c(alpha) * x + c(beta),
            Activation::LeakyRelu { alpha } => {
                if x >= zero {
                    x
                } else {
                    c(alpha) * x
                }
            }
            Activation::ThresholdedRelu { alpha } => {
                if x > c(alpha) {
                    x
                } else {
                    zero
                }
            }
            Activation::ScaledTanh { alpha, beta } => c(alpha) * F::tanh(c(beta) * x),
            Activation::HardSigmoid { alpha, beta } => {
                F::min(F::max(c(alpha) * x + c(beta), zero), one)
            }
            Activation::Elu { alpha } => {
                if x >= zero {
                    x
                } else {
                    c(alpha) * (F::exp(x) - one)
                }
            }
            Activation::Softsign => x / (one + F::abs(x)),
            Activation::Softplus => F::ln(one + F::exp(x)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parameters_and_values() {
        let names: Vec<String> = ["Sigmoid", "LeakyRelu", "affine", "HardSigmoid"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let acts = parse_activations("LSTM", &names, &[0.5, 2.0], &[3.0]).unwrap();
        assert_eq!(acts[1], Activation::LeakyRelu { alpha: 0.5 });
        assert_eq!(
            acts[2],
            Activation::Affine {
                alpha: 2.0,
                beta: 3.0
            }
        );
        assert_eq!(
            acts[3],
            Activation::HardSigmoid {
                alpha: 0.2,
                beta: 0.5
            }
        );
        assert_eq!(acts[0].apply(0.0f32), 0.5);
        assert_eq!(acts[1].apply(-2.0f32), -1.0);
        assert_eq!(acts[2].apply(1.0f64), 5.0);
        assert_eq!(acts[3].apply(10.0f32), 1.0);
        assert_eq!(Activation::Relu.apply(-3.0f32), 0.0);
        assert!((Activation::Softplus.apply(0.0f64) - 2f64.ln()).abs() < 1e-12);
    }

    #[test]
    fn unknown_name_is_an_attribute_error() {
        let err = parse_activations("GRU", &["Swish".to_string()], &[], &[]).unwrap_err();
        assert!(err.to_string().contains("GRU") && err.to_string().contains("Swish"));
    }
}
