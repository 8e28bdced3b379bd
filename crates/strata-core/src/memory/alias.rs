//! Planned aliases: storages at fixed offsets of one block that may overlap, for a static memory
//! plan in which values with disjoint lifetimes share bytes.

use std::sync::Arc;

use crate::{MemoryBlock, MemoryKind, Result, Storage};

/// A storage over `offset..offset+len` of `parent`, borrowed independently of every other alias.
///
/// # Safety
/// Aliases of the same parent may overlap. The caller must guarantee that two overlapping
/// aliases are never borrowed at the same time (a memory planner guarantees it by giving
/// overlapping values disjoint lifetimes and running them in order), and that no alias escapes
/// to code that could borrow it outside that discipline.
pub unsafe fn alias_region(
    parent: &Arc<MemoryBlock>,
    offset: usize,
    len: usize,
    kind: MemoryKind,
) -> Result<Storage> {
    Ok(Storage::new(Arc::new(MemoryBlock::child(
        parent, offset, len, kind,
    )?)))
}
