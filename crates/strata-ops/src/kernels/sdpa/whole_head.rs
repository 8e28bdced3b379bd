//! Attention for short sequences, one task per (batch, head): the head's whole `Sq x Sk` score
//! matrix fits in the participant's slot, so `S = scale · Q·Kᵀ` is one product (K packed once
//! per head, where the query-block path packs it once per block), each row's softmax is plain
//! (its maximum is known before any exp, so nothing is rescaled), and `P·V` is a second product
//! that packs V once.

use super::{apply_step, exp_shifted, row_max, write_rows, Sdpa, Shared};
use crate::kernels::error::KernelResult;
use crate::kernels::gemm::gemm;

/// Most query rows a whole-head task takes.
const MAX_Q: usize = 256;
/// Most score elements (`Sq · Sk`) a whole-head task keeps: 256 KiB of f32, well inside L2.
const MAX_SCORES: usize = 256 * 256;

/// Whether heads of `sq` query rows and `sk` keys run whole.
pub(super) fn fits(sq: usize, sk: usize) -> bool {
    sq <= MAX_Q && sq.saturating_mul(sk) <= MAX_SCORES
}

/// Whether `heads` whole-head tasks keep `workers` participants busy: the last round of tasks
/// may leave at most a fifth of the work's time idle; otherwise query blocks split it finer.
pub(super) fn balanced(heads: usize, workers: usize) -> bool {
    let workers = workers.max(1);
    heads.div_ceil(workers) * workers * 4 <= heads * 5
}

/// Fewest query rows a block of a whole-head task takes (a GEMM of fewer rows wastes its tile).
const MIN_Q_BLOCK: usize = 16;

/// Into how many blocks of query rows each head is cut, so that `heads · blocks` tasks keep
/// `workers` busy ([`balanced`]): 1 when the heads alone do (few heads, a single one for
/// single-head attention, would leave workers idle otherwise); `None` when no cut into blocks of
/// at least [`MIN_Q_BLOCK`] rows does.
pub(super) fn blocks_per_head(heads: usize, sq: usize, workers: usize) -> Option<usize> {
    (1..=sq.div_ceil(MIN_Q_BLOCK).max(1)).find(|&n| balanced(heads * n, workers))
}

/// Scratch floats one whole-head task needs: the scores, the unnormalized output rows and the
/// rows' sums.
pub(super) fn slot_len(sq: usize, sk: usize, dv: usize) -> usize {
    sq * sk + sq * dv + sq
}

/// Query rows `q0..q0 + sq` of head (`bi`, `hi`) against all its keys, with `work` of at least
/// [`slot_len`] floats.
#[allow(clippy::too_many_arguments)]
pub(super) fn head(
    p: &Sdpa<'_>,
    bi: usize,
    hi: usize,
    (q0, sq): (usize, usize),
    work: &mut [f32],
    out: Shared,
    out_strides: [usize; 4],
) -> KernelResult<()> {
    let d = p.q.dims[3];
    let [_, _, sk, dv] = p.v.dims;
    let (scores, rest) = work.split_at_mut(sq * sk);
    let (acc, rest) = rest.split_at_mut(sq * dv);
    let sum = &mut rest[..sq];
    let (qs, ks, vs) = (p.q.strides, p.k.strides, p.v.strides);
    // S = scale · Q · Kᵀ: B(i, j) = K[j, i].
    gemm(
        sq,
        sk,
        d,
        &p.q.data[p.q.offset(bi, hi, q0, 0)..],
        (qs[2] as isize, qs[3] as isize),
        &p.k.data[p.k.offset(bi, hi, 0, 0)..],
        (ks[3] as isize, ks[2] as isize),
        scores,
        (sk as isize, 1),
        p.scale,
        0.0,
        1,
    )?;
    for (i, row) in scores.chunks_exact_mut(sk).enumerate() {
        let qi = q0 + i;
        for step in p.steps {
            apply_step(step, row, bi, hi, qi, 0);
        }
        if p.causal {
            row[(qi + 1).min(sk)..].fill(f32::NEG_INFINITY);
        }
        let max = row_max(row);
        // A row of −∞ only: shifting by 0 keeps exp(−∞) = 0 instead of NaN.
        let shift = if max == f32::NEG_INFINITY { 0.0 } else { max };
        sum[i] = exp_shifted(row, shift);
    }
    // acc = P · V.
    gemm(
        sq,
        dv,
        sk,
        scores,
        (sk as isize, 1),
        &p.v.data[p.v.offset(bi, hi, 0, 0)..],
        (vs[2] as isize, vs[3] as isize),
        acc,
        (dv as isize, 1),
        1.0,
        0.0,
        1,
    )?;
    write_rows(p, bi, hi, q0, acc, sum, out, out_strides);
    Ok(())
}
