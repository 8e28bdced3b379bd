//! Normalization family: LayerNormalization, RMSNormalization, GroupNormalization, InstanceNormalization, LpNormalization, MeanVarianceNormalization, LRN.

use crate::Constructor;

/// The family's operators, registered in `registry::ONNX_FAMILIES`.
pub const OPS: &[(&str, Constructor)] = &[];
