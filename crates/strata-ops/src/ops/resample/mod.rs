//! Resampling family: Resize, Upsample, GridSample, AffineGrid, CenterCropPad, Col2Im.

mod affine_grid;
mod center_crop_pad;
mod col2im;
mod geometry;
mod grid_sample;
mod interpolate;
mod resize;
mod sample;
mod upsample;

use crate::Constructor;

/// The family's operators, registered in `registry::ONNX_FAMILIES`.
pub const OPS: &[(&str, Constructor)] = &[
    ("Resize", resize::Resize::build),
    ("Upsample", upsample::Upsample::build),
    ("GridSample", grid_sample::GridSample::build),
    ("AffineGrid", affine_grid::AffineGrid::build),
    ("CenterCropPad", center_crop_pad::CenterCropPad::build),
    ("Col2Im", col2im::Col2Im::build),
];
