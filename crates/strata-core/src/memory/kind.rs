//! Memory kinds (M7): the purpose of an allocation, part of every allocation decision.

/// What a piece of memory is for. Allocators are registered per (device, kind), and usage is
/// accounted per (device, kind), so "how much memory do the weights use" has an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum MemoryKind {
    /// Anything without a more specific purpose; the fallback of every lookup.
    #[default]
    Default,
    /// Weights and other data that live as long as a plan.
    Persistent,
    /// Activations and kernel scratch space of a running request.
    Workspace,
    /// Attention key/value caches.
    KVCache,
    /// Page-locked host memory for device transfers.
    HostPinned,
    /// Ordinary pageable host memory.
    HostPageable,
}

impl MemoryKind {
    pub const ALL: [MemoryKind; 6] = [
        MemoryKind::Default,
        MemoryKind::Persistent,
        MemoryKind::Workspace,
        MemoryKind::KVCache,
        MemoryKind::HostPinned,
        MemoryKind::HostPageable,
    ];

    /// Host-only kinds cannot be placed on an accelerator.
    pub const fn is_host_only(self) -> bool {
        matches!(self, MemoryKind::HostPinned | MemoryKind::HostPageable)
    }

    /// Dense index in `0..6`, for table lookups.
    pub const fn index(self) -> usize {
        self as usize
    }
}
