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
        _ => for_each_position(src_layout, dst_layout, |s, d| {
            let (s, d) = (s as usize * elem, d as usize * elem);
            dst[d..d + elem].copy_from_slice(&src[s..s + elem]);
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
    for_each_position(src_layout, dst_layout, |s, d| {
        dst[d as usize] = src[s as usize]
    });
}
