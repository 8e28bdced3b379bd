//! Stacking per-iteration values into one tensor along a new axis (Loop and Scan outputs).

use strata_core::{DType, Device, MemoryKind, Tensor};
use strata_ops::{OpError, OpResult};

/// Stacks `slices` (all of one dtype and dims) along a new `axis`; `reverse` puts the first
/// slice last. With no slices the result has length 0 along `axis` and `empty_dims` elsewhere.
pub(super) fn stack(
    op: &str,
    slices: &[Tensor],
    axis: usize,
    reverse: bool,
    empty: (DType, &[usize]),
) -> OpResult<Tensor> {
    let (dtype, inner): (DType, Vec<usize>) = match slices.first() {
        Some(first) => (first.dtype(), first.dims().to_vec()),
        None => (empty.0, empty.1.to_vec()),
    };
    if axis > inner.len() {
        return Err(OpError::shape(
            op,
            format!("output axis {axis} out of range for per-iteration dims {inner:?}"),
        ));
    }
    let mut dims = inner.clone();
    dims.insert(axis, slices.len());
    let out = Tensor::empty(&dims, dtype, Device::Cpu, MemoryKind::Workspace)?;
    let n = slices.len();
    for (t, slice) in slices.iter().enumerate() {
        if slice.dims() != inner.as_slice() || slice.dtype() != dtype {
            return Err(OpError::shape(
                op,
                format!(
                    "iteration {t} produced {} {:?}, the first produced {dtype} {inner:?}",
                    slice.dtype(),
                    slice.dims()
                ),
            ));
        }
        let pos = if reverse { n - 1 - t } else { t };
        out.narrow(axis as isize, pos, 1)?
            .copy_from(&slice.unsqueeze(axis as isize)?)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_along_any_axis_and_in_reverse() {
        let a = Tensor::from_slice(&[1f32, 2.], &[2]).unwrap();
        let b = Tensor::from_slice(&[3f32, 4.], &[2]).unwrap();
        let s0 = stack("t", &[a.clone(), b.clone()], 0, false, (DType::F32, &[])).unwrap();
        assert_eq!(s0.dims(), &[2, 2]);
        assert_eq!(s0.to_vec::<f32>().unwrap(), vec![1., 2., 3., 4.]);
        let s1 = stack("t", &[a.clone(), b.clone()], 1, true, (DType::F32, &[])).unwrap();
        assert_eq!(s1.to_vec::<f32>().unwrap(), vec![3., 1., 4., 2.]);
        let empty = stack("t", &[], 0, false, (DType::I64, &[3])).unwrap();
        assert_eq!(empty.dims(), &[0, 3]);
        let c = Tensor::from_slice(&[1f32, 2., 3.], &[3]).unwrap();
        assert!(stack("t", &[a, c], 0, false, (DType::F32, &[])).is_err());
    }
}
