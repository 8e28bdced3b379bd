//! Sliding-window geometry shared by convolution and pooling: per-axis attributes with ONNX
//! defaults, the output-size formula (with ONNX's ceil_mode rule) and checked sizes.

use smallvec::SmallVec;

use super::error::{KernelError, KernelResult};

/// Per-axis sizes; inline for the ranks ONNX models use, so no heap allocation in kernels.
pub(crate) type Dims = SmallVec<[usize; 6]>;

/// Resolved window geometry over the spatial dims of one (batch, channel) plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WindowGeometry {
    pub in_dims: Dims,
    pub out_dims: Dims,
    pub kernel: Dims,
    pub strides: Dims,
    pub pads_begin: Dims,
    pub pads_end: Dims,
    pub dilations: Dims,
    /// Elements in one input plane.
    pub in_len: usize,
    /// Elements in one output plane.
    pub out_len: usize,
    /// Taps in one kernel window.
    pub kernel_len: usize,
}

/// Raw per-axis attributes as an operator carries them; empty vectors mean the ONNX default.
pub(crate) struct WindowAttrs<'a> {
    pub kernel: &'a [usize],
    pub strides: &'a [usize],
    pub pads_begin: &'a [usize],
    pub pads_end: &'a [usize],
    pub dilations: &'a [usize],
    pub ceil_mode: bool,
}

impl WindowGeometry {
    /// Validates the attributes against `in_dims` (the spatial dims) and computes output dims.
    pub fn new(op: &'static str, in_dims: &[usize], attrs: &WindowAttrs<'_>) -> KernelResult<Self> {
        let rank = in_dims.len();
        if attrs.kernel.len() != rank {
            return Err(KernelError::InvalidParam {
                op,
                param: "kernel_shape",
                reason: format!(
                    "has {} entries but the input has {rank} spatial dims",
                    attrs.kernel.len()
                ),
            });
        }
        let kernel = per_axis(op, "kernel_shape", attrs.kernel, rank, 1, 1)?;
        let strides = per_axis(op, "strides", attrs.strides, rank, 1, 1)?;
        let dilations = per_axis(op, "dilations", attrs.dilations, rank, 1, 1)?;
        let pads_begin = per_axis(op, "pads (begin)", attrs.pads_begin, rank, 0, 0)?;
        let pads_end = per_axis(op, "pads (end)", attrs.pads_end, rank, 0, 0)?;

        let mut out_dims = Dims::new();
        for axis in 0..rank {
            out_dims.push(output_extent(
                op,
                axis,
                in_dims[axis],
                kernel[axis],
                strides[axis],
                pads_begin[axis],
                pads_end[axis],
                dilations[axis],
                attrs.ceil_mode,
            )?);
        }
        Ok(WindowGeometry {
            in_len: checked_product(op, "input plane size", in_dims)?,
            out_len: checked_product(op, "output plane size", &out_dims)?,
            kernel_len: checked_product(op, "kernel size", &kernel)?,
            in_dims: Dims::from_slice(in_dims),
            out_dims,
            kernel,
            strides,
            pads_begin,
            pads_end,
            dilations,
        })
    }

    /// True when every output element reads exactly the input element at the same position
    /// (1x1 kernel, stride 1, no padding), so convolution needs no unfolding.
    pub fn is_pointwise(&self) -> bool {
        self.kernel.iter().all(|&k| k == 1)
            && self.strides.iter().all(|&s| s == 1)
            && self.pads_begin.iter().all(|&p| p == 0)
            && self.pads_end.iter().all(|&p| p == 0)
    }

    /// Input coordinate of kernel tap 0 for output coordinate `o` on `axis` (may be negative:
    /// inside the left padding).
    #[inline(always)]
    pub fn window_start(&self, axis: usize, o: usize) -> isize {
        (o * self.strides[axis]) as isize - self.pads_begin[axis] as isize
    }
}

/// Expands one per-axis attribute: empty means `default` on every axis; values below `min` are
/// rejected.
fn per_axis(
    op: &'static str,
    param: &'static str,
    values: &[usize],
    rank: usize,
    default: usize,
    min: usize,
) -> KernelResult<Dims> {
    if values.is_empty() {
        return Ok(SmallVec::from_elem(default, rank));
    }
    if values.len() != rank {
        return Err(KernelError::InvalidParam {
            op,
            param,
            reason: format!(
                "has {} entries but the input has {rank} spatial dims",
                values.len()
            ),
        });
    }
    if let Some(&bad) = values.iter().find(|&&v| v < min) {
        return Err(KernelError::InvalidParam {
            op,
            param,
            reason: format!("{bad} is below the minimum {min}"),
        });
    }
    Ok(Dims::from_slice(values))
}

/// ONNX output size along one axis. With `ceil_mode`, a trailing window that would start in the
/// right padding is dropped (it must start inside the input or the left padding). An empty input
/// axis too small for the kernel yields 0 outputs rather than an error.
#[allow(clippy::too_many_arguments)]
pub(crate) fn output_extent(
    op: &'static str,
    axis: usize,
    input: usize,
    kernel: usize,
    stride: usize,
    pad_begin: usize,
    pad_end: usize,
    dilation: usize,
    ceil_mode: bool,
) -> KernelResult<usize> {
    let overflow = || KernelError::SizeOverflow {
        op,
        what: "window extent",
    };
    let extent = (kernel - 1)
        .checked_mul(dilation)
        .and_then(|e| e.checked_add(1))
        .ok_or_else(overflow)?;
    let padded = input
        .checked_add(pad_begin)
        .and_then(|p| p.checked_add(pad_end))
        .ok_or_else(overflow)?;
    if padded < extent {
        if input == 0 {
            return Ok(0);
        }
        return Err(KernelError::WindowTooLarge {
            op,
            axis,
            extent,
            padded,
        });
    }
    let span = padded - extent;
    let mut out = if ceil_mode {
        span.div_ceil(stride)
    } else {
        span / stride
    } + 1;
    if ceil_mode && (out - 1) * stride >= input + pad_begin {
        out -= 1;
    }
    Ok(out)
}

/// Product of `dims`, or an overflow error naming `what`.
pub(crate) fn checked_product(
    op: &'static str,
    what: &'static str,
    dims: &[usize],
) -> KernelResult<usize> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or(KernelError::SizeOverflow { op, what })
}

/// Checks a slice length against what its dims require.
pub(crate) fn check_len(
    op: &'static str,
    buffer: &'static str,
    actual: usize,
    expected: usize,
) -> KernelResult<()> {
    if actual != expected {
        return Err(KernelError::BufferLength {
            op,
            buffer,
            expected,
            actual,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extent(
        input: usize,
        k: usize,
        s: usize,
        pb: usize,
        pe: usize,
        d: usize,
        ceil: bool,
    ) -> usize {
        output_extent("test", 0, input, k, s, pb, pe, d, ceil).unwrap()
    }

    #[test]
    fn output_extent_follows_the_onnx_formula() {
        assert_eq!(extent(5, 3, 1, 0, 0, 1, false), 3);
        assert_eq!(extent(5, 3, 1, 1, 1, 1, false), 5);
        assert_eq!(extent(7, 3, 2, 1, 1, 1, false), 4);
        assert_eq!(extent(7, 3, 1, 0, 0, 2, false), 3);
        // ONNX maxpool_2d_ceil: 4x4 input, kernel 3, stride 2 -> 2 with ceil, 1 without.
        assert_eq!(extent(4, 3, 2, 0, 0, 1, true), 2);
        assert_eq!(extent(4, 3, 2, 0, 0, 1, false), 1);
        // The ceil rule: a last window starting in the right padding is dropped.
        // input 5, k 2, s 2, pad_end 1: span 4 -> ceil 2 + 1 = 3 windows starting at 0, 2, 4.
        assert_eq!(extent(5, 2, 2, 0, 1, 1, true), 3);
        // input 4, k 1, s 2, pads 0/1: span 4 -> 3 windows at 0, 2, 4; 4 >= 4 starts in padding.
        assert_eq!(extent(4, 1, 2, 0, 1, 1, true), 2);
        assert_eq!(extent(0, 3, 1, 0, 0, 1, false), 0);
    }

    #[test]
    fn a_kernel_larger_than_the_padded_input_is_an_error() {
        let err = output_extent("Conv", 1, 2, 5, 1, 1, 0, 1, false).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Conv: kernel extent 5 exceeds the padded input size 3 on spatial axis 1"
        );
    }

    #[test]
    fn per_axis_defaults_and_validation() {
        let attrs = WindowAttrs {
            kernel: &[3, 3],
            strides: &[],
            pads_begin: &[1, 0],
            pads_end: &[],
            dilations: &[1],
            ceil_mode: false,
        };
        let err = WindowGeometry::new("Conv", &[8, 8], &attrs).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Conv: invalid dilations: has 1 entries but the input has 2 spatial dims"
        );
        let attrs = WindowAttrs {
            dilations: &[],
            strides: &[0, 1],
            ..attrs
        };
        let err = WindowGeometry::new("Conv", &[8, 8], &attrs).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Conv: invalid strides: 0 is below the minimum 1"
        );
        let attrs = WindowAttrs {
            strides: &[],
            ..attrs
        };
        let g = WindowGeometry::new("Conv", &[8, 8], &attrs).unwrap();
        assert_eq!(g.out_dims.as_slice(), &[7, 6]);
        assert_eq!((g.in_len, g.out_len, g.kernel_len), (64, 42, 9));
    }

    #[test]
    fn advance_walks_row_major() {
        let dims = [2, 3];
        let mut idx = [0, 0];
        let mut seen = vec![idx];
        while crate::support::strided::advance_index(&mut idx, &dims) {
            seen.push(idx);
        }
        assert_eq!(seen, vec![[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]);
    }
}
