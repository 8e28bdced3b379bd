//! One time step of one direction, as the cells (`rnn.rs`, `gru.rs`, `lstm.rs`) see it: the
//! rows of the input projection, R, the activations and `clip`.

use super::activation::{Activation, RecurrentFloat};

/// Index of a batch entry whose sequence has ended (in `Step::rows`).
pub(super) const ENDED: usize = usize::MAX;

/// What a cell needs for one time step of one direction.
pub(super) struct Step<'a, T> {
    pub hidden: usize,
    /// Per batch entry: its row of `projection` at this step, [`ENDED`] once its sequence ended.
    pub rows: &'a [usize],
    /// `X W^T + Wb (+ Rb)` for every (time, batch) row: [seq * batch, gates * hidden].
    pub projection: &'a [T],
    /// This direction's R: [gates * hidden, hidden].
    pub r: &'a [T],
    /// GRU with `linear_before_reset`: Rb of the h gate ([hidden]); empty otherwise.
    pub recurrent_bias: &'a [T],
    pub activations: &'a [Activation],
    pub clip: Option<T>,
    pub threads: usize,
}

impl<T> Step<'_, T> {
    /// Per batch entry: its index and its projection row, `None` once its sequence ended.
    pub fn entries(&self) -> impl Iterator<Item = (usize, Option<usize>)> + '_ {
        self.rows
            .iter()
            .enumerate()
            .map(|(b, &row)| (b, (row != ENDED).then_some(row)))
    }
}

/// Clamps a gate's pre-activation to `[-clip, clip]` when the node sets `clip`.
#[inline]
pub(super) fn clip<T: RecurrentFloat>(x: T, clip: Option<T>) -> T {
    match clip {
        Some(c) => num_traits::Float::min(num_traits::Float::max(x, -c), c),
        None => x,
    }
}
