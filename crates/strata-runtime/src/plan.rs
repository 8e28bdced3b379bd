//! InferencePlan (R1): the immutable, shareable result of building a model — optimized graph,
//! kernels chosen once per node, and (when input dims are known or bounded by a profile) the
//! shape specialization and memory plan every context starts from.

use std::collections::BTreeMap;
use std::sync::Arc;

use strata_core::{BudgetCharge, DType, MemoryBudget, MemoryKind};
use strata_ops::{Dim, Fact, Kernel};

use crate::graph::ValueSource;
use crate::optimize::{optimize, OptimizeReport};
use crate::planned::Planned;
use crate::pool::IntraOpPool;
use crate::specialize::specialize;
use crate::{Graph, MemoryPlan, PlanConfig, Result, RuntimeError, Specialization, ValueId};

/// A runtime input or output as the caller sees it.
#[derive(Debug, Clone)]
pub struct IoInfo {
    pub name: String,
    pub value: ValueId,
    pub dtype: DType,
    /// Declared dims (may be symbolic).
    pub dims: Vec<Dim>,
}

/// An immutable, `Send + Sync` plan, shared by `Arc` among any number of contexts.
#[derive(Debug)]
pub struct InferencePlan {
    graph: Graph,
    config: PlanConfig,
    kernels: Vec<Option<Box<dyn Kernel>>>,
    inputs: Vec<IoInfo>,
    outputs: Vec<IoInfo>,
    base: Option<Arc<Planned>>,
    report: OptimizeReport,
    pool: IntraOpPool,
    /// Charged by every allocation the plan's builds and runs make (see `PlanConfig::memory_limit`).
    budget: Arc<MemoryBudget>,
    /// The weights handed in, charged for the plan's life.
    _weights: BudgetCharge,
}

impl InferencePlan {
    /// Optimizes `graph`, chooses every kernel and, when input dims are known or bounded by the
    /// profile, plans memory.
    pub fn build(mut graph: Graph, config: PlanConfig) -> Result<Arc<InferencePlan>> {
        graph.sort()?;
        if graph.outputs.is_empty() {
            return Err(RuntimeError::NoOutputs);
        }
        // Weights the loader made count in full; what building makes (folded constants, packed
        // weights) is charged as it is allocated.
        let budget = MemoryBudget::new(config.memory_limit);
        let weights = budget.try_charge(
            initializer_bytes(&graph),
            MemoryKind::Persistent,
            config.device,
        )?;
        let budget_for_build = budget.clone();
        budget_for_build.install(|| Self::build_within(graph, config, budget, weights))
    }

    fn build_within(
        mut graph: Graph,
        config: PlanConfig,
        budget: Arc<MemoryBudget>,
        weights: BudgetCharge,
    ) -> Result<Arc<InferencePlan>> {
        let report = if config.optimize {
            optimize(&mut graph, config.threads)?
        } else {
            OptimizeReport::default()
        };

        let inputs: Vec<IoInfo> = graph
            .runtime_inputs()
            .map(|id| {
                let v = graph.value(id);
                IoInfo {
                    name: v.name.clone(),
                    value: id,
                    dtype: v.fact.dtype,
                    dims: v.fact.dims.clone(),
                }
            })
            .collect();
        check_profile(&config, &inputs)?;

        let declared: Vec<Vec<Dim>> = inputs.iter().map(|i| i.dims.clone()).collect();
        let base_dims = base_dims(&config, &inputs);
        let mut base = match &base_dims {
            Some(dims) => Some(Planned::new(&graph, dims, &config, None)?),
            None => None,
        };
        if let Some(base) = &base {
            // Every context allocates this arena: one at least must fit beside the weights.
            budget.check(
                base.memory.arena_bytes,
                MemoryKind::Workspace,
                config.device,
            )?;
        }
        let mut symbolic;
        let facts_spec = match &mut base {
            Some(p) => &mut p.spec,
            None => {
                symbolic = specialize(&graph, &declared, config.threads)?;
                &mut symbolic
            }
        };
        let kernels = select_kernels(&mut graph, facts_spec, &config)?;
        // Packed weights were freed: the plan holds (and is charged for) what is left.
        drop(weights);
        let weights = budget.try_charge(
            initializer_bytes(&graph),
            MemoryKind::Persistent,
            config.device,
        )?;
        let facts_spec = &*facts_spec;
        let outputs = graph
            .outputs
            .iter()
            .map(|&id| {
                let v = graph.value(id);
                let f = &facts_spec.facts[id.0];
                IoInfo {
                    name: v.name.clone(),
                    value: id,
                    dtype: f.dtype,
                    dims: f.dims.clone(),
                }
            })
            .collect();
        let pool = IntraOpPool::for_threads(config.threads)?;
        let base = base.map(Arc::new);
        Ok(Arc::new(InferencePlan {
            graph,
            config,
            kernels,
            inputs,
            outputs,
            base,
            report,
            pool,
            budget,
            _weights: weights,
        }))
    }

    /// The budget this plan's builds and runs are charged to: its limit, and the bytes the
    /// weights, arenas and runs hold now.
    pub fn memory_budget(&self) -> &Arc<MemoryBudget> {
        &self.budget
    }

    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The intra-op pool every context of this plan runs its kernels on.
    pub fn pool(&self) -> &IntraOpPool {
        &self.pool
    }

    pub fn config(&self) -> &PlanConfig {
        &self.config
    }

    pub fn inputs(&self) -> &[IoInfo] {
        &self.inputs
    }

    pub fn outputs(&self) -> &[IoInfo] {
        &self.outputs
    }

    /// The memory plan contexts start from (static dims or the profile's max), if known.
    pub fn memory_plan(&self) -> Option<&MemoryPlan> {
        self.base.as_ref().map(|p| &*p.memory)
    }

    pub fn optimize_report(&self) -> &OptimizeReport {
        &self.report
    }

    pub(crate) fn base(&self) -> Option<&Arc<Planned>> {
        self.base.as_ref()
    }

    pub(crate) fn kernel(&self, node: usize) -> Option<&dyn Kernel> {
        self.kernels[node].as_deref()
    }

    /// Node count per op type, after optimization.
    pub fn op_counts(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for node in &self.graph.nodes {
            *counts.entry(node.op.op_type().to_string()).or_insert(0) += 1;
        }
        counts
    }

    /// Bytes of weights (initializers still in use) per dtype.
    pub fn weight_bytes(&self) -> BTreeMap<DType, usize> {
        let mut bytes = BTreeMap::new();
        for v in &self.graph.values {
            if let ValueSource::Initializer(t) = &v.source {
                *bytes.entry(t.dtype()).or_insert(0) += t.size_in_bytes().unwrap_or(0);
            }
        }
        bytes
    }
}

/// Bytes of the initializers the graph came with (string tensors count as nothing).
fn initializer_bytes(graph: &Graph) -> usize {
    graph
        .values
        .iter()
        .fold(0usize, |total, v| match &v.source {
            ValueSource::Initializer(t) => total.saturating_add(t.size_in_bytes().unwrap_or(0)),
            _ => total,
        })
}

fn check_profile(config: &PlanConfig, inputs: &[IoInfo]) -> Result<()> {
    let Some(profile) = &config.profile else {
        return Ok(());
    };
    for (name, range) in profile.inputs() {
        let input = inputs.iter().find(|i| i.name == name).ok_or_else(|| {
            RuntimeError::Profile(format!(
                "input {name:?} is not a model input ({:?})",
                inputs.iter().map(|i| &i.name).collect::<Vec<_>>()
            ))
        })?;
        if range.max.len() != input.dims.len() {
            return Err(RuntimeError::Profile(format!(
                "input {name:?} has rank {} but the profile gives {}",
                input.dims.len(),
                range.max.len()
            )));
        }
        for (axis, dim) in input.dims.iter().enumerate() {
            if let Dim::Known(d) = dim {
                if !(range.min[axis] <= *d && *d <= range.max[axis]) {
                    return Err(RuntimeError::Profile(format!(
                        "input {name:?} dim {axis} is fixed at {d}, outside the profile range"
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Dims to plan for: the declared ones when fully known, else the profile's max.
fn base_dims(config: &PlanConfig, inputs: &[IoInfo]) -> Option<Vec<Vec<Dim>>> {
    inputs
        .iter()
        .map(|input| {
            if input.dims.iter().all(|d| d.known().is_some()) {
                return Some(input.dims.clone());
            }
            let range = config.profile.as_ref()?.range(&input.name)?;
            Some(range.max.iter().map(|&d| Dim::Known(d)).collect())
        })
        .collect()
}

/// Chooses every node's kernel, in execution order. A weight whose every reader packed it into
/// its own layout (`KernelCapabilities::packed_inputs`) is freed as soon as its last reader is
/// built, so the original and all the packed copies are never resident at once (R1).
fn select_kernels(
    graph: &mut Graph,
    spec: &mut Specialization,
    config: &PlanConfig,
) -> Result<Vec<Option<Box<dyn Kernel>>>> {
    let absent = Fact::absent();
    // Per value: how many input slots read it, and how many of those a kernel packed.
    let mut reads = vec![0usize; graph.values.len()];
    for input in graph.nodes.iter().flat_map(|n| n.inputs.iter().flatten()) {
        reads[input.0] += 1;
    }
    let mut packed = vec![0usize; graph.values.len()];
    let mut kernels = Vec::with_capacity(graph.nodes.len());
    for i in 0..graph.nodes.len() {
        if spec.skip[i] {
            kernels.push(None);
            continue;
        }
        let node = &graph.nodes[i];
        let inputs: Vec<&Fact> = node
            .inputs
            .iter()
            .map(|v| v.map_or(&absent, |id| &spec.facts[id.0]))
            .collect();
        let outputs: Vec<&Fact> = node.outputs.iter().map(|id| &spec.facts[id.0]).collect();
        let kernel = node
            .op
            .kernel(&inputs, &outputs, config.device)
            .map_err(|source| {
                RuntimeError::node(
                    &node.name,
                    node.op.op_type(),
                    inputs.iter().filter_map(|f| f.concrete()).collect(),
                    source,
                )
            })?;
        let slots: Vec<usize> = kernel.capabilities().packed_inputs.to_vec();
        for slot in slots {
            let Some(Some(value)) = graph.nodes[i].inputs.get(slot).copied() else {
                continue;
            };
            packed[value.0] += 1;
            if packed[value.0] == reads[value.0] {
                release_packed(graph, spec, value);
            }
        }
        kernels.push(Some(kernel));
    }
    Ok(kernels)
}

/// Frees a weight every reader has packed: the graph and the specialization keep its type and
/// dims only. Graph outputs and values that are not weights stay as they are.
fn release_packed(graph: &mut Graph, spec: &mut Specialization, value: ValueId) {
    if graph.outputs.contains(&value) {
        return;
    }
    let entry = &mut graph.values[value.0];
    let ValueSource::Initializer(tensor) = &entry.source else {
        return;
    };
    let (dtype, dims) = (tensor.dtype(), tensor.dims().to_vec());
    let fact = Fact::new(dtype, dims.iter().map(|&d| Dim::Known(d)).collect());
    entry.source = ValueSource::Packed { dtype, dims };
    entry.fact = fact.clone();
    spec.facts[value.0] = fact;
}
