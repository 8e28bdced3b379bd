//! Quantization family: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv.

use crate::Constructor;

pub mod conv_integer;
pub mod dequantize_linear;
pub mod dynamic_quantize_linear;
mod integer_conv;
mod integer_matmul;
pub mod low_float;
pub mod matmul_integer;
mod params;
pub mod qlinear_conv;
pub mod qlinear_matmul;
pub mod quantize_linear;
mod values;

/// The family's operators, registered in `registry::ONNX_FAMILIES`.
pub const OPS: &[(&str, Constructor)] = &[
    ("QuantizeLinear", quantize_linear::QuantizeLinear::build),
    (
        "DequantizeLinear",
        dequantize_linear::DequantizeLinear::build,
    ),
    (
        "DynamicQuantizeLinear",
        dynamic_quantize_linear::DynamicQuantizeLinear::build,
    ),
    ("MatMulInteger", matmul_integer::MatMulInteger::build),
    ("ConvInteger", conv_integer::ConvInteger::build),
    ("QLinearConv", qlinear_conv::QLinearConv::build),
    ("QLinearMatMul", qlinear_matmul::QLinearMatMul::build),
];
