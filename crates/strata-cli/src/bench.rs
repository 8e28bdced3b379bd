//! `strata bench`: latency over repeated runs of one context.

use std::time::Instant;

use serde_json::json;

use crate::args::BenchArgs;
use crate::inputs::random_tensor;
use crate::model::{input_dims, load_with, parse_shapes};
use crate::report::memory_text;

pub fn bench(args: &BenchArgs) -> Result<(), String> {
    let config = strata_runtime::PlanConfig::default().with_profiling(args.profile);
    let (plan, source) = load_with(&args.model, config)?;
    let shapes = parse_shapes(&args.model.shapes)?;
    let mut ctx = crate::model::context(&plan, &args.model)?;
    let mut notes = Vec::new();
    for (i, info) in plan.inputs().iter().enumerate() {
        let t = random_tensor(
            info.dtype,
            &input_dims(&info.name, &info.dims, &shapes, &mut notes),
            i as u64,
        )?;
        ctx.set_input(&info.name, &t).map_err(|e| e.to_string())?;
    }
    for _ in 0..args.warmup {
        ctx.execute().map_err(|e| e.to_string())?;
    }
    // Profiles accumulate from the first run: what the warm-up left is subtracted at the end.
    let warm: Vec<f64> = node_ms(&ctx);
    let mut times: Vec<f64> = Vec::with_capacity(args.runs.max(1));
    for _ in 0..args.runs.max(1) {
        let start = Instant::now();
        ctx.execute().map_err(|e| e.to_string())?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    let profile = args
        .profile
        .then(|| op_profile(&ctx, &warm, times.len(), mean));
    let slowest = args.profile.then(|| node_profile(&ctx, &warm, times.len()));
    times.sort_by(f64::total_cmp);
    let pct = |p: f64| times[((times.len() - 1) as f64 * p).round() as usize];
    if args.json {
        let mut value = json!({ "model": source, "threads": plan.config().threads, "runs": times.len(),
            "mean_ms": mean, "median_ms": pct(0.5), "p90_ms": pct(0.9), "min_ms": times[0] });
        if let Some(rows) = &profile {
            value["profile"] = rows
                .iter()
                .map(|r| json!({ "op": r.op, "nodes": r.nodes, "mean_ms": r.ms }))
                .collect();
        }
        if let Some(nodes) = &slowest {
            value["node_profile"] = nodes
                .iter()
                .map(|n| json!({ "node": n.node, "op": n.op, "mean_ms": n.ms }))
                .collect();
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&value).map_err(|e| e.to_string())?
        );
    } else {
        println!("model: {source}");
        println!(
            "{} runs, {} threads: mean {mean:.3} ms, median {:.3} ms, p90 {:.3} ms, min {:.3} ms",
            times.len(),
            plan.config().threads,
            pct(0.5),
            pct(0.9),
            times[0]
        );
        println!("{}", memory_text(ctx.memory_plan()));
        if let Some(rows) = &profile {
            println!("time per timed run by op (adds up to the mean):");
            for r in rows {
                println!("  {:<24} {:9.3} ms  ({} nodes)", r.op, r.ms, r.nodes);
            }
        }
        if let Some(nodes) = &slowest {
            println!("slowest nodes (--json lists all):");
            for n in nodes.iter().take(SLOWEST_SHOWN) {
                println!("  {:<40} {:<16} {:9.3} ms", n.node, n.op, n.ms);
            }
        }
    }
    Ok(())
}

/// Milliseconds each node has run so far, summed over runs (empty unless profiling).
fn node_ms(ctx: &strata_runtime::ExecutionContext) -> Vec<f64> {
    ctx.node_timings()
        .iter()
        .map(|t| t.time.as_secs_f64() * 1e3)
        .collect()
}

/// How many of the slowest nodes the text report lists.
const SLOWEST_SHOWN: usize = 12;

/// One node's mean time per timed run.
struct NodeTime {
    node: String,
    op: String,
    ms: f64,
}

/// Every node's mean time per timed run (the warm-up's share taken off), slowest first.
fn node_profile(
    ctx: &strata_runtime::ExecutionContext,
    warm: &[f64],
    runs: usize,
) -> Vec<NodeTime> {
    let mut rows: Vec<NodeTime> = ctx
        .node_timings()
        .iter()
        .enumerate()
        .map(|(i, t)| NodeTime {
            node: t.node.to_string(),
            op: t.op.to_string(),
            ms: (t.time.as_secs_f64() * 1e3 - warm.get(i).copied().unwrap_or(0.0))
                / runs.max(1) as f64,
        })
        .collect();
    rows.sort_by(|a, b| b.ms.total_cmp(&a.ms));
    rows
}

/// One row of the per-operator profile.
struct OpTime {
    op: String,
    nodes: usize,
    /// Mean time per timed run.
    ms: f64,
}

/// Time per timed run by operator type, slowest first, over the `runs` timed runs only (the
/// warm-up's share, `warm`, taken off), plus a row for the time outside the nodes so that the
/// rows add up to `mean`.
fn op_profile(
    ctx: &strata_runtime::ExecutionContext,
    warm: &[f64],
    runs: usize,
    mean: f64,
) -> Vec<OpTime> {
    let mut by_op: std::collections::BTreeMap<&str, (f64, usize)> = Default::default();
    for (i, t) in ctx.node_timings().iter().enumerate() {
        let timed = t.time.as_secs_f64() * 1e3 - warm.get(i).copied().unwrap_or(0.0);
        let e = by_op.entry(t.op).or_default();
        e.0 += timed / runs.max(1) as f64;
        e.1 += 1;
    }
    let mut rows: Vec<OpTime> = by_op
        .into_iter()
        .map(|(op, (ms, nodes))| OpTime {
            op: op.to_string(),
            nodes,
            ms,
        })
        .collect();
    rows.sort_by(|a, b| b.ms.total_cmp(&a.ms));
    let nodes_ms: f64 = rows.iter().map(|r| r.ms).sum();
    rows.push(OpTime {
        op: "(between nodes)".into(),
        nodes: 0,
        ms: mean - nodes_ms,
    });
    rows
}
