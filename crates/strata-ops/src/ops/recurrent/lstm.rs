//! The LSTM cell (gates i, o, f, c stacked in that order; peepholes P = [Pi, Po, Pf]):
//! `i = f(X Wi + H Ri + Pi ⊙ C + b)`, `f = f(X Wf + H Rf + Pf ⊙ C + b)` (or `1 - i` with
//! `input_forget`), `c~ = g(X Wc + H Rc + b)`, `C' = f ⊙ C + i ⊙ c~`,
//! `o = f(X Wo + H Ro + Po ⊙ C' + b)`, `H' = o ⊙ h(C')`.

use super::activation::RecurrentFloat;
use super::step::{clip, Step};
use crate::kernels::gemm;
use crate::OpResult;

/// Advances `h` and `c` ([batch, hidden] each) one time step; `gates` is [batch, 4 * hidden]
/// scratch; `peepholes` is [3 * hidden] (zeros when the node has none).
pub(super) fn lstm_step<T: RecurrentFloat>(
    step: &Step<'_, T>,
    input_forget: bool,
    peepholes: &[T],
    h: &mut [T],
    c: &mut [T],
    gates: &mut [T],
) -> OpResult<()> {
    let hs = step.hidden;
    let batch = step.rows.len();
    let width = 4 * hs;
    gemm(
        batch,
        width,
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
    let (f, g, act_h) = (
        step.activations[0],
        step.activations[1],
        step.activations[2],
    );
    let (pi, po, pf) = (
        &peepholes[..hs],
        &peepholes[hs..2 * hs],
        &peepholes[2 * hs..3 * hs],
    );
    for (b, row) in step.entries() {
        let Some(row) = row else { continue };
        let x = &step.projection[row * width..(row + 1) * width];
        let gate = &gates[b * width..(b + 1) * width];
        let pre = |block: usize, j: usize| x[block * hs + j] + gate[block * hs + j];
        for j in 0..hs {
            let c_prev = c[b * hs + j];
            let input = f.apply(clip(pre(0, j) + pi[j] * c_prev, step.clip));
            let forget = if input_forget {
                T::one() - input
            } else {
                f.apply(clip(pre(2, j) + pf[j] * c_prev, step.clip))
            };
            let candidate = g.apply(clip(pre(3, j), step.clip));
            let cell = forget * c_prev + input * candidate;
            let output = f.apply(clip(pre(1, j) + po[j] * cell, step.clip));
            c[b * hs + j] = cell;
            h[b * hs + j] = output * act_h.apply(cell);
        }
    }
    Ok(())
}
