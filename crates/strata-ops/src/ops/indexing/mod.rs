//! Reading and writing by index: Gather, GatherElements, GatherND, Scatter / ScatterElements /
//! ScatterND, TensorScatter, Compress, NonZero.

pub mod compress;
pub mod gather;
pub mod gather_elements;
pub mod gather_nd;
pub mod nonzero;
pub mod scatter;
mod tensor_scatter;

use crate::OpTable;

/// The family's operator tables, read by the registry.
pub const OPS: &[OpTable] = &[
    &[("Gather", gather::Gather::build)],
    gather_elements::OPS,
    gather_nd::OPS,
    scatter::OPS,
    &[("TensorScatter", tensor_scatter::TensorScatter::build)],
    compress::OPS,
    &[("NonZero", nonzero::NonZero::build)],
];
