//! Loading the model a command names (or the built-in default) into a plan.

use std::collections::BTreeMap;
use std::sync::Arc;

use std::time::Instant;

use strata_ops::run_control::RunControl;
use strata_ops::Dim;
use strata_runtime::{ExecutionContext, InferencePlan, OptimizationProfile, PlanConfig};

use crate::args::ModelArgs;

/// Parses `NAME=V0,V1,...` into (name, values).
pub fn parse_assignment(text: &str, what: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("{what} {text:?} is not of the form NAME=VALUE"))
}

/// `--shape` options as name → dims.
pub fn parse_shapes(shapes: &[String]) -> Result<BTreeMap<String, Vec<usize>>, String> {
    shapes
        .iter()
        .map(|s| {
            let (name, dims) = parse_assignment(s, "--shape")?;
            let dims = dims
                .split(',')
                .filter(|d| !d.trim().is_empty())
                .map(|d| {
                    d.trim()
                        .parse::<usize>()
                        .map_err(|_| format!("--shape {s:?}: {d:?} is not a dimension"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok((name, dims))
        })
        .collect()
}

/// The plan for `args`; `--shape` dims become a fixed optimization profile so that the memory
/// plan is known up front.
pub fn load(args: &ModelArgs) -> Result<(Arc<InferencePlan>, String), String> {
    load_with(args, PlanConfig::default())
}

/// Like [`load`], starting from `config`.
pub fn load_with(
    args: &ModelArgs,
    mut config: PlanConfig,
) -> Result<(Arc<InferencePlan>, String), String> {
    if let Some(threads) = args.threads {
        config = config.with_threads(threads);
    }
    if let Some(trips) = args.max_loop_iterations {
        config.max_loop_iterations = trips;
    }
    if let Some(limit) = args.memory_limit {
        config = config.with_memory_limit(limit);
    }
    let shapes = parse_shapes(&args.shapes)?;
    if !shapes.is_empty() {
        let mut profile = OptimizationProfile::new();
        for (name, dims) in &shapes {
            profile = profile
                .with_input(name, dims, dims, dims)
                .map_err(|e| e.to_string())?;
        }
        config = config.with_profile(profile);
    }
    // Loading folds constants, which may run a Loop: the timeout and loop bound hold there too.
    let control = RunControl {
        deadline: args.timeout.map(|t| (Instant::now() + t, t)),
        max_loop_iterations: config.max_loop_iterations,
        ..RunControl::default()
    };
    control.install(|| build(args, config))
}

/// A context for `plan` that obeys `--timeout` on every run.
pub fn context(plan: &Arc<InferencePlan>, args: &ModelArgs) -> Result<ExecutionContext, String> {
    let mut ctx = plan.create_context().map_err(|e| e.to_string())?;
    ctx.set_timeout(args.timeout);
    Ok(ctx)
}

fn build(args: &ModelArgs, config: PlanConfig) -> Result<(Arc<InferencePlan>, String), String> {
    match &args.model {
        Some(path) => {
            let plan = strata_onnx::load(path, config).map_err(|e| e.to_string())?;
            Ok((plan, path.display().to_string()))
        }
        None => {
            let bytes = strata_onnx::models::default_model()
                .to_bytes()
                .map_err(|e| e.to_string())?;
            let plan = strata_onnx::load_bytes(bytes, "built-in resnet-like", config)
                .map_err(|e| e.to_string())?;
            Ok((plan, "built-in ResNet-style model (seeded weights)".into()))
        }
    }
}

/// Concrete dims for an input: `--shape` if given, else the declared dims with symbolic dims
/// set to 1 (reported in `notes`).
pub fn input_dims(
    name: &str,
    declared: &[Dim],
    shapes: &BTreeMap<String, Vec<usize>>,
    notes: &mut Vec<String>,
) -> Vec<usize> {
    if let Some(dims) = shapes.get(name) {
        return dims.clone();
    }
    declared
        .iter()
        .map(|d| match d {
            Dim::Known(v) => *v,
            other => {
                notes.push(format!(
                    "input {name:?}: symbolic dim {other:?} set to 1 (use --shape to choose)"
                ));
                1
            }
        })
        .collect()
}
