//! Slice-level CPU kernels: pure functions over contiguous (or explicitly strided) slices that
//! never allocate on their hot path. Scratch space is passed in by the caller, who asks for its
//! size first (`conv_scratch_len`). Shapes are validated by the `*_output_dims` functions; the
//! compute functions check again (dims against slice lengths) and return errors, never panic.

pub mod activation;
pub mod auto_pad;
pub mod conv;
pub mod error;
pub mod float;
pub mod gemm;
pub mod global_pool;
mod im2col;
pub mod matmul;
pub mod pool;
mod spatial;

#[cfg(test)]
mod test_util;

pub use activation::Activation;
pub use auto_pad::resolve_auto_pad;
pub use conv::{conv, conv_f32, conv_output_dims, conv_scratch_len, ConvParams};
pub use error::{KernelError, KernelResult};
pub use float::Float;
pub use gemm::{gemm, gemm_f32, GemmFloat};
pub use global_pool::{
    global_average_pool, global_average_pool_f32, global_lp_pool, global_lp_pool_f32,
    global_max_pool, global_max_pool_f32, global_pool_output_dims,
};
pub use matmul::{batched_matmul, batched_matmul_f32, matmul_output_dims};
pub use pool::{
    average_pool, average_pool_f32, lp_pool, lp_pool_f32, max_pool, max_pool_f32, pool_output_dims,
    PoolParams, StorageOrder,
};
