//! strata's intra-op thread pool: persistent workers that spin briefly after their last task and
//! then park, and a fork-join that costs one atomic store to start and a few cache misses to end.
//!
//! A *job* is `count` tasks `0..count` of one closure that lives on the calling thread's stack.
//! It is published in one atomic word, the *ticket* (epoch, task count, next task); every
//! participant — the workers and the calling thread itself — claims the next task with a
//! compare-and-swap on that word. A worker reads the job's address between loading the ticket and
//! claiming from it; a claim that succeeds proves the job was still open when the address was
//! read (the caller publishes a new job only after every task of the old one has finished), so a
//! late worker can never run a task of a job that has returned. The epoch makes every job's
//! tickets distinct, so a stale snapshot never matches a newer job's ticket by accident.
//!
//! A job carries the caller's memory budget (`strata_core::MemoryBudget`), installed around each
//! task, so what a task allocates on a worker is charged where the caller's allocations are.
//!
//! One job runs at a time: a second caller (another context sharing the pool, or a task that
//! itself asks for parallel work) finds the pool busy and runs its tasks inline. A panic in a
//! task is caught where it happens and re-raised on the calling thread after the join.

use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use strata_core::MemoryBudget;

/// How long an idle worker spins (watching for a new job) before it parks. Kernels of one graph
/// follow each other within microseconds, so a worker that just finished a task will usually
/// see the next job while spinning, and waking a parked thread costs tens of microseconds.
const SPIN: Duration = Duration::from_micros(300);

/// Largest task count of one job (the ticket keeps it in 15 bits); larger counts are grouped.
const MAX_TASKS: usize = (PINNED - 1) as usize;

/// The ticket: epoch in the high 32 bits, task count in the next 16, and in the low 16 either the
/// next unclaimed task or, for a *pinned* job (task `i` runs on participant `i`), the mask of
/// claimed tasks. A pinned job's count carries [`PINNED`].
#[derive(Clone, Copy, PartialEq, Eq)]
struct Ticket {
    epoch: u32,
    count: u16,
    next: u16,
}

/// Marks a pinned job in the ticket's count.
const PINNED: u16 = 1 << 15;
/// Most tasks of a pinned job (one claim bit each in the ticket's low 16 bits, kept clear of
/// the top one); larger pinned jobs run unpinned.
const MAX_PINNED: usize = 15;

impl Ticket {
    fn pack(self) -> u64 {
        (u64::from(self.epoch) << 32) | (u64::from(self.count) << 16) | u64::from(self.next)
    }

    fn unpack(word: u64) -> Self {
        Ticket {
            epoch: (word >> 32) as u32,
            count: (word >> 16) as u16,
            next: word as u16,
        }
    }

    /// The task participant `who` may claim next (0 is the calling thread, worker `w` is
    /// `w + 1`), and the ticket once it is claimed.
    fn claim(self, who: usize) -> Option<(usize, Ticket)> {
        if self.count & PINNED != 0 {
            let count = usize::from(self.count & !PINNED);
            let bit = 1u16.checked_shl(who as u32)?;
            (who < count && self.next & bit == 0).then_some((
                who,
                Ticket {
                    next: self.next | bit,
                    ..self
                },
            ))
        } else {
            (self.next < self.count).then_some((
                usize::from(self.next),
                Ticket {
                    next: self.next + 1,
                    ..self
                },
            ))
        }
    }
}

/// The part of a job a worker touches: the task runner, the count of finished tasks and the
/// first panic. It lives on the calling thread's stack for the length of [`ThreadPool::run`].
struct Job<'a> {
    task: &'a (dyn Fn(usize) + Sync),
    /// The caller's memory budget, if one is installed.
    budget: Option<Arc<MemoryBudget>>,
    finished: AtomicUsize,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

impl Job<'_> {
    /// Runs task `index`, keeping a panic for the caller, then counts it finished. The count is
    /// the job's last access by this thread: once the caller sees every task counted it returns
    /// and the job is gone.
    fn execute(&self, index: usize) {
        let run = || match &self.budget {
            Some(budget) => budget.install(|| (self.task)(index)),
            None => (self.task)(index),
        };
        if let Err(payload) = catch_unwind(AssertUnwindSafe(run)) {
            let mut slot = self.panic.lock().unwrap_or_else(|p| p.into_inner());
            slot.get_or_insert(payload);
        }
        self.finished.fetch_add(1, Ordering::Release);
    }
}

struct Shared {
    ticket: AtomicU64,
    /// The current job, as `*const Job<'static>` with its lifetime erased.
    job: AtomicPtr<()>,
    /// Held by the caller whose job is published; others run inline.
    busy: AtomicBool,
    sleepers: AtomicUsize,
    shutdown: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

impl Shared {
    /// Claims and runs tasks of the published job for participant `who` until none is left to
    /// claim; returns whether it ran any.
    fn work(&self, who: usize) -> bool {
        let mut ran = false;
        loop {
            let word = self.ticket.load(Ordering::Acquire);
            let Some((task, claimed)) = Ticket::unpack(word).claim(who) else {
                return ran;
            };
            let job = self.job.load(Ordering::Acquire) as *const Job<'static>;
            if self
                .ticket
                .compare_exchange_weak(word, claimed.pack(), Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                // SAFETY: the claim succeeded on a ticket with an unclaimed task, so the job that
                // ticket belongs to had not finished when `job` was loaded (its caller waits for
                // all `count` tasks, and this one was not even claimed), and the caller stores
                // the job's address before publishing its ticket (release/acquire on `ticket`)
                // and a new address only after the job finished. So `job` points to the live job
                // of this ticket, which stays alive until this task is counted finished.
                unsafe { (*job).execute(task) };
                ran = true;
            }
        }
    }

    fn worker_loop(&self, who: usize) {
        let mut idle_since = Instant::now();
        while !self.shutdown.load(Ordering::Acquire) {
            if self.work(who) {
                idle_since = Instant::now();
                continue;
            }
            if idle_since.elapsed() < SPIN {
                for _ in 0..64 {
                    std::hint::spin_loop();
                }
                continue;
            }
            // Park. The sleeper count is raised before the ticket is re-checked and the caller
            // publishes before it reads the count (both SeqCst), so either this worker sees the
            // new job or the caller sees a sleeper and notifies under the lock we hold.
            let guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.sleepers.fetch_add(1, Ordering::SeqCst);
            let ticket = Ticket::unpack(self.ticket.load(Ordering::SeqCst));
            let has_work = ticket.claim(who).is_some();
            if !has_work && !self.shutdown.load(Ordering::SeqCst) {
                drop(self.wake.wait(guard).unwrap_or_else(|p| p.into_inner()));
            } else {
                drop(guard);
            }
            self.sleepers.fetch_sub(1, Ordering::SeqCst);
            idle_since = Instant::now();
        }
    }
}

/// A pool of `threads - 1` persistent workers; the thread that runs a job is the last worker.
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    threads: usize,
}

impl std::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadPool")
            .field("threads", &self.threads)
            .finish()
    }
}

impl ThreadPool {
    /// A pool that runs jobs on `threads` threads: the caller and `threads - 1` workers named
    /// `strata-{threads}t-{i}`.
    pub fn new(threads: usize) -> std::io::Result<Self> {
        let threads = threads.max(1);
        let shared = Arc::new(Shared {
            ticket: AtomicU64::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            busy: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let mut pool = ThreadPool {
            shared,
            workers: Vec::with_capacity(threads - 1),
            threads,
        };
        for i in 0..threads - 1 {
            let shared = pool.shared.clone();
            let handle = std::thread::Builder::new()
                .name(format!("strata-{threads}t-{i}"))
                .spawn(move || shared.worker_loop(i + 1))?;
            pool.workers.push(handle);
        }
        Ok(pool)
    }

    /// Threads a job runs on, the caller included.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `task(i)` for every `i < count` on the pool and the calling thread, returning when
    /// all have finished. Runs them all on the caller, in order, when the pool is busy with
    /// another job. A task's panic is re-raised here after the join.
    pub fn run(&self, count: usize, task: &(dyn Fn(usize) + Sync)) {
        self.run_job(count, false, task)
    }

    /// Runs `task(i)` for every `i < count` (at most [`ThreadPool::threads`]) with task `i` on
    /// participant `i` — the caller runs task 0, worker `w` task `w + 1` — so that a kernel
    /// splitting the same data the same way on every call finds each part in the cache of the
    /// core that used it last (a weight matrix split by columns stays in the cores' L2 caches).
    /// More tasks than threads, or a busy pool, run as [`ThreadPool::run`] does.
    pub fn run_pinned(&self, count: usize, task: &(dyn Fn(usize) + Sync)) {
        self.run_job(count, count <= self.threads.min(MAX_PINNED), task)
    }

    fn run_job(&self, count: usize, pinned: bool, task: &(dyn Fn(usize) + Sync)) {
        if count > MAX_TASKS {
            // More indices than a ticket counts: each task takes a contiguous run of them.
            let per_task = count.div_ceil(MAX_TASKS);
            let grouped = |t: usize| {
                (t * per_task..((t + 1) * per_task).min(count)).for_each(task);
            };
            return self.run(count.div_ceil(per_task), &grouped);
        }
        if count <= 1
            || self.threads == 1
            || self
                .shared
                .busy
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            (0..count).for_each(task);
            return;
        }
        let job = Job {
            task,
            budget: MemoryBudget::current(),
            finished: AtomicUsize::new(0),
            panic: Mutex::new(None),
        };
        let shared = &*self.shared;
        shared
            .job
            .store(&job as *const Job<'_> as *mut (), Ordering::Release);
        let epoch = Ticket::unpack(shared.ticket.load(Ordering::Relaxed))
            .epoch
            .wrapping_add(1);
        let ticket = Ticket {
            epoch,
            count: count as u16 | if pinned { PINNED } else { 0 },
            next: 0,
        };
        shared.ticket.store(ticket.pack(), Ordering::SeqCst);
        if shared.sleepers.load(Ordering::SeqCst) > 0 {
            let _guard = shared.lock.lock().unwrap_or_else(|p| p.into_inner());
            shared.wake.notify_all();
        }
        shared.work(0);
        while job.finished.load(Ordering::Acquire) < count {
            std::hint::spin_loop();
        }
        shared.busy.store(false, Ordering::Release);
        if let Some(payload) = job.panic.into_inner().unwrap_or_else(|p| p.into_inner()) {
            resume_unwind(payload);
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        {
            let _guard = self.shared.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.shared.wake.notify_all();
        }
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn ticket_round_trips() {
        let t = Ticket {
            epoch: 0xdead_beef,
            count: 513,
            next: 7,
        };
        let back = Ticket::unpack(t.pack());
        assert!(back == t);
        assert_eq!(back.claim(3).map(|(task, _)| task), Some(7));
        let pinned = Ticket {
            epoch: 1,
            count: 3 | PINNED,
            next: 0b010,
        };
        assert_eq!(
            pinned.claim(0).map(|(task, t)| (task, t.next)),
            Some((0, 0b011))
        );
        assert!(pinned.claim(1).is_none(), "already claimed");
        assert!(pinned.claim(3).is_none(), "no task 3");
        assert!(pinned.claim(40).is_none(), "no participant 40");
    }

    #[test]
    fn allocations_on_workers_are_charged_to_the_callers_budget() {
        use strata_core::{DType, Device, MemoryKind, Tensor};
        let pool = ThreadPool::new(2).unwrap();
        let budget = MemoryBudget::new(1 << 20);
        let outcomes = Mutex::new(vec![None; 2]);
        budget.install(|| {
            pool.run_pinned(2, &|i| {
                // Task 1 runs on the worker: 2 MiB is over the caller's 1 MiB limit there too.
                let len = if i == 1 { 1 << 19 } else { 16 };
                let made = Tensor::empty(&[len], DType::F32, Device::Cpu, MemoryKind::Workspace);
                outcomes.lock().unwrap()[i] = Some(made.is_ok());
            })
        });
        assert_eq!(
            outcomes.into_inner().unwrap(),
            vec![Some(true), Some(false)]
        );
        assert_eq!(budget.used(), 0, "what the tasks made was given back");
    }

    #[test]
    fn pinned_tasks_run_on_their_own_thread() {
        let pool = ThreadPool::new(3).unwrap();
        let caller = std::thread::current().id();
        for _ in 0..100 {
            let ids = Mutex::new(vec![None; 3]);
            pool.run_pinned(3, &|i| {
                ids.lock().unwrap()[i] = Some(std::thread::current().id());
            });
            let ids = ids.into_inner().unwrap();
            assert_eq!(ids[0], Some(caller));
            assert!(ids[1].is_some() && ids[2].is_some());
            assert!(ids[1] != ids[0] && ids[2] != ids[0] && ids[1] != ids[2]);
        }
        // More tasks than threads: every task still runs once.
        let hits: Vec<AtomicU32> = (0..7).map(|_| AtomicU32::new(0)).collect();
        pool.run_pinned(7, &|i| {
            hits[i].fetch_add(1, Ordering::Relaxed);
        });
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
    }

    #[test]
    fn every_task_runs_once_over_many_jobs() {
        let pool = ThreadPool::new(3).unwrap();
        for count in [0usize, 1, 2, 3, 7, 64, 1000, MAX_TASKS + 3] {
            for _ in 0..20 {
                let hits: Vec<AtomicU32> = (0..count).map(|_| AtomicU32::new(0)).collect();
                pool.run(count, &|i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
                assert!(
                    hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                    "count {count}"
                );
            }
        }
    }

    #[test]
    fn tasks_run_on_the_workers_too() {
        let pool = ThreadPool::new(2).unwrap();
        let caller = std::thread::current().id();
        let elsewhere = AtomicUsize::new(0);
        for _ in 0..200 {
            pool.run(64, &|_| {
                if std::thread::current().id() != caller {
                    elsewhere.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_micros(20));
            });
        }
        assert!(elsewhere.load(Ordering::Relaxed) > 0);
    }

    #[test]
    fn a_nested_job_runs_inline() {
        let pool = ThreadPool::new(2).unwrap();
        let total = AtomicUsize::new(0);
        pool.run(8, &|_| {
            pool.run(4, &|_| {
                total.fetch_add(1, Ordering::Relaxed);
            });
        });
        assert_eq!(total.load(Ordering::Relaxed), 32);
    }

    #[test]
    fn a_panic_is_raised_on_the_caller_and_the_pool_still_works() {
        let pool = ThreadPool::new(2).unwrap();
        let caught = catch_unwind(AssertUnwindSafe(|| {
            pool.run(16, &|i| assert!(i != 11, "task eleven"));
        }));
        assert!(caught.is_err());
        let done = AtomicUsize::new(0);
        pool.run(16, &|_| {
            done.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(done.load(Ordering::Relaxed), 16);
    }

    #[test]
    fn concurrent_callers_share_one_pool() {
        let pool = Arc::new(ThreadPool::new(2).unwrap());
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let pool = pool.clone();
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        let sum = AtomicUsize::new(0);
                        pool.run(33, &|i| {
                            sum.fetch_add(i, Ordering::Relaxed);
                        });
                        assert_eq!(sum.load(Ordering::Relaxed), 33 * 32 / 2);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }

    #[test]
    fn parked_workers_wake_for_a_new_job() {
        let pool = ThreadPool::new(2).unwrap();
        std::thread::sleep(SPIN * 4);
        let caller = std::thread::current().id();
        let elsewhere = AtomicUsize::new(0);
        pool.run(8, &|_| {
            if std::thread::current().id() != caller {
                elsewhere.fetch_add(1, Ordering::Relaxed);
            }
            std::thread::sleep(Duration::from_millis(2));
        });
        assert!(elsewhere.load(Ordering::Relaxed) > 0);
    }
}
