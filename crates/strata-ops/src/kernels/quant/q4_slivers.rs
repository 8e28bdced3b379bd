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
//! Products ([`q4s_matmul_fused`]): 4 activation rows or more run the f32 GEMM with B produced
//! block by block from this layout ([`gemm::gemm_produced_b`]); fewer rows (decode) run a
//! matrix-vector product that streams each group's steps once for all rows, accumulating 32
//! features per step. Both are exact up to f32 rounding. Integer dots (accuracy level 4) keep
//! the row layout.

use super::error_at;
use super::q4f::{finish_rows, split_rows, PANEL_MIN_ROWS};
use super::Isa;
use crate::kernels::gemm;
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
    fn value(&self, j: usize, p: usize) -> f32 {
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

/// `y = x · Wᵀ` (`x` `m × k`, `y` `m × n`, row-major), then `epilogue(i, j, row)` on every piece
/// of Y's rows, on up to `threads` threads of the current intra-op pool.
pub fn q4s_matmul_fused(
    w: &Q4Slivers<'_>,
    x: &[f32],
    m: usize,
    y: &mut [f32],
    threads: usize,
    epilogue: Option<&gemm::Epilogue<'_, f32>>,
) -> KernelResult<()> {
    q4s_matmul_with(Isa::detect(), w, x, m, y, threads, epilogue)
}

/// [`q4s_matmul_fused`] on a chosen ISA (the portable one when it is not available), for tests.
pub fn q4s_matmul_with(
    isa: Isa,
    w: &Q4Slivers<'_>,
    x: &[f32],
    m: usize,
    y: &mut [f32],
    threads: usize,
    epilogue: Option<&gemm::Epilogue<'_, f32>>,
) -> KernelResult<()> {
    let isa = if isa.is_available() {
        isa
    } else {
        Isa::Portable
    };
    let (n, k) = (w.n, w.k);
    super::check_len("x", m.saturating_mul(k), x.len())?;
    super::check_len("y", m.saturating_mul(n), y.len())?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        y.fill(0.0);
        finish_rows(y, n, epilogue);
        return Ok(());
    }
    if m >= PANEL_MIN_ROWS {
        let fill = |block: gemm::BBlock, dst: &mut [f32]| fill_block(isa, w, block, dst);
        return gemm::gemm_produced_b(
            m,
            n,
            k,
            x,
            (k as isize, 1),
            y,
            (n as isize, 1),
            // Any depth block will do: the fills look up each step's block.
            gemm::ProduceB {
                align: 1,
                fill: &fill,
            },
            epilogue,
            threads,
        );
    }
    let out = super::OutPtr(y.as_mut_ptr());
    split_rows(n, k, threads, (SLIVER, 1), |j0, j1| {
        // SAFETY: groups j0 / 32 .. ceil(j1 / 32) cover columns j0..j1 of Y only (j0 is a
        // multiple of 32), which belong to this task; x and y lengths were checked.
        unsafe { gemv(isa, w, x, m, out, j0 / SLIVER..j1.div_ceil(SLIVER)) }
    });
    finish_rows(y, n, epilogue);
    Ok(())
}

/// Writes `block` of B (`B = Wᵀ`, so B's column `j` is W's row `j`) into `dst` in the GEMM's
/// packed layout (slivers of `block.nr` columns, zero past the last column).
pub fn fill_block(isa: Isa, w: &Q4Slivers<'_>, block: gemm::BBlock, dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        let aligned = |width: usize| block.nr == width && block.j0 % width == 0;
        if isa == Isa::Avx512 && aligned(SLIVER) {
            // SAFETY: AVX-512 was detected (`isa` is available); the block lies inside W
            // (the GEMM's contract) and `dst` holds `block.elements()` values.
            return unsafe { super::q4_slivers_avx512::fill_block(w, block, dst) };
        }
        if isa.has_avx2() && (aligned(SLIVER) || aligned(SLIVER / 2)) {
            // SAFETY: as above, with AVX2 and FMA.
            return unsafe { super::q4_slivers_avx2::fill_block(w, block, dst) };
        }
    }
    let _ = isa;
    fill_block_portable(w, block, dst)
}

/// [`fill_block`] element by element, for any sliver width and column offset.
pub(super) fn fill_block_portable(w: &Q4Slivers<'_>, block: gemm::BBlock, dst: &mut [f32]) {
    let (kc, nr) = (block.kc, block.nr);
    for (s, sliver) in dst[..block.elements()]
        .chunks_exact_mut(kc * nr)
        .enumerate()
    {
        let j = block.j0 + s * nr;
        let cols = (block.j0 + block.cols - j).min(nr);
        for (p, row) in sliver.chunks_exact_mut(nr).enumerate() {
            for (l, v) in row.iter_mut().enumerate() {
                *v = if l < cols {
                    w.value(j + l, block.p0 + p)
                } else {
                    0.0
                };
            }
        }
    }
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

/// `y[i][32c..32c + 32] = x[i] · W[32c..]ᵀ` for each group `c` in `groups` and each of the
/// `m` activation rows.
///
/// # Safety
/// `x` holds `m × k` values, `y` points at `m × n` values of which this call owns the columns
/// of `groups`.
unsafe fn gemv(
    isa: Isa,
    w: &Q4Slivers<'_>,
    x: &[f32],
    m: usize,
    y: super::OutPtr,
    groups: std::ops::Range<usize>,
) {
    #[cfg(target_arch = "x86_64")]
    {
        if isa == Isa::Avx512 {
            // SAFETY: AVX-512 was detected; the caller's contract.
            return unsafe { super::q4_slivers_avx512::gemv(w, x, m, y, groups) };
        }
        if isa.has_avx2() {
            // SAFETY: AVX2 and FMA were detected; the caller's contract.
            return unsafe { super::q4_slivers_avx2::gemv(w, x, m, y, groups) };
        }
    }
    let _ = isa;
    let (n, k) = (w.n, w.k);
    for c in groups {
        let cols = (n - c * SLIVER).min(SLIVER);
        let mut acc = [[0.0f32; SLIVER]; PANEL_MIN_ROWS];
        for p in 0..k {
            let step = w.step(c, p);
            let prm = w.block_params(c, p / w.block_size);
            for (i, acc) in acc.iter_mut().enumerate().take(m) {
                let xv = x[i * k + p];
                for (l, a) in acc.iter_mut().enumerate() {
                    let q = (step[l % STEP_BYTES] >> (4 * (l / STEP_BYTES))) & 0x0F;
                    let wv = f32::from(q).mul_add(prm[l], prm[SLIVER + l]);
                    *a = wv.mul_add(xv, *a);
                }
            }
        }
        for (i, acc) in acc.iter().enumerate().take(m) {
            for (l, &a) in acc.iter().enumerate().take(cols) {
                // SAFETY: (i, 32c + l) is inside Y and its column belongs to this call.
                unsafe { y.write(i * n + c * SLIVER + l, a) };
            }
        }
    }
}
