//! Clip: bounds from the `min`/`max` attributes before opset 11, from optional scalar inputs
//! after (read at run time, so they may be computed). Floats and, from opset 12, integers.
//! When min > max every element becomes max; NaN passes through.

use std::fmt;
use std::marker::PhantomData;

use num_traits::AsPrimitive;
use strata_core::{DType, Device, Element, Tensor};

use crate::kernels::Activation;
use crate::support::broadcast::{expanded, zip1, Walk};
use crate::{
    dispatch_arith, Fact, FusableActivation, Kernel, KernelIo, OpCapabilities, OpContext, OpError,
    OpResult, Operator,
};

#[derive(Debug)]
pub struct Clip {
    /// Opset < 11: the bounds as attributes (lowest/highest f32 when absent).
    attr_bounds: Option<(f32, f32)>,
}

impl Clip {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let attr_bounds = if ctx.opset < 11 {
            Some((
                ctx.attrs.float_or("min", f32::MIN)?,
                ctx.attrs.float_or("max", f32::MAX)?,
            ))
        } else {
            None
        };
        Ok(Box::new(Clip { attr_bounds }))
    }

    fn check<'a>(&self, inputs: &[&'a Fact]) -> OpResult<&'a Fact> {
        let max_inputs = if self.attr_bounds.is_some() { 1 } else { 3 };
        let x = match inputs.first() {
            Some(x) if x.is_defined() && inputs.len() <= max_inputs => *x,
            _ => {
                return Err(OpError::InputCount {
                    op: "Clip".into(),
                    expected: format!("1 to {max_inputs}"),
                    actual: inputs.len(),
                })
            }
        };
        for (index, bound) in inputs.iter().enumerate().skip(1) {
            if !bound.is_defined() {
                continue;
            }
            if bound.dtype != x.dtype {
                return Err(OpError::DType {
                    op: "Clip".into(),
                    index,
                    expected: x.dtype.to_string(),
                    actual: bound.dtype,
                });
            }
            if bound.numel().is_some_and(|n| n != 1) {
                return Err(OpError::shape(
                    "Clip",
                    format!("bound {index} must be a scalar, got dims {:?}", bound.dims),
                ));
            }
        }
        Ok(x)
    }
}

impl Operator for Clip {
    fn op_type(&self) -> &str {
        "Clip"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = self.check(inputs)?;
        Ok(vec![Fact::new(x.dtype, x.dims.clone())])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = self.check(inputs)?.dtype;
        let attr_bounds = self.attr_bounds;
        let kernel: Option<Box<dyn Kernel>> = match (device, attr_bounds) {
            (Device::Cpu, Some(_)) if !dtype.is_float() => None,
            (Device::Cpu, _) => dispatch_arith!(dtype, T => Some(Box::new(ClipKernel::<T> {
                attr_bounds,
                _t: PhantomData,
            })), _ => None),
            _ => None,
        };
        kernel.ok_or(OpError::no_kernel("Clip", dtype, device))
    }

    fn in_place_input(&self) -> Option<usize> {
        Some(0)
    }

    fn capabilities(&self) -> OpCapabilities<'_> {
        OpCapabilities {
            activation: Some(self),
            ..OpCapabilities::default()
        }
    }
}

/// An f32 Clip whose bounds are attributes or constant inputs is an epilogue activation.
impl FusableActivation for Clip {
    fn activation(&self, inputs: &[&Fact]) -> Option<Activation> {
        if inputs.first()?.dtype != DType::F32 {
            return None;
        }
        let (min, max) = match self.attr_bounds {
            Some(bounds) => bounds,
            None => {
                let bound = |index: usize, unbounded: f32| -> Option<f32> {
                    match inputs.get(index) {
                        Some(fact) if fact.is_defined() => {
                            let value = fact.value.as_ref()?;
                            match value.to_vec::<f32>().ok()?.as_slice() {
                                [v] => Some(*v),
                                _ => None,
                            }
                        }
                        _ => Some(unbounded),
                    }
                };
                (bound(1, f32::NEG_INFINITY)?, bound(2, f32::INFINITY)?)
            }
        };
        Some(Activation::Clip { min, max })
    }
}

struct ClipKernel<T> {
    attr_bounds: Option<(f32, f32)>,
    _t: PhantomData<fn(T) -> T>,
}

impl<T> fmt::Debug for ClipKernel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClipKernel({:?})", self.attr_bounds)
    }
}

/// The value of an optional scalar bound input, or `default` when it is absent.
fn scalar_or<T: Element>(t: &Tensor, default: T) -> OpResult<T> {
    if !t.is_defined() {
        return Ok(default);
    }
    if t.numel() != 1 {
        return Err(OpError::shape(
            "Clip",
            format!("bounds must be scalars, got dims {:?}", t.dims()),
        ));
    }
    let r = t.read::<T>()?;
    Ok(r.storage_data()[t.layout().offset()])
}

/// The bound an absent min or max stands for: infinities for floats, the range for integers.
trait Unbounded: Copy {
    const LOWEST: Self;
    const HIGHEST: Self;
}

macro_rules! unbounded {
    ($($t:ty: $lo:expr, $hi:expr);* $(;)?) => {$(
        impl Unbounded for $t {
            const LOWEST: Self = $lo;
            const HIGHEST: Self = $hi;
        }
    )*};
}

unbounded! {
    f32: f32::NEG_INFINITY, f32::INFINITY;
    f64: f64::NEG_INFINITY, f64::INFINITY;
    strata_core::f16: strata_core::f16::NEG_INFINITY, strata_core::f16::INFINITY;
    strata_core::bf16: strata_core::bf16::NEG_INFINITY, strata_core::bf16::INFINITY;
    i8: i8::MIN, i8::MAX;
    i16: i16::MIN, i16::MAX;
    i32: i32::MIN, i32::MAX;
    i64: i64::MIN, i64::MAX;
    u8: u8::MIN, u8::MAX;
    u16: u16::MIN, u16::MAX;
    u32: u32::MIN, u32::MAX;
    u64: u64::MIN, u64::MAX;
}

#[inline(always)]
fn clip<T: PartialOrd>(x: T, lo: T, hi: T) -> T {
    let y = if x < lo { lo } else { x };
    if y > hi {
        hi
    } else {
        y
    }
}

impl<T> Kernel for ClipKernel<T>
where
    T: Element + PartialOrd + Unbounded,
    f32: AsPrimitive<T>,
{
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (lo, hi) = match self.attr_bounds {
            Some((lo, hi)) => (lo.as_(), hi.as_()),
            None => (
                scalar_or(io.input(1), T::LOWEST)?,
                scalar_or(io.input(2), T::HIGHEST)?,
            ),
        };
        let out = io.output(0);
        let mut w = out.write::<T>()?;
        let data = w
            .as_mut_slice()
            .ok_or_else(|| OpError::kernel("Clip", "output is not contiguous"))?;
        if io.in_place == Some(0) {
            data.iter_mut().for_each(|v| *v = clip(*v, lo, hi));
            return Ok(());
        }
        let x = io.input(0);
        let walk = Walk::new("Clip", out.dims(), [&expanded("Clip", x, out.dims())?])?;
        zip1(&walk, x.read::<T>()?.storage_data(), data, |v| {
            clip(v, lo, hi)
        });
        Ok(())
    }
}

/// The table of this family's clipping operator.
pub const OPS: &[(&str, crate::Constructor)] = &[("Clip", Clip::build)];

#[cfg(test)]
mod tests {
    use crate::support::test_util::{run_op, run_op_in_place};
    use crate::Attr;
    use strata_core::Tensor;

    #[test]
    fn bounds_from_inputs_and_attributes() {
        let x = Tensor::from_slice(&[-3.0f32, 0.5, 4.0, f32::NAN], &[4]).unwrap();
        let lo = Tensor::from_slice(&[-1.0f32], &[]).unwrap();
        let hi = Tensor::from_slice(&[1.0f32], &[]).unwrap();
        let y = run_op("Clip", 13, &[], &[x.clone(), lo.clone(), hi]).unwrap();
        let v = y[0].to_vec::<f32>().unwrap();
        assert_eq!(&v[..3], &[-1.0, 0.5, 1.0]);
        assert!(v[3].is_nan());
        // Only min given (max omitted).
        let y = run_op_in_place("Clip", 13, &[], &[x.clone(), lo]).unwrap();
        assert_eq!(&y[0].to_vec::<f32>().unwrap()[..3], &[-1.0, 0.5, 4.0]);
        let attrs = [("min", Attr::Float(0.0)), ("max", Attr::Float(2.0))];
        let y = run_op("Clip", 6, &attrs, &[x]).unwrap();
        assert_eq!(&y[0].to_vec::<f32>().unwrap()[..3], &[0.0, 0.5, 2.0]);
    }

    #[test]
    fn integers_and_inverted_bounds() {
        let x = Tensor::from_slice(&[i8::MIN, 0, i8::MAX], &[3]).unwrap();
        let lo = Tensor::from_slice(&[5i8], &[]).unwrap();
        let hi = Tensor::from_slice(&[2i8], &[]).unwrap();
        let y = run_op("Clip", 13, &[], &[x, lo, hi]).unwrap();
        assert_eq!(y[0].to_vec::<i8>().unwrap(), [2, 2, 2]);
    }
}
