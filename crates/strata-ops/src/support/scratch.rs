//! Carving a kernel's planned scratch bytes into typed working buffers.

use crate::{OpError, OpResult};

/// Planned scratch bytes viewed as `T`s (whole elements only).
pub(crate) fn scratch_as<'a, T: bytemuck::Pod>(
    op: &str,
    bytes: &'a mut [u8],
) -> OpResult<&'a mut [T]> {
    let whole = bytes.len() / std::mem::size_of::<T>() * std::mem::size_of::<T>();
    bytemuck::try_cast_slice_mut(&mut bytes[..whole])
        .map_err(|e| OpError::kernel(op, format!("scratch: {e}")))
}

/// Takes the first `len` elements off the front of `rest`, or says the scratch is too small.
pub(crate) fn carve<'a, T>(op: &str, rest: &mut &'a mut [T], len: usize) -> OpResult<&'a mut [T]> {
    if rest.len() < len {
        return Err(OpError::kernel(
            op,
            format!("scratch is {} elements short", len - rest.len()),
        ));
    }
    let (head, tail) = std::mem::take(rest).split_at_mut(len);
    *rest = tail;
    Ok(head)
}
