//! Inference mode (T4): while a guard is alive on a thread, writes skip the version counter.

use std::cell::Cell;
use std::marker::PhantomData;

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// RAII guard: inference mode is on for this thread while at least one guard lives.
/// Not `Send`: the mode belongs to the thread that entered it.
pub struct InferenceMode {
    _not_send: PhantomData<*const ()>,
}

impl InferenceMode {
    /// Turns inference mode on for the current thread until the guard drops (guards nest).
    pub fn enter() -> Self {
        DEPTH.with(|d| d.set(d.get() + 1));
        InferenceMode {
            _not_send: PhantomData,
        }
    }

    /// Whether the current thread is in inference mode.
    pub fn is_enabled() -> bool {
        DEPTH.with(|d| d.get() > 0)
    }
}

impl Drop for InferenceMode {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get() - 1));
    }
}
