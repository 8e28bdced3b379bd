//! Type conversion: Cast / CastLike between every numeric dtype (text casts live in `text`)
//! and BitCast.

pub mod bitcast;
pub mod cast;

use crate::OpTable;

/// The family's operator tables, read by the registry.
pub const OPS: &[OpTable] = &[bitcast::OPS, cast::OPS];
