//! Fallible host vectors for lengths a model or an input controls.
//!
//! `Vec::with_capacity(n)` aborts the process when `n` elements cannot be allocated ("memory
//! allocation of N bytes failed") and panics when their byte size overflows. Wherever `n` comes
//! from a file or a caller, reserve through here instead: the failure becomes
//! [`CoreError::OutOfMemory`] naming the bytes, and the caller reports it like any other error.

use crate::memory::budget::MemoryBudget;
use crate::{CoreError, Device, MemoryKind, Result};

/// An empty `Vec` with room for `len` elements, or `OutOfMemory` when that is impossible.
/// Inside a plan build or run, a vector larger than what the plan's [`MemoryBudget`] has left
/// is `MemoryLimitExceeded` before the allocator is asked (it is checked, not charged): a model
/// that declares terabytes is refused by its limit, not by whatever the allocator does with
/// such a request (a sanitizer's or the fuzzer's allocator aborts).
pub fn try_vec_with_capacity<T>(len: usize) -> Result<Vec<T>> {
    let bytes = len.saturating_mul(std::mem::size_of::<T>());
    if let Some(budget) = MemoryBudget::current() {
        budget.check(bytes, MemoryKind::HostPageable, Device::Cpu)?;
    }
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|err| CoreError::OutOfMemory {
            bytes,
            device: Device::Cpu,
            kind: MemoryKind::HostPageable,
            reason: err.to_string(),
        })?;
    Ok(v)
}

/// `len` copies of `value`, or `OutOfMemory` when they cannot be allocated.
pub fn try_vec_filled<T: Clone>(len: usize, value: T) -> Result<Vec<T>> {
    let mut v = try_vec_with_capacity(len)?;
    v.resize(len, value);
    Ok(v)
}

/// The items of an iterator of known length, or `OutOfMemory` when `len` cannot be reserved.
pub fn try_collect<T>(len: usize, items: impl IntoIterator<Item = T>) -> Result<Vec<T>> {
    let mut v = try_vec_with_capacity(len)?;
    v.extend(items);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impossible_lengths_are_out_of_memory_errors() {
        let err = try_vec_with_capacity::<u64>(usize::MAX / 2).unwrap_err();
        assert!(matches!(err, CoreError::OutOfMemory { bytes, .. } if bytes == usize::MAX));
        assert!(try_vec_filled(1 << 60, 0u8).is_err());
    }

    /// Found by the `onnx_load` fuzzer: a HannWindow of 2^40 values reached the allocator while
    /// the plan's limit was 1 GiB.
    #[test]
    fn lengths_past_the_installed_budget_are_refused_before_allocating() {
        let budget = MemoryBudget::new(1 << 20);
        let err = budget
            .install(|| try_vec_with_capacity::<f64>(1 << 40))
            .unwrap_err();
        assert!(
            matches!(
                err,
                CoreError::MemoryLimitExceeded { bytes, limit, .. }
                    if bytes == 8 << 40 && limit == 1 << 20
            ),
            "{err}"
        );
        assert_eq!(budget.used(), 0, "checked, not charged");
        let small = budget.install(|| try_vec_filled(1024, 0u8)).unwrap();
        assert_eq!(small.len(), 1024);
    }

    #[test]
    fn possible_lengths_are_filled() {
        assert_eq!(try_vec_filled(3, 7u8).unwrap(), vec![7, 7, 7]);
        assert_eq!(try_collect(2, [1, 2]).unwrap(), vec![1, 2]);
        assert!(try_vec_with_capacity::<f32>(16).unwrap().capacity() >= 16);
    }
}
