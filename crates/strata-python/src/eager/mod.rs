//! Eager tensor ops from Python: methods of `strata.Tensor` with PyTorch's names and keyword
//! arguments, Python operators, and module functions (`strata.cat`, `strata.where`, …), all
//! running `strata_ops::prelude`'s eager ops. Errors become `ShapeError` / `DTypeError` /
//! `NoKernelError` naming the op; the GIL is released around kernels with real work (matmul,
//! conv2d, and any op on a large tensor).

mod arith;
mod compare;
mod convert;
mod gil;
mod join;
mod linalg;
mod mode;
pub(crate) mod operand;
mod pool;
mod reduce;
mod select;
mod softmax;
mod unary;

use pyo3::prelude::*;

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
