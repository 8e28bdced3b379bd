//! The one error type of `strata-ops`. The runtime wraps it with the node's name.

use strata_core::{CoreError, DType, Device};

pub type OpResult<T> = std::result::Result<T, OpError>;

#[derive(Debug, thiserror::Error)]
pub enum OpError {
    #[error("{op}: attribute `{attr}`: {message}")]
    Attribute {
        op: String,
        attr: String,
        message: String,
    },

    #[error("{op}: expected {expected} inputs, got {actual}")]
    InputCount {
        op: String,
        expected: String,
        actual: usize,
    },

    #[error("{op}: input {index} is required but missing")]
    MissingInput { op: String, index: usize },

    #[error("{op}: {message}")]
    Shape { op: String, message: String },

    #[error("{op}: no kernel for dtype {dtype} on {device}")]
    NoKernel {
        op: String,
        dtype: DType,
        device: Device,
    },

    #[error("{op}: input {index} has dtype {actual}, expected {expected}")]
    DType {
        op: String,
        index: usize,
        expected: String,
        actual: DType,
    },

    #[error("{op}: {message}")]
    Kernel { op: String, message: String },

    #[error("operator {op_type} (domain {domain:?}, opset {opset}) is not supported")]
    Unsupported {
        op_type: String,
        domain: String,
        opset: i64,
    },

    /// A subgraph (If/Loop/Scan body) failed; the source is the runtime's error.
    #[error("{op}: subgraph {graph:?}: {source}")]
    Subgraph {
        op: String,
        graph: String,
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// The run was cancelled through its [`crate::run_control::CancelFlag`].
    #[error("{op}: the run was cancelled")]
    Cancelled { op: String },

    /// The run passed its deadline.
    #[error("{op}: the run timed out (its limit is {timeout:?})")]
    TimedOut {
        op: String,
        timeout: std::time::Duration,
    },

    #[error(transparent)]
    Compute(#[from] crate::kernels::KernelError),

    #[error(transparent)]
    Core(#[from] CoreError),
}

impl OpError {
    pub fn shape(op: &str, message: impl Into<String>) -> Self {
        OpError::Shape {
            op: op.to_string(),
            message: message.into(),
        }
    }

    pub fn attribute(op: &str, attr: &str, message: impl Into<String>) -> Self {
        OpError::Attribute {
            op: op.to_string(),
            attr: attr.to_string(),
            message: message.into(),
        }
    }

    /// No kernel of `op` for `dtype` on `device` (what kernel selection answers when it has none).
    pub fn no_kernel(op: &str, dtype: DType, device: Device) -> Self {
        OpError::NoKernel {
            op: op.to_string(),
            dtype,
            device,
        }
    }

    pub fn kernel(op: &str, message: impl Into<String>) -> Self {
        OpError::Kernel {
            op: op.to_string(),
            message: message.into(),
        }
    }
}
