//! Element-wise unary math and activations on floating-point tensors (Relu also on signed ints).

use std::marker::PhantomData;

use num_traits::Float;
use strata_core::{bf16, f16, DType, Device, Element};

use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnaryOp {
    Relu,
    Sigmoid,
    Tanh,
    Neg,
    Abs,
    Exp,
    Log,
    Sqrt,
    Reciprocal,
    Floor,
    Ceil,
}

impl UnaryOp {
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Relu => "Relu",
            UnaryOp::Sigmoid => "Sigmoid",
            UnaryOp::Tanh => "Tanh",
            UnaryOp::Neg => "Neg",
            UnaryOp::Abs => "Abs",
            UnaryOp::Exp => "Exp",
            UnaryOp::Log => "Log",
            UnaryOp::Sqrt => "Sqrt",
            UnaryOp::Reciprocal => "Reciprocal",
            UnaryOp::Floor => "Floor",
            UnaryOp::Ceil => "Ceil",
        }
    }

    /// Applies the op to a whole slice (one `match` per call, so each arm's loop vectorizes).
    #[inline]
    pub fn apply_float<T: Float>(self, data: &mut [T], src: Option<&[T]>) {
        macro_rules! map {
            ($f:expr) => {{
                let f = $f;
                match src {
                    Some(src) => data.iter_mut().zip(src).for_each(|(o, &x)| *o = f(x)),
                    None => data.iter_mut().for_each(|o| *o = f(*o)),
                }
            }};
        }
        let one = T::one();
        match self {
            UnaryOp::Relu => map!(|x: T| if x > T::zero() { x } else { T::zero() }),
            UnaryOp::Sigmoid => map!(|x: T| one / (one + (-x).exp())),
            UnaryOp::Tanh => map!(|x: T| x.tanh()),
            UnaryOp::Neg => map!(|x: T| -x),
            UnaryOp::Abs => map!(|x: T| x.abs()),
            UnaryOp::Exp => map!(|x: T| x.exp()),
            UnaryOp::Log => map!(|x: T| x.ln()),
            UnaryOp::Sqrt => map!(|x: T| x.sqrt()),
            UnaryOp::Reciprocal => map!(|x: T| one / x),
            UnaryOp::Floor => map!(|x: T| x.floor()),
            UnaryOp::Ceil => map!(|x: T| x.ceil()),
        }
    }
}

#[derive(Debug)]
pub struct Unary {
    op: UnaryOp,
}

impl Unary {
    pub fn build(op: UnaryOp, _ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(Unary { op }))
    }
}

impl Operator for Unary {
    fn op_type(&self) -> &str {
        self.op.name()
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        match inputs {
            [x] if x.is_defined() => Ok(vec![Fact::new(x.dtype, x.dims.clone())]),
            _ => Err(OpError::InputCount { op: self.op.name().into(), expected: "1".into(), actual: inputs.len() }),
        }
    }

    fn kernel(&self, inputs: &[&Fact], _outputs: &[&Fact], device: Device) -> OpResult<Box<dyn Kernel>> {
        let dtype = inputs[0].dtype;
        let op = self.op;
        let no_kernel = || OpError::NoKernel { op: op.name().into(), dtype, device };
        if device != Device::Cpu {
            return Err(no_kernel());
        }
        Ok(match dtype {
            DType::F32 => Box::new(FloatKernel::<f32>::new(op)),
            DType::F64 => Box::new(FloatKernel::<f64>::new(op)),
            DType::F16 => Box::new(FloatKernel::<f16>::new(op)),
            DType::BF16 => Box::new(FloatKernel::<bf16>::new(op)),
            DType::I8 if matches!(op, UnaryOp::Relu | UnaryOp::Neg | UnaryOp::Abs) => Box::new(IntKernel::<i8>::new(op)),
            DType::I16 if matches!(op, UnaryOp::Relu | UnaryOp::Neg | UnaryOp::Abs) => Box::new(IntKernel::<i16>::new(op)),
            DType::I32 if matches!(op, UnaryOp::Relu | UnaryOp::Neg | UnaryOp::Abs) => Box::new(IntKernel::<i32>::new(op)),
            DType::I64 if matches!(op, UnaryOp::Relu | UnaryOp::Neg | UnaryOp::Abs) => Box::new(IntKernel::<i64>::new(op)),
            _ => return Err(no_kernel()),
        })
    }

    fn in_place_input(&self) -> Option<usize> {
        Some(0)
    }
}

#[derive(Debug)]
struct FloatKernel<T> {
    op: UnaryOp,
    _t: PhantomData<T>,
}

impl<T> FloatKernel<T> {
    fn new(op: UnaryOp) -> Self {
        FloatKernel { op, _t: PhantomData }
    }
}

impl<T: Element + Float> Kernel for FloatKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let mut w = io.output(0).write::<T>()?;
        let out = w.as_mut_slice().ok_or_else(|| OpError::kernel(self.op.name(), "output is not contiguous"))?;
        if io.in_place == Some(0) {
            self.op.apply_float(out, None);
            return Ok(());
        }
        let r = io.input(0).read::<T>()?;
        let src = r.as_slice().ok_or_else(|| OpError::kernel(self.op.name(), "input is not contiguous"))?;
        self.op.apply_float(out, Some(src));
        Ok(())
    }
}

#[derive(Debug)]
struct IntKernel<T> {
    op: UnaryOp,
    _t: PhantomData<T>,
}

impl<T> IntKernel<T> {
    fn new(op: UnaryOp) -> Self {
        IntKernel { op, _t: PhantomData }
    }
}

impl<T: Element + num_traits::PrimInt + num_traits::Signed + num_traits::WrappingNeg> Kernel for IntKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let op = self.op;
        let f = move |x: T| match op {
            UnaryOp::Relu => x.max(T::zero()),
            UnaryOp::Neg => x.wrapping_neg(),
            _ => {
                // Abs: wrapping, so MIN stays MIN as in two's complement hardware.
                if x < T::zero() {
                    x.wrapping_neg()
                } else {
                    x
                }
            }
        };
        let mut w = io.output(0).write::<T>()?;
        let out = w.as_mut_slice().ok_or_else(|| OpError::kernel(op.name(), "output is not contiguous"))?;
        if io.in_place == Some(0) {
            out.iter_mut().for_each(|o| *o = f(*o));
            return Ok(());
        }
        let r = io.input(0).read::<T>()?;
        let src = r.as_slice().ok_or_else(|| OpError::kernel(op.name(), "input is not contiguous"))?;
        out.iter_mut().zip(src).for_each(|(o, &x)| *o = f(x));
        Ok(())
    }
}
