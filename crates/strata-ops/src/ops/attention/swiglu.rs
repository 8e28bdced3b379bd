//! ONNX SwiGLU (opset 28): `Y = A * sigmoid(alpha * A) * B` element-wise, `alpha` defaulting
//! to 1. A and B must have identical shapes and dtypes (no broadcasting). f32, f64, f16, bf16;
//! the 16-bit types compute in f32 and round the gate, the Swish and the product to the input
//! type as the reference does.

use std::marker::PhantomData;

use strata_core::{DType, Device};

use crate::cpu_float_kernel;
use crate::support::inputs::required;
use crate::support::numeric::{Real, WideFloat};
use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "SwiGLU";

#[derive(Clone, Copy, Debug)]
pub struct SwiGlu {
    alpha: f32,
}

impl SwiGlu {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let alpha = ctx.attrs.float_or("alpha", 1.0)?;
        if !alpha.is_finite() {
            return Err(OpError::attribute(
                OP,
                "alpha",
                format!("must be finite, got {alpha}"),
            ));
        }
        Ok(Box::new(SwiGlu { alpha }))
    }
}

impl Operator for SwiGlu {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let (a, b) = (required(OP, inputs, 0)?, required(OP, inputs, 1)?);
        if !matches!(a.dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
            return Err(OpError::DType {
                op: OP.into(),
                index: 0,
                expected: "a float type".into(),
                actual: a.dtype,
            });
        }
        if b.dtype != a.dtype {
            return Err(OpError::DType {
                op: OP.into(),
                index: 1,
                expected: format!("{} like A", a.dtype),
                actual: b.dtype,
            });
        }
        let mismatch = a.rank() != b.rank()
            || a.dims
                .iter()
                .zip(&b.dims)
                .any(|(x, y)| match (x.known(), y.known()) {
                    (Some(x), Some(y)) => x != y,
                    _ => false,
                });
        if mismatch {
            return Err(OpError::shape(
                OP,
                format!("A {:?} and B {:?} must have the same shape", a.dims, b.dims),
            ));
        }
        Ok(vec![Fact::new(a.dtype, a.dims.clone())])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = required(OP, inputs, 0)?.dtype;
        cpu_float_kernel!(OP, dtype, device, T => SwiGluKernel::<T> {
            alpha: self.alpha,
            _t: PhantomData,
        })
    }
}

#[derive(Debug)]
struct SwiGluKernel<T> {
    alpha: f32,
    _t: PhantomData<T>,
}

/// One element: the gate is rounded to `T` before it multiplies, as are the Swish and the
/// result.
fn swiglu<T: Real>(a: T, b: T, alpha: T::Wide) -> T {
    let one = T::Wide::lit(1.0);
    let a = a.widen();
    let gate = T::narrow(one / (one + (-(alpha * a)).exp_v())).widen();
    let swish = T::narrow(a * gate).widen();
    T::narrow(swish * b.widen())
}

impl<T: Real> Kernel for SwiGluKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (a_t, b_t, y_t) = (io.input(0), io.input(1), io.output(0));
        if a_t.dims() != b_t.dims() || y_t.dims() != a_t.dims() {
            return Err(OpError::shape(
                OP,
                format!(
                    "A {:?}, B {:?} and Y {:?} must have the same shape",
                    a_t.dims(),
                    b_t.dims(),
                    y_t.dims()
                ),
            ));
        }
        let not_contiguous = || OpError::kernel(OP, "an input or output is not contiguous");
        let (a_r, b_r) = (a_t.read::<T>()?, b_t.read::<T>()?);
        let a = a_r.as_slice().ok_or_else(not_contiguous)?;
        let b = b_r.as_slice().ok_or_else(not_contiguous)?;
        let mut y_w = y_t.write::<T>()?;
        let y = y_w.as_mut_slice().ok_or_else(not_contiguous)?;
        let alpha = T::Wide::lit(f64::from(self.alpha));
        for ((y, &a), &b) in y.iter_mut().zip(a).zip(b) {
            *y = swiglu(a, b, alpha);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::test_util::OpRun;
    use crate::Attr;
    use strata_core::Tensor;

    fn run(alpha: Option<f32>, a: &Tensor, b: &Tensor) -> OpResult<Tensor> {
        let attrs: Vec<(&str, Attr)> = alpha
            .map(|a| ("alpha", Attr::Float(a)))
            .into_iter()
            .collect();
        let mut out = OpRun::new(OP, 28)
            .attrs(&attrs)
            .constant_inputs()
            .run(&[a.clone(), b.clone()])?;
        Ok(out.remove(0))
    }

    #[test]
    fn gates_b_with_the_swish_of_a() {
        let a = Tensor::from_slice(&[0.0f32, 2.0, -1.0], &[3]).unwrap();
        let b = Tensor::from_slice(&[5.0f32, 3.0, 2.0], &[3]).unwrap();
        let sig = |x: f32| 1.0 / (1.0 + (-x).exp());
        let y = run(None, &a, &b).unwrap().to_vec::<f32>().unwrap();
        let want = [0.0, 2.0 * sig(2.0) * 3.0, -sig(-1.0) * 2.0];
        for (y, w) in y.iter().zip(want) {
            assert!((y - w).abs() < 1e-6, "{y} vs {w}");
        }
        let y = run(Some(0.5), &a, &b).unwrap().to_vec::<f32>().unwrap();
        assert!((y[1] - 2.0 * sig(1.0) * 3.0).abs() < 1e-6);
    }

    #[test]
    fn mismatched_inputs_are_errors() {
        let a = Tensor::from_slice(&[0.0f32, 2.0], &[2]).unwrap();
        let b = Tensor::from_slice(&[5.0f32, 3.0, 2.0], &[3]).unwrap();
        assert!(run(None, &a, &b).is_err());
        let b64 = Tensor::from_slice(&[5.0f64, 3.0], &[2]).unwrap();
        assert!(run(None, &a, &b64).is_err());
        assert!(run(Some(f32::NAN), &a, &a).is_err());
    }
}
