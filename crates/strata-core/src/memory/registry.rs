//! The allocator registry (M8): (device, memory kind) → allocator, with per-kind accounting.

use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;

use crate::memory::ledger::{KindLedger, KindStats};
use crate::{Allocator, AllocatorStats, CachingAllocator, CoreError, Device, MemoryBlock, MemoryKind, PinnedAllocator, Result};

const KINDS: usize = MemoryKind::ALL.len();

/// The allocators and ledgers of one device.
#[derive(Default)]
struct DeviceSlots {
    allocators: [Option<Arc<dyn Allocator>>; KINDS],
    ledgers: [Arc<KindLedger>; KINDS],
}

#[derive(Default)]
struct Slots {
    cpu: DeviceSlots,
    cuda: Vec<DeviceSlots>,
}

impl Slots {
    fn get(&self, device: Device) -> Option<&DeviceSlots> {
        match device {
            Device::Cpu => Some(&self.cpu),
            Device::Cuda(i) => self.cuda.get(i as usize),
        }
    }

    fn get_or_insert(&mut self, device: Device) -> &mut DeviceSlots {
        match device {
            Device::Cpu => &mut self.cpu,
            Device::Cuda(i) => {
                let i = i as usize;
                if self.cuda.len() <= i {
                    self.cuda.resize_with(i + 1, DeviceSlots::default);
                }
                &mut self.cuda[i]
            }
        }
    }
}

/// Maps (device, kind) to an allocator. Registering for a device alone sets its `Default`; a kind
/// without its own allocator falls back to the device's `Default`; host-only kinds on an
/// accelerator are an error. Usage is accounted per (device, kind) whichever allocator served it.
#[derive(Default)]
pub struct AllocatorRegistry {
    slots: RwLock<Slots>,
}

impl AllocatorRegistry {
    /// An empty registry: every lookup fails until something is registered.
    pub fn new() -> Self {
        AllocatorRegistry::default()
    }

    /// A registry with the standard CPU setup: a caching allocator as the CPU's `Default` and a
    /// pinned allocator for `HostPinned`.
    pub fn with_cpu_defaults() -> Self {
        let registry = AllocatorRegistry::new();
        let mut slots = registry.slots.write();
        slots.cpu.allocators[MemoryKind::Default.index()] = Some(Arc::new(CachingAllocator::cpu()));
        slots.cpu.allocators[MemoryKind::HostPinned.index()] =
            Some(Arc::new(CachingAllocator::new(PinnedAllocator::new()).with_kind(MemoryKind::HostPinned)));
        drop(slots);
        registry
    }

    /// The process-wide registry used by [`crate::Tensor::empty`].
    pub fn global() -> &'static AllocatorRegistry {
        static GLOBAL: OnceLock<AllocatorRegistry> = OnceLock::new();
        GLOBAL.get_or_init(AllocatorRegistry::with_cpu_defaults)
    }

    /// Registers `allocator` as its device's `Default`.
    pub fn register_device(&self, allocator: Arc<dyn Allocator>) -> Result<()> {
        self.register(allocator.device(), MemoryKind::Default, allocator)
    }

    /// Registers `allocator` for (device, kind), replacing any previous one.
    pub fn register(&self, device: Device, kind: MemoryKind, allocator: Arc<dyn Allocator>) -> Result<()> {
        check_kind(device, kind)?;
        let expected = if kind.is_host_only() { Device::Cpu } else { device };
        if allocator.device() != expected {
            return Err(CoreError::DeviceMismatch {
                op: "AllocatorRegistry::register",
                expected,
                actual: allocator.device(),
            });
        }
        self.slots.write().get_or_insert(device).allocators[kind.index()] = Some(allocator);
        Ok(())
    }

    /// The allocator serving (device, kind), falling back to the device's `Default`.
    pub fn resolve(&self, device: Device, kind: MemoryKind) -> Result<Arc<dyn Allocator>> {
        check_kind(device, kind)?;
        let slots = self.slots.read();
        resolve_in(slots.get(device), kind)
            .cloned()
            .ok_or(CoreError::NoAllocator { device, kind })
    }

    /// Allocates a block of `bytes` for (device, kind), accounted to that kind.
    pub fn allocate(&self, device: Device, kind: MemoryKind, bytes: usize, align: usize) -> Result<Arc<MemoryBlock>> {
        check_kind(device, kind)?;
        let (allocator, ledger) = {
            let slots = self.slots.read();
            let device_slots = slots.get(device);
            let allocator = resolve_in(device_slots, kind).ok_or(CoreError::NoAllocator { device, kind })?;
            let ledger = device_slots.map(|d| d.ledgers[kind.index()].clone());
            (allocator.clone(), ledger)
        };
        let ptr = allocator.allocate(bytes, align).map_err(|err| match err {
            CoreError::OutOfMemory { bytes, device, reason, .. } => CoreError::OutOfMemory { bytes, device, kind, reason },
            other => other,
        })?;
        if let Some(ledger) = &ledger {
            ledger.record(bytes);
        }
        Ok(Arc::new(MemoryBlock::from_allocator(ptr, bytes, align, kind, allocator, ledger)))
    }

    /// Bytes in use for (device, kind), whichever allocator served them.
    pub fn stats(&self, device: Device, kind: MemoryKind) -> KindStats {
        let slots = self.slots.read();
        slots.get(device).map(|d| d.ledgers[kind.index()].stats()).unwrap_or_default()
    }

    /// The counters of the allocator serving (device, kind).
    pub fn allocator_stats(&self, device: Device, kind: MemoryKind) -> Result<AllocatorStats> {
        Ok(self.resolve(device, kind)?.stats())
    }

    /// Usage of every kind that has allocated anything, per device.
    pub fn all_stats(&self) -> Vec<(Device, MemoryKind, KindStats)> {
        let slots = self.slots.read();
        let devices = std::iter::once((Device::Cpu, &slots.cpu))
            .chain(slots.cuda.iter().enumerate().map(|(i, d)| (Device::Cuda(i as u32), d)));
        let mut out = Vec::new();
        for (device, d) in devices {
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
        let slots = self.slots.read();
        let devices = std::iter::once(&slots.cpu).chain(slots.cuda.iter());
        for d in devices {
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

fn resolve_in(slots: Option<&DeviceSlots>, kind: MemoryKind) -> Option<&Arc<dyn Allocator>> {
    let slots = slots?;
    slots.allocators[kind.index()]
        .as_ref()
        .or(slots.allocators[MemoryKind::Default.index()].as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CpuAllocator;

    #[test]
    fn fallback_and_errors() {
        let r = AllocatorRegistry::new();
        assert!(matches!(r.resolve(Device::Cpu, MemoryKind::Workspace), Err(CoreError::NoAllocator { .. })));
        let default: Arc<dyn Allocator> = Arc::new(CpuAllocator::new());
        r.register_device(default.clone()).unwrap();
        assert!(Arc::ptr_eq(&r.resolve(Device::Cpu, MemoryKind::KVCache).unwrap(), &default));
        let weights: Arc<dyn Allocator> = Arc::new(CpuAllocator::new());
        r.register(Device::Cpu, MemoryKind::Persistent, weights.clone()).unwrap();
        assert!(Arc::ptr_eq(&r.resolve(Device::Cpu, MemoryKind::Persistent).unwrap(), &weights));
        assert!(matches!(
            r.resolve(Device::Cuda(0), MemoryKind::HostPinned),
            Err(CoreError::HostKindOnDevice { .. })
        ));
        assert!(matches!(r.resolve(Device::Cuda(1), MemoryKind::Default), Err(CoreError::NoAllocator { .. })));
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
        let w = r.allocate(Device::Cpu, MemoryKind::Persistent, 1000, 256).unwrap();
        let a = r.allocate(Device::Cpu, MemoryKind::Workspace, 300, 256).unwrap();
        assert_eq!(r.stats(Device::Cpu, MemoryKind::Persistent).active_bytes, 1000);
        assert_eq!(r.stats(Device::Cpu, MemoryKind::Workspace).active_bytes, 300);
        assert_eq!(r.allocator_stats(Device::Cpu, MemoryKind::Default).unwrap().active_bytes, 1300);
        assert_eq!(w.kind(), MemoryKind::Persistent);
        drop(w);
        assert_eq!(r.stats(Device::Cpu, MemoryKind::Persistent).active_bytes, 0);
        assert_eq!(r.stats(Device::Cpu, MemoryKind::Persistent).peak_bytes, 1000);
        assert_eq!(r.all_stats().len(), 2);
        drop(a);
        assert_eq!(r.allocator_stats(Device::Cpu, MemoryKind::Default).unwrap().active_bytes, 0);
    }

    #[test]
    fn allocation_failure_names_the_kind() {
        let r = AllocatorRegistry::new();
        r.register_device(Arc::new(CpuAllocator::with_limit(10))).unwrap();
        let err = r.allocate(Device::Cpu, MemoryKind::KVCache, 11, 256).unwrap_err();
        assert!(matches!(err, CoreError::OutOfMemory { bytes: 11, kind: MemoryKind::KVCache, .. }), "{err}");
        assert!(err.to_string().contains("KVCache"));
    }
}
