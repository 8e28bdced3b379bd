//! Walks over strided layouts, shared by kernels, without allocating: the row-major odometer
//! step ([`advance_index`]), the strided walk ([`StridedWalk`]: the offsets of every element
//! in `N` operands), and broadcast element-wise maps built on them.

use smallvec::SmallVec;
use strata_core::Layout;

/// Rank up to which a walk keeps its multi-index inline (deeper walks spill it to the heap).
const INLINE_RANK: usize = 16;

/// Advances a row-major multi-index over `dims` (last axis fastest). Returns false after the last
/// index, leaving the index all zeros again.
#[inline(always)]
pub(crate) fn advance_index(index: &mut [usize], dims: &[usize]) -> bool {
    for axis in (0..index.len()).rev() {
        index[axis] += 1;
        if index[axis] < dims[axis] {
            return true;
        }
        index[axis] = 0;
    }
    false
}

/// The offsets of every element of a row-major walk over `dims` (last axis fastest) in `N`
/// strided operands: `start[k] + Σ index[axis] * strides[k][axis]`, kept incrementally (one add
/// per step, no multiplication). Yields nothing when a dim is 0, and `start` once for no dims.
#[derive(Debug, Clone)]
pub struct StridedWalk<'a, const N: usize> {
    dims: &'a [usize],
    strides: [&'a [isize]; N],
    index: SmallVec<[usize; INLINE_RANK]>,
    pos: [isize; N],
    done: bool,
}

impl<'a, const N: usize> StridedWalk<'a, N> {
    /// `strides[k]` has one stride per dim of `dims`.
    #[inline]
    pub fn new(dims: &'a [usize], strides: [&'a [isize]; N], start: [isize; N]) -> Self {
        debug_assert!(strides.iter().all(|s| s.len() == dims.len()));
        StridedWalk {
            dims,
            strides,
            index: SmallVec::from_elem(0, dims.len()),
            pos: start,
            done: dims.contains(&0),
        }
    }
}

impl<const N: usize> Iterator for StridedWalk<'_, N> {
    type Item = [isize; N];

    #[inline]
    fn next(&mut self) -> Option<[isize; N]> {
        if self.done {
            return None;
        }
        let current = self.pos;
        for axis in (0..self.dims.len()).rev() {
            self.index[axis] += 1;
            for k in 0..N {
                self.pos[k] += self.strides[k][axis];
            }
            if self.index[axis] < self.dims[axis] {
                return Some(current);
            }
            for k in 0..N {
                self.pos[k] -= self.strides[k][axis] * self.dims[axis] as isize;
            }
            self.index[axis] = 0;
        }
        self.done = true;
        Some(current)
    }
}

/// Calls `f(out_index, a_pos, b_pos)` for every element of a row-major output whose dims are
/// those of `a` and `b` (already expanded to the output dims, strides may be 0).
#[inline]
pub fn for_each_broadcast(a: &Layout, b: &Layout, mut f: impl FnMut(usize, usize, usize)) {
    let dims = a.dims();
    let rank = dims.len();
    let numel = a.numel();
    if numel == 0 {
        return;
    }
    if rank == 0 {
        f(0, a.offset(), b.offset());
        return;
    }
    let (sa, sb) = (a.strides(), b.strides());
    let inner = dims[rank - 1];
    let (ia, ib) = (sa[rank - 1], sb[rank - 1]);
    let outer = rank - 1;
    let rows = StridedWalk::new(
        &dims[..outer],
        [&sa[..outer], &sb[..outer]],
        [a.offset() as isize, b.offset() as isize],
    );
    let mut out = 0usize;
    for [pa, pb] in rows {
        let (mut x, mut y) = (pa, pb);
        for _ in 0..inner {
            f(out, x as usize, y as usize);
            out += 1;
            x += ia;
            y += ib;
        }
    }
}

/// `out[i] = f(a[i'], b[i''])` with numpy broadcasting; `la`/`lb` are expanded to `out`'s dims
/// and `out` is contiguous.
#[inline]
pub fn binary_map<A: Copy, B: Copy, O>(
    a: &[A],
    la: &Layout,
    b: &[B],
    lb: &Layout,
    out: &mut [O],
    f: impl Fn(A, B) -> O,
) {
    let n = out.len();
    if la.is_contiguous() && lb.is_contiguous() {
        let (a, b) = (
            &a[la.offset()..la.offset() + n],
            &b[lb.offset()..lb.offset() + n],
        );
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            *o = f(x, y);
        }
    } else if lb.strides().iter().all(|&s| s == 0) && la.is_contiguous() {
        let y = b[lb.offset()];
        for (o, &x) in out.iter_mut().zip(&a[la.offset()..la.offset() + n]) {
            *o = f(x, y);
        }
    } else if la.strides().iter().all(|&s| s == 0) && lb.is_contiguous() {
        let x = a[la.offset()];
        for (o, &y) in out.iter_mut().zip(&b[lb.offset()..lb.offset() + n]) {
            *o = f(x, y);
        }
    } else {
        for_each_broadcast(la, lb, |i, pa, pb| out[i] = f(a[pa], b[pb]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odometer_steps_row_major_and_wraps() {
        let dims = [2, 3];
        let mut index = [0, 0];
        let mut seen = vec![index];
        while advance_index(&mut index, &dims) {
            seen.push(index);
        }
        assert_eq!(seen, [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]);
        assert_eq!(index, [0, 0]);
    }

    #[test]
    fn walk_offsets_match_index_times_strides() {
        // A [2, 3, 2] walk over a transposed operand and a broadcast (stride 0) one.
        let dims = [2, 3, 2];
        let (sa, sb) = ([1isize, 4, 2], [0isize, 1, 0]);
        let walk = StridedWalk::new(&dims, [&sa, &sb], [5, 7]);
        let got: Vec<[isize; 2]> = walk.collect();
        let mut want = Vec::new();
        for i in 0..2 {
            for j in 0..3 {
                for k in 0..2 {
                    want.push([5 + i + j * 4 + k * 2, 7 + j]);
                }
            }
        }
        assert_eq!(got, want);
    }

    #[test]
    fn walk_edge_cases() {
        // No dims: one position; a zero dim: none; negative strides walk backwards.
        let none: [usize; 0] = [];
        assert_eq!(
            StridedWalk::new(&none, [&[]], [3]).collect::<Vec<_>>(),
            [[3]]
        );
        assert_eq!(StridedWalk::new(&[2, 0], [&[1, 1]], [0]).count(), 0);
        let back: Vec<[isize; 1]> = StridedWalk::new(&[3], [&[-1]], [2]).collect();
        assert_eq!(back, [[2], [1], [0]]);
        // Deeper than the inline rank still walks (spilling the index).
        let dims = [1usize; 20];
        let strides = [0isize; 20];
        assert_eq!(StridedWalk::new(&dims, [&strides], [0]).count(), 1);
    }

    #[test]
    fn broadcast_map_matches_a_plain_loop() {
        let layout = |dims: &[usize]| Layout::contiguous(strata_core::Shape::new(dims).unwrap(), 0);
        let a = layout(&[2, 3]);
        let b = layout(&[3]).expand(&[2, 3]).unwrap();
        let mut seen = Vec::new();
        for_each_broadcast(&a, &b, |o, pa, pb| seen.push((o, pa, pb)));
        let want: Vec<_> = (0..6).map(|i| (i, i, i % 3)).collect();
        assert_eq!(seen, want);
    }
}
