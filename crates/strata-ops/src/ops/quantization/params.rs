//! How a scale or zero-point tensor of QuantizeLinear/DequantizeLinear maps onto the elements of
//! the tensor it quantizes: per tensor (a scalar or one-element tensor), per axis (a 1-D tensor
//! along `axis`, opset 13+), or blocked (opset 21+: the same rank as the input, with
//! `ceil(dim / block_size)` entries along `axis`, the last block possibly short).

use crate::support::axes::normalize_axis;
use crate::{OpError, OpResult};

/// Maps a flat (row-major) element index of the input to the flat index of its parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ParamIndex {
    /// Elements after the axis (the stride of the axis).
    inner: usize,
    /// The input's length along the axis.
    axis_len: usize,
    /// The parameter's length along the axis.
    param_axis_len: usize,
    /// Elements per block along the axis (0 for per-axis, whose parameter is 1-D).
    block: usize,
    per_tensor: bool,
}

impl ParamIndex {
    /// Validates `param_dims` against input `x_dims` for `axis` and `block_size` (0: not blocked).
    pub(crate) fn new(
        op: &str,
        what: &str,
        x_dims: &[usize],
        param_dims: &[usize],
        axis: i64,
        block_size: i64,
    ) -> OpResult<Self> {
        let numel: usize = param_dims.iter().product();
        if param_dims.is_empty() || (param_dims.len() == 1 && numel == 1) {
            return Ok(ParamIndex {
                inner: 1,
                axis_len: 1,
                param_axis_len: 1,
                block: 1,
                per_tensor: true,
            });
        }
        let axis = normalize_axis(op, "axis", axis, x_dims.len())?;
        let axis_len = x_dims[axis];
        let inner: usize = x_dims[axis + 1..].iter().product();
        if block_size < 0 {
            return Err(OpError::attribute(
                op,
                "block_size",
                format!("must be non-negative, got {block_size}"),
            ));
        }
        if block_size == 0 {
            if param_dims.len() != 1 || param_dims[0] != axis_len {
                return Err(OpError::shape(
                    op,
                    format!(
                        "{what} of dims {param_dims:?} is neither a scalar nor a 1-D tensor of \
                         the input's dim {axis_len} along axis {axis} (input dims {x_dims:?})"
                    ),
                ));
            }
            return Ok(ParamIndex {
                inner,
                axis_len,
                param_axis_len: axis_len,
                block: 0,
                per_tensor: false,
            });
        }
        let block = usize::try_from(block_size)
            .map_err(|_| OpError::attribute(op, "block_size", "is too large"))?;
        let blocks = axis_len.div_ceil(block);
        let consistent = param_dims.len() == x_dims.len()
            && param_dims
                .iter()
                .zip(x_dims)
                .enumerate()
                .all(|(d, (&p, &x))| if d == axis { p == blocks } else { p == x });
        if !consistent {
            return Err(OpError::shape(
                op,
                format!(
                    "blocked {what} must have the input's dims {x_dims:?} with {blocks} blocks \
                     of {block} along axis {axis}, got {param_dims:?}"
                ),
            ));
        }
        Ok(ParamIndex {
            inner,
            axis_len,
            param_axis_len: blocks,
            block,
            per_tensor: false,
        })
    }

    /// The parameter index of input element `flat`.
    pub(crate) fn index(&self, flat: usize) -> usize {
        if self.per_tensor {
            return 0;
        }
        let along = (flat / self.inner) % self.axis_len;
        if self.block == 0 {
            return along;
        }
        let outer = flat / (self.inner * self.axis_len);
        let within = flat % self.inner;
        (outer * self.param_axis_len + along / self.block) * self.inner + within
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_tensor_axis_and_blocked_indexing() {
        let scalar = ParamIndex::new("Q", "scale", &[2, 3], &[], 1, 0).unwrap();
        assert_eq!(scalar.index(5), 0);
        let per_axis = ParamIndex::new("Q", "scale", &[2, 3, 2], &[3], 1, 0).unwrap();
        let got: Vec<usize> = (0..12).map(|i| per_axis.index(i)).collect();
        assert_eq!(got, [0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2]);
        // x [2, 5] blocked by 2 along axis 1: scale [2, 3], last block short.
        let blocked = ParamIndex::new("Q", "scale", &[2, 5], &[2, 3], 1, 2).unwrap();
        let got: Vec<usize> = (0..10).map(|i| blocked.index(i)).collect();
        assert_eq!(got, [0, 0, 1, 1, 2, 3, 3, 4, 4, 5]);
        // Blocked along axis 0 of [4, 2] by 2: scale [2, 2].
        let rows = ParamIndex::new("Q", "scale", &[4, 2], &[2, 2], 0, 2).unwrap();
        let got: Vec<usize> = (0..8).map(|i| rows.index(i)).collect();
        assert_eq!(got, [0, 1, 0, 1, 2, 3, 2, 3]);
    }

    #[test]
    fn inconsistent_parameters_are_errors() {
        assert!(ParamIndex::new("Q", "scale", &[2, 3], &[2], 1, 0).is_err());
        assert!(ParamIndex::new("Q", "scale", &[2, 3], &[3], 5, 0).is_err());
        assert!(ParamIndex::new("Q", "scale", &[2, 5], &[2, 2], 1, 2).is_err());
        assert!(ParamIndex::new("Q", "scale", &[2, 5], &[2, 3], 1, -1).is_err());
    }
}
