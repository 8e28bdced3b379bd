//! Per-operator dispatch tables: one entry per (functionality, backend), built in const context.

use super::{DispatchKey, DispatchKeySet};
use crate::{CoreError, Result};

const BACKENDS: usize = DispatchKey::BACKENDS.len();
const FUNCTIONALITIES: usize = DispatchKey::FUNCTIONALITIES.len();

/// What a table holds for one (functionality, backend).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispatchEntry<F> {
    /// This kernel serves the key.
    Kernel(F),
    /// Try the next lower functionality key of the set.
    Fallthrough,
    /// Nothing serves the key: the call is an error.
    Missing,
}

/// An operator's dispatch table. `F` is the kernel handle (usually a function pointer).
///
/// A new table has every entry missing except InferenceMode, which falls through (inference
/// mode changes bookkeeping, not math). Lookup takes the set's backend and walks its
/// functionality keys from the highest priority down, skipping fallthroughs.
#[derive(Debug, Clone, Copy)]
pub struct DispatchTable<F: Copy + 'static> {
    op: &'static str,
    entries: [[DispatchEntry<F>; BACKENDS]; FUNCTIONALITIES],
}

impl<F: Copy + 'static> DispatchTable<F> {
    /// A table for `op` with nothing registered (InferenceMode falls through).
    pub const fn new(op: &'static str) -> Self {
        let mut entries = [[DispatchEntry::Missing; BACKENDS]; FUNCTIONALITIES];
        entries[DispatchKey::InferenceMode.group_index()] = [DispatchEntry::Fallthrough; BACKENDS];
        DispatchTable { op, entries }
    }

    /// Sets the entry for (`functionality`, `backend`). Keys of the wrong group are ignored at
    /// compile time by a panic (tables are built in const context).
    pub const fn with(
        mut self,
        functionality: DispatchKey,
        backend: DispatchKey,
        entry: DispatchEntry<F>,
    ) -> Self {
        assert!(
            !functionality.is_backend() && backend.is_backend(),
            "DispatchTable::with takes a functionality key, then a backend key"
        );
        self.entries[functionality.group_index()][backend.group_index()] = entry;
        self
    }

    /// Registers `kernel` for (`functionality`, `backend`).
    pub const fn kernel(self, functionality: DispatchKey, backend: DispatchKey, kernel: F) -> Self {
        self.with(functionality, backend, DispatchEntry::Kernel(kernel))
    }

    pub const fn op(&self) -> &'static str {
        self.op
    }

    /// The entry registered for (`functionality`, `backend`).
    pub const fn entry(
        &self,
        functionality: DispatchKey,
        backend: DispatchKey,
    ) -> DispatchEntry<F> {
        self.entries[functionality.group_index()][backend.group_index()]
    }

    /// The kernel serving `keys`: the first non-fallthrough entry from the set's highest
    /// functionality key down, on the set's backend. A missing entry (or a set without a
    /// backend) is [`CoreError::NoKernel`] naming the op and the keys.
    #[inline]
    pub fn lookup(&self, keys: DispatchKeySet) -> Result<F> {
        let Some(backend) = keys.backend() else {
            return Err(self.missing(keys));
        };
        let row = backend.group_index();
        let mut f = FUNCTIONALITIES;
        while f > 0 {
            f -= 1;
            if keys.contains(DispatchKey::FUNCTIONALITIES[f]) {
                match self.entries[f][row] {
                    DispatchEntry::Kernel(kernel) => return Ok(kernel),
                    DispatchEntry::Fallthrough => {}
                    DispatchEntry::Missing => return Err(self.missing(keys)),
                }
            }
        }
        Err(self.missing(keys))
    }

    #[cold]
    fn missing(&self, keys: DispatchKeySet) -> CoreError {
        CoreError::NoKernel { op: self.op, keys }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use DispatchKey::{Cpu, Cuda, Dense, InferenceMode, Quantized};

    type K = fn(i32) -> i32;
    fn dense(x: i32) -> i32 {
        x + 1
    }
    fn quantized(x: i32) -> i32 {
        x * 10
    }

    const TABLE: DispatchTable<K> = DispatchTable::<K>::new("Test")
        .kernel(Dense, Cpu, dense as K)
        .kernel(Quantized, Cpu, quantized as K);

    #[test]
    fn falls_through_and_names_missing_keys() {
        let cpu_dense = DispatchKeySet::from_keys(&[Cpu, Dense]);
        assert_eq!(TABLE.lookup(cpu_dense).unwrap()(1), 2);
        // InferenceMode falls through to Dense.
        let inference = cpu_dense.with(InferenceMode);
        assert_eq!(TABLE.lookup(inference).unwrap()(1), 2);
        // Quantized outranks Dense; InferenceMode falls through to it.
        let q = inference.with(Quantized);
        assert_eq!(TABLE.lookup(q).unwrap()(1), 10);
        // Nothing for CUDA: a typed error naming op and keys.
        let err = TABLE
            .lookup(DispatchKeySet::from_keys(&[Cuda, Dense]))
            .unwrap_err();
        assert_eq!(
            err,
            CoreError::NoKernel {
                op: "Test",
                keys: DispatchKeySet::from_keys(&[Cuda, Dense])
            }
        );
        assert!(err.to_string().contains("Test") && err.to_string().contains("CUDA"));
        assert!(TABLE.lookup(DispatchKeySet::EMPTY).is_err());
        // A table can make Quantized fall through to Dense explicitly.
        const FT: DispatchTable<K> = DispatchTable::<K>::new("FT")
            .kernel(Dense, Cpu, dense as K)
            .with(Quantized, Cpu, DispatchEntry::Fallthrough);
        assert_eq!(FT.lookup(q).unwrap()(1), 2);
        assert_eq!(FT.entry(Quantized, Cuda), DispatchEntry::Missing);
    }
}
