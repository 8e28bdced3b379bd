//! Element-wise math: binary arithmetic (Add, Sub, Mul, Div, Mod, …) with broadcasting, unary
//! functions, Pow, the variadic Sum / Mean / Max / Min, Clip, bitwise and logical operators,
//! comparisons, IsNaN / IsInf, Where, and CumSum.

pub mod binary;
pub mod bitwise;
pub mod clip;
pub mod compare;
pub mod cumsum;
pub mod float_class;
pub mod logical;
pub mod pow;
pub mod unary;
pub mod variadic;
pub mod where_op;

use crate::OpTable;

/// The family's operator tables, read by the registry.
pub const OPS: &[OpTable] = &[
    binary::OPS,
    unary::OPS,
    pow::OPS,
    variadic::OPS,
    clip::OPS,
    bitwise::OPS,
    logical::OPS,
    compare::OPS,
    float_class::OPS,
    where_op::OPS,
    cumsum::OPS,
];
