//! Integer GEMM: `C = (A - a_zero) (B - b_zero)` with 8-bit operands and i32 accumulation, and
//! the write-back that turns the accumulators into int32, requantized 8-bit or scaled f32
//! outputs (the kernel behind MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv and the
//! com.microsoft quantized products).
//!
//! The products run as u8 × i8: a signed A is shifted by +128 and an unsigned B by −128 (with
//! their zero points shifted alike), which leaves every centered value unchanged. Zero points
//! never touch the inner loop: `Σ(a−za)(b−zb) = Σab − zb·Σa − za·Σb + K·za·zb`, with A's row
//! sums taken while packing A and B's column sums stored with packed B ([`PackedB`], packed once
//! at plan time when B is a constant).
//!
//! Layout and loops follow the f32 GEMM (`kernels/gemm`): B in panels of [`PANEL`] columns,
//! depth in groups of 4 (one 32-bit lane holds 4 bytes of one column); A packed per register
//! tile of `MR` rows, group-interleaved, row sums alongside ([`PackA`]); a microkernel computes
//! an `MR × NR` tile of raw sums and the [`epilogue`] corrects and writes it. Microkernels: AVX-512
//! VNNI (`vpdpbusd`, exact: no intermediate saturation), AVX2 (operands widened to i16 and
//! multiplied with `vpmaddwd`, which cannot saturate, unlike `vpmaddubsw` on u8 × i8 pairs),
//! and a portable one; chosen at run time. Where the CPU has AMX-INT8 and Linux grants its tile
//! state, products of a row-major A with at least 16 rows and 64 depths run on AMX tiles
//! instead ([`amx`]: A row-major, B's panels as they are). Blocks of C are spread over the intra-op pool.

#[cfg(target_arch = "x86_64")]
mod amx;
mod driver;
pub mod epilogue;
mod im2col;
mod im2col_nhwc;
mod isa;
mod microkernel;
pub mod pack;
mod problem;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use driver::igemm;
pub use epilogue::{round_half_even, write_line, Dest, Epilogue, OutMat, Requant};
pub use im2col::{Im2colA, Im2colGeometry};
pub use im2col_nhwc::{nhwc_scratch, padded_channels, pixel_bytes, tap_major_weights, Im2colNhwc};
pub use isa::IntIsa;
pub use pack::{pack_b_into, IntSlice, MatrixA, PackA, PackedB, PackedBRef};

/// Columns of one packed B panel (one 512-bit vector of i32 lanes).
pub const PANEL: usize = 16;
/// Columns of a microkernel tile: two panels.
pub const NR: usize = 2 * PANEL;

/// `k` rounded up to whole groups of 4 (the packed depth), `None` on overflow.
pub fn padded_depth(k: usize) -> Option<usize> {
    k.checked_add(3).map(|v| v / 4 * 4)
}
