//! Eager tensor ops from Python: methods of `strata.Tensor` with PyTorch's names and keyword
//! arguments, Python operators, and module functions (`strata.cat`, `strata.where`, …), all
//! running `strata_ops::prelude`'s eager ops. Errors become `ShapeError` / `DTypeError` /
//! `NoKernelError` naming the op; the GIL is released around kernels with real work (matmul,
//! conv2d, and any op on a large tensor).

mod arith;
mod compare;
mod convert;
mod join;
mod linalg;
mod mode;
mod operand;
mod pool;
mod reduce;
mod select;
mod softmax;
mod unary;

use pyo3::prelude::*;
use strata_core::Tensor;
use strata_ops::OpResult;

use crate::errors;

/// Elements from which an op releases the GIL while it runs (below, releasing costs more than
/// the kernel).
const RELEASE_FROM: usize = 1 << 16;

/// Runs `op` (with the GIL released when `release`), its error as a Python exception.
pub(crate) fn run<T: Send>(
    py: Python<'_>,
    release: bool,
    op: impl FnOnce() -> OpResult<T> + Send,
) -> PyResult<T> {
    let result = if release { py.detach(op) } else { op() };
    result.map_err(|e| errors::eager(&e))
}

/// Whether an op on `t` is worth releasing the GIL for.
pub(crate) fn large(t: &Tensor) -> bool {
    t.numel() >= RELEASE_FROM
}

/// Adds the module-level functions.
pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(join::cat, module)?)?;
    module.add_function(wrap_pyfunction!(join::stack, module)?)?;
    module.add_function(wrap_pyfunction!(select::where_, module)?)?;
    module.add_function(wrap_pyfunction!(linalg::conv2d, module)?)?;
    module.add_function(wrap_pyfunction!(mode::inference_mode_enter, module)?)?;
    module.add_function(wrap_pyfunction!(mode::inference_mode_exit, module)?)?;
    module.add_function(wrap_pyfunction!(mode::is_inference_mode_enabled, module)?)?;
    module.add_function(wrap_pyfunction!(mode::set_eager_threads, module)?)?;
    module.add_function(wrap_pyfunction!(mode::get_eager_threads, module)?)?;
    Ok(())
}
