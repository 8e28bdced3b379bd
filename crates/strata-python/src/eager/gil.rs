//! When eager ops release the GIL: always for matmul and conv2d, and for any op on a large
//! tensor; below that size, releasing costs more than the kernel.

use pyo3::prelude::*;
use strata_core::Tensor;
use strata_ops::OpResult;

use crate::errors;

/// Elements from which an op releases the GIL while it runs (below, releasing costs more than
/// the kernel).
pub(crate) const RELEASE_FROM: usize = 1 << 16;

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
