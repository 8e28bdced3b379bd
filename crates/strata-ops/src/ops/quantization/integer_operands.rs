//! The operands of the integer products (MatMulInteger, QLinearMatMul, ConvInteger,
//! QLinearConv): input checks, per-row/per-column/per-channel parameters (zero points, scales)
//! read into planned scratch, and the rounding of requantization multipliers.

use strata_core::{bf16, f16, DType, Tensor};

use crate::ops::quantization::values::read_f64_into;
use crate::support::inputs::required;
use crate::support::scratch::carve;
use crate::{Fact, OpError, OpResult};

/// Checks the eight inputs shared by QLinearMatMul and QLinearConv — (x, x_scale, x_zero_point,
/// w, w_scale, w_zero_point, y_scale, y_zero_point) — and returns x, w and the output dtype.
pub(crate) fn check_qlinear_inputs<'a>(
    op: &str,
    inputs: &[&'a Fact],
) -> OpResult<(&'a Fact, &'a Fact, DType)> {
    let x = required(op, inputs, 0)?;
    let w = required(op, inputs, 3)?;
    check_operand(op, x, 0, Some(required(op, inputs, 2)?), 2)?;
    check_operand(op, w, 3, Some(required(op, inputs, 5)?), 5)?;
    for index in [1, 4, 6] {
        let scale = required(op, inputs, index)?;
        if !scale.dtype.is_float() {
            return Err(OpError::DType {
                op: op.into(),
                index,
                expected: "a float scale".into(),
                actual: scale.dtype,
            });
        }
    }
    let y_zero_point = required(op, inputs, 7)?;
    if !matches!(y_zero_point.dtype, DType::U8 | DType::I8) {
        return Err(OpError::DType {
            op: op.into(),
            index: 7,
            expected: "uint8 or int8".into(),
            actual: y_zero_point.dtype,
        });
    }
    Ok((x, w, y_zero_point.dtype))
}

/// Checks that `x` is uint8 or int8 and its zero point (if any) has its type.
pub(crate) fn check_operand(
    op: &str,
    x: &Fact,
    index: usize,
    zero_point: Option<&Fact>,
    zero_index: usize,
) -> OpResult<()> {
    if !matches!(x.dtype, DType::U8 | DType::I8) {
        return Err(OpError::DType {
            op: op.into(),
            index,
            expected: "uint8 or int8".into(),
            actual: x.dtype,
        });
    }
    match zero_point {
        Some(zp) if zp.dtype != x.dtype => Err(OpError::DType {
            op: op.into(),
            index: zero_index,
            expected: format!("{} like input {index}", x.dtype),
            actual: zp.dtype,
        }),
        _ => Ok(()),
    }
}

/// One value per row or column of a matrix operand (or per output channel): a scalar or a 1-D
/// tensor of `lines` values, read as f64 into a buffer carved from `work` (at most `lines`
/// values). `None` when `param` is absent.
pub(crate) fn per_line<'w>(
    op: &str,
    what: &str,
    param: &Tensor,
    lines: usize,
    work: &mut &'w mut [f64],
) -> OpResult<Option<&'w [f64]>> {
    if !param.is_defined() {
        return Ok(None);
    }
    let len = param.numel();
    let ok = param.rank() == 0 || (param.rank() == 1 && (len == 1 || len == lines));
    if !ok {
        return Err(OpError::shape(
            op,
            format!(
                "{what} must be a scalar or a 1-D tensor of {lines}, got dims {:?}",
                param.dims()
            ),
        ));
    }
    let values = carve(op, work, len)?;
    read_f64_into(op, param, values)?;
    Ok(Some(values))
}

/// The value of a per-line parameter for line `line`.
pub(crate) fn line_value(values: &[f64], line: usize) -> f64 {
    if values.len() == 1 {
        values[0]
    } else {
        values[line]
    }
}

/// `value` rounded to `dtype`'s precision: requantization multipliers are computed in the
/// scales' own type, as the ONNX reference does.
pub(crate) fn round_to(dtype: DType, value: f64) -> f64 {
    match dtype {
        DType::F16 => f16::from_f64(value).to_f64(),
        DType::BF16 => bf16::from_f64(value).to_f64(),
        DType::F32 => f64::from(value as f32),
        _ => value,
    }
}
