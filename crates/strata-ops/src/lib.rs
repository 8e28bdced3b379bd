//! strata-ops: operator definitions (attributes, shape and dtype inference with symbolic dims),
//! CPU kernels, and the registry that maps ONNX op types to them.
//!
//! The runtime asks an [`Operator`] for output [`Fact`]s at plan time and for a [`Kernel`] once
//! per node (chosen by op, dtype and device); running a node calls that kernel directly.

pub mod attributes;
pub mod eager;
pub mod error;
pub mod eval;
pub mod fact;
pub mod kernels;
pub mod operator;
pub mod ops;
pub mod parallel;
pub mod prelude;
mod registry;
pub mod run_control;
pub mod support;

pub use attributes::{Attr, Attributes};
pub use error::{OpError, OpResult};
pub use fact::{broadcast_dims, broadcast_shapes, int_values, Dim, Fact};
pub use operator::{
    Constructor, ContextState, DropsTrailingOutputs, EpilogueStep, FusableActivation, Fused,
    FusesEpilogue, HasQLinearForm, InferenceBatchNorm, Kernel, KernelCapabilities, KernelIo,
    LinearQuantization, MakesOutputs, OpCapabilities, OpContext, OpTable, Operator, RowNorm,
    UsesContextState,
};
pub use registry::{build_operator, is_supported, supported_ops};
