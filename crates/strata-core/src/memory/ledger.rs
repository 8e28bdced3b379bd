//! Per-(device, kind) accounting: how many bytes the weights, activations or KV cache use,
//! independent of which allocator served them.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Usage counters for one (device, memory kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KindStats {
    pub active_bytes: usize,
    pub peak_bytes: usize,
    pub active_allocations: usize,
    pub allocations: u64,
}

/// Lock-free counters behind [`KindStats`].
#[derive(Debug, Default)]
pub struct KindLedger {
    active_bytes: AtomicUsize,
    peak_bytes: AtomicUsize,
    active_allocations: AtomicUsize,
    allocations: AtomicU64,
}

impl KindLedger {
    pub(crate) fn record(&self, bytes: usize) {
        let now = self.active_bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak_bytes.fetch_max(now, Ordering::Relaxed);
        self.active_allocations.fetch_add(1, Ordering::Relaxed);
        self.allocations.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn release(&self, bytes: usize) {
        self.active_bytes.fetch_sub(bytes, Ordering::Relaxed);
        self.active_allocations.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn stats(&self) -> KindStats {
        KindStats {
            active_bytes: self.active_bytes.load(Ordering::Relaxed),
            peak_bytes: self.peak_bytes.load(Ordering::Relaxed),
            active_allocations: self.active_allocations.load(Ordering::Relaxed),
            allocations: self.allocations.load(Ordering::Relaxed),
        }
    }
}
