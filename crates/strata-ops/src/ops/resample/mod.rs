//! Resampling family: Resize, Upsample, GridSample, AffineGrid, CenterCropPad, Col2Im.

mod geometry;
mod grid_sample;
mod interpolate;
mod resize;
mod upsample;

use crate::Constructor;

/// The family's operators, registered in `registry::ONNX_FAMILIES`.
pub const OPS: &[(&str, Constructor)] = &[
    ("Resize", resize::Resize::build),
    ("Upsample", upsample::Upsample::build),
    ("GridSample", grid_sample::GridSample::build),
];
