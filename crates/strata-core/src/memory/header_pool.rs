//! Per-thread freelist of block headers (T8): the `Arc<MemoryBlock>` allocation of a block whose
//! last handle dropped is kept, emptied, and reused for the next block this thread allocates,
//! so a tensor too large for the thread cache of whole blocks (`thread_cache`) still costs no
//! trip to the system allocator for its header (nor the two reference-count decrements of
//! freeing it).
//!
//! Only the header is kept: the block's memory is released as usual when it is emptied (back to
//! its allocator, un-accounted from its ledger and budget), so no statistic sees the freelist.
//! At most [`CAPACITY`] headers per thread (about 2 KiB).

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::Arc;

use crate::MemoryBlock;

/// Headers kept per thread.
pub const CAPACITY: usize = 16;

/// Emptied headers: unique (`strong == 1`, `weak == 0`), holding a vacant block.
struct FreeList {
    count: usize,
    /// The first `count` entries hold headers.
    headers: [MaybeUninit<Arc<MemoryBlock>>; CAPACITY],
}

/// The thread's freelist. Only this thread touches it, and never re-entrantly: pushing and
/// popping run no code that could reach it again (blocks are emptied before, and a header
/// that does not fit is dropped after, the list is borrowed).
struct Headers(UnsafeCell<FreeList>);

impl Drop for Headers {
    fn drop(&mut self) {
        let list = self.0.get_mut();
        let count = std::mem::take(&mut list.count);
        for header in &mut list.headers[..count] {
            // SAFETY: the first `count` entries held headers; each is read exactly once, and
            // the count (now 0) no longer covers them.
            drop(unsafe { header.assume_init_read() });
        }
    }
}

thread_local! {
    static FREE: Headers = const {
        Headers(UnsafeCell::new(FreeList {
            count: 0,
            headers: [const { MaybeUninit::uninit() }; CAPACITY],
        }))
    };
}

/// A header holding `block`: a recycled one from this thread's freelist, or a new allocation.
#[inline]
pub(crate) fn new_header(block: MemoryBlock) -> Arc<MemoryBlock> {
    let recycled = FREE
        .try_with(|free| {
            // SAFETY: only this thread reaches its list, and nothing below re-enters it.
            let list = unsafe { &mut *free.0.get() };
            if list.count == 0 {
                return None;
            }
            list.count -= 1;
            // SAFETY: entry `count` (after the decrement) holds a header; it is read once and
            // the count no longer covers it.
            Some(unsafe { list.headers[list.count].assume_init_read() })
        })
        .ok()
        .flatten();
    match recycled {
        Some(header) => {
            // SAFETY: a header on the freelist is the only handle on its allocation (strong
            // count 1, no weak ones, checked by `recycle` after an Acquire fence) and we now
            // own it, so no reference to its contents exists anywhere and writing them is
            // exclusive. The vacant block there owns nothing, so overwriting it without
            // dropping it leaks nothing.
            unsafe { ptr::write(Arc::as_ptr(&header).cast_mut(), block) };
            header
        }
        None => Arc::new(block),
    }
}

/// Releases the block `header` holds and keeps the header for reuse (or frees it when this
/// thread's list is full).
///
/// # Safety
/// `header` must be the only handle on its block: strong count 1 and no weak handles, observed
/// before an Acquire fence that orders this call after every other handle's drop.
pub(crate) unsafe fn recycle(header: Arc<MemoryBlock>) {
    debug_assert!(Arc::strong_count(&header) == 1 && Arc::weak_count(&header) == 0);
    // SAFETY: by the contract, `header` is the only handle and no reference to its contents
    // exists, so taking them out (leaving a vacant block that owns nothing) is exclusive.
    let block = unsafe { ptr::replace(Arc::as_ptr(&header).cast_mut(), MemoryBlock::vacant()) };
    // Released here, with no thread-local list borrowed: its owner's drop may run any code
    // (an external keep-alive handle), including code that drops or allocates blocks.
    drop(block);
    let rejected = FREE.try_with(move |free| {
        // SAFETY: only this thread reaches its list, and nothing below re-enters it.
        let list = unsafe { &mut *free.0.get() };
        if list.count == CAPACITY {
            return Some(header);
        }
        list.headers[list.count].write(header);
        list.count += 1;
        None
    });
    // A full list, or a thread whose list is already destroyed: the header is freed (holding
    // a vacant block, whose drop does nothing).
    drop(rejected);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AllocatorRegistry, DType, Device, MemoryKind, Tensor};

    #[test]
    fn large_blocks_reuse_their_headers_and_keep_stats_exact() {
        std::thread::spawn(|| {
            let registry = AllocatorRegistry::global();
            // (A kind no other unit test allocates from the global registry, so the counts
            // below are this test's own.)
            let kind = MemoryKind::Workspace;
            // Too large for the thread cache of whole blocks.
            let dims = [4096];
            let before = registry.stats(Device::Cpu, kind);
            let t = Tensor::empty(&dims, DType::F32, Device::Cpu, kind).unwrap();
            let header = Arc::as_ptr(t.storage().unwrap().block());
            t.fill_zero().unwrap();
            assert_eq!(t.version(), 1);
            drop(t);
            // The memory went back: nothing active, whatever happened to the header.
            let s = registry.stats(Device::Cpu, kind);
            assert_eq!(s.active_bytes, before.active_bytes);
            assert_eq!(s.active_allocations, before.active_allocations);
            let u = Tensor::empty(&[2048], DType::F64, Device::Cpu, kind).unwrap();
            let block = u.storage().unwrap().block();
            assert_eq!(Arc::as_ptr(block), header, "the header was reused");
            assert_eq!(u.version(), 0, "a reused header holds a fresh block");
            assert_eq!(block.len(), 16384);
            assert_eq!(block.kind(), kind);
            let s = registry.stats(Device::Cpu, kind);
            assert_eq!(s.active_bytes, before.active_bytes + 16384);
            assert_eq!(s.allocations, before.allocations + 2);
            drop(u);
            assert_eq!(
                registry.stats(Device::Cpu, kind).active_bytes,
                before.active_bytes
            );
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_shared_block_is_not_recycled_until_its_last_handle_drops() {
        std::thread::spawn(|| {
            let registry = AllocatorRegistry::global();
            // Served by the plain CPU allocator, which caches nothing: only headers recycle.
            let kind = MemoryKind::Persistent;
            let before = registry.stats(Device::Cpu, kind).active_bytes;
            let t = Tensor::zeros_in_kind(&[4096], kind);
            let v = t.view(&[64, 64]).unwrap();
            drop(t);
            // The view still holds the live block.
            assert_eq!(
                registry.stats(Device::Cpu, kind).active_bytes,
                before + 4096
            );
            assert!(v.to_vec::<u8>().unwrap().iter().all(|&b| b == 0));
            // Its last handle drops on another thread, which keeps the header.
            std::thread::spawn(move || drop(v)).join().unwrap();
            assert_eq!(registry.stats(Device::Cpu, kind).active_bytes, before);
        })
        .join()
        .unwrap();
    }

    impl Tensor {
        fn zeros_in_kind(dims: &[usize], kind: MemoryKind) -> Tensor {
            let t = Tensor::empty(dims, DType::U8, Device::Cpu, kind).unwrap();
            t.fill_zero().unwrap();
            t
        }
    }
}
