//! strata-onnx: ONNX models in, strata tensors out.
//!
//! - [`proto`]: the ONNX protobuf schema (prost-generated, no `protoc` needed);
//! - [`open_model`] / [`load_model_bytes`]: decoding, from a read-only memory map or from memory;
//! - [`tensor_from_proto`]: initializers as `Persistent` tensors, zero-copy when aligned, with
//!   external data files resolved through a [`WeightSource`];
//! - [`ModelBuilder`]: writing ONNX models from Rust (tests, built-in models, benchmarks).

pub mod builder;
pub mod data_type;
pub mod decode;
pub mod error;
mod external;
pub mod import;
pub mod models;
pub mod proto;
pub mod tensor_proto;
pub mod weights;

pub use builder::{Attrs, Dim, ModelBuilder};
pub use data_type::{dtype_from_onnx, dtype_to_onnx};
pub use decode::{
    load_model_bytes, load_tensor_bytes, map_file, map_model_file, open_model, open_tensor,
};
pub use error::{OnnxError, OperatorError, Result};
pub use import::{import_model, load, load_bytes, load_graph, read_tensor_pb};
pub use tensor_proto::{is_zero_copy, tensor_from_proto, tensor_to_proto};
pub use weights::WeightSource;
