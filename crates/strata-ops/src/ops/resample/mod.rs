//! Resampling family: Resize, Upsample, GridSample, AffineGrid, CenterCropPad, Col2Im.

use crate::Constructor;

/// The family's operators, registered in `registry::ONNX_FAMILIES`.
pub const OPS: &[(&str, Constructor)] = &[];
