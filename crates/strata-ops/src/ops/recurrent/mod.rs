//! Recurrent operators: RNN, GRU, LSTM.

mod activation;
mod gru;
mod lstm;
mod recurrent_op;
mod rnn;
mod sequence;

pub use recurrent_op::Recurrent;

use crate::OpTable;

/// The family's operators, read by the registry.
pub const OPS: &[OpTable] = &[&[
    ("RNN", Recurrent::build_rnn),
    ("GRU", Recurrent::build_gru),
    ("LSTM", Recurrent::build_lstm),
]];
