//! Loss operators: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss.

pub mod nll;
pub mod softmax_cross_entropy;

use crate::OpTable;
use nll::NllLoss;
use softmax_cross_entropy::SoftmaxCrossEntropy;

/// The family's operators, read by the registry.
pub const OPS: &[OpTable] = &[&[
    ("NegativeLogLikelihoodLoss", NllLoss::build),
    ("SoftmaxCrossEntropyLoss", SoftmaxCrossEntropy::build),
]];
