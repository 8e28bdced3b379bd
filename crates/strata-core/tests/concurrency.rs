//! Many threads allocating, cloning, viewing, sending and dropping tensors at once through
//! caching allocators and a registry with several kinds (and re-registration under load).
//! Afterwards every counter must add up: nothing active, cached + active == reserved, ledgers
//! back to zero, and releasing the caches gives everything back.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use strata_core::{
    Allocator, AllocatorRegistry, CachingAllocator, CpuAllocator, DType, Device, MemoryBlock,
    MemoryKind, PinnedAllocator, Storage, Tensor,
};

const THREADS: usize = 8;
const ITERATIONS: usize = 4000;

/// A small xorshift generator, one per thread.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Where a tensor came from, for counting.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Source {
    Kind(MemoryKind),
    Direct,
}

const SOURCES: [Source; 6] = [
    Source::Kind(MemoryKind::Default),
    Source::Kind(MemoryKind::Persistent),
    Source::Kind(MemoryKind::Workspace),
    Source::Kind(MemoryKind::KVCache),
    Source::Kind(MemoryKind::HostPinned),
    Source::Direct,
];

fn source_index(source: Source) -> usize {
    SOURCES.iter().position(|&s| s == source).unwrap()
}

/// A live tensor with the tag written into every element.
struct Tagged {
    tensor: Tensor,
    tag: u32,
}

impl Tagged {
    /// Every element still holds the tag: no other live tensor was handed the same memory.
    fn verify(&self) {
        let guard = self.tensor.read::<u32>().unwrap();
        let data = guard.as_slice().unwrap();
        assert!(
            data.iter().all(|&v| v == self.tag),
            "tensor {:#x} was overwritten",
            self.tag
        );
    }
}

/// Allocation counts per source: (all, non-empty).
type Counts = [(u64, u64); SOURCES.len()];

struct Shared {
    registry: AllocatorRegistry,
    direct: Arc<dyn Allocator>,
}

fn allocate(shared: &Shared, source: Source, elems: usize) -> Tensor {
    match source {
        Source::Kind(kind) => {
            Tensor::empty_in(&shared.registry, &[elems], DType::U32, Device::Cpu, kind).unwrap()
        }
        Source::Direct => {
            let block =
                MemoryBlock::allocate(&shared.direct, elems * 4, 256, MemoryKind::Workspace)
                    .unwrap();
            Tensor::bind(&Storage::new(block), 0, &[elems], DType::U32).unwrap()
        }
    }
}

fn worker(
    id: usize,
    shared: &Shared,
    senders: Vec<mpsc::Sender<Tagged>>,
    inbox: mpsc::Receiver<Tagged>,
) -> Counts {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (id as u64 + 1).wrapping_mul(0x1234_5678_9abc_def1));
    let mut counts: Counts = Default::default();
    let mut live: Vec<Tagged> = Vec::new();
    let mut serial = 0u32;
    for _ in 0..ITERATIONS {
        match rng.below(10) {
            0..=4 => {
                let source = SOURCES[rng.below(SOURCES.len())];
                // Mostly small, sometimes empty, sometimes large (up to 256 KiB).
                let elems = match rng.below(20) {
                    0 => 0,
                    1 => rng.below(1 << 16),
                    _ => rng.below(512),
                };
                let tensor = allocate(shared, source, elems);
                serial += 1;
                let tag = ((id as u32) << 24) | serial;
                tensor.fill(tag).unwrap();
                let c = &mut counts[source_index(source)];
                c.0 += 1;
                c.1 += u64::from(elems > 0);
                live.push(Tagged { tensor, tag });
            }
            5 | 6 if !live.is_empty() => {
                let t = live.swap_remove(rng.below(live.len()));
                t.verify();
            }
            7 if !live.is_empty() => {
                // Send a tensor (or a clone of it, keeping ours) to another thread.
                let i = rng.below(live.len());
                let to = (id + 1 + rng.below(THREADS - 1)) % THREADS;
                let sent = if rng.below(2) == 0 {
                    live.swap_remove(i)
                } else {
                    Tagged {
                        tensor: live[i].tensor.clone(),
                        tag: live[i].tag,
                    }
                };
                senders[to].send(sent).unwrap();
            }
            8 => {
                for t in inbox.try_iter() {
                    t.verify();
                    live.push(t);
                }
            }
            _ if !live.is_empty() => {
                // Views and clones share the memory and see the tag.
                let t = &live[rng.below(live.len())];
                let n = t.tensor.numel();
                let view = t.tensor.narrow(0, n / 3, n - n / 3).unwrap();
                assert!(view.to_vec::<u32>().unwrap().iter().all(|&v| v == t.tag));
                let clone = t.tensor.clone();
                assert!(clone.shares_storage(&view));
            }
            _ => {}
        }
        if live.len() > 48 {
            for t in live.drain(..24) {
                t.verify();
            }
        }
    }
    // Take in what the others sent until every sender is gone (each worker drops its senders
    // when its loop ends, or when it panics), then drop everything.
    drop(senders);
    for t in inbox.iter() {
        t.verify();
        live.push(t);
    }
    for t in live {
        t.verify();
    }
    counts
}

#[test]
fn hammer_allocators_and_registry_from_many_threads() {
    let default = Arc::new(CachingAllocator::cpu());
    let weights = Arc::new(CachingAllocator::cpu().with_kind(MemoryKind::Persistent));
    let scratch_a = Arc::new(CachingAllocator::cpu().with_kind(MemoryKind::Workspace));
    let scratch_b = Arc::new(CachingAllocator::cpu().with_kind(MemoryKind::Workspace));
    let pinned =
        Arc::new(CachingAllocator::new(PinnedAllocator::new()).with_kind(MemoryKind::HostPinned));
    let direct = Arc::new(CachingAllocator::cpu());
    let registry = AllocatorRegistry::new();
    registry.register_device(default.clone()).unwrap();
    registry
        .register(Device::Cpu, MemoryKind::Persistent, weights.clone())
        .unwrap();
    registry
        .register(Device::Cpu, MemoryKind::Workspace, scratch_a.clone())
        .unwrap();
    registry
        .register(Device::Cpu, MemoryKind::HostPinned, pinned.clone())
        .unwrap();
    let shared = Shared {
        registry,
        direct: direct.clone(),
    };

    let (senders, inboxes): (Vec<_>, Vec<_>) =
        (0..THREADS).map(|_| mpsc::channel::<Tagged>()).unzip();
    let done = AtomicBool::new(false);
    let swaps = AtomicU64::new(0);
    let counts: Vec<Counts> = std::thread::scope(|s| {
        // While the workers run, keep switching the Workspace allocator between two caches:
        // blocks must go back to whichever cache made them.
        s.spawn(|| {
            let mut use_b = false;
            // Bounded, so a failing worker cannot leave this loop spinning forever.
            while !done.load(Ordering::Acquire) && swaps.load(Ordering::Relaxed) < 100_000 {
                use_b = !use_b;
                let next: Arc<dyn Allocator> = if use_b {
                    scratch_b.clone()
                } else {
                    scratch_a.clone()
                };
                shared
                    .registry
                    .register(Device::Cpu, MemoryKind::Workspace, next)
                    .unwrap();
                swaps.fetch_add(1, Ordering::Relaxed);
                std::thread::yield_now();
            }
        });
        let workers: Vec<_> = inboxes
            .into_iter()
            .enumerate()
            .map(|(id, inbox)| {
                let senders = senders.clone();
                let shared = &shared;
                s.spawn(move || worker(id, shared, senders, inbox))
            })
            .collect();
        drop(senders);
        let counts: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        done.store(true, Ordering::Release);
        counts
            .into_iter()
            .map(|c| c.expect("a worker panicked"))
            .collect()
    });
    assert!(swaps.load(Ordering::Relaxed) > 0);

    let mut total: Counts = Default::default();
    for c in &counts {
        for (t, x) in total.iter_mut().zip(c) {
            t.0 += x.0;
            t.1 += x.1;
        }
    }
    let count = |source: Source| total[source_index(source)];
    for source in SOURCES {
        assert!(
            count(source).1 > 100,
            "{source:?} was exercised: {:?}",
            count(source)
        );
    }

    // Every allocator: nothing active, the books balance, the cache was used.
    let caches: [(&str, &dyn Allocator); 6] = [
        ("default", &*default),
        ("weights", &*weights),
        ("scratch a", &*scratch_a),
        ("scratch b", &*scratch_b),
        ("pinned", &*pinned),
        ("direct", &*direct),
    ];
    for (name, cache) in caches {
        let s = cache.stats();
        assert_eq!(
            (s.active_bytes, s.active_allocations),
            (0, 0),
            "{name}: {s:?}"
        );
        assert_eq!(
            s.cached_bytes + s.active_bytes,
            s.reserved_bytes,
            "{name}: {s:?}"
        );
        // Nothing released the caches yet, so everything ever active is still reserved.
        assert!(s.peak_active_bytes <= s.reserved_bytes, "{name}: {s:?}");
        assert!(s.cache_hits <= s.allocations, "{name}: {s:?}");
    }
    let used: [(&str, &dyn Allocator); 4] = [
        ("default", &*default),
        ("weights", &*weights),
        ("pinned", &*pinned),
        ("direct", &*direct),
    ];
    for (name, cache) in used {
        let s = cache.stats();
        assert!(s.peak_active_bytes > 0 && s.cache_hits > 0, "{name}: {s:?}");
    }
    assert!(scratch_a.stats().cache_hits + scratch_b.stats().cache_hits > 0);
    // Non-empty allocations are counted by the allocator that served them (empty ones never
    // reach the backing memory).
    let nonempty = |source| count(source).1;
    assert_eq!(
        default.stats().allocations,
        nonempty(Source::Kind(MemoryKind::Default)) + nonempty(Source::Kind(MemoryKind::KVCache))
    );
    assert_eq!(
        weights.stats().allocations,
        nonempty(Source::Kind(MemoryKind::Persistent))
    );
    assert_eq!(
        scratch_a.stats().allocations + scratch_b.stats().allocations,
        nonempty(Source::Kind(MemoryKind::Workspace))
    );
    assert_eq!(
        pinned.stats().allocations,
        nonempty(Source::Kind(MemoryKind::HostPinned))
    );
    assert_eq!(direct.stats().allocations, nonempty(Source::Direct));
    let s = default.stats();
    assert!(
        s.cache_hits > s.allocations / 2,
        "steady state is served from the cache: {s:?}"
    );

    // The per-kind ledgers count every allocation (empty ones too) and are back to zero.
    for kind in [
        MemoryKind::Default,
        MemoryKind::Persistent,
        MemoryKind::Workspace,
        MemoryKind::KVCache,
        MemoryKind::HostPinned,
    ] {
        let k = shared.registry.stats(Device::Cpu, kind);
        assert_eq!(
            (k.active_bytes, k.active_allocations),
            (0, 0),
            "{kind:?}: {k:?}"
        );
        assert_eq!(k.allocations, count(Source::Kind(kind)).0, "{kind:?}");
        assert!(k.peak_bytes > 0, "{kind:?}");
    }
    assert_eq!(
        shared.registry.stats(Device::Cpu, MemoryKind::HostPageable),
        Default::default()
    );

    // Releasing the caches gives every byte back to the backing allocators.
    assert!(default.stats().reserved_bytes > 0);
    shared.registry.release_cached();
    direct.release_cached();
    // The replaced Workspace cache is no longer registered; release it directly.
    scratch_a.release_cached();
    scratch_b.release_cached();
    for (name, cache) in caches {
        let s = cache.stats();
        assert_eq!((s.reserved_bytes, s.cached_bytes), (0, 0), "{name}: {s:?}");
    }
    for backing in [
        default.backing(),
        weights.backing(),
        scratch_a.backing(),
        scratch_b.backing(),
        direct.backing(),
    ] {
        assert_eq!(backing.stats().active_bytes, 0);
    }
    assert_eq!(pinned.backing().stats().active_bytes, 0);
}

#[test]
fn global_registry_under_contention() {
    // The global registry (CPU Default: a caching allocator) from many threads at once; its
    // Default ledger returns to where it started.
    let before = AllocatorRegistry::global().stats(Device::Cpu, MemoryKind::Default);
    std::thread::scope(|s| {
        for id in 0..THREADS {
            s.spawn(move || {
                let mut rng = Rng(id as u64 * 7919 + 17);
                let mut keep = Vec::new();
                for i in 0..ITERATIONS {
                    let t = Tensor::empty(
                        &[1 + rng.below(300)],
                        DType::F32,
                        Device::Cpu,
                        MemoryKind::Default,
                    )
                    .unwrap();
                    t.fill(i as f32).unwrap();
                    if rng.below(4) == 0 {
                        keep.push((t, i as f32));
                    }
                    if keep.len() > 32 {
                        for (t, v) in keep.drain(..) {
                            assert!(t.to_vec::<f32>().unwrap().iter().all(|&x| x == v));
                        }
                    }
                }
            });
        }
    });
    let after = AllocatorRegistry::global().stats(Device::Cpu, MemoryKind::Default);
    assert_eq!(after.active_bytes, before.active_bytes);
    assert_eq!(after.active_allocations, before.active_allocations);
    assert_eq!(
        after.allocations,
        before.allocations + (THREADS * ITERATIONS) as u64
    );
    let s = AllocatorRegistry::global()
        .allocator_stats(Device::Cpu, MemoryKind::Default)
        .unwrap();
    assert_eq!(s.cached_bytes + s.active_bytes, s.reserved_bytes);
    assert!(s.cache_hits > 0);
}

#[test]
fn tensors_and_blocks_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tensor>();
    assert_send_sync::<Storage>();
    assert_send_sync::<MemoryBlock>();
    assert_send_sync::<AllocatorRegistry>();
    assert_send_sync::<CachingAllocator<CpuAllocator>>();
}
