//! The aligned host allocator (M4): the global allocator for small blocks, pages mapped from
//! the system for large ones (`os_pages`).

use std::alloc::Layout;
use std::ptr::NonNull;

use crate::align::check_alignment;
use crate::memory::allocator::{dangling, AtomicCounters};
use crate::memory::os_pages;
use crate::{Allocator, AllocatorStats, CoreError, Device, MemoryKind, Result};

/// Zeroed, aligned host memory from the global allocator, with an optional byte limit.
#[derive(Debug, Default)]
pub struct CpuAllocator {
    limit: Option<usize>,
    counters: AtomicCounters,
}

impl CpuAllocator {
    pub fn new() -> Self {
        CpuAllocator::default()
    }

    /// An allocator that refuses to hold more than `limit` bytes at once.
    pub fn with_limit(limit: usize) -> Self {
        CpuAllocator {
            limit: Some(limit),
            counters: AtomicCounters::default(),
        }
    }
}

fn oom(bytes: usize, reason: impl Into<String>) -> CoreError {
    CoreError::OutOfMemory {
        bytes,
        device: Device::Cpu,
        kind: MemoryKind::Default,
        reason: reason.into(),
    }
}

impl Allocator for CpuAllocator {
    fn allocate(&self, bytes: usize, align: usize) -> Result<NonNull<u8>> {
        check_alignment(align)?;
        let layout = Layout::from_size_align(bytes, align).map_err(|_| {
            oom(
                bytes,
                format!("size with alignment {align} exceeds isize::MAX"),
            )
        })?;
        if !self.counters.try_reserve(bytes, self.limit) {
            return Err(oom(
                bytes,
                format!(
                    "allocator limit of {} bytes reached",
                    self.limit.unwrap_or(0)
                ),
            ));
        }
        let ptr = if bytes == 0 {
            dangling(align)
        } else if os_pages::is_mapped(bytes, align) {
            match os_pages::map_zeroed(bytes) {
                Some(ptr) => ptr,
                None => {
                    self.counters.unreserve(bytes);
                    return Err(oom(bytes, "the system refused to map the pages"));
                }
            }
        } else {
            // SAFETY: the layout has a non-zero size (checked just above).
            match NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) }) {
                Some(ptr) => ptr,
                None => {
                    self.counters.unreserve(bytes);
                    return Err(oom(bytes, "the system allocator returned null"));
                }
            }
        };
        self.counters.commit();
        Ok(ptr)
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, bytes: usize, align: usize) {
        if os_pages::is_mapped(bytes, align) {
            // SAFETY: the caller guarantees `ptr` came from `allocate(bytes, align)` here, which
            // mapped it with this size (the same `is_mapped` answer), and is no longer used.
            unsafe { os_pages::unmap(ptr, bytes) };
        } else if bytes != 0 {
            // SAFETY: the caller guarantees `ptr` came from `allocate(bytes, align)` here, which
            // validated this exact layout and allocated it with the global allocator.
            unsafe {
                std::alloc::dealloc(
                    ptr.as_ptr(),
                    Layout::from_size_align_unchecked(bytes, align),
                )
            };
        }
        self.counters.free(bytes);
    }

    fn device(&self) -> Device {
        Device::Cpu
    }

    fn stats(&self) -> AllocatorStats {
        self.counters.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_zeroed_and_counted() {
        let a = CpuAllocator::new();
        let p = a.allocate(1000, 256).unwrap();
        assert_eq!(p.as_ptr() as usize % 256, 0);
        // SAFETY: 1000 bytes were just allocated at `p`.
        let bytes = unsafe { std::slice::from_raw_parts(p.as_ptr(), 1000) };
        assert!(bytes.iter().all(|&b| b == 0));
        assert_eq!(a.stats().active_bytes, 1000);
        // SAFETY: same pointer, size and alignment as allocated.
        unsafe { a.deallocate(p, 1000, 256) };
        let s = a.stats();
        assert_eq!(
            (s.active_bytes, s.peak_active_bytes, s.allocations),
            (0, 1000, 1)
        );
    }

    #[test]
    fn impossible_sizes_are_errors() {
        let a = CpuAllocator::new();
        assert!(matches!(
            a.allocate(usize::MAX - 10, 256),
            Err(CoreError::OutOfMemory { .. })
        ));
        assert!(matches!(
            a.allocate(16, 3),
            Err(CoreError::InvalidAlignment { align: 3 })
        ));
        let limited = CpuAllocator::with_limit(100);
        assert!(matches!(
            limited.allocate(101, 64),
            Err(CoreError::OutOfMemory { .. })
        ));
        assert_eq!(limited.stats().active_bytes, 0);
    }

    #[test]
    fn zero_bytes() {
        let a = CpuAllocator::new();
        let p = a.allocate(0, 256).unwrap();
        assert_eq!(p.as_ptr() as usize % 256, 0);
        // SAFETY: returned by allocate(0, 256).
        unsafe { a.deallocate(p, 0, 256) };
        assert_eq!(a.stats().active_allocations, 0);
    }
}
