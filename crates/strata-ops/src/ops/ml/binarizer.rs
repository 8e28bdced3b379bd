//! Binarizer (ai.onnx.ml opset 1): `y = 1 if x > threshold else 0`, in the input's dtype (f32,
//! f64, int32, int64). The comparison is made in f64, as numpy compares an integer array with a
//! float threshold; NaN is not greater than anything and maps to 0.

use strata_core::{DType, Device, Element, Tensor};

use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_plain;
use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "Binarizer";

#[derive(Debug, Clone, Copy)]
pub struct Binarizer {
    threshold: f64,
}

impl Binarizer {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(Binarizer {
            threshold: f64::from(ctx.attrs.float_or("threshold", 0.0)?),
        }))
    }
}

fn check_dtype(dtype: DType) -> OpResult<()> {
    match dtype {
        DType::F32 | DType::F64 | DType::I32 | DType::I64 => Ok(()),
        _ => Err(OpError::DType {
            op: OP.into(),
            index: 0,
            expected: "float, double, int32 or int64".into(),
            actual: dtype,
        }),
    }
}

impl Operator for Binarizer {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(OP, inputs, 0)?;
        check_dtype(x.dtype)?;
        Ok(vec![Fact::new(x.dtype, x.dims.clone())])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let x = required(OP, inputs, 0)?;
        check_dtype(x.dtype)?;
        cpu_plain(OP, x.dtype, device)?;
        Ok(Box::new(*self))
    }
}

/// The element types Binarizer takes, with the f64 value they compare by and their 0 and 1.
trait Binary: Element + Copy {
    const ZERO: Self;
    const ONE: Self;
    fn as_f64(self) -> f64;
}

macro_rules! binary {
    ($($t:ty: $zero:expr, $one:expr);*) => {$(
        impl Binary for $t {
            const ZERO: Self = $zero;
            const ONE: Self = $one;
            #[inline(always)]
            #[allow(clippy::unnecessary_cast)]
            fn as_f64(self) -> f64 {
                self as f64
            }
        }
    )*};
}

binary!(f32: 0.0, 1.0; f64: 0.0, 1.0; i32: 0, 1; i64: 0, 1);

fn binarize<T: Binary>(threshold: f64, x: &Tensor, y: &Tensor) -> OpResult<()> {
    let r = x.read::<T>()?;
    let src = r
        .as_slice()
        .ok_or_else(|| OpError::kernel(OP, "input is not contiguous"))?;
    let mut w = y.write::<T>()?;
    let dst = w
        .as_mut_slice()
        .ok_or_else(|| OpError::kernel(OP, "output is not contiguous"))?;
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = if s.as_f64() > threshold {
            T::ONE
        } else {
            T::ZERO
        };
    }
    Ok(())
}

impl Kernel for Binarizer {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x, y) = (io.input(0), io.output(0));
        if x.dims() != y.dims() || x.dtype() != y.dtype() {
            return Err(OpError::kernel(
                OP,
                format!(
                    "output {} {:?} does not match input {} {:?}",
                    y.dtype(),
                    y.dims(),
                    x.dtype(),
                    x.dims()
                ),
            ));
        }
        match x.dtype() {
            DType::F32 => binarize::<f32>(self.threshold, x, y),
            DType::F64 => binarize::<f64>(self.threshold, x, y),
            DType::I32 => binarize::<i32>(self.threshold, x, y),
            DType::I64 => binarize::<i64>(self.threshold, x, y),
            other => check_dtype(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(threshold: f32, x: &Tensor) -> OpResult<Tensor> {
        let attrs = crate::Attributes::new(OP).with("threshold", crate::Attr::Float(threshold));
        let op = Binarizer::build(&OpContext {
            op_type: OP,
            domain: "ai.onnx.ml",
            opset: 1,
            attrs: &attrs,
            num_inputs: 1,
            num_outputs: 1,
        })?;
        let fx = Fact::constant(x.clone());
        let fy = op.infer(&[&fx])?.remove(0);
        let y = Tensor::zeros(&fy.concrete().unwrap(), fy.dtype)?;
        op.kernel(&[&fx], &[&fy], Device::Cpu)?.run(&KernelIo {
            inputs: &[x],
            outputs: &[&y],
            scratch: None,
            in_place: None,
            threads: 1,
        })?;
        Ok(y)
    }

    #[test]
    fn strictly_greater_than_threshold_is_one() {
        let x = Tensor::from_slice(&[-1.0f32, 0.5, 0.5001, 2.0, f32::NAN], &[5]).unwrap();
        let y = run(0.5, &x).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), vec![0.0, 0.0, 1.0, 1.0, 0.0]);
        let x = Tensor::from_slice(&[-3i64, 1, 2, 7], &[2, 2]).unwrap();
        let y = run(1.5, &x).unwrap();
        assert_eq!(y.dims(), &[2, 2]);
        assert_eq!(y.to_vec::<i64>().unwrap(), vec![0, 0, 1, 1]);
        let x = Tensor::from_slice(&[0.0f64, 1e-300], &[2]).unwrap();
        assert_eq!(
            run(0.0, &x).unwrap().to_vec::<f64>().unwrap(),
            vec![0.0, 1.0]
        );
    }

    #[test]
    fn other_dtypes_are_rejected() {
        let x = Tensor::from_slice(&[1u8, 2], &[2]).unwrap();
        assert!(matches!(run(0.0, &x).unwrap_err(), OpError::DType { .. }));
    }
}
