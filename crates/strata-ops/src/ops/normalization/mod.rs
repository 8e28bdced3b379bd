//! Normalization family: LayerNormalization, RMSNormalization, GroupNormalization, InstanceNormalization, LpNormalization, MeanVarianceNormalization, LRN.

pub(crate) mod common;
pub mod group_norm;
pub mod layer_norm;
pub mod lp_norm;
pub mod lrn;
pub mod mean_variance;

use crate::Constructor;
use group_norm::GroupNorm;
use layer_norm::LayerNorm;
use lp_norm::LpNorm;
use lrn::Lrn;
use mean_variance::MeanVarianceNorm;

/// The family's operators, registered in `registry::ONNX_FAMILIES`.
pub const OPS: &[(&str, Constructor)] = &[
    ("LayerNormalization", LayerNorm::build_layer),
    ("RMSNormalization", LayerNorm::build_rms),
    ("GroupNormalization", GroupNorm::build_group),
    ("InstanceNormalization", GroupNorm::build_instance),
    ("LpNormalization", LpNorm::build),
    ("MeanVarianceNormalization", MeanVarianceNorm::build),
    ("LRN", Lrn::build),
];
