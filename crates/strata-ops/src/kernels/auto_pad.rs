//! ONNX `auto_pad` resolution for Conv and the pools: turns SAME_UPPER / SAME_LOWER / VALID into
//! explicit begin/end pads so the kernels only ever see explicit pads.

use super::error::{KernelError, KernelResult};

/// Explicit pads for an `auto_pad` mode, per the ONNX spec:
/// - `NOTSET` (or empty) and `VALID`: all zeros (NOTSET means the node's explicit `pads` apply;
///   the caller keeps those);
/// - `SAME_UPPER` / `SAME_LOWER`: output size `ceil(input / stride)`, total padding
///   `max(0, (out - 1) * stride + (kernel - 1) * dilation + 1 - input)`, the odd unit going to
///   the end (UPPER) or the beginning (LOWER).
///
/// Empty `strides` / `dilations` mean 1 on every axis. Returns `(pads_begin, pads_end)`.
pub fn resolve_auto_pad(
    auto_pad: &str,
    input_spatial: &[usize],
    kernel: &[usize],
    strides: &[usize],
    dilations: &[usize],
) -> KernelResult<(Vec<usize>, Vec<usize>)> {
    const OP: &str = "auto_pad";
    let rank = input_spatial.len();
    let same_upper = match auto_pad {
        "" | "NOTSET" | "VALID" => return Ok((vec![0; rank], vec![0; rank])),
        "SAME_UPPER" => true,
        "SAME_LOWER" => false,
        other => {
            return Err(KernelError::InvalidParam {
                op: OP,
                param: "auto_pad",
                reason: format!("{other:?} is not NOTSET, SAME_UPPER, SAME_LOWER or VALID"),
            })
        }
    };
    let attr = |param: &'static str, values: &[usize]| -> KernelResult<Vec<usize>> {
        match values.len() {
            0 => Ok(vec![1; rank]),
            n if n == rank && values.iter().all(|&v| v >= 1) => Ok(values.to_vec()),
            n if n == rank => Err(KernelError::InvalidParam {
                op: OP,
                param,
                reason: "values must be >= 1".into(),
            }),
            n => Err(KernelError::InvalidParam {
                op: OP,
                param,
                reason: format!("has {n} entries but the input has {rank} spatial dims"),
            }),
        }
    };
    if kernel.len() != rank || kernel.contains(&0) {
        return Err(KernelError::InvalidParam {
            op: OP,
            param: "kernel_shape",
            reason: format!("{kernel:?} must have {rank} entries, each >= 1"),
        });
    }
    let strides = attr("strides", strides)?;
    let dilations = attr("dilations", dilations)?;
    let overflow = KernelError::SizeOverflow {
        op: OP,
        what: "SAME padding",
    };

    let mut begin = Vec::with_capacity(rank);
    let mut end = Vec::with_capacity(rank);
    for axis in 0..rank {
        let out = input_spatial[axis].div_ceil(strides[axis]);
        let extent = (kernel[axis] - 1)
            .checked_mul(dilations[axis])
            .ok_or(overflow.clone())?
            + 1;
        let needed = out
            .saturating_sub(1)
            .checked_mul(strides[axis])
            .and_then(|v| v.checked_add(extent));
        let total = needed
            .ok_or(overflow.clone())?
            .saturating_sub(input_spatial[axis]);
        let (small, large) = (total / 2, total - total / 2);
        if same_upper {
            begin.push(small);
            end.push(large);
        } else {
            begin.push(large);
            end.push(small);
        }
    }
    Ok((begin, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_upper_puts_the_odd_pad_at_the_end() {
        // ONNX averagepool_2d_same_upper: 32x32, kernel 2, stride 1 -> pads 0 begin, 1 end.
        let (b, e) = resolve_auto_pad("SAME_UPPER", &[32, 32], &[2, 2], &[], &[]).unwrap();
        assert_eq!((b, e), (vec![0, 0], vec![1, 1]));
        let (b, e) = resolve_auto_pad("SAME_LOWER", &[32, 32], &[2, 2], &[], &[]).unwrap();
        assert_eq!((b, e), (vec![1, 1], vec![0, 0]));
    }

    #[test]
    fn same_padding_with_stride_and_dilation() {
        // ONNX conv_with_autopad_same: 5x5, kernel 3, stride 2 -> out 3, total pad 2 -> 1/1.
        let (b, e) = resolve_auto_pad("SAME_LOWER", &[5, 5], &[3, 3], &[2, 2], &[1, 1]).unwrap();
        assert_eq!((b, e), (vec![1, 1], vec![1, 1]));
        // 10 input, kernel 3 dilated 2 (extent 5), stride 3: out 4, total (3*3+5)-10 = 4.
        let (b, e) = resolve_auto_pad("SAME_UPPER", &[10], &[3], &[3], &[2]).unwrap();
        assert_eq!((b, e), (vec![2], vec![2]));
        // Stride larger than needed: total pad clamps at 0.
        let (b, e) = resolve_auto_pad("SAME_UPPER", &[7], &[1], &[4], &[]).unwrap();
        assert_eq!((b, e), (vec![0], vec![0]));
    }

    #[test]
    fn valid_and_notset_are_zero_and_unknown_modes_fail() {
        assert_eq!(
            resolve_auto_pad("VALID", &[4, 4], &[3, 3], &[], &[]).unwrap(),
            (vec![0, 0], vec![0, 0])
        );
        assert_eq!(
            resolve_auto_pad("NOTSET", &[4], &[3], &[], &[]).unwrap(),
            (vec![0], vec![0])
        );
        let err = resolve_auto_pad("SAME", &[4], &[3], &[], &[]).unwrap_err();
        assert!(err.to_string().contains("\"SAME\" is not NOTSET"), "{err}");
        assert!(resolve_auto_pad("SAME_UPPER", &[4, 4], &[3], &[], &[]).is_err());
    }
}
