//! `strata._strata`: the native half of the `strata` Python package. The onnxruntime-shaped
//! surface (`InferenceSession`, `SessionOptions`, …) is Python in `python/strata`; this module
//! holds what must be fast or touch the runtime: loading plans, converting numpy arrays to and
//! from tensors, and running on pooled execution contexts with the GIL released.

mod convert;
mod errors;
mod model;
mod pool;
mod report;
mod session;

use pyo3::prelude::*;

#[pymodule]
fn _strata(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<session::Session>()?;
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
