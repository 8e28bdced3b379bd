//! `strata inspect`: what a model is made of and what it will cost.

use serde_json::json;

use crate::args::InspectArgs;
use crate::model::load;
use crate::report::{bytes, memory_json, memory_text};

/// Dims as a JSON array, as `run --json` gives them: numbers where known, the name of a symbolic
/// dim as a string, `null` where nothing is known.
fn dims_json(dims: &[strata_ops::Dim]) -> Vec<serde_json::Value> {
    dims.iter()
        .map(|d| match d {
            strata_ops::Dim::Known(n) => json!(n),
            strata_ops::Dim::Sym(name) => json!(name),
            strata_ops::Dim::Unknown => serde_json::Value::Null,
        })
        .collect()
}

pub fn inspect(args: &InspectArgs) -> Result<(), String> {
    let (plan, source) = load(&args.model)?;
    let io = |list: &[strata_runtime::IoInfo]| {
        list.iter().map(|i| json!({ "name": i.name, "dtype": i.dtype.to_string(), "dims": dims_json(&i.dims) })).collect::<Vec<_>>()
    };
    let weights = plan.weight_bytes();
    let ops = plan.op_counts();
    let report = plan.optimize_report();
    if args.json {
        let value = json!({
            "model": source,
            "inputs": io(plan.inputs()),
            "outputs": io(plan.outputs()),
            "op_counts": ops,
            "weight_bytes": weights.iter().map(|(d, b)| (d.to_string(), *b)).collect::<std::collections::BTreeMap<_, _>>(),
            "optimizations": {
                "folded": report.folded,
                "removed": report.removed,
                "batch_norms_folded": report.batch_norms,
                "fusions": report.fusions.iter().map(|f| json!({
                    "node": f.node,
                    "op_type": f.op_type,
                    "absorbed": f.absorbed,
                })).collect::<Vec<_>>(),
            },
            "memory_plan": memory_json(plan.memory_plan()),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&value).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    println!("model: {source}");
    println!("inputs:");
    for i in plan.inputs() {
        println!("  {} {} {:?}", i.name, i.dtype, i.dims);
    }
    println!("outputs:");
    for o in plan.outputs() {
        println!("  {} {} {:?}", o.name, o.dtype, o.dims);
    }
    println!(
        "ops ({} nodes after folding {} and removing {}):",
        plan.graph().nodes.len(),
        report.folded,
        report.removed
    );
    for (op, n) in &ops {
        println!("  {op:<24} {n}");
    }
    println!(
        "fusions ({} BatchNormalization folded, {} nodes fused into their producers):",
        report.batch_norms, report.activations
    );
    for f in &report.fusions {
        println!("  {} {} <- {}", f.op_type, f.node, f.absorbed.join(", "));
    }
    println!("weights:");
    for (dtype, b) in &weights {
        println!("  {dtype:<6} {}", bytes(*b));
    }
    println!("{}", memory_text(plan.memory_plan()));
    Ok(())
}
