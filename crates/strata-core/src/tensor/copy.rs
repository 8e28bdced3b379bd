//! Strided copy between any two layouts of the same shape (T7).

use super::Layout;

/// Calls `f(src_pos, dst_pos)` for every logical element, in row-major logical order.
/// Positions are element indices into the respective storages.
pub(crate) fn for_each_position(src: &Layout, dst: &Layout, mut f: impl FnMut(isize, isize)) {
    let dims = src.dims();
    let rank = dims.len();
    if src.numel() == 0 {
        return;
    }
    if rank == 0 {
        f(src.offset() as isize, dst.offset() as isize);
        return;
    }
    let (ss, ds) = (src.strides(), dst.strides());
    let inner = dims[rank - 1];
    let (si, di) = (ss[rank - 1], ds[rank - 1]);
    let mut index = smallvec::SmallVec::<[usize; 8]>::from_elem(0, rank - 1);
    let (mut sp, mut dp) = (src.offset() as isize, dst.offset() as isize);
    loop {
        let (mut s, mut d) = (sp, dp);
        for _ in 0..inner {
            f(s, d);
            s += si;
            d += di;
        }
        // Advance the outer index like an odometer.
        let mut axis = rank - 1;
        loop {
            if axis == 0 {
                return;
            }
            axis -= 1;
            index[axis] += 1;
            sp += ss[axis];
            dp += ds[axis];
            if index[axis] < dims[axis] {
                break;
            }
            sp -= ss[axis] * dims[axis] as isize;
            dp -= ds[axis] * dims[axis] as isize;
            index[axis] = 0;
        }
    }
}

/// Calls `f(src_pos, dst_pos, len)` for runs of elements that are contiguous in both layouts
/// (`len` consecutive positions from each start), covering every logical element once. Axes
/// of extent 1 are dropped and neighbouring axes that are contiguous in both layouts are merged
/// first, so a transpose that keeps whole rows or planes together (a channel shuffle) copies
/// them as single runs.
pub(crate) fn for_each_run(src: &Layout, dst: &Layout, mut f: impl FnMut(usize, usize, usize)) {
    if src.numel() == 0 {
        return;
    }
    // (extent, source stride, destination stride), outermost first.
    let mut axes = smallvec::SmallVec::<[(usize, isize, isize); 8]>::new();
    for ((&n, &s), &d) in src.dims().iter().zip(src.strides()).zip(dst.strides()) {
        if n == 1 {
            continue;
        }
        match axes.last_mut() {
            Some(last) if last.1 == s * n as isize && last.2 == d * n as isize => {
                *last = (last.0 * n, s, d);
            }
            _ => axes.push((n, s, d)),
        }
    }
    let (sp, dp) = (src.offset() as isize, dst.offset() as isize);
    let Some(&(inner, si, di)) = axes.last() else {
        f(sp as usize, dp as usize, 1);
        return;
    };
    let outer = &axes[..axes.len() - 1];
    let mut index = smallvec::SmallVec::<[usize; 8]>::from_elem(0, outer.len());
    let (mut sp, mut dp) = (sp, dp);
    loop {
        if si == 1 && di == 1 {
            f(sp as usize, dp as usize, inner);
        } else {
            let (mut s, mut d) = (sp, dp);
            for _ in 0..inner {
                f(s as usize, d as usize, 1);
                s += si;
                d += di;
            }
        }
        // Advance the outer index like an odometer.
        let mut axis = outer.len();
        loop {
            if axis == 0 {
                return;
            }
            axis -= 1;
            let (n, ss, ds) = outer[axis];
            index[axis] += 1;
            sp += ss;
            dp += ds;
            if index[axis] < n {
                break;
            }
            sp -= ss * n as isize;
            dp -= ds * n as isize;
            index[axis] = 0;
        }
    }
}

/// Copies every element of `src_layout` over `src` into `dst_layout` over `dst`, elements of
/// `elem` bytes. Both layouts must have the same dims and fit their buffers, and both buffers must
/// be aligned to `elem` when it is 2, 4 or 8 (tensors guarantee all three).
pub fn copy_strided_bytes(
    src: &[u8],
    src_layout: &Layout,
    dst: &mut [u8],
    dst_layout: &Layout,
    elem: usize,
) {
    debug_assert_eq!(src_layout.dims(), dst_layout.dims());
    if src_layout.is_contiguous() && dst_layout.is_contiguous() {
        let n = src_layout.numel() * elem;
        let (s, d) = (src_layout.offset() * elem, dst_layout.offset() * elem);
        dst[d..d + n].copy_from_slice(&src[s..s + n]);
        return;
    }
    match elem {
        1 => copy_typed::<u8>(src, src_layout, dst, dst_layout),
        2 => copy_typed::<u16>(src, src_layout, dst, dst_layout),
        4 => copy_typed::<u32>(src, src_layout, dst, dst_layout),
        8 => copy_typed::<u64>(src, src_layout, dst, dst_layout),
        _ => for_each_run(src_layout, dst_layout, |s, d, len| {
            let (s, d, n) = (s * elem, d * elem, len * elem);
            dst[d..d + n].copy_from_slice(&src[s..s + n]);
        }),
    }
}

fn copy_typed<T: bytemuck::Pod>(
    src: &[u8],
    src_layout: &Layout,
    dst: &mut [u8],
    dst_layout: &Layout,
) {
    let size = std::mem::size_of::<T>();
    let src: &[T] = bytemuck::cast_slice(&src[..src.len() / size * size]);
    let whole = dst.len() / size * size;
    let dst: &mut [T] = bytemuck::cast_slice_mut(&mut dst[..whole]);
    for_each_run(src_layout, dst_layout, |s, d, len| {
        if len == 1 {
            dst[d] = src[s];
        } else {
            dst[d..d + len].copy_from_slice(&src[s..s + len]);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Shape;

    /// Every (source, destination) pair, in logical order, as runs expand to.
    fn pairs_by_runs(src: &Layout, dst: &Layout) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for_each_run(src, dst, |s, d, len| {
            out.extend((0..len).map(|i| (s + i, d + i)))
        });
        out
    }

    fn pairs_by_position(src: &Layout, dst: &Layout) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for_each_position(src, dst, |s, d| out.push((s as usize, d as usize)));
        out
    }

    #[test]
    fn runs_cover_the_same_pairs_as_positions() {
        let base = Layout::contiguous(Shape::new(&[2, 3, 1, 4, 5]).unwrap(), 7);
        let cases = [
            base.clone(),
            base.permute(&[1, 0, 2, 3, 4]).unwrap(),
            base.permute(&[0, 3, 2, 1, 4]).unwrap(),
            base.permute(&[4, 3, 2, 1, 0]).unwrap(),
            base.narrow(3, 1, 2).unwrap(),
            base.slice(4, 4, -6, -2).unwrap(),
        ];
        for src in &cases {
            let dst = Layout::contiguous(Shape::new(src.dims()).unwrap(), 3);
            assert_eq!(
                pairs_by_runs(src, &dst),
                pairs_by_position(src, &dst),
                "{src:?}"
            );
            assert_eq!(
                pairs_by_runs(&dst, src),
                pairs_by_position(&dst, src),
                "{src:?}"
            );
        }
        // A channel shuffle keeps whole planes: one run per plane.
        let shuffle = Layout::contiguous(Shape::new(&[1, 3, 4, 6, 6]).unwrap(), 0)
            .permute(&[0, 2, 1, 3, 4])
            .unwrap();
        let dst = Layout::contiguous(Shape::new(shuffle.dims()).unwrap(), 0);
        let mut runs = 0;
        for_each_run(&shuffle, &dst, |_, _, len| {
            assert_eq!(len, 36);
            runs += 1;
        });
        assert_eq!(runs, 12);
    }
}
