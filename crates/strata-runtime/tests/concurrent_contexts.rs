//! Many contexts of one plan on many threads (the ThreadSanitizer target of
//! `scripts/sanitizers.sh tsan`): every thread gets the serial answer, the plan's memory budget
//! ends where it started, and cancelling one context's run from another thread stops that run
//! only.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use strata_ops::Attr;
use strata_runtime::{Graph, InferencePlan, PlanConfig};

/// y = softmax(relu(x @ w) + x) over rows of 16: a GEMM (pool tasks), elementwise ops.
fn graph(rows: usize) -> Graph {
    let mut g = Graph::new();
    let x = input(&mut g, "x", &fixed(&[rows, 16]));
    let w = g
        .add_initializer("w", tensor(&noise(256, 3), &[16, 16]))
        .unwrap();
    let m = op(&mut g, "MatMul", &[x, w], &["m"], &[])[0];
    let r = op(&mut g, "Relu", &[m], &["r"], &[])[0];
    let s = op(&mut g, "Add", &[r, x], &["s"], &[])[0];
    let y = op(&mut g, "Softmax", &[s], &["y"], &[("axis", Attr::Int(-1))])[0];
    g.set_outputs(&[y]);
    g
}

fn run(plan: &Arc<InferencePlan>, seed: u64, rows: usize) -> Vec<f32> {
    let mut ctx = plan.create_context().unwrap();
    ctx.set_input("x", &tensor(&noise(rows * 16, seed), &[rows, 16]))
        .unwrap();
    ctx.execute().unwrap();
    ctx.output_at(0).unwrap().to_vec::<f32>().unwrap()
}

#[test]
fn contexts_on_many_threads_match_serial_runs_and_return_their_memory() {
    let rows = 64;
    let plan = InferencePlan::build(graph(rows), PlanConfig::default().with_threads(2)).unwrap();
    let weights = plan.memory_budget().used();
    let expected: Vec<Vec<f32>> = (0..4).map(|seed| run(&plan, seed, rows)).collect();
    std::thread::scope(|s| {
        for (seed, expected) in expected.iter().enumerate() {
            let plan = plan.clone();
            s.spawn(move || {
                let mut ctx = plan.create_context().unwrap();
                let x = tensor(&noise(rows * 16, seed as u64), &[rows, 16]);
                for _ in 0..50 {
                    ctx.set_input("x", &x).unwrap();
                    ctx.execute().unwrap();
                    let y = ctx.output_at(0).unwrap().to_vec::<f32>().unwrap();
                    assert_eq!(&y, expected);
                }
            });
        }
    });
    assert_eq!(plan.memory_budget().used(), weights);
    assert!(plan.memory_budget().peak() > weights);
}

#[test]
fn a_cancelled_context_stops_and_the_others_go_on() {
    let rows = 256;
    let plan = InferencePlan::build(graph(rows), PlanConfig::default().with_threads(2)).unwrap();
    let expected = run(&plan, 9, rows);
    let mut victim = plan.create_context().unwrap();
    let x = tensor(&noise(rows * 16, 9), &[rows, 16]);
    let flag = victim.cancel_flag();
    std::thread::scope(|s| {
        s.spawn(|| {
            // Raised before the run starts: it stops at its first check.
            flag.cancel();
            victim.set_input("x", &x).unwrap();
            let err = victim.execute().unwrap_err();
            assert!(err.is_cancelled(), "{err}");
            // Lowered again after the cancelled run: the next one completes.
            victim.execute().unwrap();
        });
        s.spawn(|| {
            for _ in 0..20 {
                assert_eq!(run(&plan, 9, rows), expected);
                std::thread::sleep(Duration::from_micros(100));
            }
        });
    });
}
