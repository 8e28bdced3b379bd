//! ONNX → strata graph IR (I1, I4): opsets, initializers (zero-copy where aligned), inputs with
//! symbolic dims, nodes with validated attributes, and one error listing every unsupported op.
//!
//! [`load`] holds the public entry points; [`importer`] imports one graph through a
//! [`graph_builder`]; control flow and sequence operators are lowered by their own files.

mod attributes;
mod context;
mod control_flow;
mod graph_builder;
mod importer;
mod load;
mod sequences;
mod topological;

pub use load::{import_model, load, load_bytes, load_graph, read_tensor_pb};
