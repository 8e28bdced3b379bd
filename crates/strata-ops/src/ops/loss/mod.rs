//! Loss operators: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss.

pub mod nll;
pub mod softmax_cross_entropy;

use crate::Constructor;
use nll::NllLoss;
use softmax_cross_entropy::SoftmaxCrossEntropy;

/// The family's operators, registered in `registry::ONNX_FAMILIES`.
pub const OPS: &[(&str, Constructor)] = &[
    ("NegativeLogLikelihoodLoss", NllLoss::build),
    ("SoftmaxCrossEntropyLoss", SoftmaxCrossEntropy::build),
];
