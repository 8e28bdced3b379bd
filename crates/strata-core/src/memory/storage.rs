//! Storage (M2): a byte range of a shared [`MemoryBlock`].

use std::mem::ManuallyDrop;
use std::sync::Arc;

use crate::memory::thread_cache;

use crate::{CoreError, Device, MemoryBlock, MemoryKind, Result};

/// A byte range `offset..offset+len` of a reference-counted block. Cloning shares the block.
#[derive(Clone, Debug)]
pub struct Storage {
    /// Taken out only in `drop`, which hands it to the thread cache (T8).
    block: ManuallyDrop<Arc<MemoryBlock>>,
    offset: usize,
    len: usize,
}

impl Storage {
    /// The whole of `block`.
    #[inline]
    pub fn new(block: Arc<MemoryBlock>) -> Self {
        let len = block.len();
        Storage {
            block: ManuallyDrop::new(block),
            offset: 0,
            len,
        }
    }

    /// A sub-range sharing the same block; bounds-checked against this storage.
    pub fn sub_storage(&self, offset: usize, len: usize) -> Result<Storage> {
        let end = offset
            .checked_add(len)
            .filter(|&end| end <= self.len)
            .ok_or_else(|| CoreError::OutOfBounds {
                op: "sub_storage",
                offset,
                end: offset.saturating_add(len),
                len: self.len,
            })?;
        debug_assert!(end <= self.len);
        Ok(Storage {
            block: ManuallyDrop::new(Arc::clone(&self.block)),
            offset: self.offset + offset,
            len,
        })
    }

    pub fn block(&self) -> &Arc<MemoryBlock> {
        &self.block
    }

    /// Byte offset of this range within its block.
    pub fn offset(&self) -> usize {
        self.offset
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn device(&self) -> Device {
        self.block.device()
    }

    pub fn kind(&self) -> MemoryKind {
        self.block.kind()
    }

    /// Address of the first byte of this range.
    pub fn as_ptr(&self) -> *const u8 {
        self.block.as_ptr().wrapping_add(self.offset)
    }

    /// True when both storages use the same block.
    pub fn shares_block(&self, other: &Storage) -> bool {
        Arc::ptr_eq(&self.block, &other.block)
    }
}

impl Drop for Storage {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: `block` is taken exactly once, here, and `self` is not used afterwards.
        let block = unsafe { ManuallyDrop::take(&mut self.block) };
        thread_cache::park(block);
    }
}
