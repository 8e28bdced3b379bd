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
        let len = file.metadata().map_err(io)?.len();
        // An empty file cannot be mapped; it simply has no bytes.
        let map = if len == 0 {
            None
        } else {
            // SAFETY: the mapping is read-only and private to this process. Like every memory
            // map it assumes the file is not truncated or rewritten by another process while
            // mapped; model files are treated as immutable for the lifetime of a plan.
            Some(unsafe { memmap2::Mmap::map(&file) }.map_err(io)?)
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
        let keep_alive: Arc<dyn Any + Send + Sync> = self.clone();
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
