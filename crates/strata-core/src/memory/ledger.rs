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
///
/// On the path of every allocation and free, so kept to two atomic read-modify-writes each:
/// the live-allocation count is derived (allocations minus releases), and the peak is only
/// written when it actually rises.
#[derive(Debug, Default)]
pub struct KindLedger {
    active_bytes: AtomicUsize,
    peak_bytes: AtomicUsize,
    allocations: AtomicU64,
    releases: AtomicU64,
}

impl KindLedger {
    #[inline]
    pub(crate) fn record(&self, bytes: usize) {
        let now = self.active_bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        // The peak only grows, so a stale read can only make us call `fetch_max` needlessly;
        // every value above the true peak reaches `fetch_max`, which keeps the peak exact.
        if now > self.peak_bytes.load(Ordering::Relaxed) {
            self.peak_bytes.fetch_max(now, Ordering::Relaxed);
        }
        self.allocations.fetch_add(1, Ordering::Release);
    }

    #[inline]
    pub(crate) fn release(&self, bytes: usize) {
        self.active_bytes.fetch_sub(bytes, Ordering::Relaxed);
        self.releases.fetch_add(1, Ordering::Release);
    }

    pub fn stats(&self) -> KindStats {
        // Releases first: a release observed here happened after its allocation was recorded
        // (Release/Acquire), so the allocation count read next includes it.
        let releases = self.releases.load(Ordering::Acquire);
        let allocations = self.allocations.load(Ordering::Acquire);
        // Blocks parked in per-thread caches are still recorded here; take them out, and add
        // the allocations those caches served.
        let parked = crate::memory::thread_cache::folded_for_ledger(self);
        KindStats {
            active_bytes: self
                .active_bytes
                .load(Ordering::Relaxed)
                .saturating_sub(parked.parked_bytes),
            peak_bytes: self.peak_bytes.load(Ordering::Relaxed),
            active_allocations: (allocations.saturating_sub(releases) as usize)
                .saturating_sub(parked.parked_blocks),
            allocations: allocations + parked.hits,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_peak() {
        let ledger = KindLedger::default();
        ledger.record(100);
        ledger.record(50);
        ledger.release(100);
        ledger.record(20);
        let s = ledger.stats();
        assert_eq!(
            (
                s.active_bytes,
                s.peak_bytes,
                s.active_allocations,
                s.allocations
            ),
            (70, 150, 2, 3)
        );
        ledger.release(50);
        ledger.release(20);
        let s = ledger.stats();
        assert_eq!(
            (
                s.active_bytes,
                s.peak_bytes,
                s.active_allocations,
                s.allocations
            ),
            (0, 150, 0, 3)
        );
    }
}
