//! Recurrent operators: RNN, GRU, LSTM.

mod activation;
mod gru;
mod lstm;
mod op;
mod rnn;
mod sequence;

pub use op::Recurrent;

use crate::Constructor;

/// The family's operators, registered in `registry::ONNX_FAMILIES`.
pub const OPS: &[(&str, Constructor)] = &[
    ("RNN", Recurrent::build_rnn),
    ("GRU", Recurrent::build_gru),
    ("LSTM", Recurrent::build_lstm),
];
