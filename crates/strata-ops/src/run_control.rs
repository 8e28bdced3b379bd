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
        self.token().check(op)
    }

    fn token(&self) -> StopToken {
        StopToken {
            cancel: Some(self.cancel.clone()),
            deadline: self.deadline,
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

/// Blocks between two clock reads in [`StopToken::should_stop_at`].
pub const CLOCK_EVERY: usize = 16;

/// What a long kernel polls between blocks of work, on any thread: the intra-op pool's workers
/// have no run control installed, so a kernel takes the token on the thread that runs it
/// ([`stop_token`]) and hands it to its tasks. Polling is an atomic load, plus a clock read when
/// the run has a deadline. A kernel that sees it stop skips its remaining blocks and returns;
/// the run then ends with the cancelled or timed-out error at its next check (the run checks
/// once more after its last node, so a cut-short result is never handed out).
#[derive(Debug, Clone, Default)]
pub struct StopToken {
    cancel: Option<CancelFlag>,
    deadline: Option<(Instant, Duration)>,
}

impl StopToken {
    /// A token that never stops (outside a run).
    pub fn never() -> StopToken {
        StopToken::default()
    }

    /// Whether the run was cancelled or passed its deadline.
    #[inline]
    pub fn should_stop(&self) -> bool {
        self.cancel.as_ref().is_some_and(CancelFlag::is_cancelled)
            || self.deadline.is_some_and(|(at, _)| Instant::now() >= at)
    }

    /// Like [`StopToken::should_stop`] for the `block`-th block of a loop, reading the clock
    /// only every [`CLOCK_EVERY`] blocks (for blocks of a few microseconds).
    #[inline]
    pub fn should_stop_at(&self, block: usize) -> bool {
        self.cancel.as_ref().is_some_and(CancelFlag::is_cancelled)
            || (block.is_multiple_of(CLOCK_EVERY)
                && self.deadline.is_some_and(|(at, _)| Instant::now() >= at))
    }

    /// [`StopToken::should_stop_at`] as a result: `Err` (cancelled or timed out, naming `op`)
    /// when the `block`-th block should not run.
    #[inline]
    pub fn poll(&self, block: usize, op: &str) -> OpResult<()> {
        if self.should_stop_at(block) {
            self.check(op)
        } else {
            Ok(())
        }
    }

    /// `Err` (cancelled or timed out, naming `op`) when the token says stop.
    pub fn check(&self, op: &str) -> OpResult<()> {
        if self.cancel.as_ref().is_some_and(CancelFlag::is_cancelled) {
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
}

/// The stop token of the run on this thread ([`StopToken::never`] outside one). Cheap: clones an
/// `Arc` and copies the deadline, allocates nothing.
pub fn stop_token() -> StopToken {
    CURRENT.with(|c| {
        c.borrow()
            .as_ref()
            .map_or_else(StopToken::never, RunControl::token)
    })
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

    #[test]
    fn stop_tokens_work_on_threads_without_a_control() {
        assert!(!stop_token().should_stop());
        let control = RunControl::default();
        let token = control.install(stop_token);
        let worker = {
            let token = token.clone();
            std::thread::spawn(move || {
                while !token.should_stop_at(1) {
                    std::thread::yield_now();
                }
                token.check("MatMul")
            })
        };
        assert!(!token.should_stop());
        control.cancel.cancel();
        let err = worker.join().unwrap().unwrap_err();
        assert!(
            matches!(err, OpError::Cancelled { ref op } if op == "MatMul"),
            "{err}"
        );

        let timed = RunControl {
            deadline: Some((Instant::now(), Duration::ZERO)),
            ..RunControl::default()
        };
        let token = timed.install(stop_token);
        assert!(token.should_stop() && token.should_stop_at(0));
        // Between clock reads only the flag is looked at.
        assert!(!token.should_stop_at(1));
        assert!(matches!(token.check("TopK"), Err(OpError::TimedOut { .. })));
    }
}
