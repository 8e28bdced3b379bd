//! The one error type of strata-onnx: every failure names the file or tensor it concerns.

use std::path::PathBuf;

use strata_core::CoreError;

use crate::data_type::data_type_name;

pub type Result<T> = std::result::Result<T, OnnxError>;

#[derive(Debug, thiserror::Error)]
pub enum OnnxError {
    /// The bytes are not a well-formed ONNX protobuf (truncated, corrupted, not ONNX at all).
    #[error("{path}: not a valid ONNX file: {message}")]
    Decode { path: String, message: String },

    /// Opening, mapping or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// An element type strata has no dtype for (strings, float8, int4, complex, ...).
    #[error("tensor '{tensor}': unsupported ONNX data type {data_type} ({})", data_type_name(*data_type))]
    UnsupportedDataType { tensor: String, data_type: i32 },

    /// A tensor's external data could not be located, read or trusted.
    #[error("tensor '{tensor}': external data: {message}")]
    ExternalData { tensor: String, message: String },

    /// A tensor's own fields disagree (dims vs data length, out-of-range values, bad bools).
    #[error("tensor '{tensor}': {message}")]
    InvalidTensor { tensor: String, message: String },

    /// The model builder was used inconsistently (duplicate names, a dtype ONNX cannot hold).
    #[error("model builder: {message}")]
    Builder { message: String },

    /// Operators strata does not implement: every op type, with its nodes and opset (I4).
    #[error("unsupported operators: {}", ops.join("; "))]
    UnsupportedOperators { ops: Vec<String> },

    /// The model's structure is invalid (no graph, undefined values, cycles, bad inputs).
    #[error("{path}: {message}")]
    Model { path: String, message: String },

    /// A node could not be imported (bad attributes, unknown inputs).
    #[error("node {node:?} ({op}): {message}")]
    Node {
        node: String,
        op: String,
        message: String,
    },

    /// A node's operator rejected its attributes or is not implemented in this form (boxed to
    /// keep `Result`s small).
    #[error(transparent)]
    Operator(Box<OperatorError>),

    /// Boxed: `RuntimeError` is large, and every `Result` here would carry its size.
    #[error(transparent)]
    Runtime(Box<strata_runtime::RuntimeError>),

    #[error(transparent)]
    Core(#[from] CoreError),
}

impl From<strata_runtime::RuntimeError> for OnnxError {
    fn from(err: strata_runtime::RuntimeError) -> Self {
        OnnxError::Runtime(Box::new(err))
    }
}

impl OnnxError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        OnnxError::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn invalid(tensor: &str, message: impl Into<String>) -> Self {
        OnnxError::InvalidTensor {
            tensor: tensor.to_string(),
            message: message.into(),
        }
    }

    pub(crate) fn external(tensor: &str, message: impl Into<String>) -> Self {
        OnnxError::ExternalData {
            tensor: tensor.to_string(),
            message: message.into(),
        }
    }

    pub(crate) fn builder(message: impl Into<String>) -> Self {
        OnnxError::Builder {
            message: message.into(),
        }
    }
}

/// An operator that could not be built for a node, with the operator's error as source.
#[derive(Debug, thiserror::Error)]
#[error("node {node:?} ({op}): {source}")]
pub struct OperatorError {
    pub node: String,
    pub op: String,
    #[source]
    pub source: strata_ops::OpError,
}

impl OnnxError {
    /// The error of building `op` for node `node`.
    pub fn operator(node: &str, op: &str, source: strata_ops::OpError) -> Self {
        OnnxError::Operator(Box::new(OperatorError {
            node: node.to_string(),
            op: op.to_string(),
            source,
        }))
    }
}
