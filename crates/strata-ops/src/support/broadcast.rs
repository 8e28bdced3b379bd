//! Broadcast iteration for element-wise kernels, without allocating: operands expanded to the
//! output's dims are walked row by row after merging dims that are contiguous for every operand
//! (so `[N, C, H, W] + [1, C, 1, 1]` becomes rows of `H * W` against one scalar each). The zip
//! helpers pick a dedicated loop per stride pattern so the common cases vectorize.

use strata_core::{Layout, Shape, Tensor};

use crate::support::strided::StridedWalk;
use crate::{Dim, OpError, OpResult};

/// Most dims a walk handles after merging (a fixed array keeps it off the heap).
pub const MAX_RANK: usize = 16;

/// The merged iteration space of an output and `N` operands laid out over it.
#[derive(Debug, Clone, Copy)]
pub struct Walk<const N: usize> {
    rank: usize,
    numel: usize,
    dims: [usize; MAX_RANK],
    strides: [[isize; MAX_RANK]; N],
    offsets: [usize; N],
}

impl<const N: usize> Walk<N> {
    /// `layouts` must have `out_dims` as their dims (see [`Layout::expand`]); the output is
    /// contiguous.
    pub fn new(op: &str, out_dims: &[usize], layouts: [&Layout; N]) -> OpResult<Self> {
        let mut walk = Walk {
            rank: 0,
            numel: out_dims.iter().product(),
            dims: [1; MAX_RANK],
            strides: [[0; MAX_RANK]; N],
            offsets: [0; N],
        };
        for (k, layout) in layouts.iter().enumerate() {
            if layout.dims() != out_dims {
                return Err(OpError::kernel(
                    op,
                    format!(
                        "operand dims {:?} are not the output's {out_dims:?}",
                        layout.dims()
                    ),
                ));
            }
            walk.offsets[k] = layout.offset();
        }
        for (axis, &d) in out_dims.iter().enumerate() {
            if d == 1 {
                continue;
            }
            let r = walk.rank;
            // Merge into the previous dim when every operand steps through both as one.
            if r > 0
                && layouts
                    .iter()
                    .enumerate()
                    .all(|(k, l)| walk.strides[k][r - 1] == l.strides()[axis] * d as isize)
            {
                walk.dims[r - 1] *= d;
                for (k, l) in layouts.iter().enumerate() {
                    walk.strides[k][r - 1] = l.strides()[axis];
                }
                continue;
            }
            if r == MAX_RANK {
                return Err(OpError::kernel(
                    op,
                    format!("more than {MAX_RANK} dims after merging: {out_dims:?}"),
                ));
            }
            walk.dims[r] = d;
            for (k, l) in layouts.iter().enumerate() {
                walk.strides[k][r] = l.strides()[axis];
            }
            walk.rank += 1;
        }
        Ok(walk)
    }

    pub fn numel(&self) -> usize {
        self.numel
    }

    /// The innermost rows, in output order.
    pub fn rows(&self) -> Rows<'_, N> {
        let inner = self.rank.saturating_sub(1);
        // An empty walk has a zero dim among its merged ones: the outer walk then yields nothing
        // (a zero inner dim is moved out so that it does).
        let outer_dims: &[usize] = if self.numel == 0 {
            &[0]
        } else {
            &self.dims[..inner]
        };
        let outer_len = outer_dims.len();
        Rows {
            starts: StridedWalk::new(
                outer_dims,
                std::array::from_fn(|k| &self.strides[k][..outer_len]),
                self.offsets.map(|p| p as isize),
            ),
            out: 0,
            len: if self.rank == 0 { 1 } else { self.dims[inner] },
            steps: if self.rank == 0 {
                [0; N]
            } else {
                self.strides.map(|s| s[inner])
            },
        }
    }
}

/// One innermost row: output elements `out..out + len`; operand `k` at `start[k] + i * step[k]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row<const N: usize> {
    pub out: usize,
    pub len: usize,
    pub start: [usize; N],
    pub step: [isize; N],
}

/// Iterator over a walk's rows (a [`StridedWalk`] over the outer dims). Not generic over the
/// kernel, so each kernel instantiates only its own inner loops.
pub struct Rows<'a, const N: usize> {
    starts: StridedWalk<'a, N>,
    out: usize,
    len: usize,
    steps: [isize; N],
}

impl<const N: usize> Iterator for Rows<'_, N> {
    type Item = Row<N>;

    #[inline]
    fn next(&mut self) -> Option<Row<N>> {
        let start = self.starts.next()?;
        let row = Row {
            out: self.out,
            len: self.len,
            start: start.map(|p| p as usize),
            step: self.steps,
        };
        self.out += self.len;
        Some(row)
    }
}

#[inline(always)]
fn at(start: usize, step: isize, i: usize) -> usize {
    (start as isize + step * i as isize) as usize
}

/// `out[i] = f(a[..])` over a one-operand walk (no scalar special case: a unary operand has
/// the output's dims).
#[inline]
pub fn zip1<A: Copy, O>(walk: &Walk<1>, a: &[A], out: &mut [O], f: impl Fn(A) -> O) {
    for Row {
        out: o,
        len: n,
        start: [pa],
        step: [sa],
    } in walk.rows()
    {
        let out = &mut out[o..o + n];
        if sa == 1 {
            let a = &a[pa..pa + n];
            for i in 0..n {
                out[i] = f(a[i]);
            }
        } else {
            for (i, v) in out.iter_mut().enumerate() {
                *v = f(a[at(pa, sa, i)]);
            }
        }
    }
}

/// `out[i] = f(a[..], b[..])` over a two-operand walk.
#[inline]
pub fn zip2<A: Copy, B: Copy, O>(
    walk: &Walk<2>,
    a: &[A],
    b: &[B],
    out: &mut [O],
    f: impl Fn(A, B) -> O,
) {
    for Row {
        out: o,
        len: n,
        start: [pa, pb],
        step: [sa, sb],
    } in walk.rows()
    {
        let out = &mut out[o..o + n];
        match (sa, sb) {
            (1, 1) => {
                let (a, b) = (&a[pa..pa + n], &b[pb..pb + n]);
                for i in 0..n {
                    out[i] = f(a[i], b[i]);
                }
            }
            (1, 0) => {
                let (a, y) = (&a[pa..pa + n], b[pb]);
                for i in 0..n {
                    out[i] = f(a[i], y);
                }
            }
            (0, 1) => {
                let (x, b) = (a[pa], &b[pb..pb + n]);
                for i in 0..n {
                    out[i] = f(x, b[i]);
                }
            }
            _ => {
                for (i, v) in out.iter_mut().enumerate() {
                    *v = f(a[at(pa, sa, i)], b[at(pb, sb, i)]);
                }
            }
        }
    }
}

/// `out[i] = f(out[i], b[..])`: the first operand is the output itself (in-place kernels).
#[inline]
pub fn zip1_assign<B: Copy, O: Copy>(
    walk: &Walk<1>,
    out: &mut [O],
    b: &[B],
    f: impl Fn(O, B) -> O,
) {
    for Row {
        out: o,
        len: n,
        start: [pb],
        step: [sb],
    } in walk.rows()
    {
        let out = &mut out[o..o + n];
        match sb {
            1 => {
                let b = &b[pb..pb + n];
                for i in 0..n {
                    out[i] = f(out[i], b[i]);
                }
            }
            0 => {
                let y = b[pb];
                for v in out.iter_mut() {
                    *v = f(*v, y);
                }
            }
            _ => {
                for (i, v) in out.iter_mut().enumerate() {
                    *v = f(*v, b[at(pb, sb, i)]);
                }
            }
        }
    }
}

/// `out[i] = f(a[..], b[..], c[..])` over a three-operand walk.
#[inline]
pub fn zip3<A: Copy, B: Copy, C: Copy, O>(
    walk: &Walk<3>,
    a: &[A],
    b: &[B],
    c: &[C],
    out: &mut [O],
    f: impl Fn(A, B, C) -> O,
) {
    for Row {
        out: o,
        len: n,
        start: [pa, pb, pc],
        step: [sa, sb, sc],
    } in walk.rows()
    {
        let out = &mut out[o..o + n];
        if (sa, sb, sc) == (1, 1, 1) {
            let (a, b, c) = (&a[pa..pa + n], &b[pb..pb + n], &c[pc..pc + n]);
            for i in 0..n {
                out[i] = f(a[i], b[i], c[i]);
            }
        } else {
            for (i, v) in out.iter_mut().enumerate() {
                *v = f(a[at(pa, sa, i)], b[at(pb, sb, i)], c[at(pc, sc, i)]);
            }
        }
    }
}

/// `out[i] = f(a[..], out[i], c[..])`: the middle operand is the output itself.
#[inline]
pub fn zip2_assign_mid<A: Copy, C: Copy, O: Copy>(
    walk: &Walk<2>,
    a: &[A],
    out: &mut [O],
    c: &[C],
    f: impl Fn(A, O, C) -> O,
) {
    for Row {
        out: o,
        len: n,
        start: [pa, pc],
        step: [sa, sc],
    } in walk.rows()
    {
        let out = &mut out[o..o + n];
        if (sa, sc) == (1, 1) {
            let (a, c) = (&a[pa..pa + n], &c[pc..pc + n]);
            for i in 0..n {
                out[i] = f(a[i], out[i], c[i]);
            }
        } else {
            for (i, v) in out.iter_mut().enumerate() {
                *v = f(a[at(pa, sa, i)], *v, c[at(pc, sc, i)]);
            }
        }
    }
}

/// A tensor's layout broadcast to `dims`, with an error naming the op.
pub fn expanded(op: &str, t: &Tensor, dims: &[usize]) -> OpResult<Layout> {
    t.layout().expand(dims).map_err(|e| {
        OpError::shape(
            op,
            format!("cannot broadcast {:?} to {dims:?}: {e}", t.dims()),
        )
    })
}

/// The contiguous layout of `dims` (the output's own).
pub fn dense(dims: &[usize]) -> OpResult<Layout> {
    Ok(Layout::contiguous(Shape::new(dims)?, 0))
}

/// Pre-opset-7 broadcasting (`broadcast=1`, `axis`): B's dims placed at `axis` of A's rank,
/// padded with 1s. `None` when they do not fit.
pub fn legacy_dims<D: Clone>(a_rank: usize, b: &[D], axis: i64, one: D) -> Option<Vec<D>> {
    let start = if axis < 0 {
        a_rank as i64 - b.len() as i64
    } else {
        axis
    };
    if start < 0 || start as usize + b.len() > a_rank {
        return None;
    }
    let mut dims = vec![one; a_rank];
    dims[start as usize..start as usize + b.len()].clone_from_slice(b);
    Some(dims)
}

/// B's layout for the legacy form, viewed at A's rank (no allocation for ranks up to 5).
pub fn legacy_layout(op: &str, a_rank: usize, b: &Tensor, axis: i64) -> OpResult<Layout> {
    let mut dims = [1usize; MAX_RANK];
    let start = if axis < 0 {
        a_rank as i64 - b.rank() as i64
    } else {
        axis
    };
    if start < 0 || start as usize + b.rank() > a_rank || a_rank > MAX_RANK {
        return Err(OpError::shape(
            op,
            format!(
                "legacy broadcast of {:?} into rank {a_rank} at axis {axis}",
                b.dims()
            ),
        ));
    }
    dims[start as usize..start as usize + b.rank()].copy_from_slice(b.dims());
    Ok(b.layout().view(&dims[..a_rank])?)
}

/// B's symbolic dims for the legacy form, or an error naming both shapes.
pub fn legacy_fact_dims(op: &str, a: &[Dim], b: &[Dim], axis: i64) -> OpResult<Vec<Dim>> {
    legacy_dims(a.len(), b, axis, Dim::Known(1)).ok_or_else(|| {
        OpError::shape(
            op,
            format!("legacy broadcast of {b:?} into {a:?} at axis {axis}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(dims: &[usize]) -> Layout {
        dense(dims).unwrap()
    }

    #[test]
    fn merges_channel_broadcast_into_long_rows() {
        let out = [2, 3, 4, 5];
        let a = layout(&out);
        let b = layout(&[1, 3, 1, 1]).expand(&out).unwrap();
        let walk = Walk::new("Add", &out, [&a, &b]).unwrap();
        let rows: Vec<Row<2>> = walk.rows().collect();
        assert_eq!(rows.len(), 6);
        let row = |out, start| Row {
            out,
            len: 20,
            start,
            step: [1, 0],
        };
        assert_eq!(rows[0], row(0, [0, 0]));
        assert_eq!(rows[4], row(80, [80, 1]));
    }

    #[test]
    fn zip2_matches_naive_broadcast() {
        let out_dims = [3, 4];
        let a: Vec<i32> = (0..3).collect();
        let b: Vec<i32> = (0..4).map(|x| x * 10).collect();
        let la = layout(&[3, 1]).expand(&out_dims).unwrap();
        let lb = layout(&[4]).expand(&out_dims).unwrap();
        let walk = Walk::new("Add", &out_dims, [&la, &lb]).unwrap();
        let mut out = vec![0; 12];
        zip2(&walk, &a, &b, &mut out, |x, y| x + y);
        let want: Vec<i32> = (0..12).map(|i| i / 4 + (i % 4) * 10).collect();
        assert_eq!(out, want);
    }

    #[test]
    fn scalars_and_empty_tensors() {
        let walk = Walk::new("Neg", &[], [&layout(&[])]).unwrap();
        let mut out = [0.0f32];
        zip1(&walk, &[2.0f32], &mut out, |x| -x);
        assert_eq!(out, [-2.0]);
        let walk = Walk::new("Neg", &[0, 3], [&layout(&[0, 3])]).unwrap();
        assert_eq!(walk.rows().count(), 0);
    }

    #[test]
    fn legacy_axis_placement() {
        assert_eq!(legacy_dims(4, &[3, 4], 1, 1), Some(vec![1, 3, 4, 1]));
        assert_eq!(legacy_dims(4, &[5], -1, 1), Some(vec![1, 1, 1, 5]));
        assert_eq!(legacy_dims(2, &[3, 4, 5], 0, 1), None);
    }
}
