//! Element-wise math and activations: one dispatch table per op; the attribute-free ONNX
//! operators' kernels cached per (op, dtype), activations with parameters built per call.
//! Float functions of integer tensors compute in f32, as PyTorch's do.

use std::sync::OnceLock;

use strata_core::{DType, DispatchTable, Tensor};

use crate::eager::call::{dense_cpu, route, run_in_place, run_into_new};
use crate::eager::promote::as_dtype;
use crate::ops::activation::activation::ActivationOp;
use crate::ops::math::logical::Not;
use crate::ops::math::unary::{UnaryKind, UnaryOp};
use crate::{Kernel, OpError, OpResult};

/// An eager unary op: an attribute-free ONNX math op, Not, or an activation with parameters.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Unary {
    Math(UnaryOp),
    Not,
    Activation(ActivationOp),
}

type UnaryImp = fn(Unary, &Tensor) -> OpResult<Tensor>;

const MATH_OPS: usize = 27;
const DTYPES: usize = DType::ALL.len();

/// A kernel chosen on first use (`None`: the operator takes no such dtype).
type KernelCell = OnceLock<Option<Box<dyn Kernel>>>;

/// The math ops' tables, in `UnaryOp`'s declaration order (a test checks the names).
static MATH_TABLES: [DispatchTable<UnaryImp>; MATH_OPS] = {
    const fn t(name: &'static str) -> DispatchTable<UnaryImp> {
        dense_cpu(name, unary_cpu as UnaryImp)
    }
    [
        t("relu"),
        t("sigmoid"),
        t("tanh"),
        t("neg"),
        t("abs"),
        t("exp"),
        t("log"),
        t("sqrt"),
        t("reciprocal"),
        t("floor"),
        t("ceil"),
        t("round"),
        t("sign"),
        t("erf"),
        t("sin"),
        t("cos"),
        t("tan"),
        t("asin"),
        t("acos"),
        t("atan"),
        t("sinh"),
        t("cosh"),
        t("asinh"),
        t("acosh"),
        t("atanh"),
        t("softplus"),
        t("softsign"),
    ]
};
static NOT: DispatchTable<UnaryImp> = dense_cpu("logical_not", unary_cpu as UnaryImp);
static GELU: DispatchTable<UnaryImp> = dense_cpu("gelu", unary_cpu as UnaryImp);
static SILU: DispatchTable<UnaryImp> = dense_cpu("silu", unary_cpu as UnaryImp);
static LEAKY_RELU: DispatchTable<UnaryImp> = dense_cpu("leaky_relu", unary_cpu as UnaryImp);
static ELU: DispatchTable<UnaryImp> = dense_cpu("elu", unary_cpu as UnaryImp);
static SELU: DispatchTable<UnaryImp> = dense_cpu("selu", unary_cpu as UnaryImp);
static HARDSIGMOID: DispatchTable<UnaryImp> = dense_cpu("hardsigmoid", unary_cpu as UnaryImp);
static HARDSWISH: DispatchTable<UnaryImp> = dense_cpu("hardswish", unary_cpu as UnaryImp);
static MISH: DispatchTable<UnaryImp> = dense_cpu("mish", unary_cpu as UnaryImp);

static MATH_KERNELS: [[KernelCell; DTYPES]; MATH_OPS] =
    [const { [const { OnceLock::new() }; DTYPES] }; MATH_OPS];
static NOT_KERNEL: KernelCell = OnceLock::new();

/// A kernel chosen for one call: cached for good, or built for this call.
enum Chosen {
    Cached(&'static dyn Kernel),
    Built(Box<dyn Kernel>),
}

impl Chosen {
    fn get(&self) -> &dyn Kernel {
        match self {
            Chosen::Cached(k) => *k,
            Chosen::Built(k) => k.as_ref(),
        }
    }
}

impl Unary {
    fn table(self) -> &'static DispatchTable<UnaryImp> {
        match self {
            Unary::Math(op) => &MATH_TABLES[op as usize],
            Unary::Not => &NOT,
            Unary::Activation(act) => match act {
                ActivationOp::Gelu { .. } => &GELU,
                ActivationOp::Swish { .. } => &SILU,
                ActivationOp::LeakyRelu { .. } => &LEAKY_RELU,
                ActivationOp::Elu { .. } => &ELU,
                ActivationOp::Selu { .. } => &SELU,
                ActivationOp::HardSigmoid { .. } => &HARDSIGMOID,
                ActivationOp::HardSwish => &HARDSWISH,
                _ => &MISH,
            },
        }
    }

    fn kind(&self) -> &dyn UnaryKind {
        match self {
            Unary::Math(op) => op,
            Unary::Not => &Not,
            Unary::Activation(act) => act,
        }
    }

    fn kernel(self, dtype: DType) -> Option<Chosen> {
        let cached = |cell: &'static KernelCell| {
            cell.get_or_init(|| self.kind().kernel(dtype))
                .as_deref()
                .map(Chosen::Cached)
        };
        match self {
            Unary::Math(op) => cached(&MATH_KERNELS[op as usize][dtype as usize]),
            Unary::Not if dtype == DType::Bool => cached(&NOT_KERNEL),
            Unary::Not => None,
            Unary::Activation(act) => act.kernel(dtype).map(Chosen::Built),
        }
    }

    /// The dtype to compute in: the input's, or f32 for integers the op has no kernel for.
    fn compute_dtype(self, dtype: DType) -> OpResult<(DType, Chosen)> {
        if let Some(k) = self.kernel(dtype) {
            return Ok((dtype, k));
        }
        let no_kernel = || OpError::no_kernel(self.kind().name(), dtype, strata_core::Device::Cpu);
        if (dtype.is_signed_int() || dtype.is_unsigned_int() || dtype == DType::Bool)
            && !matches!(self, Unary::Not)
        {
            return Ok((DType::F32, self.kernel(DType::F32).ok_or_else(no_kernel)?));
        }
        Err(no_kernel())
    }

    /// `self(x)` routed by `x`'s dispatch keys.
    pub(crate) fn call(self, x: &Tensor) -> OpResult<Tensor> {
        route(self.table(), &[x])?(self, x)
    }

    /// `x = self(x)` in place: one write borrow, one version bump (none in inference mode).
    pub(crate) fn call_in_place(self, x: &Tensor) -> OpResult<()> {
        route(self.table(), &[x])?;
        let (dtype, kernel) = self.compute_dtype(x.dtype())?;
        if dtype != x.dtype() || self.kind().out_dtype(dtype) != dtype || !self.kind().in_place() {
            return Err(OpError::DType {
                op: format!("{}_", self.table().op()),
                index: 0,
                expected: "a dtype the op maps to itself".into(),
                actual: x.dtype(),
            });
        }
        if x.is_contiguous() {
            run_in_place(kernel.get(), &[x])
        } else {
            Ok(x.copy_from(&unary_cpu(self, x)?)?)
        }
    }
}

/// The dense CPU implementation: the op's kernel into a new tensor.
fn unary_cpu(op: Unary, x: &Tensor) -> OpResult<Tensor> {
    let (dtype, kernel) = op.compute_dtype(x.dtype())?;
    let x = as_dtype(x, dtype)?;
    run_into_new(kernel.get(), &[&x], x.dims(), op.kind().out_dtype(dtype))
}

/// Unary math and activations (PyTorch names).
pub trait EagerUnary {
    fn relu(&self) -> OpResult<Tensor>;
    fn sigmoid(&self) -> OpResult<Tensor>;
    fn tanh(&self) -> OpResult<Tensor>;
    fn neg(&self) -> OpResult<Tensor>;
    fn abs(&self) -> OpResult<Tensor>;
    fn exp(&self) -> OpResult<Tensor>;
    fn log(&self) -> OpResult<Tensor>;
    fn sqrt(&self) -> OpResult<Tensor>;
    fn reciprocal(&self) -> OpResult<Tensor>;
    fn floor(&self) -> OpResult<Tensor>;
    fn ceil(&self) -> OpResult<Tensor>;
    fn round(&self) -> OpResult<Tensor>;
    fn sign(&self) -> OpResult<Tensor>;
    fn erf(&self) -> OpResult<Tensor>;
    fn sin(&self) -> OpResult<Tensor>;
    fn cos(&self) -> OpResult<Tensor>;
    fn tan(&self) -> OpResult<Tensor>;
    fn asin(&self) -> OpResult<Tensor>;
    fn acos(&self) -> OpResult<Tensor>;
    fn atan(&self) -> OpResult<Tensor>;
    fn sinh(&self) -> OpResult<Tensor>;
    fn cosh(&self) -> OpResult<Tensor>;
    fn asinh(&self) -> OpResult<Tensor>;
    fn acosh(&self) -> OpResult<Tensor>;
    fn atanh(&self) -> OpResult<Tensor>;
    fn softplus(&self) -> OpResult<Tensor>;
    fn softsign(&self) -> OpResult<Tensor>;
    /// Boolean negation of a bool tensor.
    fn logical_not(&self) -> OpResult<Tensor>;
    /// GELU, exact (erf) or with the tanh approximation.
    fn gelu(&self, tanh_approximation: bool) -> OpResult<Tensor>;
    /// `x * sigmoid(x)`.
    fn silu(&self) -> OpResult<Tensor>;
    fn leaky_relu(&self, negative_slope: f32) -> OpResult<Tensor>;
    fn elu(&self, alpha: f32) -> OpResult<Tensor>;
    fn selu(&self) -> OpResult<Tensor>;
    /// PyTorch's hardsigmoid: `clamp(x / 6 + 1/2, 0, 1)`.
    fn hardsigmoid(&self) -> OpResult<Tensor>;
    fn hardswish(&self) -> OpResult<Tensor>;
    fn mish(&self) -> OpResult<Tensor>;
    /// `relu` in place; bumps the version counter once (not in inference mode).
    fn relu_(&self) -> OpResult<&Tensor>;
}

macro_rules! math {
    ($($method:ident => $op:ident),* $(,)?) => {$(
        fn $method(&self) -> OpResult<Tensor> {
            Unary::Math(UnaryOp::$op).call(self)
        }
    )*};
}

impl EagerUnary for Tensor {
    math!(relu => Relu, sigmoid => Sigmoid, tanh => Tanh, neg => Neg, abs => Abs, exp => Exp,
        log => Log, sqrt => Sqrt, reciprocal => Reciprocal, floor => Floor, ceil => Ceil,
        round => Round, sign => Sign, erf => Erf, sin => Sin, cos => Cos, tan => Tan,
        asin => Asin, acos => Acos, atan => Atan, sinh => Sinh, cosh => Cosh, asinh => Asinh,
        acosh => Acosh, atanh => Atanh, softplus => Softplus, softsign => Softsign);

    fn logical_not(&self) -> OpResult<Tensor> {
        Unary::Not.call(self)
    }
    fn gelu(&self, tanh_approximation: bool) -> OpResult<Tensor> {
        Unary::Activation(ActivationOp::Gelu {
            tanh: tanh_approximation,
        })
        .call(self)
    }
    fn silu(&self) -> OpResult<Tensor> {
        Unary::Activation(ActivationOp::Swish { alpha: 1.0 }).call(self)
    }
    fn leaky_relu(&self, negative_slope: f32) -> OpResult<Tensor> {
        Unary::Activation(ActivationOp::LeakyRelu {
            alpha: negative_slope,
        })
        .call(self)
    }
    fn elu(&self, alpha: f32) -> OpResult<Tensor> {
        Unary::Activation(ActivationOp::Elu { alpha }).call(self)
    }
    fn selu(&self) -> OpResult<Tensor> {
        // ONNX's defaults are PyTorch's constants.
        Unary::Activation(ActivationOp::Selu {
            alpha: 1.673_263_2,
            gamma: 1.050_701,
        })
        .call(self)
    }
    fn hardsigmoid(&self) -> OpResult<Tensor> {
        Unary::Activation(ActivationOp::HardSigmoid {
            alpha: 1.0 / 6.0,
            beta: 0.5,
        })
        .call(self)
    }
    fn hardswish(&self) -> OpResult<Tensor> {
        Unary::Activation(ActivationOp::HardSwish).call(self)
    }
    fn mish(&self) -> OpResult<Tensor> {
        Unary::Activation(ActivationOp::Mish).call(self)
    }
    fn relu_(&self) -> OpResult<&Tensor> {
        Unary::Math(UnaryOp::Relu)
            .call_in_place(self)
            .map(|()| self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn math_tables_follow_unary_op_order() {
        let ops = [
            UnaryOp::Relu,
            UnaryOp::Sigmoid,
            UnaryOp::Softplus,
            UnaryOp::Softsign,
            UnaryOp::Atanh,
            UnaryOp::Erf,
        ];
        for op in ops {
            assert_eq!(
                MATH_TABLES[op as usize].op(),
                op.name().to_lowercase(),
                "{op:?}"
            );
        }
    }
}
