//! The intra-op thread pool a plan runs its kernels on.
//!
//! Kernels split their work with rayon (`par_iter`, `join`) and size the split by
//! `rayon::current_num_threads()`; running a whole `execute` inside [`IntraOpPool::run`] makes
//! those calls use this pool, sized by `PlanConfig::threads`, instead of rayon's global one
//! (sized by the machine). The graph then runs on one of the pool's workers, so a kernel's
//! fork-join is a push on that worker's own deque that the other workers — spinning briefly
//! before they park, as onnxruntime's pool does — steal, rather than a cross-thread injection
//! per kernel from a thread outside the pool.
//!
//! Pools are shared by size across plans (a process with ten 2-thread plans has one 2-thread
//! pool, not ten), and one thread runs everything on the caller with no pool at all.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use rayon::{ThreadPool, ThreadPoolBuilder};

use crate::{Result, RuntimeError};

/// Where a plan's kernels run: on the caller (one thread) or on a shared pool of `threads`.
#[derive(Debug, Clone)]
pub struct IntraOpPool {
    pool: Option<Arc<ThreadPool>>,
}

impl IntraOpPool {
    /// The pool for `threads` workers: none for one thread, else the process's shared pool of
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
        let pool = ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(move |i| format!("strata-{threads}t-{i}"))
            .build()
            .map_err(|e| RuntimeError::ThreadPool {
                threads,
                reason: e.to_string(),
            })?;
        let pool = Arc::new(pool);
        pools.insert(threads, pool.clone());
        Ok(IntraOpPool { pool: Some(pool) })
    }

    /// Worker threads (1 when everything runs on the caller).
    pub fn threads(&self) -> usize {
        self.pool.as_ref().map_or(1, |p| p.current_num_threads())
    }

    /// Runs `f` with this pool as the current rayon pool (on the caller when there is none).
    pub fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match &self.pool {
            Some(pool) => pool.install(f),
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
        let caller = std::thread::current().id();
        assert_eq!(single.run(|| std::thread::current().id()), caller);
        assert_eq!(single.threads(), 1);

        let two = IntraOpPool::for_threads(2).unwrap();
        assert_eq!(two.threads(), 2);
        assert_eq!(two.run(rayon::current_num_threads), 2);
        assert_ne!(two.run(|| std::thread::current().id()), caller);
        let again = IntraOpPool::for_threads(2).unwrap();
        let (a, b) = (two.pool.unwrap(), again.pool.unwrap());
        assert!(Arc::ptr_eq(&a, &b), "same size, same pool");
    }
}
