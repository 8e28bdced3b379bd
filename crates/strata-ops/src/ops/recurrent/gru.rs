//! The GRU cell (gates z, r, h stacked in that order):
//! `z = f(X Wz + H Rz + b)`, `r = f(X Wr + H Rr + b)`,
//! `h~ = g(X Wh + (r ⊙ H) Rh + Rbh + Wbh)`, or with `linear_before_reset`
//! `h~ = g(X Wh + r ⊙ (H Rh + Rbh) + Wbh)`; then `H' = (1 - z) ⊙ h~ + z ⊙ H`.

use super::activation::RecurrentFloat;
use super::step::{clip, Step};
use crate::kernels::gemm;
use crate::OpResult;

/// Advances `h` ([batch, hidden]) one time step. `gates` is [batch, 3 * hidden] scratch and
/// `reset_h` [batch, hidden] scratch for `r ⊙ H`.
pub(super) fn gru_step<T: RecurrentFloat>(
    step: &Step<'_, T>,
    linear_before_reset: bool,
    h: &mut [T],
    gates: &mut [T],
    reset_h: &mut [T],
) -> OpResult<()> {
    let hs = step.hidden;
    let batch = step.rows.len();
    let width = 3 * hs;
    // With linear_before_reset all three blocks multiply H; otherwise only z and r do here.
    let blocks = if linear_before_reset { 3 } else { 2 };
    gemm(
        batch,
        blocks * hs,
        hs,
        h,
        (hs as isize, 1),
        step.r,
        (1, hs as isize),
        gates,
        (width as isize, 1),
        T::one(),
        T::zero(),
        step.threads,
    )?;
    let (f, g) = (step.activations[0], step.activations[1]);
    for (b, row) in step.entries() {
        let gate = &mut gates[b * width..(b + 1) * width];
        let Some(row) = row else {
            reset_h[b * hs..(b + 1) * hs].fill(T::zero());
            continue;
        };
        let x = &step.projection[row * width..(row + 1) * width];
        for j in 0..2 * hs {
            gate[j] = f.apply(clip(x[j] + gate[j], step.clip));
        }
        for j in 0..hs {
            reset_h[b * hs + j] = gate[hs + j] * h[b * hs + j];
        }
    }
    if !linear_before_reset {
        // (r ⊙ H) Rh^T into the h block of the gates.
        gemm(
            batch,
            hs,
            hs,
            reset_h,
            (hs as isize, 1),
            &step.r[2 * hs * hs..],
            (1, hs as isize),
            &mut gates[2 * hs..],
            (width as isize, 1),
            T::one(),
            T::zero(),
            step.threads,
        )?;
    }
    for (b, row) in step.entries() {
        let Some(row) = row else { continue };
        let x = &step.projection[row * width..(row + 1) * width];
        let gate = &gates[b * width..(b + 1) * width];
        for j in 0..hs {
            let (z, r, hh) = (gate[j], gate[hs + j], gate[2 * hs + j]);
            let pre = if linear_before_reset {
                x[2 * hs + j] + r * (hh + step.recurrent_bias[j])
            } else {
                x[2 * hs + j] + hh
            };
            let candidate = g.apply(clip(pre, step.clip));
            let prev = &mut h[b * hs + j];
            *prev = (T::one() - z) * candidate + z * *prev;
        }
    }
    Ok(())
}
