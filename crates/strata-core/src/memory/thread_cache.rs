//! Per-thread cache of whole small blocks (T8): the header (`Arc<MemoryBlock>`) and its memory
//! together, so creating and dropping a small tensor touches neither the system allocator (for
//! the header) nor the caching allocator's lock, nor any shared atomic counter.
//!
//! When the last handle on a small block of the global registry drops, the block is parked here
//! (keyed by route, length and alignment) instead of being freed; the next allocation of the
//! same key on this thread takes it back. Only blocks of routes whose allocator caches freed
//! blocks anyway ([`crate::Allocator::caches_blocks`]) are parked, at most [`DEPTH`] per key and
//! [`SLOTS`] keys per thread, each at most [`MAX_BYTES`]: a thread parks at most
//! `SLOTS × DEPTH × MAX_BYTES` = 32 KiB.
//!
//! Statistics stay exact when read: a parked block is still counted as allocated by the
//! ledger's and the allocator's shared counters, and every thread publishes how many blocks and
//! bytes it has parked and how many allocations it served from its cache, per route, in
//! counters only it writes (plain loads and stores, no read-modify-write). Reading the stats
//! folds those in ([`folded_for_ledger`], [`folded_for_allocator`]). One consequence: the peak
//! is updated only on allocations that reach the shared counters, where parked blocks still
//! count, so a peak may exceed the true one by at most the bytes parked at that moment.
//!
//! The parked blocks, bytes and size-class bytes of a route are packed into one word
//! ([`Parked`]), so parking or taking a block publishes with two plain stores (that word and the
//! hit count).

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::memory::caching::SizeClass;
use crate::memory::header_pool;
use crate::memory::ledger::KindLedger;
use crate::memory::route::Route;
use crate::MemoryBlock;

/// Largest block parked.
pub const MAX_BYTES: usize = 1024;
/// Keys (route, length, alignment) per thread.
pub const SLOTS: usize = 8;
/// Blocks parked per key.
pub const DEPTH: usize = 4;
/// Routes with counters per thread.
const ROUTES: usize = 4;

/// Blocks, bytes and size-class bytes parked, packed into one `u64`: 16 bits of blocks, then 24
/// bits each of bytes and class bytes. A thread parks at most `SLOTS × DEPTH` blocks of at most
/// `MAX_BYTES` bytes (a size class of such a block is at most `MAX_BYTES` too), so no field ever
/// overflows into the next, and adding or subtracting whole packed values is exact per field.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Parked(u64);

const BYTES_BITS: u32 = 24;
const _: () = assert!(SLOTS * DEPTH < 1 << 16);
const _: () = assert!(SLOTS * DEPTH * MAX_BYTES < 1 << BYTES_BITS);

impl Parked {
    /// What one block of `len` bytes in a size class of `class_bytes` adds.
    fn unit(len: usize, class_bytes: usize) -> u64 {
        debug_assert!(len <= MAX_BYTES && class_bytes <= MAX_BYTES);
        (1u64 << (2 * BYTES_BITS)) | ((len as u64) << BYTES_BITS) | class_bytes as u64
    }

    fn blocks(self) -> usize {
        (self.0 >> (2 * BYTES_BITS)) as usize
    }

    fn bytes(self) -> usize {
        ((self.0 >> BYTES_BITS) & ((1 << BYTES_BITS) - 1)) as usize
    }

    fn class_bytes(self) -> usize {
        (self.0 & ((1 << BYTES_BITS) - 1)) as usize
    }
}

/// One thread's counters for one route, written only by that thread.
#[derive(Default)]
struct RouteCounters {
    /// The route (a global-registry route, never freed); null while unused.
    route: AtomicPtr<Route>,
    /// Allocations served from this thread's cache.
    hits: AtomicU64,
    /// What is parked now ([`Parked`]).
    parked: AtomicU64,
}

impl RouteCounters {
    /// A hit by the owning thread: a load and a store, no read-modify-write.
    #[inline]
    fn count_hit(&self, unit: u64) {
        self.hits
            .store(self.hits.load(Ordering::Relaxed) + 1, Ordering::Release);
        self.add_parked(unit.wrapping_neg());
    }

    /// `parked += delta` (wrapping: a subtraction is the negated unit) by the owning thread.
    #[inline]
    fn add_parked(&self, delta: u64) {
        let v = self.parked.load(Ordering::Relaxed);
        self.parked.store(v.wrapping_add(delta), Ordering::Release);
    }
}

/// The counters a thread publishes. Kept for the life of the process; a thread that exits
/// leaves its entry for the next new thread (its hits keep counting), so entries do not grow
/// with thread churn.
#[derive(Default)]
struct Published {
    in_use: AtomicBool,
    routes: [RouteCounters; ROUTES],
}

static PUBLISHED: Mutex<Vec<&'static Published>> = Mutex::new(Vec::new());

fn claim_published() -> &'static Published {
    let mut all = PUBLISHED.lock().unwrap_or_else(|e| e.into_inner());
    for p in all.iter() {
        if p.in_use
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return p;
        }
    }
    let p: &'static Published = Box::leak(Box::default());
    p.in_use.store(true, Ordering::Release);
    all.push(p);
    p
}

/// Blocks parked under one key.
struct Slot {
    route: *const Route,
    len: usize,
    align: usize,
    /// This thread's counters for `route` (in its `Published`, which lives for the process);
    /// null until the slot is first keyed.
    counters: *const RouteCounters,
    /// What one block of this key adds to the counters ([`Parked::unit`]).
    unit: u64,
    count: usize,
    /// The first `count` entries hold blocks.
    blocks: [MaybeUninit<Arc<MemoryBlock>>; DEPTH],
}

const EMPTY_SLOT: Slot = Slot {
    route: ptr::null(),
    len: 0,
    align: 0,
    counters: ptr::null(),
    unit: 0,
    count: 0,
    blocks: [const { MaybeUninit::uninit() }; DEPTH],
};

impl Slot {
    #[inline]
    fn is_key(&self, route: *const Route, len: usize, align: usize) -> bool {
        self.len == len && self.align == align && ptr::eq(self.route, route)
    }
}

struct Cache {
    slots: [Slot; SLOTS],
    published: Option<&'static Published>,
}

/// The thread's cache. Only this thread touches it, and never re-entrantly: parking and taking
/// run no code that could reach the cache again (dropping a block here only happens after the
/// cache reference is gone, see `park`).
struct ThreadCache(UnsafeCell<Cache>);

impl Drop for ThreadCache {
    fn drop(&mut self) {
        let cache = self.0.get_mut();
        cache.drain(drop);
        if let Some(p) = cache.published {
            p.in_use.store(false, Ordering::Release);
        }
    }
}

thread_local! {
    static CACHE: ThreadCache = const {
        ThreadCache(UnsafeCell::new(Cache { slots: [EMPTY_SLOT; SLOTS], published: None }))
    };
}

/// Empties the calling thread's cache: its parked blocks go back to their allocators (which
/// `release_cached` then frees). Other threads keep theirs (at most 32 KiB each) until they
/// exit or empty their own.
pub(crate) fn flush_current() {
    let taken = CACHE
        .try_with(|cache| {
            // SAFETY: only this thread reaches its cache, and nothing below re-enters it (the
            // blocks are dropped after this closure, not while the cache is borrowed).
            let cache = unsafe { &mut *cache.0.get() };
            let mut taken = Vec::new();
            cache.drain(|block| taken.push(block));
            taken
        })
        .unwrap_or_default();
    // Dropped as plain blocks (not through `Storage`), so they are freed, not parked again.
    drop(taken);
}

impl Cache {
    /// Hands every parked block to `sink` and zeroes the published counts.
    fn drain(&mut self, mut sink: impl FnMut(Arc<MemoryBlock>)) {
        for slot in &mut self.slots {
            let count = std::mem::take(&mut slot.count);
            for block in &mut slot.blocks[..count] {
                // SAFETY: the first `count` entries held blocks; each is read exactly once, and
                // the count (now 0) no longer covers any of them.
                sink(unsafe { block.assume_init_read() });
            }
            if count > 0 {
                // SAFETY: a slot that held blocks was keyed, so its counters are set (and live
                // for the process).
                let c = unsafe { &*slot.counters };
                c.add_parked((count as u64 * slot.unit).wrapping_neg());
            }
        }
    }

    /// This thread's counters for `route`, claiming an entry if needed.
    fn counters_for(&mut self, route: *const Route) -> Option<&'static RouteCounters> {
        let published = *self.published.get_or_insert_with(claim_published);
        let mut free = None;
        for c in &published.routes {
            let r = c.route.load(Ordering::Relaxed);
            if ptr::eq(r, route) {
                return Some(c);
            }
            if r.is_null() && free.is_none() {
                free = Some(c);
            }
        }
        let c = free?;
        c.route.store(route.cast_mut(), Ordering::Release);
        Some(c)
    }

    /// The slot for a key, keying an empty one if none has it yet; `None` when every slot is
    /// in use by other keys or the thread has no counters left for the route.
    #[cold]
    fn key_slot(&mut self, route: &'static Route, len: usize, align: usize) -> Option<usize> {
        let i = self.slots.iter().position(|s| s.count == 0)?;
        let counters = self.counters_for(route)?;
        let class_bytes = SizeClass::of(len).map_or(len, |c| c.bytes);
        let slot = &mut self.slots[i];
        slot.route = route;
        slot.len = len;
        slot.align = align;
        slot.counters = counters;
        slot.unit = Parked::unit(len, class_bytes);
        Some(i)
    }
}

/// A parked block for (route, len, align), if this thread has one.
#[inline]
pub(crate) fn take(route: &'static Route, len: usize, align: usize) -> Option<Arc<MemoryBlock>> {
    if len > MAX_BYTES || !route.thread_cacheable {
        return None;
    }
    CACHE
        .try_with(|cache| {
            // SAFETY: only this thread reaches its cache, and nothing below re-enters it.
            let cache = unsafe { &mut *cache.0.get() };
            let slot = cache
                .slots
                .iter_mut()
                .find(|s| s.count > 0 && s.is_key(route, len, align))?;
            slot.count -= 1;
            // SAFETY: entry `count` (after the decrement) holds a block; it is read once and
            // the count no longer covers it.
            let block = unsafe { slot.blocks[slot.count].assume_init_read() };
            // SAFETY: a slot holding blocks is keyed: its counters are set and live forever.
            unsafe { &*slot.counters }.count_hit(slot.unit);
            Some(block)
        })
        .ok()
        .flatten()
}

/// Parks `block` when it is the last handle on a small block of a cacheable global route. The
/// last handle on any other block (or one the thread's cache has no room for) releases the
/// block's memory as usual and keeps only its header, for reuse (`header_pool`).
#[inline]
pub(crate) fn park(block: Arc<MemoryBlock>) {
    if Arc::strong_count(&block) != 1 || Arc::weak_count(&block) != 0 {
        return drop(block);
    }
    // We hold the only handle and there are no weak ones, so no one else can reach the block
    // any more. Pair with the Release decrements of the handles dropped on other threads
    // (what `Arc`'s own drop does before freeing).
    fence(Ordering::Acquire);
    let Some(route) = block.parking_route() else {
        // SAFETY: the only handle, no weak ones, checked above before the Acquire fence.
        return unsafe { header_pool::recycle(block) };
    };
    // The block moves into the cache, or comes back to be released here (after the cache
    // reference is gone). If the thread's cache is already destroyed, the closure (and the
    // block with it) is dropped unrun, which frees the block as usual.
    let rejected = CACHE.try_with(move |cache| {
        // SAFETY: only this thread reaches its cache, and nothing below re-enters it.
        let cache = unsafe { &mut *cache.0.get() };
        let (len, align) = (block.len(), block.align());
        let index = match cache.slots.iter().position(|s| s.is_key(route, len, align)) {
            Some(i) => i,
            None => match cache.key_slot(route, len, align) {
                Some(i) => i,
                None => return Some(block),
            },
        };
        let slot = &mut cache.slots[index];
        if slot.count == DEPTH {
            return Some(block);
        }
        block.reset_for_reuse();
        slot.blocks[slot.count].write(block);
        slot.count += 1;
        // SAFETY: the slot is keyed: its counters are set and live forever.
        unsafe { &*slot.counters }.add_parked(slot.unit);
        None
    });
    if let Ok(Some(block)) = rejected {
        // SAFETY: still the only handle (it only went into the closure and back).
        unsafe { header_pool::recycle(block) };
    }
}

/// What the thread caches change in one ledger's or allocator's shared counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Folded {
    pub(crate) hits: u64,
    pub(crate) parked_blocks: usize,
    pub(crate) parked_bytes: usize,
    pub(crate) parked_class_bytes: usize,
}

fn fold(matches: impl Fn(&Route) -> bool) -> Folded {
    let all = PUBLISHED.lock().unwrap_or_else(|e| e.into_inner());
    let mut out = Folded::default();
    for p in all.iter() {
        for c in &p.routes {
            let route = c.route.load(Ordering::Acquire);
            // SAFETY: non-null route pointers are routes of the global registry, which lives
            // (with every route it ever published) for the rest of the process.
            if route.is_null() || !matches(unsafe { &*route }) {
                continue;
            }
            out.hits += c.hits.load(Ordering::Acquire);
            let parked = Parked(c.parked.load(Ordering::Acquire));
            out.parked_blocks += parked.blocks();
            out.parked_bytes += parked.bytes();
            out.parked_class_bytes += parked.class_bytes();
        }
    }
    out
}

/// The thread caches' share of `ledger`'s counters.
pub(crate) fn folded_for_ledger(ledger: &KindLedger) -> Folded {
    fold(|route| ptr::eq(Arc::as_ptr(&route.ledger), ledger))
}

/// The thread caches' share of the counters of the allocator at `allocator`.
pub(crate) fn folded_for_allocator(allocator: *const ()) -> Folded {
    fold(|route| ptr::eq(Arc::as_ptr(&route.allocator).cast::<()>(), allocator))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AllocatorRegistry, DType, Device, MemoryKind, Tensor};

    #[test]
    fn reuses_blocks_and_keeps_stats_exact() {
        // A fresh thread: its cache starts empty, and other tests' threads do not touch it.
        std::thread::spawn(|| {
            let registry = AllocatorRegistry::global();
            let kind = MemoryKind::KVCache;
            let before = registry.stats(Device::Cpu, kind);
            let t = Tensor::empty(&[3, 5], DType::F32, Device::Cpu, kind).unwrap();
            let first = Arc::as_ptr(t.storage().unwrap().block());
            let v = t.view(&[15]).unwrap();
            drop(t);
            // A view still holds the block: nothing parked.
            let s = registry.stats(Device::Cpu, kind);
            assert_eq!(s.active_allocations, before.active_allocations + 1);
            drop(v);
            let s = registry.stats(Device::Cpu, kind);
            assert_eq!(s.active_bytes, before.active_bytes);
            assert_eq!(s.active_allocations, before.active_allocations);
            let t = Tensor::empty(&[15], DType::F32, Device::Cpu, kind).unwrap();
            assert_eq!(Arc::as_ptr(t.storage().unwrap().block()), first, "reused");
            assert_eq!(t.version(), 0, "a reused block starts a new history");
            let s = registry.stats(Device::Cpu, kind);
            assert_eq!(s.allocations, before.allocations + 2);
            assert_eq!(s.active_bytes, before.active_bytes + 60);
            let a = registry.allocator_stats(Device::Cpu, kind).unwrap();
            drop(t);
            let b = registry.allocator_stats(Device::Cpu, kind).unwrap();
            assert_eq!(b.active_bytes + 256, a.active_bytes);
            assert_eq!(b.cached_bytes, a.cached_bytes + 256);
            // A block too large is never parked.
            let big = Tensor::empty(&[1024], DType::F32, Device::Cpu, kind).unwrap();
            let big_ptr = Arc::as_ptr(big.storage().unwrap().block());
            drop(big);
            let again = Tensor::empty(&[1024], DType::F32, Device::Cpu, kind).unwrap();
            let _ = (big_ptr, again);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn release_cached_empties_the_calling_threads_cache() {
        std::thread::spawn(|| {
            let registry = AllocatorRegistry::global();
            let kind = MemoryKind::HostPinned;
            drop(Tensor::empty(&[5], DType::F32, Device::Cpu, kind).unwrap());
            let parked = registry.allocator_stats(Device::Cpu, kind).unwrap();
            assert!(parked.cached_bytes >= 256, "the block is parked");
            registry.release_cached();
            let after = registry.allocator_stats(Device::Cpu, kind).unwrap();
            assert_eq!((after.cached_bytes, after.reserved_bytes), (0, 0));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn thread_exit_releases_parked_blocks() {
        let registry = AllocatorRegistry::global();
        // (Persistent memory is never cached, so a kind served by the caching allocator.)
        let kind = MemoryKind::HostPageable;
        let before = registry.stats(Device::Cpu, kind).active_bytes;
        std::thread::spawn(move || {
            for _ in 0..3 {
                drop(Tensor::empty(&[7], DType::F32, Device::Cpu, kind).unwrap());
            }
        })
        .join()
        .unwrap();
        assert_eq!(registry.stats(Device::Cpu, kind).active_bytes, before);
    }
}
