//! The simple RNN cell: `H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb)`.

use super::activation::RecurrentFloat;
use super::step::{clip, Step};
use crate::kernels::gemm;
use crate::OpResult;

/// Advances `h` ([batch, hidden]) one time step; `gates` is [batch, hidden] scratch.
pub(super) fn rnn_step<T: RecurrentFloat>(
    step: &Step<'_, T>,
    h: &mut [T],
    gates: &mut [T],
) -> OpResult<()> {
    let hs = step.hidden;
    let batch = step.rows.len();
    // H_{t-1} R^T: R is [hidden, hidden] row-major, read transposed.
    gemm(
        batch,
        hs,
        hs,
        h,
        (hs as isize, 1),
        step.r,
        (1, hs as isize),
        gates,
        (hs as isize, 1),
        T::one(),
        T::zero(),
        step.threads,
    )?;
    let f = step.activations[0];
    for (b, row) in step.entries() {
        let Some(row) = row else { continue };
        let x = &step.projection[row * hs..(row + 1) * hs];
        let g = &gates[b * hs..(b + 1) * hs];
        for (j, out) in h[b * hs..(b + 1) * hs].iter_mut().enumerate() {
            *out = f.apply(clip(x[j] + g[j], step.clip));
        }
    }
    Ok(())
}
