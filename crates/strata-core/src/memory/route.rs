//! A route (M8): the allocator and ledger that serve one (device, memory kind), as the registry
//! resolved them and as every block allocated through it holds them until it drops.

use std::ops::Deref;
use std::sync::Arc;

use crate::memory::ledger::KindLedger;
use crate::{Allocator, Device, MemoryKind};

/// Where an allocation for one (device, kind) goes: the allocator that serves it and the ledger
/// that accounts it. Every block allocated through the registry holds its route, so it is
/// returned to the right allocator and un-accounted from the right ledger, even after the
/// registration changed.
pub(crate) struct Route {
    pub(crate) device: Device,
    pub(crate) kind: MemoryKind,
    pub(crate) allocator: Arc<dyn Allocator>,
    pub(crate) ledger: Arc<KindLedger>,
    /// Blocks of this route may be parked in per-thread caches (its allocator caches freed
    /// blocks anyway; see `thread_cache`).
    pub(crate) thread_cacheable: bool,
}

/// A handle on a [`Route`].
#[derive(Clone)]
pub(crate) enum RouteRef {
    /// A route of the global registry, which is never dropped, so neither are its routes:
    /// blocks refer to them without touching a reference count.
    Static(&'static Route),
    /// A route of any other registry, shared by reference count.
    Shared(Arc<Route>),
}

impl Deref for RouteRef {
    type Target = Route;

    #[inline]
    fn deref(&self) -> &Route {
        match self {
            RouteRef::Static(route) => route,
            RouteRef::Shared(route) => route,
        }
    }
}
