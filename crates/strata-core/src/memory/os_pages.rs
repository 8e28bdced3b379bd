//! Large host blocks straight from the operating system: anonymous private mappings.
//!
//! The kernel hands out mapped pages already zeroed (no memset over weights about to be
//! overwritten, or arenas never read before written), and unmapping gives them back at once.
//! Through the C heap instead, a freed block often stays in the process: glibc raises its mmap
//! threshold after the first large free, so later large blocks come from the heap, whose holes
//! are not returned. Packed weights replacing their originals would then save nothing.

use std::ptr::NonNull;

/// Blocks from this size on are mapped (smaller ones stay with the global allocator).
pub(crate) const MAP_MIN_BYTES: usize = 1 << 20;

/// The alignment every mapping has (a page).
const PAGE: usize = 4096;

/// Mappings from this size on ask for transparent huge pages.
const HUGE_PAGE: usize = 2 << 20;

/// Whether a block of `bytes` aligned to `align` is mapped rather than taken from the heap: the
/// same answer at allocation and at release.
pub(crate) fn is_mapped(bytes: usize, align: usize) -> bool {
    cfg!(unix) && bytes >= MAP_MIN_BYTES && align <= PAGE
}

/// `bytes` zeroed, page-aligned bytes, or `None` when the system refuses.
#[cfg(unix)]
pub(crate) fn map_zeroed(bytes: usize) -> Option<NonNull<u8>> {
    // SAFETY: an anonymous private mapping with no address hint touches no existing memory;
    // the result is checked against MAP_FAILED before use.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return None;
    }
    if bytes >= HUGE_PAGE {
        // SAFETY: advice on the mapping just made, of exactly its length; it changes no
        // contents, and a refusal only leaves the pages small.
        unsafe { libc::madvise(ptr, bytes, libc::MADV_HUGEPAGE) };
    }
    NonNull::new(ptr.cast())
}

#[cfg(not(unix))]
pub(crate) fn map_zeroed(_bytes: usize) -> Option<NonNull<u8>> {
    None
}

/// Returns a block from [`map_zeroed`] to the system.
///
/// # Safety
/// `ptr` came from `map_zeroed(bytes)` with this `bytes`, and nothing uses it afterwards.
#[cfg(unix)]
pub(crate) unsafe fn unmap(ptr: NonNull<u8>, bytes: usize) {
    // SAFETY: the caller guarantees this is exactly one mapping of ours, no longer in use.
    unsafe { libc::munmap(ptr.as_ptr().cast(), bytes) };
}

#[cfg(not(unix))]
pub(crate) unsafe fn unmap(_ptr: NonNull<u8>, _bytes: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_blocks_are_zeroed_aligned_and_writable() {
        if !is_mapped(MAP_MIN_BYTES, 64) {
            return; // not a unix target: the heap serves every block
        }
        let ptr = map_zeroed(MAP_MIN_BYTES).expect("a 1 MiB mapping");
        assert_eq!(ptr.as_ptr() as usize % PAGE, 0);
        // SAFETY: MAP_MIN_BYTES bytes were just mapped read-write at `ptr`.
        let bytes = unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), MAP_MIN_BYTES) };
        assert!(bytes.iter().all(|&b| b == 0));
        bytes[MAP_MIN_BYTES - 1] = 7;
        assert_eq!(bytes[MAP_MIN_BYTES - 1], 7);
        // SAFETY: the mapping made above, with its size; `bytes` is not used after this.
        unsafe { unmap(ptr, MAP_MIN_BYTES) };
    }

    #[test]
    fn small_or_overaligned_blocks_stay_on_the_heap() {
        assert!(!is_mapped(MAP_MIN_BYTES - 1, 64));
        assert!(!is_mapped(MAP_MIN_BYTES, 2 * PAGE));
    }
}
