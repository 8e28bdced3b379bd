//! Page-locked host memory from the CUDA driver API, loaded at run time so that strata builds
//! and runs on machines without CUDA.

use std::ffi::c_void;
use std::fmt;
use std::ptr::NonNull;

use crate::align::check_alignment;
use crate::memory::allocator::{dangling, AtomicCounters};
use crate::{AllocatorStats, CoreError, Device, MemoryKind, Result};

type CuResult = i32;
type CuContext = *mut c_void;
const CU_MEMHOSTALLOC_PORTABLE: u32 = 0x01;
/// `cuMemHostAlloc` returns page-aligned memory.
const PAGE: usize = 4096;

/// The driver entry points we use, resolved from `libcuda.so.1`.
pub(crate) struct CudaHostMemory {
    _library: libloading::Library,
    context: CuContext,
    ctx_set_current: unsafe extern "C" fn(CuContext) -> CuResult,
    mem_host_alloc: unsafe extern "C" fn(*mut *mut c_void, usize, u32) -> CuResult,
    mem_free_host: unsafe extern "C" fn(*mut c_void) -> CuResult,
    counters: AtomicCounters,
}

// SAFETY: the driver API is thread-safe; the context handle is an opaque token that the driver
// allows any thread to make current, and the library handle is never mutated after loading.
unsafe impl Send for CudaHostMemory {}
// SAFETY: see `Send`: shared use only calls thread-safe driver functions and atomics.
unsafe impl Sync for CudaHostMemory {}

impl CudaHostMemory {
    /// Loads the driver and retains device 0's primary context; `None` when there is no driver
    /// or no device.
    pub(crate) fn load() -> Option<Self> {
        // SAFETY: loading the CUDA driver runs its initializers, which have no preconditions;
        // every symbol is looked up with the exact C signature the driver API documents, and
        // every call checks the CUresult before using outputs.
        unsafe {
            let library = libloading::Library::new("libcuda.so.1").ok()?;
            let init: unsafe extern "C" fn(u32) -> CuResult = *library.get(b"cuInit\0").ok()?;
            let device_get: unsafe extern "C" fn(*mut i32, i32) -> CuResult =
                *library.get(b"cuDeviceGet\0").ok()?;
            let retain: unsafe extern "C" fn(*mut CuContext, i32) -> CuResult =
                *library.get(b"cuDevicePrimaryCtxRetain\0").ok()?;
            let ctx_set_current = *library.get(b"cuCtxSetCurrent\0").ok()?;
            let mem_host_alloc = *library.get(b"cuMemHostAlloc\0").ok()?;
            let mem_free_host = *library.get(b"cuMemFreeHost\0").ok()?;
            if init(0) != 0 {
                return None;
            }
            let mut device = 0i32;
            if device_get(&mut device, 0) != 0 {
                return None;
            }
            let mut context: CuContext = std::ptr::null_mut();
            if retain(&mut context, device) != 0 || context.is_null() {
                return None;
            }
            Some(CudaHostMemory {
                _library: library,
                context,
                ctx_set_current,
                mem_host_alloc,
                mem_free_host,
                counters: AtomicCounters::default(),
            })
        }
    }

    pub(crate) fn allocate(&self, bytes: usize, align: usize) -> Result<NonNull<u8>> {
        check_alignment(align)?;
        let oom = |reason: String| CoreError::OutOfMemory {
            bytes,
            device: Device::Cpu,
            kind: MemoryKind::HostPinned,
            reason,
        };
        if align > PAGE {
            return Err(oom(format!(
                "pinned memory is page-aligned ({PAGE}); alignment {align} requested"
            )));
        }
        if !self.counters.try_reserve(bytes, None) {
            return Err(oom("byte counter overflow".into()));
        }
        if bytes == 0 {
            self.counters.commit();
            return Ok(dangling(align));
        }
        let mut raw: *mut c_void = std::ptr::null_mut();
        // SAFETY: the context was retained at load time and stays valid while `self` lives;
        // `raw` is a valid out-pointer for the duration of the call.
        let status = unsafe {
            let set = (self.ctx_set_current)(self.context);
            if set != 0 {
                set
            } else {
                (self.mem_host_alloc)(&mut raw, bytes, CU_MEMHOSTALLOC_PORTABLE)
            }
        };
        match NonNull::new(raw.cast::<u8>()) {
            Some(ptr) if status == 0 => {
                self.counters.commit();
                Ok(ptr)
            }
            _ => {
                self.counters.unreserve(bytes);
                Err(oom(format!("cuMemHostAlloc failed with CUresult {status}")))
            }
        }
    }

    /// # Safety
    /// `ptr` must come from `allocate(bytes, _)` on this object and not be used afterwards.
    pub(crate) unsafe fn deallocate(&self, ptr: NonNull<u8>, bytes: usize, _align: usize) {
        if bytes != 0 {
            // SAFETY: the caller guarantees `ptr` came from cuMemHostAlloc here; the context is
            // made current first as the driver requires. A failure cannot be reported from a
            // deallocation and leaves the memory to the driver, which frees it at exit.
            unsafe {
                (self.ctx_set_current)(self.context);
                (self.mem_free_host)(ptr.as_ptr().cast());
            }
        }
        self.counters.free(bytes);
    }

    pub(crate) fn stats(&self) -> AllocatorStats {
        self.counters.snapshot()
    }
}

impl fmt::Debug for CudaHostMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaHostMemory")
            .field("stats", &self.stats())
            .finish()
    }
}
