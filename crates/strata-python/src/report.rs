//! strata's own figures as Python dicts: the memory plan, bytes by memory kind, and timings per
//! operator (what `strata inspect` and `strata bench --profile` print).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use strata_core::{AllocatorRegistry, Tensor};
use strata_runtime::{InferencePlan, MemoryPlan, RuntimeError};

use crate::pool::ContextPool;

/// Arena, lower bound and no-reuse sum of the plan contexts start from (or, for a model whose
/// dims were only known at the first run, of the last context used), weight bytes by dtype and
/// the process's bytes in use by memory kind.
pub fn memory_plan<'py>(py: Python<'py>, pool: &ContextPool) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    let plan = pool.plan();
    let write_plan = |memory: Option<&MemoryPlan>| -> PyResult<()> {
        dict.set_item("planned", memory.is_some())?;
        dict.set_item("arena_bytes", memory.map(|m| m.arena_bytes))?;
        dict.set_item("lower_bound_bytes", memory.map(|m| m.lower_bound_bytes))?;
        dict.set_item("no_reuse_bytes", memory.map(|m| m.no_reuse_bytes))?;
        dict.set_item("alignment", memory.map(|m| m.alignment))?;
        dict.set_item(
            "in_place_nodes",
            memory.map(|m| m.in_place.iter().filter(|x| x.is_some()).count()),
        )?;
        Ok(())
    };
    match plan.memory_plan() {
        Some(memory) => write_plan(Some(memory))?,
        None => pool
            .with_idle(|contexts| write_plan(contexts.last().and_then(|ctx| ctx.memory_plan())))?,
    }
    let weights: BTreeMap<String, usize> = plan
        .weight_bytes()
        .into_iter()
        .map(|(dtype, bytes)| (dtype.to_string(), bytes))
        .collect();
    dict.set_item("weight_bytes", weights)?;
    let by_kind = PyDict::new(py);
    for (device, kind, stats) in AllocatorRegistry::global().all_stats() {
        let row = PyDict::new(py);
        row.set_item("device", device.to_string())?;
        row.set_item("active_bytes", stats.active_bytes)?;
        row.set_item("peak_bytes", stats.peak_bytes)?;
        row.set_item("allocations", stats.allocations)?;
        by_kind.set_item(format!("{kind:?}"), row)?;
    }
    dict.set_item("bytes_by_kind", by_kind)?;
    Ok(dict)
}

/// One node's accumulated time.
pub struct NodeTime {
    pub node: String,
    pub op: String,
    pub time: Duration,
}

/// Latencies and per-node times of repeated runs.
pub struct Timed {
    pub latencies_ms: Vec<f64>,
    pub nodes: Vec<NodeTime>,
}

/// Runs `feeds` `warmup + runs` times on a new context of `plan` (which must time its nodes).
pub fn time_runs(
    plan: &Arc<InferencePlan>,
    feeds: &[(usize, Tensor)],
    runs: usize,
    warmup: usize,
) -> Result<Timed, RuntimeError> {
    let mut ctx = plan.create_context()?;
    for (index, tensor) in feeds {
        ctx.set_input_at(*index, tensor)?;
    }
    for _ in 0..warmup {
        ctx.execute()?;
    }
    // Node times accumulate per context: subtract the warm-up runs' share.
    let before: Vec<Duration> = ctx.node_timings().iter().map(|t| t.time).collect();
    let mut latencies_ms = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        ctx.execute()?;
        latencies_ms.push(start.elapsed().as_secs_f64() * 1e3);
    }
    let nodes = ctx
        .node_timings()
        .into_iter()
        .zip(before)
        .map(|(t, warm)| NodeTime {
            node: t.node.to_string(),
            op: t.op.to_string(),
            time: t.time.saturating_sub(warm),
        })
        .collect();
    Ok(Timed {
        latencies_ms,
        nodes,
    })
}

/// `{"runs", "mean_ms", "median_ms", "p90_ms", "min_ms", "by_op": {op: {"ms", "nodes"}},
/// "by_node": [{"node", "op", "ms"}]}`, times per timed run (warm-up runs excluded).
pub fn profile_dict<'py>(py: Python<'py>, timed: &Timed) -> PyResult<Bound<'py, PyDict>> {
    let mut sorted = timed.latencies_ms.clone();
    sorted.sort_by(f64::total_cmp);
    let pct = |p: f64| sorted[((sorted.len() - 1) as f64 * p).round() as usize];
    let dict = PyDict::new(py);
    dict.set_item("runs", sorted.len())?;
    dict.set_item("mean_ms", sorted.iter().sum::<f64>() / sorted.len() as f64)?;
    dict.set_item("median_ms", pct(0.5))?;
    dict.set_item("p90_ms", pct(0.9))?;
    dict.set_item("min_ms", sorted[0])?;
    let runs = sorted.len() as f64;
    let per_run = |d: Duration| d.as_secs_f64() * 1e3 / runs;
    dict.set_item("by_op", by_op(py, &timed.nodes, per_run)?)?;
    let by_node = PyList::empty(py);
    for t in &timed.nodes {
        let row = PyDict::new(py);
        row.set_item("node", &t.node)?;
        row.set_item("op", &t.op)?;
        row.set_item("ms", per_run(t.time))?;
        by_node.append(row)?;
    }
    dict.set_item("by_node", by_node)?;
    Ok(dict)
}

fn by_op<'py>(
    py: Python<'py>,
    nodes: &[NodeTime],
    per_run: impl Fn(Duration) -> f64,
) -> PyResult<Bound<'py, PyDict>> {
    let mut totals: BTreeMap<&str, (Duration, usize)> = BTreeMap::new();
    for t in nodes {
        let e = totals.entry(&t.op).or_default();
        e.0 += t.time;
        e.1 += 1;
    }
    let dict = PyDict::new(py);
    for (op, (time, count)) in totals {
        let row = PyDict::new(py);
        row.set_item("ms", per_run(time))?;
        row.set_item("nodes", count)?;
        dict.set_item(op, row)?;
    }
    Ok(dict)
}

/// Per-node time summed over every idle context of the pool, with the number of runs.
pub fn pooled_node_timings<'py>(
    py: Python<'py>,
    pool: &ContextPool,
) -> PyResult<Bound<'py, PyList>> {
    let rows = PyList::empty(py);
    pool.with_idle(|contexts| -> PyResult<()> {
        let Some(first) = contexts.first() else {
            return Ok(());
        };
        let mut sums: Vec<Duration> = vec![Duration::ZERO; first.node_timings().len()];
        let runs: u64 = contexts.iter().map(|c| c.stats().runs).sum();
        for ctx in contexts {
            for (sum, t) in sums.iter_mut().zip(ctx.node_timings()) {
                *sum += t.time;
            }
        }
        for (t, sum) in first.node_timings().iter().zip(sums) {
            let row = PyDict::new(py);
            row.set_item("node", t.node)?;
            row.set_item("op", t.op)?;
            row.set_item("total_us", sum.as_secs_f64() * 1e6)?;
            row.set_item("runs", runs)?;
            rows.append(row)?;
        }
        Ok(())
    })?;
    Ok(rows)
}
