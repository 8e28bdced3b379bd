//! Element-wise activations a producer kernel can apply while its output is still in cache, so
//! the graph optimizer can fuse Conv+Relu (and friends) without a second pass over memory.

use super::float::Float;
use super::simd::multiversion;

/// An activation fused into a kernel's output write.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Activation {
    /// Identity.
    #[default]
    None,
    /// `max(x, 0)`.
    Relu,
    /// `x` if `x >= 0`, else `alpha * x`.
    LeakyRelu { alpha: f32 },
    /// `min(max(x, min), max)` (ONNX Clip; Relu6 is `Clip { min: 0, max: 6 }`).
    Clip { min: f32, max: f32 },
    /// `1 / (1 + exp(-x))`.
    Sigmoid,
    /// `max(0, min(1, alpha * x + beta))` (ONNX HardSigmoid).
    HardSigmoid { alpha: f32, beta: f32 },
    /// `x * max(0, min(1, x / 6 + 1 / 2))` (ONNX HardSwish).
    HardSwish,
    /// `tanh(x)`.
    Tanh,
    /// The exact GELU, `0.5 x (1 + erf(x / √2))`.
    Gelu,
    /// GELU's tanh approximation, `0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))`.
    GeluTanh,
    /// `x · sigmoid(alpha · x)` (com.microsoft QuickGelu; SiLU with `alpha = 1`).
    QuickGelu { alpha: f32 },
}

impl Activation {
    /// Applies the activation to one value.
    #[inline(always)]
    pub fn apply<T: Float>(self, x: T) -> T {
        match self {
            Activation::None => x,
            Activation::Relu => relu(x),
            Activation::LeakyRelu { alpha } => leaky(x, T::from_f32(alpha)),
            Activation::Clip { min, max } => clip(x, T::from_f32(min), T::from_f32(max)),
            Activation::Sigmoid => sigmoid(x),
            Activation::HardSigmoid { alpha, beta } => {
                hard_sigmoid(x, T::from_f32(alpha), T::from_f32(beta))
            }
            Activation::HardSwish => hard_swish(x),
            Activation::Tanh => x.tanh(),
            Activation::Gelu => gelu_erf(x),
            Activation::GeluTanh => gelu_tanh(x),
            Activation::QuickGelu { alpha } => x * sigmoid(T::from_f32(alpha) * x),
        }
    }

    /// `values = act(values + residual + bias)`: a fused residual Add, a per-channel bias and
    /// the activation in one pass. `residual`, when given, has `values`' length.
    pub fn add_residual_bias_and_apply<T: Float>(
        self,
        values: &mut [T],
        residual: Option<&[T]>,
        bias: T,
    ) {
        match residual {
            Some(r) => residual_bias_and_activation(self, values, r, bias),
            None if bias != T::ZERO || self != Activation::None => {
                bias_and_activation(self, values, bias)
            }
            None => {}
        }
    }

    /// Applies the activation to every element of `values` in place.
    pub fn apply_all<T: Float>(self, values: &mut [T]) {
        if self != Activation::None {
            bias_and_activation(self, values, T::ZERO);
        }
    }

    /// Adds `bias` to every element of `values` and applies the activation, in one pass. The
    /// match sits outside the loop so each arm vectorizes.
    pub fn add_bias_and_apply<T: Float>(self, values: &mut [T], bias: T) {
        bias_and_activation(self, values, bias);
    }
}

multiversion! {
    /// [`Activation::add_bias_and_apply`], compiled for the widest vectors this CPU has.
    fn bias_and_activation<T: Float>(act: Activation, values: &mut [T], bias: T) {
        match act {
            Activation::None => values.iter_mut().for_each(|v| *v += bias),
            Activation::Relu => values.iter_mut().for_each(|v| *v = relu(*v + bias)),
            Activation::LeakyRelu { alpha } => {
                let alpha = T::from_f32(alpha);
                values.iter_mut().for_each(|v| *v = leaky(*v + bias, alpha))
            }
            Activation::Clip { min, max } => {
                let (min, max) = (T::from_f32(min), T::from_f32(max));
                values
                    .iter_mut()
                    .for_each(|v| *v = clip(*v + bias, min, max))
            }
            Activation::Sigmoid => values.iter_mut().for_each(|v| *v = sigmoid(*v + bias)),
            Activation::HardSigmoid { alpha, beta } => {
                let (alpha, beta) = (T::from_f32(alpha), T::from_f32(beta));
                values
                    .iter_mut()
                    .for_each(|v| *v = hard_sigmoid(*v + bias, alpha, beta))
            }
            Activation::HardSwish => values.iter_mut().for_each(|v| *v = hard_swish(*v + bias)),
            Activation::Tanh => values.iter_mut().for_each(|v| *v = (*v + bias).tanh()),
            Activation::Gelu | Activation::GeluTanh => gelu_in_blocks(act, values, None, bias),
            Activation::QuickGelu { alpha } => {
                let alpha = T::from_f32(alpha);
                values.iter_mut().for_each(|v| {
                    let x = *v + bias;
                    *v = x * sigmoid(alpha * x)
                })
            }
        }
    }
}

multiversion! {
    /// [`Activation::add_residual_bias_and_apply`] with a residual, for the widest vectors.
    fn residual_bias_and_activation<T: Float>(
        act: Activation,
        values: &mut [T],
        residual: &[T],
        bias: T,
    ) {
        let pairs = values.iter_mut().zip(residual);
        match act {
            Activation::None => pairs.for_each(|(v, &r)| *v += r + bias),
            Activation::Relu => pairs.for_each(|(v, &r)| *v = relu(*v + r + bias)),
            Activation::Clip { min, max } => {
                let (min, max) = (T::from_f32(min), T::from_f32(max));
                pairs.for_each(|(v, &r)| *v = clip(*v + r + bias, min, max))
            }
            Activation::Gelu | Activation::GeluTanh => {
                gelu_in_blocks(act, values, Some(residual), bias)
            }
            other => pairs.for_each(|(v, &r)| *v = other.apply(*v + r + bias)),
        }
    }
}

/// Below this pre-activation a GELU is `x` times a small difference (`1 + erf`, `1 + tanh`)
/// that the fast f32 functions give with an absolute error of a few 1e-8, a visible relative
/// error of the result: those elements are recomputed in f64.
const GELU_TAIL: f32 = -3.0;

/// `values = gelu(values + residual + bias)` in blocks small enough to keep the pre-activations
/// on the stack, so the rare elements in the negative tail can be recomputed exactly.
#[inline(always)]
fn gelu_in_blocks<T: Float>(act: Activation, values: &mut [T], residual: Option<&[T]>, bias: T) {
    const BLOCK: usize = 64;
    let tail = T::from_f32(GELU_TAIL);
    let mut pre = [T::ZERO; BLOCK];
    for (b, block) in values.chunks_mut(BLOCK).enumerate() {
        let pre = &mut pre[..block.len()];
        match residual {
            Some(r) => {
                let r = &r[b * BLOCK..b * BLOCK + block.len()];
                for ((p, v), &r) in pre.iter_mut().zip(block.iter()).zip(r) {
                    *p = *v + r + bias;
                }
            }
            None => {
                for (p, v) in pre.iter_mut().zip(block.iter()) {
                    *p = *v + bias;
                }
            }
        }
        let mut low = false;
        match act {
            Activation::GeluTanh => {
                for (v, &p) in block.iter_mut().zip(pre.iter()) {
                    *v = gelu_tanh(p);
                    low |= p < tail;
                }
            }
            _ => {
                for (v, &p) in block.iter_mut().zip(pre.iter()) {
                    *v = gelu_erf(p);
                    low |= p < tail;
                }
            }
        }
        if low {
            for (v, &p) in block.iter_mut().zip(pre.iter()) {
                if p < tail {
                    *v = T::of_f64(gelu_f64(act, p.as_f64()));
                }
            }
        }
    }
}

/// GELU in f64, for the negative tail.
fn gelu_f64(act: Activation, x: f64) -> f64 {
    let gate = if act == Activation::GeluTanh {
        let k = (2.0 / std::f64::consts::PI).sqrt();
        1.0 + (k * (x + 0.044715 * x * x * x)).tanh()
    } else {
        1.0 + crate::support::erf::erf(x * std::f64::consts::FRAC_1_SQRT_2)
    };
    0.5 * x * gate
}

#[inline(always)]
fn gelu_erf<T: Float>(x: T) -> T {
    let half = T::from_f32(0.5);
    half * x * (T::ONE + (x * T::of_f64(std::f64::consts::FRAC_1_SQRT_2)).erf())
}

#[inline(always)]
fn gelu_tanh<T: Float>(x: T) -> T {
    let k = T::of_f64((2.0 / std::f64::consts::PI).sqrt());
    let c = T::from_f32(0.044715);
    let half = T::from_f32(0.5);
    half * x * (T::ONE + (k * (x + c * x * x * x)).fast_tanh())
}

#[inline(always)]
fn relu<T: Float>(x: T) -> T {
    if x > T::ZERO {
        x
    } else {
        T::ZERO
    }
}

#[inline(always)]
fn leaky<T: Float>(x: T, alpha: T) -> T {
    if x >= T::ZERO {
        x
    } else {
        alpha * x
    }
}

#[inline(always)]
fn clip<T: Float>(x: T, min: T, max: T) -> T {
    let x = if x < min { min } else { x };
    if x > max {
        max
    } else {
        x
    }
}

#[inline(always)]
fn sigmoid<T: Float>(x: T) -> T {
    T::ONE / (T::ONE + (T::ZERO - x).exp())
}

#[inline(always)]
fn hard_sigmoid<T: Float>(x: T, alpha: T, beta: T) -> T {
    clip(alpha * x + beta, T::ZERO, T::ONE)
}

#[inline(always)]
fn hard_swish<T: Float>(x: T) -> T {
    x * hard_sigmoid(x, T::from_f32(1.0 / 6.0), T::from_f32(0.5))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activations_match_their_definitions() {
        assert_eq!(Activation::None.apply(-2.0f32), -2.0);
        assert_eq!(Activation::Relu.apply(-2.0f32), 0.0);
        assert_eq!(Activation::Relu.apply(3.0f32), 3.0);
        assert_eq!(Activation::LeakyRelu { alpha: 0.1 }.apply(-2.0f32), -0.2);
        assert_eq!(Activation::Clip { min: 0.0, max: 6.0 }.apply(7.5f32), 6.0);
        assert_eq!(Activation::Clip { min: 0.0, max: 6.0 }.apply(-1.0f32), 0.0);
        assert!((Activation::Sigmoid.apply(0.0f32) - 0.5).abs() < 1e-7);
        let hard = Activation::HardSigmoid {
            alpha: 0.2,
            beta: 0.5,
        };
        assert_eq!(hard.apply(-5.0f32), 0.0);
        assert!((hard.apply(1.0f32) - 0.7).abs() < 1e-7);
        assert_eq!(hard.apply(5.0f32), 1.0);
        assert_eq!(Activation::HardSwish.apply(-4.0f32), 0.0);
        assert!((Activation::HardSwish.apply(1.0f32) - 2.0 / 3.0).abs() < 1e-7);
        assert_eq!(Activation::HardSwish.apply(4.0f32), 4.0);
        assert!((Activation::Tanh.apply(0.5f32) - 0.5f32.tanh()).abs() < 1e-7);
        let quick = Activation::QuickGelu { alpha: 1.702 };
        for x in [-30.0f32, -2.0, 0.0, 0.5, 3.0, 100.0] {
            // f32 rounding of alpha·x is amplified by |alpha·x| in the exponential's tail.
            let want = f64::from(x) / (1.0 + (-f64::from(1.702f32) * f64::from(x)).exp());
            let got = quick.apply(x);
            assert!(
                (f64::from(got) - want).abs() <= 1e-5 * want.abs() + 1e-30,
                "{x}: {got}"
            );
        }
    }

    #[test]
    fn bias_is_added_before_the_activation() {
        let mut v = [-1.0f32, 0.5, 2.0];
        Activation::Relu.add_bias_and_apply(&mut v, 0.75);
        assert_eq!(v, [0.0, 1.25, 2.75]);
    }

    #[test]
    fn residual_and_bias_are_added_before_the_activation() {
        let acts = [
            Activation::None,
            Activation::Relu,
            Activation::Clip { min: 0.0, max: 1.0 },
            Activation::Tanh,
            Activation::HardSwish,
            Activation::QuickGelu { alpha: 1.702 },
        ];
        for act in acts {
            let mut v = [-1.0f32, 0.5, 2.0, -0.25];
            let r = [0.5f32, -1.0, 0.25, 0.0];
            let expected: Vec<f32> = v
                .iter()
                .zip(&r)
                .map(|(&x, &y)| act.apply(x + y + 0.125))
                .collect();
            act.add_residual_bias_and_apply(&mut v, Some(&r), 0.125);
            // Vectorized math may round the last bit differently.
            for (got, want) in v.iter().zip(&expected) {
                assert!((got - want).abs() <= 1e-6, "{act:?}: {got} vs {want}");
            }
        }
    }
}
