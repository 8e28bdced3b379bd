//! Shape and movement: Reshape, Flatten, Squeeze / Unsqueeze, Transpose, Expand, Tile, Concat,
//! Split, Slice, Pad, DepthToSpace / SpaceToDepth, CenterCropPad, ReverseSequence, Identity,
//! Shape, Size.

mod center_crop_pad;
pub mod concat;
pub mod depth_space;
pub mod expand;
pub mod flatten;
pub mod identity;
pub mod pad;
pub mod reshape;
mod reverse_sequence;
pub mod shape;
pub mod size;
pub mod slice;
pub mod split;
pub mod squeeze;
pub mod tile;
pub mod transpose;

use crate::OpTable;

/// The family's operator tables, read by the registry.
pub const OPS: &[OpTable] = &[
    &[
        ("Reshape", reshape::Reshape::build),
        ("Flatten", flatten::Flatten::build),
        ("Squeeze", squeeze::Squeeze::build_squeeze),
        ("Unsqueeze", squeeze::Squeeze::build_unsqueeze),
        ("Transpose", transpose::Transpose::build),
        ("Concat", concat::Concat::build),
        ("Identity", identity::Identity::build),
        ("Shape", shape::Shape::build),
        ("CenterCropPad", center_crop_pad::CenterCropPad::build),
        ("ReverseSequence", reverse_sequence::ReverseSequence::build),
    ],
    expand::OPS,
    tile::OPS,
    split::OPS,
    slice::OPS,
    pad::OPS,
    depth_space::OPS,
    size::OPS,
];
