//! Behaviour of tensors over their memory: the version counter (T4), resize and shape metadata
//! (T5), binding into shared buffers (T6), block-quantized tensors (C1) and borrow conflicts.

use std::sync::Arc;

use strata_core::{
    Allocator, AllocatorRegistry, CoreError, CpuAllocator, DType, Device, InferenceMode,
    MappedFile, MemoryKind, Storage, Tensor,
};

fn iota(n: usize) -> Vec<f32> {
    (0..n).map(|v| v as f32).collect()
}

/// A registry over a plain (non-caching) CPU allocator, so allocations can be counted.
fn counting_registry() -> (AllocatorRegistry, Arc<CpuAllocator>) {
    let cpu = Arc::new(CpuAllocator::new());
    let registry = AllocatorRegistry::new();
    registry.register_device(cpu.clone()).unwrap();
    (registry, cpu)
}

// ---------------------------------------------------------------------------------------------
// Version counter (T4).
// ---------------------------------------------------------------------------------------------

#[test]
fn version_is_shared_by_views_and_bumped_by_every_write() {
    let t = Tensor::from_slice(&iota(12), &[3, 4]).unwrap();
    let view = t.transpose(0, 1).unwrap();
    let clone = t.clone();
    let row = t.select(0, 1).unwrap();
    let v0 = t.version();
    assert_eq!(view.version(), v0);

    t.fill(1.0f32).unwrap();
    assert_eq!(t.version(), v0 + 1);
    for other in [&view, &clone, &row] {
        assert_eq!(other.version(), v0 + 1, "views see the same counter");
    }

    row.fill(2.0f32).unwrap();
    assert_eq!(
        t.version(),
        v0 + 2,
        "writing through a view bumps the shared counter"
    );

    drop(view.write::<f32>().unwrap());
    assert_eq!(
        t.version(),
        v0 + 3,
        "taking a write guard counts as a write"
    );

    let source = Tensor::from_slice(&iota(4), &[4]).unwrap();
    let source_version = source.version();
    row.copy_from(&source).unwrap();
    assert_eq!(t.version(), v0 + 4, "copy_from bumps the destination");
    assert_eq!(source.version(), source_version, "and not the source");

    t.fill_zero().unwrap();
    assert_eq!(t.version(), v0 + 5);
    drop(t.write_bytes("test").unwrap());
    assert_eq!(t.version(), v0 + 6);

    // Reads never bump.
    let _ = t.to_vec::<f32>().unwrap();
    drop(t.read::<f32>().unwrap());
    drop(view.read_bytes("test").unwrap());
    let _ = t.contiguous().unwrap();
    assert_eq!(t.version(), v0 + 6);

    // A failed write does not bump either.
    assert!(t.fill(1i32).is_err());
    assert_eq!(t.version(), v0 + 6);

    // Another tensor has its own counter.
    let other = Tensor::zeros(&[3, 4], DType::F32).unwrap();
    let before = other.version();
    t.fill(3.0f32).unwrap();
    assert_eq!(other.version(), before);
}

#[test]
fn inference_mode_skips_the_version_counter() {
    let t = Tensor::zeros(&[8], DType::F32).unwrap();
    let view = t.narrow(0, 2, 4).unwrap();
    let v0 = t.version();
    assert!(!InferenceMode::is_enabled());
    {
        let _guard = InferenceMode::enter();
        assert!(InferenceMode::is_enabled());
        t.fill(1.0f32).unwrap();
        view.fill(2.0f32).unwrap();
        drop(view.write::<f32>().unwrap());
        t.copy_from(&Tensor::from_slice(&iota(8), &[8]).unwrap())
            .unwrap();
        t.fill_zero().unwrap();
        {
            let _nested = InferenceMode::enter();
            t.fill(5.0f32).unwrap();
        }
        assert!(InferenceMode::is_enabled(), "guards nest");
        t.fill(4.0f32).unwrap();
        assert_eq!(t.version(), v0, "no bumps in inference mode");
        assert_eq!(
            t.to_vec::<f32>().unwrap(),
            vec![4.0; 8],
            "but the writes happened"
        );

        // Inference mode is per thread: another thread still bumps.
        let shared = t.clone();
        std::thread::spawn(move || {
            assert!(!InferenceMode::is_enabled());
            shared.fill(6.0f32).unwrap();
        })
        .join()
        .unwrap();
        assert_eq!(t.version(), v0 + 1);
    }
    assert!(!InferenceMode::is_enabled());
    t.fill(7.0f32).unwrap();
    assert_eq!(t.version(), v0 + 2, "bumping resumes after the guard drops");
}

// ---------------------------------------------------------------------------------------------
// resize and set_shape_metadata (T5).
// ---------------------------------------------------------------------------------------------

#[test]
fn resize_reuses_storage_when_capacity_suffices() {
    let (registry, cpu) = counting_registry();
    let mut t = Tensor::empty_in(
        &registry,
        &[4, 4],
        DType::F32,
        Device::Cpu,
        MemoryKind::Workspace,
    )
    .unwrap();
    t.write::<f32>()
        .unwrap()
        .as_mut_slice()
        .unwrap()
        .copy_from_slice(&iota(16));
    let ptr = t.storage().unwrap().as_ptr();
    let block = Arc::as_ptr(t.storage().unwrap().block());
    assert_eq!((t.capacity_bytes(), t.size_in_bytes().unwrap()), (64, 64));

    for dims in [
        &[2usize, 8][..],
        &[3],
        &[16],
        &[1, 1, 2, 2, 2, 2],
        &[0, 5],
        &[],
    ] {
        t.resize_in(&registry, dims).unwrap();
        assert_eq!(t.dims(), dims);
        assert!(t.is_contiguous());
        assert_eq!(
            t.storage().unwrap().as_ptr(),
            ptr,
            "{dims:?} fits: same memory"
        );
        assert!(std::ptr::eq(
            Arc::as_ptr(t.storage().unwrap().block()),
            block
        ));
        assert_eq!(t.capacity_bytes(), 64);
    }
    t.resize_in(&registry, &[2, 2]).unwrap();
    assert_eq!(
        t.to_vec::<f32>().unwrap(),
        iota(4),
        "contents are kept when nothing moves"
    );
    assert_eq!(cpu.stats().allocations, 1, "no allocation so far");

    // Too big: a new block of the same device and kind; the old one is freed.
    let old = t.clone();
    t.resize_in(&registry, &[5, 5]).unwrap();
    assert_eq!(t.dims(), &[5, 5]);
    assert!(!t.shares_storage(&old));
    assert_eq!(t.memory_kind(), MemoryKind::Workspace);
    assert_eq!(t.capacity_bytes(), 100);
    assert_eq!(
        old.dims(),
        &[2, 2],
        "other handles keep their shape and memory"
    );
    assert_eq!(cpu.stats().allocations, 2);
    drop(old);
    assert_eq!(
        registry
            .stats(Device::Cpu, MemoryKind::Workspace)
            .active_bytes,
        100
    );
    assert_eq!(cpu.stats().active_bytes, 100);
}

#[test]
fn resize_of_views_and_errors() {
    let (registry, cpu) = counting_registry();
    let base = Tensor::empty_in(
        &registry,
        &[4, 4],
        DType::F32,
        Device::Cpu,
        MemoryKind::Default,
    )
    .unwrap();
    // A contiguous view starting at row 1 has 12 elements of room left.
    let mut rows = base.narrow(0, 1, 2).unwrap();
    assert_eq!(rows.capacity_bytes(), 48);
    rows.resize_in(&registry, &[12]).unwrap();
    assert!(rows.shares_storage(&base));
    assert_eq!(rows.storage_offset(), 4);
    rows.resize_in(&registry, &[13]).unwrap();
    assert!(
        !rows.shares_storage(&base),
        "13 elements do not fit after the offset"
    );
    assert_eq!(rows.storage_offset(), 0);

    // A strided view is never resized in place, however small the new shape.
    let mut transposed = base.transpose(0, 1).unwrap();
    transposed.resize_in(&registry, &[2]).unwrap();
    assert!(!transposed.shares_storage(&base));
    assert_eq!(cpu.stats().allocations, 3);

    // Errors leave the tensor as it was.
    let mut t = base.clone();
    assert!(matches!(
        t.resize_in(&registry, &[usize::MAX, 2]),
        Err(CoreError::SizeOverflow { .. })
    ));
    assert!(
        t.resize_in(&registry, &[usize::MAX / 2]).is_err(),
        "bytes overflow"
    );
    assert_eq!(t.dims(), &[4, 4]);
    assert!(t.shares_storage(&base));
    let mut undefined = Tensor::undefined();
    assert!(matches!(
        undefined.resize(&[2]),
        Err(CoreError::Undefined { .. })
    ));
    assert!(matches!(
        undefined.set_shape_metadata(&[0]),
        Err(CoreError::Undefined { .. })
    ));

    // The global-registry variant works the same.
    let mut g = Tensor::zeros(&[2, 2], DType::I64).unwrap();
    let ptr = g.storage().unwrap().as_ptr();
    g.resize(&[4]).unwrap();
    assert_eq!(g.storage().unwrap().as_ptr(), ptr);
    g.resize(&[64]).unwrap();
    assert_eq!(g.size_in_bytes().unwrap(), 512);
}

#[test]
fn set_shape_metadata_never_allocates_and_checks_capacity() {
    let (registry, cpu) = counting_registry();
    let mut t = Tensor::empty_in(
        &registry,
        &[4, 4],
        DType::F32,
        Device::Cpu,
        MemoryKind::Default,
    )
    .unwrap();
    let ptr = t.storage().unwrap().as_ptr();
    for dims in [&[16usize][..], &[2, 2], &[1, 16], &[0], &[]] {
        t.set_shape_metadata(dims).unwrap();
        assert_eq!(t.dims(), dims);
        assert_eq!(t.storage().unwrap().as_ptr(), ptr);
    }
    match t.set_shape_metadata(&[17]) {
        Err(CoreError::CapacityExceeded {
            needed, capacity, ..
        }) => assert_eq!((needed, capacity), (68, 64)),
        other => panic!("expected CapacityExceeded, got {other:?}"),
    }
    assert_eq!(t.dims(), &[] as &[usize], "a refused shape changes nothing");
    assert!(t.set_shape_metadata(&[usize::MAX, 3]).is_err());
    assert_eq!(
        cpu.stats().allocations,
        1,
        "set_shape_metadata never allocates"
    );

    // Capacity counts from the view's offset.
    let mut tail = Tensor::empty_in(
        &registry,
        &[10],
        DType::F64,
        Device::Cpu,
        MemoryKind::Default,
    )
    .unwrap()
    .narrow(0, 6, 2)
    .unwrap();
    tail.set_shape_metadata(&[2, 2]).unwrap();
    assert!(tail.set_shape_metadata(&[5]).is_err());
    assert_eq!(cpu.stats().allocations, 2);

    // Quantized: whole blocks only.
    let mut q = Tensor::empty_in(
        &registry,
        &[64],
        DType::Q8_0,
        Device::Cpu,
        MemoryKind::Default,
    )
    .unwrap();
    q.set_shape_metadata(&[32]).unwrap();
    assert_eq!(q.size_in_bytes().unwrap(), 34);
    assert!(matches!(
        q.set_shape_metadata(&[96]),
        Err(CoreError::CapacityExceeded {
            needed: 102,
            capacity: 68,
            ..
        })
    ));
    assert!(matches!(
        q.set_shape_metadata(&[33]),
        Err(CoreError::PartialBlock { .. })
    ));
}

// ---------------------------------------------------------------------------------------------
// bind (T6).
// ---------------------------------------------------------------------------------------------

#[test]
fn bind_places_tensors_at_offsets_of_a_shared_buffer() {
    let (registry, _) = counting_registry();
    let block = registry
        .allocate(Device::Cpu, MemoryKind::Workspace, 1024, 256)
        .unwrap();
    let buffer = Storage::new(block);
    let a = Tensor::bind(&buffer, 0, &[4, 4], DType::F32).unwrap();
    let b = Tensor::bind(&buffer, 256, &[8], DType::F64).unwrap();
    let c = Tensor::bind(&buffer, 1000, &[12], DType::I16).unwrap();
    let all = Tensor::bind(&buffer, 0, &[1024], DType::U8).unwrap();
    assert!(a.shares_storage(&b) && b.shares_storage(&all));
    assert_eq!(a.storage().unwrap().as_ptr(), buffer.as_ptr());
    assert_eq!(
        b.storage().unwrap().as_ptr() as usize,
        buffer.as_ptr() as usize + 256
    );
    assert_eq!(a.memory_kind(), MemoryKind::Workspace);
    assert_eq!(
        (a.capacity_bytes(), b.capacity_bytes(), c.capacity_bytes()),
        (64, 64, 24)
    );

    a.fill(1.5f32).unwrap();
    b.fill(-2.0f64).unwrap();
    c.fill(7i16).unwrap();
    let bytes = all.to_vec::<u8>().unwrap();
    assert!(bytes[..64].chunks(4).all(|x| x == 1.5f32.to_le_bytes()));
    assert!(
        bytes[64..256].iter().all(|&x| x == 0),
        "nothing written between the tensors"
    );
    assert!(bytes[256..320]
        .chunks(8)
        .all(|x| x == (-2.0f64).to_le_bytes()));
    assert!(bytes[1000..].chunks(2).all(|x| x == 7i16.to_le_bytes()));
    assert_eq!(
        registry
            .stats(Device::Cpu, MemoryKind::Workspace)
            .allocations,
        1,
        "binding never allocates"
    );

    // An empty tensor may sit at the very end; anything beyond is out of bounds.
    assert_eq!(
        Tensor::bind(&buffer, 1024, &[0, 3], DType::F32)
            .unwrap()
            .numel(),
        0
    );
    match Tensor::bind(&buffer, 1000, &[4, 4], DType::F32) {
        Err(CoreError::OutOfBounds {
            offset, end, len, ..
        }) => assert_eq!((offset, end, len), (1000, 1064, 1024)),
        other => panic!("expected OutOfBounds, got {other:?}"),
    }
    assert!(matches!(
        Tensor::bind(&buffer, 1025, &[0], DType::U8),
        Err(CoreError::OutOfBounds { .. })
    ));
    assert!(matches!(
        Tensor::bind(&buffer, usize::MAX, &[1], DType::U8),
        Err(CoreError::OutOfBounds { .. })
    ));
    assert!(matches!(
        Tensor::bind(&buffer, 8, &[usize::MAX / 4], DType::F64),
        Err(CoreError::SizeOverflow { .. })
    ));
    assert!(matches!(
        Tensor::bind(&buffer, 0, &[33], DType::Q4_0),
        Err(CoreError::PartialBlock { .. })
    ));

    // Misaligned for the dtype.
    for (offset, dtype) in [
        (2, DType::F32),
        (4, DType::F64),
        (1, DType::I16),
        (6, DType::U64),
        (3, DType::BF16),
    ] {
        assert!(
            matches!(
                Tensor::bind(&buffer, offset, &[2], dtype),
                Err(CoreError::InvalidView { .. })
            ),
            "{dtype} at offset {offset}"
        );
    }
    for (offset, dtype) in [
        (2, DType::F16),
        (3, DType::U8),
        (12, DType::I32),
        (24, DType::I64),
        (5, DType::Bool),
    ] {
        assert!(
            Tensor::bind(&buffer, offset, &[2], dtype).is_ok(),
            "{dtype} at offset {offset}"
        );
    }

    // Bounds are those of the given storage, not of the whole block.
    let window = buffer.sub_storage(512, 256).unwrap();
    assert!(Tensor::bind(&window, 200, &[16], DType::F32).is_err());
    let inside = Tensor::bind(&window, 192, &[16], DType::F32).unwrap();
    assert_eq!(
        inside.storage().unwrap().as_ptr() as usize,
        buffer.as_ptr() as usize + 704
    );
    assert!(matches!(
        buffer.sub_storage(1000, 25),
        Err(CoreError::OutOfBounds { .. })
    ));
    assert!(matches!(
        buffer.sub_storage(usize::MAX, 2),
        Err(CoreError::OutOfBounds { .. })
    ));
}

#[test]
fn bound_tensors_keep_the_buffer_alive() {
    let (registry, cpu) = counting_registry();
    let buffer = Storage::new(
        registry
            .allocate(Device::Cpu, MemoryKind::Workspace, 256, 256)
            .unwrap(),
    );
    let t = Tensor::bind(&buffer, 128, &[4], DType::F32).unwrap();
    drop(buffer);
    t.fill(3.0f32).unwrap();
    assert_eq!(cpu.stats().active_bytes, 256);
    drop(t);
    assert_eq!(cpu.stats().active_bytes, 0);
    assert_eq!(
        registry
            .stats(Device::Cpu, MemoryKind::Workspace)
            .active_bytes,
        0
    );
}

#[test]
fn mapped_files_bind_read_only() {
    let dir = std::env::temp_dir().join(format!("strata-bind-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("weights.bin");
    let values: Vec<u8> = iota(32).iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(&path, &values).unwrap();
    let map = MappedFile::open(&path).unwrap();
    let storage = map.storage(0, map.len()).unwrap();
    drop(map);
    let w = Tensor::bind(&storage, 64, &[4, 4], DType::F32).unwrap();
    assert_eq!(
        w.to_vec::<f32>().unwrap(),
        (16..32).map(|v| v as f32).collect::<Vec<_>>()
    );
    assert_eq!(w.memory_kind(), MemoryKind::Persistent);
    assert!(matches!(w.fill(0.0f32), Err(CoreError::ReadOnly { .. })));
    assert!(matches!(w.write::<f32>(), Err(CoreError::ReadOnly { .. })));
    let copy = w.transpose(0, 1).unwrap().contiguous().unwrap();
    assert_eq!(copy.to_vec::<f32>().unwrap()[..2], [16.0, 20.0]);
    std::fs::remove_dir_all(&dir).ok();
}

// ---------------------------------------------------------------------------------------------
// Block-quantized dtypes.
// ---------------------------------------------------------------------------------------------

#[test]
fn quantized_byte_math() {
    assert_eq!(
        (DType::Q8_0.block_size(), DType::Q8_0.size_in_bytes()),
        (32, 34)
    );
    assert_eq!(
        (DType::Q4_0.block_size(), DType::Q4_0.size_in_bytes()),
        (32, 18)
    );
    assert!(DType::Q8_0.is_quantized() && DType::Q4_0.is_quantized() && !DType::U8.is_quantized());
    assert_eq!(DType::Q8_0.bytes_for(64).unwrap(), 68);
    assert_eq!(DType::Q4_0.bytes_for(96).unwrap(), 54);
    assert_eq!(DType::Q4_0.bytes_for(0).unwrap(), 0);
    for bad in [1, 31, 33, 65] {
        assert!(matches!(
            DType::Q8_0.bytes_for(bad),
            Err(CoreError::PartialBlock { block: 32, .. })
        ));
    }
    assert!(matches!(
        DType::Q8_0.bytes_for(usize::MAX / 32 * 32),
        Err(CoreError::SizeOverflow { .. })
    ));
    for d in DType::ALL.into_iter().filter(|d| !d.is_quantized()) {
        assert_eq!(d.block_size(), 1);
        assert_eq!(d.bytes_for(10).unwrap(), 10 * d.size_in_bytes());
    }
}

#[test]
fn quantized_tensors_are_whole_blocks() {
    let q = Tensor::empty(&[2, 32], DType::Q8_0, Device::Cpu, MemoryKind::Default).unwrap();
    assert_eq!(
        (q.size_in_bytes().unwrap(), q.storage().unwrap().len()),
        (68, 68)
    );
    assert!(matches!(
        Tensor::empty(&[3, 10], DType::Q8_0, Device::Cpu, MemoryKind::Default),
        Err(CoreError::PartialBlock { .. })
    ));
    assert!(matches!(
        Tensor::zeros(&[16], DType::Q4_0),
        Err(CoreError::PartialBlock { .. })
    ));

    // Fill with a recognisable pattern and copy as whole blocks.
    {
        let mut w = q.write_bytes("test").unwrap();
        for (i, b) in w.bytes().iter_mut().enumerate() {
            *b = i as u8;
        }
    }
    let copy = Tensor::zeros(&[2, 32], DType::Q8_0).unwrap();
    let v = copy.version();
    copy.copy_from(&q).unwrap();
    assert!(copy.version() > v);
    assert_eq!(
        copy.read_bytes("test").unwrap().bytes(),
        &(0..68u8).collect::<Vec<_>>()[..]
    );

    // Whole-block contiguous views (a row of 32) are fine, and copy the right block.
    let row = q.select(0, 1).unwrap();
    assert_eq!(
        (row.dims(), row.storage_offset(), row.capacity_bytes()),
        (&[32usize][..], 32, 34)
    );
    let one = Tensor::zeros(&[32], DType::Q8_0).unwrap();
    one.copy_from(&row).unwrap();
    assert_eq!(
        one.read_bytes("test").unwrap().bytes(),
        &(34..68u8).collect::<Vec<_>>()[..]
    );
    assert!(q.view(&[64]).is_ok());
    assert!(q.narrow(0, 1, 1).is_ok());
    assert!(q.contiguous().unwrap().shares_storage(&q));

    // Anything that would split a block or stride through it is refused.
    let refused = [
        q.transpose(0, 1),
        q.narrow(1, 0, 16),
        q.narrow(1, 16, 16),
        q.view(&[64]).unwrap().narrow(0, 0, 1),
        q.slice(1, 0, 32, 2),
        q.select(1, 0),
        q.view(&[4, 16]).unwrap().narrow(0, 1, 2),
        q.unsqueeze(0).unwrap().expand(&[3, 2, 32]),
        q.permute(&[1, 0]),
    ];
    for r in refused {
        assert!(
            matches!(
                r,
                Err(CoreError::UnsupportedDType {
                    dtype: DType::Q8_0,
                    ..
                })
            ),
            "{r:?}"
        );
    }

    // No per-element access, no NumPy form.
    assert!(matches!(
        q.read::<u8>(),
        Err(CoreError::DTypeMismatch { .. })
    ));
    assert!(matches!(
        q.read_raw::<u8>("test"),
        Err(CoreError::UnsupportedDType { .. })
    ));
    assert!(matches!(
        q.write_raw::<u16>("test"),
        Err(CoreError::UnsupportedDType { .. })
    ));
    assert!(matches!(
        q.to_npy_bytes(),
        Err(CoreError::UnsupportedDType { .. })
    ));
    let q4 = Tensor::zeros(&[64], DType::Q4_0).unwrap();
    assert!(matches!(
        q4.copy_from(&q.view(&[64]).unwrap()),
        Err(CoreError::DTypeMismatch { .. })
    ));
    assert!(matches!(
        copy.copy_from(&q.view(&[64]).unwrap()),
        Err(CoreError::ShapeMismatch { .. })
    ));
    q.fill_zero().unwrap();
    assert!(q
        .read_bytes("test")
        .unwrap()
        .bytes()
        .iter()
        .all(|&b| b == 0));
    row.fill_zero().unwrap();
}

// ---------------------------------------------------------------------------------------------
// Borrow conflicts.
// ---------------------------------------------------------------------------------------------

fn is_conflict<T>(r: Result<T, CoreError>, held: &str) -> bool {
    matches!(r, Err(CoreError::BorrowConflict { held: h, .. }) if h == held)
}

#[test]
fn a_write_guard_blocks_every_other_access_until_dropped() {
    let t = Tensor::from_slice(&iota(6), &[2, 3]).unwrap();
    let clone = t.clone();
    let view = t.transpose(0, 1).unwrap();
    let elsewhere = Tensor::zeros(&[2, 3], DType::F32).unwrap();

    let mut guard = t.write::<f32>().unwrap();
    guard.set(&[1, 2], 50.0).unwrap();
    assert!(is_conflict(clone.read::<f32>(), "for writing"));
    assert!(is_conflict(view.write::<f32>(), "for writing"));
    assert!(is_conflict(view.to_vec::<f32>(), "for writing"));
    assert!(is_conflict(clone.fill(1.0f32), "for writing"));
    assert!(is_conflict(clone.fill_zero(), "for writing"));
    assert!(is_conflict(view.read_bytes("test"), "for writing"));
    assert!(is_conflict(view.contiguous(), "for writing"));
    assert!(is_conflict(elsewhere.copy_from(&clone), "for writing"));
    assert!(is_conflict(clone.copy_from(&elsewhere), "for writing"));
    assert!(
        is_conflict(t.write::<f32>(), "for writing"),
        "not re-entrant either"
    );
    // Other memory is unaffected.
    elsewhere.fill(2.0f32).unwrap();

    // Other threads get the same error instead of waiting.
    std::thread::scope(|s| {
        s.spawn(|| assert!(is_conflict(clone.read::<f32>(), "for writing")));
        s.spawn(|| assert!(is_conflict(view.fill(0.0f32), "for writing")));
    });

    drop(guard);
    assert_eq!(
        view.to_vec::<f32>().unwrap(),
        vec![0.0, 3.0, 1.0, 4.0, 2.0, 50.0]
    );
    clone.fill(9.0f32).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| assert_eq!(view.to_vec::<f32>().unwrap(), vec![9.0; 6]));
    });
}

#[test]
fn readers_share_and_block_writers() {
    let t = Tensor::from_slice(&iota(4), &[4]).unwrap();
    let view = t.narrow(0, 1, 2).unwrap();
    let r1 = t.read::<f32>().unwrap();
    let r2 = view.read::<f32>().unwrap();
    let r3 = t.read_bytes("test").unwrap();
    assert_eq!(r2.to_vec().unwrap(), vec![1.0, 2.0]);
    let v = t.version();
    assert!(is_conflict(view.write::<f32>(), "for reading"));
    assert!(is_conflict(t.fill(0.0f32), "for reading"));
    assert!(is_conflict(t.write_bytes("test"), "for reading"));
    assert_eq!(t.version(), v, "refused writes do not bump the version");
    drop((r1, r2));
    assert!(
        is_conflict(t.fill(0.0f32), "for reading"),
        "one reader left"
    );
    drop(r3);
    t.fill(0.0f32).unwrap();
}

#[test]
fn copying_between_views_of_one_buffer_is_an_error_not_a_deadlock() {
    let t = Tensor::from_slice(&iota(8), &[8]).unwrap();
    let (lo, hi) = (t.narrow(0, 0, 4).unwrap(), t.narrow(0, 4, 4).unwrap());
    assert!(matches!(
        lo.copy_from(&hi),
        Err(CoreError::BorrowConflict { .. })
    ));
    assert!(matches!(
        t.copy_from(&t),
        Err(CoreError::BorrowConflict { .. })
    ));
    // Nothing stays borrowed after the failure.
    lo.copy_from(&Tensor::from_slice(&[9.0f32; 4], &[4]).unwrap())
        .unwrap();
    assert_eq!(
        t.to_vec::<f32>().unwrap(),
        vec![9.0, 9.0, 9.0, 9.0, 4.0, 5.0, 6.0, 7.0]
    );
}

#[test]
fn dtype_checks_on_typed_access() {
    let t = Tensor::zeros(&[4], DType::I32).unwrap();
    assert!(matches!(
        t.read::<f32>(),
        Err(CoreError::DTypeMismatch {
            expected: DType::F32,
            actual: DType::I32,
            ..
        })
    ));
    assert!(matches!(
        t.write::<u32>(),
        Err(CoreError::DTypeMismatch { .. })
    ));
    assert!(
        t.read_raw::<u32>("bits").is_ok(),
        "raw access only checks the element size"
    );
    assert!(matches!(
        t.read_raw::<u16>("bits"),
        Err(CoreError::UnsupportedDType { .. })
    ));
    let b = Tensor::from_bools(&[true, false, true], &[3]).unwrap();
    assert_eq!(b.dtype(), DType::Bool);
    assert_eq!(b.to_bools().unwrap(), vec![true, false, true]);
    assert_eq!(
        b.to_vec::<u8>().unwrap(),
        vec![1, 0, 1],
        "u8 reads bool memory"
    );
    b.fill(2u8).unwrap();
    assert!(matches!(
        b.to_bools(),
        Err(CoreError::InvalidBool { index: 0, value: 2 })
    ));
    assert!(matches!(t.to_bools(), Err(CoreError::DTypeMismatch { .. })));
    assert!(matches!(
        Tensor::from_slice(&[1.0f32; 5], &[2, 2]),
        Err(CoreError::NumelMismatch { .. })
    ));
    let s = Tensor::scalar(2.5f64).unwrap();
    assert_eq!(
        (s.rank(), s.numel(), s.to_vec::<f64>().unwrap()),
        (0, 1, vec![2.5])
    );
}
