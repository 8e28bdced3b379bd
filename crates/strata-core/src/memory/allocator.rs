//! The allocator interface (M3) and its statistics.

use std::fmt;
use std::ptr::NonNull;

use crate::{Device, Result};

/// Counters every allocator reports. Bytes are the sizes the allocator actually holds (after
/// any rounding to size classes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AllocatorStats {
    /// Bytes handed out and not yet returned.
    pub active_bytes: usize,
    /// Bytes obtained from the system (or backing allocator) and not yet given back: active + cached.
    pub reserved_bytes: usize,
    /// Bytes held in a cache, ready for reuse.
    pub cached_bytes: usize,
    /// Highest `active_bytes` ever seen.
    pub peak_active_bytes: usize,
    /// Allocations currently outstanding.
    pub active_allocations: usize,
    /// `allocate` calls that succeeded, in total.
    pub allocations: u64,
    /// Allocations served from a cache.
    pub cache_hits: u64,
}

impl AllocatorStats {
    /// Fraction of allocations served from the cache (0 when nothing was allocated).
    pub fn hit_rate(&self) -> f64 {
        if self.allocations == 0 {
            0.0
        } else {
            self.cache_hits as f64 / self.allocations as f64
        }
    }
}

/// A source of raw memory on one device. Thread-safe.
///
/// Memory returned by `allocate` is initialized (zeroed or previously written), so reading it as
/// plain numbers is sound. Zero-byte requests return a dangling, well-aligned pointer that must
/// still be passed back to `deallocate`.
pub trait Allocator: Send + Sync + fmt::Debug {
    /// Allocates `bytes` bytes aligned to `align` (a power of two).
    fn allocate(&self, bytes: usize, align: usize) -> Result<NonNull<u8>>;

    /// Returns memory to the allocator.
    ///
    /// # Safety
    /// `ptr` must come from `allocate` on this allocator with the same `bytes` and `align`, and
    /// must not be used afterwards.
    unsafe fn deallocate(&self, ptr: NonNull<u8>, bytes: usize, align: usize);

    /// The device this allocator's memory lives on.
    fn device(&self) -> Device;

    /// A snapshot of the counters.
    fn stats(&self) -> AllocatorStats;

    /// Gives cached memory back to the backing allocator; a no-op for allocators without a cache.
    fn release_cached(&self) {}

    /// Whether freed blocks are kept for reuse (and counted as cached, not active): then the
    /// global registry may also park small freed blocks in per-thread caches.
    fn caches_blocks(&self) -> bool {
        false
    }
}

/// A dangling pointer aligned to `align`, for zero-byte allocations.
pub(crate) fn dangling(align: usize) -> NonNull<u8> {
    // `align` is a non-zero power of two, so it is a valid non-null, aligned address.
    NonNull::new(std::ptr::without_provenance_mut(align)).unwrap_or(NonNull::dangling())
}

/// Lock-free counters for allocators without a cache (reserved = active, nothing cached).
#[derive(Debug, Default)]
pub(crate) struct AtomicCounters {
    active_bytes: std::sync::atomic::AtomicUsize,
    peak_active_bytes: std::sync::atomic::AtomicUsize,
    active_allocations: std::sync::atomic::AtomicUsize,
    allocations: std::sync::atomic::AtomicU64,
}

impl AtomicCounters {
    /// Reserves `bytes` against `limit`; returns false (and changes nothing) if it would exceed it.
    pub(crate) fn try_reserve(&self, bytes: usize, limit: Option<usize>) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let now = self
            .active_bytes
            .fetch_add(bytes, Relaxed)
            .saturating_add(bytes);
        if limit.is_some_and(|limit| now > limit) {
            self.active_bytes.fetch_sub(bytes, Relaxed);
            return false;
        }
        true
    }

    /// Undoes a `try_reserve` whose allocation then failed.
    pub(crate) fn unreserve(&self, bytes: usize) {
        self.active_bytes
            .fetch_sub(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// Completes a reservation into a counted allocation.
    pub(crate) fn commit(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        self.peak_active_bytes
            .fetch_max(self.active_bytes.load(Relaxed), Relaxed);
        self.active_allocations.fetch_add(1, Relaxed);
        self.allocations.fetch_add(1, Relaxed);
    }

    pub(crate) fn free(&self, bytes: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        self.active_bytes.fetch_sub(bytes, Relaxed);
        self.active_allocations.fetch_sub(1, Relaxed);
    }

    pub(crate) fn snapshot(&self) -> AllocatorStats {
        use std::sync::atomic::Ordering::Relaxed;
        let active = self.active_bytes.load(Relaxed);
        AllocatorStats {
            active_bytes: active,
            reserved_bytes: active,
            cached_bytes: 0,
            peak_active_bytes: self.peak_active_bytes.load(Relaxed),
            active_allocations: self.active_allocations.load(Relaxed),
            allocations: self.allocations.load(Relaxed),
            cache_hits: 0,
        }
    }
}
