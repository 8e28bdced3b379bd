//! Recurrent operators: RNN, GRU, LSTM.

mod activation;
mod gru;
mod lstm;
mod node;
mod recurrent_op;
mod rnn;
mod sequence;
mod step;

pub use node::Recurrent;

use crate::OpTable;

/// The family's operators, read by the registry.
pub const OPS: &[OpTable] = &[&[
    ("RNN", Recurrent::build_rnn),
    ("GRU", Recurrent::build_gru),
    ("LSTM", Recurrent::build_lstm),
]];
