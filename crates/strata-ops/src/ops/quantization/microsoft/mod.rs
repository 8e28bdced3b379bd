//! The quantized operators of onnxruntime's `com.microsoft` domain that its quantization tools
//! write (QOperator format): element-wise, pooling, concatenation and softmax on 8-bit tensors,
//! each with its scale/zero-point parameters ([`qparams`]); and the integer products QGemm,
//! MatMulIntegerToFloat and DynamicQuantizeMatMul on the integer GEMM ([`float_product`] is
//! the float-output product the last two share).

pub mod dynamic_quantize_matmul;
pub(crate) mod float_product;
pub mod matmul_integer_to_float;
pub mod qgemm;
pub mod qlinear_average_pool;
pub mod qlinear_binary;
pub mod qlinear_concat;
pub mod qlinear_global_average_pool;
pub mod qlinear_lookup;
pub mod qlinear_softmax;
pub(crate) mod qparams;

use crate::OpTable;

/// The com.microsoft quantized operators, read by the registry.
pub const OPS: &[OpTable] = &[&[
    ("QLinearAdd", qlinear_binary::QLinearBinary::build_add),
    ("QLinearMul", qlinear_binary::QLinearBinary::build_mul),
    ("QLinearConcat", qlinear_concat::QLinearConcat::build),
    (
        "QLinearGlobalAveragePool",
        qlinear_global_average_pool::QLinearGlobalAveragePool::build,
    ),
    (
        "QLinearSigmoid",
        qlinear_lookup::QLinearLookup::build_sigmoid,
    ),
    (
        "QLinearLeakyRelu",
        qlinear_lookup::QLinearLookup::build_leaky_relu,
    ),
    ("QLinearSoftmax", qlinear_softmax::QLinearSoftmax::build),
    ("QGemm", qgemm::QGemm::build),
    (
        "QLinearAveragePool",
        qlinear_average_pool::QLinearAveragePool::build,
    ),
    (
        "MatMulIntegerToFloat",
        matmul_integer_to_float::MatMulIntegerToFloat::build,
    ),
    (
        "DynamicQuantizeMatMul",
        dynamic_quantize_matmul::DynamicQuantizeMatMul::build,
    ),
]];
