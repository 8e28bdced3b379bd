//! If / Loop / Scan built by hand: subgraphs planned as their own plans, run by the runtime,
//! with outer values passed in as captures.

mod common;

use std::sync::Arc;

use common::{fixed, input, op, tensor};
use strata_core::{DType, Tensor};
use strata_ops::{Attr, Attributes, Dim};
use strata_runtime::control::{If, Loop, Scan, Subgraph};
use strata_runtime::{Graph, InferencePlan, PlanConfig};

/// body(i, cond, acc, x) = (cond, acc + x, acc * 2): carried acc, one scan output.
fn accumulate_body() -> Subgraph {
    let mut g = Graph::new();
    let _i = g.add_input("i", DType::I64, vec![]).unwrap();
    let cond = g.add_input("cond", DType::Bool, vec![]).unwrap();
    let acc = input(&mut g, "acc", &[Dim::Sym("n".into())]);
    let x = input(&mut g, "x", &[Dim::Sym("n".into())]);
    let next = op(&mut g, "Add", &[acc, x], &["next"], &[]);
    let doubled = op(&mut g, "Add", &[acc, acc], &["doubled"], &[]);
    let cond_out = op(&mut g, "Identity", &[cond], &["cond_out"], &[]);
    g.set_outputs(&[cond_out[0], next[0], doubled[0]]);
    Subgraph::new("body", g)
}

#[test]
fn loop_carries_values_and_stacks_scan_outputs() {
    let mut g = Graph::new();
    let m = g.add_input("M", DType::I64, vec![]).unwrap();
    let acc = input(&mut g, "acc0", &fixed(&[2]));
    let x = input(&mut g, "x", &fixed(&[2]));
    let op_ = Loop::new(accumulate_body(), 1).unwrap();
    let outs = g
        .add_node(
            "loop",
            Arc::new(op_),
            &[Some(m), None, Some(acc), Some(x)],
            &["final", "history"],
        )
        .unwrap();
    g.set_outputs(&outs);
    let plan = InferencePlan::build(g, PlanConfig::default().with_threads(1)).unwrap();
    let mut ctx = plan.create_context().unwrap();
    for trips in [3i64, 0, 2] {
        ctx.set_input("M", &Tensor::scalar(trips).unwrap()).unwrap();
        ctx.set_input("acc0", &tensor(&[1., 2.], &[2])).unwrap();
        ctx.set_input("x", &tensor(&[10., 20.], &[2])).unwrap();
        ctx.execute().unwrap();
        let final_ = ctx.output("final").unwrap().to_vec::<f32>().unwrap();
        let t = trips as f32;
        assert_eq!(final_, vec![1. + 10. * t, 2. + 20. * t], "trips {trips}");
        let history = ctx.output("history").unwrap();
        assert_eq!(history.dims(), &[trips as usize, 2]);
        let expected: Vec<f32> = (0..trips)
            .flat_map(|k| [2. * (1. + 10. * k as f32), 2. * (2. + 20. * k as f32)])
            .collect();
        assert_eq!(history.to_vec::<f32>().unwrap(), expected);
    }
}

#[test]
fn if_runs_the_branch_the_condition_picks_with_captured_values() {
    let mut g = Graph::new();
    let cond = g.add_input("cond", DType::Bool, vec![]).unwrap();
    let x = input(&mut g, "x", &fixed(&[3]));
    // then: x + x; else: x (both read `x` from the outer graph as a capture).
    let mut then_g = Graph::new();
    let tx = input(&mut then_g, "x", &fixed(&[3]));
    let sum = op(&mut then_g, "Add", &[tx, tx], &["sum"], &[]);
    then_g.set_outputs(&sum);
    let mut else_g = Graph::new();
    let ex = input(&mut else_g, "x", &fixed(&[3]));
    let neg = op(&mut else_g, "Neg", &[ex], &["neg"], &[]);
    else_g.set_outputs(&neg);
    let if_op = If::new(
        Subgraph::new("then_branch", then_g),
        Subgraph::new("else_branch", else_g),
    )
    .unwrap();
    let outs = g
        .add_node(
            "if",
            Arc::new(if_op),
            &[Some(cond), Some(x), Some(x)],
            &["y"],
        )
        .unwrap();
    g.set_outputs(&outs);
    let plan = InferencePlan::build(g, PlanConfig::default().with_threads(1)).unwrap();
    let mut ctx = plan.create_context().unwrap();
    for (c, expected) in [(true, [2f32, 4., 6.]), (false, [-1., -2., -3.])] {
        ctx.set_input("cond", &Tensor::from_bools(&[c], &[]).unwrap())
            .unwrap();
        ctx.set_input("x", &tensor(&[1., 2., 3.], &[3])).unwrap();
        ctx.execute().unwrap();
        assert_eq!(ctx.output("y").unwrap().to_vec::<f32>().unwrap(), expected);
    }
    // A non-scalar condition is an error, not a guess.
    ctx.set_input("cond", &Tensor::from_bools(&[true, false], &[2]).unwrap())
        .unwrap_err();
}

#[test]
fn scan_walks_inputs_forward_and_backward() {
    // body(state, x) = (state + x, state + x): running sums.
    let mut body = Graph::new();
    let s = input(&mut body, "s", &fixed(&[2]));
    let x = input(&mut body, "x", &fixed(&[2]));
    let next = op(&mut body, "Add", &[s, x], &["next"], &[]);
    let out = op(&mut body, "Identity", &[next[0]], &["out"], &[]);
    body.set_outputs(&[next[0], out[0]]);
    for (reverse, expected) in [
        (0, vec![1f32, 2., 4., 6., 9., 12.]),
        (1, vec![9f32, 12., 8., 10., 5., 6.]),
    ] {
        let attrs = Attributes::new("Scan")
            .with("num_scan_inputs", Attr::Int(1))
            .with("scan_input_directions", Attr::Ints(vec![reverse]))
            .with("scan_output_directions", Attr::Ints(vec![reverse]));
        let scan = Scan::new(Subgraph::new("body", body.clone()), 2, 11, &attrs).unwrap();
        let mut g = Graph::new();
        let init = input(&mut g, "init", &fixed(&[2]));
        let xs = input(&mut g, "xs", &fixed(&[3, 2]));
        let outs = g
            .add_node(
                "scan",
                Arc::new(scan),
                &[Some(init), Some(xs)],
                &["last", "sums"],
            )
            .unwrap();
        g.set_outputs(&outs);
        let plan = InferencePlan::build(g, PlanConfig::default().with_threads(1)).unwrap();
        let mut ctx = plan.create_context().unwrap();
        ctx.set_input("init", &tensor(&[0., 0.], &[2])).unwrap();
        ctx.set_input("xs", &tensor(&[1., 2., 3., 4., 5., 6.], &[3, 2]))
            .unwrap();
        ctx.execute().unwrap();
        assert_eq!(
            ctx.output("sums").unwrap().to_vec::<f32>().unwrap(),
            expected
        );
        assert_eq!(
            ctx.output("last").unwrap().to_vec::<f32>().unwrap(),
            vec![9., 12.]
        );
    }
}

#[test]
fn malformed_bodies_are_rejected_when_built() {
    // A Loop body must take at least (i, cond, carried...) and return (cond, carried...).
    assert!(Loop::new(accumulate_body(), 5).is_err());
    let attrs = Attributes::new("Scan").with("num_scan_inputs", Attr::Int(3));
    assert!(Scan::new(accumulate_body(), 2, 11, &attrs).is_err());
}
