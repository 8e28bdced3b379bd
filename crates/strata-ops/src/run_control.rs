//! Stopping a run from outside it: cancellation from another thread, a deadline, and a bound on
//! loop trips. The execution context installs a [`RunControl`] on the thread that runs its nodes
//! for the length of a run; Loop bodies and long kernels call [`check`] between units of work,
//! and Loop reads [`max_loop_iterations`]. Outside a run nothing is installed and both are no-ops.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{OpError, OpResult};

/// Loop trips allowed by default: far beyond any loop a real model runs, small enough that an
/// endless loop ends in seconds instead of never.
pub const DEFAULT_MAX_LOOP_ITERATIONS: u64 = 1 << 18;

/// A flag another thread sets to stop a run. Cheap to clone; every clone stops the same runs.
#[derive(Debug, Clone, Default)]
pub struct CancelFlag(Arc<AtomicBool>);

impl CancelFlag {
    /// Asks every run watching this flag to stop at its next check.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Clears the flag, so later runs go ahead.
    pub fn reset(&self) {
        self.0.store(false, Ordering::Relaxed);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// What may stop one run.
#[derive(Debug, Clone)]
pub struct RunControl {
    pub cancel: CancelFlag,
    /// When the run must have ended, and the timeout it came from (for the message).
    pub deadline: Option<(Instant, Duration)>,
    pub max_loop_iterations: u64,
}

impl Default for RunControl {
    fn default() -> Self {
        RunControl {
            cancel: CancelFlag::default(),
            deadline: None,
            max_loop_iterations: DEFAULT_MAX_LOOP_ITERATIONS,
        }
    }
}

impl RunControl {
    /// `Err` when the run was cancelled or its deadline has passed; `op` names where it stopped.
    pub fn check(&self, op: &str) -> OpResult<()> {
        if self.cancel.is_cancelled() {
            return Err(OpError::Cancelled { op: op.to_string() });
        }
        match self.deadline {
            Some((at, timeout)) if Instant::now() >= at => Err(OpError::TimedOut {
                op: op.to_string(),
                timeout,
            }),
            _ => Ok(()),
        }
    }

    /// Runs `f` with this control installed on the current thread, unless a run is already
    /// going on there: a subgraph's run (a Loop or If body) nests inside its parent's and obeys
    /// the parent's control, so cancelling or timing out the outer run stops the inner ones.
    pub fn install<R>(&self, f: impl FnOnce() -> R) -> R {
        if CURRENT.with(|c| c.borrow().is_some()) {
            return f();
        }
        CURRENT.with(|c| *c.borrow_mut() = Some(self.clone()));
        let _restore = Restore;
        f()
    }
}

thread_local! {
    static CURRENT: RefCell<Option<RunControl>> = const { RefCell::new(None) };
}

/// Uninstalls the control when the outermost run ends, also when it unwinds.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        CURRENT.with(|c| *c.borrow_mut() = None);
    }
}

/// The control of the run going on on this thread, if any: a nested run (a subgraph's) takes
/// it along when it moves to another thread's pool.
pub fn current() -> Option<RunControl> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Checks the control installed on this thread, if any (see [`RunControl::check`]).
pub fn check(op: &str) -> OpResult<()> {
    CURRENT.with(|c| match &*c.borrow() {
        Some(control) => control.check(op),
        None => Ok(()),
    })
}

/// The loop-trip bound of the run on this thread ([`DEFAULT_MAX_LOOP_ITERATIONS`] outside one).
pub fn max_loop_iterations() -> u64 {
    CURRENT.with(|c| {
        c.borrow()
            .as_ref()
            .map_or(DEFAULT_MAX_LOOP_ITERATIONS, |control| {
                control.max_loop_iterations
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_pass_outside_a_run_and_fail_once_cancelled_inside() {
        assert!(check("x").is_ok());
        let control = RunControl::default();
        control.install(|| assert!(check("x").is_ok()));
        control.cancel.cancel();
        let err = control.install(|| check("Loop")).unwrap_err();
        assert!(
            matches!(err, OpError::Cancelled { ref op } if op == "Loop"),
            "{err}"
        );
        // Uninstalled again after the run.
        assert!(check("x").is_ok());
    }

    #[test]
    fn a_passed_deadline_is_a_timeout_and_nested_runs_obey_the_outer_control() {
        let timeout = Duration::from_millis(0);
        let control = RunControl {
            deadline: Some((Instant::now(), timeout)),
            max_loop_iterations: 7,
            ..RunControl::default()
        };
        let inner = RunControl {
            max_loop_iterations: 3,
            ..RunControl::default()
        };
        control.install(|| {
            assert!(matches!(check("Loop"), Err(OpError::TimedOut { .. })));
            assert_eq!(inner.install(max_loop_iterations), 7);
            assert_eq!(max_loop_iterations(), 7);
        });
        assert_eq!(max_loop_iterations(), DEFAULT_MAX_LOOP_ITERATIONS);
    }
}
