//! Eager tensor operations: PyTorch-named methods on [`Tensor`](strata_core::Tensor) that run
//! strata's own ONNX operators' kernels at once, routed by dispatch keys.
//!
//! ```
//! use strata_core::Tensor;
//! use strata_ops::prelude::*;
//!
//! let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
//! let b = Tensor::from_slice(&[10.0f32, 20.0], &[2])?;
//! let y = a.add(&b)?.softmax(-1)?;
//! assert_eq!(y.dims(), &[2, 2]);
//! a.add_(&b)?; // in place: a's version counter goes up by one
//! # Ok::<(), strata_ops::OpError>(())
//! ```
//!
//! Every call computes a [`DispatchKeySet`](strata_core::DispatchKeySet) from its tensors (CPU
//! or CUDA; Dense, Quantized) and the thread's inference mode, and looks up the op's const
//! [`DispatchTable`](strata_core::DispatchTable): InferenceMode falls through, and a key set
//! nothing serves (block-quantized inputs to `add`, CUDA tensors) is
//! `OpError::Core(CoreError::NoKernel { op, keys })`. The dense CPU entries run the kernels the
//! plan-based runtime runs: element-wise ops keep the chosen kernel per (op, dtype) and call it
//! directly; the others go through the one-operator path ([`crate::eval::run_operator`]).
//! Outputs come from [`Tensor::empty`](strata_core::Tensor::empty) with `MemoryKind::Default`.
//! In-place forms (`add_`, `sub_`, `mul_`, `div_`, `clamp_`, `relu_`) write through one borrow,
//! so they bump the version counter once, or not at all in inference mode.

mod arith;
mod binary;
mod call;
mod compare;
mod convert;
mod join;
mod linalg;
mod pool;
mod promote;
mod reduce;
mod select;
mod softmax;
mod unary;

#[cfg(test)]
mod tests;

pub use arith::EagerArith;
pub use call::{set_threads, threads};
pub use compare::EagerCompare;
pub use convert::EagerConvert;
pub use join::{cat, stack};
pub use linalg::{Conv2d, EagerLinalg};
pub use pool::{EagerPool, Pool2d};
pub use promote::promote_types;
pub use reduce::EagerReduce;
pub use select::{where_cond, EagerSelect};
pub use softmax::EagerSoftmax;
pub use unary::EagerUnary;
