//! Element-wise unary operators: the shared operator and kernel plumbing (one closure per
//! (op, dtype), chosen at plan time, mapped over whole slices), and the attribute-free math
//! ops. Floats compute in f32/f64 ([`Real`]); Relu, Neg, Abs and Sign also take integers.

use std::fmt;
use std::marker::PhantomData;

use num_traits::Float;
use strata_core::{bf16, f16, DType, Device, Element};

use crate::kernels::Activation;
use crate::support::broadcast::{zip1, Walk};
use crate::support::inputs::exact_inputs;
use crate::support::numeric::{Real, WideFloat};
use crate::{
    dispatch_signed, dispatch_unsigned, Fact, FusableActivation, Kernel, KernelIo, OpCapabilities,
    OpContext, OpError, OpResult, Operator,
};

/// What a same-shape unary operator supplies: its name, output dtype and kernels.
pub trait UnaryKind: Send + Sync + fmt::Debug + 'static {
    fn name(&self) -> &'static str;

    /// The output dtype for an input dtype; the input's own unless overridden.
    fn out_dtype(&self, input: DType) -> DType {
        input
    }

    /// Whether output 0 has input 0's dtype and may reuse its memory.
    fn in_place(&self) -> bool {
        true
    }

    /// The kernel for `dtype`, or `None` when the op does not take it.
    fn kernel(&self, dtype: DType) -> Option<Box<dyn Kernel>>;

    /// The epilogue activation this op is, if a producer's kernel can apply it instead.
    fn fused_activation(&self) -> Option<Activation> {
        None
    }
}

impl<K: UnaryKind> FusableActivation for Unary<K> {
    fn activation(&self, inputs: &[&Fact]) -> Option<Activation> {
        // Epilogues compute in the producer's float type.
        let x = inputs.first()?;
        x.dtype.is_float().then(|| self.0.fused_activation())?
    }
}

/// A one-input element-wise operator whose behaviour comes from `K`.
#[derive(Debug)]
pub struct Unary<K>(pub K);

impl<K: UnaryKind> Unary<K> {
    pub fn boxed(kind: K) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(Unary(kind)))
    }
}

impl<K: UnaryKind> Operator for Unary<K> {
    fn op_type(&self) -> &str {
        self.0.name()
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let [x] = exact_inputs(self.0.name(), inputs)?;
        Ok(vec![Fact::new(self.0.out_dtype(x.dtype), x.dims.clone())])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = exact_inputs::<1>(self.0.name(), inputs)?[0].dtype;
        let kernel = if device == Device::Cpu {
            self.0.kernel(dtype)
        } else {
            None
        };
        kernel.ok_or_else(|| OpError::no_kernel(self.0.name(), dtype, device))
    }

    fn in_place_input(&self) -> Option<usize> {
        self.0.in_place().then_some(0)
    }

    fn capabilities(&self) -> OpCapabilities<'_> {
        OpCapabilities {
            activation: self
                .0
                .fused_activation()
                .is_some()
                .then_some(self as &dyn FusableActivation),
            ..OpCapabilities::default()
        }
    }
}

/// `out = f(x)` element-wise; never in place (the output type may differ from the input's).
pub struct Map<S, D, F> {
    name: &'static str,
    f: F,
    _t: PhantomData<fn(S) -> D>,
}

/// `out = f(x)` element-wise, also in place over input 0.
pub struct MapInPlace<T, F> {
    name: &'static str,
    f: F,
    _t: PhantomData<fn(T) -> T>,
}

impl<S, D, F> fmt::Debug for Map<S, D, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Map({})", self.name)
    }
}

impl<T, F> fmt::Debug for MapInPlace<T, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MapInPlace({})", self.name)
    }
}

/// A kernel mapping `f` over the input into a (possibly differently typed) output.
pub fn map_kernel<S, D, F>(name: &'static str, f: F) -> Box<dyn Kernel>
where
    S: Element,
    D: Element,
    F: Fn(S) -> D + Send + Sync + 'static,
{
    Box::new(Map {
        name,
        f,
        _t: PhantomData,
    })
}

/// A kernel mapping `f` over the input, in place when the plan says so.
pub fn map_kernel_in_place<T, F>(name: &'static str, f: F) -> Box<dyn Kernel>
where
    T: Element,
    F: Fn(T) -> T + Send + Sync + 'static,
{
    Box::new(MapInPlace {
        name,
        f,
        _t: PhantomData,
    })
}

/// `out[i] = f(x[i])` over input 0 (any layout) into contiguous output 0.
fn map_into<S: Element, D: Element>(
    name: &str,
    io: &KernelIo<'_>,
    f: &impl Fn(S) -> D,
) -> OpResult<()> {
    let (x, out) = (io.input(0), io.output(0));
    let dims = out.dims();
    let lx = crate::support::broadcast::expanded(name, x, dims)?;
    let walk = Walk::new(name, dims, [&lx])?;
    let r = x.read::<S>()?;
    let mut w = out.write::<D>()?;
    let data = w
        .as_mut_slice()
        .ok_or_else(|| OpError::kernel(name, "output is not contiguous"))?;
    zip1(&walk, r.storage_data(), data, f);
    Ok(())
}

impl<S, D, F> Kernel for Map<S, D, F>
where
    S: Element,
    D: Element,
    F: Fn(S) -> D + Send + Sync,
{
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        if io.in_place.is_some() {
            return Err(OpError::kernel(self.name, "cannot run in place"));
        }
        map_into(self.name, io, &self.f)
    }
}

impl<T, F> Kernel for MapInPlace<T, F>
where
    T: Element,
    F: Fn(T) -> T + Send + Sync,
{
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        if io.in_place != Some(0) {
            return map_into(self.name, io, &self.f);
        }
        let mut w = io.output(0).write::<T>()?;
        let data = w
            .as_mut_slice()
            .ok_or_else(|| OpError::kernel(self.name, "output is not contiguous"))?;
        data.iter_mut().for_each(|v| *v = (self.f)(*v));
        Ok(())
    }
}

/// For each float dtype, an in-place kernel computing `$body` on `$x` in f32 (f16, bf16, f32)
/// or f64; `$w` names that type inside `$body` (e.g. `$w::lit(0.5)`). The 16-bit types share
/// one f32 slice function per op. Evaluates to `Option<Box<dyn Kernel>>`.
macro_rules! real_kernel {
    ($dtype:expr, $name:expr, $w:ident, |$x:ident| $body:expr) => {{
        #[allow(unused_imports)]
        use num_traits::{Float as _, One as _, Zero as _};
        #[allow(unused_imports)]
        use $crate::support::numeric::WideFloat as _;
        match $dtype {
            strata_core::DType::F32 => {
                #[allow(dead_code)]
                type $w = f32;
                Some($crate::ops::math::unary::map_kernel_in_place::<f32, _>(
                    $name,
                    move |$x: f32| $body,
                ))
            }
            strata_core::DType::F64 => {
                #[allow(dead_code)]
                type $w = f64;
                Some($crate::ops::math::unary::map_kernel_in_place::<f64, _>(
                    $name,
                    move |$x: f64| $body,
                ))
            }
            dtype @ (strata_core::DType::F16 | strata_core::DType::BF16) => {
                #[allow(dead_code)]
                type $w = f32;
                $crate::ops::math::unary::half_kernel(dtype, $name, move |$x: f32| $body)
            }
            _ => None,
        }
    }};
}
pub(crate) use real_kernel;

/// An f32 slice transform, called once per chunk.
type SliceFn = Box<dyn Fn(&mut [f32]) + Send + Sync>;

/// f16/bf16 elements converted to f32 in stack chunks, mapped by an f32 slice function (one
/// dynamic call per chunk, not per element), and rounded back.
pub struct HalfMap<T> {
    name: &'static str,
    f: SliceFn,
    _t: PhantomData<fn(T) -> T>,
}

impl<T> fmt::Debug for HalfMap<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HalfMap({})", self.name)
    }
}

/// The f16 or bf16 kernel for an f32 function; `None` for other dtypes.
pub fn half_kernel<F>(dtype: DType, name: &'static str, f: F) -> Option<Box<dyn Kernel>>
where
    F: Fn(f32) -> f32 + Send + Sync + 'static,
{
    let f: SliceFn = Box::new(move |s: &mut [f32]| {
        for v in s.iter_mut() {
            *v = f(*v);
        }
    });
    match dtype {
        DType::F16 => Some(Box::new(HalfMap::<f16> {
            name,
            f,
            _t: PhantomData,
        })),
        DType::BF16 => Some(Box::new(HalfMap::<bf16> {
            name,
            f,
            _t: PhantomData,
        })),
        _ => None,
    }
}

/// Elements per f32 chunk: small enough for the stack, large enough to amortize the call.
const HALF_CHUNK: usize = 256;

impl<T: Real<Wide = f32>> Kernel for HalfMap<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let mut w = io.output(0).write::<T>()?;
        let out = w
            .as_mut_slice()
            .ok_or_else(|| OpError::kernel(self.name, "output is not contiguous"))?;
        let mut buf = [0f32; HALF_CHUNK];
        let mut convert = |dst: &mut [T], src: Option<&[T]>| {
            let n = dst.len();
            let buf = &mut buf[..n];
            let src: &[T] = match src {
                Some(src) => src,
                None => dst,
            };
            for (b, &x) in buf.iter_mut().zip(src) {
                *b = x.widen();
            }
            (self.f)(buf);
            for (d, &b) in dst.iter_mut().zip(buf.iter()) {
                *d = T::narrow(b);
            }
        };
        if io.in_place == Some(0) {
            for chunk in out.chunks_mut(HALF_CHUNK) {
                convert(chunk, None);
            }
            return Ok(());
        }
        let r = io.input(0).read::<T>()?;
        let src = r
            .as_slice()
            .ok_or_else(|| OpError::kernel(self.name, "input is not contiguous"))?;
        if src.len() != out.len() {
            return Err(OpError::kernel(self.name, "input and output sizes differ"));
        }
        for (chunk, s) in out.chunks_mut(HALF_CHUNK).zip(src.chunks(HALF_CHUNK)) {
            convert(chunk, Some(s));
        }
        Ok(())
    }
}

/// The attribute-free math operators.
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
    Round,
    Sign,
    Erf,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
    Softplus,
    Softsign,
}

impl UnaryOp {
    pub fn build(op: UnaryOp, _ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Unary::boxed(op)
    }

    fn float_kernel(self, dtype: DType) -> Option<Box<dyn Kernel>> {
        let name = self.name();
        match self {
            UnaryOp::Relu => real_kernel!(dtype, name, W, |x| if x < W::zero() {
                W::zero()
            } else {
                x
            }),
            UnaryOp::Sigmoid => real_kernel!(dtype, name, W, |x| sigmoid(x)),
            UnaryOp::Tanh => real_kernel!(dtype, name, W, |x| x.tanh_v()),
            UnaryOp::Neg => real_kernel!(dtype, name, W, |x| -x),
            UnaryOp::Abs => real_kernel!(dtype, name, W, |x| x.abs()),
            UnaryOp::Exp => real_kernel!(dtype, name, W, |x| x.exp_v()),
            UnaryOp::Log => real_kernel!(dtype, name, W, |x| x.ln()),
            UnaryOp::Sqrt => real_kernel!(dtype, name, W, |x| x.sqrt()),
            UnaryOp::Reciprocal => real_kernel!(dtype, name, W, |x| x.recip()),
            UnaryOp::Floor => real_kernel!(dtype, name, W, |x| x.floor()),
            UnaryOp::Ceil => real_kernel!(dtype, name, W, |x| x.ceil()),
            UnaryOp::Round => real_kernel!(dtype, name, W, |x| x.round_half_even()),
            UnaryOp::Sign => real_kernel!(dtype, name, W, |x| sign(x)),
            UnaryOp::Erf => real_kernel!(dtype, name, W, |x| x.error_function()),
            UnaryOp::Sin => real_kernel!(dtype, name, W, |x| x.sin()),
            UnaryOp::Cos => real_kernel!(dtype, name, W, |x| x.cos()),
            UnaryOp::Tan => real_kernel!(dtype, name, W, |x| x.tan()),
            UnaryOp::Asin => real_kernel!(dtype, name, W, |x| x.asin()),
            UnaryOp::Acos => real_kernel!(dtype, name, W, |x| x.acos()),
            UnaryOp::Atan => real_kernel!(dtype, name, W, |x| x.atan()),
            UnaryOp::Sinh => real_kernel!(dtype, name, W, |x| x.sinh()),
            UnaryOp::Cosh => real_kernel!(dtype, name, W, |x| x.cosh()),
            UnaryOp::Asinh => real_kernel!(dtype, name, W, |x| x.asinh()),
            UnaryOp::Acosh => real_kernel!(dtype, name, W, |x| x.acosh()),
            UnaryOp::Atanh => real_kernel!(dtype, name, W, |x| x.atanh()),
            UnaryOp::Softplus => real_kernel!(dtype, name, W, |x| softplus(x)),
            UnaryOp::Softsign => real_kernel!(dtype, name, W, |x| x / (W::one() + x.abs())),
        }
    }

    fn int_kernel(self, dtype: DType) -> Option<Box<dyn Kernel>> {
        let name = self.name();
        match self {
            // Wrapping: Neg and Abs of MIN stay MIN, as two's complement hardware does.
            UnaryOp::Relu => {
                dispatch_signed!(dtype, T => Some(map_kernel_in_place::<T, _>(name, |x: T| x.max(0))), _ => None)
            }
            UnaryOp::Neg => {
                dispatch_signed!(dtype, T => Some(map_kernel_in_place::<T, _>(name, |x: T| x.wrapping_neg())), _ => None)
            }
            UnaryOp::Abs => {
                dispatch_signed!(dtype, T => Some(map_kernel_in_place::<T, _>(name, |x: T| x.wrapping_abs())), _ => {
                    dispatch_unsigned!(dtype, T => Some(map_kernel_in_place::<T, _>(name, |x: T| x)), _ => None)
                })
            }
            UnaryOp::Sign => {
                dispatch_signed!(dtype, T => Some(map_kernel_in_place::<T, _>(name, |x: T| x.signum())), _ => {
                    dispatch_unsigned!(dtype, T => Some(map_kernel_in_place::<T, _>(name, |x: T| (x != 0) as T)), _ => None)
                })
            }
            _ => None,
        }
    }

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
            UnaryOp::Round => "Round",
            UnaryOp::Sign => "Sign",
            UnaryOp::Erf => "Erf",
            UnaryOp::Sin => "Sin",
            UnaryOp::Cos => "Cos",
            UnaryOp::Tan => "Tan",
            UnaryOp::Asin => "Asin",
            UnaryOp::Acos => "Acos",
            UnaryOp::Atan => "Atan",
            UnaryOp::Sinh => "Sinh",
            UnaryOp::Cosh => "Cosh",
            UnaryOp::Asinh => "Asinh",
            UnaryOp::Acosh => "Acosh",
            UnaryOp::Atanh => "Atanh",
            UnaryOp::Softplus => "Softplus",
            UnaryOp::Softsign => "Softsign",
        }
    }
}

impl UnaryKind for UnaryOp {
    fn name(&self) -> &'static str {
        UnaryOp::name(*self)
    }

    fn fused_activation(&self) -> Option<Activation> {
        match self {
            UnaryOp::Relu => Some(Activation::Relu),
            UnaryOp::Sigmoid => Some(Activation::Sigmoid),
            UnaryOp::Tanh => Some(Activation::Tanh),
            _ => None,
        }
    }

    fn kernel(&self, dtype: DType) -> Option<Box<dyn Kernel>> {
        if dtype.is_float() {
            self.float_kernel(dtype)
        } else {
            self.int_kernel(dtype)
        }
    }
}

#[inline(always)]
pub fn sigmoid<W: WideFloat>(x: W) -> W {
    W::one() / (W::one() + (-x).exp_v())
}

/// `log(1 + exp(x))` without overflow for large `x`.
#[inline(always)]
pub fn softplus<W: Float>(x: W) -> W {
    x.max(W::zero()) + (-x.abs()).exp().ln_1p()
}

#[inline(always)]
fn sign<W: Float>(x: W) -> W {
    if x > W::zero() {
        W::one()
    } else if x < W::zero() {
        -W::one()
    } else {
        x // 0, -0 and NaN map to themselves
    }
}

/// The table of this family's unary math operators.
pub const OPS: &[(&str, crate::Constructor)] = &[
    ("Relu", |c| UnaryOp::build(UnaryOp::Relu, c)),
    ("Sigmoid", |c| UnaryOp::build(UnaryOp::Sigmoid, c)),
    ("Tanh", |c| UnaryOp::build(UnaryOp::Tanh, c)),
    ("Neg", |c| UnaryOp::build(UnaryOp::Neg, c)),
    ("Abs", |c| UnaryOp::build(UnaryOp::Abs, c)),
    ("Exp", |c| UnaryOp::build(UnaryOp::Exp, c)),
    ("Log", |c| UnaryOp::build(UnaryOp::Log, c)),
    ("Sqrt", |c| UnaryOp::build(UnaryOp::Sqrt, c)),
    ("Reciprocal", |c| UnaryOp::build(UnaryOp::Reciprocal, c)),
    ("Floor", |c| UnaryOp::build(UnaryOp::Floor, c)),
    ("Ceil", |c| UnaryOp::build(UnaryOp::Ceil, c)),
    ("Round", |c| UnaryOp::build(UnaryOp::Round, c)),
    ("Sign", |c| UnaryOp::build(UnaryOp::Sign, c)),
    ("Erf", |c| UnaryOp::build(UnaryOp::Erf, c)),
    ("Sin", |c| UnaryOp::build(UnaryOp::Sin, c)),
    ("Cos", |c| UnaryOp::build(UnaryOp::Cos, c)),
    ("Tan", |c| UnaryOp::build(UnaryOp::Tan, c)),
    ("Asin", |c| UnaryOp::build(UnaryOp::Asin, c)),
    ("Acos", |c| UnaryOp::build(UnaryOp::Acos, c)),
    ("Atan", |c| UnaryOp::build(UnaryOp::Atan, c)),
    ("Sinh", |c| UnaryOp::build(UnaryOp::Sinh, c)),
    ("Cosh", |c| UnaryOp::build(UnaryOp::Cosh, c)),
    ("Asinh", |c| UnaryOp::build(UnaryOp::Asinh, c)),
    ("Acosh", |c| UnaryOp::build(UnaryOp::Acosh, c)),
    ("Atanh", |c| UnaryOp::build(UnaryOp::Atanh, c)),
    ("Softplus", |c| UnaryOp::build(UnaryOp::Softplus, c)),
    ("Softsign", |c| UnaryOp::build(UnaryOp::Softsign, c)),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::test_util::run_op;
    use strata_core::Tensor;

    fn unary(op: &str, x: Tensor) -> Tensor {
        run_op(op, 13, &[], &[x]).unwrap().remove(0)
    }

    #[test]
    fn float_math() {
        let x = Tensor::from_slice(&[-1.5f32, -0.5, 0.5, 2.5, f32::NAN], &[5]).unwrap();
        let r = unary("Round", x.clone()).to_vec::<f32>().unwrap();
        assert_eq!(&r[..4], &[-2.0, -0.0, 0.0, 2.0]);
        assert!(r[4].is_nan());
        let s = unary("Sign", x.clone()).to_vec::<f32>().unwrap();
        assert_eq!(&s[..4], &[-1.0, -1.0, 1.0, 1.0]);
        let e = unary("Erf", x).to_vec::<f32>().unwrap();
        assert!((e[3] - 0.999593).abs() < 1e-6);
        let big = Tensor::from_slice(&[100.0f64, -100.0], &[2]).unwrap();
        assert_eq!(unary("Softplus", big).to_vec::<f64>().unwrap()[0], 100.0);
    }

    #[test]
    fn half_types_round_once() {
        let x = Tensor::from_slice(&[strata_core::f16::from_f32(0.5)], &[1]).unwrap();
        let y = unary("Sin", x).to_vec::<strata_core::f16>().unwrap();
        assert_eq!(y[0], strata_core::f16::from_f32(0.5f32.sin()));
    }

    #[test]
    fn integer_edges() {
        let x = Tensor::from_slice(&[i32::MIN, -3, 0, 7], &[4]).unwrap();
        assert_eq!(
            unary("Abs", x.clone()).to_vec::<i32>().unwrap(),
            [i32::MIN, 3, 0, 7]
        );
        assert_eq!(
            unary("Neg", x.clone()).to_vec::<i32>().unwrap(),
            [i32::MIN, 3, 0, -7]
        );
        assert_eq!(
            unary("Sign", x.clone()).to_vec::<i32>().unwrap(),
            [-1, -1, 0, 1]
        );
        assert_eq!(unary("Relu", x).to_vec::<i32>().unwrap(), [0, 0, 0, 7]);
        let u = Tensor::from_slice(&[0u8, 5], &[2]).unwrap();
        assert_eq!(unary("Sign", u).to_vec::<u8>().unwrap(), [0, 1]);
    }

    #[test]
    fn unsupported_dtype_is_no_kernel() {
        let x = Tensor::from_slice(&[1i32], &[1]).unwrap();
        let err = run_op("Sin", 13, &[], &[x]).unwrap_err();
        assert!(matches!(err, OpError::NoKernel { .. }), "{err}");
    }
}
