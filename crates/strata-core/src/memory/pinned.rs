//! The pinned host allocator (M6): page-locked host memory for fast device transfers.
//!
//! With a CUDA driver present, memory comes from `cuMemHostAlloc` (see [`cuda_host`]); without
//! one it falls back to ordinary aligned host memory, so code that asks for pinned staging
//! buffers runs everywhere. Its device is always the CPU.

use std::ptr::NonNull;

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
    backend: Backend,
}

impl PinnedAllocator {
    /// Uses the CUDA driver when one can be loaded and initialized, the host fallback otherwise.
    pub fn new() -> Self {
        match CudaHostMemory::load() {
            Some(cuda) => PinnedAllocator {
                backend: Backend::Cuda(cuda),
            },
            None => PinnedAllocator::host_fallback(),
        }
    }

    /// Always the ordinary host memory fallback.
    pub fn host_fallback() -> Self {
        PinnedAllocator {
            backend: Backend::Host(CpuAllocator::new()),
        }
    }

    /// True when allocations are really page-locked by a CUDA driver.
    pub fn is_page_locked(&self) -> bool {
        matches!(self.backend, Backend::Cuda(_))
    }
}

impl Default for PinnedAllocator {
    fn default() -> Self {
        PinnedAllocator::new()
    }
}

impl Allocator for PinnedAllocator {
    fn allocate(&self, bytes: usize, align: usize) -> Result<NonNull<u8>> {
        match &self.backend {
            Backend::Cuda(cuda) => cuda.allocate(bytes, align),
            Backend::Host(host) => host.allocate(bytes, align),
        }
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, bytes: usize, align: usize) {
        match &self.backend {
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
        match &self.backend {
            Backend::Cuda(cuda) => cuda.stats(),
            Backend::Host(host) => host.stats(),
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
        let p = a.allocate(1 << 20, 256).unwrap();
        assert_eq!(p.as_ptr() as usize % 256, 0);
        assert_eq!(a.stats().active_bytes, 1 << 20);
        // SAFETY: p came from allocate(1 MiB, 256).
        unsafe { a.deallocate(p, 1 << 20, 256) };
        assert_eq!(a.stats().active_bytes, 0);
    }
}
