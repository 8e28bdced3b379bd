//! Giving back the physical pages of a read-only weight the runtime no longer reads.
//!
//! A constant GEMM operand packed at plan time is read from its packed copy only; its original
//! (usually pages of the mapped model file) would otherwise stay resident beside the copy.
//! `MADV_PAGEOUT` asks the kernel to reclaim those pages: clean file pages are dropped and
//! faulted back in from the file if anything reads them again, and anonymous pages are at most
//! swapped, so the data never changes. Only whole pages inside the range are advised.

use crate::Tensor;

const PAGE: usize = 4096;

/// Advises the kernel to reclaim the pages wholly inside `tensor`'s bytes, when its storage is
/// read-only external memory on the CPU (a mapped weight). Does nothing elsewhere (other
/// platforms, owned or writable memory, ranges under a page); never fails.
pub fn release_resident_pages(tensor: &Tensor) {
    let Ok(storage) = tensor.storage() else {
        return;
    };
    let block = storage.block();
    if !block.is_external() || !block.is_read_only() || block.device() != crate::Device::Cpu {
        return;
    }
    let start = storage.as_ptr() as usize;
    page_out_range(start, start + storage.len());
}

/// Advises the kernel to reclaim the pages wholly inside `bytes`: for source bytes a loader has
/// copied out and will not read again (an unaligned weight in a mapped model file). Safe for
/// any memory (the contents never change); never fails.
pub fn release_resident_bytes(bytes: &[u8]) {
    let start = bytes.as_ptr() as usize;
    page_out_range(start, start + bytes.len());
}

fn page_out_range(start: usize, end: usize) {
    let first = start.div_ceil(PAGE) * PAGE;
    let last = end / PAGE * PAGE;
    if last > first {
        page_out(first, last - first);
    }
}

#[cfg(target_os = "linux")]
fn page_out(addr: usize, len: usize) {
    /// `MADV_PAGEOUT` (Linux 5.4); older kernels answer EINVAL, which is ignored.
    const MADV_PAGEOUT: i32 = 21;
    extern "C" {
        fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
    }
    // SAFETY: `addr..addr + len` is page-aligned and lies inside memory borrowed for this
    // call. MADV_PAGEOUT only changes where the pages live, never their contents, so every
    // reader still sees the same bytes; failure is harmless.
    unsafe {
        madvise(addr as *mut std::ffi::c_void, len, MADV_PAGEOUT);
    }
}

#[cfg(not(target_os = "linux"))]
fn page_out(_addr: usize, _len: usize) {}
