//! The allocator registry (M8, M9): per-(device, kind) accounting, fallback to `Default`, host
//! kinds, and allocation failures that are errors naming bytes, device and kind.

use std::sync::Arc;

use strata_core::{
    Allocator, AllocatorRegistry, CachingAllocator, CoreError, CpuAllocator, DType, Device,
    MemoryBlock, MemoryKind, PinnedAllocator, Tensor,
};

fn bytes_of(t: &Tensor) -> usize {
    t.size_in_bytes().unwrap()
}

#[test]
fn usage_is_accounted_per_kind_whichever_allocator_serves_it() {
    let default = Arc::new(CachingAllocator::cpu());
    let weights = Arc::new(CpuAllocator::new());
    let registry = AllocatorRegistry::new();
    registry.register_device(default.clone()).unwrap();
    registry
        .register(Device::Cpu, MemoryKind::Persistent, weights.clone())
        .unwrap();

    let make = |dims: &[usize], kind| {
        Tensor::empty_in(&registry, dims, DType::F32, Device::Cpu, kind).unwrap()
    };
    let w1 = make(&[1000], MemoryKind::Persistent);
    let w2 = make(&[10, 10], MemoryKind::Persistent);
    let a1 = make(&[64], MemoryKind::Workspace);
    let kv = make(&[3, 100], MemoryKind::KVCache);
    let d = make(&[5], MemoryKind::Default);
    for (t, kind) in [
        (&w1, MemoryKind::Persistent),
        (&a1, MemoryKind::Workspace),
        (&kv, MemoryKind::KVCache),
        (&d, MemoryKind::Default),
    ] {
        assert_eq!(t.memory_kind(), kind);
        assert_eq!(t.device(), Device::Cpu);
    }

    let stats = |kind| registry.stats(Device::Cpu, kind);
    assert_eq!(stats(MemoryKind::Persistent).active_bytes, 4400);
    assert_eq!(stats(MemoryKind::Persistent).active_allocations, 2);
    assert_eq!(stats(MemoryKind::Workspace).active_bytes, 256);
    assert_eq!(stats(MemoryKind::KVCache).active_bytes, 1200);
    assert_eq!(stats(MemoryKind::Default).active_bytes, 20);
    assert_eq!(stats(MemoryKind::HostPinned), Default::default());
    // The weights allocator saw only weights; the caching Default served the other three kinds
    // (in size classes: 256 + 256 + 1280 bytes).
    assert_eq!(weights.stats().active_bytes, 4400);
    assert_eq!(default.stats().active_allocations, 3);
    assert_eq!(default.stats().active_bytes, 256 + 256 + 1280);
    assert_eq!(
        registry
            .allocator_stats(Device::Cpu, MemoryKind::KVCache)
            .unwrap(),
        default.stats()
    );
    let mut listed: Vec<MemoryKind> = registry
        .all_stats()
        .into_iter()
        .map(|(dev, kind, _)| {
            assert_eq!(dev, Device::Cpu);
            kind
        })
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        vec![
            MemoryKind::Default,
            MemoryKind::Persistent,
            MemoryKind::Workspace,
            MemoryKind::KVCache
        ]
    );

    // Views and clones do not count again.
    let views = (
        w1.view(&[10, 100]).unwrap(),
        kv.transpose(0, 1).unwrap(),
        d.clone(),
    );
    assert_eq!(stats(MemoryKind::Persistent).allocations, 2);

    drop((w1, views));
    assert_eq!(stats(MemoryKind::Persistent).active_bytes, 400);
    assert_eq!(stats(MemoryKind::Persistent).peak_bytes, 4400);
    assert_eq!(
        stats(MemoryKind::KVCache).active_bytes,
        1200,
        "a view was dropped, the tensor lives"
    );
    drop((w2, a1, kv, d));
    for kind in MemoryKind::ALL {
        assert_eq!(stats(kind).active_bytes, 0, "{kind:?}");
        assert_eq!(stats(kind).active_allocations, 0, "{kind:?}");
    }
    assert_eq!(weights.stats().active_bytes, 0);
    let s = default.stats();
    assert_eq!(
        (s.active_bytes, s.cached_bytes, s.reserved_bytes),
        (0, 1792, 1792)
    );
    registry.release_cached();
    assert_eq!(default.stats().reserved_bytes, 0);
    assert_eq!(
        stats(MemoryKind::Persistent).allocations,
        2,
        "totals survive"
    );
}

#[test]
fn lookups_fall_back_to_default_and_registration_replaces() {
    let registry = AllocatorRegistry::new();
    assert!(matches!(
        Tensor::empty_in(
            &registry,
            &[2],
            DType::F32,
            Device::Cpu,
            MemoryKind::Default
        ),
        Err(CoreError::NoAllocator {
            device: Device::Cpu,
            kind: MemoryKind::Default
        })
    ));
    let first: Arc<dyn Allocator> = Arc::new(CpuAllocator::new());
    registry.register_device(first.clone()).unwrap();
    for kind in MemoryKind::ALL {
        assert!(
            Arc::ptr_eq(&registry.resolve(Device::Cpu, kind).unwrap(), &first),
            "{kind:?}"
        );
    }
    let kv: Arc<dyn Allocator> = Arc::new(CpuAllocator::new());
    registry
        .register(Device::Cpu, MemoryKind::KVCache, kv.clone())
        .unwrap();
    assert!(Arc::ptr_eq(
        &registry.resolve(Device::Cpu, MemoryKind::KVCache).unwrap(),
        &kv
    ));
    assert!(Arc::ptr_eq(
        &registry
            .resolve(Device::Cpu, MemoryKind::Workspace)
            .unwrap(),
        &first
    ));

    // Replacing the Default: new allocations go to the new one, live blocks still return to the
    // allocator that made them, and the ledger carries on.
    let old_block = registry
        .allocate(Device::Cpu, MemoryKind::Workspace, 100, 64)
        .unwrap();
    let second: Arc<dyn Allocator> = Arc::new(CpuAllocator::new());
    registry.register_device(second.clone()).unwrap();
    let new_block = registry
        .allocate(Device::Cpu, MemoryKind::Workspace, 300, 64)
        .unwrap();
    assert_eq!(
        (first.stats().active_bytes, second.stats().active_bytes),
        (100, 300)
    );
    assert_eq!(
        registry
            .stats(Device::Cpu, MemoryKind::Workspace)
            .active_bytes,
        400
    );
    assert!(Arc::ptr_eq(old_block.allocator().unwrap(), &first));
    drop(old_block);
    assert_eq!(first.stats().active_bytes, 0);
    assert_eq!(
        registry
            .stats(Device::Cpu, MemoryKind::Workspace)
            .active_bytes,
        300
    );
    drop(new_block);
    assert_eq!(
        registry
            .stats(Device::Cpu, MemoryKind::Workspace)
            .active_bytes,
        0
    );

    // A device without registrations has nothing to fall back to.
    assert!(matches!(
        registry.resolve(Device::Cuda(3), MemoryKind::Workspace),
        Err(CoreError::NoAllocator { .. })
    ));
    let err = Tensor::empty_in(
        &registry,
        &[2],
        DType::F32,
        Device::Cuda(1),
        MemoryKind::KVCache,
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("cuda:1") && err.to_string().contains("KVCache"),
        "{err}"
    );
}

#[test]
fn host_kinds_are_refused_on_cuda() {
    let registry = AllocatorRegistry::with_cpu_defaults();
    for kind in [MemoryKind::HostPinned, MemoryKind::HostPageable] {
        let err = Tensor::empty_in(&registry, &[4], DType::F32, Device::Cuda(0), kind).unwrap_err();
        assert!(
            matches!(err, CoreError::HostKindOnDevice { device: Device::Cuda(0), kind: k } if k == kind),
            "{err}"
        );
        assert!(matches!(
            registry.resolve(Device::Cuda(0), kind),
            Err(CoreError::HostKindOnDevice { .. })
        ));
        assert!(matches!(
            registry.allocate(Device::Cuda(2), kind, 16, 256),
            Err(CoreError::HostKindOnDevice {
                device: Device::Cuda(2),
                ..
            })
        ));
        assert!(matches!(
            registry.register(
                Device::Cuda(0),
                kind,
                Arc::new(PinnedAllocator::host_fallback())
            ),
            Err(CoreError::HostKindOnDevice { .. })
        ));
        assert!(matches!(
            Tensor::empty(&[4], DType::F32, Device::Cuda(0), kind),
            Err(CoreError::HostKindOnDevice { .. })
        ));
    }
    // A CPU allocator cannot be registered for a CUDA device.
    assert!(matches!(
        registry.register(
            Device::Cuda(0),
            MemoryKind::Default,
            Arc::new(CpuAllocator::new())
        ),
        Err(CoreError::DeviceMismatch { .. })
    ));
    // On the CPU, host kinds are served: pinned staging comes from its own allocator.
    let pinned = Tensor::empty_in(
        &registry,
        &[1024],
        DType::U8,
        Device::Cpu,
        MemoryKind::HostPinned,
    )
    .unwrap();
    assert_eq!(
        (pinned.device(), pinned.memory_kind()),
        (Device::Cpu, MemoryKind::HostPinned)
    );
    assert_eq!(pinned.storage().unwrap().as_ptr() as usize % 256, 0);
    let pageable = Tensor::empty_in(
        &registry,
        &[8],
        DType::U8,
        Device::Cpu,
        MemoryKind::HostPageable,
    )
    .unwrap();
    assert_eq!(pageable.memory_kind(), MemoryKind::HostPageable);
    assert_eq!(
        registry
            .stats(Device::Cpu, MemoryKind::HostPinned)
            .active_bytes,
        1024
    );
    assert_eq!(
        registry
            .allocator_stats(Device::Cpu, MemoryKind::HostPinned)
            .unwrap()
            .active_bytes,
        1024
    );
    let global_pinned =
        Tensor::empty(&[16], DType::F32, Device::Cpu, MemoryKind::HostPinned).unwrap();
    assert_eq!(global_pinned.memory_kind(), MemoryKind::HostPinned);
}

#[test]
fn impossible_sizes_are_errors_naming_bytes_device_and_kind() {
    // The element count or the byte count does not fit in usize.
    for (dims, dtype) in [
        (&[usize::MAX, 2][..], DType::F32),
        (&[1 << 61, 2], DType::F64),
        (&[usize::MAX / 4], DType::I64),
    ] {
        let err = Tensor::empty(dims, dtype, Device::Cpu, MemoryKind::Workspace).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, CoreError::SizeOverflow { .. }), "{err}");
        assert!(
            text.contains("cpu") && text.contains("Workspace") && text.contains(dtype.name()),
            "{text}"
        );
    }
    // It fits in usize but no system can provide it: an out-of-memory error, not an abort.
    for (dims, dtype, kind) in [
        (&[1usize << 62][..], DType::U8, MemoryKind::Default),
        (&[1 << 60, 4], DType::U8, MemoryKind::KVCache),
        // usize::MAX - 1 bytes: beyond every size class of the caching allocator.
        (&[usize::MAX / 2], DType::I16, MemoryKind::Workspace),
        (
            &[isize::MAX as usize / 4 + 1],
            DType::F32,
            MemoryKind::Persistent,
        ),
    ] {
        let expected: usize = dims.iter().product::<usize>() * dtype.size_in_bytes();
        match Tensor::empty(dims, dtype, Device::Cpu, kind) {
            Err(CoreError::OutOfMemory {
                bytes,
                device,
                kind: k,
                reason,
            }) => {
                assert_eq!(
                    (bytes, device, k),
                    (expected, Device::Cpu, kind),
                    "{reason}"
                );
            }
            other => panic!("expected OutOfMemory for {dims:?}, got {other:?}"),
        }
    }
    // A limited allocator behind a cache: the cache is released and the request retried once,
    // then the error names the kind that asked.
    let cache = Arc::new(CachingAllocator::new(CpuAllocator::with_limit(1 << 20)));
    let registry = AllocatorRegistry::new();
    registry.register_device(cache.clone()).unwrap();
    let keep = Tensor::empty_in(
        &registry,
        &[1 << 18],
        DType::U8,
        Device::Cpu,
        MemoryKind::Default,
    )
    .unwrap();
    drop(
        Tensor::empty_in(
            &registry,
            &[1 << 19],
            DType::U8,
            Device::Cpu,
            MemoryKind::Default,
        )
        .unwrap(),
    );
    assert_eq!(cache.stats().cached_bytes, 1 << 19);
    // 768 KiB + 1 rounds up to an 896 KiB class: with 256 KiB live that exceeds the limit even
    // after the cached 512 KiB are released.
    let err = Tensor::empty_in(
        &registry,
        &[(3 << 18) + 1],
        DType::U8,
        Device::Cpu,
        MemoryKind::KVCache,
    )
    .unwrap_err();
    assert!(
        matches!(err, CoreError::OutOfMemory { bytes, device: Device::Cpu, kind: MemoryKind::KVCache, .. } if bytes == (3 << 18) + 1),
        "{err}"
    );
    assert_eq!(
        cache.stats().cached_bytes,
        0,
        "the cache was released before giving up"
    );
    assert_eq!(
        registry.stats(Device::Cpu, MemoryKind::KVCache),
        Default::default(),
        "a failure is not accounted"
    );
    // After the release, a request that fits succeeds.
    let fits = Tensor::empty_in(
        &registry,
        &[1 << 19],
        DType::U8,
        Device::Cpu,
        MemoryKind::KVCache,
    )
    .unwrap();
    assert_eq!(bytes_of(&fits) + bytes_of(&keep), 3 << 18);
}

#[test]
fn blocks_outside_the_registry() {
    let cache: Arc<dyn Allocator> = Arc::new(CachingAllocator::cpu());
    let block = MemoryBlock::allocate(&cache, 1000, 512, MemoryKind::Workspace).unwrap();
    assert_eq!(
        (block.len(), block.kind(), block.device()),
        (1000, MemoryKind::Workspace, Device::Cpu)
    );
    assert_eq!(block.as_ptr() as usize % 512, 0);
    assert!(Arc::ptr_eq(block.allocator().unwrap(), &cache));
    assert_eq!(cache.stats().active_bytes, 1024);
    drop(block);
    assert_eq!(cache.stats().active_bytes, 0);
    assert!(matches!(
        MemoryBlock::allocate(&cache, 10, 3, MemoryKind::Default),
        Err(CoreError::InvalidAlignment { align: 3 })
    ));
    let zero = MemoryBlock::allocate(&cache, 0, 256, MemoryKind::Default).unwrap();
    assert!(zero.is_empty());
}

/// Host memory that claims to live on a CUDA device, to exercise device routing without a GPU.
#[derive(Debug)]
struct FakeDevice {
    ordinal: u32,
    host: CpuAllocator,
}

impl Allocator for FakeDevice {
    fn allocate(&self, bytes: usize, align: usize) -> Result<std::ptr::NonNull<u8>, CoreError> {
        self.host.allocate(bytes, align)
    }

    unsafe fn deallocate(&self, ptr: std::ptr::NonNull<u8>, bytes: usize, align: usize) {
        // SAFETY: forwarded unchanged from our own `allocate`.
        unsafe { self.host.deallocate(ptr, bytes, align) }
    }

    fn device(&self) -> Device {
        Device::Cuda(self.ordinal)
    }

    fn stats(&self) -> strata_core::AllocatorStats {
        self.host.stats()
    }
}

#[test]
fn devices_are_routed_separately_including_high_ordinals() {
    let registry = AllocatorRegistry::with_cpu_defaults();
    // Ordinal 3 is in the lock-free table, 40 beyond it (looked up under the lock).
    for ordinal in [3u32, 40] {
        let device = Device::Cuda(ordinal);
        let fake = Arc::new(FakeDevice {
            ordinal,
            host: CpuAllocator::new(),
        });
        registry.register_device(fake.clone()).unwrap();
        let t =
            Tensor::empty_in(&registry, &[10], DType::F32, device, MemoryKind::Workspace).unwrap();
        assert_eq!(
            (t.device(), t.memory_kind()),
            (device, MemoryKind::Workspace)
        );
        assert_eq!(fake.stats().active_bytes, 40);
        assert_eq!(
            registry.stats(device, MemoryKind::Workspace).active_bytes,
            40
        );
        assert_eq!(
            registry
                .stats(Device::Cpu, MemoryKind::Workspace)
                .active_bytes,
            0
        );
        assert!(
            matches!(t.to_vec::<f32>(), Err(CoreError::DeviceMismatch { .. })),
            "host access is refused"
        );
        assert!(matches!(
            Tensor::empty_in(&registry, &[1], DType::F32, device, MemoryKind::HostPinned),
            Err(CoreError::HostKindOnDevice { .. })
        ));
        drop(t);
        assert_eq!(fake.stats().active_bytes, 0);
        assert_eq!(
            registry.stats(device, MemoryKind::Workspace).active_bytes,
            0
        );
        // The neighbouring ordinal has nothing registered.
        assert!(matches!(
            registry.resolve(Device::Cuda(ordinal + 1), MemoryKind::Default),
            Err(CoreError::NoAllocator { .. })
        ));
    }
    let listed: Vec<Device> = registry
        .all_stats()
        .into_iter()
        .map(|(d, _, _)| d)
        .collect();
    assert_eq!(listed, vec![Device::Cuda(3), Device::Cuda(40)]);
}

#[test]
fn re_registering_the_same_allocators_does_not_grow_the_registry() {
    let registry = AllocatorRegistry::new();
    let a: Arc<dyn Allocator> = Arc::new(CachingAllocator::cpu());
    let b: Arc<dyn Allocator> = Arc::new(CachingAllocator::cpu());
    registry.register_device(a.clone()).unwrap();
    registry
        .register(Device::Cpu, MemoryKind::Workspace, b.clone())
        .unwrap();
    let (count_a, count_b) = (Arc::strong_count(&a), Arc::strong_count(&b));
    for i in 0..10_000 {
        let (x, y) = if i % 2 == 0 { (&b, &a) } else { (&a, &b) };
        registry.register_device(x.clone()).unwrap();
        registry
            .register(Device::Cpu, MemoryKind::Workspace, y.clone())
            .unwrap();
        drop(
            Tensor::empty_in(
                &registry,
                &[4],
                DType::F32,
                Device::Cpu,
                MemoryKind::KVCache,
            )
            .unwrap(),
        );
    }
    // Routes are kept per distinct (device, kind, allocator), not per registration.
    assert!(
        Arc::strong_count(&a) <= count_a + 12,
        "{} references to a",
        Arc::strong_count(&a)
    );
    assert!(
        Arc::strong_count(&b) <= count_b + 12,
        "{} references to b",
        Arc::strong_count(&b)
    );
    drop(registry);
    assert_eq!(
        (Arc::strong_count(&a), Arc::strong_count(&b)),
        (1, 1),
        "dropping the registry frees its routes"
    );
    assert_eq!(a.stats().active_bytes + b.stats().active_bytes, 0);
}

#[test]
fn persistent_blocks_go_back_to_the_system_not_to_a_cache() {
    let registry = AllocatorRegistry::with_cpu_defaults();
    let persistent = registry
        .resolve(Device::Cpu, MemoryKind::Persistent)
        .unwrap();
    let default = registry.resolve(Device::Cpu, MemoryKind::Default).unwrap();
    assert!(!Arc::ptr_eq(&persistent, &default));
    // A freed weight (an original replaced by its packed form) is not parked for reuse.
    let block = registry
        .allocate(Device::Cpu, MemoryKind::Persistent, 4 << 20, 64)
        .unwrap();
    assert_eq!(persistent.stats().active_bytes, 4 << 20);
    drop(block);
    let stats = persistent.stats();
    assert_eq!((stats.active_bytes, stats.cached_bytes), (0, 0));
    // Scratch-like Default blocks still are.
    drop(
        registry
            .allocate(Device::Cpu, MemoryKind::Default, 4 << 20, 64)
            .unwrap(),
    );
    assert!(default.stats().cached_bytes >= 4 << 20);
}

#[test]
fn a_budget_applies_even_when_a_parked_block_could_serve() {
    use strata_core::MemoryBudget;
    // A fresh thread: its cache of small blocks starts empty.
    std::thread::spawn(|| {
        let kind = MemoryKind::Default;
        // Park a small block in this thread's cache (no budget installed).
        let t = Tensor::empty(&[6], DType::F32, Device::Cpu, kind).unwrap();
        let parked = Arc::as_ptr(t.storage().unwrap().block());
        drop(t);
        // A budget too small refuses the allocation although a parked block could serve it.
        let tight = MemoryBudget::new(16);
        let err = tight
            .install(|| Tensor::empty(&[6], DType::F32, Device::Cpu, kind))
            .unwrap_err();
        assert!(
            matches!(
                err,
                CoreError::MemoryLimitExceeded {
                    bytes: 24,
                    limit: 16,
                    ..
                }
            ),
            "{err}"
        );
        // A budget that fits is charged, with a block of its own.
        let budget = MemoryBudget::new(1000);
        let u = budget
            .install(|| Tensor::empty(&[6], DType::F32, Device::Cpu, kind))
            .unwrap();
        assert_eq!(budget.used(), 24);
        assert_ne!(Arc::as_ptr(u.storage().unwrap().block()), parked);
        drop(u);
        assert_eq!(budget.used(), 0, "a charged block is freed, never parked");
        // Outside the budget the parked block is taken back.
        let v = Tensor::empty(&[6], DType::F32, Device::Cpu, kind).unwrap();
        assert_eq!(Arc::as_ptr(v.storage().unwrap().block()), parked);
    })
    .join()
    .unwrap();
}
