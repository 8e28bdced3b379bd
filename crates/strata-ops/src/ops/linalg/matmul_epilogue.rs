//! The steps a fused MatMul applies to its output rows as the GEMM finishes them: a bias along
//! the last axis, a residual of the output's shape, activations (GELU included), in the order
//! the graph had them. Tensor-reading steps take the node's inputs 2, 3, … in step order.

use crate::kernels::gemm::{FusedAct, FusedEpilogue};
use crate::kernels::Float;
use crate::EpilogueStep;

/// At most this many steps are fused (bias, activation, residual, activation).
pub(crate) const MAX_STEPS: usize = 4;

/// The fused steps, in order.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Steps {
    steps: [Option<EpilogueStep>; MAX_STEPS],
    len: usize,
}

impl Steps {
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = EpilogueStep> + '_ {
        self.steps[..self.len].iter().flatten().copied()
    }

    /// Tensors the steps read (the node's extra inputs).
    pub(crate) fn operands(&self) -> usize {
        self.iter().filter(|s| s.reads_tensor()).count()
    }

    /// These steps followed by `step`, with the input slot it reads (if it reads one): MatMul's
    /// extra inputs start at 2.
    pub(crate) fn push(&self, step: EpilogueStep) -> Option<(Steps, Option<usize>)> {
        self.push_from(step, 2)
    }

    /// As [`Steps::push`], for an operator whose extra inputs start at slot `first`.
    pub(crate) fn push_from(
        &self,
        step: EpilogueStep,
        first: usize,
    ) -> Option<(Steps, Option<usize>)> {
        if self.len == MAX_STEPS {
            return None;
        }
        let slot = step.reads_tensor().then(|| first + self.operands());
        let mut next = *self;
        next.steps[self.len] = Some(step);
        next.len += 1;
        Some((next, slot))
    }

    /// The steps in the form the GEMM microkernels apply in registers, when they have one: at
    /// most one bias and one residual (in either order: the kernels add the residual first,
    /// which may round the last bit differently), then at most one simple activation.
    /// `operands` as for [`Steps::apply_row`], of an output `n` wide.
    pub(crate) fn fused<'a, T: Float>(
        &self,
        operands: &[&'a [T]],
        n: usize,
    ) -> Option<FusedEpilogue<'a, T>> {
        let mut fused = FusedEpilogue {
            residual: None,
            row_bias: None,
            col_bias: None,
            act: FusedAct::None,
        };
        let (mut next, mut activated) = (0, false);
        for step in self.iter() {
            // Nothing follows an activation.
            if activated {
                return None;
            }
            match step {
                EpilogueStep::Activation(act) => {
                    fused.act = FusedAct::of(act)?;
                    activated = true;
                }
                EpilogueStep::Bias if fused.col_bias.is_none() => {
                    fused.col_bias = Some(*operands.get(next)?);
                    next += 1;
                }
                EpilogueStep::Residual if fused.residual.is_none() => {
                    fused.residual = Some((*operands.get(next)?, n as isize));
                    next += 1;
                }
                _ => return None,
            }
        }
        (!self.is_empty()).then_some(fused)
    }

    /// Applies the steps to `row`, C's elements `(i, j..j + row.len())` of an output `n` wide;
    /// `operands[k]` is the tensor of the k-th tensor-reading step (a bias of `n`, a residual of
    /// the output's size).
    #[inline]
    pub(crate) fn apply_row<T: Float>(
        &self,
        operands: &[&[T]],
        n: usize,
        i: usize,
        j: usize,
        row: &mut [T],
    ) {
        let mut next = 0;
        for step in self.iter() {
            match step {
                EpilogueStep::Activation(act) => act.apply_all(row),
                EpilogueStep::Bias => {
                    let bias = &operands[next][j..j + row.len()];
                    next += 1;
                    row.iter_mut().zip(bias).for_each(|(v, &b)| *v += b);
                }
                EpilogueStep::Residual => {
                    let at = i * n + j;
                    let residual = &operands[next][at..at + row.len()];
                    next += 1;
                    row.iter_mut().zip(residual).for_each(|(v, &r)| *v += r);
                }
            }
        }
    }

    /// Whether operands of these lengths fit an output of `m x n`: a bias of `n`, a residual
    /// of `m * n`.
    pub(crate) fn operands_fit(&self, lens: &[usize], m: usize, n: usize) -> bool {
        let wanted = self.iter().filter_map(|s| match s {
            EpilogueStep::Bias => Some(n),
            EpilogueStep::Residual => Some(m * n),
            EpilogueStep::Activation(_) => None,
        });
        let mut count = 0;
        for (want, &len) in wanted.zip(lens) {
            if want != len {
                return false;
            }
            count += 1;
        }
        count == lens.len() && count == self.operands()
    }
}

/// Reads the fused steps' operands (the node's inputs `$first..`) as contiguous slices:
/// `$slices` (one per tensor-reading step, in order), kept alive by `$guards`.
macro_rules! read_operands {
    ($op:expr, $io:expr, $steps:expr, $first:expr, $t:ty, $guards:ident, $slices:ident) => {
        let count = $steps.operands();
        let mut $guards: [Option<strata_core::ReadGuard<'_, $t>>;
            $crate::ops::linalg::matmul_epilogue::MAX_STEPS] = Default::default();
        for (k, g) in $guards.iter_mut().take(count).enumerate() {
            *g = Some($io.input($first + k).read::<$t>()?);
        }
        let mut $slices: [&[$t]; $crate::ops::linalg::matmul_epilogue::MAX_STEPS] =
            Default::default();
        for (s, g) in $slices.iter_mut().zip(&$guards).take(count) {
            if let Some(g) = g {
                *s = g
                    .as_slice()
                    .ok_or_else(|| OpError::kernel($op, "fused operands must be contiguous"))?;
            }
        }
        let $slices = &$slices[..count];
    };
}
pub(crate) use read_operands;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::Activation;

    #[test]
    fn steps_run_in_order_and_take_slots_in_order() {
        let (s, slot) = Steps::default().push(EpilogueStep::Bias).unwrap();
        assert_eq!(slot, Some(2));
        let (s, slot) = s.push(EpilogueStep::Activation(Activation::Relu)).unwrap();
        assert_eq!(slot, None);
        let (s, slot) = s.push(EpilogueStep::Residual).unwrap();
        assert_eq!(slot, Some(3));
        let (s, _) = s.push(EpilogueStep::Activation(Activation::Tanh)).unwrap();
        assert!(s.push(EpilogueStep::Bias).is_none(), "at most four steps");
        let (from6, slot) = Steps::default()
            .push_from(EpilogueStep::Residual, 6)
            .unwrap();
        assert_eq!(slot, Some(6));
        assert_eq!(from6.push_from(EpilogueStep::Bias, 6).unwrap().1, Some(7));
        assert!(s.operands_fit(&[2, 4], 2, 2));
        assert!(!s.operands_fit(&[4, 4], 2, 2));
        // Row 1 of a 2 x 2 output: relu(v + bias) + residual, then tanh.
        let bias = [1.0f32, -5.0];
        let residual = [0.0f32, 0.0, 0.5, 0.25];
        let mut row = [1.0f32, 2.0];
        s.apply_row(&[&bias, &residual], 2, 1, 0, &mut row);
        let want = [(2.0f32 + 0.5).tanh(), 0.25f32.tanh()];
        for (g, w) in row.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{g} vs {w}");
        }
    }
}
