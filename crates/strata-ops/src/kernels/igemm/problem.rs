//! One checked integer product as every block of it sees it (what it reads, where it writes),
//! and the per-thread buffers A is packed into: shared by the microkernel driver and the AMX path.

use std::cell::RefCell;

use super::epilogue::{Epilogue, RawDest, TileCorrection};
use super::pack::{PackA, PackedBRef};

/// One product, checked: what every block of it reads and where it writes.
pub(super) struct Problem<'a> {
    pub(super) a: &'a dyn PackA,
    pub(super) a_zero: &'a [i32],
    pub(super) a_shift: i32,
    pub(super) b: PackedBRef<'a>,
    pub(super) b_zero: &'a [i32],
    pub(super) m: usize,
    pub(super) n: usize,
    pub(super) kp: usize,
    pub(super) epilogue: &'a Epilogue<'a>,
    pub(super) dest: RawDest,
    pub(super) strides: (usize, usize),
}

impl Problem<'_> {
    /// The zero-point correction of a tile whose rows have the packed sums `row_sums`.
    pub(super) fn correction<'s>(&'s self, row_sums: &'s [i32]) -> TileCorrection<'s> {
        TileCorrection {
            depth: self.a.depth() as i32,
            a_zero: self.a_zero,
            a_shift: self.a_shift,
            b_zero: self.b_zero,
            b_shift: self.b.shift,
            row_sums,
            col_sums: self.b.col_sums,
        }
    }
}

thread_local! {
    static A_BUFFERS: RefCell<(Vec<u8>, Vec<i32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Runs `f` with this thread's A packing buffers (`bytes` and `sums` long), or temporary ones
/// should they be in use or gone.
pub(super) fn with_a_buffers<R>(
    bytes: usize,
    sums: usize,
    f: impl FnOnce(&mut [u8], &mut [i32]) -> R,
) -> R {
    let mut f = Some(f);
    let reused = A_BUFFERS.try_with(|cell| {
        let mut buffers = cell.try_borrow_mut().ok()?;
        let (a, s) = &mut *buffers;
        if a.len() < bytes {
            a.resize(bytes, 0);
        }
        if s.len() < sums {
            s.resize(sums, 0);
        }
        let f = f.take()?;
        Some(f(&mut a[..bytes], &mut s[..sums]))
    });
    if let Ok(Some(result)) = reused {
        return result;
    }
    let (mut a, mut s) = (vec![0u8; bytes], vec![0i32; sums]);
    match f.take() {
        Some(f) => f(&mut a, &mut s),
        None => unreachable!("`f` is only taken on the path that returns its result"),
    }
}
