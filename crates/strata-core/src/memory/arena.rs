//! The workspace arena (M10): a bump allocator over one large block.
//!
//! Slices are handed out as [`Storage`] backed by child blocks that keep the arena's block alive
//! and are borrowed independently of one another. They are never freed one by one; `reset` makes
//! the whole arena reusable, and refuses (with [`CoreError::ArenaInUse`]) while any slice is still
//! alive, so a reset can never invalidate memory someone still holds.

use std::sync::Arc;

use crate::align::check_alignment;
use crate::{
    AllocatorRegistry, CoreError, Device, MemoryBlock, MemoryKind, Result, Storage,
    DEFAULT_ALIGNMENT,
};

#[derive(Debug)]
pub struct WorkspaceArena {
    block: Arc<MemoryBlock>,
    used: usize,
}

impl WorkspaceArena {
    /// Reserves `capacity` bytes of `Workspace` memory on `device` from `registry`.
    pub fn new(registry: &AllocatorRegistry, device: Device, capacity: usize) -> Result<Self> {
        let block =
            registry.allocate(device, MemoryKind::Workspace, capacity, DEFAULT_ALIGNMENT)?;
        Ok(WorkspaceArena { block, used: 0 })
    }

    /// An arena over an existing block (which must not be shared with anything else).
    pub fn from_block(block: Arc<MemoryBlock>) -> Self {
        WorkspaceArena { block, used: 0 }
    }

    pub fn capacity(&self) -> usize {
        self.block.len()
    }

    /// Bytes handed out since the last reset, including alignment padding.
    pub fn used(&self) -> usize {
        self.used
    }

    pub fn device(&self) -> Device {
        self.block.device()
    }

    /// Slices handed out and still alive.
    pub fn live_slices(&self) -> usize {
        Arc::strong_count(&self.block) - 1
    }

    /// Hands out `bytes` bytes aligned to `align`.
    pub fn allocate(&mut self, bytes: usize, align: usize) -> Result<Storage> {
        check_alignment(align)?;
        let base = self.block.as_ptr() as usize;
        let exhausted = || CoreError::ArenaExhausted {
            requested: bytes,
            align,
            used: self.used,
            capacity: self.capacity(),
        };
        // Align the absolute address, so the slice is aligned whatever the block's alignment.
        let start_addr = base
            .checked_add(self.used)
            .and_then(|a| a.checked_next_multiple_of(align))
            .ok_or_else(exhausted)?;
        let start = start_addr - base;
        let end = start
            .checked_add(bytes)
            .filter(|&end| end <= self.capacity())
            .ok_or_else(exhausted)?;
        let child = MemoryBlock::child(&self.block, start, bytes, MemoryKind::Workspace)?;
        self.used = end;
        Ok(Storage::new(Arc::new(child)))
    }

    /// Makes all of the arena available again; an error while any slice is alive.
    pub fn reset(&mut self) -> Result<()> {
        match self.live_slices() {
            0 => {
                self.used = 0;
                Ok(())
            }
            live => Err(CoreError::ArenaInUse { live }),
        }
    }

    /// Grows the arena to at least `capacity` bytes (a new block from `registry`); an error
    /// while any slice is alive. Never shrinks.
    pub fn reserve(&mut self, registry: &AllocatorRegistry, capacity: usize) -> Result<()> {
        if capacity <= self.capacity() {
            return Ok(());
        }
        self.reset()?;
        self.block = registry.allocate(
            self.device(),
            MemoryKind::Workspace,
            capacity,
            DEFAULT_ALIGNMENT,
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bump_alignment_and_exhaustion() {
        let registry = AllocatorRegistry::with_cpu_defaults();
        let mut arena = WorkspaceArena::new(&registry, Device::Cpu, 1024).unwrap();
        let a = arena.allocate(10, 1).unwrap();
        let b = arena.allocate(100, 64).unwrap();
        assert_eq!(b.as_ptr() as usize % 64, 0);
        assert!(b.as_ptr() as usize >= a.as_ptr() as usize + 10);
        assert_eq!(arena.live_slices(), 2);
        assert!(matches!(
            arena.allocate(2000, 1),
            Err(CoreError::ArenaExhausted { .. })
        ));
        assert_eq!(
            registry
                .stats(Device::Cpu, MemoryKind::Workspace)
                .active_bytes,
            1024
        );
    }

    #[test]
    fn reset_refuses_while_a_slice_lives() {
        let registry = AllocatorRegistry::with_cpu_defaults();
        let mut arena = WorkspaceArena::new(&registry, Device::Cpu, 256).unwrap();
        let slice = arena.allocate(200, 8).unwrap();
        let copy = slice.clone();
        drop(slice);
        assert!(matches!(
            arena.reset(),
            Err(CoreError::ArenaInUse { live: 1 })
        ));
        assert!(matches!(
            arena.reserve(&registry, 4096),
            Err(CoreError::ArenaInUse { .. })
        ));
        drop(copy);
        arena.reset().unwrap();
        assert_eq!(arena.used(), 0);
        let full = arena.allocate(256, 1).unwrap();
        assert!(
            arena.reserve(&registry, 4096).is_err(),
            "a live slice blocks growth"
        );
        drop(full);
        arena.reserve(&registry, 4096).unwrap();
    }

    #[test]
    fn reserve_grows_when_free() {
        let registry = AllocatorRegistry::with_cpu_defaults();
        let mut arena = WorkspaceArena::new(&registry, Device::Cpu, 64).unwrap();
        arena.reserve(&registry, 4096).unwrap();
        assert_eq!(arena.capacity(), 4096);
        assert_eq!(
            registry
                .stats(Device::Cpu, MemoryKind::Workspace)
                .active_bytes,
            4096
        );
    }

    #[test]
    fn slices_borrow_independently() {
        let registry = AllocatorRegistry::with_cpu_defaults();
        let mut arena = WorkspaceArena::new(&registry, Device::Cpu, 512).unwrap();
        let a = arena.allocate(16, 16).unwrap();
        let b = arena.allocate(16, 16).unwrap();
        let _wa = a.block().borrow_write("test").unwrap();
        let _wb = b.block().borrow_write("test").unwrap();
        assert!(a.block().borrow_read("test").is_err());
    }
}
