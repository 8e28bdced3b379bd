//! MemoryBlock (M1): one contiguous region of memory, who releases it, and who may touch it.

use std::any::Any;
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicIsize, AtomicU64, Ordering};
use std::sync::Arc;

use crate::memory::budget::BudgetCharge;
use crate::memory::mode::InferenceMode;
use crate::memory::route::RouteRef;
use crate::memory::thread_cache;
use crate::{Allocator, CoreError, Device, MemoryKind, Result};

/// How a block's memory is released when the last reference drops.
pub(crate) enum BlockOwner {
    /// Allocated through a registry: returned to the route's allocator and un-accounted from
    /// its (device, kind) ledger, and from the budget it was charged to, if any.
    Routed {
        route: RouteRef,
        /// Held only to be dropped with the block: returns the bytes to the budget.
        _charge: Option<BudgetCharge>,
    },
    /// Allocated from an allocator directly, outside any registry accounting: returned to it.
    Allocator { allocator: Arc<dyn Allocator> },
    /// Owned elsewhere (a file mapping, a user buffer): never freed here; the keep-alive handle
    /// holds the owner until the last view is gone.
    External {
        _keep_alive: Arc<dyn Any + Send + Sync>,
    },
    /// A slice of a larger block (an arena): the parent lives at least as long as the slice.
    Parent { _parent: Arc<MemoryBlock> },
    /// Nothing: the contents of a header kept for reuse (`header_pool`).
    Vacant,
}

/// A region of memory with its device, purpose and release policy.
///
/// Access goes through [`MemoryBlock::borrow_read`] and [`MemoryBlock::borrow_write`], which
/// track readers and a writer with one atomic so that safe code can never race on the bytes.
/// Every write borrow bumps the version counter (unless [`InferenceMode`] is on).
pub struct MemoryBlock {
    ptr: NonNull<u8>,
    len: usize,
    align: usize,
    device: Device,
    kind: MemoryKind,
    read_only: bool,
    owner: BlockOwner,
    /// Set at creation when the last handle may park the block in its thread's cache (T8): a
    /// small, non-empty block of a cacheable global-registry route with no budget charge.
    parkable: bool,
    version: AtomicU64,
    /// 0: free; n > 0: n readers; -1: one writer.
    borrow: AtomicIsize,
}

// SAFETY: the block owns (or keeps alive) its memory; all access to the bytes through safe code is
// serialized by the `borrow` flag, and the raw pointer is only dereferenced under a borrow guard
// or by kernel code that documents its own exclusivity.
unsafe impl Send for MemoryBlock {}
// SAFETY: see `Send`; shared references only read immutable fields or use atomics.
unsafe impl Sync for MemoryBlock {}

impl MemoryBlock {
    /// A block allocated through a registry route. `ptr` must come from
    /// `route.allocator.allocate(len, align)`, and `len` bytes must have been recorded in
    /// `route.ledger`; both are undone when the block drops.
    #[inline]
    pub(crate) fn from_route(
        ptr: NonNull<u8>,
        len: usize,
        align: usize,
        device: Device,
        kind: MemoryKind,
        route: RouteRef,
        charge: Option<BudgetCharge>,
    ) -> Self {
        debug_assert_eq!(route.allocator.device(), device);
        let parkable = matches!(&route, RouteRef::Static(r) if r.thread_cacheable)
            && charge.is_none()
            && len > 0
            && len <= thread_cache::MAX_BYTES;
        let mut block = MemoryBlock::with_owner(
            ptr,
            len,
            align,
            device,
            kind,
            false,
            BlockOwner::Routed {
                route,
                _charge: charge,
            },
        );
        block.parkable = parkable;
        block
    }

    /// Allocates `len` bytes from `allocator` directly, outside any registry accounting.
    pub fn allocate(
        allocator: &Arc<dyn Allocator>,
        len: usize,
        align: usize,
        kind: MemoryKind,
    ) -> Result<Arc<Self>> {
        let ptr = allocator.allocate(len, align)?;
        let owner = BlockOwner::Allocator {
            allocator: allocator.clone(),
        };
        let device = allocator.device();
        Ok(Arc::new(MemoryBlock::with_owner(
            ptr, len, align, device, kind, false, owner,
        )))
    }

    /// Wraps memory owned elsewhere without copying (M12). `keep_alive` is held until the block
    /// drops, so the owner outlives every view.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid, initialized memory on `device` for as long as `keep_alive`
    /// lives, must not be freed by anyone while it lives, and must not be written by anyone else
    /// while the block exists. If `read_only` is false it must also be writable.
    pub unsafe fn from_external(
        ptr: NonNull<u8>,
        len: usize,
        device: Device,
        kind: MemoryKind,
        read_only: bool,
        keep_alive: Arc<dyn Any + Send + Sync>,
    ) -> Self {
        let align = 1usize << (ptr.as_ptr() as usize).trailing_zeros().min(12);
        MemoryBlock::with_owner(
            ptr,
            len,
            align,
            device,
            kind,
            read_only,
            BlockOwner::External {
                _keep_alive: keep_alive,
            },
        )
    }

    /// A sub-block of `parent` at `offset..offset+len` that keeps `parent` alive. Used by the
    /// arena, whose slices are borrowed independently of each other.
    pub(crate) fn child(
        parent: &Arc<MemoryBlock>,
        offset: usize,
        len: usize,
        kind: MemoryKind,
    ) -> Result<Self> {
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= parent.len)
            .ok_or_else(|| CoreError::OutOfBounds {
                op: "MemoryBlock::child",
                offset,
                end: offset.saturating_add(len),
                len: parent.len,
            })?;
        debug_assert!(end <= parent.len);
        // SAFETY: offset + len <= parent.len was checked above, so the result stays inside the
        // parent's allocation (or one past its end for an empty slice).
        let ptr = unsafe { NonNull::new_unchecked(parent.ptr.as_ptr().add(offset)) };
        let align = 1usize << (ptr.as_ptr() as usize).trailing_zeros().min(12);
        Ok(MemoryBlock::with_owner(
            ptr,
            len,
            align,
            parent.device,
            kind,
            parent.read_only,
            BlockOwner::Parent {
                _parent: parent.clone(),
            },
        ))
    }

    /// An empty block that owns nothing, held by a header kept for reuse.
    pub(crate) fn vacant() -> Self {
        MemoryBlock::with_owner(
            NonNull::dangling(),
            0,
            1,
            Device::Cpu,
            MemoryKind::Default,
            true,
            BlockOwner::Vacant,
        )
    }

    fn with_owner(
        ptr: NonNull<u8>,
        len: usize,
        align: usize,
        device: Device,
        kind: MemoryKind,
        read_only: bool,
        owner: BlockOwner,
    ) -> Self {
        MemoryBlock {
            ptr,
            len,
            align,
            device,
            kind,
            read_only,
            owner,
            parkable: false,
            version: AtomicU64::new(0),
            borrow: AtomicIsize::new(0),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The alignment of the first byte (what was requested, or what the address happens to have).
    pub fn align(&self) -> usize {
        self.align
    }

    pub fn device(&self) -> Device {
        self.device
    }

    pub fn kind(&self) -> MemoryKind {
        self.kind
    }

    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// True for memory owned elsewhere (mapped files, user buffers).
    pub fn is_external(&self) -> bool {
        matches!(self.owner, BlockOwner::External { .. })
    }

    /// The allocator that owns this block, if it came from one (used by `resize`).
    pub fn allocator(&self) -> Option<&Arc<dyn Allocator>> {
        match &self.owner {
            BlockOwner::Routed { route, .. } => Some(&route.allocator),
            BlockOwner::Allocator { allocator } => Some(allocator),
            _ => None,
        }
    }

    /// The global-registry route this block returns to when it may be parked in a thread cache
    /// (see `parkable`).
    #[inline]
    pub(crate) fn parking_route(&self) -> Option<&'static crate::memory::route::Route> {
        if !self.parkable {
            return None;
        }
        match &self.owner {
            BlockOwner::Routed {
                route: RouteRef::Static(route),
                ..
            } => Some(route),
            _ => None,
        }
    }

    /// Back to the state of a fresh block, for reuse from a thread cache: version 0. (The
    /// borrow flag is already free: whoever holds the only handle holds no guard.)
    #[inline]
    pub(crate) fn reset_for_reuse(&self) {
        debug_assert_eq!(self.borrow.load(Ordering::Relaxed), 0);
        self.version.store(0, Ordering::Relaxed);
    }

    /// The version counter: bumped by every write borrow outside inference mode.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// The address of the first byte. Dereferencing it is the caller's responsibility.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// The address of the first byte, for writes. Dereferencing it is the caller's responsibility.
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Takes a shared borrow: fails if a writer holds the block.
    pub fn borrow_read(&self, op: &'static str) -> Result<BlockRead<'_>> {
        let mut current = self.borrow.load(Ordering::Relaxed);
        loop {
            if current < 0 {
                return Err(CoreError::BorrowConflict {
                    op,
                    held: "for writing",
                });
            }
            match self.borrow.compare_exchange_weak(
                current,
                current + 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(BlockRead { block: self }),
                Err(seen) => current = seen,
            }
        }
    }

    /// Takes the exclusive borrow: fails if anyone else holds the block or it is read-only.
    /// Bumps the version counter unless inference mode is on.
    pub fn borrow_write(&self, op: &'static str) -> Result<BlockWrite<'_>> {
        if self.read_only {
            return Err(CoreError::ReadOnly { op });
        }
        match self
            .borrow
            .compare_exchange(0, -1, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => {
                if !InferenceMode::is_enabled() {
                    self.version.fetch_add(1, Ordering::AcqRel);
                }
                Ok(BlockWrite { block: self })
            }
            Err(held) => Err(CoreError::BorrowConflict {
                op,
                held: if held < 0 {
                    "for writing"
                } else {
                    "for reading"
                },
            }),
        }
    }
}

impl Drop for MemoryBlock {
    #[inline]
    fn drop(&mut self) {
        match &self.owner {
            // The budget charge (if any) is returned when the owner drops, after this.
            BlockOwner::Routed { route, .. } => {
                // SAFETY: `ptr`, `len` and `align` are exactly what `route.allocator.allocate`
                // returned and was asked for (see `from_route`), and this is the last reference
                // to the block, so nothing can use the memory afterwards.
                unsafe { route.allocator.deallocate(self.ptr, self.len, self.align) };
                route.ledger.release(self.len);
            }
            BlockOwner::Allocator { allocator } => {
                // SAFETY: as above; `allocate` is the only constructor of this variant.
                unsafe { allocator.deallocate(self.ptr, self.len, self.align) };
            }
            BlockOwner::External { .. } | BlockOwner::Parent { .. } | BlockOwner::Vacant => {}
        }
    }
}

impl fmt::Debug for MemoryBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBlock")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("device", &self.device)
            .field("kind", &self.kind)
            .field("external", &self.is_external())
            .field("version", &self.version())
            .finish()
    }
}

/// A shared borrow of a block; released on drop.
pub struct BlockRead<'a> {
    block: &'a MemoryBlock,
}

impl Drop for BlockRead<'_> {
    fn drop(&mut self) {
        self.block.borrow.fetch_sub(1, Ordering::Release);
    }
}

/// The exclusive borrow of a block; released on drop.
pub struct BlockWrite<'a> {
    block: &'a MemoryBlock,
}

impl Drop for BlockWrite<'_> {
    fn drop(&mut self) {
        self.block.borrow.store(0, Ordering::Release);
    }
}
