//! What an RNN, GRU or LSTM node is once its attributes are validated: its cell, direction and
//! settings. The operator (`recurrent_op.rs`) builds it and the kernel (`sequence.rs`) runs it.

use crate::ops::recurrent::activation::Activation;

/// Which recurrent cell the operator runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cell {
    Rnn,
    Gru { linear_before_reset: bool },
    Lstm { input_forget: bool },
}

impl Cell {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Cell::Rnn => "RNN",
            Cell::Gru { .. } => "GRU",
            Cell::Lstm { .. } => "LSTM",
        }
    }

    /// Gate blocks stacked in W, R and each half of B (RNN 1, GRU z/r/h, LSTM i/o/f/c).
    pub(crate) fn gates(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru { .. } => 3,
            Cell::Lstm { .. } => 4,
        }
    }

    /// The activations each direction uses, with the defaults of the ONNX spec.
    pub(super) fn default_activations(self) -> &'static [&'static str] {
        match self {
            Cell::Rnn => &["Tanh"],
            Cell::Gru { .. } => &["Sigmoid", "Tanh"],
            Cell::Lstm { .. } => &["Sigmoid", "Tanh", "Tanh"],
        }
    }

    pub(super) fn num_outputs(self) -> usize {
        match self {
            Cell::Lstm { .. } => 3,
            _ => 2,
        }
    }
}

/// The `direction` attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    Forward,
    Reverse,
    Bidirectional,
}

impl Direction {
    pub(crate) fn count(self) -> usize {
        match self {
            Direction::Bidirectional => 2,
            _ => 1,
        }
    }

    /// Whether direction index `d` runs backwards in time.
    pub(crate) fn is_reverse(self, d: usize) -> bool {
        matches!(
            (self, d),
            (Direction::Reverse, _) | (Direction::Bidirectional, 1)
        )
    }
}

/// An RNN, GRU or LSTM node with its validated attributes.
#[derive(Debug, Clone)]
pub struct Recurrent {
    pub(crate) cell: Cell,
    pub(crate) direction: Direction,
    pub(crate) hidden_size: Option<usize>,
    /// `cell`'s activations for every direction, direction-major.
    pub(crate) activations: Vec<Activation>,
    pub(crate) clip: Option<f32>,
    /// `layout = 1`: X, Y, the initial and final states have batch as their first axis.
    pub(crate) batch_major: bool,
}
