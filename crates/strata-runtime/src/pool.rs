//! The intra-op thread pool a plan runs its kernels on.
//!
//! Kernels split their work with `strata_ops::parallel` and size the split by
//! `parallel::threads()`; running a whole `execute` inside [`IntraOpPool::run`] installs this
//! pool, sized by `PlanConfig::threads`, on the calling thread. The graph runs on the caller,
//! which takes its share of every parallel kernel beside the pool's workers (a 2-thread pool is
//! the caller and one worker); workers spin briefly after each job before they park, as
//! onnxruntime's pool does, so the next kernel's fork costs an atomic store, not a wake-up.
//!
//! Pools are shared by size across plans (a process with ten 2-thread plans has one 2-thread
//! pool, not ten); contexts running at once on one pool take turns per kernel (a kernel that
//! finds the pool busy runs on its own thread). One thread runs everything on the caller with
//! no pool at all.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use strata_ops::parallel::{self, ThreadPool};

use crate::{Result, RuntimeError};

/// Where a plan's kernels run: on the caller (one thread) or on a shared pool of `threads`.
#[derive(Debug, Clone)]
pub struct IntraOpPool {
    pool: Option<Arc<ThreadPool>>,
}

impl IntraOpPool {
    /// The pool for `threads` threads: none for one thread, else the process's shared pool of
    /// that size (built on first use).
    pub fn for_threads(threads: usize) -> Result<Self> {
        if threads <= 1 {
            return Ok(IntraOpPool { pool: None });
        }
        static POOLS: OnceLock<Mutex<HashMap<usize, Arc<ThreadPool>>>> = OnceLock::new();
        let mut pools = POOLS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(pool) = pools.get(&threads) {
            return Ok(IntraOpPool {
                pool: Some(pool.clone()),
            });
        }
        let pool = ThreadPool::new(threads).map_err(|e| RuntimeError::ThreadPool {
            threads,
            reason: e.to_string(),
        })?;
        let pool = Arc::new(pool);
        pools.insert(threads, pool.clone());
        Ok(IntraOpPool { pool: Some(pool) })
    }

    /// Threads kernels may use (1 when everything runs on the caller).
    pub fn threads(&self) -> usize {
        self.pool.as_ref().map_or(1, |p| p.threads())
    }

    /// Runs `f` on the calling thread with this pool installed for its kernels.
    pub fn run<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.pool {
            Some(pool) => parallel::install(pool, f),
            None => f(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_thread_runs_on_the_caller_and_larger_pools_are_shared_by_size() {
        let single = IntraOpPool::for_threads(1).unwrap();
        assert_eq!(single.threads(), 1);
        assert_eq!(single.run(parallel::threads), 1);

        let two = IntraOpPool::for_threads(2).unwrap();
        assert_eq!(two.threads(), 2);
        let caller = std::thread::current().id();
        assert_eq!(two.run(|| std::thread::current().id()), caller);
        assert_eq!(two.run(parallel::threads), 2);
        let again = IntraOpPool::for_threads(2).unwrap();
        let (a, b) = (two.pool.unwrap(), again.pool.unwrap());
        assert!(Arc::ptr_eq(&a, &b), "same size, same pool");
    }
}
