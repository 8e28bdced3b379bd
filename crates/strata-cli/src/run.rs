//! `strata run`: one inference with a report of outputs, latency and memory.

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::json;

use crate::args::RunArgs;
use crate::inputs::{random_tensor, read_input, sanitize};
use crate::model::{context, input_dims, load, parse_assignment, parse_shapes};
use crate::report::{
    memory_by_kind_json, memory_by_kind_text, memory_json, memory_text, summarize,
};

pub fn run(args: &RunArgs) -> Result<(), String> {
    let load_start = Instant::now();
    let (plan, source) = load(&args.model)?;
    let load_ms = load_start.elapsed().as_secs_f64() * 1e3;
    let shapes = parse_shapes(&args.model.shapes)?;
    let mut files = BTreeMap::new();
    for text in &args.inputs {
        let (name, path) = parse_assignment(text, "--input")?;
        if let Some(first) = files.insert(name.clone(), path) {
            return Err(format!(
                "--input {name:?} is given twice (first as {first:?}); give each input once"
            ));
        }
    }
    for name in files.keys() {
        if !plan.inputs().iter().any(|i| &i.name == name) {
            let names: Vec<&str> = plan.inputs().iter().map(|i| i.name.as_str()).collect();
            return Err(format!(
                "--input {name:?}: the model has no such input (inputs: {names:?})"
            ));
        }
    }
    let mut ctx = context(&plan, &args.model)?;
    let mut notes = Vec::new();
    for (i, info) in plan.inputs().iter().enumerate() {
        let tensor = match files.get(&info.name) {
            Some(path) => read_input(path.as_ref())?,
            None => {
                let seed = args.seed.wrapping_add(i as u64);
                let dims = input_dims(&info.name, &info.dims, &shapes, &mut notes);
                notes.push(format!(
                    "input {:?}: no --input given, filled with seeded random {} data of dims \
                     {dims:?} (seed {seed})",
                    info.name, info.dtype
                ));
                random_tensor(info.dtype, &dims, seed)?
            }
        };
        ctx.set_input(&info.name, &tensor)
            .map_err(|e| e.to_string())?;
    }
    let start = Instant::now();
    ctx.execute().map_err(|e| e.to_string())?;
    let first_ms = start.elapsed().as_secs_f64() * 1e3;
    // A second, steady-state run: arena bound, caches warm.
    let start = Instant::now();
    ctx.execute().map_err(|e| e.to_string())?;
    let steady_ms = start.elapsed().as_secs_f64() * 1e3;

    let outputs = ctx.outputs().map_err(|e| e.to_string())?;
    let mut summaries = Vec::new();
    for out in &outputs {
        let tensor = out.to_tensor().map_err(|e| e.to_string())?;
        if let Some(dir) = &args.output_dir {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            tensor
                .write_npy(dir.join(format!("{}.npy", sanitize(out.name()))))
                .map_err(|e| e.to_string())?;
        }
        summaries.push(summarize(out.name(), &tensor));
    }
    let memory = ctx.memory_plan();
    if args.json {
        let report = json!({
            "model": source,
            "threads": plan.config().threads,
            "outputs": summaries.iter().map(|s| s.to_json()).collect::<Vec<_>>(),
            "latency_ms": { "load": load_ms, "first_run": first_ms, "steady_run": steady_ms },
            "memory_plan": memory_json(memory),
            "memory_by_kind": memory_by_kind_json(),
            "notes": notes,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
        );
    } else {
        println!("model: {source}");
        for note in &notes {
            println!("note: {note}");
        }
        println!("outputs:");
        for s in &summaries {
            println!("{}", s.to_text());
        }
        println!("latency: load {load_ms:.2} ms, first run {first_ms:.3} ms, steady run {steady_ms:.3} ms ({} threads)", plan.config().threads);
        println!("{}", memory_text(memory));
        println!("{}", memory_by_kind_text());
        if let Some(dir) = &args.output_dir {
            println!("outputs written to {}", dir.display());
        }
    }
    Ok(())
}
