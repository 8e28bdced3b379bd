//! Products on 4-bit weights in sliver order ([`Q4Slivers`], `q4_slivers.rs`): `y = x · Wᵀ`.
//!
//! Products ([`q4s_matmul_fused`]): 4 activation rows or more run the f32 GEMM with B produced
//! block by block from this layout ([`gemm::gemm_produced_b`]); fewer rows (decode) run a
//! matrix-vector product that streams each group's steps once for all rows, accumulating 32
//! features per step. Both are exact up to f32 rounding. Integer dots (accuracy level 4) keep
//! the row layout.

use super::q4_slivers::{Q4Slivers, SLIVER, STEP_BYTES};
use super::q4f::{finish_rows, split_rows, PANEL_MIN_ROWS};
use super::Isa;
use crate::kernels::gemm;
use crate::kernels::KernelResult;

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
    let isa = isa.or_portable();
    let (n, k) = (w.rows(), w.cols());
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
        let aligned = |width: usize| block.nr == width && block.j0.is_multiple_of(width);
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
    let (n, k) = (w.rows(), w.cols());
    for c in groups {
        let cols = (n - c * SLIVER).min(SLIVER);
        let mut acc = [[0.0f32; SLIVER]; PANEL_MIN_ROWS];
        for p in 0..k {
            let step = w.step(c, p);
            let prm = w.block_params(c, p / w.block_size());
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
