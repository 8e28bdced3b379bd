//! Variadic element-wise reductions over inputs: Max, Min, Sum, Mean (any number of inputs,
//! numpy broadcasting; before opset 8 shapes had to match, which broadcasting also accepts).
//! The output is filled from input 0, then each further input is folded in with one loop.

use std::fmt;
use std::marker::PhantomData;

use strata_core::{DType, Device, Element};

use crate::support::broadcast::{expanded, zip1, zip1_assign, Walk};
use crate::support::numeric::{Arith, Real, WideFloat};
use crate::{
    broadcast_dims, dispatch_arith, dispatch_float, Fact, Kernel, KernelIo, OpContext, OpError,
    OpResult, Operator,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VariadicOp {
    Max,
    Min,
    Sum,
    Mean,
}

#[derive(Debug)]
pub struct Variadic {
    op: VariadicOp,
}

impl VariadicOp {
    fn name(self) -> &'static str {
        match self {
            VariadicOp::Max => "Max",
            VariadicOp::Min => "Min",
            VariadicOp::Sum => "Sum",
            VariadicOp::Mean => "Mean",
        }
    }

    pub fn build(op: VariadicOp, _ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(Variadic { op }))
    }
}

impl Variadic {
    fn check(&self, inputs: &[&Fact]) -> OpResult<DType> {
        let name = self.op.name();
        let first =
            inputs
                .first()
                .filter(|f| f.is_defined())
                .ok_or_else(|| OpError::InputCount {
                    op: name.into(),
                    expected: "at least 1".into(),
                    actual: inputs.len(),
                })?;
        for (index, f) in inputs.iter().enumerate() {
            if !f.is_defined() {
                return Err(OpError::MissingInput {
                    op: name.into(),
                    index,
                });
            }
            if f.dtype != first.dtype {
                return Err(OpError::DType {
                    op: name.into(),
                    index,
                    expected: first.dtype.to_string(),
                    actual: f.dtype,
                });
            }
        }
        Ok(first.dtype)
    }
}

impl Operator for Variadic {
    fn op_type(&self) -> &str {
        self.op.name()
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let dtype = self.check(inputs)?;
        let mut dims = inputs[0].dims.clone();
        for f in &inputs[1..] {
            dims = broadcast_dims(self.op.name(), &dims, &f.dims)?;
        }
        Ok(vec![Fact::new(dtype, dims)])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = self.check(inputs)?;
        let name = self.op.name();
        let n = inputs.len();
        let kernel = if device != Device::Cpu {
            None
        } else {
            match self.op {
                VariadicOp::Max => {
                    dispatch_arith!(dtype, T => Some(fold::<T, _, _>(name, |x: T, y: T| x.max_nan(y), None::<fn(T) -> T>)), _ => None)
                }
                VariadicOp::Min => {
                    dispatch_arith!(dtype, T => Some(fold::<T, _, _>(name, |x: T, y: T| x.min_nan(y), None::<fn(T) -> T>)), _ => None)
                }
                VariadicOp::Sum => {
                    dispatch_arith!(dtype, T => Some(fold::<T, _, _>(name, |x: T, y: T| x.add(y), None::<fn(T) -> T>)), _ => None)
                }
                VariadicOp::Mean => dispatch_float!(dtype, T => {
                    let count = <T as Real>::Wide::lit(n as f64);
                    let finish = move |x: T| T::narrow(x.widen() / count);
                    Some(fold::<T, _, _>(name, |x: T, y: T| x.add(y), Some(finish)))
                }, _ => None),
            }
        };
        kernel.ok_or_else(|| OpError::no_kernel(name, dtype, device))
    }

    fn in_place_input(&self) -> Option<usize> {
        Some(0)
    }
}

/// Folds every input into the output with `combine`, then applies `finish` (Mean's scale).
struct Fold<T, F, G> {
    name: &'static str,
    combine: F,
    finish: Option<G>,
    _t: PhantomData<fn(T) -> T>,
}

impl<T, F, G> fmt::Debug for Fold<T, F, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fold({})", self.name)
    }
}

fn fold<T, F, G>(name: &'static str, combine: F, finish: Option<G>) -> Box<dyn Kernel>
where
    T: Element,
    F: Fn(T, T) -> T + Send + Sync + 'static,
    G: Fn(T) -> T + Send + Sync + 'static,
{
    Box::new(Fold {
        name,
        combine,
        finish,
        _t: PhantomData,
    })
}

impl<T, F, G> Kernel for Fold<T, F, G>
where
    T: Element,
    F: Fn(T, T) -> T + Send + Sync,
    G: Fn(T) -> T + Send + Sync,
{
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let name = self.name;
        let out = io.output(0);
        let dims = out.dims();
        let mut w = out.write::<T>()?;
        let data = w
            .as_mut_slice()
            .ok_or_else(|| OpError::kernel(name, "output is not contiguous"))?;
        if io.in_place == Some(0) {
            // Input 0 already sits in the output.
            if io.input(0).numel() != data.len() {
                return Err(OpError::kernel(name, "in place over a smaller input 0"));
            }
        } else {
            let first = io.input(0);
            let walk = Walk::new(name, dims, [&expanded(name, first, dims)?])?;
            zip1(&walk, first.read::<T>()?.storage_data(), data, |x| x);
        }
        for input in io.inputs.iter().skip(1) {
            let walk = Walk::new(name, dims, [&expanded(name, input, dims)?])?;
            zip1_assign(
                &walk,
                data,
                input.read::<T>()?.storage_data(),
                &self.combine,
            );
        }
        if let Some(finish) = &self.finish {
            data.iter_mut().for_each(|v| *v = finish(*v));
        }
        Ok(())
    }
}

/// The table of this family's variadic operators.
pub const OPS: &[(&str, crate::Constructor)] = &[
    ("Max", |c| VariadicOp::build(VariadicOp::Max, c)),
    ("Min", |c| VariadicOp::build(VariadicOp::Min, c)),
    ("Sum", |c| VariadicOp::build(VariadicOp::Sum, c)),
    ("Mean", |c| VariadicOp::build(VariadicOp::Mean, c)),
];

#[cfg(test)]
mod tests {
    use crate::support::test_util::{run_op, run_op_in_place};
    use crate::OpError;
    use strata_core::Tensor;

    #[test]
    fn three_inputs_broadcast() {
        let a = Tensor::from_slice(&[1.0f32, 5.0, 3.0, 0.0], &[2, 2]).unwrap();
        let b = Tensor::from_slice(&[2.0f32, 2.0], &[2]).unwrap();
        let c = Tensor::from_slice(&[4.0f32], &[1]).unwrap();
        let inputs = [a, b, c];
        let max = run_op("Max", 13, &[], &inputs).unwrap();
        assert_eq!(max[0].to_vec::<f32>().unwrap(), [4.0, 5.0, 4.0, 4.0]);
        let min = run_op_in_place("Min", 13, &[], &inputs).unwrap();
        assert_eq!(min[0].to_vec::<f32>().unwrap(), [1.0, 2.0, 2.0, 0.0]);
        let sum = run_op("Sum", 13, &[], &inputs).unwrap();
        assert_eq!(sum[0].to_vec::<f32>().unwrap(), [7.0, 11.0, 9.0, 6.0]);
        let mean = run_op("Mean", 13, &[], &inputs).unwrap();
        assert_eq!(
            mean[0].to_vec::<f32>().unwrap(),
            [7.0 / 3.0, 11.0 / 3.0, 3.0, 2.0]
        );
    }

    #[test]
    fn single_input_and_ints() {
        let a = Tensor::from_slice(&[i64::MIN, 3], &[2]).unwrap();
        let y = run_op("Max", 13, &[], std::slice::from_ref(&a)).unwrap();
        assert_eq!(y[0].to_vec::<i64>().unwrap(), [i64::MIN, 3]);
        let b = Tensor::from_slice(&[0i64], &[]).unwrap();
        let y = run_op("Min", 13, &[], &[a, b]).unwrap();
        assert_eq!(y[0].to_vec::<i64>().unwrap(), [i64::MIN, 0]);
    }

    #[test]
    fn nan_propagates_and_errors() {
        let a = Tensor::from_slice(&[f64::NAN, 1.0], &[2]).unwrap();
        let b = Tensor::from_slice(&[0.0f64, 2.0], &[2]).unwrap();
        let y = run_op("Max", 13, &[], &[a.clone(), b]).unwrap();
        let v = y[0].to_vec::<f64>().unwrap();
        assert!(v[0].is_nan() && v[1] == 2.0);
        let err = run_op("Sum", 13, &[], &[]).unwrap_err();
        assert!(matches!(err, OpError::InputCount { .. }), "{err}");
        let i = Tensor::from_slice(&[1i32, 2], &[2]).unwrap();
        let err = run_op("Sum", 13, &[], &[a, i]).unwrap_err();
        assert!(matches!(err, OpError::DType { .. }), "{err}");
    }
}
