//! Helpers shared by the GGUF tests: temporary files and a raw header builder for files the
//! writer would refuse to produce.

#![allow(dead_code)]

use std::path::PathBuf;

use strata_gguf::{GgufFile, Result};

/// Writes `bytes` to a fresh temporary file and opens it.
pub fn open_bytes(tag: &str, bytes: &[u8]) -> Result<GgufFile> {
    let path = temp_path(tag);
    std::fs::write(&path, bytes).unwrap();
    let out = GgufFile::open(&path);
    std::fs::remove_file(&path).ok();
    out
}

pub fn temp_path(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("strata-gguf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    static COUNTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let id = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    dir.join(format!("{tag}-{id}.gguf"))
}

/// Little-endian header pieces, in order.
#[derive(Default)]
pub struct Raw(pub Vec<u8>);

impl Raw {
    /// Magic, version and the two counts.
    pub fn header(version: u32, tensors: u64, kvs: u64) -> Raw {
        let mut r = Raw(b"GGUF".to_vec());
        r.u32(version).u64(tensors).u64(kvs);
        r
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    /// A tensor info: name, GGML-order dims, type id, offset.
    pub fn tensor(&mut self, name: &str, dims: &[u64], type_id: u32, offset: u64) -> &mut Self {
        self.str(name).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(type_id).u64(offset)
    }
    /// Pads to `align` and appends `n` data bytes.
    pub fn data(&mut self, align: usize, n: usize) -> &mut Self {
        let start = self.0.len().next_multiple_of(align);
        self.0.resize(start + n, 0);
        self
    }
}
