//! Dispatch keys and the bitset a call computes from its tensors.

use std::fmt;

use crate::{Device, InferenceMode, Tensor};

/// One dispatch key. Backends say where the data lives; functionality keys say what the call
/// needs beyond plain dense math. Within each group a later key has higher priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DispatchKey {
    /// Host memory.
    Cpu = 0,
    /// A CUDA device.
    Cuda = 1,
    /// Plain dense tensors: every call has it.
    Dense = 2,
    /// Block-quantized data (Q4_0, Q8_0, …) among the inputs.
    Quantized = 3,
    /// The thread is in inference mode: no version-counter bumps; falls through by default.
    InferenceMode = 4,
}

impl DispatchKey {
    /// Backend keys, lowest priority first.
    pub const BACKENDS: [DispatchKey; 2] = [DispatchKey::Cpu, DispatchKey::Cuda];
    /// Functionality keys, lowest priority first.
    pub const FUNCTIONALITIES: [DispatchKey; 3] = [
        DispatchKey::Dense,
        DispatchKey::Quantized,
        DispatchKey::InferenceMode,
    ];

    /// The key's bit in a [`DispatchKeySet`].
    pub const fn bit(self) -> u8 {
        1 << self as u8
    }

    pub const fn is_backend(self) -> bool {
        matches!(self, DispatchKey::Cpu | DispatchKey::Cuda)
    }

    /// The index of a backend key among [`DispatchKey::BACKENDS`], or of a functionality key
    /// among [`DispatchKey::FUNCTIONALITIES`].
    pub const fn group_index(self) -> usize {
        match self {
            DispatchKey::Cpu => 0,
            DispatchKey::Cuda => 1,
            DispatchKey::Dense => 0,
            DispatchKey::Quantized => 1,
            DispatchKey::InferenceMode => 2,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            DispatchKey::Cpu => "CPU",
            DispatchKey::Cuda => "CUDA",
            DispatchKey::Dense => "Dense",
            DispatchKey::Quantized => "Quantized",
            DispatchKey::InferenceMode => "InferenceMode",
        }
    }
}

/// A set of dispatch keys in one byte.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DispatchKeySet(u8);

impl DispatchKeySet {
    pub const EMPTY: DispatchKeySet = DispatchKeySet(0);
    const BACKEND_MASK: u8 = DispatchKey::Cpu.bit() | DispatchKey::Cuda.bit();

    /// The set holding exactly `keys`.
    pub const fn from_keys(keys: &[DispatchKey]) -> Self {
        let mut bits = 0;
        let mut i = 0;
        while i < keys.len() {
            bits |= keys[i].bit();
            i += 1;
        }
        DispatchKeySet(bits)
    }

    pub const fn bits(self) -> u8 {
        self.0
    }

    pub const fn contains(self, key: DispatchKey) -> bool {
        self.0 & key.bit() != 0
    }

    #[must_use]
    pub const fn with(self, key: DispatchKey) -> Self {
        DispatchKeySet(self.0 | key.bit())
    }

    #[must_use]
    pub const fn without(self, key: DispatchKey) -> Self {
        DispatchKeySet(self.0 & !key.bit())
    }

    #[must_use]
    pub const fn union(self, other: DispatchKeySet) -> Self {
        DispatchKeySet(self.0 | other.0)
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The highest-priority backend key in the set.
    pub const fn backend(self) -> Option<DispatchKey> {
        if self.contains(DispatchKey::Cuda) {
            Some(DispatchKey::Cuda)
        } else if self.contains(DispatchKey::Cpu) {
            Some(DispatchKey::Cpu)
        } else {
            None
        }
    }

    /// Whether the tensors of a call sit on more than one backend.
    pub const fn has_mixed_backends(self) -> bool {
        (self.0 & Self::BACKEND_MASK).count_ones() > 1
    }

    /// The keys of one tensor: its backend, Dense, and Quantized for block-quantized dtypes.
    /// The undefined tensor contributes nothing (an omitted optional input).
    #[inline]
    pub fn of_tensor(tensor: &Tensor) -> Self {
        if !tensor.is_defined() {
            return DispatchKeySet::EMPTY;
        }
        let backend = match tensor.device() {
            Device::Cpu => DispatchKey::Cpu,
            Device::Cuda(_) => DispatchKey::Cuda,
        };
        let mut bits = backend.bit() | DispatchKey::Dense.bit();
        if tensor.dtype().is_quantized() {
            bits |= DispatchKey::Quantized.bit();
        }
        DispatchKeySet(bits)
    }

    /// The keys of a call: the union of its tensors' keys plus the thread's mode
    /// (InferenceMode while a guard lives on this thread).
    #[inline]
    pub fn for_call(tensors: &[&Tensor]) -> Self {
        let mut set = DispatchKeySet::EMPTY;
        for t in tensors {
            set = set.union(DispatchKeySet::of_tensor(t));
        }
        set.with_thread_mode()
    }

    /// This set plus the thread-local keys (InferenceMode).
    #[inline]
    #[must_use]
    pub fn with_thread_mode(self) -> Self {
        if InferenceMode::is_enabled() {
            self.with(DispatchKey::InferenceMode)
        } else {
            self
        }
    }

    /// The keys in the set, backends first, each group lowest priority first.
    pub fn iter(self) -> impl Iterator<Item = DispatchKey> {
        DispatchKey::BACKENDS
            .into_iter()
            .chain(DispatchKey::FUNCTIONALITIES)
            .filter(move |k| self.contains(*k))
    }
}

impl fmt::Debug for DispatchKeySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for DispatchKeySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, key) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(key.name())?;
        }
        f.write_str("}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    #[test]
    fn keys_of_tensors_and_mode() {
        let f = Tensor::zeros(&[2], DType::F32).unwrap();
        let set = DispatchKeySet::for_call(&[&f, &Tensor::undefined()]);
        assert_eq!(
            set,
            DispatchKeySet::from_keys(&[DispatchKey::Cpu, DispatchKey::Dense])
        );
        assert_eq!(set.backend(), Some(DispatchKey::Cpu));
        let q = Tensor::zeros(&[32], DType::Q8_0).unwrap();
        let set = DispatchKeySet::for_call(&[&f, &q]);
        assert!(set.contains(DispatchKey::Quantized));
        {
            let _guard = InferenceMode::enter();
            let set = DispatchKeySet::for_call(&[&f]);
            assert!(set.contains(DispatchKey::InferenceMode));
            assert_eq!(set.to_string(), "{CPU, Dense, InferenceMode}");
        }
        assert!(!DispatchKeySet::for_call(&[&f]).contains(DispatchKey::InferenceMode));
        assert_eq!(DispatchKeySet::EMPTY.backend(), None);
        let mixed = DispatchKeySet::from_keys(&[DispatchKey::Cpu, DispatchKey::Cuda]);
        assert!(mixed.has_mixed_backends());
        assert_eq!(mixed.backend(), Some(DispatchKey::Cuda));
        assert_eq!(std::mem::size_of::<DispatchKeySet>(), 1);
    }
}
