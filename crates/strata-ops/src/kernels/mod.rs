//! Slice-level CPU compute primitives shared by operator families (GEMM, batched MatMul, fused
//! activations, sliding-window geometry); family-specific kernels (convolution, pooling) live in
//! their family's folder under `ops`.
//!
//! Kernels are pure functions over contiguous (or explicitly strided) slices that never allocate
//! on their hot path. Scratch space is passed in by the caller, who asks for its
//! size first (`conv_scratch_len`). Shapes are validated by the `*_output_dims` functions; the
//! compute functions check again (dims against slice lengths) and return errors, never panic.

pub mod activation;
pub mod auto_pad;
pub mod error;
pub mod float;
pub mod gemm;
pub mod igemm;
pub(crate) mod interleave;
pub mod matmul;
pub mod norm;
pub(crate) mod phase_planes;
pub mod quant;
pub mod sdpa;
pub(crate) mod simd;
pub mod softmax;
pub(crate) mod spatial;

pub use activation::Activation;
pub use auto_pad::resolve_auto_pad;
pub use error::{KernelError, KernelResult};
pub use float::Float;
pub use gemm::{gemm, gemm_f32, gemm_prepacked, GemmFloat, PackedOperand, Prepacked};
pub use matmul::{batched_matmul, batched_matmul_f32, matmul_output_dims};
