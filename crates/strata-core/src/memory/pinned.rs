//! The pinned host allocator (M6): page-locked host memory for fast device transfers.
//!
//! With a CUDA driver present, memory comes from `cuMemHostAlloc` (see [`cuda_host`]); without
//! one it falls back to ordinary aligned host memory, so code that asks for pinned staging
//! buffers runs everywhere. Its device is always the CPU.
//!
//! The driver is probed on the first allocation, not when the allocator is made: the global
//! registry makes one at start-up, and a CPU-only run must not load the CUDA driver library.

use std::ptr::NonNull;
use std::sync::OnceLock;

use crate::memory::cuda_host::CudaHostMemory;
use crate::{Allocator, AllocatorStats, CpuAllocator, Device, Result};

#[derive(Debug)]
enum Backend {
    Cuda(CudaHostMemory),
    Host(CpuAllocator),
}

/// Page-locked host memory when a CUDA driver is available, aligned host memory otherwise.
#[derive(Debug)]
pub struct PinnedAllocator {
    /// Chosen on first use (see the module doc).
    backend: OnceLock<Backend>,
}

impl PinnedAllocator {
    /// Uses the CUDA driver when one can be loaded and initialized, the host fallback otherwise;
    /// the driver is looked for on the first allocation.
    pub fn new() -> Self {
        PinnedAllocator {
            backend: OnceLock::new(),
        }
    }

    /// Always the ordinary host memory fallback.
    pub fn host_fallback() -> Self {
        PinnedAllocator {
            backend: OnceLock::from(Backend::Host(CpuAllocator::new())),
        }
    }

    /// True when allocations are really page-locked by a CUDA driver (probes for it).
    pub fn is_page_locked(&self) -> bool {
        matches!(self.backend(), Backend::Cuda(_))
    }

    /// Whether the backend has been chosen yet (the driver probed, or the fallback given).
    pub fn is_probed(&self) -> bool {
        self.backend.get().is_some()
    }

    fn backend(&self) -> &Backend {
        self.backend.get_or_init(|| match CudaHostMemory::load() {
            Some(cuda) => Backend::Cuda(cuda),
            None => Backend::Host(CpuAllocator::new()),
        })
    }
}

impl Default for PinnedAllocator {
    fn default() -> Self {
        PinnedAllocator::new()
    }
}

impl Allocator for PinnedAllocator {
    fn allocate(&self, bytes: usize, align: usize) -> Result<NonNull<u8>> {
        match self.backend() {
            Backend::Cuda(cuda) => cuda.allocate(bytes, align),
            Backend::Host(host) => host.allocate(bytes, align),
        }
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, bytes: usize, align: usize) {
        match self.backend() {
            // SAFETY: forwarded unchanged; the caller's guarantee covers the backend that made it.
            Backend::Cuda(cuda) => unsafe { cuda.deallocate(ptr, bytes, align) },
            // SAFETY: as above.
            Backend::Host(host) => unsafe { host.deallocate(ptr, bytes, align) },
        }
    }

    fn device(&self) -> Device {
        Device::Cpu
    }

    fn stats(&self) -> AllocatorStats {
        match self.backend.get() {
            Some(Backend::Cuda(cuda)) => cuda.stats(),
            Some(Backend::Host(host)) => host.stats(),
            // Nothing allocated yet: nothing to report, and no reason to load a driver.
            None => AllocatorStats::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_fallback_works_and_is_cpu() {
        let a = PinnedAllocator::host_fallback();
        assert!(!a.is_page_locked());
        assert_eq!(a.device(), Device::Cpu);
        let p = a.allocate(4096, 256).unwrap();
        assert_eq!(p.as_ptr() as usize % 256, 0);
        // SAFETY: p came from allocate(4096, 256).
        unsafe { a.deallocate(p, 4096, 256) };
        assert_eq!(a.stats().active_bytes, 0);
    }

    #[test]
    fn detected_backend_allocates() {
        // Page-locked where a CUDA driver exists (the GPU machine), host memory elsewhere.
        let a = PinnedAllocator::new();
        assert!(
            !a.is_probed(),
            "making the allocator must not load a driver"
        );
        assert_eq!(a.stats().active_bytes, 0);
        assert!(!a.is_probed(), "reading stats must not load a driver");
        let p = a.allocate(1 << 20, 256).unwrap();
        assert!(a.is_probed());
        assert_eq!(p.as_ptr() as usize % 256, 0);
        assert_eq!(a.stats().active_bytes, 1 << 20);
        // SAFETY: p came from allocate(1 MiB, 256).
        unsafe { a.deallocate(p, 1 << 20, 256) };
        assert_eq!(a.stats().active_bytes, 0);
    }
}
