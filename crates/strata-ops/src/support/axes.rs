//! Helpers shared by the shape-manipulation and reduction ops: axis normalization and integer
//! arguments that come from an attribute or an input (known at plan time when
//! the input is a constant, read from the tensor at run time otherwise).

use smallvec::SmallVec;
use strata_core::{DType, Tensor, MAX_RANK};

use crate::support::inputs::optional;
use crate::{int_values, Fact, OpError, OpResult};

/// Small integer lists (axes, starts, pads): inline up to 8, so kernels do not allocate.
pub(crate) type Ints = SmallVec<[i64; 8]>;

/// Normalized axes, inline up to 8.
pub(crate) type Axes = SmallVec<[usize; 8]>;

/// `axis` in `-rank..rank` as an index; the error names `what` (an attribute or input).
pub(crate) fn normalize_axis(op: &str, what: &str, axis: i64, rank: usize) -> OpResult<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if (0..r).contains(&a) {
        Ok(a as usize)
    } else {
        Err(OpError::attribute(
            op,
            what,
            format!("axis {axis} out of range for rank {rank}"),
        ))
    }
}

/// `axis` in `-rank..=rank` as a split point between axes (Flatten, the 2-D coercion of the
/// softmax family before opset 13): `rank` means after the last axis.
pub(crate) fn normalize_split_axis(
    op: &str,
    what: &str,
    axis: i64,
    rank: usize,
) -> OpResult<usize> {
    if axis == rank as i64 {
        return Ok(rank);
    }
    normalize_axis(op, what, axis, rank)
}

/// Normalizes a list of axes, sorted; a repeated axis is an error.
pub(crate) fn normalize_axes(op: &str, what: &str, axes: &[i64], rank: usize) -> OpResult<Axes> {
    let mut out: Axes = axes
        .iter()
        .map(|&a| normalize_axis(op, what, a, rank))
        .collect::<OpResult<_>>()?;
    out.sort_unstable();
    if out.windows(2).any(|w| w[0] == w[1]) {
        return Err(OpError::attribute(
            op,
            what,
            format!("repeated axis in {axes:?}"),
        ));
    }
    Ok(out)
}

/// The integer value of optional input `index` when it is present and known at plan time.
pub(crate) fn known_ints(op: &str, inputs: &[&Fact], index: usize) -> OpResult<Option<Vec<i64>>> {
    match optional(inputs, index).and_then(|f| f.value.as_ref()) {
        Some(v) => Ok(Some(int_values(op, v)?)),
        None => Ok(None),
    }
}

/// Checks that input `index` is int32 or int64 (when present).
pub(crate) fn check_int_input(op: &str, inputs: &[&Fact], index: usize) -> OpResult<()> {
    match optional(inputs, index) {
        Some(f) if !matches!(f.dtype, DType::I64 | DType::I32) => Err(OpError::DType {
            op: op.into(),
            index,
            expected: "int32 or int64".into(),
            actual: f.dtype,
        }),
        _ => Ok(()),
    }
}

/// The length of a 1-D input, when known.
pub(crate) fn input_len(inputs: &[&Fact], index: usize) -> Option<usize> {
    optional(inputs, index).and_then(|f| match f.dims.as_slice() {
        [d] => d.known(),
        [] => Some(1),
        _ => None,
    })
}

/// The length of a 1-D input that lists one entry per dim of a tensor (a shape, axes, image
/// dims), when known: a count of dims, so more than [`MAX_RANK`] is an error naming the input
/// (a model may declare the length as 2^62 before any value exists).
pub(crate) fn dims_input_len(op: &str, inputs: &[&Fact], index: usize) -> OpResult<Option<usize>> {
    match input_len(inputs, index) {
        Some(n) if n > MAX_RANK => Err(OpError::shape(
            op,
            format!(
                "input {index} lists {n} dims; strata handles tensors of at most {MAX_RANK} dims"
            ),
        )),
        n => Ok(n),
    }
}

/// Reads an int32/int64 tensor (any layout) at run time without allocating for up to 8 values.
pub(crate) fn read_ints(op: &str, tensor: &Tensor) -> OpResult<Ints> {
    let dtype_err = || {
        OpError::kernel(
            op,
            format!("expected an int32 or int64 tensor, got {}", tensor.dtype()),
        )
    };
    let mut out = Ints::new();
    match tensor.dtype() {
        DType::I64 => {
            let r = tensor.read::<i64>()?;
            match r.as_slice() {
                Some(s) => out.extend_from_slice(s),
                None => out.extend(r.to_vec()?),
            }
        }
        DType::I32 => {
            let r = tensor.read::<i32>()?;
            match r.as_slice() {
                Some(s) => out.extend(s.iter().map(|&v| i64::from(v))),
                None => out.extend(r.to_vec()?.into_iter().map(i64::from)),
            }
        }
        _ => return Err(dtype_err()),
    }
    Ok(out)
}

/// Reads optional input `index` of a kernel as integers; `None` when absent.
pub(crate) fn read_optional_ints(
    op: &str,
    inputs: &[&Tensor],
    index: usize,
) -> OpResult<Option<Ints>> {
    match inputs.get(index) {
        Some(t) if t.is_defined() => Ok(Some(read_ints(op, t)?)),
        _ => Ok(None),
    }
}

/// Row-major contiguous strides of `dims`, inline.
pub(crate) fn contiguous_strides(dims: &[usize]) -> Axes {
    let mut strides: Axes = SmallVec::from_elem(1, dims.len());
    for i in (0..dims.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * dims[i + 1];
    }
    strides
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_normalize_sort_and_reject_repeats() {
        assert_eq!(
            normalize_axes("Op", "axes", &[-1, 0], 3)
                .unwrap()
                .as_slice(),
            &[0, 2]
        );
        let err = normalize_axes("Op", "axes", &[1, -2], 3).unwrap_err();
        assert!(err.to_string().contains("repeated"), "{err}");
        let err = normalize_axis("Op", "axis", 3, 3).unwrap_err();
        assert!(err.to_string().contains("axis"), "{err}");
        assert_eq!(normalize_axis("Op", "axis", -3, 3).unwrap(), 0);
        assert_eq!(normalize_split_axis("Op", "axis", 3, 3).unwrap(), 3);
        assert_eq!(normalize_split_axis("Op", "axis", -1, 3).unwrap(), 2);
        assert!(normalize_split_axis("Op", "axis", 4, 3).is_err());
        assert!(normalize_split_axis("Op", "axis", -4, 3).is_err());
        assert_eq!(normalize_split_axis("Op", "axis", 0, 0).unwrap(), 0);
    }

    #[test]
    fn ints_read_from_either_width() {
        let t = Tensor::from_slice(&[3i32, -1], &[2]).unwrap();
        assert_eq!(read_ints("Op", &t).unwrap().as_slice(), &[3, -1]);
        let t = Tensor::from_slice(&[7i64], &[]).unwrap();
        assert_eq!(read_ints("Op", &t).unwrap().as_slice(), &[7]);
        let t = Tensor::from_slice(&[1.0f32], &[1]).unwrap();
        assert!(read_ints("Op", &t).is_err());
        assert_eq!(contiguous_strides(&[2, 3, 4]).as_slice(), &[12, 4, 1]);
    }
}
