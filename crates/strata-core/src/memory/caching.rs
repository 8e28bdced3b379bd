//! The caching allocator (M5): freed blocks go into size-class buckets and are handed out again,
//! so steady-state allocation never reaches the system allocator.

use std::collections::HashMap;
use std::fmt;
use std::ptr::NonNull;

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::align::{align_up, DEFAULT_ALIGNMENT};
use crate::memory::allocator::dangling;
use crate::memory::thread_cache;
use crate::{Allocator, AllocatorStats, CoreError, CpuAllocator, Device, MemoryKind, Result};

/// Alignments up to this share buckets: every cached block is allocated with at least it.
const BUCKET_ALIGN: usize = DEFAULT_ALIGNMENT;
/// Number of size-class buckets: enough for every `usize` size (see [`SizeClass::of`]).
const BUCKETS: usize = 4 + 54 * 4;

/// A size class: at most four classes per power of two, so rounding wastes at most 25%, and
/// every class is a multiple of 256 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeClass {
    pub index: usize,
    pub bytes: usize,
}

impl SizeClass {
    /// The class serving a request of `bytes` (> 0).
    #[inline]
    pub fn of(bytes: usize) -> Result<SizeClass> {
        if bytes <= 256 {
            return Ok(SizeClass {
                index: 0,
                bytes: 256,
            });
        }
        // 2^k < bytes <= 2^(k+1), k >= 8.
        let k = (usize::BITS - 1 - (bytes - 1).leading_zeros()) as usize;
        let step = ((1usize << k) / 4).max(256);
        let rounded = align_up(bytes, step)?;
        let index = match k {
            8 => 1,
            9 => 2 + rounded / 256 - 3,
            _ => 4 + (k - 10) * 4 + rounded / step - 5,
        };
        Ok(SizeClass {
            index,
            bytes: rounded,
        })
    }
}

/// Memory handed back to the cache. Only ever touched under the allocator's lock.
struct CachedPtr(NonNull<u8>);

// SAFETY: a cached pointer is plain memory owned by the cache; it is moved between threads only
// under the mutex and is never dereferenced by the cache itself.
unsafe impl Send for CachedPtr {}

#[derive(Default)]
struct CacheState {
    /// Buckets for alignments up to `BUCKET_ALIGN`, indexed by size class.
    buckets: Vec<Vec<CachedPtr>>,
    /// Buckets for larger alignments, keyed by (class bytes, alignment).
    over_aligned: HashMap<(usize, usize), Vec<CachedPtr>>,
    stats: AllocatorStats,
}

impl CacheState {
    fn bucket(&mut self, class: SizeClass, align: usize) -> &mut Vec<CachedPtr> {
        if align <= BUCKET_ALIGN {
            &mut self.buckets[class.index]
        } else {
            self.over_aligned.entry((class.bytes, align)).or_default()
        }
    }
}

/// The lock around the cache's state. Its critical sections are a few dozen instructions (a
/// bucket push or pop and counter updates), on the path of every tensor creation and drop, so
/// it is a spin lock: one atomic read-modify-write to take it and a plain release store to
/// drop it, where a mutex pays a read-modify-write for both. Waiters spin briefly, then yield
/// the CPU, so a holder that was preempted gets to run and release it.
struct CacheLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through a `CacheGuard`, and at most one guard exists at a
// time (the `locked` flag is taken with Acquire and released with Release), so sharing the
// lock between threads only ever moves `T` between them, one at a time.
unsafe impl<T: Send> Sync for CacheLock<T> {}

impl<T> CacheLock<T> {
    fn new(value: T) -> Self {
        CacheLock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    #[inline]
    fn lock(&self) -> CacheGuard<'_, T> {
        if self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
        CacheGuard { lock: self }
    }

    #[cold]
    fn lock_contended(&self) {
        let mut spins = 0u32;
        loop {
            while self.locked.load(Ordering::Relaxed) {
                if spins < 16 {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
            if self
                .locked
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }
}

/// Exclusive access to the cache state; releases the lock on drop.
struct CacheGuard<'a, T> {
    lock: &'a CacheLock<T>,
}

impl<T> Deref for CacheGuard<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: this guard holds the lock, so no other reference to the value exists.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for CacheGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference through the guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for CacheGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

/// A caching allocator over any backing allocator (the CPU one by default, a device one later).
pub struct CachingAllocator<A: Allocator = CpuAllocator> {
    backing: A,
    kind: MemoryKind,
    state: CacheLock<CacheState>,
}

impl CachingAllocator<CpuAllocator> {
    /// A cache over fresh aligned host memory.
    pub fn cpu() -> Self {
        CachingAllocator::new(CpuAllocator::new())
    }
}

impl<A: Allocator> CachingAllocator<A> {
    pub fn new(backing: A) -> Self {
        let state = CacheState {
            buckets: (0..BUCKETS).map(|_| Vec::new()).collect(),
            ..CacheState::default()
        };
        CachingAllocator {
            backing,
            kind: MemoryKind::Default,
            state: CacheLock::new(state),
        }
    }

    /// Names the memory kind this cache serves, for error messages.
    pub fn with_kind(mut self, kind: MemoryKind) -> Self {
        self.kind = kind;
        self
    }

    pub fn backing(&self) -> &A {
        &self.backing
    }

    fn effective_align(align: usize) -> usize {
        align.max(BUCKET_ALIGN)
    }
}

impl<A: Allocator> Allocator for CachingAllocator<A> {
    fn allocate(&self, bytes: usize, align: usize) -> Result<NonNull<u8>> {
        crate::align::check_alignment(align)?;
        if bytes == 0 {
            return Ok(dangling(align));
        }
        let class = SizeClass::of(bytes).map_err(|_| CoreError::OutOfMemory {
            bytes,
            device: self.backing.device(),
            kind: self.kind,
            reason: "the request exceeds the largest size class".into(),
        })?;
        let align = Self::effective_align(align);
        {
            let mut state = self.state.lock();
            if let Some(CachedPtr(ptr)) = state.bucket(class, align).pop() {
                let s = &mut state.stats;
                s.cached_bytes -= class.bytes;
                s.active_bytes += class.bytes;
                s.peak_active_bytes = s.peak_active_bytes.max(s.active_bytes);
                s.active_allocations += 1;
                s.allocations += 1;
                s.cache_hits += 1;
                return Ok(ptr);
            }
        }
        let ptr = match self.backing.allocate(class.bytes, align) {
            Ok(ptr) => ptr,
            Err(_) => {
                // Free what the cache holds and try exactly once more.
                self.release_cached();
                self.backing
                    .allocate(class.bytes, align)
                    .map_err(|err| CoreError::OutOfMemory {
                        bytes,
                        device: self.backing.device(),
                        kind: self.kind,
                        reason: format!("after releasing the cache: {err}"),
                    })?
            }
        };
        let mut state = self.state.lock();
        let s = &mut state.stats;
        s.active_bytes += class.bytes;
        s.reserved_bytes += class.bytes;
        s.peak_active_bytes = s.peak_active_bytes.max(s.active_bytes);
        s.active_allocations += 1;
        s.allocations += 1;
        Ok(ptr)
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, bytes: usize, align: usize) {
        if bytes == 0 {
            return;
        }
        // `allocate(bytes, _)` succeeded, so the class of `bytes` is computable.
        let Ok(class) = SizeClass::of(bytes) else {
            return;
        };
        let align = Self::effective_align(align);
        let mut state = self.state.lock();
        state.bucket(class, align).push(CachedPtr(ptr));
        let s = &mut state.stats;
        s.active_bytes -= class.bytes;
        s.cached_bytes += class.bytes;
        s.active_allocations -= 1;
    }

    fn device(&self) -> Device {
        self.backing.device()
    }

    fn stats(&self) -> AllocatorStats {
        let mut stats = self.state.lock().stats;
        // Blocks parked in per-thread caches are still active in the shared counters.
        let parked = thread_cache::folded_for_allocator((self as *const Self).cast());
        // (Saturating: the parked counters are read after the shared ones.)
        stats.active_bytes = stats.active_bytes.saturating_sub(parked.parked_class_bytes);
        stats.cached_bytes += parked.parked_class_bytes;
        stats.active_allocations = stats
            .active_allocations
            .saturating_sub(parked.parked_blocks);
        stats.allocations += parked.hits;
        stats.cache_hits += parked.hits;
        stats
    }

    fn caches_blocks(&self) -> bool {
        true
    }

    fn release_cached(&self) {
        // Take everything out under the lock and account for it there, then give the memory
        // back with the lock released, so other threads are not held up by the frees.
        let (freed, over) = {
            let mut state = self.state.lock();
            let mut freed = Vec::new();
            for (index, bucket) in state.buckets.iter_mut().enumerate() {
                if bucket.is_empty() {
                    // (The largest classes' sizes do not even fit in usize.)
                    continue;
                }
                let class_bytes = class_bytes_of_index(index);
                freed.extend(bucket.drain(..).map(|p| (p, class_bytes, BUCKET_ALIGN)));
            }
            let mut over = Vec::new();
            for ((bytes, align), bucket) in state.over_aligned.drain() {
                over.extend(bucket.into_iter().map(|p| (p, bytes, align)));
            }
            let released: usize = freed.iter().chain(&over).map(|&(_, bytes, _)| bytes).sum();
            state.stats.cached_bytes -= released;
            state.stats.reserved_bytes -= released;
            (freed, over)
        };
        for (CachedPtr(ptr), bytes, align) in freed {
            // SAFETY: every cached pointer came from `backing.allocate(class.bytes, align)` with
            // the class of its bucket, and the cache held its only reference (now taken out of
            // the cache, so no one else can hand it out).
            unsafe { self.backing.deallocate(ptr, bytes, align) };
        }
        for (CachedPtr(ptr), bytes, align) in over {
            // SAFETY: as above; over-aligned buckets are keyed by the exact size and alignment.
            unsafe { self.backing.deallocate(ptr, bytes, align) };
        }
    }
}

/// The byte size of the class with this bucket index (inverse of [`SizeClass::of`]).
fn class_bytes_of_index(index: usize) -> usize {
    match index {
        0 => 256,
        1 => 512,
        2 | 3 => (index - 2 + 3) * 256,
        _ => {
            let k = (index - 4) / 4 + 10;
            let step = (1usize << k) / 4;
            ((index - 4) % 4 + 5) * step
        }
    }
}

impl<A: Allocator> Drop for CachingAllocator<A> {
    fn drop(&mut self) {
        self.release_cached();
    }
}

impl<A: Allocator> fmt::Debug for CachingAllocator<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachingAllocator")
            .field("backing", &self.backing)
            .field("kind", &self.kind)
            .field("stats", &self.stats())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_cover_and_bound_waste() {
        let mut last = SizeClass::of(1).unwrap();
        for bytes in (1..200_000)
            .step_by(37)
            .chain([1 << 20, (1 << 20) + 1, 1 << 40])
        {
            let c = SizeClass::of(bytes).unwrap();
            assert!(
                c.bytes >= bytes && c.bytes.is_multiple_of(256),
                "{bytes} -> {c:?}"
            );
            assert!(c.bytes <= bytes + bytes / 4 + 256, "{bytes} -> {c:?}");
            assert!(c.index >= last.index && c.index < BUCKETS);
            assert_eq!(class_bytes_of_index(c.index), c.bytes, "{bytes}");
            last = c;
        }
        assert_eq!(SizeClass::of(1000).unwrap().bytes, 1024);
        assert_eq!(SizeClass::of(257).unwrap().bytes, 512);
        assert!(SizeClass::of(usize::MAX).is_err());
    }

    #[test]
    fn recycles_and_counts_hits() {
        let a = CachingAllocator::cpu();
        let p = a.allocate(24, 256).unwrap();
        // SAFETY: p came from allocate(24, 256).
        unsafe { a.deallocate(p, 24, 256) };
        let q = a.allocate(200, 64).unwrap();
        assert_eq!(p, q, "same size class must reuse the block");
        let s = a.stats();
        assert_eq!(
            (s.allocations, s.cache_hits, s.active_bytes, s.cached_bytes),
            (2, 1, 256, 0)
        );
        assert!((s.hit_rate() - 0.5).abs() < 1e-9);
        // SAFETY: q came from allocate(200, 64).
        unsafe { a.deallocate(q, 200, 64) };
        assert_eq!(a.stats().cached_bytes, 256);
        a.release_cached();
        let s = a.stats();
        assert_eq!(
            (
                s.cached_bytes,
                s.reserved_bytes,
                a.backing().stats().active_bytes
            ),
            (0, 0, 0)
        );
    }

    #[test]
    fn over_aligned_requests_get_their_alignment() {
        let a = CachingAllocator::cpu();
        let p = a.allocate(100, 4096).unwrap();
        assert_eq!(p.as_ptr() as usize % 4096, 0);
        // SAFETY: p came from allocate(100, 4096).
        unsafe { a.deallocate(p, 100, 4096) };
        let q = a.allocate(100, 4096).unwrap();
        assert_eq!(p, q);
        // SAFETY: q came from allocate(100, 4096).
        unsafe { a.deallocate(q, 100, 4096) };
    }

    #[test]
    fn releases_cache_and_retries_once_on_failure() {
        // The backing allocator holds at most 4 KiB: a cached 4 KiB block blocks a new request
        // of another class until the cache is released.
        let a =
            CachingAllocator::new(CpuAllocator::with_limit(4096)).with_kind(MemoryKind::Workspace);
        let p = a.allocate(4096, 256).unwrap();
        // SAFETY: p came from allocate(4096, 256).
        unsafe { a.deallocate(p, 4096, 256) };
        assert_eq!(a.stats().cached_bytes, 4096);
        let q = a.allocate(3000, 256).unwrap();
        assert_eq!(a.stats().cached_bytes, 0);
        let err = a.allocate(4096, 256).unwrap_err();
        match err {
            CoreError::OutOfMemory {
                bytes,
                device,
                kind,
                ..
            } => {
                assert_eq!(
                    (bytes, device, kind),
                    (4096, Device::Cpu, MemoryKind::Workspace)
                );
            }
            other => panic!("unexpected {other:?}"),
        }
        // SAFETY: q came from allocate(3000, 256).
        unsafe { a.deallocate(q, 3000, 256) };
    }
}
