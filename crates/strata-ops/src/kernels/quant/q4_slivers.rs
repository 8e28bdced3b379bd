//! 4-bit weights in the f32 GEMM's sliver order: the layout MatMulNBits repacks its constant
//! 4-bit (and 2-bit) weights into at plan time for the f32 product (onnxruntime's accuracy
//! levels 0–3), in place of [`super::Q4Weights`]' row layout. `y = x · Wᵀ` for `W` of `n` rows
//! (output features) of `k` inputs, quantized in blocks of `block_size` (a power of two from 16)
//! along `k`: element value `(q - zero) · scale`.
//!
//! Layout ([`Q4Slivers`]): the features in groups of [`SLIVER`] = 32 (the last zero-padded);
//! - `qs`: per group, per step `p` of `k`, 16 bytes: byte `t` holds feature `t`'s nibble in
//!   its low half and feature `t + 16`'s in its high half, so one 16-byte load and a shift
//!   give the 32 features of a step side by side, which is one row of a packed B sliver of the
//!   GEMM (32 columns per step on AVX-512; half of one on AVX2);
//! - `params`: per group, per block, 32 scales then 32 offsets `-zero · scale` (0 for padded
//!   features), so dequantizing a step is one multiply-add per 16 features with two vectors
//!   loaded once per block.
//!
//! Filling a packed B sliver row is then one load, an unpack, a convert and a multiply-add per
//! vector, with no transpose and no per-row parameter lookups (the row layout dequantized 32
//! weight rows and transposed them). The layout costs 8 bytes of parameters per block and
//! feature (the row layout 4 and a zero byte): 6 bits per weight at blocks of 32, against 4.6.
//!
//! The products on this layout are in `q4_slivers_product.rs`; integer dots (accuracy level 4)
//! keep the row layout.

use super::error_at;
use crate::kernels::KernelResult;

/// Output features per group of the layout: the AVX-512 f32 GEMM's sliver width.
pub const SLIVER: usize = 32;

/// Bytes of one step of one group (32 nibbles).
pub const STEP_BYTES: usize = SLIVER / 2;

/// f32 parameters per (group, block): 32 scales, then 32 offsets.
pub const BLOCK_PARAMS: usize = 2 * SLIVER;

/// A 4-bit weight matrix in sliver order (see the module docs), borrowed.
#[derive(Clone, Copy, Debug)]
pub struct Q4Slivers<'a> {
    n: usize,
    k: usize,
    block_size: usize,
    n_blocks: usize,
    qs: &'a [u8],
    params: &'a [f32],
}

impl<'a> Q4Slivers<'a> {
    /// Bytes of the nibbles of an `n × k` matrix.
    pub fn qs_len(n: usize, k: usize) -> usize {
        n.div_ceil(SLIVER) * k * STEP_BYTES
    }

    /// f32 values of the parameters of an `n × k` matrix in blocks of `block_size`.
    pub fn params_len(n: usize, k: usize, block_size: usize) -> usize {
        n.div_ceil(SLIVER) * k.div_ceil(block_size.max(1)) * BLOCK_PARAMS
    }

    /// Checks the sizes: `block_size` a power of two of at least 16, `qs` of
    /// [`Q4Slivers::qs_len`] bytes, `params` of [`Q4Slivers::params_len`] values.
    pub fn new(
        n: usize,
        k: usize,
        block_size: usize,
        qs: &'a [u8],
        params: &'a [f32],
    ) -> KernelResult<Self> {
        check_block_size(block_size)?;
        let lens = [
            ("nibbles", qs.len(), Self::qs_len(n, k)),
            (
                "parameters",
                params.len(),
                Self::params_len(n, k, block_size),
            ),
        ];
        for (what, got, want) in lens {
            if got != want {
                return Err(error_at(
                    what,
                    format!("{got} values for n {n} k {k} block {block_size}, need {want}"),
                ));
            }
        }
        Ok(Q4Slivers {
            n,
            k,
            block_size,
            n_blocks: k.div_ceil(block_size),
            qs,
            params,
        })
    }

    pub fn rows(&self) -> usize {
        self.n
    }

    pub fn cols(&self) -> usize {
        self.k
    }

    /// The 16 bytes of step `p` of group `c`.
    #[inline(always)]
    pub(super) fn step(&self, c: usize, p: usize) -> &'a [u8] {
        &self.qs[(c * self.k + p) * STEP_BYTES..][..STEP_BYTES]
    }

    /// The scales and offsets of block `b` of group `c` (64 values).
    #[inline(always)]
    pub(super) fn block_params(&self, c: usize, b: usize) -> &'a [f32] {
        &self.params[(c * self.n_blocks + b) * BLOCK_PARAMS..][..BLOCK_PARAMS]
    }

    pub(super) fn block_size(&self) -> usize {
        self.block_size
    }

    /// Element `p` of row `j`.
    #[inline(always)]
    pub(super) fn value(&self, j: usize, p: usize) -> f32 {
        let (c, l) = (j / SLIVER, j % SLIVER);
        let q = (self.step(c, p)[l % STEP_BYTES] >> (4 * (l / STEP_BYTES))) & 0x0F;
        let prm = self.block_params(c, p / self.block_size);
        f32::from(q).mul_add(prm[l], prm[SLIVER + l])
    }

    /// Row `j` dequantized into `out` (`k` values), for tests.
    pub fn dequantize_row(&self, j: usize, out: &mut [f32]) {
        for (p, o) in out.iter_mut().enumerate().take(self.k) {
            *o = self.value(j, p);
        }
    }
}

fn check_block_size(block_size: usize) -> KernelResult<()> {
    if block_size < 16 || !block_size.is_power_of_two() {
        return Err(error_at(
            "block size",
            format!("{block_size} is not a power of two of at least 16"),
        ));
    }
    Ok(())
}

/// Writes an `n × k` matrix into the layout: `q(j, p)` the 4-bit value (0..=15) of element `p`
/// of row `j`, `param(j, b)` the (scale, zero point) of block `b` of row `j`. `qs` and `params`
/// have the lengths [`Q4Slivers::qs_len`] and [`Q4Slivers::params_len`] give.
pub fn pack_slivers(
    (n, k, block_size): (usize, usize, usize),
    q: impl Fn(usize, usize) -> u8,
    param: impl Fn(usize, usize) -> (f32, f32),
    qs: &mut [u8],
    params: &mut [f32],
) -> KernelResult<()> {
    check_block_size(block_size)?;
    let n_blocks = k.div_ceil(block_size);
    if qs.len() != Q4Slivers::qs_len(n, k)
        || params.len() != Q4Slivers::params_len(n, k, block_size)
    {
        return Err(error_at(
            "layout",
            format!(
                "buffers of {} and {} for n {n} k {k}",
                qs.len(),
                params.len()
            ),
        ));
    }
    qs.fill(0);
    params.fill(0.0);
    for j in 0..n {
        let (c, l) = (j / SLIVER, j % SLIVER);
        let (byte, shift) = (l % STEP_BYTES, 4 * (l / STEP_BYTES));
        let steps = &mut qs[c * k * STEP_BYTES..(c + 1) * k * STEP_BYTES];
        for (p, step) in steps.chunks_exact_mut(STEP_BYTES).enumerate() {
            step[byte] |= (q(j, p) & 0x0F) << shift;
        }
        for b in 0..n_blocks {
            let (scale, zero) = param(j, b);
            let prm = &mut params[(c * n_blocks + b) * BLOCK_PARAMS..][..BLOCK_PARAMS];
            prm[l] = scale;
            prm[SLIVER + l] = -zero * scale;
        }
    }
    Ok(())
}

/// The scales and offsets of block `b` of group `c`, zero outside features
/// `first..first + cols` of the group, so a sliver's lanes past its last column dequantize to
/// exactly 0.
#[inline(always)]
pub(super) fn masked_params(
    w: &Q4Slivers<'_>,
    (c, b): (usize, usize),
    first: usize,
    cols: usize,
) -> [f32; BLOCK_PARAMS] {
    let prm = w.block_params(c, b);
    std::array::from_fn(|i| {
        if (first..first + cols).contains(&(i % SLIVER)) {
            prm[i]
        } else {
            0.0
        }
    })
}
