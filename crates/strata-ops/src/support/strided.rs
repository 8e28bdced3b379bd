//! Iteration helpers shared by kernels: broadcast element-wise maps over strided layouts
//! without allocating.

use strata_core::Layout;

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
    let mut index = [0usize; 16];
    let deep = rank > index.len();
    let mut heap_index = if deep { vec![0usize; rank] } else { Vec::new() };
    let index: &mut [usize] = if deep {
        &mut heap_index
    } else {
        &mut index[..rank]
    };
    let (mut pa, mut pb) = (a.offset() as isize, b.offset() as isize);
    let mut out = 0usize;
    loop {
        let (mut x, mut y) = (pa, pb);
        for _ in 0..inner {
            f(out, x as usize, y as usize);
            out += 1;
            x += ia;
            y += ib;
        }
        let mut axis = rank - 1;
        loop {
            if axis == 0 {
                return;
            }
            axis -= 1;
            index[axis] += 1;
            pa += sa[axis];
            pb += sb[axis];
            if index[axis] < dims[axis] {
                break;
            }
            pa -= sa[axis] * dims[axis] as isize;
            pb -= sb[axis] * dims[axis] as isize;
            index[axis] = 0;
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
