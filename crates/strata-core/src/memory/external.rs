//! External memory (M12, T10): memory owned elsewhere, used in place without copying.

use std::any::Any;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;

use crate::{CoreError, Device, Element, MemoryBlock, MemoryKind, Result, Storage};

/// A read-only memory map of a file. Regions of it become [`Storage`] without copying, and each
/// keeps the mapping alive for as long as any tensor views it.
pub struct MappedFile {
    map: Option<memmap2::Mmap>,
    path: PathBuf,
}

impl MappedFile {
    /// Maps `path` read-only.
    pub fn open(path: impl AsRef<Path>) -> Result<Arc<Self>> {
        let path = path.as_ref().to_path_buf();
        let io = |err: std::io::Error| CoreError::Io {
            path: path.display().to_string(),
            message: err.to_string(),
        };
        let file = File::open(&path).map_err(io)?;
        Self::map(&file, path.clone()).map_err(io)
    }

    /// Maps an open `file` read-only; `path` names it.
    pub fn map(file: &File, path: PathBuf) -> std::io::Result<Arc<Self>> {
        let len = file.metadata()?.len();
        // An empty file cannot be mapped; it simply has no bytes.
        let map = if len == 0 {
            None
        } else {
            // SAFETY: the mapping is read-only and private to this process. Like every memory
            // map it assumes the file is not truncated or rewritten by another process while
            // mapped; model files are treated as immutable for the lifetime of a plan.
            Some(unsafe { memmap2::Mmap::map(file) }?)
        };
        Ok(Arc::new(MappedFile { map, path }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }

    pub fn len(&self) -> usize {
        self.bytes().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes `offset..offset+len` of the file as read-only `Persistent` storage, zero-copy.
    pub fn storage(self: &Arc<Self>, offset: usize, len: usize) -> Result<Storage> {
        let bytes = self.bytes();
        let end = offset
            .checked_add(len)
            .filter(|&end| end <= bytes.len())
            .ok_or_else(|| CoreError::OutOfBounds {
                op: "MappedFile::storage",
                offset,
                end: offset.saturating_add(len),
                len: bytes.len(),
            })?;
        let region = &bytes[offset..end];
        let ptr = NonNull::new(region.as_ptr().cast_mut()).unwrap_or(NonNull::dangling());
        let keep_alive: Arc<dyn Any + Send + Sync> = Arc::new(MappedRegion {
            file: self.clone(),
            offset,
            len,
        });
        // SAFETY: the region lies inside the mapping (checked above), which is initialized file
        // data that stays mapped while `keep_alive` (this `MappedFile`) lives; the block is
        // read-only, so nothing writes through it.
        let block = unsafe {
            MemoryBlock::from_external(
                ptr,
                len,
                Device::Cpu,
                MemoryKind::Persistent,
                true,
                keep_alive,
            )
        };
        Ok(Storage::new(Arc::new(block)))
    }
}

impl MappedFile {
    /// Where `bytes` starts in the mapping, when it lies wholly inside it.
    pub fn offset_of(&self, bytes: &[u8]) -> Option<usize> {
        let map = self.bytes().as_ptr_range();
        let region = bytes.as_ptr_range();
        (map.start <= region.start && region.end <= map.end)
            .then(|| region.start as usize - map.start as usize)
    }

    /// Drops the pages wholly inside bytes `offset..offset+len` from this process's resident
    /// set: a weight that was copied or packed elsewhere need not stay in memory twice. The
    /// bytes stay readable; touching them again reads them back from the file. Pages shared
    /// with the bytes on either side are kept.
    pub fn evict(&self, offset: usize, len: usize) {
        let Some(map) = &self.map else {
            return;
        };
        let base = map.as_ptr() as usize;
        let start = (base + offset).next_multiple_of(EVICT_PAGE) - base;
        let end = (base + offset.saturating_add(len).min(map.len())) / EVICT_PAGE * EVICT_PAGE;
        let end = end.saturating_sub(base);
        if end <= start {
            return;
        }
        #[cfg(unix)]
        {
            // SAFETY: the range is page-aligned and inside the mapping (clamped above). The
            // mapping is a read-only file map that nothing ever writes, so the kernel refills
            // any dropped page from the file with the very same bytes: every borrow of the
            // mapping keeps reading what it read before. Failure only means the pages stay.
            let _ = unsafe {
                map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start)
            };
        }
    }
}

/// Page granularity of [`MappedFile::evict`]: 4 KiB, the smallest page of the targets built
/// for. A larger real page only makes the kernel round the range, which stays sound.
const EVICT_PAGE: usize = 4096;

/// What a zero-copy region of a [`MappedFile`] keeps alive: the mapping, and on drop (no tensor
/// views the region any more) its pages leave the resident set.
struct MappedRegion {
    file: Arc<MappedFile>,
    offset: usize,
    len: usize,
}

impl Drop for MappedRegion {
    fn drop(&mut self) {
        self.file.evict(self.offset, self.len);
    }
}

impl AsRef<[u8]> for MappedFileBytes {
    fn as_ref(&self) -> &[u8] {
        self.0.bytes()
    }
}

/// A [`MappedFile`] as the owner of `bytes::Bytes`-style buffers: `Bytes::from_owner(MappedFileBytes(map))`.
#[derive(Debug, Clone)]
pub struct MappedFileBytes(pub Arc<MappedFile>);

impl std::fmt::Debug for MappedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedFile")
            .field("path", &self.path)
            .field("len", &self.len())
            .finish()
    }
}

impl Storage {
    /// Takes ownership of `data` and uses its buffer in place (no copy), as writable host memory
    /// of `kind`.
    pub fn from_vec<T: Element>(data: Vec<T>, kind: MemoryKind) -> Storage {
        let mut boxed: Box<[T]> = data.into_boxed_slice();
        let len = std::mem::size_of_val(&*boxed);
        let ptr = NonNull::new(boxed.as_mut_ptr().cast::<u8>()).unwrap_or(NonNull::dangling());
        let keep_alive: Arc<dyn Any + Send + Sync> = Arc::new(boxed);
        // SAFETY: the boxed slice's heap buffer does not move when the box does, stays alive as
        // long as `keep_alive`, holds initialized `T`s (plain old data) and is reachable only
        // through this block from now on.
        let block =
            unsafe { MemoryBlock::from_external(ptr, len, Device::Cpu, kind, false, keep_alive) };
        Storage::new(Arc::new(block))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicted_and_dropped_regions_still_read_the_file() {
        let dir = std::env::temp_dir().join(format!("strata-evict-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("weights.bin");
        let data: Vec<u8> = (0..5 * 4096).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let map = MappedFile::open(&path).unwrap();
        assert_eq!(map.offset_of(&map.bytes()[100..200]), Some(100));
        assert_eq!(map.offset_of(&data[..10]), None, "not inside the map");
        // A region dropped (its pages evicted), then the whole file evicted: still the same
        // bytes, read back from the file.
        drop(map.storage(10, 3 * 4096).unwrap());
        map.evict(0, map.len());
        assert_eq!(map.bytes(), &data[..]);
        let storage = map.storage(4096, 4096).unwrap();
        let guard = storage.block().borrow_read("t").unwrap();
        // SAFETY: 4096 readable bytes under a read borrow.
        let bytes = unsafe { std::slice::from_raw_parts(storage.as_ptr(), 4096) };
        assert_eq!(bytes, &data[4096..8192]);
        drop(guard);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn mapped_regions_are_zero_copy_and_keep_the_map_alive() {
        let dir = std::env::temp_dir().join(format!("strata-map-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("weights.bin");
        std::fs::write(&path, (0u8..=255).collect::<Vec<_>>()).unwrap();
        let map = MappedFile::open(&path).unwrap();
        let storage = map.storage(16, 32).unwrap();
        assert_eq!(storage.as_ptr(), map.bytes()[16..].as_ptr(), "no copy");
        assert!(storage.block().is_read_only() && storage.block().is_external());
        assert!(matches!(
            storage.block().borrow_write("t"),
            Err(CoreError::ReadOnly { .. })
        ));
        drop(map);
        // The region still reads correctly: the storage keeps the mapping alive.
        let guard = storage.block().borrow_read("t").unwrap();
        // SAFETY: 32 readable bytes under a read borrow.
        let bytes = unsafe { std::slice::from_raw_parts(storage.as_ptr(), 32) };
        assert_eq!(bytes[0], 16);
        assert_eq!(bytes[31], 47);
        drop(guard);
        let map = MappedFile::open(&path).unwrap();
        assert!(matches!(
            map.storage(250, 10),
            Err(CoreError::OutOfBounds { .. })
        ));
        assert!(matches!(
            MappedFile::open(dir.join("missing")),
            Err(CoreError::Io { .. })
        ));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn vec_storage_is_zero_copy() {
        let v = vec![1.0f32, 2.0, 3.0];
        let ptr = v.as_ptr() as *const u8;
        let s = Storage::from_vec(v, MemoryKind::Default);
        assert_eq!(s.as_ptr(), ptr);
        assert_eq!(s.len(), 12);
    }
}
