//! Matrix products and linear algebra: MatMul, Gemm, Einsum, Det, Trilu, and the integer products
//! MatMulInteger and QLinearMatMul on `integer_matmul_kernel`.

pub mod det;
pub mod einsum;
mod einsum_schedule;
pub mod gemm;
pub(crate) mod integer_matmul_kernel;
pub mod matmul;
pub(crate) mod matmul_epilogue;
pub mod matmul_integer;
pub mod matmul_integer_scaled;
pub mod qlinear_matmul;
pub mod trilu;

use crate::OpTable;

/// The family's operator tables, read by the registry.
pub const OPS: &[OpTable] = &[
    &[("MatMul", matmul::MatMul::build)],
    &[("Gemm", gemm::Gemm::build)],
    &[("Det", det::Det::build), ("Einsum", einsum::Einsum::build)],
    trilu::OPS,
    &[("MatMulInteger", matmul_integer::MatMulInteger::build)],
    &[("QLinearMatMul", qlinear_matmul::QLinearMatMul::build)],
];
