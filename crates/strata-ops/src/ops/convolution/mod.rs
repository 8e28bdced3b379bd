//! Convolution in one place: Conv (im2col + GEMM kernels in `conv_kernel` / `im2col`, the direct
//! depthwise kernels in `depthwise` (per plane) and `depthwise_blocked` (channel blocks), Winograd F(2x2, 3x3) and F(4x4, 3x3) for 3x3 stride-1 layers in `winograd`, a direct kernel for layers with few input channels in `few_channels`, a direct stride-1 kernel for thin layers in `direct_stride1`),
//! ConvTranspose (GEMM then the `col2im_fold`), DeformConv, the Col2Im operator, and the integer
//! convolutions ConvInteger and QLinearConv on `integer_conv_kernel`.

mod band_output;
pub mod col2im;
pub(crate) mod col2im_fold;
pub mod conv;
pub mod conv_integer;
pub mod conv_kernel;
mod conv_params;
pub mod conv_transpose;
pub mod deform_conv;
pub(crate) mod depthwise;
mod depthwise_band;
pub(crate) mod depthwise_blocked;
#[cfg(target_arch = "x86_64")]
mod depthwise_blocked_band;
mod depthwise_direct;
#[cfg(target_arch = "x86_64")]
mod depthwise_direct_plane;
#[cfg(target_arch = "x86_64")]
mod depthwise_flat_avx512;
mod depthwise_rows;
#[cfg(target_arch = "x86_64")]
mod depthwise_rows_band;
#[cfg(target_arch = "x86_64")]
mod depthwise_simd;
pub(crate) mod direct_stride1;
#[cfg(target_arch = "x86_64")]
mod direct_stride1_block;
pub(crate) mod few_channels;
#[cfg(target_arch = "x86_64")]
mod few_channels_avx512;
#[cfg(target_arch = "x86_64")]
mod few_channels_block;
mod im2col;
#[cfg(target_arch = "x86_64")]
mod im2col_2d;
mod integer_conv_gemm;
pub(crate) mod integer_conv_kernel;
mod integer_depthwise;
mod interleaved_weights;
pub mod qlinear_conv;
mod row_band;
#[cfg(target_arch = "x86_64")]
mod row_band_avx512;
#[cfg(target_arch = "x86_64")]
mod row_band_split;
pub(crate) mod simd;
mod transposed_output;
pub mod winograd;
mod winograd_transforms;

use crate::OpTable;

/// The family's operator tables, read by the registry.
pub const OPS: &[OpTable] = &[
    &[("Conv", conv::Conv::build)],
    &[("ConvTranspose", conv_transpose::ConvTranspose::build)],
    &[("DeformConv", deform_conv::DeformConv::build)],
    &[("Col2Im", col2im::Col2Im::build)],
    &[("ConvInteger", conv_integer::ConvInteger::build)],
    &[("QLinearConv", qlinear_conv::QLinearConv::build)],
];
