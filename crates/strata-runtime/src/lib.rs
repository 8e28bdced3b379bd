//! strata-runtime: the graph IR, optimization passes, the static memory planner, and the
//! `InferencePlan` / `ExecutionContext` pair that runs models.
//!
//! ```text
//! Graph --optimize--> specialize(input dims) --plan_memory--> InferencePlan (Arc, immutable)
//!                                                               └─ create_context() → ExecutionContext::execute()
//! ```

pub mod config;
pub mod context;
pub mod control;
pub mod error;
pub mod graph;
pub mod node_eval;
pub mod optimize;
pub mod plan;
pub mod planned;
pub mod planner;
pub mod pool;
pub mod profile;
pub mod specialize;

pub use config::PlanConfig;
pub use context::{ContextStats, ExecutionContext, NodeTiming, OutputView};
pub use error::{NodeError, Result, RuntimeError};
pub use graph::{Graph, Node, NodeId, Value, ValueId, ValueSource};
pub use plan::{InferencePlan, IoInfo};
pub use planner::{MemoryPlan, Slot};
pub use pool::IntraOpPool;
pub use profile::{InputRange, OptimizationProfile};
pub use specialize::Specialization;
