//! A control-flow body: an imported graph whose inputs get their dtypes and dims from the
//! node that runs it. It is planned as its own `InferencePlan` (own arena, own kernels, every
//! shape static) per input signature on first use, and run through a pool of execution
//! contexts, so concurrent requests never share one and repeated runs reuse their arenas.

use std::sync::{Arc, Mutex};

use strata_core::{DType, Tensor};
use strata_ops::{Dim, Fact, OpError, OpResult};

use crate::graph::ValueSource;
use crate::specialize::specialize;
use crate::{ExecutionContext, Graph, InferencePlan, PlanConfig};

/// A subgraph as imported: formal inputs first, then the outer values it captures.
#[derive(Debug, Clone)]
pub struct Subgraph {
    /// The attribute it came from (`then_branch`, `body`, …), for messages.
    pub name: String,
    graph: Graph,
    /// Output types the model declares, used when inference cannot see through the body
    /// before it runs (outer dims unknown).
    declared: Vec<Option<Fact>>,
}

impl Subgraph {
    /// Wraps `graph`, whose inputs the running node binds by position.
    pub fn new(name: &str, graph: Graph) -> Self {
        Subgraph {
            name: name.to_string(),
            graph,
            declared: Vec::new(),
        }
    }

    /// Records the output types the model declares (one per output, `None` where absent).
    pub fn with_declared_outputs(mut self, declared: Vec<Option<Fact>>) -> Self {
        self.declared = declared;
        self
    }

    pub fn num_inputs(&self) -> usize {
        self.graph.inputs.len()
    }

    pub fn num_outputs(&self) -> usize {
        self.graph.outputs.len()
    }

    /// The graph with its inputs declared as `inputs` (dtype and dims).
    fn bound(&self, op: &str, inputs: &[Fact]) -> OpResult<Graph> {
        if inputs.len() != self.graph.inputs.len() {
            return Err(OpError::shape(
                op,
                format!(
                    "subgraph {:?} takes {} inputs, the node gives {}",
                    self.name,
                    self.graph.inputs.len(),
                    inputs.len()
                ),
            ));
        }
        let mut graph = self.graph.clone();
        for (&id, fact) in self.graph.inputs.iter().zip(inputs) {
            let value = &mut graph.values[id.0];
            match &fact.value {
                // A constant outer value folds into the body like a weight.
                Some(t) => {
                    value.fact = Fact::constant(t.clone());
                    value.source = ValueSource::Initializer(t.clone());
                }
                None => value.fact = Fact::new(fact.dtype, fact.dims.clone()),
            }
        }
        Ok(graph)
    }

    /// Output facts for these input facts (dims as far as they can be known).
    pub fn infer(&self, op: &str, inputs: &[Fact]) -> OpResult<Vec<Fact>> {
        let graph = self.bound(op, inputs)?;
        let dims: Vec<Vec<Dim>> = graph
            .runtime_inputs()
            .map(|id| graph.values[id.0].fact.dims.clone())
            .collect();
        let spec = match specialize(&graph, &dims, 1) {
            Ok(spec) => spec,
            Err(e) => {
                let declared: Option<Vec<Fact>> = (self.declared.len() == self.num_outputs())
                    .then(|| self.declared.iter().cloned().collect())
                    .flatten();
                return declared.ok_or_else(|| self.error(op, e));
            }
        };
        Ok(graph
            .outputs
            .iter()
            .map(|id| {
                let f = &spec.facts[id.0];
                Fact::new(f.dtype, f.dims.clone())
            })
            .collect())
    }

    /// A runner for this subgraph: plans are made per input signature on first use.
    pub fn runner(&self) -> SubgraphRunner {
        SubgraphRunner {
            subgraph: self.clone(),
            plans: Mutex::new(Vec::new()),
        }
    }

    /// Plans the subgraph for inputs of exactly these dtypes and dims: every shape in it is
    /// then static, and the plan has its own arena.
    fn plan_for(
        &self,
        op: &str,
        inputs: &[&Tensor],
        threads: usize,
    ) -> OpResult<Arc<InferencePlan>> {
        let facts: Vec<Fact> = inputs
            .iter()
            .map(|t| Fact::new(t.dtype(), t.dims().iter().map(|&d| Dim::Known(d)).collect()))
            .collect();
        let graph = self.bound(op, &facts)?;
        let config = PlanConfig::default().with_threads(threads);
        InferencePlan::build(graph, config).map_err(|e| self.error(op, e))
    }

    fn error(&self, op: &str, e: crate::RuntimeError) -> OpError {
        OpError::Subgraph {
            op: op.to_string(),
            graph: self.name.clone(),
            source: Box::new(e),
        }
    }
}

/// Input dtypes and dims a plan was made for.
type Signature = Vec<(DType, Vec<usize>)>;

/// One plan with the contexts not in use right now.
struct PlanEntry {
    signature: Signature,
    plan: Arc<InferencePlan>,
    idle: Vec<ExecutionContext>,
}

/// Plans kept per runner; a loop whose values change shape every iteration evicts the oldest.
const MAX_PLANS: usize = 16;

/// A subgraph with its plans (one per input signature seen) and their idle contexts, so that
/// concurrent runs never share a context and repeated runs reuse arenas.
pub struct SubgraphRunner {
    subgraph: Subgraph,
    plans: Mutex<Vec<PlanEntry>>,
}

impl std::fmt::Debug for SubgraphRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubgraphRunner")
            .field("subgraph", &self.subgraph.name)
            .finish()
    }
}

impl SubgraphRunner {
    /// Runs the subgraph once with the outer node's intra-op `threads` (a plan made on first
    /// use keeps them); outputs are copied out of the context's arena.
    pub fn run(&self, op: &str, inputs: &[&Tensor], threads: usize) -> OpResult<Vec<Tensor>> {
        let wrap = |e: crate::RuntimeError| self.subgraph.error(op, e);
        let signature: Signature = inputs
            .iter()
            .map(|t| (t.dtype(), t.dims().to_vec()))
            .collect();
        let found = {
            let mut plans = self.plans.lock().unwrap_or_else(|p| p.into_inner());
            plans
                .iter_mut()
                .find(|e| e.signature == signature)
                .map(|e| (e.plan.clone(), e.idle.pop()))
        };
        let (plan, ctx) = match found {
            Some(found) => found,
            None => (self.subgraph.plan_for(op, inputs, threads)?, None),
        };
        let mut ctx = match ctx {
            Some(ctx) => ctx,
            None => plan.create_context().map_err(wrap)?,
        };
        for (i, t) in inputs.iter().enumerate() {
            ctx.set_input_at(i, t).map_err(wrap)?;
        }
        ctx.execute().map_err(wrap)?;
        let outputs = ctx
            .outputs()
            .and_then(|views| views.iter().map(|v| v.to_tensor()).collect())
            .map_err(wrap)?;
        let mut plans = self.plans.lock().unwrap_or_else(|p| p.into_inner());
        match plans.iter_mut().find(|e| e.signature == signature) {
            Some(entry) => entry.idle.push(ctx),
            None => {
                if plans.len() == MAX_PLANS {
                    plans.remove(0);
                }
                plans.push(PlanEntry {
                    signature,
                    plan,
                    idle: vec![ctx],
                });
            }
        }
        Ok(outputs)
    }
}
