//! Resampling family: Resize, Upsample, GridSample, AffineGrid (CenterCropPad is in `shape`, Col2Im in `convolution`).

mod affine_grid;
mod geometry;
mod grid_sample;
mod interpolate;
pub(crate) mod resize;
mod sample;
mod upsample;

use crate::OpTable;

/// The family's operators, read by the registry.
pub const OPS: &[OpTable] = &[&[
    ("Resize", resize::Resize::build),
    ("Upsample", upsample::Upsample::build),
    ("GridSample", grid_sample::GridSample::build),
    ("AffineGrid", affine_grid::AffineGrid::build),
]];
