//! Quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, with how their scale
//! and zero-point parameters map onto elements (`params`), element access for every quantized
//! dtype (`values`) and the operand checks and per-line parameters of the integer products
//! (`integer_operands`). The integer products live with their float cousins (`linalg`,
//! `convolution`).

pub mod dequantize_linear;
pub mod dynamic_quantize_linear;
pub(crate) mod int_params;
pub(crate) mod integer_operands;
pub mod lookup;
#[cfg(target_arch = "x86_64")]
mod lookup_x86;
pub mod microsoft;
pub(crate) mod params;
mod per_tensor;
pub mod quantize_linear;
pub(crate) mod values;

use crate::OpTable;

/// The family's operator tables, read by the registry.
pub const OPS: &[OpTable] = &[&[
    ("QuantizeLinear", quantize_linear::QuantizeLinear::build),
    (
        "DequantizeLinear",
        dequantize_linear::DequantizeLinear::build,
    ),
    (
        "DynamicQuantizeLinear",
        dynamic_quantize_linear::DynamicQuantizeLinear::build,
    ),
]];

/// The com.microsoft quantized operators (QLinearConcat, QLinearAdd, ...), read by the registry.
pub const MICROSOFT_OPS: &[OpTable] = microsoft::OPS;
