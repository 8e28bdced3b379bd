//! The one error type of `strata-runtime`: every variant names the node, op, value or input
//! it is about.

use strata_core::{CoreError, DType};
use strata_ops::OpError;

pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A node failed (inference, kernel choice or run); boxed to keep `Result`s small.
    #[error(transparent)]
    Node(Box<NodeError>),

    #[error("graph: value {name:?} is defined twice")]
    DuplicateValue { name: String },

    #[error("graph: node {node:?} reads undefined value #{value}")]
    UndefinedValue { node: String, value: usize },

    #[error("graph: node {node:?} reads its own output")]
    ReadsOwnOutput { node: String },

    #[error("graph: node {node:?} reads removed value {value:?}")]
    ReadsRemovedValue { node: String, value: String },

    #[error("graph: the graph has a cycle through nodes {nodes:?}")]
    Cycle { nodes: Vec<String> },

    #[error("graph: graph output #{value} is undefined")]
    UndefinedOutput { value: usize },

    #[error("graph: the graph has no outputs")]
    NoOutputs,

    #[error("cannot start an intra-op thread pool of {threads} threads: {reason}")]
    ThreadPool { threads: usize, reason: String },

    #[error("node {node:?} has no kernel")]
    NoKernel { node: String },

    /// Strict mode: a static node reads or writes a value the memory plan gave no memory.
    #[error("value {value:?} (used by node {node:?}) has no memory plan entry")]
    Unbound { value: String, node: String },

    #[error("no output before the first execute")]
    NotRun,

    #[error("no input named {name:?}; the model's inputs are {available:?}")]
    UnknownInput {
        name: String,
        available: Vec<String>,
    },

    #[error("no output named {name:?}; the model's outputs are {available:?}")]
    UnknownOutput {
        name: String,
        available: Vec<String>,
    },

    #[error("input index {index} out of range: the model has {count} inputs")]
    InputIndex { index: usize, count: usize },

    #[error("output index {index} out of range: the model has {count} outputs")]
    OutputIndex { index: usize, count: usize },

    #[error("input {name:?}: dtype {actual}, expected {expected}")]
    InputDType {
        name: String,
        expected: DType,
        actual: DType,
    },

    #[error("input {name:?}: rank {actual} ({dims:?}), expected rank {expected}")]
    InputRank {
        name: String,
        expected: usize,
        actual: usize,
        dims: Vec<usize>,
    },

    #[error("input {name:?}: dim {axis} is {actual}, expected {expected}")]
    InputDim {
        name: String,
        axis: usize,
        expected: String,
        actual: usize,
    },

    #[error("input {name:?}: dim {axis} is {actual}, outside the profile range {min}..={max}")]
    OutsideProfile {
        name: String,
        axis: usize,
        actual: usize,
        min: usize,
        max: usize,
    },

    #[error("input {name:?} was never set")]
    InputNotSet { name: String },

    #[error("profile: {0}")]
    Profile(String),

    #[error(transparent)]
    Op(#[from] OpError),

    #[error(transparent)]
    Core(#[from] CoreError),
}

/// What failed in which node, with the shapes it was given.
#[derive(Debug, thiserror::Error)]
#[error("node {node:?} ({op}): {source}{}", shapes_suffix(.input_shapes))]
pub struct NodeError {
    pub node: String,
    pub op: String,
    pub input_shapes: Vec<Vec<usize>>,
    #[source]
    pub source: OpError,
}

impl RuntimeError {
    /// The error of node `node` running `op` on inputs of `input_shapes`.
    pub fn node(node: &str, op: &str, input_shapes: Vec<Vec<usize>>, source: OpError) -> Self {
        RuntimeError::Node(Box::new(NodeError {
            node: node.to_string(),
            op: op.to_string(),
            input_shapes,
            source,
        }))
    }
}

fn shapes_suffix(shapes: &[Vec<usize>]) -> String {
    if shapes.is_empty() {
        String::new()
    } else {
        format!(" (input shapes {shapes:?})")
    }
}
