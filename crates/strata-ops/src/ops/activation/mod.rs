//! Activations: Relu and the other pointwise nonlinearities, Softmax / LogSoftmax / Hardmax,
//! and inference Dropout.

pub mod activation;
pub mod dropout;
pub mod softmax;

use crate::OpTable;

/// The family's operator tables, read by the registry.
pub const OPS: &[OpTable] = &[activation::OPS, dropout::OPS, softmax::OPS];
