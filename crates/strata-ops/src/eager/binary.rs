//! The broadcasting binary ops' hot path, shared by arithmetic and comparisons: a dispatch
//! table per op, the ONNX operator's kernel cached per (op, dtype) on first use (choosing it
//! allocates; running it does not), type promotion, and the in-place form.

use std::sync::OnceLock;

use strata_core::{DType, DispatchTable, Tensor};

use crate::eager::call::{broadcast, dense_cpu, route, run_in_place, run_into_new};
use crate::eager::convert::scalar_of;
use crate::eager::promote::{as_dtype, promote_types};
use crate::ops::math::binary::{BinaryKind, BinaryOp};
use crate::ops::math::compare::CompareOp;
use crate::ops::math::pow::Pow;
use crate::{Kernel, OpError, OpResult};

/// The eager binary ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Binary {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Eq,
    Lt,
    Le,
    Gt,
    Ge,
}

const COUNT: usize = 10;
const DTYPES: usize = DType::ALL.len();

/// A kernel chosen on first use (`None`: the operator takes no such dtype).
type KernelCell = OnceLock<Option<Box<dyn Kernel>>>;

type BinaryImp = fn(Binary, &Tensor, &Tensor) -> OpResult<Tensor>;

/// One table per op, indexed by `Binary as usize`; every dense CPU entry is [`binary_cpu`].
static TABLES: [DispatchTable<BinaryImp>; COUNT] = [
    dense_cpu("add", binary_cpu as BinaryImp),
    dense_cpu("sub", binary_cpu as BinaryImp),
    dense_cpu("mul", binary_cpu as BinaryImp),
    dense_cpu("div", binary_cpu as BinaryImp),
    dense_cpu("pow", binary_cpu as BinaryImp),
    dense_cpu("eq", binary_cpu as BinaryImp),
    dense_cpu("lt", binary_cpu as BinaryImp),
    dense_cpu("le", binary_cpu as BinaryImp),
    dense_cpu("gt", binary_cpu as BinaryImp),
    dense_cpu("ge", binary_cpu as BinaryImp),
];

/// The chosen kernel per (op, dtype of both inputs); `None` when the operator takes no such dtype.
static KERNELS: [[KernelCell; DTYPES]; COUNT] =
    [const { [const { OnceLock::new() }; DTYPES] }; COUNT];

impl Binary {
    /// The ONNX operator whose kernels this op runs.
    fn kind(self) -> &'static dyn BinaryKind {
        match self {
            Binary::Add => &BinaryOp::Add,
            Binary::Sub => &BinaryOp::Sub,
            Binary::Mul => &BinaryOp::Mul,
            Binary::Div => &BinaryOp::Div,
            Binary::Pow => &Pow,
            Binary::Eq => &CompareOp::Equal,
            Binary::Lt => &CompareOp::Less,
            Binary::Le => &CompareOp::LessOrEqual,
            Binary::Gt => &CompareOp::Greater,
            Binary::Ge => &CompareOp::GreaterOrEqual,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        TABLES[self as usize].op()
    }

    /// The dtype both inputs are converted to: the promoted one, except that true division
    /// and powers of integers compute in f32, as PyTorch's do.
    fn compute_dtype(self, a: DType, b: DType) -> OpResult<DType> {
        let common = promote_types(self.name(), a, b)?;
        let float_only = matches!(self, Binary::Div);
        Ok(if float_only && !common.is_float() {
            DType::F32
        } else {
            common
        })
    }

    /// The cached kernel for inputs of `dtype`.
    #[inline]
    fn kernel(self, dtype: DType) -> OpResult<&'static dyn Kernel> {
        KERNELS[self as usize][dtype as usize]
            .get_or_init(|| self.kind().kernel(dtype, dtype, None))
            .as_deref()
            .ok_or_else(|| OpError::no_kernel(self.kind().name(), dtype, strata_core::Device::Cpu))
    }

    /// `self(a, b)` routed by the inputs' dispatch keys.
    #[inline]
    pub(crate) fn call(self, a: &Tensor, b: &Tensor) -> OpResult<Tensor> {
        route(&TABLES[self as usize], &[a, b])?(self, a, b)
    }

    /// `self(a, value)` with a number: the tensor's dtype when the number fits its category
    /// (an integral number with an integer tensor), else f32.
    pub(crate) fn call_scalar(self, a: &Tensor, value: f64) -> OpResult<Tensor> {
        let dtype = scalar_dtype(a.dtype(), value);
        self.call(a, &scalar_of(value, dtype)?)
    }

    /// `a = self(a, b)` in place: the result must keep `a`'s dims and dtype. One write borrow
    /// of `a`, so one version bump (none in inference mode).
    pub(crate) fn call_in_place(self, a: &Tensor, b: &Tensor) -> OpResult<()> {
        route(&TABLES[self as usize], &[a, b])?;
        let dtype = self.compute_dtype(a.dtype(), b.dtype())?;
        let out_dtype = self.kind().out_dtype(dtype, dtype)?;
        if out_dtype != a.dtype() || !self.kind().in_place() {
            return Err(OpError::DType {
                op: format!("{}_", self.name()),
                index: 0,
                expected: format!("a result of the tensor's own dtype, not {out_dtype}"),
                actual: a.dtype(),
            });
        }
        let dims = broadcast(self.name(), a.dims(), b.dims())?;
        if dims.as_slice() != a.dims() {
            return Err(OpError::shape(
                &format!("{}_", self.name()),
                format!(
                    "the result's dims {dims:?} differ from the tensor's {:?}",
                    a.dims()
                ),
            ));
        }
        let b = as_dtype(b, dtype)?;
        // Reading B while writing A would be a borrow conflict when they share memory.
        let b = if b.shares_storage(a) {
            std::borrow::Cow::Owned(b.contiguous()?.detached(b.device(), b.memory_kind())?)
        } else {
            b
        };
        if a.is_contiguous() {
            run_in_place(self.kernel(dtype)?, &[a, &b])
        } else {
            let out = binary_cpu(self, a, &b)?;
            Ok(a.copy_from(&out)?)
        }
    }
}

/// The dtype a number takes against a tensor of `dtype` (PyTorch's rule for Python scalars).
fn scalar_dtype(dtype: DType, value: f64) -> DType {
    let integral = value.fract() == 0.0 && value.is_finite();
    match dtype {
        DType::Bool if integral => DType::I64,
        d if d.is_float() => d,
        d if integral => d,
        _ => DType::F32,
    }
}

/// The dense CPU implementation: promote, broadcast, allocate, run the cached kernel.
fn binary_cpu(op: Binary, a: &Tensor, b: &Tensor) -> OpResult<Tensor> {
    let dtype = op.compute_dtype(a.dtype(), b.dtype())?;
    let (a, b) = (as_dtype(a, dtype)?, as_dtype(b, dtype)?);
    let dims = broadcast(op.name(), a.dims(), b.dims())?;
    let out_dtype = op.kind().out_dtype(dtype, dtype)?;
    run_into_new(op.kernel(dtype)?, &[&a, &b], &dims, out_dtype)
}
