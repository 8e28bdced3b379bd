//! `PlanConfig::memory_limit`: weights and arenas that cannot fit fail at build, run-time
//! allocations that cannot fit fail at run, before anything is allocated, with a typed error
//! naming the bytes asked, the limit and the kind of memory; what is freed is given back.

use strata_core::{CoreError, DType, MemoryKind, Tensor};
use strata_onnx::{Attrs, Dim, ModelBuilder, OnnxError};
use strata_runtime::{InferencePlan, PlanConfig, RuntimeError};

const MIB: usize = 1 << 20;

fn config(limit: usize) -> PlanConfig {
    PlanConfig::default()
        .with_threads(1)
        .with_memory_limit(limit)
}

/// `y = x + w` with a 1 MiB weight `w` and an input of `dims`.
fn with_weight(dims: &[Dim]) -> ModelBuilder {
    let w = Tensor::zeros(&[MIB / 4], DType::F32).unwrap();
    ModelBuilder::new("budget")
        .opset(18)
        .input("x", DType::F32, dims)
        .initializer("w", &w)
        .node("Add", &["x", "w"], &["y"], Attrs::new())
        .output_unranked("y", DType::F32)
}

/// `y = Relu(x)` for an input of `dims`.
fn relu(dims: &[Dim]) -> ModelBuilder {
    ModelBuilder::new("budget")
        .opset(18)
        .input("x", DType::F32, dims)
        .node("Relu", &["x"], &["y"], Attrs::new())
        .output_unranked("y", DType::F32)
}

fn load(builder: &ModelBuilder, limit: usize) -> Result<std::sync::Arc<InferencePlan>, OnnxError> {
    strata_onnx::load_bytes(builder.to_bytes().unwrap(), "budget", config(limit))
}

/// The limit error under a runtime error, if that is what it is.
fn limit_error(err: &RuntimeError) -> Option<(usize, MemoryKind, usize)> {
    match err.memory_limit_exceeded()? {
        CoreError::MemoryLimitExceeded {
            bytes, kind, limit, ..
        } => Some((*bytes, *kind, *limit)),
        _ => None,
    }
}

#[test]
fn weights_over_the_limit_fail_at_build() {
    let err = load(&with_weight(&[Dim::Known(MIB / 4)]), MIB / 2).unwrap_err();
    let OnnxError::Runtime(inner) = &err else {
        panic!("expected a runtime error, got {err}");
    };
    assert_eq!(
        limit_error(inner),
        Some((MIB, MemoryKind::Persistent, MIB / 2)),
        "{err}"
    );
    let message = err.to_string();
    assert!(message.contains("memory limit exceeded"), "{message}");
    assert!(message.contains(&(MIB / 2).to_string()), "{message}");
    // The same model fits under a larger limit, and runs.
    let plan = load(&with_weight(&[Dim::Known(MIB / 4)]), 8 * MIB).unwrap();
    let mut ctx = plan.create_context().unwrap();
    ctx.set_input("x", &Tensor::zeros(&[MIB / 4], DType::F32).unwrap())
        .unwrap();
    ctx.execute().unwrap();
}

/// The arena bytes the Relu model plans for an input of `n` floats.
fn arena_bytes(n: usize) -> usize {
    let plan = load(&relu(&[Dim::Known(n)]), usize::MAX).unwrap();
    plan.memory_plan().unwrap().arena_bytes
}

#[test]
fn an_arena_over_the_limit_fails_at_build() {
    let arena = arena_bytes(MIB / 2);
    assert!(arena >= 2 * MIB, "{arena}");
    let err = load(&relu(&[Dim::Known(MIB / 2)]), arena - 1).unwrap_err();
    let OnnxError::Runtime(inner) = &err else {
        panic!("expected a runtime error, got {err}");
    };
    assert_eq!(
        limit_error(inner),
        Some((arena, MemoryKind::Workspace, arena - 1)),
        "{err}"
    );
}

#[test]
fn every_context_arena_counts_and_is_given_back() {
    // One arena fits, a second does not.
    let arena = arena_bytes(MIB / 2);
    let plan = load(&relu(&[Dim::Known(MIB / 2)]), arena + arena / 2).unwrap();
    let first = plan.create_context().unwrap();
    assert_eq!(plan.memory_budget().used(), arena);
    let Err(err) = plan.create_context() else {
        panic!("a second arena fitted under the limit");
    };
    assert_eq!(
        limit_error(&err),
        Some((arena, MemoryKind::Workspace, arena + arena / 2)),
        "{err}"
    );
    drop(first);
    assert_eq!(plan.memory_budget().used(), 0);
    let mut again = plan.create_context().unwrap();
    again
        .set_input("x", &Tensor::zeros(&[MIB / 2], DType::F32).unwrap())
        .unwrap();
    again.execute().unwrap();
}

#[test]
fn run_time_allocations_over_the_limit_fail_at_run_and_small_runs_go_on() {
    // A symbolic dim: nothing is planned at build; the arena is sized by the first run.
    let plan = load(&relu(&[Dim::sym("N")]), 4 * MIB).unwrap();
    let mut ctx = plan.create_context().unwrap();
    ctx.set_input("x", &Tensor::zeros(&[MIB], DType::F32).unwrap())
        .unwrap();
    let err = ctx.execute().unwrap_err();
    let (bytes, kind, limit) = limit_error(&err).unwrap_or_else(|| panic!("{err}"));
    assert_eq!((kind, limit), (MemoryKind::Workspace, 4 * MIB));
    assert!(bytes >= arena_bytes(MIB), "{bytes}");
    assert!(plan.memory_budget().used() <= 4 * MIB);
    // A run that fits works on the same context.
    ctx.set_input("x", &Tensor::from_slice(&[-1.0f32, 2.0], &[2]).unwrap())
        .unwrap();
    ctx.execute().unwrap();
    assert_eq!(
        ctx.output_at(0).unwrap().to_vec::<f32>().unwrap(),
        [0.0, 2.0]
    );
}

#[test]
fn the_default_limit_is_the_machine_memory_and_huge_declared_sizes_hit_it_first() {
    assert_eq!(
        PlanConfig::default().memory_limit,
        strata_core::default_memory_limit()
    );
    // 2^40 floats (4 TiB): refused by the budget at build, before any allocator is asked.
    let err = load(
        &relu(&[Dim::Known(1 << 40)]),
        PlanConfig::default().memory_limit,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("memory limit exceeded") || err.contains("size overflow"),
        "{err}"
    );
}
