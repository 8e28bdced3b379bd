//! The allocator registry (M8): (device, memory kind) → allocator, with per-kind accounting.
//!
//! Lookups are on the path of every tensor creation, so they take no lock: registrations are
//! edited under a mutex, and the resolved [`Route`] of every (device, kind) is published in a
//! fixed table of atomic pointers that readers load directly. A route is never freed while the
//! registry lives, which is what makes the lock-free read sound; routes are deduplicated by
//! (device, kind, allocator), so re-registering the same allocators never grows the registry.
//! A consequence: an allocator replaced by a later registration stays alive (and keeps what it
//! caches) until the registry drops; in the global registry, for the whole process. Call its
//! `release_cached` when replacing it if that matters.

use std::fmt;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::memory::budget::MemoryBudget;
use crate::memory::header_pool;
use crate::memory::ledger::{KindLedger, KindStats};
use crate::memory::route::{Route, RouteRef};
use crate::memory::thread_cache;
use crate::{
    Allocator, AllocatorStats, CachingAllocator, CoreError, CpuAllocator, Device, MemoryBlock,
    MemoryKind, PinnedAllocator, Result,
};

const KINDS: usize = MemoryKind::ALL.len();

/// CUDA ordinals below this are looked up without a lock; higher ones take the registry mutex.
const LOCK_FREE_CUDA_DEVICES: usize = 16;

/// The registrations and ledgers of one device.
#[derive(Default)]
struct DeviceEntry {
    allocators: [Option<Arc<dyn Allocator>>; KINDS],
    ledgers: [Arc<KindLedger>; KINDS],
    /// The current route of each kind (fallback to `Default` applied).
    routes: [Option<Arc<Route>>; KINDS],
}

#[derive(Default)]
struct Registrations {
    cpu: DeviceEntry,
    cuda: Vec<DeviceEntry>,
    /// Every route ever published. Only grows (by distinct (device, kind, allocator)), and is
    /// dropped with the registry: lock-free readers may hold a `&Route` at any time.
    routes: Vec<Arc<Route>>,
}

impl Registrations {
    fn get(&self, device: Device) -> Option<&DeviceEntry> {
        match device {
            Device::Cpu => Some(&self.cpu),
            Device::Cuda(i) => self.cuda.get(i as usize),
        }
    }

    fn get_or_insert(&mut self, device: Device) -> &mut DeviceEntry {
        match device {
            Device::Cpu => &mut self.cpu,
            Device::Cuda(i) => {
                let i = i as usize;
                if self.cuda.len() <= i {
                    self.cuda.resize_with(i + 1, DeviceEntry::default);
                }
                &mut self.cuda[i]
            }
        }
    }

    fn devices(&self) -> impl Iterator<Item = (Device, &DeviceEntry)> {
        std::iter::once((Device::Cpu, &self.cpu)).chain(
            self.cuda
                .iter()
                .enumerate()
                .map(|(i, d)| (Device::Cuda(i as u32), d)),
        )
    }

    /// The route for (device, kind, allocator): an existing one, or a new one kept for good.
    fn route_for(
        &mut self,
        device: Device,
        kind: MemoryKind,
        allocator: &Arc<dyn Allocator>,
        ledger: &Arc<KindLedger>,
    ) -> Arc<Route> {
        if let Some(route) = self
            .routes
            .iter()
            .find(|r| r.device == device && r.kind == kind && Arc::ptr_eq(&r.allocator, allocator))
        {
            return route.clone();
        }
        let route = Arc::new(Route {
            device,
            kind,
            allocator: allocator.clone(),
            ledger: ledger.clone(),
            thread_cacheable: allocator.caches_blocks(),
        });
        self.routes.push(route.clone());
        route
    }
}

/// The lock-free lookup table: one pointer per (device, kind), null when nothing serves it.
/// Every non-null pointer comes from `Arc::as_ptr` of a route in `Registrations::routes`.
struct RouteSlots {
    devices: [[AtomicPtr<Route>; KINDS]; 1 + LOCK_FREE_CUDA_DEVICES],
}

impl RouteSlots {
    fn new() -> Self {
        RouteSlots {
            devices: std::array::from_fn(|_| {
                std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut()))
            }),
        }
    }

    #[inline]
    fn slot(&self, device: Device, kind: MemoryKind) -> Option<&AtomicPtr<Route>> {
        let index = match device {
            Device::Cpu => 0,
            Device::Cuda(i) => (i as usize).checked_add(1)?,
        };
        Some(&self.devices.get(index)?[kind.index()])
    }
}

/// Maps (device, kind) to an allocator. Registering for a device alone sets its `Default`; a kind
/// without its own allocator falls back to the device's `Default`; host-only kinds on an
/// accelerator are an error. Usage is accounted per (device, kind) whichever allocator served it.
pub struct AllocatorRegistry {
    registrations: Mutex<Registrations>,
    slots: RouteSlots,
    /// Set only for the global registry (a static, never dropped), see [`RouteRef::Static`].
    is_static: bool,
}

impl Default for AllocatorRegistry {
    fn default() -> Self {
        AllocatorRegistry::new()
    }
}

impl fmt::Debug for AllocatorRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AllocatorRegistry")
            .field("stats", &self.all_stats())
            .finish()
    }
}

impl AllocatorRegistry {
    /// An empty registry: every lookup fails until something is registered.
    pub fn new() -> Self {
        AllocatorRegistry {
            registrations: Mutex::new(Registrations::default()),
            slots: RouteSlots::new(),
            is_static: false,
        }
    }

    /// A registry with the standard CPU setup: a caching allocator as the CPU's `Default`, a
    /// pinned allocator for `HostPinned`, and the plain CPU allocator for `Persistent`: weights
    /// live as long as their plan, so a freed one (an original replaced by its folded or packed
    /// form) goes back to the system instead of waiting in a cache for a reuse that never comes.
    pub fn with_cpu_defaults() -> Self {
        AllocatorRegistry::new().with_cpu_defaults_registered()
    }

    fn with_cpu_defaults_registered(self) -> Self {
        let pinned =
            CachingAllocator::new(PinnedAllocator::new()).with_kind(MemoryKind::HostPinned);
        let defaults: [(MemoryKind, Arc<dyn Allocator>); 3] = [
            (MemoryKind::Default, Arc::new(CachingAllocator::cpu())),
            (MemoryKind::HostPinned, Arc::new(pinned)),
            (MemoryKind::Persistent, Arc::new(CpuAllocator::new())),
        ];
        for (kind, allocator) in defaults {
            self.register(Device::Cpu, kind, allocator)
                .expect("CPU allocators are valid for every CPU kind");
        }
        self
    }

    /// The process-wide registry used by [`crate::Tensor::empty`].
    #[inline]
    pub fn global() -> &'static AllocatorRegistry {
        static GLOBAL: OnceLock<AllocatorRegistry> = OnceLock::new();
        GLOBAL.get_or_init(|| {
            let registry = AllocatorRegistry {
                is_static: true,
                ..AllocatorRegistry::new()
            };
            registry.with_cpu_defaults_registered()
        })
    }

    /// Registers `allocator` as its device's `Default`.
    pub fn register_device(&self, allocator: Arc<dyn Allocator>) -> Result<()> {
        self.register(allocator.device(), MemoryKind::Default, allocator)
    }

    /// Registers `allocator` for (device, kind), replacing any previous one.
    pub fn register(
        &self,
        device: Device,
        kind: MemoryKind,
        allocator: Arc<dyn Allocator>,
    ) -> Result<()> {
        check_kind(device, kind)?;
        let expected = if kind.is_host_only() {
            Device::Cpu
        } else {
            device
        };
        if allocator.device() != expected {
            return Err(CoreError::DeviceMismatch {
                op: "AllocatorRegistry::register",
                expected,
                actual: allocator.device(),
            });
        }
        let mut registrations = self.registrations.lock();
        registrations.get_or_insert(device).allocators[kind.index()] = Some(allocator);
        // Re-resolve every kind of this device (a new Default changes the fallbacks).
        for k in MemoryKind::ALL {
            if k.is_host_only() && !device.is_cpu() {
                continue;
            }
            let entry = registrations.get_or_insert(device);
            let Some(allocator) = entry.allocators[k.index()]
                .as_ref()
                .or(entry.allocators[MemoryKind::Default.index()].as_ref())
                .cloned()
            else {
                continue;
            };
            let ledger = entry.ledgers[k.index()].clone();
            let route = registrations.route_for(device, k, &allocator, &ledger);
            if let Some(slot) = self.slots.slot(device, k) {
                // Release pairs with the Acquire load in `route`: a reader that sees the
                // pointer sees the route's contents.
                slot.store(Arc::as_ptr(&route).cast_mut(), Ordering::Release);
            }
            registrations.get_or_insert(device).routes[k.index()] = Some(route);
        }
        Ok(())
    }

    /// The route for (device, kind).
    #[inline]
    fn route(&self, device: Device, kind: MemoryKind) -> Result<RouteRef> {
        let Some(slot) = self.slots.slot(device, kind) else {
            return self.route_locked(device, kind);
        };
        let route = slot.load(Ordering::Acquire);
        if route.is_null() {
            return Err(no_route(device, kind));
        }
        if self.is_static {
            // SAFETY: `route` came from `Arc::as_ptr` of a route that `registrations.routes`
            // holds until the registry drops, and this is the global registry, a static that
            // is never dropped: the route lives for the rest of the process.
            Ok(RouteRef::Static(unsafe { &*route }))
        } else {
            // SAFETY: `route` came from `Arc::as_ptr` of an `Arc<Route>` that
            // `registrations.routes` keeps alive until the registry drops, which cannot happen
            // during this `&self` call; so the strong count is at least one and taking one
            // more reference is sound.
            Ok(RouteRef::Shared(unsafe {
                Arc::increment_strong_count(route);
                Arc::from_raw(route)
            }))
        }
    }

    /// The slow path for CUDA ordinals beyond the lock-free table.
    #[cold]
    fn route_locked(&self, device: Device, kind: MemoryKind) -> Result<RouteRef> {
        let registrations = self.registrations.lock();
        registrations
            .get(device)
            .and_then(|entry| entry.routes[kind.index()].clone())
            .map(RouteRef::Shared)
            .ok_or_else(|| no_route(device, kind))
    }

    /// The allocator serving (device, kind), falling back to the device's `Default`.
    pub fn resolve(&self, device: Device, kind: MemoryKind) -> Result<Arc<dyn Allocator>> {
        Ok(self.route(device, kind)?.allocator.clone())
    }

    /// Allocates a block of `bytes` for (device, kind), accounted to that kind.
    #[inline]
    pub fn allocate(
        &self,
        device: Device,
        kind: MemoryKind,
        bytes: usize,
        align: usize,
    ) -> Result<Arc<MemoryBlock>> {
        let route = self.route(device, kind)?;
        // Charged before the allocator is asked, so a plan over its limit allocates nothing.
        let charge = MemoryBudget::charge_current(bytes, kind, device)?;
        // Outside any budget (eager tensors, user code), a small block this thread freed is
        // taken back from its cache. Blocks under a budget are never parked (they carry a
        // charge), so the budget's counts stay exact.
        if charge.is_none() {
            if let RouteRef::Static(route) = &route {
                if let Some(block) = thread_cache::take(route, bytes, align) {
                    return Ok(block);
                }
            }
        }
        let ptr = route
            .allocator
            .allocate(bytes, align)
            .map_err(|err| name_kind(err, kind))?;
        route.ledger.record(bytes);
        Ok(header_pool::new_header(MemoryBlock::from_route(
            ptr, bytes, align, device, kind, route, charge,
        )))
    }

    /// Bytes in use for (device, kind), whichever allocator served them.
    pub fn stats(&self, device: Device, kind: MemoryKind) -> KindStats {
        let registrations = self.registrations.lock();
        registrations
            .get(device)
            .map(|d| d.ledgers[kind.index()].stats())
            .unwrap_or_default()
    }

    /// The counters of the allocator serving (device, kind).
    pub fn allocator_stats(&self, device: Device, kind: MemoryKind) -> Result<AllocatorStats> {
        Ok(self.route(device, kind)?.allocator.stats())
    }

    /// Usage of every kind that has allocated anything, per device.
    pub fn all_stats(&self) -> Vec<(Device, MemoryKind, KindStats)> {
        let registrations = self.registrations.lock();
        let mut out = Vec::new();
        for (device, d) in registrations.devices() {
            for kind in MemoryKind::ALL {
                let stats = d.ledgers[kind.index()].stats();
                if stats.allocations > 0 {
                    out.push((device, kind, stats));
                }
            }
        }
        out
    }

    /// Releases the caches of every registered allocator.
    pub fn release_cached(&self) {
        // The calling thread's parked small blocks first, so the caches below free them too.
        crate::memory::thread_cache::flush_current();
        let registrations = self.registrations.lock();
        for (_, d) in registrations.devices() {
            for allocator in d.allocators.iter().flatten() {
                allocator.release_cached();
            }
        }
    }
}

fn check_kind(device: Device, kind: MemoryKind) -> Result<()> {
    if kind.is_host_only() && !device.is_cpu() {
        Err(CoreError::HostKindOnDevice { device, kind })
    } else {
        Ok(())
    }
}

/// Why (device, kind) has no route.
#[cold]
fn no_route(device: Device, kind: MemoryKind) -> CoreError {
    match check_kind(device, kind) {
        Err(err) => err,
        Ok(()) => CoreError::NoAllocator { device, kind },
    }
}

/// An allocator's out-of-memory error, naming the kind that asked (allocators shared by several
/// kinds only know their own).
#[cold]
fn name_kind(err: CoreError, kind: MemoryKind) -> CoreError {
    match err {
        CoreError::OutOfMemory {
            bytes,
            device,
            reason,
            ..
        } => CoreError::OutOfMemory {
            bytes,
            device,
            kind,
            reason,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CpuAllocator;

    #[test]
    fn fallback_and_errors() {
        let r = AllocatorRegistry::new();
        assert!(matches!(
            r.resolve(Device::Cpu, MemoryKind::Workspace),
            Err(CoreError::NoAllocator { .. })
        ));
        let default: Arc<dyn Allocator> = Arc::new(CpuAllocator::new());
        r.register_device(default.clone()).unwrap();
        assert!(Arc::ptr_eq(
            &r.resolve(Device::Cpu, MemoryKind::KVCache).unwrap(),
            &default
        ));
        let weights: Arc<dyn Allocator> = Arc::new(CpuAllocator::new());
        r.register(Device::Cpu, MemoryKind::Persistent, weights.clone())
            .unwrap();
        assert!(Arc::ptr_eq(
            &r.resolve(Device::Cpu, MemoryKind::Persistent).unwrap(),
            &weights
        ));
        assert!(matches!(
            r.resolve(Device::Cuda(0), MemoryKind::HostPinned),
            Err(CoreError::HostKindOnDevice { .. })
        ));
        assert!(matches!(
            r.resolve(Device::Cuda(1), MemoryKind::Default),
            Err(CoreError::NoAllocator { .. })
        ));
        // A CPU allocator cannot serve a CUDA device.
        assert!(matches!(
            r.register(Device::Cuda(0), MemoryKind::Default, default),
            Err(CoreError::DeviceMismatch { .. })
        ));
    }

    #[test]
    fn per_kind_accounting_shares_one_allocator() {
        let r = AllocatorRegistry::new();
        r.register_device(Arc::new(CpuAllocator::new())).unwrap();
        let w = r
            .allocate(Device::Cpu, MemoryKind::Persistent, 1000, 256)
            .unwrap();
        let a = r
            .allocate(Device::Cpu, MemoryKind::Workspace, 300, 256)
            .unwrap();
        assert_eq!(
            r.stats(Device::Cpu, MemoryKind::Persistent).active_bytes,
            1000
        );
        assert_eq!(
            r.stats(Device::Cpu, MemoryKind::Workspace).active_bytes,
            300
        );
        assert_eq!(
            r.allocator_stats(Device::Cpu, MemoryKind::Default)
                .unwrap()
                .active_bytes,
            1300
        );
        assert_eq!(w.kind(), MemoryKind::Persistent);
        drop(w);
        assert_eq!(r.stats(Device::Cpu, MemoryKind::Persistent).active_bytes, 0);
        assert_eq!(
            r.stats(Device::Cpu, MemoryKind::Persistent).peak_bytes,
            1000
        );
        assert_eq!(r.all_stats().len(), 2);
        drop(a);
        assert_eq!(
            r.allocator_stats(Device::Cpu, MemoryKind::Default)
                .unwrap()
                .active_bytes,
            0
        );
    }

    #[test]
    fn allocation_failure_names_the_kind() {
        let r = AllocatorRegistry::new();
        r.register_device(Arc::new(CpuAllocator::with_limit(10)))
            .unwrap();
        let err = r
            .allocate(Device::Cpu, MemoryKind::KVCache, 11, 256)
            .unwrap_err();
        assert!(
            matches!(
                err,
                CoreError::OutOfMemory {
                    bytes: 11,
                    kind: MemoryKind::KVCache,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("KVCache"));
    }

    #[test]
    fn an_installed_budget_is_charged_before_allocating_and_refunded_on_free() {
        let r = AllocatorRegistry::new();
        r.register_device(Arc::new(CpuAllocator::new())).unwrap();
        let budget = MemoryBudget::new(1000);
        let block = budget
            .install(|| r.allocate(Device::Cpu, MemoryKind::Persistent, 600, 64))
            .unwrap();
        assert_eq!(budget.used(), 600);
        let err = budget
            .install(|| r.allocate(Device::Cpu, MemoryKind::Workspace, 500, 64))
            .unwrap_err();
        assert!(
            matches!(
                err,
                CoreError::MemoryLimitExceeded {
                    bytes: 500,
                    limit: 1000,
                    kind: MemoryKind::Workspace,
                    ..
                }
            ),
            "{err}"
        );
        // Nothing was allocated for the refused request.
        assert_eq!(r.stats(Device::Cpu, MemoryKind::Workspace).allocations, 0);
        // Outside the install nothing is charged; freeing on another thread refunds.
        let free = r
            .allocate(Device::Cpu, MemoryKind::Workspace, 5000, 64)
            .unwrap();
        assert_eq!(budget.used(), 600);
        std::thread::spawn(move || drop(block)).join().unwrap();
        assert_eq!(budget.used(), 0);
        drop(free);
    }
}
