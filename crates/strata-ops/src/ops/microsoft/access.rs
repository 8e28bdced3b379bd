//! Contiguous element access for the family's kernels, with optional inputs and outputs read as
//! empty slices or `None` (a missing optional tensor is undefined in `KernelIo`).

use strata_core::{Element, ReadGuard, Tensor, WriteGuard};

pub(crate) use crate::ops::normalization::common::{contiguous, contiguous_mut};
use crate::OpResult;

/// A read guard over `t` when it is defined.
pub(crate) fn read_optional<T: Element>(t: &Tensor) -> OpResult<Option<ReadGuard<'_, T>>> {
    Ok(if t.is_defined() {
        Some(t.read::<T>()?)
    } else {
        None
    })
}

/// A write guard over `t` when it is defined.
pub(crate) fn write_optional<T: Element>(t: &Tensor) -> OpResult<Option<WriteGuard<'_, T>>> {
    Ok(if t.is_defined() {
        Some(t.write::<T>()?)
    } else {
        None
    })
}

/// The elements of an optional read guard; empty when absent.
pub(crate) fn optional_slice<'a, T: Element>(
    op: &str,
    what: &str,
    guard: &'a Option<ReadGuard<'_, T>>,
) -> OpResult<&'a [T]> {
    match guard {
        Some(g) => contiguous(op, what, g),
        None => Ok(&[]),
    }
}

/// The elements of an optional write guard.
pub(crate) fn optional_slice_mut<'a, T: Element>(
    op: &str,
    what: &str,
    guard: &'a mut Option<WriteGuard<'_, T>>,
) -> OpResult<Option<&'a mut [T]>> {
    guard
        .as_mut()
        .map(|g| contiguous_mut(op, what, g))
        .transpose()
}
