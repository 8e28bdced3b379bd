//! Tensors made from attributes or shapes: Constant, ConstantOfShape, Range, EyeLike, OneHot.

pub mod constant;
pub mod constant_of_shape;
pub mod eyelike;
pub mod onehot;
pub mod range;

use crate::OpTable;

/// The family's operator tables, read by the registry.
pub const OPS: &[OpTable] = &[
    &[("Constant", constant::Constant::build)],
    constant_of_shape::OPS,
    eyelike::OPS,
    onehot::OPS,
    range::OPS,
];
