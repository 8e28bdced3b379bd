//! Activations with attributes, on f16/bf16/f32/f64 (computed in f32/f64): LeakyRelu, Elu,
//! Selu, Celu, Gelu (exact or tanh), Mish, HardSigmoid, HardSwish, ThresholdedRelu, Shrink,
//! Swish. Attribute values are converted once, when the kernel is built.

use strata_core::DType;

use crate::kernels::Activation;
use crate::ops::math::unary::{real_kernel, sigmoid, Unary, UnaryKind};
use crate::{Kernel, OpContext, OpError, OpResult, Operator};

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ActivationOp {
    LeakyRelu { alpha: f32 },
    Elu { alpha: f32 },
    Selu { alpha: f32, gamma: f32 },
    Celu { alpha: f32 },
    Gelu { tanh: bool },
    Mish,
    HardSigmoid { alpha: f32, beta: f32 },
    HardSwish,
    ThresholdedRelu { alpha: f32 },
    Shrink { bias: f32, lambd: f32 },
    Swish { alpha: f32 },
}

impl ActivationOp {
    fn build_leaky_relu(c: &OpContext) -> OpResult<Box<dyn Operator>> {
        let alpha = c.attrs.float_or("alpha", 0.01)?;
        Unary::boxed(ActivationOp::LeakyRelu { alpha })
    }

    fn build_elu(c: &OpContext) -> OpResult<Box<dyn Operator>> {
        let alpha = c.attrs.float_or("alpha", 1.0)?;
        Unary::boxed(ActivationOp::Elu { alpha })
    }

    fn build_selu(c: &OpContext) -> OpResult<Box<dyn Operator>> {
        let alpha = c.attrs.float_or("alpha", 1.673_263_2)?;
        let gamma = c.attrs.float_or("gamma", 1.050_701)?;
        Unary::boxed(ActivationOp::Selu { alpha, gamma })
    }

    fn build_celu(c: &OpContext) -> OpResult<Box<dyn Operator>> {
        let alpha = c.attrs.float_or("alpha", 1.0)?;
        if alpha == 0.0 {
            return Err(OpError::attribute("Celu", "alpha", "must not be 0"));
        }
        Unary::boxed(ActivationOp::Celu { alpha })
    }

    fn build_gelu(c: &OpContext) -> OpResult<Box<dyn Operator>> {
        let tanh = match c.attrs.string_or("approximate", "none")?.as_str() {
            "none" => false,
            "tanh" => true,
            other => {
                return Err(OpError::attribute(
                    "Gelu",
                    "approximate",
                    format!("must be \"none\" or \"tanh\", got {other:?}"),
                ))
            }
        };
        Unary::boxed(ActivationOp::Gelu { tanh })
    }

    fn build_hard_sigmoid(c: &OpContext) -> OpResult<Box<dyn Operator>> {
        let alpha = c.attrs.float_or("alpha", 0.2)?;
        let beta = c.attrs.float_or("beta", 0.5)?;
        Unary::boxed(ActivationOp::HardSigmoid { alpha, beta })
    }

    fn build_thresholded_relu(c: &OpContext) -> OpResult<Box<dyn Operator>> {
        let alpha = c.attrs.float_or("alpha", 1.0)?;
        Unary::boxed(ActivationOp::ThresholdedRelu { alpha })
    }

    fn build_shrink(c: &OpContext) -> OpResult<Box<dyn Operator>> {
        let bias = c.attrs.float_or("bias", 0.0)?;
        let lambd = c.attrs.float_or("lambd", 0.5)?;
        Unary::boxed(ActivationOp::Shrink { bias, lambd })
    }

    fn build_swish(c: &OpContext) -> OpResult<Box<dyn Operator>> {
        let alpha = c.attrs.float_or("alpha", 1.0)?;
        Unary::boxed(ActivationOp::Swish { alpha })
    }
}

impl UnaryKind for ActivationOp {
    fn name(&self) -> &'static str {
        match self {
            ActivationOp::LeakyRelu { .. } => "LeakyRelu",
            ActivationOp::Elu { .. } => "Elu",
            ActivationOp::Selu { .. } => "Selu",
            ActivationOp::Celu { .. } => "Celu",
            ActivationOp::Gelu { .. } => "Gelu",
            ActivationOp::Mish => "Mish",
            ActivationOp::HardSigmoid { .. } => "HardSigmoid",
            ActivationOp::HardSwish => "HardSwish",
            ActivationOp::ThresholdedRelu { .. } => "ThresholdedRelu",
            ActivationOp::Shrink { .. } => "Shrink",
            ActivationOp::Swish { .. } => "Swish",
        }
    }

    fn fused_activation(&self) -> Option<Activation> {
        match *self {
            ActivationOp::LeakyRelu { alpha } => Some(Activation::LeakyRelu { alpha }),
            ActivationOp::HardSigmoid { alpha, beta } => {
                Some(Activation::HardSigmoid { alpha, beta })
            }
            ActivationOp::HardSwish => Some(Activation::HardSwish),
            ActivationOp::Gelu { tanh: false } => Some(Activation::Gelu),
            ActivationOp::Gelu { tanh: true } => Some(Activation::GeluTanh),
            _ => None,
        }
    }

    fn kernel(&self, dtype: DType) -> Option<Box<dyn Kernel>> {
        let name = self.name();
        // Each arm converts its attributes inside the closure; the conversion is
        // loop-invariant and hoisted.
        match *self {
            ActivationOp::LeakyRelu { alpha } => real_kernel!(dtype, name, W, |x| {
                if x < W::zero() {
                    x * W::lit(alpha as f64)
                } else {
                    x
                }
            }),
            ActivationOp::Elu { alpha } => real_kernel!(dtype, name, W, |x| {
                if x < W::zero() {
                    W::lit(alpha as f64) * x.exp_m1()
                } else {
                    x
                }
            }),
            ActivationOp::Selu { alpha, gamma } => real_kernel!(dtype, name, W, |x| {
                let g = W::lit(gamma as f64);
                if x > W::zero() {
                    g * x
                } else {
                    g * W::lit(alpha as f64) * x.exp_m1()
                }
            }),
            ActivationOp::Celu { alpha } => real_kernel!(dtype, name, W, |x| {
                let a = W::lit(alpha as f64);
                x.max(W::zero()) + (a * (x / a).exp_m1()).min(W::zero())
            }),
            ActivationOp::Gelu { tanh: false } => real_kernel!(dtype, name, W, |x| {
                W::lit(0.5)
                    * x
                    * (W::one() + (x * W::lit(std::f64::consts::FRAC_1_SQRT_2)).error_function())
            }),
            ActivationOp::Gelu { tanh: true } => real_kernel!(dtype, name, W, |x| {
                let k = W::lit((2.0 / std::f64::consts::PI).sqrt());
                W::lit(0.5) * x * (W::one() + (k * (x + W::lit(0.044715) * x * x * x)).tanh_v())
            }),
            ActivationOp::Mish => real_kernel!(dtype, name, W, |x| {
                // tanh(ln(1 + e^x)) = n / (n + 2) with n = e^x (e^x + 2); past 20 it is 1.
                let e = x.exp_v();
                let n = e * (e + W::lit(2.0));
                if x > W::lit(20.0) {
                    x
                } else {
                    x * n / (n + W::lit(2.0))
                }
            }),
            ActivationOp::HardSigmoid { alpha, beta } => real_kernel!(dtype, name, W, |x| {
                (W::lit(alpha as f64) * x + W::lit(beta as f64))
                    .max(W::zero())
                    .min(W::one())
            }),
            ActivationOp::HardSwish => real_kernel!(dtype, name, W, |x| {
                x * (x * W::lit(1.0 / 6.0) + W::lit(0.5))
                    .max(W::zero())
                    .min(W::one())
            }),
            ActivationOp::ThresholdedRelu { alpha } => real_kernel!(dtype, name, W, |x| {
                if x > W::lit(alpha as f64) {
                    x
                } else {
                    W::zero()
                }
            }),
            ActivationOp::Shrink { bias, lambd } => real_kernel!(dtype, name, W, |x| {
                let (b, l) = (W::lit(bias as f64), W::lit(lambd as f64));
                if x < -l {
                    x + b
                } else if x > l {
                    x - b
                } else {
                    W::zero()
                }
            }),
            ActivationOp::Swish { alpha } => real_kernel!(dtype, name, W, |x| {
                x * sigmoid(W::lit(alpha as f64) * x)
            }),
        }
    }
}

/// The table of this family's parameterized activations.
pub const OPS: &[(&str, crate::Constructor)] = &[
    ("LeakyRelu", ActivationOp::build_leaky_relu),
    ("Elu", ActivationOp::build_elu),
    ("Selu", ActivationOp::build_selu),
    ("Celu", ActivationOp::build_celu),
    ("Gelu", ActivationOp::build_gelu),
    ("Mish", |_| Unary::boxed(ActivationOp::Mish)),
    ("HardSigmoid", ActivationOp::build_hard_sigmoid),
    ("HardSwish", |_| Unary::boxed(ActivationOp::HardSwish)),
    ("ThresholdedRelu", ActivationOp::build_thresholded_relu),
    ("Shrink", ActivationOp::build_shrink),
    ("Swish", ActivationOp::build_swish),
];

#[cfg(test)]
mod tests {
    use crate::support::test_util::{run_op, run_op_in_place};
    use crate::Attr;
    use strata_core::Tensor;

    fn act(op: &str, attrs: &[(&str, Attr)], x: &[f64]) -> Vec<f64> {
        let t = Tensor::from_slice(x, &[x.len()]).unwrap();
        run_op(op, 22, attrs, &[t]).unwrap()[0]
            .to_vec::<f64>()
            .unwrap()
    }

    fn close(got: &[f64], want: &[f64]) {
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{got:?} vs {want:?}");
        }
    }

    #[test]
    fn hand_computed_values() {
        let x = [-2.0, 0.0, 1.5];
        close(&act("LeakyRelu", &[], &x), &[-0.02, 0.0, 1.5]);
        close(
            &act("Elu", &[("alpha", Attr::Float(2.0))], &x),
            &[2.0 * ((-2.0f64).exp() - 1.0), 0.0, 1.5],
        );
        close(
            &act("Selu", &[], &x),
            &[
                1.0507009873554805 * 1.6732632423543772 * ((-2.0f64).exp() - 1.0),
                0.0,
                1.0507009873554805 * 1.5,
            ],
        );
        close(&act("Celu", &[], &x), &[(-2.0f64).exp() - 1.0, 0.0, 1.5]);
        close(
            &act("Gelu", &[], &x),
            &[-0.04550026389635842, 0.0, 1.399789198096713],
        );
        close(
            &act("Gelu", &[("approximate", Attr::String("tanh".into()))], &x),
            &[-0.04540230591222494, 0.0, 1.3995715769802328],
        );
        close(
            &act("Mish", &[], &x),
            &[-0.2525014826957089, 0.0, 1.4033782663958028],
        );
        close(&act("HardSigmoid", &[], &x), &[0.1, 0.5, 0.8]);
        close(
            &act("HardSwish", &[], &[-4.0, 1.0, 4.0]),
            &[0.0, 2.0 / 3.0, 4.0],
        );
        close(&act("ThresholdedRelu", &[], &x), &[0.0, 0.0, 1.5]);
        close(
            &act("Shrink", &[("bias", Attr::Float(0.5))], &x),
            &[-1.5, 0.0, 1.0],
        );
        close(
            &act("Swish", &[], &x),
            &[
                -2.0 / (1.0 + 2.0f64.exp()),
                0.0,
                1.5 / (1.0 + (-1.5f64).exp()),
            ],
        );
    }

    #[test]
    fn in_place_and_half_precision() {
        let x = Tensor::from_slice(&[-1.0f32, 2.0], &[2]).unwrap();
        let y = run_op_in_place("LeakyRelu", 16, &[("alpha", Attr::Float(0.5))], &[x]).unwrap();
        assert_eq!(y[0].to_vec::<f32>().unwrap(), [-0.5, 2.0]);
        let h = Tensor::from_slice(&[strata_core::bf16::from_f32(-1.0)], &[1]).unwrap();
        let y = run_op("Elu", 22, &[], &[h]).unwrap();
        let v = y[0].to_vec::<strata_core::bf16>().unwrap()[0].to_f32();
        assert!((v - (-0.6321)).abs() < 4e-3, "{v}");
    }

    #[test]
    fn bad_attributes_are_errors() {
        let x = Tensor::from_slice(&[1.0f32], &[1]).unwrap();
        let err = run_op(
            "Gelu",
            20,
            &[("approximate", Attr::String("fast".into()))],
            std::slice::from_ref(&x),
        )
        .unwrap_err();
        assert!(err.to_string().contains("approximate"), "{err}");
        let err = run_op("Celu", 12, &[("alpha", Attr::Float(0.0))], &[x]).unwrap_err();
        assert!(err.to_string().contains("Celu"), "{err}");
    }
}
