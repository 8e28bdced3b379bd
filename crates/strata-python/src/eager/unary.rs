//! Element-wise math and activations (PyTorch names; integer inputs to float functions compute
//! in float32), `-t` and `abs(t)`, and `relu_` in place.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use strata_core::Tensor;
use strata_ops::prelude::*;
use strata_ops::OpResult;

use crate::eager::gil::{large, run};
use crate::tensor::PyTensor;

/// `op(t)`, with the GIL released for large tensors.
fn unary(
    py: Python<'_>,
    t: &Tensor,
    op: impl FnOnce(&Tensor) -> OpResult<Tensor> + Send,
) -> PyResult<PyTensor> {
    run(py, large(t), || op(t)).map(PyTensor::from)
}

/// One `#[pymethods]` block of argument-free unary methods, each running the eager op of the
/// same name.
macro_rules! unary_methods {
    ($($name:ident),* $(,)?) => {
        #[pymethods]
        impl PyTensor {
            $(
                #[doc = concat!("`", stringify!($name), "` element-wise.")]
                fn $name(&self, py: Python<'_>) -> PyResult<PyTensor> {
                    unary(py, &self.inner, |t| EagerUnary::$name(t))
                }
            )*
        }
    };
}

unary_methods!(
    relu,
    sigmoid,
    tanh,
    neg,
    abs,
    exp,
    log,
    sqrt,
    reciprocal,
    floor,
    ceil,
    round,
    sign,
    erf,
    sin,
    cos,
    tan,
    asin,
    acos,
    atan,
    sinh,
    cosh,
    asinh,
    acosh,
    atanh,
    softplus,
    softsign,
    logical_not,
    silu,
    selu,
    hardsigmoid,
    hardswish,
    mish,
);

#[pymethods]
impl PyTensor {
    /// GELU: exact (`approximate="none"`) or with the tanh approximation (`"tanh"`).
    #[pyo3(signature = (approximate = "none"))]
    fn gelu(&self, py: Python<'_>, approximate: &str) -> PyResult<PyTensor> {
        let tanh = match approximate {
            "none" => false,
            "tanh" => true,
            other => {
                return Err(PyValueError::new_err(format!(
                    "gelu: approximate must be 'none' or 'tanh', not {other:?}"
                )))
            }
        };
        unary(py, &self.inner, |t| t.gelu(tanh))
    }

    #[pyo3(signature = (negative_slope = 0.01))]
    fn leaky_relu(&self, py: Python<'_>, negative_slope: f32) -> PyResult<PyTensor> {
        unary(py, &self.inner, |t| t.leaky_relu(negative_slope))
    }

    #[pyo3(signature = (alpha = 1.0))]
    fn elu(&self, py: Python<'_>, alpha: f32) -> PyResult<PyTensor> {
        unary(py, &self.inner, |t| t.elu(alpha))
    }

    fn __neg__(&self, py: Python<'_>) -> PyResult<PyTensor> {
        unary(py, &self.inner, EagerUnary::neg)
    }

    fn __abs__(&self, py: Python<'_>) -> PyResult<PyTensor> {
        unary(py, &self.inner, EagerUnary::abs)
    }

    /// `relu` in place; returns self (the version goes up by one, not in inference mode).
    fn relu_<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
        let t = &slf.get().inner;
        run(slf.py(), large(t), || t.relu_().map(drop))?;
        Ok(slf.clone())
    }
}
