//! Inference mode from Python (`with strata.inference_mode():`, in `python/strata/_tensor.py`,
//! calls these): while it is on for a thread, in-place ops on that thread do not bump version
//! counters. The guards live in a per-thread stack, as the mode itself is per thread. Also the
//! number of threads eager kernels may use.

use std::cell::RefCell;

use pyo3::prelude::*;
use strata_core::InferenceMode;

thread_local! {
    static GUARDS: RefCell<Vec<InferenceMode>> = const { RefCell::new(Vec::new()) };
}

/// Turns inference mode on for this thread (nests).
#[pyfunction]
pub fn inference_mode_enter() {
    GUARDS.with(|g| g.borrow_mut().push(InferenceMode::enter()));
}

/// Leaves the innermost `inference_mode_enter` of this thread (no-op when there is none).
#[pyfunction]
pub fn inference_mode_exit() {
    GUARDS.with(|g| drop(g.borrow_mut().pop()));
}

/// Whether this thread is in inference mode.
#[pyfunction]
pub fn is_inference_mode_enabled() -> bool {
    InferenceMode::is_enabled()
}

/// Sets how many intra-op threads eager kernels may use (default 1).
#[pyfunction]
pub fn set_eager_threads(threads: usize) {
    strata_ops::eager::set_threads(threads);
}

/// The intra-op threads eager kernels may use.
#[pyfunction]
pub fn get_eager_threads() -> usize {
    strata_ops::eager::threads()
}
