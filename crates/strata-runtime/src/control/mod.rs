//! Control flow (If, Loop, Scan): operators whose bodies are subgraphs run by this runtime,
//! each planned once as its own `InferencePlan` with its own arena.
//!
//! The importer turns every subgraph into a [`Subgraph`] whose inputs are its formal inputs
//! followed by the outer values it reads (captures); the node lists those captures as extra
//! inputs, so the outer plan sees every dependency and keeps the values alive.

mod if_op;
mod loop_op;
mod node_io;
mod scan_op;
mod stack;
mod subgraph;

pub use if_op::If;
pub use loop_op::Loop;
pub use scan_op::Scan;
pub use subgraph::{Subgraph, SubgraphRunner};
