//! The kernel behind com.microsoft's Gelu family: `y = f(x + bias)`, with an optional bias
//! vector broadcast along the last axis, for the GELU forms onnxruntime fuses (exact erf, tanh
//! approximation, sigmoid approximation). The form is matched outside the loop so each arm
//! compiles to one vectorized loop (AVX-512 / AVX2 chosen at run time).

use std::marker::PhantomData;

use strata_core::Device;

use crate::cpu_float_kernel;
use crate::kernels::simd::multiversion;
use crate::kernels::Activation;
use crate::ops::math::unary::sigmoid;
use crate::support::inputs::{optional, required};
use crate::support::numeric::{Real, WideFloat};
use crate::{
    Dim, Fact, FusableActivation, Kernel, KernelIo, OpCapabilities, OpError, OpResult, Operator,
};

/// Which GELU the operator computes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum GeluForm {
    /// `0.5 x (1 + erf(x / √2))`.
    Erf,
    /// `0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))`.
    Tanh,
    /// `x · sigmoid(alpha x)`.
    Sigmoid { alpha: f32 },
}

/// Whether the operator takes a bias as input 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BiasInput {
    None,
    Optional,
    Required,
}

/// One operator of the family: its name, its form and its bias rule.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BiasedActivation {
    pub op: &'static str,
    pub form: GeluForm,
    pub bias: BiasInput,
}

impl BiasedActivation {
    pub(crate) fn boxed(self) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(self))
    }
}

/// Without a bias, every form is an activation a producer's epilogue applies.
impl FusableActivation for BiasedActivation {
    fn activation(&self, inputs: &[&Fact]) -> Option<Activation> {
        let x = inputs.first()?;
        let bias = inputs.get(1).is_some_and(|b| b.is_defined());
        if !x.dtype.is_float() || bias {
            return None;
        }
        match self.form {
            GeluForm::Erf => Some(Activation::Gelu),
            GeluForm::Tanh => Some(Activation::GeluTanh),
            GeluForm::Sigmoid { alpha } => Some(Activation::QuickGelu { alpha }),
        }
    }
}

impl Operator for BiasedActivation {
    fn op_type(&self) -> &str {
        self.op
    }

    fn capabilities(&self) -> OpCapabilities<'_> {
        OpCapabilities {
            activation: Some(self as &dyn FusableActivation),
            ..OpCapabilities::default()
        }
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let op = self.op;
        let x = required(op, inputs, 0)?;
        if !x.dtype.is_float() || x.dtype.is_quantized() {
            return Err(OpError::DType {
                op: op.into(),
                index: 0,
                expected: "a float type".into(),
                actual: x.dtype,
            });
        }
        let bias = match self.bias {
            BiasInput::None => {
                if optional(inputs, 1).is_some() {
                    return Err(OpError::InputCount {
                        op: op.into(),
                        expected: "1".into(),
                        actual: inputs.len(),
                    });
                }
                None
            }
            BiasInput::Optional => optional(inputs, 1),
            BiasInput::Required => Some(required(op, inputs, 1)?),
        };
        if let Some(b) = bias {
            if b.dtype != x.dtype {
                return Err(OpError::DType {
                    op: op.into(),
                    index: 1,
                    expected: x.dtype.to_string(),
                    actual: b.dtype,
                });
            }
            let last = x.dims.last().cloned().unwrap_or(Dim::Known(1));
            let fits = match b.dims.as_slice() {
                [d] => d.known().is_none() || last.known().is_none() || *d == last,
                _ => false,
            };
            if !fits {
                return Err(OpError::shape(
                    op,
                    format!(
                        "bias must be 1-D of the last input dim {last:?}, got {:?}",
                        b.dims
                    ),
                ));
            }
        }
        Ok(vec![Fact::new(x.dtype, x.dims.clone())])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = required(self.op, inputs, 0)?.dtype;
        cpu_float_kernel!(self.op, dtype, device, T => BiasedActivationKernel::<T> {
            op: *self,
            _t: PhantomData,
        })
    }
}

#[derive(Debug)]
struct BiasedActivationKernel<T> {
    op: BiasedActivation,
    _t: PhantomData<T>,
}

impl<T: Real> Kernel for BiasedActivationKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let op = self.op.op;
        let not_contiguous = |what: &str| OpError::kernel(op, format!("{what} is not contiguous"));
        let x_t = io.input(0);
        let xr = x_t.read::<T>()?;
        let x = xr.as_slice().ok_or_else(|| not_contiguous("X"))?;
        let bias_t = io.input(1);
        let br = if bias_t.is_defined() && self.op.bias != BiasInput::None {
            Some(bias_t.read::<T>()?)
        } else {
            None
        };
        let bias: &[T] = match &br {
            Some(r) => r.as_slice().ok_or_else(|| not_contiguous("bias"))?,
            None => &[],
        };
        let last = x_t.dims().last().copied().unwrap_or(1);
        if !bias.is_empty() && bias.len() != last {
            return Err(OpError::kernel(
                op,
                format!(
                    "bias has {} elements, the last input dim is {last}",
                    bias.len()
                ),
            ));
        }
        let mut yw = io.output(0).write::<T>()?;
        let y = yw.as_mut_slice().ok_or_else(|| not_contiguous("Y"))?;
        if y.len() != x.len() {
            return Err(OpError::kernel(
                op,
                format!("output has {} elements for {} inputs", y.len(), x.len()),
            ));
        }
        // Rows of the bias's length (or runs of any length without a bias), several per task
        // over the intra-op pool: erf and tanh cost tens of cycles an element.
        let form = self.op.form;
        let row = if bias.is_empty() {
            UNBIASED_RUN
        } else {
            bias.len()
        };
        let rows = |i: usize, ys: &mut [T]| {
            let xs = &x[i * row..][..ys.len()];
            for (xs, ys) in xs.chunks(row).zip(ys.chunks_mut(row)) {
                apply(form, xs, bias, ys);
                fix_negative_tail(form, xs, bias, ys);
            }
        };
        if io.threads > 1 && y.len() >= 2 * PARALLEL_MIN_ELEMENTS {
            let per_task = PARALLEL_MIN_ELEMENTS.div_ceil(row);
            crate::parallel::for_each_chunk_mut(y, row * per_task, 1, |i, ys| {
                rows(i * per_task, ys)
            });
        } else {
            rows(0, y);
        }
        Ok(())
    }
}

/// Elements per task when the activation is spread over threads.
const PARALLEL_MIN_ELEMENTS: usize = 1 << 14;
/// Elements per step without a bias (which otherwise sets the row length).
const UNBIASED_RUN: usize = 4096;

/// `x` mapped by `f` after adding `bias` row by row (no bias when it is empty).
#[inline(always)]
fn map_rows<T: Real>(x: &[T], bias: &[T], y: &mut [T], f: impl Fn(T::Wide) -> T::Wide) {
    if bias.is_empty() {
        for (o, &v) in y.iter_mut().zip(x) {
            *o = T::narrow(f(v.widen()));
        }
        return;
    }
    for (xs, ys) in x
        .chunks_exact(bias.len())
        .zip(y.chunks_exact_mut(bias.len()))
    {
        for ((o, &v), &b) in ys.iter_mut().zip(xs).zip(bias) {
            *o = T::narrow(f(v.widen() + b.widen()));
        }
    }
}

/// Below this pre-activation the GELUs are `x` times a small difference `1 + erf` or `1 + tanh`
/// that the fast f32 functions give with a few 1e-7 of absolute error, percents of the result:
/// those elements (a fraction of a percent in practice) are recomputed in f64.
const TAIL: f64 = -3.0;

/// Lanes [`fix_negative_tail`] checks at once before looking at single elements.
const TAIL_LANES: usize = 16;

multiversion! {
    /// Recomputes the elements whose pre-activation is below [`TAIL`] in f64. `bias` (when not
    /// empty) is as long as `x`: one row. Runs of [`TAIL_LANES`] are checked with one vector
    /// compare each; only runs holding such an element are fixed element by element.
    fn fix_negative_tail<T: Real>(form: GeluForm, x: &[T], bias: &[T], y: &mut [T]) {
        if matches!(form, GeluForm::Sigmoid { .. }) {
            return;
        }
        let tail = <T::Wide as WideFloat>::lit(TAIL);
        let biased = !bias.is_empty();
        for (run, (xs, ys)) in x
            .chunks(TAIL_LANES)
            .zip(y.chunks_mut(TAIL_LANES))
            .enumerate()
        {
            let bs = if biased {
                &bias[run * TAIL_LANES..][..xs.len()]
            } else {
                &[]
            };
            let below = if biased {
                xs.iter()
                    .zip(bs)
                    .fold(false, |any, (&v, &b)| any | (v.widen() + b.widen() < tail))
            } else {
                xs.iter().fold(false, |any, &v| any | (v.widen() < tail))
            };
            if below {
                fix_run(form, xs, bs, ys);
            }
        }
    }
}

/// [`fix_negative_tail`] for one run, element by element.
fn fix_run<T: Real>(form: GeluForm, x: &[T], bias: &[T], y: &mut [T]) {
    let lit = <T::Wide as WideFloat>::lit;
    let tail = lit(TAIL);
    let zero = lit(0.0);
    let biases = bias
        .iter()
        .map(|b| b.widen())
        .chain(std::iter::repeat(zero));
    for ((o, &v), b) in y.iter_mut().zip(x).zip(biases) {
        let v = v.widen() + b;
        // The common case (not in the tail, or NaN) costs one compare, no conversion.
        if v.partial_cmp(&tail) != Some(std::cmp::Ordering::Less) {
            continue;
        }
        let Some(v) = num_traits::ToPrimitive::to_f64(&v) else {
            continue;
        };
        let gate = match form {
            GeluForm::Erf => 1.0 + crate::support::erf::erf(v * std::f64::consts::FRAC_1_SQRT_2),
            _ => {
                let k = (2.0 / std::f64::consts::PI).sqrt();
                1.0 + (k * (v + 0.044715 * v * v * v)).tanh()
            }
        };
        *o = T::narrow(lit(0.5 * v * gate));
    }
}

multiversion! {
    /// `y = form(x + bias)`, compiled for the widest vectors this CPU has.
    pub(crate) fn apply<T: Real>(form: GeluForm, x: &[T], bias: &[T], y: &mut [T]) {
        let lit = <T::Wide as WideFloat>::lit;
        let (half, one) = (lit(0.5), lit(1.0));
        match form {
            GeluForm::Erf => {
                let r = lit(std::f64::consts::FRAC_1_SQRT_2);
                map_rows(x, bias, y, |v| half * v * (one + (v * r).error_function()))
            }
            GeluForm::Tanh => {
                let (k, c) = (lit((2.0 / std::f64::consts::PI).sqrt()), lit(0.044715));
                map_rows(x, bias, y, |v| half * v * (one + (k * (v + c * v * v * v)).tanh_v()))
            }
            GeluForm::Sigmoid { alpha } => {
                let a = lit(f64::from(alpha));
                map_rows(x, bias, y, |v| v * sigmoid(a * v))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(form: GeluForm, x: &[f32], bias: &[f32]) -> Vec<f32> {
        let mut y = vec![f32::NAN; x.len()];
        let row = if bias.is_empty() { x.len() } else { bias.len() };
        for (xs, ys) in x.chunks(row).zip(y.chunks_mut(row)) {
            apply(form, xs, bias, ys);
            fix_negative_tail(form, xs, bias, ys);
        }
        y
    }

    fn exact_erf_gelu(v: f64) -> f64 {
        0.5 * v * (1.0 + crate::support::erf::erf(v * std::f64::consts::FRAC_1_SQRT_2))
    }

    #[test]
    fn gelu_forms_match_f64_references_including_the_negative_tail() {
        let x: Vec<f32> = (-60..=40).map(|i| i as f32 * 0.1).collect();
        let y = run(GeluForm::Erf, &x, &[]);
        for (&v, &g) in x.iter().zip(&y) {
            let want = exact_erf_gelu(f64::from(v));
            assert!(
                (f64::from(g) - want).abs() <= 1e-4 * want.abs() + 1e-12,
                "gelu({v}) = {g}, want {want}"
            );
        }
        let k = (2.0 / std::f64::consts::PI).sqrt();
        let y = run(GeluForm::Tanh, &x, &[]);
        for (&v, &g) in x.iter().zip(&y) {
            let v = f64::from(v);
            let want = 0.5 * v * (1.0 + (k * (v + 0.044715 * v * v * v)).tanh());
            assert!(
                (f64::from(g) - want).abs() <= 1e-4 * want.abs() + 1e-12,
                "fast_gelu({v})"
            );
        }
        let y = run(GeluForm::Sigmoid { alpha: 1.702 }, &[0.0, 1.0], &[]);
        assert_eq!(y[0], 0.0);
        assert!((y[1] - 1.0 / (1.0 + (-1.702f32).exp())).abs() < 1e-6);
    }

    #[test]
    fn bias_is_added_per_column_before_the_activation() {
        let x = [0.0f32, 0.0, -5.0, 1.0];
        let y = run(GeluForm::Erf, &x, &[1.0, -1.0]);
        let want = [
            exact_erf_gelu(1.0),
            exact_erf_gelu(-1.0),
            exact_erf_gelu(-4.0),
            exact_erf_gelu(0.0),
        ];
        for (g, w) in y.iter().zip(want) {
            assert!(
                (f64::from(*g) - w).abs() <= 1e-6 * w.abs() + 1e-12,
                "{g} vs {w}"
            );
        }
    }
}
