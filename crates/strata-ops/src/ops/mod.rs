//! Operator implementations in families, one folder each, named as the ONNX operator list reads.
//! Each family's `mod.rs` lists its operator tables (`OPS`); the registry reads them.

// A family is named for its main operator where one leads it (`cast/cast.rs`, `shape/shape.rs`):
// the file is where a reader of the operator list looks first.
#![allow(clippy::module_inception)]

pub mod activation;
pub mod attention;
pub mod cast;
pub mod convolution;
pub mod generator;
pub mod indexing;
pub mod linalg;
pub mod llm;
pub mod loss;
pub mod math;
pub mod microsoft;
pub mod ml;
pub mod normalization;
pub mod pooling;
pub mod quantization;
pub mod recurrent;
pub mod reduce;
pub mod resample;
pub mod selection;
pub mod shape;
pub mod signal;
pub mod text;
