//! Parallel loops for kernels, on the intra-op pool installed on the calling thread.
//!
//! The runtime installs a plan's [`ThreadPool`] around each run ([`install`]); kernels ask how
//! many threads they may use ([`threads`]) to size their split, and run the pieces with
//! [`for_each_index`] or one of the chunked forms. With no pool installed — one thread, a kernel
//! called directly, or a task already running on a worker — every loop runs on the caller, in
//! order, with no synchronization at all.

mod pool;

use std::cell::Cell;

pub use pool::ThreadPool;

thread_local! {
    /// The pool installed on this thread, as a pointer valid while [`install`] runs.
    static CURRENT: Cell<*const ThreadPool> = const { Cell::new(std::ptr::null()) };
}

/// Restores the previously installed pool, on return and on unwind.
struct Restore(*const ThreadPool);

impl Drop for Restore {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.0));
    }
}

/// Runs `f` with `pool` as this thread's intra-op pool.
pub fn install<R>(pool: &ThreadPool, f: impl FnOnce() -> R) -> R {
    let previous = CURRENT.with(|c| c.replace(pool));
    let _restore = Restore(previous);
    f()
}

fn with_current<R>(f: impl FnOnce(Option<&ThreadPool>) -> R) -> R {
    let pool = CURRENT.with(Cell::get);
    // SAFETY: a non-null pointer was set by `install` from a reference that outlives the
    // closure it runs, and `Restore` resets it before that reference can end.
    f(unsafe { pool.as_ref() })
}

/// Threads a kernel called here may split its work over (1 without a pool).
pub fn threads() -> usize {
    with_current(|pool| pool.map_or(1, ThreadPool::threads))
}

/// Runs `task(i)` for every `i < count`, spread over the current pool; returns when all are done.
pub fn for_each_index(count: usize, task: impl Fn(usize) + Sync) {
    with_current(|pool| match pool {
        Some(pool) if count > 1 => pool.run(count, &task),
        _ => (0..count).for_each(task),
    })
}

/// As [`for_each_index`] with `count` at most [`threads`], task `i` always on the same thread
/// (the caller runs task 0): a kernel that splits the same data the same way on every run keeps
/// each part in the cache of the core that works on it (weights split by columns stay in the
/// cores' L2 caches from one run to the next).
pub fn for_each_thread(count: usize, task: impl Fn(usize) + Sync) {
    with_current(|pool| match pool {
        Some(pool) if count > 1 => pool.run_pinned(count, &task),
        _ => (0..count).for_each(task),
    })
}

/// As [`for_each_index`], for fallible tasks: every task runs, and the first error (in index
/// order among those that failed) is returned.
pub fn try_for_each_index<E: Send>(
    count: usize,
    task: impl Fn(usize) -> Result<(), E> + Sync,
) -> Result<(), E> {
    let first: std::sync::Mutex<Option<(usize, E)>> = std::sync::Mutex::new(None);
    for_each_index(count, |i| {
        if let Err(e) = task(i) {
            let mut slot = first.lock().unwrap_or_else(|p| p.into_inner());
            if slot.as_ref().is_none_or(|(at, _)| i < *at) {
                *slot = Some((i, e));
            }
        }
    });
    match first.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

/// A pointer that may cross to the pool's threads; users hand each task a disjoint part.
#[derive(Clone, Copy)]
struct SharedMut<T>(*mut T);
// SAFETY: only used below, where every task touches a disjoint range of the pointee slice, and
// the elements themselves may be sent between threads.
unsafe impl<T: Send> Send for SharedMut<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for SharedMut<T> {}

impl<T> SharedMut<T> {
    /// Chunk `index` of `chunk_len` elements (the last one shorter) of a slice of `len`.
    ///
    /// # Safety
    /// `self` points to a live slice of `len` elements, and no other reference to this chunk
    /// exists while the returned one does.
    #[allow(clippy::mut_from_ref)]
    unsafe fn chunk(&self, len: usize, chunk_len: usize, index: usize) -> &mut [T] {
        let start = index * chunk_len;
        let end = (start + chunk_len).min(len);
        // SAFETY: start <= end <= len (index < len.div_ceil(chunk_len)), and exclusivity is the
        // caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(start), end - start) }
    }
}

/// A chunk length of 0 means the whole slice (one chunk, even when empty).
fn chunk_len_or_all(chunk_len: usize, len: usize) -> usize {
    if chunk_len == 0 {
        len.max(1)
    } else {
        chunk_len
    }
}

/// Runs `task(i, chunk)` for each `chunk_len`-element chunk of `data` (the last may be shorter),
/// spread over the current pool, `per_task` consecutive chunks to a task (for chunks too small
/// to be worth a task each). Every chunk runs; the first error in chunk order is returned.
pub fn try_for_each_chunk_mut<T: Send, E: Send>(
    data: &mut [T],
    chunk_len: usize,
    per_task: usize,
    task: impl Fn(usize, &mut [T]) -> Result<(), E> + Sync,
) -> Result<(), E> {
    let len = data.len();
    let chunk_len = chunk_len_or_all(chunk_len, len);
    let per_task = per_task.max(1);
    let group_len = chunk_len.saturating_mul(per_task);
    let base = SharedMut(data.as_mut_ptr());
    try_for_each_index(len.div_ceil(group_len), |t| {
        // SAFETY: `data` is borrowed mutably for this whole call; groups of distinct indices
        // are disjoint and each index runs exactly once.
        let group = unsafe { base.chunk(len, group_len, t) };
        let mut first = Ok(());
        for (j, chunk) in group.chunks_mut(chunk_len).enumerate() {
            let result = task(t * per_task + j, chunk);
            if first.is_ok() {
                first = result;
            }
        }
        first
    })
}

/// As [`try_for_each_chunk_mut`], for tasks that cannot fail.
pub fn for_each_chunk_mut<T: Send>(
    data: &mut [T],
    chunk_len: usize,
    per_task: usize,
    task: impl Fn(usize, &mut [T]) + Sync,
) {
    let result: Result<(), std::convert::Infallible> =
        try_for_each_chunk_mut(data, chunk_len, per_task, |i, chunk| {
            task(i, chunk);
            Ok(())
        });
    let Ok(()) = result;
}

/// As [`for_each_chunk_mut`], with the chunks split into one contiguous part per thread of the
/// current pool, each part on the same thread on every call ([`for_each_thread`]): a kernel
/// run over the same data again (the next run of the plan) finds its part of the output in
/// its own core's cache instead of another core's. `task(i, chunk)` sees chunk indices as
/// [`for_each_chunk_mut`] does.
pub fn for_each_chunk_mut_pinned<T: Send>(
    data: &mut [T],
    chunk_len: usize,
    task: impl Fn(usize, &mut [T]) + Sync,
) {
    let len = data.len();
    if len == 0 {
        return;
    }
    let chunk_len = chunk_len_or_all(chunk_len, len);
    let chunks = len.div_ceil(chunk_len);
    let parts = threads().min(chunks);
    let per_part = chunks.div_ceil(parts);
    let part_len = per_part * chunk_len;
    let base = SharedMut(data.as_mut_ptr());
    for_each_thread(len.div_ceil(part_len), |t| {
        // SAFETY: `data` is borrowed mutably for this whole call; parts of distinct indices are
        // disjoint and each index runs exactly once.
        let part = unsafe { base.chunk(len, part_len, t) };
        for (j, chunk) in part.chunks_mut(chunk_len).enumerate() {
            task(t * per_part + j, chunk);
        }
    });
}

/// Runs `task(i, a_chunk, b_chunk)` over matching chunks of two slices: chunk `i` of `a`
/// (`a_chunk_len` elements) with chunk `i` of `b` (`b_chunk_len`), `per_task` pairs to a task.
/// Runs as many pairs as the shorter chunking has chunks; the first error in order is returned.
pub fn try_for_each_chunk_pair_mut<A: Send, B: Send, E: Send>(
    (a, a_chunk_len): (&mut [A], usize),
    (b, b_chunk_len): (&mut [B], usize),
    per_task: usize,
    task: impl Fn(usize, &mut [A], &mut [B]) -> Result<(), E> + Sync,
) -> Result<(), E> {
    let (a_len, b_len) = (a.len(), b.len());
    let a_chunk_len = chunk_len_or_all(a_chunk_len, a_len);
    let b_chunk_len = chunk_len_or_all(b_chunk_len, b_len);
    let count = a_len.div_ceil(a_chunk_len).min(b_len.div_ceil(b_chunk_len));
    let per_task = per_task.max(1);
    let (a_base, b_base) = (SharedMut(a.as_mut_ptr()), SharedMut(b.as_mut_ptr()));
    try_for_each_index(count.div_ceil(per_task), |t| {
        let mut first = Ok(());
        for i in t * per_task..((t + 1) * per_task).min(count) {
            // SAFETY: as in `try_for_each_chunk_mut`, for each of the two slices: chunk `i`
            // belongs to this task only.
            let (x, y) = unsafe {
                (
                    a_base.chunk(a_len, a_chunk_len, i),
                    b_base.chunk(b_len, b_chunk_len, i),
                )
            };
            let result = task(i, x, y);
            if first.is_ok() {
                first = result;
            }
        }
        first
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn without_a_pool_loops_run_in_order_on_the_caller() {
        assert_eq!(threads(), 1);
        let order = std::sync::Mutex::new(Vec::new());
        for_each_index(5, |i| order.lock().unwrap().push(i));
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn install_sets_and_restores_the_current_pool() {
        let pool = ThreadPool::new(2).unwrap();
        install(&pool, || {
            assert_eq!(threads(), 2);
            let inner = ThreadPool::new(3).unwrap();
            install(&inner, || assert_eq!(threads(), 3));
            assert_eq!(threads(), 2);
        });
        assert_eq!(threads(), 1);
    }

    #[test]
    fn chunks_are_disjoint_and_cover_the_slice() {
        let pool = ThreadPool::new(2).unwrap();
        let mut data = vec![0usize; 1003];
        install(&pool, || {
            for_each_chunk_mut(&mut data, 10, 1, |i, chunk| {
                assert!(chunk.len() == 10 || (i == 100 && chunk.len() == 3));
                chunk.iter_mut().for_each(|x| *x += i + 1);
            })
        });
        assert!(data.iter().enumerate().all(|(j, &x)| x == j / 10 + 1));
        install(&pool, || {
            for_each_chunk_mut(&mut data, 10, 7, |i, chunk| {
                chunk.iter_mut().for_each(|x| *x = i);
            })
        });
        assert!(data.iter().enumerate().all(|(j, &x)| x == j / 10));

        let (mut a, mut b) = (vec![0u8; 12], vec![0u32; 8]);
        let failed = install(&pool, || {
            try_for_each_chunk_pair_mut((&mut a, 3), (&mut b, 2), 3, |i, x, y| {
                x.fill(i as u8 + 1);
                y.fill(i as u32 + 1);
                if i == 2 {
                    Err(i)
                } else {
                    Ok(())
                }
            })
        });
        assert_eq!(failed, Err(2), "every pair runs, the error is reported");
        assert_eq!(a, [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]);
        assert_eq!(b, [1, 1, 2, 2, 3, 3, 4, 4]);
    }

    /// Pinned chunks: every chunk once with its index, in contiguous parts, each part on the
    /// same thread on every call.
    #[test]
    fn pinned_chunks_cover_the_slice_and_stay_on_their_thread() {
        let pool = ThreadPool::new(2).unwrap();
        let mut data = vec![0usize; 103];
        let owner = |data: &mut [usize]| {
            install(&pool, || {
                for_each_chunk_mut_pinned(data, 10, |i, chunk| {
                    let me = std::thread::current().id();
                    let tag = if me == std::thread::current().id() {
                        i + 1
                    } else {
                        0
                    };
                    for (j, v) in chunk.iter_mut().enumerate() {
                        *v = tag * 1000 + j;
                    }
                })
            })
        };
        owner(&mut data);
        for (at, &v) in data.iter().enumerate() {
            assert_eq!(v, (at / 10 + 1) * 1000 + at % 10, "element {at}");
        }
        let thread_of = |data: &mut [usize]| {
            let ids = std::sync::Mutex::new(vec![None; data.len().div_ceil(10)]);
            install(&pool, || {
                for_each_chunk_mut_pinned(data, 10, |i, _| {
                    ids.lock().unwrap()[i] = Some(std::thread::current().id());
                })
            });
            ids.into_inner().unwrap()
        };
        let first = thread_of(&mut data);
        assert!(first.iter().all(Option::is_some));
        assert_eq!(
            first[0],
            Some(std::thread::current().id()),
            "the caller runs part 0"
        );
        for _ in 0..5 {
            assert_eq!(thread_of(&mut data), first);
        }
        for_each_chunk_mut_pinned(&mut [0u8; 0], 4, |_, _| panic!("no chunks"));
    }

    #[test]
    fn try_for_each_reports_the_first_error_in_index_order() {
        let pool = ThreadPool::new(2).unwrap();
        let ran = AtomicUsize::new(0);
        let result = install(&pool, || {
            try_for_each_index(50, |i| {
                ran.fetch_add(1, Ordering::Relaxed);
                if i % 7 == 3 {
                    Err(i)
                } else {
                    Ok(())
                }
            })
        });
        assert_eq!(result, Err(3));
        assert_eq!(ran.load(Ordering::Relaxed), 50);
    }
}
