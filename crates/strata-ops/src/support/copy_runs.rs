//! Strided copy between two views of equal dims that moves whole contiguous byte runs: dims of
//! size 1 are dropped and dims whose strides chain in both layouts are merged, so a slice, tile,
//! pad or split copies rows with `memcpy` instead of element by element. Without a unit-stride
//! innermost dim (transposes, broadcasts) the innermost loop moves typed elements. Nothing is
//! allocated for up to 8 merged dims.

use smallvec::SmallVec;
use strata_core::Tensor;

use crate::support::strided::StridedWalk;
use crate::{OpError, OpResult};

/// Copies every element of `src` into `dst` (same dtype and dims, any layouts, different
/// memory blocks).
pub(crate) fn copy_view(op: &'static str, dst: &Tensor, src: &Tensor) -> OpResult<()> {
    if src.dtype() != dst.dtype() || src.dims() != dst.dims() {
        return Err(OpError::kernel(
            op,
            format!(
                "cannot copy {}{:?} into {}{:?}",
                src.dtype(),
                src.dims(),
                dst.dtype(),
                dst.dims()
            ),
        ));
    }
    if src.numel() == 0 {
        return Ok(());
    }
    if src.dtype().is_quantized() {
        dst.copy_from(src)?;
        return Ok(());
    }
    let input = src.read_bytes(op)?;
    let mut output = dst.write_bytes(op)?;
    copy_strided(
        StridedBytes {
            offset: src.storage_offset(),
            strides: src.strides(),
        },
        input.bytes(),
        StridedBytes {
            offset: dst.storage_offset(),
            strides: dst.strides(),
        },
        output.bytes(),
        src.dims(),
        src.dtype().size_in_bytes(),
    );
    Ok(())
}

/// Where a view's elements lie in its buffer: element offset and element strides.
#[derive(Clone, Copy)]
pub(crate) struct StridedBytes<'a> {
    pub offset: usize,
    pub strides: &'a [isize],
}

/// Copies the `dims` elements of `sv` over `src` to `dv` over `dst`, elements of `elem` bytes.
/// Both views must lie inside their buffers (tensor layouts guarantee it).
pub(crate) fn copy_strided(
    sv: StridedBytes<'_>,
    src: &[u8],
    dv: StridedBytes<'_>,
    dst: &mut [u8],
    dims: &[usize],
    elem: usize,
) {
    if dims.contains(&0) {
        return;
    }
    // (dim, src stride, dst stride), innermost first, size-1 dims dropped, chains merged.
    let mut merged: SmallVec<[(usize, isize, isize); 8]> = SmallVec::new();
    for i in (0..dims.len()).rev() {
        let (d, s, t) = (dims[i], sv.strides[i], dv.strides[i]);
        if d == 1 {
            continue;
        }
        if let Some(last) = merged.last_mut() {
            let n = last.0 as isize;
            if s == last.1 * n && t == last.2 * n {
                last.0 *= d;
                continue;
            }
        }
        merged.push((d, s, t));
    }
    let (so, dof) = (sv.offset as isize, dv.offset as isize);
    match merged.first().copied() {
        Some((run, 1, 1)) => {
            let bytes = run * elem;
            for_each_start(&merged[1..], so, dof, |s, d| {
                let (s, d) = (s as usize * elem, d as usize * elem);
                dst[d..d + bytes].copy_from_slice(&src[s..s + bytes]);
            });
        }
        Some(inner) => match elem {
            1 => copy_typed::<u8>(src, dst, inner, &merged[1..], so, dof),
            2 => copy_typed::<u16>(src, dst, inner, &merged[1..], so, dof),
            4 => copy_typed::<u32>(src, dst, inner, &merged[1..], so, dof),
            8 => copy_typed::<u64>(src, dst, inner, &merged[1..], so, dof),
            _ => copy_elements(src, dst, elem, inner, &merged[1..], so, dof),
        },
        None => {
            let (s, d) = (sv.offset * elem, dv.offset * elem);
            dst[d..d + elem].copy_from_slice(&src[s..s + elem]);
        }
    }
}

/// Calls `f(src_pos, dst_pos)` for the start of every innermost run: a [`StridedWalk`] over
/// `outer` (listed innermost first, so reversed into row-major order).
#[inline(always)]
fn for_each_start(
    outer: &[(usize, isize, isize)],
    so: isize,
    dof: isize,
    mut f: impl FnMut(isize, isize),
) {
    let dims: SmallVec<[usize; 8]> = outer.iter().rev().map(|o| o.0).collect();
    let src_strides: SmallVec<[isize; 8]> = outer.iter().rev().map(|o| o.1).collect();
    let dst_strides: SmallVec<[isize; 8]> = outer.iter().rev().map(|o| o.2).collect();
    for [sp, dp] in StridedWalk::new(&dims, [&src_strides, &dst_strides], [so, dof]) {
        f(sp, dp);
    }
}

/// Element-wise copy with a typed innermost loop; falls back to bytes if a buffer is not
/// aligned for `T` (tensor buffers always are).
fn copy_typed<T: bytemuck::Pod>(
    src: &[u8],
    dst: &mut [u8],
    inner: (usize, isize, isize),
    outer: &[(usize, isize, isize)],
    so: isize,
    dof: isize,
) {
    let size = std::mem::size_of::<T>();
    let whole_dst = dst.len() / size * size;
    match (
        bytemuck::try_cast_slice::<u8, T>(&src[..src.len() / size * size]),
        bytemuck::try_cast_slice_mut::<u8, T>(&mut dst[..whole_dst]),
    ) {
        (Ok(s), Ok(d)) => {
            let (n, si, di) = inner;
            for_each_start(outer, so, dof, |sp, dp| {
                let (mut sp, mut dp) = (sp, dp);
                for _ in 0..n {
                    d[dp as usize] = s[sp as usize];
                    sp += si;
                    dp += di;
                }
            });
        }
        _ => copy_elements(src, dst, size, inner, outer, so, dof),
    }
}

fn copy_elements(
    src: &[u8],
    dst: &mut [u8],
    elem: usize,
    inner: (usize, isize, isize),
    outer: &[(usize, isize, isize)],
    so: isize,
    dof: isize,
) {
    let (n, si, di) = inner;
    for_each_start(outer, so, dof, |sp, dp| {
        let (mut sp, mut dp) = (sp, dp);
        for _ in 0..n {
            let (s, d) = (sp as usize * elem, dp as usize * elem);
            dst[d..d + elem].copy_from_slice(&src[s..s + elem]);
            sp += si;
            dp += di;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_core::DType;

    #[test]
    fn slices_permutes_and_broadcasts_copy_exactly() {
        let data: Vec<f32> = (0..24).map(|v| v as f32).collect();
        let x = Tensor::from_slice(&data, &[2, 3, 4]).unwrap();
        // Rows of a narrowed middle axis: runs of 4 floats.
        let view = x.narrow(1, 1, 2).unwrap();
        let out = Tensor::zeros(&[2, 2, 4], DType::F32).unwrap();
        copy_view("test", &out, &view).unwrap();
        assert_eq!(
            out.to_vec::<f32>().unwrap(),
            vec![4., 5., 6., 7., 8., 9., 10., 11., 16., 17., 18., 19., 20., 21., 22., 23.]
        );
        // A permutation has unit-stride runs nowhere: the typed loop.
        let view = x.permute(&[2, 0, 1]).unwrap();
        let out = Tensor::zeros(&[4, 2, 3], DType::F32).unwrap();
        copy_view("test", &out, &view).unwrap();
        assert_eq!(out.to_vec::<f32>().unwrap(), view.to_vec::<f32>().unwrap());
        // Negative steps and stride-0 broadcasts.
        let view = x.slice(2, -1, -5, -1).unwrap();
        let out = Tensor::zeros(&[2, 3, 4], DType::F32).unwrap();
        copy_view("test", &out, &view).unwrap();
        assert_eq!(&out.to_vec::<f32>().unwrap()[..4], &[3., 2., 1., 0.]);
        let col = Tensor::from_slice(&[1u8, 2], &[2, 1]).unwrap();
        let out = Tensor::zeros(&[2, 3], DType::U8).unwrap();
        copy_view("test", &out, &col.expand(&[2, 3]).unwrap()).unwrap();
        assert_eq!(out.to_vec::<u8>().unwrap(), vec![1, 1, 1, 2, 2, 2]);
        // Scalars, empty views, and mismatched dims.
        let s = Tensor::scalar(7i64).unwrap();
        let out = Tensor::zeros(&[], DType::I64).unwrap();
        copy_view("test", &out, &s).unwrap();
        assert_eq!(out.to_vec::<i64>().unwrap(), vec![7]);
        let out = Tensor::zeros(&[0, 3], DType::F32).unwrap();
        copy_view(
            "test",
            &out,
            &x.narrow(0, 0, 0).unwrap().select(2, 0).unwrap(),
        )
        .unwrap();
        assert!(copy_view("test", &out, &x.narrow(0, 0, 1).unwrap()).is_err());
    }
}
