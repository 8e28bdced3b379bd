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
    let mut ctx = plan.create_context().map_err(|e| e.to_string())?;
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
    let mut times: Vec<f64> = Vec::with_capacity(args.runs.max(1));
    for _ in 0..args.runs.max(1) {
        let start = Instant::now();
        ctx.execute().map_err(|e| e.to_string())?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    let pct = |p: f64| times[((times.len() - 1) as f64 * p).round() as usize];
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    if args.json {
        let value = json!({ "model": source, "threads": plan.config().threads, "runs": times.len(),
            "mean_ms": mean, "median_ms": pct(0.5), "p90_ms": pct(0.9), "min_ms": times[0] });
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
        if args.profile {
            let runs = (args.warmup + times.len()) as f64;
            let mut by_op: std::collections::BTreeMap<&str, (f64, usize)> =
                std::collections::BTreeMap::new();
            for t in ctx.node_timings() {
                let e = by_op.entry(t.op).or_default();
                e.0 += t.time.as_secs_f64() * 1e3 / runs;
                e.1 += 1;
            }
            let mut rows: Vec<_> = by_op.into_iter().collect();
            rows.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
            println!("time per run by op:");
            for (op, (ms, nodes)) in rows {
                println!("  {op:<24} {ms:9.3} ms  ({nodes} nodes)");
            }
        }
    }
    Ok(())
}
