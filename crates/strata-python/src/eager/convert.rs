//! dtype conversion (`to(dtype)`, and `float()`, `double()`, `half()`, `bfloat16()`, `int()`,
//! `long()`, `bool()`) and bounds (`clamp`/`clip`, `clamp_` in place).

use pyo3::prelude::*;
use strata_core::{DType, Device};
use strata_ops::prelude::*;

use crate::convert::dtype_from_py;
use crate::eager::gil::{large, run};
use crate::tensor::PyTensor;

/// `t` as `dtype`: itself when it already is (as PyTorch's `to`), else a converted copy.
fn to<'py>(slf: &Bound<'py, PyTensor>, dtype: DType, copy: bool) -> PyResult<Bound<'py, PyTensor>> {
    let t = &slf.get().inner;
    if t.dtype() == dtype && !copy {
        return Ok(slf.clone());
    }
    let out = run(slf.py(), large(t), || t.to_dtype(dtype))?;
    Bound::new(slf.py(), PyTensor::from(out))
}

macro_rules! dtype_shortcuts {
    ($($name:ident => $dtype:ident),* $(,)?) => {
        #[pymethods]
        impl PyTensor {
            $(
                #[doc = concat!("`to(", stringify!($dtype), ")`.")]
                fn $name<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
                    to(slf, DType::$dtype, false)
                }
            )*
        }
    };
}

dtype_shortcuts!(float => F32, double => F64, half => F16, bfloat16 => BF16, int => I32,
    long => I64, bool => Bool);

#[pymethods]
impl PyTensor {
    /// This tensor converted to `dtype` (numpy's names and types, or strata's), through the Cast
    /// kernel; itself when it already has that dtype and `copy` is False (or for `"cpu"`).
    #[pyo3(signature = (dtype, copy = false))]
    fn to<'py>(
        slf: &Bound<'py, Self>,
        dtype: &Bound<'_, PyAny>,
        copy: bool,
    ) -> PyResult<Bound<'py, Self>> {
        // `t.to("cpu")`, as PyTorch scripts write it: already there.
        if let Ok(text) = dtype.extract::<String>() {
            if matches!(text.parse::<Device>(), Ok(Device::Cpu))
                && slf.get().inner.device() == Device::Cpu
            {
                return Ok(slf.clone());
            }
        }
        to(slf, dtype_from_py(dtype)?, copy)
    }

    /// Elements limited to `[min, max]` (either bound may be None).
    #[pyo3(signature = (min = None, max = None))]
    fn clamp(&self, py: Python<'_>, min: Option<f64>, max: Option<f64>) -> PyResult<PyTensor> {
        let t = &self.inner;
        run(py, large(t), || t.clamp(min, max)).map(PyTensor::from)
    }

    /// `clamp`'s other name.
    #[pyo3(signature = (min = None, max = None))]
    fn clip(&self, py: Python<'_>, min: Option<f64>, max: Option<f64>) -> PyResult<PyTensor> {
        self.clamp(py, min, max)
    }

    /// `clamp` in place; returns self (the version goes up by one, not in inference mode).
    #[pyo3(signature = (min = None, max = None))]
    fn clamp_<'py>(
        slf: &Bound<'py, Self>,
        min: Option<f64>,
        max: Option<f64>,
    ) -> PyResult<Bound<'py, Self>> {
        let t = &slf.get().inner;
        run(slf.py(), large(t), || t.clamp_(min, max).map(drop))?;
        Ok(slf.clone())
    }
}
