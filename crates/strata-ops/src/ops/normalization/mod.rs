//! Normalization family: BatchNormalization, LayerNormalization, RMSNormalization, GroupNormalization, InstanceNormalization, LpNormalization, MeanVarianceNormalization, LRN.

pub mod batchnorm;
pub mod batchnorm_training;
pub(crate) mod common;
pub mod group_norm;
pub mod layer_norm;
pub mod lp_norm;
pub mod lrn;
pub mod mean_variance;
pub(crate) mod row_kernel;

use crate::OpTable;
use group_norm::GroupNorm;
use layer_norm::LayerNorm;
use lp_norm::LpNorm;
use lrn::Lrn;
use mean_variance::MeanVarianceNorm;

/// The family's operators, read by the registry.
pub const OPS: &[OpTable] = &[
    &[
        ("LayerNormalization", LayerNorm::build_layer),
        ("RMSNormalization", LayerNorm::build_rms),
        ("GroupNormalization", GroupNorm::build_group),
        ("InstanceNormalization", GroupNorm::build_instance),
        ("LpNormalization", LpNorm::build),
        ("MeanVarianceNormalization", MeanVarianceNorm::build),
        ("LRN", Lrn::build),
    ],
    &[("BatchNormalization", batchnorm::BatchNorm::build)],
];
